// Gateway: the OpenAI front door in front of engine replicas. One request goes through:
//
//   authenticate (Authenticator)  ->  parse model/stream/max_tokens  ->  look up the route
//   (Directory)  ->  RBAC (MayUse)  ->  rate limits (rpm/tpm, key and tenant)  ->  reserve
//   budget  ->  hold while the deployment has no ready replica (scale from zero)  ->  pick a
//   replica (fleet router)  ->  forward, retrying another replica on connection failure  ->
//   stream or return the answer  ->  settle budget and tpm with the real usage  ->  usage
//   record + metrics.
//
//   StaticDirectory dir(...);                      // or the server's deployment directory
//   StaticKeys keys;  keys.Add("sk-1", {.key_id = "k1", .tenant = "nlp"});
//   LogUsageSink sink;
//   StatusOr<std::unique_ptr<Gateway>> gw = Gateway::Create(
//       {.directory = &dir, .authenticate = keys.AsAuthenticator(), .usage = &sink}, {});
//   http::Router router;
//   (*gw)->AddRoutes(&router);                     // /v1/models, /v1/chat/completions, ...
//   router.Add("GET", "/metrics", [&](http::Request&) { return (*gw)->MetricsResponse(); });
//
// Errors are OpenAI-shaped (errors.h): 400 bad body, 401 no/invalid key, 403 model not granted,
// 404 unknown model, 429 rate limit / budget / hold queue full (with Retry-After and a message
// naming the limit), 502 every replica failed, 503 no replica became ready in time, 504 upstream
// timeout. Upstream answers (including the engine's own 4xx) pass through unchanged.
//
// Threads: the POST routes are async (http/responder.h). Served by an async http Server
// (GatewayServer), the common case — a unary request that passes its checks while its deployment
// has a ready replica — runs on the server's I/O thread from start to end: admission inline, the
// upstream call through AsyncClient on the same event loop (keep-alive pool per replica), the
// answer, settlement and usage record in its completion (the "fast" path). What has to wait runs
// on the worker pool as before: a held request (scale from zero) blocks one worker, a streaming
// request uses the server's stream thread plus one pump thread that reads the upstream; give the
// server enough workers for them (GatewayServer: ServerOptions.worker_threads). Called through the
// blocking Router::Dispatch (the API server's front door), every request runs on the caller's
// thread. Background: one thread scrapes replica metrics; another flushes the budget ledger and
// exchanges rate-limit totals with the other gateways (RateShare), so slow scrapes cannot delay
// the store's leases.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "core/clock.h"
#include "core/metrics.h"
#include "core/status.h"
#include "fleet/router.h"
#include "gateway/access.h"
#include "gateway/budget.h"
#include "gateway/rate_share.h"
#include "gateway/directory.h"
#include "gateway/limits.h"
#include "gateway/replicas.h"
#include "gateway/request.h"
#include "gateway/usage.h"
#include "http/async_client.h"
#include "http/message.h"
#include "http/responder.h"
#include "http/router.h"
#include "http/server.h"
#include "store/store.h"

