// ControlLink: a gateway running apart from the server (`aicloud gateway --server URL`) serves the
// server's Deployments with the server's API keys, tenant limits and budgets, as the server's
// own front door does; several such gateways behind a load balancer act as one.
//
//   StatusOr<std::unique_ptr<ControlLink>> link = ControlLink::Connect(
//       {.server_url = "https://cp:8443", .token = gateway_key});   // a key with the gateway role
//   Gateway::Create({.directory = (*link)->directory(), .authenticate = (*link)->authenticator(),
//                    .auth_epoch = (*link)->auth_epoch(), .usage = &sink,
//                    .store = (*link)->store()}, options);
//
// What travels (the server's half: control/gateway_feed.h):
// - The serving state — routes (deployments, adapters, replicas and their readiness, canary
//   weights), the keys that authenticate (id, SHA-256 of the secret, tenant, expiry, whether it
//   may call every model) and the tenants' serving limits — is long-polled from GET
//   /api/v1/gateway/config: the server answers when it changed (it looks every 100 ms) or after
//   `poll_wait`. Requests are checked against the copy in memory, so the I/O thread never waits on
//   the server. While the server is unreachable the last state keeps serving, for `max_stale`
//   at most (then every request gets 503: revocations would go unseen); the link retries every
//   `retry` and says so once on its log, and again when it is back. A server that refuses this
//   gateway's own key (revoked, role withdrawn) stops it serving at once.
// - Signals go back in POST /api/v1/gateway/signals: per deployment the arrivals since the last
//   post, whether it was active, and requests held for a replica — every `signal_period` while
//   there are any, and at once when a request starts waiting (scale from zero).
// - store() is a store::Store over /api/v1/gateway/objects, reaching only the GatewayBudget,
//   GatewayRate and ServingUsage objects: the budget ledger, the shared rate limits and the
//   tenants' usage of every gateway (and of the server's front door) meet there, so concurrent
//   requests through any of them cannot overspend one budget, and usage adds up. It serves Get,
//   List and Commit; Changes answers UNIMPLEMENTED.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/metrics.h"
#include "core/status.h"
#include "gateway/access.h"
#include "gateway/directory.h"
#include "http/cancel.h"
#include "http/client.h"
#include "store/store.h"

namespace aicloud::gateway {

// A route of the serving state ({"deployment", "tenant", "model", "adapters", "maxAdapters",
// "canaryWeight", "replicas": [{"id", "url", "ready", "canary"}]}). INVALID_ARGUMENT naming the
// field when malformed.
StatusOr<Route> RouteFromJson(const nlohmann::json& j);
// A Tenant's spec.serving ({rpm, tpm, budgetTokens, budgetCost, budgetPeriodSeconds}); absent or
// mistyped fields are 0 (no limit), as the server's front door reads them.
Limits LimitsFromServing(const nlohmann::json& serving);

struct ControlLinkOptions {
  std::string server_url;          // "http://127.0.0.1:8080" or https://...
  std::string token;               // an API key whose user has the `gateway` role (or cluster-admin)
  http::ClientOptions client;      // TLS files; the timeout is set per call
  std::chrono::milliseconds poll_wait{20000};
  std::chrono::milliseconds signal_period{200};
  std::chrono::milliseconds retry{1000};
  std::chrono::milliseconds call_timeout{3000};  // the first read, signals and objects
  // Keys are refused (503) once the server has not been reached for this long: revocations made
  // meanwhile would not be seen. 0 = serve the last state however old.
  std::chrono::milliseconds max_stale{std::chrono::minutes(10)};
  // Where the link reports losing and regaining the server (default: stderr).
  std::function<void(const std::string&)> log;
};

// Thread-safe.
class ControlLink {
 public:
  // Reads the serving state once, then follows it on a thread. The server's refusal when it
  // cannot: UNAUTHENTICATED (a bad token), PERMISSION_DENIED (no gateway role), UNAVAILABLE
  // (unreachable), each naming the server.
  static StatusOr<std::unique_ptr<ControlLink>> Connect(ControlLinkOptions options);
  ~ControlLink();
  ControlLink(const ControlLink&) = delete;
  ControlLink& operator=(const ControlLink&) = delete;

  Directory* directory();
  Authenticator authenticator();
  std::function<uint64_t()> auth_epoch();
  store::Store* store();

  // Sends the signals still pending and stops the threads. Idempotent.
  void Stop();

  // Applies a serving state (what the thread does with each answer; tests). INVALID_ARGUMENT
  // naming the field when its shape is wrong: the state in force stays. A malformed route or key
  // is left out, the rest applied (stats().skipped).
  Status Apply(const nlohmann::json& doc);

  // aicloud_gateway_link_* gauges, read from stats() at each scrape: whether the last poll
  // reached the server, states applied, signal posts sent and failed. The link must outlive
  // `metrics`' renders.
  void ExportMetrics(Metrics* metrics);

  struct Stats {
    std::string version;   // of the state in force
    size_t routes = 0, keys = 0, tenants = 0;
    uint64_t applied = 0;  // states applied so far
    int64_t signals_sent = 0, signals_failed = 0;
    bool connected = true;  // the last poll reached the server
    uint64_t poll_failures = 0;  // polls that failed (unreachable, refused, malformed)
    size_t skipped = 0;         // malformed entries left out of the state in force
    std::string skipped_first;  // why the first of them was
  };
  Stats stats() const;

 private:
  class LinkedDirectory;
  class RemoteStore;
  struct KeyTable;

  explicit ControlLink(ControlLinkOptions options);
  StatusOr<nlohmann::json> Poll(http::Client& client, const std::string& version, std::chrono::milliseconds wait);
  void FeedLoop();
  void SignalLoop();
  // Posts what is pending; false when the post failed (what it carried is pending again).
  bool SendSignals();
  void Log(const std::string& line) const;
  // Why keys cannot be checked now (refused by the server, or state older than max_stale); OK
  // when they can.
  Status Untrusted() const;

  const ControlLinkOptions options_;
  std::unique_ptr<LinkedDirectory> directory_;
  std::unique_ptr<RemoteStore> store_;

  mutable std::mutex keys_mu_;
  std::shared_ptr<const KeyTable> keys_;  // GUARDED_BY(keys_mu_)

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;  // GUARDED_BY(mu_)
  Stats stats_;            // GUARDED_BY(mu_)
  std::atomic<int64_t> last_ok_us_{0};  // steady micros of the last successful poll
  std::atomic<int64_t> polling_since_us_{0};  // when the long poll now out (after a good one) was sent
  std::atomic<bool> refused_{false};    // the server refused this gateway's key at the last poll
  std::atomic<uint64_t> untrusted_epoch_{0};
  std::unique_ptr<http::Client> feed_client_;  // the feed thread's
  http::CancelSignal poll_cancel_;
  std::thread feed_;
  std::thread signals_;
};

}  // namespace aicloud::gateway
