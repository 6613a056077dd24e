#include "synthetic.h"

#include <cstdlib>
#include <iostream>

#include "core/rng.h"
#include "sim/openb_pods.h"

namespace aicloud::bench {

Synthetic MakeSynthetic(int nodes, double fill, uint64_t seed) {
  Synthetic s;
  const cluster::ModelId g2 = s.cluster.InternModel("G2");
  Rng rng(seed);
  // Shapes of the openb trace's 8-GPU nodes: 96 or 104 vCPU, 384 or 512 GiB... up to 128 vCPU.
  const int64_t cpus[] = {96000, 104000, 128000};
  const int64_t mems[] = {393216, 524288, 786432};
  for (int i = 0; i < nodes; ++i) {
    cluster::Node n;
    n.name = "syn-" + std::to_string(i);
    n.model = g2;
    n.cpu_milli = cpus[rng.Uniform(3)];
    n.mem_mib = mems[rng.Uniform(3)];
    n.gpus.resize(8);
    s.cluster.AddNode(std::move(n));
  }
  auto trace = sim::LoadOpenbPods(
      std::string(AICLOUD_SOURCE_DIR) + "/data/traces/alibaba-gpu-v2023/openb_pod_list_default.csv",
      &s.cluster);
  if (!trace.ok()) {
    std::cerr << trace.status().ToString() << "\n";
    std::exit(1);
  }
  std::vector<sched::PodRequest> source;
  for (sim::TracePod& tp : *trace) source.push_back(std::move(tp.pod));
  s.target = sched::BuildTargetWorkload(source, 0.95);
  const double target_milli = fill * static_cast<double>(s.cluster.total_gpu_milli());
  double total = 0;
  int64_t uid = 1;
  while (total < target_milli) {
    sched::PodRequest p = source[rng.Uniform(source.size())];
    p.uid = uid++;
    total += static_cast<double>(p.total_gpu_milli());
    s.pods.push_back(std::move(p));
  }
  return s;
}

}  // namespace aicloud::bench
