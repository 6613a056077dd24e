// nvlink_topology: a multi-GPU request with topology nvlink gets all its GPUs inside one NVLink
// domain of the node (rack- and cluster-level topology for gangs is the gang cycle's job).
#pragma once

#include "sched/registry.h"

namespace aicloud::sched {
void RegisterNvlinkTopology(Registry& r);
}  // namespace aicloud::sched
