// GatewayFeed: the server's half of the protocol of standalone gateways (`aicloud gateway
// --server URL`, gateway/control_link.h), served by the API under /api/v1/gateway/ to keys with
// the built-in `gateway` role:
//
//   GET  /api/v1/gateway/config?version=V&waitMs=N   the serving state; long-polls while it is V
//   POST /api/v1/gateway/signals                      arrivals, activity and held requests
//   GET  /api/v1/gateway/objects/<kind>[/<name>]?tenant=T&limit=N&continue=C
//   POST /api/v1/gateway/objects                      {"ops": [...]}: one atomic commit
//
// The serving state is one JSON document, what the server's own front door reads from memory:
//
//   {"version": "9f2c...",                       changes whenever anything below changes
//    "routes": [{"deployment": "acme/chat", "tenant": "acme", "model": "chat",
//                "adapters": ["sql"], "maxAdapters": 4, "canaryWeight": 0,
//                "replicas": [{"id": "chat-r1", "url": "10.0.0.7:21000", "ready": true,
//                              "canary": false}]}],
//    "keys": [{"id": "3f9a...", "hash": "<sha256 hex of the secret>", "tenant": "acme",
//              "expiresAt": 1767225600, "allModels": false}],   the keys that authenticate now
//    "tenants": {"acme": {"rpm": 600, "budgetTokens": 100000, ...}}}  Tenant spec.serving
//
// Keys travel as SHA-256 digests of their secrets, as the store keeps them; a token cannot be
// derived from one. Signals: {"deployments": [{"name": "acme/chat", "arrivals": 12,
// "active": true, "held": 1}]}, the sums since the gateway's last post (sent every 200 ms while
// there are any, at once when a request starts waiting). Objects: the GatewayBudget and
// GatewayRate objects through which gateways share budgets and rate limits (gateway/budget.h,
// gateway/rate_share.h), and the ServingUsage objects they add tenants' usage to
// (gateway/usage_tally.h); no other kind is reachable here.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>

#include "auth/auth.h"
#include "control/deployment_controller.h"
#include "core/status.h"
#include "http/cancel.h"
#include "store/store.h"

namespace aicloud::control {

// The JSON of one served route, as the feed sends it and the server's front door reads it:
// {deployment, tenant, model, adapters, maxAdapters, canaryWeight, replicas: [{id, url
// ("host:port"), ready, canary, secret?, tls?}], replicaCa?}. When the cluster has TLS each
// replica has "tls": true (call it over https) and the route carries, once, "replicaCa": the PEM
// of the CA their certificates must chain to (gateway::RouteFromJson).
nlohmann::json ServingRouteJson(const ServingRoute& route);

// Thread-safe.
class GatewayFeed {
 public:
  // A long poll holds one of the API's worker threads while it waits: at most `max_waiters` wait
  // at once, later ones are answered at once (the gateway then polls again after a pause).
  GatewayFeed(store::Store* store, auth::AuthService* auth, DeploymentController* deployments, int max_waiters = 16);

  // The serving state now (see above). UNAVAILABLE while keys or tenants cannot be read.
  StatusOr<nlohmann::json> Build();
  // The state once its version differs from `seen`, or as it is when `wait` has passed, the
  // client has gone (`client_gone` raised) or the feed is stopping.
  StatusOr<nlohmann::json> Wait(const std::string& seen, std::chrono::milliseconds wait,
                                const http::CancelSignal* client_gone = nullptr);
  // Ends every wait within one look (100 ms); later polls are answered at once. For the
  // server's shutdown, which waits for the handlers.
  void Stop();

  // Applies a gateway's signals to the deployment controller. INVALID_ARGUMENT naming the field
  // for a malformed body; names of deployments the controller does not serve are skipped.
  Status Signal(const nlohmann::json& body);

  // The objects endpoints. INVALID_ARGUMENT for a kind other than GatewayBudget, GatewayRate and
  // ServingUsage.
  StatusOr<nlohmann::json> Get(const std::string& kind, const std::string& tenant, const std::string& name);
  StatusOr<nlohmann::json> List(const std::string& kind, const std::optional<std::string>& tenant, int64_t limit,
                                const std::string& continue_token);
  StatusOr<nlohmann::json> Commit(const nlohmann::json& body);

 private:
  // A part of the document and the hash of its text (the version combines the three).
  struct Part {
    std::shared_ptr<const nlohmann::json> value;
    size_t hash = 0;
  };
  struct Parts {
    Part routes, keys, tenants;
    std::string version;
  };
  static Part PartOf(nlohmann::json value);
  static nlohmann::json Document(const Parts& parts);
  StatusOr<Parts> Current();
  StatusOr<Part> Keys();     // rebuilt when the auth service's epoch moved
  StatusOr<Part> Tenants();  // re-read when the store's revision moved

  store::Store* const store_;
  auth::AuthService* const auth_;
  DeploymentController* const deployments_;
  const int max_waiters_;
  std::atomic<int> waiters_{0};
  std::atomic<bool> stopping_{false};
  std::mutex mu_;
  int64_t tenants_revision_ = -1;        // GUARDED_BY(mu_): the store revision tenants_ was read at
  Part tenants_;                         // GUARDED_BY(mu_)
  std::optional<uint64_t> keys_epoch_;   // GUARDED_BY(mu_): the auth epoch keys_ was built at
  Part keys_;                            // GUARDED_BY(mu_)
};

}  // namespace aicloud::control
