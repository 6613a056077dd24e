// gpu_share: whole GPUs and time-sliced fractions. A whole-GPU request needs `count` GPUs that
// are entirely free; a fraction needs one GPU with at least its milli and memory cap left.
// GPUs partitioned into MIG instances serve neither.
#pragma once

#include "sched/registry.h"

namespace aicloud::sched {
void RegisterGpuShare(Registry& r);
}  // namespace aicloud::sched
