// gpu_clustering: keeps like with like (the FGD paper's GpuClustering baseline). Requests are
// tagged by GPU class ("share" for fractions, "<n>-gpu" for whole GPUs); a node that hosts only
// the same class scores base+75, a mixed node with it base+50, a node without GPU work base+25,
// a node with only other classes base, where base = 25 × used GPU milli / capacity. Param
// max_gpu_milli fixes the capacity for every node (the paper's baseline uses 8000); default: the
// node's own GPUs.
#pragma once

#include "sched/registry.h"

namespace aicloud::sched {
void RegisterGpuClustering(Registry& r);
}  // namespace aicloud::sched
