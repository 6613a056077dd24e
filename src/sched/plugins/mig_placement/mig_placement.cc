#include "sched/plugins/mig_placement/mig_placement.h"

#include "sched/placement.h"

namespace aicloud::sched {
namespace {

class MigPlacement final : public FilterPlugin {
 public:
  explicit MigPlacement(Handle* h) : handle_(h) {}
  std::string_view Name() const override { return "mig_placement"; }
  PluginStatus Filter(CycleState&, const PodRequest& pod, const cluster::Node& node) const override {
    if (pod.gpu_kind != GpuKind::kMig) return PluginStatus::Ok();
    if (node.model < 0) return PluginStatus::Unresolvable("node has no GPU");
    const ModelFacts& facts = handle_->model_facts()[node.model];
    if (facts.mig == nullptr) return PluginStatus::Unresolvable("GPU model has no MIG");
    if (cluster::FindMigProfile(*facts.mig, pod.mig_profile) < 0) {
      return PluginStatus::Unresolvable("MIG profile not offered by this GPU model");
    }
    if (UsableGpus(pod, node, facts) == 0) return PluginStatus::Unschedulable("no free MIG slot");
    return PluginStatus::Ok();
  }

 private:
  Handle* handle_;
};

}  // namespace

void RegisterMigPlacement(Registry& r) {
  (void)r.Register("mig_placement", [](const PluginArgs& a) -> StatusOr<std::unique_ptr<Plugin>> {
    return std::unique_ptr<Plugin>(new MigPlacement(a.handle));
  });
}

}  // namespace aicloud::sched
