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
// paper's artifact, so near-equal placements tie and the framework's tie-break decides);
// `tiered` (default 0): among placements FGD rates equal, a fractional request goes where GPUs
// are already shared, a whole-GPU request to a node whose idle GPUs it takes exactly, then any
// request to a node already in use with the fewest whole idle GPUs (idle GPUs stay together,
// idle nodes stay whole). Policy `fgd_tiered` turns it on.
#pragma once

#include <cstdint>
#include <span>

#include "sched/registry.h"
#include "sched/workload.h"

namespace aicloud::sched {

// F_n(M) evaluated fast: shapes are grouped by their per-GPU demand, so a node's GPUs are
// scanned once per distinct demand (a handful) rather than once per shape (tens).
// Immutable after construction; safe to share between threads.
class FragmentationModel {
 public:
  explicit FragmentationModel(const TargetWorkload& w);
  // F_n(M) for a node whose free state is (cpu_free, free milli per GPU, model), in GPU milli.
  double Of(int64_t cpu_free, std::span<const int32_t> gpu_free, cluster::ModelId model) const;

 private:
  struct Shape {
    int64_t cpu_milli;
    int level;         // index into levels_; -1 for CPU-only
    int gpu_count;
    uint64_t models;   // bit m = model m allowed; ~0 = any
    double weight;
  };
  std::vector<int32_t> levels_;  // distinct per-GPU demands
  std::vector<Shape> shapes_;
};

// F_n(M) for a node whose free state is (cpu_free, free milli per GPU, model).
double NodeFragmentation(const TargetWorkload& w, int64_t cpu_free, std::span<const int32_t> gpu_free,
                         cluster::ModelId model);
// Cluster fragmentation: Σ_n F_n(M), in GPU milli.
double ClusterFragmentation(const TargetWorkload& w, const cluster::Cluster& c);

void RegisterFgd(Registry& r);

}  // namespace aicloud::sched
