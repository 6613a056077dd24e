#include "sched/plugins/resource_fit/resource_fit.h"

namespace aicloud::sched {
namespace {

class ResourceFit final : public FilterPlugin {
 public:
  std::string_view Name() const override { return "resource_fit"; }
  PluginStatus Filter(CycleState&, const PodRequest& pod, const cluster::Node& node) const override {
    if (pod.cpu_milli > node.cpu_milli) return PluginStatus::Unresolvable("node too small for CPU");
    if (pod.mem_mib > node.mem_mib) return PluginStatus::Unresolvable("node too small for memory");
    if (pod.cpu_milli > node.cpu_free_milli) return PluginStatus::Unschedulable("insufficient CPU");
    if (pod.mem_mib > node.mem_free_mib) return PluginStatus::Unschedulable("insufficient memory");
    return PluginStatus::Ok();
  }
};

}  // namespace

void RegisterResourceFit(Registry& r) {
  (void)r.Register("resource_fit", [](const PluginArgs&) -> StatusOr<std::unique_ptr<Plugin>> {
    return std::unique_ptr<Plugin>(new ResourceFit());
  });
}

}  // namespace aicloud::sched
