// node_unschedulable: a cordoned node takes no new work (Kubernetes' NodeUnschedulable).
#pragma once

#include "sched/registry.h"

namespace aicloud::sched {
void RegisterNodeUnschedulable(Registry& r);
}  // namespace aicloud::sched
