// spread: prefers the node with the most free capacity after placement (Kubernetes'
// LeastAllocated over CPU and GPU), for inference replicas that should not share a failure
// domain or a hot GPU.
#pragma once

#include "sched/registry.h"

namespace aicloud::sched {
void RegisterSpread(Registry& r);
}  // namespace aicloud::sched
