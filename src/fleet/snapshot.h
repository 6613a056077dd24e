// What a replica autoscaler sees of one deployment at one instant, and what it answers.
//
// The deployment controller (server) and the serving simulator (sim/serving_sim) both build a
// DeploymentSnapshot from the engine's metrics (vLLM-style: requests running and waiting, KV-cache
// usage, latency percentiles) and the gateway's arrival counters, then call
// Autoscaler::Recommend(snapshot) once per tick. Time is passed in (`now_s`, steady-clock
// seconds), never read, so the same policy runs on wall time and on simulated time.
//
//   DeploymentSnapshot s;
//   s.now_s = clock.NowMicros() / 1e6;
//   s.replicas = ReadEngineMetrics();        // ready replicas only
//   s.starting_replicas = 1;
//   s.current_replicas = 4;                  // ready + starting, as last scaled
//   s.slo = {.ttft_p99_ms = 2000};
//   s.capacity = {.max_concurrency = 32, .prefill_tokens_per_s = 2000, .decode_tokens_per_s = 1200};
//   ScaleDecision d = autoscaler->Recommend(s);   // d.desired in [min, max], d.reason for events
#pragma once

#include <string>
#include <vector>

namespace aicloud::fleet {

// A deployment's service-level objective. Zero means "not set".
struct Slo {
  double ttft_p99_ms = 0;   // time to first token, 99th percentile
  double tpot_p99_ms = 0;   // time per output token after the first, 99th percentile
  double tokens_per_s = 0;  // generated tokens/s the deployment must sustain
};

// What one replica can do, from profiling (bench/engine_bench) or the deployment spec. The
// capacity-based policies divide the offered load by it.
struct ReplicaCapacity {
  double max_concurrency = 32;       // requests one replica runs at once within its TPOT SLO
  double prefill_tokens_per_s = 0;   // prompt tokens/s of one replica when it does only prefill
  double decode_tokens_per_s = 0;    // generated tokens/s at max_concurrency
};

// One ready replica's engine metrics (vLLM names in brackets).
struct ReplicaMetrics {
  std::string id;
  int running = 0;           // requests in the running batch [num_requests_running]
  int waiting = 0;           // queued, not yet admitted [num_requests_waiting]
  double kv_usage = 0;       // KV-cache blocks in use, 0..1 [gpu_cache_usage_perc]
  double ttft_p99_ms = 0;    // over the last metrics window; 0 when nothing finished in it
  double tpot_p99_ms = 0;
  double tokens_per_s = 0;   // generated tokens/s over the last window
  // Mean utilization of its GPUs as their node's agent last reported it (DCGM_FI_DEV_GPU_UTIL);
  // -1 when not known. Reported, not scaled on: a single request drives it near 100% and DCGM
  // lags ~40 s (dcgm-exporter#301, DCGM#170), so no policy here decides by it.
  double gpu_utilization_pct = -1;
};

struct DeploymentSnapshot {
  double now_s = 0;                     // steady-clock seconds; must not decrease between calls
  std::vector<ReplicaMetrics> replicas; // ready replicas only
  int current_replicas = 0;             // replicas asked for: ready + starting (as last scaled)
  int starting_replicas = 0;            // asked for, not ready yet (node or weights loading)
  int pending_requests = 0;             // held at the gateway (no ready replica, or saturated)
  // Arrivals at the gateway over the last `window_s` seconds.
  double window_s = 10;
  double arrival_rps = 0;
  double prompt_tokens_per_s = 0;
  double output_tokens_per_s = 0;
  Slo slo;
  ReplicaCapacity capacity;

  int ready() const { return static_cast<int>(replicas.size()); }
  // Requests in flight: running + waiting on every ready replica + held at the gateway.
  double InFlight() const;
  // Largest p99 TTFT reported by a replica (0 when none reported).
  double WorstTtftMs() const;
  double MeanKvUsage() const;
  int TotalWaiting() const;
};

// An autoscaler's answer: the replica count to converge to, and why (for events and logs).
struct ScaleDecision {
  int desired = 0;
  std::string reason;
  bool panic = false;  // KPA-style panic mode (never scales down while set)
  bool forecast = false;  // the count is what the predictive step asked for (a rise ahead)
};

struct ScaleBounds {
  int min_replicas = 1;    // 0 allows scale to zero
  int max_replicas = 100;
};

}  // namespace aicloud::fleet
