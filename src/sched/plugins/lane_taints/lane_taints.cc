#include "sched/plugins/lane_taints/lane_taints.h"

namespace aicloud::sched {

bool Tolerates(const PodRequest& pod, const cluster::Taint& taint) {
  for (const Toleration& t : pod.tolerations) {
    if (t.key != taint.key) continue;
    if (!t.effect.empty() && t.effect != taint.effect) continue;
    if (t.op_exists || t.value == taint.value) return true;
  }
  return false;
}

namespace {

class LaneTaints final : public FilterPlugin {
 public:
  std::string_view Name() const override { return "lane_taints"; }
  PluginStatus Filter(CycleState&, const PodRequest& pod, const cluster::Node& node) const override {
    if (!pod.pool.empty() && pod.pool != node.pool) {
      return PluginStatus::Unresolvable("node is in another lane");
    }
    for (const cluster::Taint& taint : node.taints) {
      // PreferNoSchedule is a preference, not a rule.
      if (taint.effect == "PreferNoSchedule") continue;
      if (!Tolerates(pod, taint)) return PluginStatus::Unresolvable("untolerated taint");
    }
    return PluginStatus::Ok();
  }
};

}  // namespace

void RegisterLaneTaints(Registry& r) {
  (void)r.Register("lane_taints", [](const PluginArgs&) -> StatusOr<std::unique_ptr<Plugin>> {
    return std::unique_ptr<Plugin>(new LaneTaints());
  });
}

}  // namespace aicloud::sched
