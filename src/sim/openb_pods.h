// Loader for the pod lists of the Alibaba GPU cluster trace v2023 ("openb"): columns name,
// cpu_milli, memory_mib, num_gpu, gpu_milli and optionally gpu_spec, creation_time,
// deletion_time. Each row becomes a PodRequest:
//   num_gpu = 0                      -> CPU-only
//   num_gpu = 1, gpu_milli < 1000    -> a fractional (time-sliced) share of one GPU
//   gpu_milli = 1000                 -> num_gpu whole GPUs
// gpu_spec ("V100M16|V100M32") lists the allowed GPU models; names are interned in `cluster`.
#pragma once

#include <string>
#include <vector>

#include "cluster/cluster.h"
#include "core/csv.h"
#include "sched/request.h"

namespace aicloud::sim {

struct TracePod {
  sched::PodRequest pod;
  int64_t creation_time = -1;  // seconds from trace start; -1 when the file has no times
  int64_t deletion_time = -1;
};

StatusOr<std::vector<TracePod>> LoadOpenbPods(const std::string& path, cluster::Cluster* cluster);
StatusOr<std::vector<TracePod>> ParseOpenbPods(const CsvTable& table, cluster::Cluster* cluster);

}  // namespace aicloud::sim
