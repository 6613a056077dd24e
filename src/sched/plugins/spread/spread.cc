#include "sched/plugins/spread/spread.h"

namespace aicloud::sched {
namespace {

class Spread final : public ScorePlugin {
 public:
  std::string_view Name() const override { return "spread"; }
  int64_t Score(CycleState&, const PodRequest& pod, const cluster::Node& node, GpuPick*) override {
    double sum = 0;
    int dims = 0;
    if (node.cpu_milli > 0) {
      sum += static_cast<double>(node.cpu_free_milli - pod.cpu_milli) / static_cast<double>(node.cpu_milli);
      ++dims;
    }
    if (!node.gpus.empty()) {
      const int64_t cap = static_cast<int64_t>(node.gpu_count()) * cluster::kMilliPerGpu;
      const int64_t req = pod.wants_gpu() ? pod.total_gpu_milli() : 0;
      sum += static_cast<double>(node.gpu_free_milli_total() - req) / static_cast<double>(cap);
      ++dims;
    }
    return dims == 0 ? 0 : static_cast<int64_t>(sum / dims * kMaxNodeScore);
  }
};

}  // namespace

void RegisterSpread(Registry& r) {
  (void)r.Register("spread", [](const PluginArgs&) -> StatusOr<std::unique_ptr<Plugin>> {
    return std::unique_ptr<Plugin>(new Spread());
  });
}

}  // namespace aicloud::sched
