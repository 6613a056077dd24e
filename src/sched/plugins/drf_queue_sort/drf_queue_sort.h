// drf_queue_sort: pending order by priority (higher first), then by the dominant-resource share
// of the pod's queue (lower first, so the tenant furthest below its fair share goes next), then
// by arrival. Reads QueuedPod::queue_share, which whoever owns the pending queue fills from
// QuotaManager::DominantShare(pod.queue).
#pragma once

#include "sched/registry.h"

namespace aicloud::sched {
void RegisterDrfQueueSort(Registry& r);
}  // namespace aicloud::sched
