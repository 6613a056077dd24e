// ApiServer: everything `aicloud server` runs, in one object — the SQLite store in a data dir,
// auth (bootstrap, keys, RBAC) and the audit log, the control plane with the scheduler, and the
// HTTP API. `aicloud up` and the end-to-end tests run it in-process.
//
//   auto s = ApiServer::Start({.data_dir = "/var/lib/aicloud", .port = 8080});
//   if ((*s)->bootstrap_token()) std::cout << "admin token: " << *(*s)->bootstrap_token();
//   ... (*s)->Stop();
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "auth/audit.h"
#include "auth/auth.h"
#include "control/api.h"
#include "control/control_plane.h"
#include "core/clock.h"
#include "core/metrics.h"
#include "http/server.h"
#include "store/store.h"

namespace aicloud::control {

struct ServerConfig {
  std::string data_dir;
  std::string host = "127.0.0.1";
  uint16_t port = 8080;  // 0: any free port
  std::string tls_cert_file, tls_key_file, tls_client_ca_file;
  std::chrono::milliseconds node_grace{40000};
  std::string policy = "bestfit";
  int worker_threads = 16;
};

class ApiServer {
 public:
  static StatusOr<std::unique_ptr<ApiServer>> Start(ServerConfig config);
  ~ApiServer();
  void Stop();

  uint16_t port() const;
  std::string url() const;  // http(s)://host:port
  // The admin token when this start bootstrapped an empty data dir (print it once).
  const std::optional<std::string>& bootstrap_token() const { return bootstrap_token_; }

  store::Store* store() { return store_.get(); }
  auth::AuthService* auth() { return auth_.get(); }
  ControlPlane* control() { return control_.get(); }
  auth::AuditLog* audit() { return audit_.get(); }

 private:
  ApiServer() = default;

  ServerConfig config_;
  RealClock clock_;
  Metrics metrics_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<auth::AuthService> auth_;
  std::unique_ptr<auth::AuditLog> audit_;
  std::unique_ptr<ControlPlane> control_;
  std::unique_ptr<Api> api_;
  std::unique_ptr<http::Server> http_;
  std::optional<std::string> bootstrap_token_;
};

}  // namespace aicloud::control
