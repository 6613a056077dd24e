// lane_taints: keeps work in its lane. A node's NoSchedule taints must be tolerated, and a
// request that names a pool only lands on nodes of that pool (Kubernetes' TaintToleration plus
// a node selector on the pool label).
#pragma once

#include "sched/registry.h"

namespace aicloud::sched {
bool Tolerates(const PodRequest& pod, const cluster::Taint& taint);
void RegisterLaneTaints(Registry& r);
}  // namespace aicloud::sched
