// DeploymentController: keeps each Deployment's replicas — ordinary Jobs running `aicloud
// engine`, labelled aicloud/deployment — at the count its autoscaler asks for, replaces replicas
// of an old spec by a rolling update, and tells the gateway which replicas are ready.
//
//   DeploymentController dc(store, &clock, &metrics, {.engine_binary = "/usr/bin/aicloud"});
//   dc.Start();                           // a thread: one Turn() per tick
//   // gateway side:
//   for (const ServingRoute& r : dc.Routes()) ...        // ready endpoints per served model
//   dc.NoteRequests("acme", "chat", /*held=*/3);          // requests waiting for a replica
//
// Each turn, per Deployment:
// 1. Its replica jobs are read from the store. A Running job whose engine answers /health is
//    ready; its /metrics (vLLM names) feed the autoscaler. Finished jobs are deleted. A replica
//    whose port is answered by an engine whose /health names another instance than the replica
//    job, or none (another server's replica on the same host, or a process left from before),
//    is deleted and its port not reused for kForeignPortHoldUs: the gateway never sends it
//    requests.
// 2. The autoscaler (fleet: ours, hpa, kpa or aibrix) recommends a count within
//    spec.replicas {min, max}. Requests held at the gateway for a deployment with no ready
//    replica raise it to at least 1 (scale from zero); with min 0, a deployment with no
//    requests for spec.scaleToZeroSeconds (neither noted by the gateway nor in flight on a
//    replica) goes to 0.
// 3. Replica jobs are created or deleted toward that count. Replicas of an older revision
//    (spec template hash) are replaced one by one: new ones are created up to desired +
//    maxSurge, an old one is deleted only while ready replicas stay >= desired - maxUnavailable.
//    A replica labelled aicloud/evict=true (the node autoscaler is emptying its node) is
//    replaced the same way, whatever its revision.
//    With strategy Canary, the stable revision (the last one fully rolled out, kept in
//    status.history) keeps running: of `desired`, canaryWeight percent (at least one) run the
//    new revision and the rest (at least one) the stable one; at weight 100 the stable replicas
//    are retired like old ones and the new revision becomes stable.
// 4. status {replicas, readyReplicas, desiredReplicas, revision, stableRevision, canary,
//    history, endpoints, lastScale, forecast, error} is written when it changed. history holds
//    the specs of the last kHistoryLimit revisions (what `aicloud rollout undo` restores);
//    forecast, the daily load profile the autoscaler (ours) learned, one value per bin of the
//    UTC day, given back to the autoscaler of a restarted controller.
// Replica jobs whose Deployment is gone are deleted. The store is the only state: a restarted
// server picks up where the last one left off.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "control/deployment.h"
#include "core/clock.h"
#include "core/metrics.h"
#include "control/engine_metrics.h"
#include "core/status.h"
#include "fleet/autoscaler.h"
#include "store/store.h"

