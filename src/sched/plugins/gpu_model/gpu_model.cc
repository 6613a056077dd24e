#include "sched/plugins/gpu_model/gpu_model.h"

#include <algorithm>

namespace aicloud::sched {
namespace {

class GpuModel final : public FilterPlugin {
 public:
  std::string_view Name() const override { return "gpu_model"; }
  PluginStatus Filter(CycleState&, const PodRequest& pod, const cluster::Node& node) const override {
    if (!pod.wants_gpu()) return PluginStatus::Ok();
    if (node.gpus.empty()) return PluginStatus::Unresolvable("node has no GPU");
    if (!pod.gpu_models.empty() &&
        std::find(pod.gpu_models.begin(), pod.gpu_models.end(), node.model) == pod.gpu_models.end()) {
      return PluginStatus::Unresolvable("GPU model not allowed");
    }
    if (pod.gpu_count > node.gpu_count()) {
      return PluginStatus::Unresolvable("node has fewer GPUs than requested");
    }
    return PluginStatus::Ok();
  }
};

}  // namespace

void RegisterGpuModel(Registry& r) {
  (void)r.Register("gpu_model", [](const PluginArgs&) -> StatusOr<std::unique_ptr<Plugin>> {
    return std::unique_ptr<Plugin>(new GpuModel());
  });
}

}  // namespace aicloud::sched
