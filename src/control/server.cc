#include "control/server.h"

#include <algorithm>
#include <filesystem>

#include <spdlog/spdlog.h>

#include "store/sqlite/sqlite_store.h"

namespace aicloud::control {

StatusOr<std::unique_ptr<ApiServer>> ApiServer::Start(ServerConfig config) {
  std::unique_ptr<ApiServer> s(new ApiServer());
  s->config_ = config;
  std::error_code ec;
  std::filesystem::create_directories(config.data_dir, ec);
  if (ec) return InvalidArgumentError("data dir " + config.data_dir + ": " + ec.message());
  StatusOr<std::unique_ptr<store::sqlite::SqliteStore>> db =
      store::sqlite::SqliteStore::Open({.path = config.data_dir + "/state.db"});
  if (!db.ok()) return db.status();
  s->store_ = std::move(*db);
  s->auth_ = std::make_unique<auth::AuthService>(s->store_.get(), &s->clock_);
  StatusOr<std::optional<std::string>> token = s->auth_->Bootstrap();
  if (!token.ok()) return token.status();
  s->bootstrap_token_ = *token;
  for (const std::string& role : s->auth_->BuiltinRolesLeftAlone()) {
    spdlog::warn("role {} has no aicloud/builtin label: it is kept as it was made, and the built-in {} role's rules "
                 "are not in force (delete it, or label it aicloud/builtin=true, to get them)",
                 role, role);
  }
  s->auth_->RefreshInBackground();  // key checks on the I/O thread never wait on the store
  s->audit_ = std::make_unique<auth::AuditLog>(s->store_.get(), &s->clock_);
  StatusOr<ReplicaSecrets> secrets = ReplicaSecrets::Load(s->store_.get());
  if (!secrets.ok()) return Status(secrets.status().code(), "replica secrets: " + std::string(secrets.status().message()));
  s->replica_secrets_ = std::make_unique<ReplicaSecrets>(std::move(*secrets));
  // A cluster with TLS encrypts the gateway's traffic to replicas too (replica_ca.h).
  if (!config.tls_cert_file.empty()) {
    StatusOr<ReplicaCa> ca = ReplicaCa::Load(s->store_.get());
    if (!ca.ok()) return ca.status();
    s->replica_ca_ = std::make_unique<ReplicaCa>(std::move(*ca));
  }
  s->control_ = std::make_unique<ControlPlane>(
      s->store_.get(), &s->clock_, &s->metrics_,
      ControlOptions{.data_dir = config.data_dir,
                     .replica_secrets = s->replica_secrets_.get(),
                     .replica_ca = s->replica_ca_.get(),
                     .node_grace = config.node_grace,
                     .policy = config.policy});
  AICLOUD_RETURN_IF_ERROR(s->control_->Start());
  std::string engine = config.engine_binary;
  if (engine.empty()) {
    std::error_code self_ec;
    engine = std::filesystem::read_symlink("/proc/self/exe", self_ec).string();
    if (self_ec) return InternalError("cannot find this executable for deployment replicas: " + self_ec.message());
  }
  ControlPlane* cp = s->control_.get();
  s->deployments_ = std::make_unique<DeploymentController>(
      s->store_.get(), &s->clock_, &s->metrics_,
      DeploymentControllerOptions{.engine_binary = engine,
                                  .replica_secrets = s->replica_secrets_.get(),
                                  .replica_ca_pem = s->replica_ca_ ? s->replica_ca_->ca_pem() : std::string(),
                                  .tick = config.deployment_tick,
                                  .admit = [st = s->store_.get(), cp](const nlohmann::json& job, double unseen_gpus,
                                                                      std::string* warning) {
                                    return AdmitJob(st, cp, job, warning, unseen_gpus);
                                  },
                                  .node_metrics = [cp](const std::string& node) { return cp->NodeMetrics(node); }},
      nullptr,
      [cp] { cp->Wake(); });
  AICLOUD_RETURN_IF_ERROR(s->deployments_->Start());
  s->api_ = std::make_unique<Api>(s->store_.get(), s->auth_.get(), s->audit_.get(), s->control_.get(),
                                  &s->metrics_);
  // A quarter of the workers at most wait in gateways' long polls; the rest serve the API.
  s->gateway_feed_ = std::make_unique<GatewayFeed>(s->store_.get(), s->auth_.get(), s->deployments_.get(),
                                                   std::max(1, config.worker_threads / 4));
  s->api_->SetGatewayFeed(s->gateway_feed_.get());
  http::ServerOptions ho;
  ho.host = config.host;
  ho.port = config.port;
  ho.thread_name = "api";
  ho.worker_threads = config.worker_threads;
  ho.tls_cert_file = config.tls_cert_file;
  ho.tls_key_file = config.tls_key_file;
  ho.tls_client_ca_file = config.tls_client_ca_file;
  Api* api = s->api_.get();
  http::AsyncHandler front;
  if (config.front_door) {
    StatusOr<http::AsyncHandler> f = config.front_door(*s);
    if (!f.ok()) return f.status();
    front = std::move(*f);
  }
  // /v1/* on the I/O thread (the gateway's fast path), the API on the workers.
  StatusOr<std::unique_ptr<http::Server>> h = http::Server::Start(
      ho, [api, front, front_metrics = config.front_door_metrics](http::Request& r, http::Responder respond) {
        if (front && r.path.rfind("/v1/", 0) == 0) return front(r, std::move(respond));
        respond.RunBlocking([api, front_metrics, req = std::move(r)]() mutable {
          http::Response res = api->Handle(req);
          if (front_metrics && req.method == "GET" && req.path == "/metrics" && res.status == 200) {
            res.body += front_metrics();
          }
          return res;
        });
      });
  if (!h.ok()) return h.status();
  s->http_ = std::move(*h);
  s->api_->SetReady(true);
  return s;
}

ApiServer::~ApiServer() { Stop(); }

void ApiServer::Stop() {
  if (gateway_feed_) gateway_feed_->Stop();  // the gateways' long polls answer now
  if (http_) http_->Stop();
  if (config_.front_door_stop) config_.front_door_stop();
  if (deployments_) deployments_->Stop();
  if (control_) control_->Stop();
}

uint16_t ApiServer::port() const { return http_ ? http_->port() : 0; }

std::string ApiServer::url() const {
  const bool tls = !config_.tls_cert_file.empty();
  return std::string(tls ? "https://" : "http://") + config_.host + ":" + std::to_string(port());
}

}  // namespace aicloud::control
