// quota: admission against tenant queues (QuotaManager, Kueue's semantics). PreFilter rejects a
// request its queue cannot take on any allowed GPU model; Filter rejects nodes whose GPU model
// has no room left in the queue; Reserve charges the queue and Unreserve refunds it. Pods with an
// empty queue are not accounted; a pod naming an unknown queue is rejected.
//
// Needs PluginArgs::quotas (SchedulerOptions::quotas); without it the plugin admits everything.
//
//   Profile p{"tenants", DefaultFilters()};
//   p.plugins.push_back({"quota"});
//   options.quotas = &quota_manager;
#pragma once

#include "sched/registry.h"

namespace aicloud::sched {
void RegisterQuota(Registry& r);
}  // namespace aicloud::sched