namespace aicloud::gateway {

struct GatewayOptions {
  std::string policy = "score";             // fleet::RouterNames(): round-robin, least-request, prefix, score
  fleet::RouterConfig router;               // GIE weights and saturation thresholds
  std::chrono::milliseconds scrape_period{500};  // replica /metrics; 0 = never scrape
  int hold_queue_size = 64;                 // per deployment, while no replica is ready; more -> 429
  std::chrono::milliseconds hold_timeout{30000};  // then 503
  std::chrono::milliseconds upstream_timeout{300000};  // connect + head, then between chunks
  int max_attempts = 3;                     // upstream attempts per request (connection failures)
  std::chrono::milliseconds eject_for{5000};  // a replica that refused a connection is skipped
  int64_t default_max_tokens = 1024;        // assumed when a request has none; sent upstream for
                                            // callers with a budget, so the reservation holds
  size_t prefix_block_bytes = 256;          // see request.h
  size_t stream_buffer_bytes = 64 << 10;    // unread upstream bytes per stream before back-pressure
  std::chrono::milliseconds flush_period{1000};  // budget ledger and rate totals <-> store
  size_t max_idle_connections = 256;        // keep-alive connections kept per replica (and I/O loop)
  // Run unary requests on the I/O thread with an async upstream call when served by an async
  // Server (see Threads above). The authenticator, directory and usage sink must then not block
  // (StaticKeys, StaticDirectory and LogUsageSink do not). false: every request takes a worker.
  bool fast_path = true;
  // Bodies larger than this are parsed on a worker even on the fast path: an 8 MiB prompt takes
  // tens of milliseconds to parse, which the I/O thread would take from every other connection.
  // Reading 256 KiB (~64k tokens) costs the I/O thread ~0.1 ms, less than a worker's hand-offs.
  size_t inline_body_bytes = 256 << 10;
};

struct GatewayDeps {
  Directory* directory = nullptr;      // required; outlives the gateway
  Authenticator authenticate;          // required
  // When set, a caller authenticated on a kept-alive connection is used again for the
  // connection's next requests that send the same Authorization header, for as long as this
  // returns the same value: the authenticator must change it whenever what a key authenticates
  // to may change (added, revoked, expired, edited). Unset: every request is authenticated.
  // StaticKeys::AsEpoch fits (its keys are only ever added).
  std::function<uint64_t()> auth_epoch;
  UsageSink* usage = nullptr;          // null: records are dropped
  store::Store* store = nullptr;       // null: budgets in memory only
  Clock* clock = nullptr;              // limits and budgets; null: a RealClock
};

// Thread-safe. Stop() (or the destructor) before the directory, sink or store go away.
class Gateway {
 public:
  // INVALID_ARGUMENT for a missing directory/authenticator or an unknown policy; the store's
  // error when the budget ledger cannot be read.
  static StatusOr<std::unique_ptr<Gateway>> Create(GatewayDeps deps, GatewayOptions options);
  ~Gateway();
  Gateway(const Gateway&) = delete;
  Gateway& operator=(const Gateway&) = delete;

  // GET /v1/models, POST /v1/chat/completions, /v1/completions, /v1/embeddings.
  void AddRoutes(http::Router* router);
  // One request, run on the calling thread (it may block).
  http::Response Handle(Endpoint endpoint, http::Request& req);
  // One request from an async Server's I/O thread: the fast path, or a hand-off to a worker.
  void HandleAsync(Endpoint endpoint, http::Request& req, http::Responder respond);
  http::Response ListModels(http::Request& req);
  // Prometheus text of the gateway's metrics.
  http::Response MetricsResponse() const;
  Metrics& metrics() { return metrics_; }

  // Stops the background thread, waits for streams' pump threads, flushes the ledger.
  void Stop();

  BudgetLedger& ledger() { return ledger_; }
  int Held(std::string_view deployment);
  std::string_view policy() const { return options_.policy; }

 private:
  struct Call;
  struct DeploymentState;
  struct Pipe;
  struct Attempted;
  struct AsyncForward;

  Gateway(GatewayDeps deps, GatewayOptions options);
  // The request's caller: the connection's remembered one (GatewayDeps::auth_epoch), else the
  // authenticator's, remembered for the connection's next requests.
  StatusOr<CallerRef> Authenticate(http::Request& req);
  // Steps up to the replica wait: who, what, route, RBAC, rate limits, budget, upstream body.
  // The refusal (already recorded), or nullopt with *route set and the call admitted. With
  // may_block false (on an I/O thread), nullopt with *route null when the budget needs a store
  // round trip first: nothing was taken and `req` is untouched; admit it again on a worker.
  std::optional<http::Response> Admit(Endpoint endpoint, http::Request& req, Call& call,
                                      std::shared_ptr<const Route>* route, bool may_block);
  // The rest for an admitted call: hold for a replica, then forward (blocking).
  http::Response Proceed(Call& call, std::shared_ptr<const Route> route);
  DeploymentState& State(const std::string& deployment);
  // Stamp then Account: what every answer goes through.
  http::Response Finish(Call& call, http::Response r);
  // The answer's status and latency into the record, and its x-request-id header.
  void Stamp(Call& call, http::Response& r);
  // Metrics and the usage record of a stamped answer (a stream's record is written when it ends).
  void Account(Call& call, bool stream);
  http::Response Refuse(Call& call, std::string_view reason, http::Response r);
  // Holds the request until `route` has a ready replica; nullptr and *refusal set when it cannot.
  std::shared_ptr<const Route> WaitForReplica(Call& call, std::shared_ptr<const Route> route, http::Response* refusal);
  // *secret points into `route` (the replica's secret, presented upstream as a bearer token).
  std::shared_ptr<ReplicaState> PickReplica(Call& call, const Route& route, const std::vector<std::string>& tried,
                                            std::string* replica_id, const std::string** secret);
  Attempted Forward(Call& call, const Route& route, const std::function<bool(std::string_view)>& on_chunk,
                    const std::function<void(const http::ClientResponse&, const std::string& replica_id)>& on_head);
  http::Response Unary(Call& call, const Route& route);
  // The answer to a unary request from what forwarding got (settles and records the call).
  http::Response UnaryAnswer(Call& call, const Route& route, Attempted a, std::string body);
  // The same on the fast path, answering through `f->respond`: a complete upstream answer is
  // settled, then goes to the client, and its metrics and usage record follow, off the client's
  // path (a usage sink may see the record a moment after the client saw the answer).
  void RespondUnary(AsyncForward& f, Attempted a, std::string body);
  // The client's answer to a complete upstream answer (status, content type, body, replica).
  static http::Response ForwardedAnswer(const Attempted& a, std::string body);
  void TryNextReplica(std::shared_ptr<AsyncForward> f);
  http::Response ClientGone(Call& call, const Route& route, const std::string& replica_id);
  void Eject(ReplicaState& replica);
  http::Response Streaming(Call& call, const Route& route);
  void Settle(Call& call, const Route& route, bool answered, std::optional<TokenUsage> usage, int64_t chunks);
  void Background();  // scrapes the replicas' metrics
  void Syncer();      // budget flushes and rate exchanges with the store
  // Drops the rate buckets (full again) and budget entries (holding nothing) of keys and tenants
  // idle for kIdleScopeUs, so memory holds the scopes in use, not every scope ever seen; the
  // Syncer does it every minute.
  void PruneIdleScopes();
  static constexpr int64_t kIdleScopeUs = 600'000'000;  // RateShare's publication window
  static constexpr int64_t kPrunePeriodUs = 60'000'000;
  int64_t WallSeconds() const;  // Unix seconds, from the injected clock
  static int64_t RateLeaseSeconds(const GatewayOptions& o);

