// Request routers: pick the replica of a deployment that serves one request, from the replicas'
// latest metrics. The gateway calls Pick once per request; the serving simulator calls the same
// code. Policies:
//
//   round-robin    next ready replica in turn (the Kubernetes Service baseline);
//   least-request  fewest running + waiting requests;
//   prefix         most leading prompt blocks believed cached (PrefixIndex), then fewest
//                  in-flight; saturated replicas filtered out first (see below);
//   score          the Gateway API Inference Extension's endpoint picker: filter, then the
//                  weighted sum of normalized scorers, highest wins. Defaults are GIE's Helm
//                  profile (autoscaling-anchors.md B.1): queue 2, KV utilization 2, prefix 3;
//                  LoRA affinity 1 (GIE's default scorer weight).
//
// Filters (prefix and score): not-ready replicas never get a request; replicas over GIE's
// saturation thresholds (waiting > 5 or KV >= 0.8) are dropped unless every ready replica is over
// them, so affinity yields to load when one replica is swamped.
//
//   StatusOr<std::unique_ptr<Router>> r = MakeRouter("score");
//   StatusOr<size_t> i = (*r)->Pick(request, replicas);   // index into `replicas`
//   if (!i.ok()) hold the request (UNAVAILABLE: no ready replica)
//
// Deterministic given the sequence of calls (ties go to the lowest index, round-robin keeps a
// counter). Not thread-safe: the gateway serializes Pick per deployment or keeps one router per
// worker.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "fleet/prefix_index.h"

namespace aicloud::fleet {

// What the router knows of one replica (from the engine's metrics and the gateway's own
// bookkeeping).
struct ReplicaView {
  std::string id;
  bool ready = false;
  int queue_depth = 0;                  // waiting requests
  int running = 0;                      // requests in the running batch
  double kv_usage = 0;                  // 0..1
  std::vector<std::string> adapters;    // LoRA adapters resident
  int max_adapters = 0;                 // adapter slots (0 = no LoRA)
};

struct RouteRequest {
  std::string model;
  std::string adapter;                  // empty = base model
  std::vector<uint64_t> prefix_hashes;  // chained block hashes of the prompt
};

class Router {
 public:
  virtual ~Router() = default;
  virtual std::string_view name() const = 0;
  // Index into `replicas` of the chosen one; UNAVAILABLE "no ready replica" when none is ready.
  virtual StatusOr<size_t> Pick(const RouteRequest& request, std::span<const ReplicaView> replicas) = 0;
  // A replica left the deployment: forget what is known about it.
  virtual void RemoveReplica(std::string_view /*id*/) {}
};

struct ScoreWeights {
  double queue = 2;
  double kv = 2;
  double prefix = 3;
  double lora = 1;
};

struct RouterConfig {
  ScoreWeights weights;
  int64_t prefix_capacity_blocks = 31250;  // per replica, in the request's block size
  int max_prefix_blocks = 256;
  int saturation_queue = 5;                // GIE saturation detector queueDepthThreshold
  double saturation_kv = 0.8;              // kvCacheUtilThreshold
};

// "round-robin", "least-request", "prefix", "score"; InvalidArgument listing them otherwise.
StatusOr<std::unique_ptr<Router>> MakeRouter(std::string_view policy, const RouterConfig& config = {});
std::vector<std::string> RouterNames();

}  // namespace aicloud::fleet
