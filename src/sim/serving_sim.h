// Trace replay of one model deployment: requests arrive at their trace times, the gateway routes
// each through a fleet::Router to a ready replica (or holds it while none is ready), replicas run
// the iteration-level latency model (serving_model.h), and an autoscaler (fleet::Autoscaler)
// resizes the deployment every tick from the same snapshot a controller would build. New replicas
// need a node: a free one of the deployment's, a warm-pool node (fast), or a new node after the
// provisioning delay (fleet::WarmPoolProvider), then a cold start to load weights. The router and
// autoscaler code is the code the server will run; only the clock (simulated, passed in) and the
// executor (this loop) differ.
//
//   StatusOr<ServingTrace> trace = LoadAzureLlmTrace(path);
//   ServingConfig c;
//   c.policy = "ours";
//   c.slo.ttft_p99_ms = 2000;
//   StatusOr<ServingRun> run = RunServing(*trace, c);
//   std::cout << FormatServingTable({*run});
//
// Reported: TTFT (mean, p50, p99) and the share of requests whose TTFT met the SLO (a request
// that never got a first token misses), TPOT p99, replica GPU-hours over the trace span (a
// replica holds its GPU from the moment its node is ready until it has drained), node-hours
// including idle warm-pool nodes, the autoscaler's direction changes, and a timeline.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/rng.h"
#include "core/status.h"
#include "fleet/snapshot.h"
#include "sim/serving_model.h"
#include "sim/serving_trace.h"

