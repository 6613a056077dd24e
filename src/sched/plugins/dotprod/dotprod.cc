#include "sched/plugins/dotprod/dotprod.h"

namespace aicloud::sched {
namespace {

class DotProd final : public ScorePlugin {
 public:
  DotProd(double max_cpu, double max_gpu) : max_cpu_(max_cpu), max_gpu_(max_gpu) {}
  std::string_view Name() const override { return "dotprod"; }
  int64_t Score(CycleState&, const PodRequest& pod, const cluster::Node& node, GpuPick*) override {
    const double node_cpu = static_cast<double>(node.cpu_free_milli) / max_cpu_;
    const double node_gpu = static_cast<double>(node.gpu_free_milli_total()) / max_gpu_;
    const double pod_cpu = static_cast<double>(pod.cpu_milli) / max_cpu_;
    const double pod_gpu = static_cast<double>(pod.wants_gpu() ? pod.total_gpu_milli() : 0) / max_gpu_;
    const double dot = node_cpu * pod_cpu + node_gpu * pod_gpu;
    return static_cast<int64_t>((1.0 - dot / 2.0) * kMaxNodeScore);
  }

 private:
  double max_cpu_, max_gpu_;
};

}  // namespace

void RegisterDotProd(Registry& r) {
  (void)r.Register("dotprod", [](const PluginArgs& a) -> StatusOr<std::unique_ptr<Plugin>> {
    double cpu = 128000, gpu = 8000;
    if (auto it = a.params.find("max_cpu_milli"); it != a.params.end()) cpu = it->second;
    if (auto it = a.params.find("max_gpu_milli"); it != a.params.end()) gpu = it->second;
    if (cpu <= 0 || gpu <= 0) return InvalidArgumentError("dotprod: max_* must be positive");
    return std::unique_ptr<Plugin>(new DotProd(cpu, gpu));
  });
}

}  // namespace aicloud::sched