namespace aicloud::control {

// What a probe of one replica found.
struct ReplicaProbe {
  bool healthy = false;  // GET /health answered 200
  // The port's process could not prove it holds this replica's secret (GET /health?nonce= gave no
  // or a wrong proof, or 401): another replica's or another server's engine, or a squatter. The
  // secret was not sent to it.
  bool secret_refused = false;
  int running = 0;       // vllm:num_requests_running
  int waiting = 0;       // vllm:num_requests_waiting
  double kv_usage = 0;   // vllm:kv_cache_usage_perc
  std::string model;     // the model_name label of those metrics ("" when absent)
  std::string instance;  // /health's "instance": the replica job the engine was started for
  // Cumulative since the engine started: the controller subtracts an earlier probe of the same
  // replica for rates and percentiles over a window. Only when `metrics`: /metrics answered and
  // every value read was finite (a probe whose /metrics failed is no sample, not a reset).
  bool metrics = false;
  double prompt_tokens = 0;      // vllm:prompt_tokens_total
  double generation_tokens = 0;  // vllm:generation_tokens_total
  LatencyHistogram ttft;         // vllm:time_to_first_token_seconds
  LatencyHistogram itl;          // vllm:inter_token_latency_seconds (time per output token)
};

// (base_url "http://127.0.0.1:21000" or "https://...", the replica's secret: "" for none) ->
// probe. The default uses http::Client with a short timeout; with a secret it first has the
// engine prove it holds it (GET /health?nonce=, replica_secret.h), then presents it as
// "Authorization: Bearer"; https replicas must present a certificate of the CA `ca_pem` (the
// cluster's replica CA, replica_ca.h) for their address.
using Prober = std::function<ReplicaProbe(const std::string& base_url, const std::string& secret)>;
Prober HttpProber(std::chrono::milliseconds timeout, std::string ca_pem = "");

// Gives a new autoscaler's forecaster the profile kept in a Deployment's status.forecast
// ({periodS, binS, learnedBins, profile, and once a burst came peaks and burstDays}).
// INVALID_ARGUMENT naming the field when it does not fit the forecaster (another period or bin, a
// value that is not a number or null); then nothing is restored.
Status RestoreForecast(const nlohmann::json& forecast, fleet::LoadForecaster* forecaster);

// status.forecast for people (`aicloud describe deployment`): how much of the period is learned,
// the five busiest learned bins, and the ten largest learned bursts with the days they came on,
// e.g.
//   Forecast: 2 of 288 bins of 300 s learned (UTC times of day)
//     busiest: 08:00 3.00, 08:20 1.25 replicas of load
//     burst: 08:00 3.00 replicas of need; 2026-11-28: 3.50; 2026-11-27: 3.00
// "" when there is no profile to describe.
std::string DescribeForecast(const nlohmann::json& forecast);

// Reads the three gauges, the token counters and the TTFT and inter-token histograms from a
// Prometheus text page (summed over labels; absent ones are 0 or empty) and the model_name label
// of the first running-requests line.
ReplicaProbe ParseEngineMetrics(std::string_view text);

// What one replica's engine did over a window: the difference of two of its probes.
struct Observed {
  double seconds = 0;  // 0: fewer than two probes a second apart in the window
  double prompt_tokens = 0, generation_tokens = 0;
  LatencyHistogram ttft, itl;
  double gpu_utilization_pct = -1;  // at the last probe; -1: not known (no GPU, no report)
};

// A Deployment's status.observed from its ready replicas' last minute: windowS, requests (that
// got a first token), promptTokensPerS, generationTokensPerS, ttftP99Ms and tpotP99Ms (from the
// engines' histograms, interpolated within a bucket), and with an SLO ttftWithinSlo /
// tpotWithinSlo (the share of first tokens / inter-token gaps within it), and gpuUtilizationPct
// (the mean over replicas whose GPUs report it). null when no replica has a window yet.
nlohmann::json ObservedStatus(const std::vector<const Observed*>& replicas, const DeploymentSpec& spec);

struct ServingEndpoint {
  std::string replica;  // the replica job's name
  std::string url;      // http://host:port, or https://host:port when the cluster has TLS
  bool ready = false;
  std::string revision;
  std::string secret;   // what the replica demands (replica_secret.h); never in status.endpoints
};

// One served model name and where it runs.
struct ServingRoute {
  std::string tenant, deployment;
  std::string model;                  // spec.servedModelName
  std::vector<std::string> adapters;  // served next to it (same replicas)
  std::vector<ServingEndpoint> endpoints;
  int desired = 0;
  // During a canary: endpoints of canary_revision get canary_weight percent of requests, the
  // others (the stable revision) the rest. Empty when no canary runs.
  std::string canary_revision;
  int canary_weight = 0;
  // The CA the https endpoints' certificates chain to (PEM); "" when the cluster has no TLS.
  std::string ca_pem;
};

// Failed probes in a row before a ready replica counts as not ready.
inline constexpr int kProbeFailures = 3;
// The engines' counters and histograms are turned into rates and percentiles over these windows:
// the autoscaler's snapshot (as its simulator sees them) and a Deployment's status.observed,
// which is rewritten at most every kObservedEveryUs.
inline constexpr int64_t kSnapshotWindowUs = 10'000'000;
inline constexpr int64_t kObservedWindowUs = 60'000'000;
inline constexpr int64_t kObservedEveryUs = 15'000'000;
// A deployment's replicas are probed together, this many at a time.
inline constexpr size_t kProbeParallelism = 16;

// How long a replica port found answered by another engine is not given to new replicas.
inline constexpr int64_t kForeignPortHoldUs = 600'000'000;

// Revisions remembered in a Deployment's status.history.
inline constexpr int kHistoryLimit = 10;

class ReplicaSecrets;

struct DeploymentControllerOptions {
  std::string engine_binary;  // the aicloud executable replicas run
  // Each replica's secret, presented by the probes and published in Routes() for the gateways.
  // nullptr: replicas have none.
  const ReplicaSecrets* replica_secrets = nullptr;
  // The replica CA's certificate (PEM) when the cluster has TLS: replicas are reached at
  // https:// URLs, probed trusting this CA, and it goes with every route to the gateways.
  // "": plain http.
  std::string replica_ca_pem;
  std::chrono::milliseconds tick{1000};
  int port_base = 21000;  // replica engines listen on ports from here
  int port_count = 4000;
  // Where a node's replicas are reached: its Node spec.address, else this.
  std::string default_address = "127.0.0.1";
  // Admission for a replica Job before it is created (the server passes the Tenant rules:
  // AdmitJob). `unseen_gpus`: GPUs of the tenant's replicas admitted earlier in the same turn
  // (the control plane learns of new jobs after the turn). A refusal is shown in status.error
  // and retried every turn (quota may free up).
  std::function<Status(const nlohmann::json& job, double unseen_gpus, std::string* warning)> admit;
  // A node's last agent report metrics (ControlPlane::NodeMetrics): a replica's GPU utilization is
  // the mean DCGM_FI_DEV_GPU_UTIL of the GPUs allocated to it. Unset: none is known.
  std::function<nlohmann::json(const std::string& node)> node_metrics;
  // Seconds added to the clock's for the autoscalers, so the bins of a learned daily load profile
  // are times of day (UTC) and mean the same after a restart. Default: the system clock's time
  // minus the clock's, taken when the controller is made.
  std::optional<double> autoscaler_clock_offset_s;
};

class DeploymentController {
 public:
  // `on_jobs_changed` is called after replica jobs were created or deleted (the server wakes
  // the job controller with it). `prober` defaults to HttpProber(2 s); it must be safe to call
  // from several threads at once (a deployment's replicas are probed together).
  DeploymentController(store::Store* store, Clock* clock, Metrics* metrics,
                       DeploymentControllerOptions options, Prober prober = nullptr,
                       std::function<void()> on_jobs_changed = nullptr);
  ~DeploymentController();

