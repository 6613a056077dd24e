#include "sched/plugins/node_unschedulable/node_unschedulable.h"

namespace aicloud::sched {
namespace {

class NodeUnschedulable final : public FilterPlugin {
 public:
  std::string_view Name() const override { return "node_unschedulable"; }
  PluginStatus Filter(CycleState&, const PodRequest&, const cluster::Node& node) const override {
    if (node.unschedulable) return PluginStatus::Unresolvable("node is cordoned");
    return PluginStatus::Ok();
  }
};

}  // namespace

void RegisterNodeUnschedulable(Registry& r) {
  (void)r.Register("node_unschedulable", [](const PluginArgs&) -> StatusOr<std::unique_ptr<Plugin>> {
    return std::unique_ptr<Plugin>(new NodeUnschedulable());
  });
}

}  // namespace aicloud::sched
