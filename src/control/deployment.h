// Deployment: a model served by a set of `aicloud engine` replicas with SLO targets. This file
// turns a Deployment's `spec` into the typed form the deployment controller uses, and builds
// the Job object of one replica (replicas are ordinary jobs the scheduler places and agents run,
// labelled with their deployment, as a Kubernetes Deployment owns its pods).
//
//   spec:
//     model: /models/smollm2-135m        # a Hugging Face checkpoint directory on the nodes
//     servedModelName: chat              # default: metadata.name
//     adapters: [{name: sql, path: /adapters/sql}]   # LoRA adapters served next to the base
//     resources: {cpu: "2", memory: 2Gi} # per replica; gpu forms as a Job's
//     replicas: {min: 0, max: 4}
//     slo: {ttftP99Ms: 2000, tpotP99Ms: 200, tokensPerS: 100}
//     profile: balanced                  # latency | balanced | throughput: engine batch limits
//     scaleToZeroSeconds: 300            # idle time before min 0 scales to zero
//     lane: interactive                  # workload lane: the node pool replicas run in
//     autoscaler: {policy: ours, targetConcurrency: 8}   # ours | hpa | kpa | aibrix
//     autoscaler: {capacity: {prefillTokensPerS: 8000, decodeTokensPerS: 1500}}   # ours: one replica
//     engine: {threads: 2, kvCacheGiB: 1, dtype: auto, args: ["--max-model-len", "2048"]}
//     engine: {prefillOrder: shortest-first, maxOvertakeSeconds: 60}   # default fcfs
//     strategy: {maxSurge: 1, maxUnavailable: 0}         # rolling update (the default), or
//     strategy: {type: Canary, canaryWeight: 10}         # new revision beside the stable one
//     queue: serving                     # tenant queue (quota); priority: 100
//
// Profiles map to the engine's batch limits as the seed's table does: latency runs at most 4
// sequences a step, balanced 32, throughput 128 (--max-num-seqs), with token budgets of 256,
// 512 and 2048 (--max-num-batched-tokens).
//
// A change of what a replica runs (Template(): model, adapters, resources, engine settings) is
// a new revision. RollingUpdate replaces the old revision's replicas one by one. Canary keeps the
// last fully rolled-out revision (status.stableRevision) running beside the new one and the
// gateway sends canaryWeight percent of requests to the new one; raising canaryWeight to 100
// promotes it, `aicloud rollout undo` (spec back to the stable template) abandons it.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace aicloud::control {

struct DeploymentSpec {
  std::string model;                                  // checkpoint directory
  std::string served_model_name;                      // what clients put in "model"
  std::vector<std::pair<std::string, std::string>> adapters;  // name, directory
  nlohmann::json resources = nlohmann::json::object();  // as a Job's spec.resources
  int min_replicas = 1;
  int max_replicas = 1;
  double ttft_p99_ms = 0, tpot_p99_ms = 0, tokens_per_s = 0;
  std::string profile = "balanced";
  int max_num_seqs = 32;
  int max_num_batched_tokens = 512;
  int scale_to_zero_seconds = 300;
  std::string lane;
  std::string autoscaler = "ours";
  double target_concurrency = 0;  // 0: 70% of max_num_seqs
  // autoscaler.capacity: one replica's prompt tokens/s doing only prefill and generated tokens/s
  // at a full batch, from a load test. With both, `ours` sizes from the engines' token rates
  // (fleet/slo_autoscaler.h step 1); without, from requests in flight / max_num_seqs.
  double prefill_tokens_per_s = 0, decode_tokens_per_s = 0;
  int threads = 2;
  double kv_cache_gib = 1.0;
  std::string dtype = "auto";
  std::vector<std::string> engine_args;
  std::string prefill_order = "fcfs";  // or "shortest-first" (engine --prefill-order)
  double max_overtake_seconds = 60;    // shortest-first only (engine --max-overtake)
  int max_surge = 1;
  int max_unavailable = 0;
  bool canary = false;    // strategy.type Canary (else RollingUpdate)
  int canary_weight = 0;  // percent of requests for the new revision while it is a canary
  std::string queue;
  int priority = 0;

  // The part of the spec that defines a replica (everything but scaling): replicas made from
  // an older template are replaced by a rolling update.
  nlohmann::json Template() const;
  // A short stable hash of Template(), used in replica names and labels.
  std::string Revision() const;
};

// Parses and checks a Deployment spec (already schema-validated for types). INVALID_ARGUMENT
// with the field path, e.g. "spec.replicas.max: must be >= spec.replicas.min (2)".
// `name` is metadata.name (the default served model name).
StatusOr<DeploymentSpec> ParseDeploymentSpec(const nlohmann::json& spec, const std::string& name);

// Labels on replica jobs.
inline constexpr char kDeploymentLabel[] = "aicloud/deployment";
inline constexpr char kRevisionLabel[] = "aicloud/revision";
inline constexpr char kPortLabel[] = "aicloud/port";
// Set to "true" (by the node autoscaler, to empty a node): the replica is replaced elsewhere like
// one of an old revision, within maxSurge / maxUnavailable.
inline constexpr char kEvictLabel[] = "aicloud/evict";

// The Job object of one replica: `engine_binary engine --model ... --port port` with the
// deployment's resources, restart policy OnFailure, and the labels above. The engine listens on
// the address its agent gives it (AICLOUD_NODE_ADDRESS) and demands the replica's secret, which
// the control plane adds to the attempt's environment (replica_secret.h): neither is in the Job.
nlohmann::json ReplicaJob(const DeploymentSpec& spec, const std::string& tenant,
                          const std::string& deployment, const std::string& job_name, int port,
                          const std::string& engine_binary);

}  // namespace aicloud::control
