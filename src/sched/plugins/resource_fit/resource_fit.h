// resource_fit: the node has the CPU and memory the request asks for (Kubernetes' NodeResourcesFit
// for the non-GPU resources; GPUs are checked by gpu_share and mig_placement).
#pragma once

#include "sched/registry.h"

namespace aicloud::sched {
void RegisterResourceFit(Registry& r);
}  // namespace aicloud::sched