  Status Start();
  void Stop();

  // One reconcile pass over every Deployment (what the thread runs each tick; tests call it).
  void Turn();

  // Thread-safe snapshot of the served models (for the gateway).
  std::vector<ServingRoute> Routes() const;
  // Gateway activity: requests for a deployment arrived; `held` of them wait for a ready
  // replica. Wakes the controller when a deployment with no ready replica gets a request.
  void NoteRequests(const std::string& tenant, const std::string& deployment, int held);
  // A request for the deployment was admitted or finished at the gateway (resets the idle clock).
  void NoteActivity(const std::string& tenant, const std::string& deployment);
  // A request for the deployment was admitted at the gateway: activity, and an arrival. The
  // autoscaler's arrival rate is the larger of these over the last 10 s and the engines' first
  // tokens, and its prompt tokens/s that rate times the prompt tokens the engines computed per
  // request over the last minute: a burst counts when it arrives, not as the engines get to it.
  void NoteArrival(const std::string& tenant, const std::string& deployment, int64_t count = 1);

 private:
  struct State {
    std::unique_ptr<fleet::Autoscaler> autoscaler;
    std::string policy;
    int min = -1, max = -1;
    int64_t last_activity_us = 0;
    int held = 0;
    int64_t held_at_us = 0;
    int64_t arrivals = 0;  // noted by the gateway (NoteArrival)
    std::deque<std::pair<int64_t, int64_t>> arrival_samples;  // (turn time, arrivals), 10 s and one before
    int desired = -1;
    std::string reason;
    std::string last_scale_at;
    std::string invalid_revision, invalid_reason;  // a revision whose replicas are refused
    std::string canary_refused;  // a revision run as a rolling update although Canary was asked
    std::string admission_refused;  // the last admission refusal logged
    // Per replica: consecutive failed probes and the last good one. A ready replica stays
    // ready (with its last metrics) until kProbeFailures probes in a row fail: a busy CPU
    // engine can miss one, and dropping it would hide its load from the autoscaler.
    struct Health {
      int failures = 0;
      ReplicaProbe last;
      // Good probes of the last kObservedWindowUs (and one before), oldest first.
      std::deque<std::pair<int64_t, ReplicaProbe>> samples;
    };
    std::map<std::string, Health> health;
    int64_t observed_at_us = 0;  // when status.observed was last computed
    nlohmann::json observed;
  };

  void Loop();
  // `probed`: the turn's probes by replica URL (every deployment's replicas are probed together
  // before any is reconciled; a URL missing there is probed here).
  void Reconcile(const nlohmann::json& deployment, const std::vector<nlohmann::json>& replicas,
                 std::map<std::string, std::string>* node_addresses, std::vector<int>* used_ports,
                 std::vector<ServingRoute>* routes, bool* jobs_changed,
                 const std::map<std::string, ReplicaProbe>& probed);
  // The URL of a replica's engine when its job runs on a node ("" otherwise); node addresses are
  // read once per turn into *node_addresses.
  std::string ReplicaUrl(const nlohmann::json& job, std::map<std::string, std::string>* node_addresses) const;
  int NextPort(std::vector<int>* used) const;
  // prober_(url, secret) for each (url, secret), kProbeParallelism at a time on threads of their own.
  std::vector<ReplicaProbe> ProbeAll(const std::vector<std::pair<std::string, std::string>>& targets) const;
  // The secret of replica job `job` ("" without replica_secrets).
  std::string SecretOf(const nlohmann::json& job) const;

  store::Store* store_;
  Clock* clock_;
  double autoscaler_offset_s_;  // options_.autoscaler_clock_offset_s, resolved
  Metrics* metrics_;
  DeploymentControllerOptions options_;
  Prober prober_;  // called from several threads at once
  std::function<void()> on_jobs_changed_;

  mutable std::mutex mu_;  // routes_, states_' activity fields
  std::vector<ServingRoute> routes_;
  std::map<std::string, State> states_;  // "tenant/name"
  std::condition_variable cv_;
  bool wake_ = false;
  bool stop_ = false;
  std::thread thread_;
  Counter* scale_events_ = nullptr;
  uint64_t serial_ = 0;  // Turn() only
  std::map<int, int64_t> foreign_ports_;  // Turn() only: port -> until (clock µs)
  std::map<std::string, double> admitted_gpus_;  // tenant -> GPUs of replicas admitted this turn; Turn() only
};

}  // namespace aicloud::control
