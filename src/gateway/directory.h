// Directory: where the gateway learns which model names exist, who owns them and which engine
// replicas serve them. The deployment controller in `aicloud server` implements it from
// Deployment objects; `StaticDirectory` serves `aicloud gateway --upstreams FILE` and tests.
//
//   std::shared_ptr<const Route> r = directory->Lookup("llama-8b");   // or an adapter name
//   if (!r) 404;
//   for (const ReplicaInfo& rep : r->replicas) if (rep.ready) ... rep.url ("127.0.0.1:8001")
//   directory->WantReplicas(r->deployment, 1);   // requests wait: please scale from zero
//
// A Route is an immutable snapshot: implementations publish a new one on every change (a replica
// became ready, an adapter was added) and bump Version(), so a lookup costs one map probe and a
// shared_ptr copy on the request path, with no lock held afterwards.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "http/tls_trust.h"

namespace aicloud::gateway {

struct ReplicaInfo {
  std::string id;      // unique within the deployment (a pod or process name)
  std::string url;     // "host:port" of an `aicloud engine` (or any OpenAI-compatible server)
  bool ready = false;  // the controller's readiness (weights loaded, /health answered)
  bool canary = false; // runs the canary revision (see Route::canary_weight)
  // What the replica demands as "Authorization: Bearer <secret>" on every request (the platform's
  // replica secret, control/replica_secret.h); "" for a replica that demands none.
  std::string secret;
  // Set: the replica serves HTTPS only, with a certificate for its address that this trust
  // verifies (the cluster's replica CA); it is never called over plain HTTP. null: plain HTTP.
  std::shared_ptr<const http::TlsTrust> tls;
};

// One deployment as the gateway sees it.
struct Route {
  std::string deployment;             // the Deployment's name (WantReplicas takes it)
  std::string tenant;                 // the tenant that owns it; its keys may call it
  std::string model;                  // the public name clients send (usually == base_model)
  std::string base_model;             // the name the engine serves (sent upstream)
  std::vector<std::string> adapters;  // LoRA adapters served; they inherit the base's grants
  std::vector<ReplicaInfo> replicas;
  int max_adapters = 0;               // adapter slots per replica (for LoRA affinity; 0 = unknown)
  // While some replicas are marked canary: the percentage of requests sent to them (the others
  // get the rest, spread exactly: 10 means 1 request in every 10). Retries may cross over, and a
  // side with no ready replica sends its share to the other.
  int canary_weight = 0;
  // Price in cost units (e.g. USD) per million tokens, for cost budgets; 0 = free.
  double prompt_price_per_m = 0;
  double completion_price_per_m = 0;

  bool HasAdapter(std::string_view name) const;
  int ReadyCount() const;
};

// Thread-safe: every method may be called from any thread at any time.
class Directory {
 public:
  virtual ~Directory() = default;

  // The route serving `model`: a deployment's public model name or one of its adapters' names.
  // nullptr when no deployment serves it.
  virtual std::shared_ptr<const Route> Lookup(std::string_view model) const = 0;

  // Every route (for /v1/models), in a stable order.
  virtual std::vector<std::shared_ptr<const Route>> List() const = 0;

  // A hint, not a command: `n` replicas of `deployment` are wanted now because requests wait
  // for it (scale from zero). Called on the request path: must not block for long.
  virtual void WantReplicas(std::string_view deployment, int n) = 0;

  // A request for `deployment` was admitted or finished: it is in use (scale to zero measures
  // idleness from the last of these). Called on the request path: must be cheap.
  virtual void NoteActivity(std::string_view deployment) { (void)deployment; }
  // A request for `deployment` was admitted (an arrival, for the autoscaler's arrival rate; also
  // activity). Called on the request path: must be cheap.
  virtual void NoteArrival(std::string_view deployment) { NoteActivity(deployment); }

  // Change notification. Version() increases on every change of any route; WaitForChange
  // blocks until Version() != seen or the timeout passes and returns Version(). The default
  // implementation has no notification: it sleeps min(timeout, 50 ms) and reports Version(),
  // so callers poll; implementations should override both (DirectoryNotifier helps).
  virtual uint64_t Version() const { return 0; }
  virtual uint64_t WaitForChange(uint64_t seen, std::chrono::milliseconds timeout);
};

// Version counter + condition variable for Directory implementations.
class DirectoryNotifier {
 public:
  uint64_t Version() const;
  void Bump();
  uint64_t WaitForChange(uint64_t seen, std::chrono::milliseconds timeout);

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  uint64_t version_ = 1;  // GUARDED_BY(mu_)
};

// A Directory held in memory: filled from an upstreams file (see config.h) or by calls (tests,
// embedding). WantReplicas only counts the wish and calls the optional hook.
class StaticDirectory final : public Directory {
 public:
  StaticDirectory() = default;
  explicit StaticDirectory(std::vector<Route> routes);

  std::shared_ptr<const Route> Lookup(std::string_view model) const override;
  std::vector<std::shared_ptr<const Route>> List() const override;
  void WantReplicas(std::string_view deployment, int n) override;
  void NoteActivity(std::string_view) override { activity_.fetch_add(1, std::memory_order_relaxed); }
  uint64_t Version() const override { return notifier_.Version(); }
  uint64_t WaitForChange(uint64_t seen, std::chrono::milliseconds timeout) override {
    return notifier_.WaitForChange(seen, timeout);
  }

  // Adds or replaces the route of route.deployment. INVALID_ARGUMENT when its model or an
  // adapter name is already served by another deployment.
  Status Upsert(Route route);
  Status Remove(std::string_view deployment);
  // Replaces the replicas of `deployment` (NOT_FOUND when unknown).
  Status SetReplicas(std::string_view deployment, std::vector<ReplicaInfo> replicas);
  // Sets one replica's readiness (NOT_FOUND for an unknown deployment or replica id).
  Status SetReady(std::string_view deployment, std::string_view replica_id, bool ready);

  // Called (outside the lock) by WantReplicas: tests start a replica when asked.
  void OnWant(std::function<void(const std::string& deployment, int n)> hook);
  // The largest n asked for `deployment` so far (0 if never).
  int Wanted(std::string_view deployment) const;
  // NoteActivity calls so far (any deployment).
  int64_t Activity() const { return activity_.load(std::memory_order_relaxed); }

 private:
  void RebuildIndexLocked();

  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<const Route>, std::less<>> by_deployment_;  // GUARDED_BY(mu_)
  std::map<std::string, std::shared_ptr<const Route>, std::less<>> by_model_;       // GUARDED_BY(mu_)
  std::map<std::string, int, std::less<>> wanted_;                                  // GUARDED_BY(mu_)
  std::function<void(const std::string&, int)> on_want_;                           // GUARDED_BY(mu_)
  DirectoryNotifier notifier_;
  std::atomic<int64_t> activity_{0};
};

}  // namespace aicloud::gateway
