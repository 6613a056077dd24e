#include "sched/plugins/gpu_share/gpu_share.h"

#include <bit>

#include "sched/placement.h"

namespace aicloud::sched {
namespace {

class GpuShare final : public FilterPlugin {
 public:
  explicit GpuShare(Handle* h) : handle_(h) {}
  std::string_view Name() const override { return "gpu_share"; }
  PluginStatus Filter(CycleState&, const PodRequest& pod, const cluster::Node& node) const override {
    if (pod.gpu_kind != GpuKind::kWhole && pod.gpu_kind != GpuKind::kFraction) {
      return PluginStatus::Ok();
    }
    if (node.model < 0) return PluginStatus::Unresolvable("node has no GPU");
    const ModelFacts& facts = handle_->model_facts()[node.model];
    if (std::popcount(UsableGpus(pod, node, facts)) >= pod.gpu_count) return PluginStatus::Ok();
    if (pod.gpu_kind == GpuKind::kWhole) return PluginStatus::Unschedulable("insufficient free GPUs");
    if (pod.gpu_mem_mib > 0) {
      for (const cluster::Gpu& g : node.gpus) {
        if (!g.mig_active() && g.free_milli >= pod.gpu_milli) {
          return PluginStatus::Unschedulable("insufficient GPU memory");
        }
      }
    }
    return PluginStatus::Unschedulable("insufficient GPU milli");
  }

 private:
  Handle* handle_;
};

}  // namespace

void RegisterGpuShare(Registry& r) {
  (void)r.Register("gpu_share", [](const PluginArgs& a) -> StatusOr<std::unique_ptr<Plugin>> {
    return std::unique_ptr<Plugin>(new GpuShare(a.handle));
  });
}

}  // namespace aicloud::sched
