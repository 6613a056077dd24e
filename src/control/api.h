// Api: the REST API of `aicloud server` under /api/v1, in front of the store, the control plane
// and auth. Every request is authenticated (Bearer API key), authorized against RBAC, and every
// mutating call and every denial is written to the audit log — except the agent's heartbeat
// traffic (report, assignments, log pushes: hundreds per second at scale) and the gateways'
// (signals, budget and rate objects: several per second each), whose denials are still
// audited; registrations are audited.
//
//   Api api(store, &auth, &audit, &control_plane, &metrics);
//   auto server = http::Server::Start(opts, [&](http::Request& r) { return api.Handle(r); });
//
// Resources (see docs/api.md for the full table):
//   GET|POST        /api/v1/<plural>                      cluster-scoped kinds (nodes, tenants, ...)
//   GET|PUT|DELETE  /api/v1/<plural>/<name>
//   GET|POST        /api/v1/tenants/<t>/<plural>          tenant-scoped kinds (jobs, queues, ...)
//   GET|PUT|DELETE  /api/v1/tenants/<t>/<plural>/<name>
//   GET             /api/v1/<plural>?watch=true&resourceVersion=N   Server-Sent Events
//   GET             /api/v1/jobs                          jobs of every tenant the caller may see
//   POST            /api/v1/tenants/<t>/jobs/<name>/cancel
//   GET             /api/v1/tenants/<t>/jobs/<name>/logs?worker=0&follow=true
//   POST            /api/v1/nodes/<name>/{cordon,uncordon,drain}
//   POST|DELETE     /api/v1/apikeys[/<id>]                 create (token shown once) / revoke
//   GET             /api/v1/usage?tenant=<t>&since=7d
//   GET             /api/v1/audit/verify
//   GET             /api/v1/whoami
//   agent protocol: /api/v1/agent/nodes/<node>/{register,report,assignments,logs}
//   gateway protocol: /api/v1/gateway/{config,signals,objects} (control/gateway_feed.h)
//   GET /healthz, /readyz, /metrics (no key needed)
//
// Errors: HTTP status + {"error": {"code", "message", "field"}}; bad input is always a 4xx.
#pragma once

#include <atomic>
#include <string>

#include "auth/audit.h"
#include "auth/auth.h"
#include "control/control_plane.h"
#include "control/gateway_feed.h"
#include "control/manifest.h"
#include "core/metrics.h"
#include "http/message.h"
#include "http/router.h"
#include "store/store.h"

namespace aicloud::control {

class Api {
 public:
  Api(store::Store* store, auth::AuthService* auth, auth::AuditLog* audit, ControlPlane* control,
      Metrics* metrics);

  // The server's handler: metrics, request id, then the router.
  http::Response Handle(http::Request& request);

  // Serves the gateway protocol from `feed` (which outlives the Api); without one those routes
  // answer 404. Call before serving.
  void SetGatewayFeed(GatewayFeed* feed) { feed_ = feed; }

  // Set once the server is ready to serve (store open, control plane started).
  void SetReady(bool ready) { ready_ = ready; }

  struct Call;  // per-request context: principal, request id

 private:

  void Routes();
  // The kind served at /api/v1/.../<plural>; nullptr with *not_found set to the 404 otherwise.
  static const KindInfo* KindOrNotFound(const std::string& plural, http::Response* not_found);
  // Authenticates; on failure fills *denied with the 401 response (audited).
  bool Authenticate(http::Request& req, Call* call, http::Response* denied);
  // Authorizes verb on resource in tenant; on denial fills *denied (403, audited).
  bool Allow(Call& call, std::string_view verb, std::string_view resource,
             std::string_view tenant, std::string_view name, http::Response* denied);
  void Audit(const Call& call, std::string_view verb, std::string_view resource,
             std::string_view tenant, std::string_view name, bool allowed,
             const std::string& reason, int status);

  http::Response List(http::Request& req, const std::string& plural, const std::string& tenant,
                      bool tenant_in_path);
  http::Response Watch(http::Request& req, Call& call, const std::string& kind,
                       const std::string& tenant,
                       std::optional<std::vector<std::string>> visible);
  http::Response Create(http::Request& req, const std::string& plural, const std::string& tenant);
  http::Response Get(http::Request& req, const std::string& plural, const std::string& tenant,
                     const std::string& name);
  http::Response Replace(http::Request& req, const std::string& plural, const std::string& tenant,
                         const std::string& name);
  http::Response Delete(http::Request& req, const std::string& plural, const std::string& tenant,
                        const std::string& name);
  // Admission rules for a new Job: tenant exists, limits, per-job and hard quotas.
  Status AdmitJob(const nlohmann::json& job, std::string* warning);

  store::Store* store_;
  auth::AuthService* auth_;
  auth::AuditLog* audit_;
  ControlPlane* control_;
  GatewayFeed* feed_ = nullptr;
  Metrics* metrics_;
  http::Router router_;
  std::atomic<bool> ready_{false};
  std::atomic<uint64_t> request_counter_{0};
  Counter* requests_ = nullptr;
  Histogram* latency_ = nullptr;
};

}  // namespace aicloud::control
