// gpu_packing: fill GPUs that are already in use before opening idle ones, in tiers (the FGD
// paper's GpuPacking baseline): (1) partly used GPUs that fit, less leftover first, score
// 50..100; (2) used nodes, taking the fewest fully free GPUs, 33..50; (3) idle nodes, 0..33.
// CPU-only work scores 0 everywhere.
#pragma once

#include "sched/registry.h"

namespace aicloud::sched {
void RegisterGpuPacking(Registry& r);
}  // namespace aicloud::sched
