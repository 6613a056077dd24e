// TargetWorkload: the distribution of task shapes the cluster expects ("typical pods" in the
// FGD paper), which fragmentation is measured against. Built from a list of requests: shapes
// sorted by frequency, the most popular kept until they cover `coverage` of the requests, then
// renormalised so the kept weights sum to 1.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "cluster/cluster.h"
#include "sched/request.h"

namespace aicloud::sched {

struct TaskShape {
  int64_t cpu_milli = 0;
  int32_t gpu_milli = 0;  // per GPU; 0 for CPU-only
  int gpu_count = 0;
  std::vector<cluster::ModelId> models;  // allowed; empty = any
  double weight = 0;      // popularity, sums to 1 over the workload
  // Memory is not part of the shape: fragmentation is measured on GPU and CPU only.

  bool AllowsModel(cluster::ModelId m) const;
};

struct TargetWorkload {
  std::vector<TaskShape> shapes;
};

// REQUIRES: 0 < coverage <= 1. `gpu_weight` > 0 counts a whole-GPU request as
// 1 + gpu_count × gpu_weight requests, so large requests weigh by the GPUs they need (the FGD
// artifact's GpuResWeight; 0 counts every request once, as the paper's experiments do).
TargetWorkload BuildTargetWorkload(std::span<const PodRequest> pods, double coverage = 0.95,
                                   double gpu_weight = 0);

}  // namespace aicloud::sched
