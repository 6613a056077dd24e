#include "sched/plugins/nvlink_topology/nvlink_topology.h"

#include "sched/placement.h"

namespace aicloud::sched {
namespace {

class NvlinkTopology final : public FilterPlugin {
 public:
  explicit NvlinkTopology(Handle* h) : handle_(h) {}
  std::string_view Name() const override { return "nvlink_topology"; }
  PluginStatus Filter(CycleState&, const PodRequest& pod, const cluster::Node& node) const override {
    if (pod.topology != Topology::kNvlink || pod.gpu_count <= 1 || pod.gpu_kind != GpuKind::kWhole) {
      return PluginStatus::Ok();
    }
    if (node.model < 0) return PluginStatus::Unresolvable("node has no GPU");
    if (!GpusFit(pod, node, handle_->model_facts()[node.model])) {
      return PluginStatus::Unschedulable("free GPUs not in one NVLink domain");
    }
    return PluginStatus::Ok();
  }

 private:
  Handle* handle_;
};

}  // namespace

void RegisterNvlinkTopology(Registry& r) {
  (void)r.Register("nvlink_topology", [](const PluginArgs& a) -> StatusOr<std::unique_ptr<Plugin>> {
    return std::unique_ptr<Plugin>(new NvlinkTopology(a.handle));
  });
}

}  // namespace aicloud::sched
