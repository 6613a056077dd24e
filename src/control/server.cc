#include "control/server.h"

#include <filesystem>

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
  s->audit_ = std::make_unique<auth::AuditLog>(s->store_.get(), &s->clock_);
  s->control_ = std::make_unique<ControlPlane>(
      s->store_.get(), &s->clock_, &s->metrics_,
      ControlOptions{.data_dir = config.data_dir, .node_grace = config.node_grace, .policy = config.policy});
  AICLOUD_RETURN_IF_ERROR(s->control_->Start());
  s->api_ = std::make_unique<Api>(s->store_.get(), s->auth_.get(), s->audit_.get(), s->control_.get(),
                                  &s->metrics_);
  http::ServerOptions ho;
  ho.host = config.host;
  ho.port = config.port;
  ho.worker_threads = config.worker_threads;
  ho.tls_cert_file = config.tls_cert_file;
  ho.tls_key_file = config.tls_key_file;
  ho.tls_client_ca_file = config.tls_client_ca_file;
  Api* api = s->api_.get();
  StatusOr<std::unique_ptr<http::Server>> h =
      http::Server::Start(ho, [api](http::Request& r) { return api->Handle(r); });
  if (!h.ok()) return h.status();
  s->http_ = std::move(*h);
  s->api_->SetReady(true);
  return s;
}

ApiServer::~ApiServer() { Stop(); }

void ApiServer::Stop() {
  if (http_) http_->Stop();
  if (control_) control_->Stop();
}

uint16_t ApiServer::port() const { return http_ ? http_->port() : 0; }

std::string ApiServer::url() const {
  const bool tls = !config_.tls_cert_file.empty();
  return std::string(tls ? "https://" : "http://") + config_.host + ":" + std::to_string(port());
}

}  // namespace aicloud::control
