// What the gateway knows about each engine replica it forwards to: its own in-flight count, the
// engine's last scraped metrics, a pool of keep-alive connections, and whether it recently
// refused connections (ejected, so retries and later requests go elsewhere for a while).
//
//   std::shared_ptr<ReplicaState> r = table.Get("127.0.0.1:8001");
//   std::unique_ptr<http::Client> c = r->Acquire();   // a pooled keep-alive client
//   ... c->Stream(...) ...
//   r->Release(std::move(c));                          // or drop it after an error
//
// Router inputs (ReplicaView) are built from both sources, following GIE's notion of requests
// "assumed" on an endpoint until it reports them: running = the scraped running count; waiting =
// the scraped waiting count + the gateway's in-flight requests the last scrape cannot have seen
// yet (in-flight beyond scraped running + waiting). Without metrics (scraping off, or a server
// with no vLLM metrics) waiting is simply the gateway's in-flight count.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "fleet/router.h"
#include "gateway/directory.h"
#include "http/client.h"

namespace aicloud::gateway {

// The three engine gauges the routers use (vLLM names).
struct EngineMetrics {
  int waiting = 0;       // vllm:num_requests_waiting (summed over label sets)
  int running = 0;       // vllm:num_requests_running
  double kv_usage = 0;   // vllm:kv_cache_usage_perc (or gpu_cache_usage_perc), 0..1, max
  bool any = false;      // at least one of them was present
};
// Parses the Prometheus text of an engine's /metrics.
EngineMetrics ParseEngineMetrics(std::string_view text);

// Thread-safe.
class ReplicaState {
 public:
  // `tls` set: the replica is called over https, trusting it (see ReplicaInfo::tls).
  ReplicaState(std::string url, std::shared_ptr<const http::TlsTrust> tls, std::chrono::milliseconds timeout,
               size_t max_idle);

  const std::string& url() const { return url_; }
  const std::shared_ptr<const http::TlsTrust>& tls() const { return tls_; }

  std::unique_ptr<http::Client> Acquire();
  void Release(std::unique_ptr<http::Client> client);

  std::atomic<int> in_flight{0};
  std::atomic<int64_t> ejected_until_us{0};  // steady micros; > now: skip unless nothing else

  void SetMetrics(const EngineMetrics& m);
  EngineMetrics metrics() const;

 private:
  const std::string url_;
  const std::shared_ptr<const http::TlsTrust> tls_;
  const std::chrono::milliseconds timeout_;
  const size_t max_idle_;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<http::Client>> idle_;  // GUARDED_BY(mu_)
  EngineMetrics metrics_;                            // GUARDED_BY(mu_)
};

// Replica states by url ("host:port"), created on first use. Thread-safe.
class ReplicaTable {
 public:
  ReplicaTable(std::chrono::milliseconds timeout, size_t max_idle_per_replica)
      : timeout_(timeout), max_idle_(max_idle_per_replica) {}

  // The state of the replica at `url`; one made for another `tls` is replaced (the replica
  // changed scheme or CA: its pooled connections and counts do not carry over).
  std::shared_ptr<ReplicaState> Get(const std::string& url, const std::shared_ptr<const http::TlsTrust>& tls = nullptr);
  // Forgets the replicas whose url is not in `keep` (replicas that left every deployment).
  void Retain(const std::vector<std::string>& keep);
  std::vector<std::shared_ptr<ReplicaState>> All() const;

 private:
  const std::chrono::milliseconds timeout_;
  const size_t max_idle_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<ReplicaState>> by_url_;  // GUARDED_BY(mu_)
};

// A fleet::Router behind a mutex (routers are not thread-safe), with ties broken in turn: the
// candidates are rotated by one per call before Pick, because the fleet routers give ties to the
// lowest index, which would send every request to the first replica when nothing tells them
// apart (no metrics yet, no prefix). Round-robin keeps its own turn and is not rotated.
class SharedRouter {
 public:
  explicit SharedRouter(std::unique_ptr<fleet::Router> router)
      : rotate_(router->name() != "round-robin"), router_(std::move(router)) {}
  // Index into `views`; UNAVAILABLE when none is ready.
  StatusOr<size_t> Pick(const fleet::RouteRequest& request, const std::vector<fleet::ReplicaView>& views);
  std::string_view name() const { return router_->name(); }

 private:
  const bool rotate_;
  std::mutex mu_;
  std::unique_ptr<fleet::Router> router_;  // GUARDED_BY(mu_)
  size_t turn_ = 0;                        // GUARDED_BY(mu_)
  std::vector<fleet::ReplicaView> rotated_;  // GUARDED_BY(mu_), reused
};

}  // namespace aicloud::gateway
