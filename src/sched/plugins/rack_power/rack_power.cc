#include "sched/plugins/rack_power/rack_power.h"

#include "sched/placement.h"

namespace aicloud::sched {
namespace {

class RackPower final : public FilterPlugin {
 public:
  explicit RackPower(Handle* h) : handle_(h) {
    for (const cluster::Rack& r : h->cluster().racks()) budgets_ = budgets_ || r.power_budget_kw > 0;
  }
  std::string_view Name() const override { return "rack_power"; }
  // A rack budget is shared by its nodes, so answers are node-local only when no rack has one
  // (decided when the scheduler is built: set budgets before creating it).
  bool NodeLocal() const override { return !budgets_; }
  PluginStatus Filter(CycleState&, const PodRequest& pod, const cluster::Node& node) const override {
    if (node.rack < 0 || !pod.wants_gpu()) return PluginStatus::Ok();
    const cluster::Rack& rack = handle_->cluster().racks()[node.rack];
    if (rack.power_budget_kw <= 0) return PluginStatus::Ok();
    if (node.model < 0) return PluginStatus::Unresolvable("node has no GPU");
    const double kw = PlacementPowerKw(pod, handle_->model_facts()[node.model]);
    if (rack.power_used_kw + kw > rack.power_budget_kw + 1e-9) {
      return PluginStatus::Unschedulable("rack power budget exceeded");
    }
    return PluginStatus::Ok();
  }

 private:
  Handle* handle_;
  bool budgets_ = false;
};

}  // namespace

void RegisterRackPower(Registry& r) {
  (void)r.Register("rack_power", [](const PluginArgs& a) -> StatusOr<std::unique_ptr<Plugin>> {
    return std::unique_ptr<Plugin>(new RackPower(a.handle));
  });
}

}  // namespace aicloud::sched
