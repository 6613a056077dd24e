// bestfit: prefers the node left tightest after placement. Raw score
// (1 - Σ_d w_d (free_d - req_d) / max_d) × 100 over d ∈ {CPU, GPU} with w = 0.5 each, then
// min-max normalised across feasible nodes, as the FGD paper's BestFit baseline.
// Params: max_cpu_milli (default 128000), max_gpu_milli (default 8000).
#pragma once

#include "sched/registry.h"

namespace aicloud::sched {
void RegisterBestFit(Registry& r);
// Kubernetes-style min-max normalisation to 0..100 in integers; all-equal scores become 0.
void MinMaxNormalize(std::span<int64_t> scores);
}  // namespace aicloud::sched
