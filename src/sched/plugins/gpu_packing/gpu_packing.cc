#include "sched/plugins/gpu_packing/gpu_packing.h"

#include <algorithm>
#include <array>
#include <numeric>

namespace aicloud::sched {
namespace {

class GpuPacking final : public ScorePlugin {
 public:
  std::string_view Name() const override { return "packing"; }
  int64_t Score(CycleState&, const PodRequest& pod, const cluster::Node& node, GpuPick*) override {
    if (!pod.wants_gpu() || node.gpus.empty()) return 0;
    const int n = node.gpu_count();
    int64_t fully_free = 0;
    for (const cluster::Gpu& g : node.gpus) fully_free += g.whole_free() ? 1 : 0;
    if (fully_free == n) return std::max<int64_t>(33 - fully_free, 0);
    std::array<int, 64> order;
    std::iota(order.begin(), order.begin() + n, 0);
    std::stable_sort(order.begin(), order.begin() + n, [&](int a, int b) {
      return node.gpus[a].free_milli < node.gpus[b].free_milli;
    });
    int taken = 0;
    int64_t whole = 0;
    int64_t left_pct = 0;
    for (int k = 0; k < n && taken < pod.gpu_count; ++k) {
      const cluster::Gpu& g = node.gpus[order[k]];
      if (g.free_milli < pod.gpu_milli) continue;
      ++taken;
      if (g.whole_free()) ++whole;
      left_pct += g.free_milli * 100 / cluster::kMilliPerGpu;
    }
    if (whole > 0) return std::max<int64_t>(50 - whole, 33);
    return std::max<int64_t>(100 - left_pct / 10, 50);
  }
};

}  // namespace

void RegisterGpuPacking(Registry& r) {
  (void)r.Register("packing", [](const PluginArgs&) -> StatusOr<std::unique_ptr<Plugin>> {
    return std::unique_ptr<Plugin>(new GpuPacking());
  });
}

}  // namespace aicloud::sched