  GatewayDeps deps_;
  const GatewayOptions options_;
  std::unique_ptr<Clock> own_clock_;
  Clock* clock_;
  const std::chrono::system_clock::time_point wall_anchor_;
  const int64_t clock_anchor_;
  RateLimiter limiter_;
  BudgetLedger ledger_;
  std::unique_ptr<RateShare> rates_;  // with a store: rpm/tpm shared with the other gateways
  ReplicaTable replicas_;
  http::AsyncClient upstream_;  // the fast path's; its connections live in the server's loops
  std::string id_prefix_;
  std::atomic<uint64_t> next_id_{1};

  std::mutex states_mu_;
  std::map<std::string, std::unique_ptr<DeploymentState>, std::less<>> states_;  // GUARDED_BY(states_mu_)

  Metrics metrics_;
  Counter* requests_;
  Counter* rejected_;
  Counter* handled_;
  Counter* tokens_;
  Counter* retries_;
  Counter* client_gone_;
  Counter* cost_;
  Histogram* latency_;
  Histogram* overhead_;
  // Series every request updates, bound once (metrics.h): the path counts, the overhead, and per
  // model name (ModelSeriesOf) a 200's count, the latency and the tokens.
  struct ModelSeries;
  const ModelSeries* ModelSeriesOf(const std::string& model);
  Counter::Cell* handled_fast_;
  Counter::Cell* handled_worker_;
  Histogram::Cell* overhead_all_;
  std::mutex model_series_mu_;
  std::unordered_map<std::string, std::unique_ptr<ModelSeries>> model_series_;  // GUARDED_BY(model_series_mu_)

  std::mutex bg_mu_;
  std::condition_variable bg_cv_;
  bool stopping_ = false;  // GUARDED_BY(bg_mu_)
  int pumps_ = 0;          // GUARDED_BY(bg_mu_): streaming pump threads running
  std::thread background_;
  std::thread syncer_;
  std::atomic<bool> stopped_{false};
};

// A standalone gateway HTTP server: the gateway's routes plus GET /metrics and GET /health.
class GatewayServer {
 public:
  // Serves the gateway's async routes (the fast path runs on options.io_threads).
  // options.worker_threads is raised to at least `min_workers`: held requests and streams take
  // one each.
  static StatusOr<std::unique_ptr<GatewayServer>> Start(Gateway* gateway, http::ServerOptions options,
                                                        int min_workers = 64);
  uint16_t port() const { return server_->port(); }
  void Stop() { server_->Stop(); }

 private:
  std::unique_ptr<http::Router> router_;
  std::unique_ptr<http::Server> server_;
};

}  // namespace aicloud::gateway