namespace aicloud::sim {

struct ServingConfig {
  std::string policy = "ours";       // hpa | kpa | aibrix | ours | static
  std::string router = "score";      // fleet::RouterNames()
  ReplicaModel model;
  fleet::Slo slo{2000, 0, 0};
  // The autoscalers' ReplicaCapacity::max_concurrency (the concurrency-driven HPA, KPA and AIBrix
  // aim at 70% of it); 0 = the model's max_batch. ProfiledConcurrency measures a fair value.
  double max_concurrency = 0;
  int static_replicas = 4;           // policy "static"
  int initial_replicas = 0;          // autoscaled runs; 0 = what the first 2 minutes need at 70%
                                     // (ours with history: or what its forecasts ask for at t = 0)
  fleet::ScaleBounds bounds{1, 200};
  double provision_delay_s = 180;    // a new GPU node (GCE: "usually 3 to 4 minutes")
  int warm_pool = 2;                 // nodes kept provisioned and idle
  double warm_start_s = 10;
  double node_idle_release_s = 300;  // an empty node is given back after this long
  // "ours" only: days of load history the forecaster learns before the replay. Each day is the
  // trace re-sampled (every request kept with probability 0.9, each burst — a run of arrivals
  // without a gap of history_burst_gap_s — moved as a whole by up to +-history_max_shift_s
  // (120 s), wrapping around
  // the period; seeded), which assumes the day repeats with its bursts at about the same times;
  // 0 = no history, the forecaster starts empty. history_burst_gap_s = 0 moves every request
  // on its own, which smears a burst over 4 minutes. With history and initial_replicas = 0, a
  // run starts with what the forecasts ask for at t = 0 if that is more (a controller that ran
  // before it would have).
  int history_days = 0;
  // The trace the history days are re-sampled from; nullptr = the replayed one. Another trace
  // shows what history that does not repeat costs (bursts learned that do not come).
  const ServingTrace* history_trace = nullptr;
  double history_burst_gap_s = 5;
  double history_max_shift_s = 120;  // how far a day moves a burst (or request), either way
  double period_s = 3600;            // the forecaster's cycle for the replayed trace
  bool predictive = true;            // "ours": use the forecaster
  double target_utilization = 0.7;   // "ours": share of replica capacity the sizing plans to use
  bool arrival_curve = true;         // "ours": size for the arrival curve at the SLO's timescale
  double tick_s = 5;                 // "ours": seconds between decisions
  double scale_down_window_s = 180;  // "ours": the stabilization window of step 4
  double burst_ratio = 2;            // "ours": step 1c (fleet/slo_autoscaler.h); 0 = off
  double burst_hold_s = 600;
  double burst_early_s = 120;        // "ours": step 3's learned bursts (fleet/slo_autoscaler.h)
  double burst_utilization = 0.6;
  uint64_t seed = 42;
  double metrics_window_s = 30;      // replicas' TTFT/TPOT/tokens windows in the snapshot
  double sample_every_s = 10;
  double drain_limit_s = 900;        // stop this long after the last arrival
};

// One day of "ours"' history (ServingConfig::history_days): `trace` with every request kept with
// probability 0.9 and each burst — a run of arrivals without a gap of burst_gap_s (0: every
// request alone) — moved as a whole by a uniform shift in [-max_shift_s, max_shift_s), wrapping
// around period_s; sorted by arrival. REQUIRES: trace sorted by arrival, its arrivals in
// [0, period_s).
ServingTrace ResampledDay(const ServingTrace& trace, double period_s, double burst_gap_s, Rng& rng,
                          double max_shift_s = 120);

struct TimelinePoint {
  double t_s = 0;
  int ready = 0;
  int gpus = 0;              // replicas holding a GPU (loading, ready or draining)
  int desired = 0;
  double load_replicas = 0;  // offered work over the last 60 s, in replicas at 100%
  int in_flight = 0;         // running + waiting on every replica + held at the gateway
};

struct ServingRun {
  std::string policy, router, trace;
  int history_days = 0;
  int static_replicas = 0;
  int64_t requests = 0, completed = 0;
  double ttft_mean_ms = 0, ttft_p50_ms = 0, ttft_p99_ms = 0, tpot_p99_ms = 0, e2e_mean_s = 0;
  double slo_ttft_ms = 0;
  double slo_attainment = 0;   // 0..1
  double span_s = 0;
  double gpu_hours = 0, node_hours = 0, warm_idle_hours = 0;
  int oscillations = 0, scale_events = 0, peak_gpus = 0;
  double mean_gpus = 0;
  double prefix_hit_rate = 0;  // prompt tokens served from a replica's prefix cache
  int64_t nodes_provisioned = 0;
  std::vector<TimelinePoint> timeline;
  // Requests that missed the TTFT SLO (or never got a first token), by the minute they arrived.
  std::vector<int> missed_by_minute;
};

// InvalidArgument for an unknown policy or router, an empty trace, or history days with a trace
// longer than their period.
StatusOr<ServingRun> RunServing(const ServingTrace& trace, const ServingConfig& config);

// The smallest static replica count whose TTFT-SLO attainment reaches `target` (0..1), found by
// bisection over [1, max_replicas]; its run. FailedPrecondition when even max_replicas misses.
StatusOr<ServingRun> RunStaticBaseline(const ServingTrace& trace, ServingConfig config, double target,
                                       int max_replicas = 256);

// What one replica carried while meeting the SLO: the highest one-minute mean of in-flight
// requests per replica in a static run that met it. An operator load-tests a replica this way
// before setting a concurrency target.
double ProfiledConcurrency(const ServingRun& static_run);

// Static peak provisioning as an operator sizes it without replaying the trace: the replicas
// whose profiled capacity (ReplicaModel::Capacity: prefill tokens/s, decode tokens/s at a full
// batch) serves the busiest `window_s` of offered work at `utilization` — ceil(max over windows
// of sum(prompt / prefill_tps + output / decode_tps) / window_s / utilization). Windows start
// every 10 s.
int PeakProvisionedReplicas(const ServingTrace& trace, const ReplicaModel& model, double window_s = 60,
                            double utilization = 0.7);

// Static peak provisioning at the TTFT SLO's timescale: the replicas whose profiled capacity
// serves every stretch of the offered work within its own length plus the SLO, at
// `utilization` — ceil(max over arrivals i <= j, a_j - a_i <= max_window_s, of
// sum(work of i..j) / (a_j - a_i + slo_s) / utilization). The fluid bound under which no request
// waits longer than slo_s (network calculus: the arrival curve against a rate-latency service
// curve); with a 60 s window and no slo_s term it is PeakProvisionedReplicas.
int SloPeakProvisionedReplicas(const ServingTrace& trace, const ReplicaModel& model, double slo_s,
                               double utilization = 0.7, double max_window_s = 600);

// Offered work over (t - window, t] in replicas at 100% (prompt tokens / prefill rate + output
// tokens / decode rate), per second.
double OfferedLoad(const ServingTrace& trace, const ReplicaModel& model, double t_s, double window_s);

// One row per run for people; everything but the timelines as JSON for programs.
std::string FormatServingTable(const std::vector<ServingRun>& runs);
std::string FormatServingJson(const std::vector<ServingRun>& runs);

}  // namespace aicloud::sim
