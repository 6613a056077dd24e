#include "sched/plugins/bestfit/bestfit.h"

#include <algorithm>

namespace aicloud::sched {

void MinMaxNormalize(std::span<int64_t> scores) {
  if (scores.empty()) return;
  auto [lo, hi] = std::minmax_element(scores.begin(), scores.end());
  const int64_t low = *lo, high = *hi;
  for (int64_t& s : scores) s = high == low ? 0 : (s - low) * kMaxNodeScore / (high - low);
}

namespace {

class BestFit final : public ScorePlugin {
 public:
  BestFit(double max_cpu, double max_gpu) : max_cpu_(max_cpu), max_gpu_(max_gpu) {}
  std::string_view Name() const override { return "bestfit"; }
  int64_t Score(CycleState&, const PodRequest& pod, const cluster::Node& node, GpuPick*) override {
    const double cpu = static_cast<double>(node.cpu_free_milli - pod.cpu_milli) / max_cpu_;
    const double gpu = static_cast<double>(node.gpu_free_milli_total() -
                                           (pod.wants_gpu() ? pod.total_gpu_milli() : 0)) / max_gpu_;
    return static_cast<int64_t>((1.0 - 0.5 * cpu - 0.5 * gpu) * kMaxNodeScore);
  }
  bool Normalizes() const override { return true; }
  void Normalize(std::span<int64_t> scores) const override { MinMaxNormalize(scores); }

 private:
  double max_cpu_, max_gpu_;
};

}  // namespace

void RegisterBestFit(Registry& r) {
  (void)r.Register("bestfit", [](const PluginArgs& a) -> StatusOr<std::unique_ptr<Plugin>> {
    double cpu = 128000, gpu = 8000;
    if (auto it = a.params.find("max_cpu_milli"); it != a.params.end()) cpu = it->second;
    if (auto it = a.params.find("max_gpu_milli"); it != a.params.end()) gpu = it->second;
    if (cpu <= 0 || gpu <= 0) return InvalidArgumentError("bestfit: max_* must be positive");
    return std::unique_ptr<Plugin>(new BestFit(cpu, gpu));
  });
}

}  // namespace aicloud::sched
