// The FGD paper's placement experiment (Weng et al., USENIX ATC 2023, §6): fill a cluster with
// a trace's pods until the requested GPUs reach `inflate` × the cluster's GPUs, one pod at a
// time, with no departures, and record the GPU allocation ratio and fragmentation as demand
// arrives.
//
// Method, as the paper's artifact does it: shuffle the trace's pods with the seed; append
// copies of randomly chosen trace pods until the next copy would push requested GPUs past the
// target (or drop random pods while above it); then place each pod once. A pod that does not
// fit fails and arrival goes on. Fragmentation is measured against the typical task shapes of
// the original trace (95% popularity cover).
//
//   FgdExperiment exp(cluster, pods, "default");
//   StatusOr<FgdRun> run = exp.Run({.policy = "fgd", .seed = 42});
#pragma once

#include <string>
#include <vector>

#include "cluster/cluster.h"
#include "sched/profile.h"
#include "sched/scheduler.h"
#include "sched/workload.h"
#include "sim/openb_pods.h"

namespace aicloud::sim {

struct FgdConfig {
  std::string policy = "fgd";
  uint64_t seed = 42;
  double inflate = 1.3;
  // Optional: a full profile instead of PolicyProfile(policy).
  const sched::Profile* profile = nullptr;
  // The paper's artifact breaks equal scores by taking the first node in a per-seed random node
  // order (its scheduler fork picks the first best node; node names carry a random prefix).
  // Its Random policy randomises through its own score, not through ties.
  sched::SchedulerOptions::TieBreak tie_break = sched::SchedulerOptions::TieBreak::kFirst;
  bool shuffle_nodes = true;
  // Typical task shapes: popularity cover and GPU weighting (see BuildTargetWorkload).
  double coverage = 0.95;
  double gpu_weight = 0;
};

// One point per integer percent of arrived GPU demand: the mean of the events that land on it.
struct CurvePoint {
  int arrived_pct = 0;
  double allocation_pct = 0;   // GPU milli bound / cluster GPU milli
  double frag_amount_pct = 0;  // fragmented GPU / cluster GPU
  double frag_ratio_pct = 0;   // fragmented GPU / idle GPU
};

struct FgdRun {
  std::string policy;
  uint64_t seed = 0;
  std::string workload;
  double final_allocation_pct = 0;  // at the last arrived percent (inflate × 100)
  std::vector<CurvePoint> curve;
  int64_t pods = 0;
  int64_t placed = 0;
  int64_t failed = 0;
  double schedule_seconds = 0;      // wall time of the placement loop
};

class FgdExperiment {
 public:
  // Copies what it needs; `pods` are the trace's pods in file order.
  FgdExperiment(const cluster::Cluster& cluster, std::vector<TracePod> pods, std::string workload);

  StatusOr<FgdRun> Run(const FgdConfig& config) const;
  const sched::TargetWorkload& target() const { return target_; }

  // The arrival list of one seed (shuffled trace + copies), exposed for tests.
  std::vector<sched::PodRequest> Arrivals(uint64_t seed, double inflate) const;

 private:
  cluster::Cluster cluster_;
  std::vector<sched::PodRequest> pods_;  // sorted by name
  std::string workload_;
  sched::TargetWorkload target_;
};

// Averages runs point by point (same policy, different seeds).
FgdRun MeanRun(const std::vector<FgdRun>& runs);

}  // namespace aicloud::sim
