// Synthetic clusters and workloads for the scheduler benchmarks: N nodes of 8 GPUs each, with
// the CPU and memory shapes of the openb trace's 8-GPU nodes, and pods drawn (seeded, with
// replacement) from an openb pod list so the request mix is real.
#pragma once

#include <cstdint>
#include <vector>

#include "cluster/cluster.h"
#include "sched/request.h"
#include "sched/workload.h"

namespace aicloud::bench {

struct Synthetic {
  cluster::Cluster cluster;
  std::vector<sched::PodRequest> pods;  // arrival order
  sched::TargetWorkload target;
};

// `fill` = requested GPUs / cluster GPUs of the generated pod list.
Synthetic MakeSynthetic(int nodes, double fill, uint64_t seed);

}  // namespace aicloud::bench
