// dotprod: Tetris-style alignment (Grandl et al., SIGCOMM 2014) as the FGD paper's DotProduct
// baseline: the request vector [cpu, gpu] and the node's free vector, each divided by the
// largest node spec, score = (1 - dot / 2) × 100 (a smaller dot product is a tighter fit).
// Params: max_cpu_milli (default 128000), max_gpu_milli (default 8000).
#pragma once

#include "sched/registry.h"

namespace aicloud::sched {
void RegisterDotProd(Registry& r);
}  // namespace aicloud::sched
