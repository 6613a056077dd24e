// mig_placement: a MIG request lands only where its profile fits a layout the GPU accepts
// (valid start slots, free memory slices, ≤ 7 compute slices). An empty GPU is re-laid out for
// the pending profile; a GPU shared by time-sliced work is not partitioned.
#pragma once

#include "sched/registry.h"

namespace aicloud::sched {
void RegisterMigPlacement(Registry& r);
}  // namespace aicloud::sched
