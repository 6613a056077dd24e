// fgd: Fragmentation Gradient Descent (Weng et al., "Beware of Fragmentation: Scheduling
// GPU-Sharing Workloads with Fragmentation Gradient Descent", USENIX ATC 2023).
//
// A node's fragmentation F_n(M) is the GPU capacity (milli) expected to be unusable by the
// target workload M: for each typical task shape m with weight p_m, the free GPU milli that m
// cannot use on n (all of it when n cannot host m at all or m is CPU-only; otherwise the GPUs
// with less free than m needs). A placement is scored by how much it lowers F:
// score = sigmoid((F_before - F_after) / 1000) × resolution. For a fractional request every
// fitting GPU is tried and the best one is picked, which fixes the GPU inside the node.
//
// Params: `resolution` (default 100: scores are truncated to integers 0..100 as in the
// paper's artifact, so near-equal placements tie and are broken at random).
#pragma once

#include <cstdint>
#include <span>

#include "sched/registry.h"
#include "sched/workload.h"

namespace aicloud::sched {

// F_n(M) for a node whose free state is (cpu_free, free milli per GPU, model).
double NodeFragmentation(const TargetWorkload& w, int64_t cpu_free, std::span<const int32_t> gpu_free,
                         cluster::ModelId model);
// Cluster fragmentation: Σ_n F_n(M), in GPU milli.
double ClusterFragmentation(const TargetWorkload& w, const cluster::Cluster& c);

void RegisterFgd(Registry& r);

}  // namespace aicloud::sched
