// Event-driven replay of a trace: pods arrive at their creation time, wait in a pending queue
// until the scheduler places them, run for (deletion - creation) seconds from the moment they are
// placed, and leave. It runs the same Scheduler the server runs; only the clock (a FakeClock
// that jumps from event to event) and the executor (this loop) differ.
//
// The loop, at each event time t (departures before arrivals, so capacity freed at t is there for
// pods arriving at t):
//   1. departures at t release their resources;
//   2. arrivals at t join the pending queue, ordered by Scheduler::QueueLess (arrival order for
//      the built-in profiles);
//   3. a scheduling pass tries pending pods in queue order. A pod that does not fit stays queued
//      and the pass goes on (no head-of-line blocking), as kube-scheduler parks unschedulable pods
//      and moves them back to the active queue on cluster events. Placements only take capacity,
//      so a request shape that failed stays failed until the next departure: the pass skips pods
//      of such shapes, and a pass after arrivals alone tries only shapes not yet known to fail.
//      That keeps a saturated replay at O(events x distinct shapes) scheduling cycles, not O(n^2);
//   4. pods that have waited longer than max_wait are dropped.
// A pod that fits no node even on the empty cluster is never queued (counted as unplaceable).
//
//   StatusOr<std::vector<TracePod>> pods = LoadTimedPods("openb_pod_list_default.csv", &cluster);
//   EventSim sim(cluster, std::move(*pods), "default");
//   StatusOr<EventRun> run = sim.Run({.policy = "fgd", .seed = 42});
//   std::cout << FormatEventTable({*run});
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "cluster/cluster.h"
#include "core/csv.h"
#include "core/status.h"
#include "sched/profile.h"
#include "sched/scheduler.h"
#include "sched/workload.h"
#include "sim/openb_pods.h"

namespace aicloud::sim {

// LoadOpenbPods, then checks that every pod has a creation and a deletion time. A list without
// them (the multigpu lists have none) is InvalidArgument naming the file.
StatusOr<std::vector<TracePod>> LoadTimedPods(const std::string& path, cluster::Cluster* cluster);
StatusOr<std::vector<TracePod>> ParseTimedPods(const CsvTable& table, cluster::Cluster* cluster);

struct EventConfig {
  std::string policy = "fgd";
  uint64_t seed = 42;
  // Optional: a full profile instead of PolicyProfile(policy).
  const sched::Profile* profile = nullptr;
  // As in the FGD experiment: equal best scores go to the first node of a per-seed random node
  // order, so runs repeat exactly for a seed.
  sched::SchedulerOptions::TieBreak tie_break = sched::SchedulerOptions::TieBreak::kFirst;
  bool shuffle_nodes = true;
  // Multiplies arrival times (creation_time); run times are kept. Below 1 it compresses the
  // arrivals and raises the load: the openb default trace peaks at ~66 busy GPUs of 6,212 as
  // traced, so 0.001 (1,000x faster arrivals) is what makes pods queue.
  double time_scale = 1.0;
  // A pod pending longer than this many seconds is dropped; negative = wait forever.
  double max_wait_seconds = -1;
  // Interval of the allocation curve, in (scaled) trace seconds.
  double sample_every_seconds = 3600;
};

// What happened to one pod of the trace.
struct PodOutcome {
  enum class Fate : uint8_t { kPlaced, kDropped, kUnplaceable, kStranded };
  std::string name;
  double arrival_s = 0;  // scaled creation time
  double start_s = -1;   // first placement; -1 when never placed
  double end_s = -1;     // departure; -1 when never placed
  Fate fate = Fate::kStranded;
  double wait_s() const { return start_s < 0 ? -1 : start_s - arrival_s; }
};

const char* FateName(PodOutcome::Fate fate);

struct EventRun {
  std::string policy;
  uint64_t seed = 0;
  std::string workload;
  double time_scale = 1;
  double max_wait_s = -1;

  int64_t pods = 0;
  int64_t placed = 0;
  int64_t never_placed = 0;  // dropped + unplaceable + stranded
  int64_t dropped = 0;       // waited past max_wait
  int64_t unplaceable = 0;   // fits no node of the empty cluster
  int64_t stranded = 0;      // still pending when no departure was left to free room
  int64_t preempted = 0;     // evictions by a preemption plugin (re-queued with their rest)

  // Queue wait of placed pods, seconds (nearest-rank percentiles).
  double wait_mean_s = 0, wait_p50_s = 0, wait_p95_s = 0, wait_p99_s = 0, wait_max_s = 0;
  // GPU milli bound / cluster GPU milli, %: integrated over [first arrival, last event].
  double time_weighted_allocation_pct = 0;
  double peak_allocation_pct = 0;
  double makespan_s = 0;  // first arrival to last departure
  // (seconds since the first arrival, allocation %) every sample_every_seconds and at the end.
  std::vector<std::pair<double, double>> allocation_curve;
  // In trace (file) order.
  std::vector<PodOutcome> outcomes;

  int64_t scheduling_cycles = 0;  // ScheduleOne calls, a measure of the loop's cost
  double wall_seconds = 0;        // not part of the reports, which must repeat exactly
};

class EventSim {
 public:
  // Copies what it needs; `pods` are the trace's pods in file order.
  EventSim(const cluster::Cluster& cluster, std::vector<TracePod> pods, std::string workload);

  // InvalidArgument when a pod has no times or the config is out of range.
  StatusOr<EventRun> Run(const EventConfig& config) const;

 private:
  cluster::Cluster cluster_;
  std::vector<TracePod> pods_;
  std::string workload_;
  sched::TargetWorkload target_;
};

// Summary per policy (for people), everything but the per-pod outcomes as JSON (for programs),
// and one CSV row per pod and policy (for spreadsheets). Deterministic: no wall times.
std::string FormatEventTable(const std::vector<EventRun>& runs);
std::string FormatEventJson(const std::vector<EventRun>& runs);
std::string FormatEventCsv(const std::vector<EventRun>& runs);

}  // namespace aicloud::sim
