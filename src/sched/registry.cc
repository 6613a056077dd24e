#include "sched/registry.h"

#include "sched/plugins/bestfit/bestfit.h"
#include "sched/plugins/dotprod/dotprod.h"
#include "sched/plugins/drf_queue_sort/drf_queue_sort.h"
#include "sched/plugins/fgd/fgd.h"
#include "sched/plugins/gpu_clustering/gpu_clustering.h"
#include "sched/plugins/gpu_model/gpu_model.h"
#include "sched/plugins/gpu_packing/gpu_packing.h"
#include "sched/plugins/gpu_share/gpu_share.h"
#include "sched/plugins/lane_taints/lane_taints.h"
#include "sched/plugins/mig_placement/mig_placement.h"
#include "sched/plugins/node_unschedulable/node_unschedulable.h"
#include "sched/plugins/nvlink_topology/nvlink_topology.h"
#include "sched/plugins/preemption/preemption.h"
#include "sched/plugins/quota/quota.h"
#include "sched/plugins/rack_power/rack_power.h"
#include "sched/plugins/random/random.h"
#include "sched/plugins/resource_fit/resource_fit.h"
#include "sched/plugins/spread/spread.h"

namespace aicloud::sched {

const Registry& Registry::BuiltIn() {
  static const Registry* r = [] {
    auto* reg = new Registry();
    // Filters.
    RegisterNodeUnschedulable(*reg);
    RegisterLaneTaints(*reg);
    RegisterResourceFit(*reg);
    RegisterGpuModel(*reg);
    RegisterGpuShare(*reg);
    RegisterMigPlacement(*reg);
    RegisterNvlinkTopology(*reg);
    RegisterRackPower(*reg);
    RegisterQuota(*reg);
    // Scores.
    RegisterFgd(*reg);
    RegisterBestFit(*reg);
    RegisterDotProd(*reg);
    RegisterGpuPacking(*reg);
    RegisterGpuClustering(*reg);
    RegisterRandom(*reg);
    RegisterSpread(*reg);
    // Queue sort and post-filter.
    RegisterDrfQueueSort(*reg);
    RegisterPreemption(*reg);
    return reg;
  }();
  return *r;
}

Status Registry::Register(const std::string& name, PluginFactory factory) {
  if (!factories_.emplace(name, std::move(factory)).second) {
    return AlreadyExistsError("plugin " + name + " is already registered");
  }
  return OkStatus();
}

StatusOr<std::unique_ptr<Plugin>> Registry::Create(const std::string& name,
                                                   const PluginArgs& args) const {
  auto it = factories_.find(name);
  if (it == factories_.end()) {
    std::string known;
    for (const auto& [n, f] : factories_) known += (known.empty() ? "" : ", ") + n;
    return NotFoundError("unknown plugin '" + name + "' (known: " + known + ")");
  }
  return it->second(args);
}

std::vector<std::string> Registry::Names() const {
  std::vector<std::string> out;
  for (const auto& [n, f] : factories_) out.push_back(n);
  return out;
}

}  // namespace aicloud::sched
