// ApiServer: everything `aicloud server` runs, in one object — the SQLite store in a data dir,
// auth (bootstrap, keys, RBAC) and the audit log, the control plane with the scheduler, the
// deployment controller, and the HTTP API; requests under /v1/ go to the OpenAI front door the
// caller builds (`aicloud server` plugs the gateway in there). `aicloud up` and the end-to-end
// tests run it in-process.
//
//   auto s = ApiServer::Start({.data_dir = "/var/lib/aicloud", .port = 8080});
//   if ((*s)->bootstrap_token()) std::cout << "admin token: " << *(*s)->bootstrap_token();
//   ... (*s)->Stop();
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "auth/audit.h"
#include "auth/auth.h"
#include "control/api.h"
#include "control/control_plane.h"
#include "control/deployment_controller.h"
#include "control/replica_ca.h"
#include "control/replica_secret.h"
#include "core/clock.h"
#include "core/metrics.h"
#include "http/router.h"
#include "http/server.h"
#include "store/store.h"

namespace aicloud::control {

class ApiServer;

struct ServerConfig {
  std::string data_dir;
  std::string host = "127.0.0.1";
  uint16_t port = 8080;  // 0: any free port
  std::string tls_cert_file, tls_key_file, tls_client_ca_file;
  std::chrono::milliseconds node_grace{40000};
  std::string policy = "bestfit";
  int worker_threads = 16;
  // What Deployment replicas run (`<engine_binary> engine ...`); "" = this executable.
  std::string engine_binary;
  std::chrono::milliseconds deployment_tick{1000};
  // Builds the handler of /v1/* (the OpenAI front door) once the store, auth and controllers
  // exist; unset = /v1/* answers 404. It runs on the I/O thread (http::AsyncHandler) and hands
  // what may block (held and streamed requests) to the workers, so worker_threads should be
  // large enough for those.
  std::function<StatusOr<http::AsyncHandler>(ApiServer&)> front_door;
  // Appended to GET /metrics (the front door's own metrics); unset = none.
  std::function<std::string()> front_door_metrics;
  // Called by Stop() once HTTP has stopped and before the controllers do (the front door's
  // threads read the deployment controller).
  std::function<void()> front_door_stop;
};

class ApiServer {
 public:
  static StatusOr<std::unique_ptr<ApiServer>> Start(ServerConfig config);
  ~ApiServer();
  void Stop();

  uint16_t port() const;
  // The replica CA when the server has TLS (replicas serve HTTPS with its certificates); else null.
  const ReplicaCa* replica_ca() const { return replica_ca_.get(); }
  std::string url() const;  // http(s)://host:port
  // The admin token when this start bootstrapped an empty data dir (print it once).
  const std::optional<std::string>& bootstrap_token() const { return bootstrap_token_; }

  store::Store* store() { return store_.get(); }
  auth::AuthService* auth() { return auth_.get(); }
  ControlPlane* control() { return control_.get(); }
  DeploymentController* deployments() { return deployments_.get(); }
  Metrics* metrics() { return &metrics_; }
  Clock* clock() { return &clock_; }
  auth::AuditLog* audit() { return audit_.get(); }

 private:
  ApiServer() = default;

  ServerConfig config_;
  RealClock clock_;
  Metrics metrics_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<auth::AuthService> auth_;
  std::unique_ptr<auth::AuditLog> audit_;
  std::unique_ptr<ReplicaSecrets> replica_secrets_;
  std::unique_ptr<ReplicaCa> replica_ca_;  // only when the server has TLS
  std::unique_ptr<ControlPlane> control_;
  std::unique_ptr<DeploymentController> deployments_;
  std::unique_ptr<GatewayFeed> gateway_feed_;
  std::unique_ptr<Api> api_;
  std::unique_ptr<http::Server> http_;
  std::optional<std::string> bootstrap_token_;
};

}  // namespace aicloud::control
