// preemption: when no node fits, picks a node and the fewest, least important victims whose
// eviction makes the pod fit (kube-scheduler's DefaultPreemption, with Kueue's queue rules).
//
// Who may be a victim of pod P (only preemptible pods, and never half a gang):
//   - a pod of P's queue with lower priority (priority preemption inside a queue);
//   - a pod of another queue in P's cohort while that queue borrows the node's flavor, provided
//     P's queue stays within its nominal quota after admitting P (reclaim; any priority);
//   - a pod without a queue, with lower priority.
// For each node rejected as kUnschedulable it suspends every candidate, checks the pod fits with
// the profile's filters, then reprieves candidates from the highest priority down while the pod
// still fits. Nodes are ranked by fewest victims, then lowest highest-victim priority, then lowest
// priority sum. The cluster and the quotas are left exactly as found; the framework evicts the
// returned victims (a gang member's whole gang) and retries on the nominated node.
//
//   Profile p{"tenants", DefaultFilters()};
//   p.plugins.push_back({"quota"});
//   p.plugins.push_back({"preemption"});
#pragma once

#include "sched/registry.h"

namespace aicloud::sched {
void RegisterPreemption(Registry& r);
}  // namespace aicloud::sched
