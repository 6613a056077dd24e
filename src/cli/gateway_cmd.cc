// `aicloud gateway`: the OpenAI front door for engine replicas, either those of an `aicloud
// server`'s Deployments with its keys, limits and budgets (--server; gateway/control_link.h), or
// those listed in an upstreams file (models, replicas, tenants' limits, API keys). See
// docs/gateway.md.
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>

#include <fmt/format.h>

#include "cli/commands.h"
#include "gateway/config.h"
#include "gateway/control_link.h"
#include "gateway/gateway.h"
#include "gateway/usage_tally.h"
#include "store/sqlite/sqlite_store.h"

namespace aicloud::cli {
namespace {

struct GatewayFlags {
  std::string upstreams;
  std::string server, token, ca_file, cert_file, key_file;
  double max_stale_s = 600;
  std::string listen = "127.0.0.1:8080";
  std::string policy = "score";
  int threads = 1;
  int workers = 256;
  int scrape_ms = 500;
  int hold_queue = 64;
  double hold_timeout_s = 30;
  double upstream_timeout_s = 300;
  int64_t default_max_tokens = 1024;
  std::string usage_log = "-";
  std::string budget_db;
  bool no_fast_path = false;
};

int Fail(const Status& st) {
  std::cerr << "error: " << st.message() << "\n";
  return 1;
}

StatusOr<std::pair<std::string, uint16_t>> ParseListen(const std::string& s) {
  const size_t colon = s.rfind(':');
  if (colon == std::string::npos || colon + 1 == s.size()) {
    return InvalidArgumentError("--listen: \"" + s + "\" is not HOST:PORT");
  }
  std::string host = s.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  int port = -1;
  try {
    size_t used = 0;
    port = std::stoi(s.substr(colon + 1), &used);
    if (used != s.size() - colon - 1) port = -1;
  } catch (const std::exception&) {
  }
  if (port < 0 || port > 65535) return InvalidArgumentError("--listen: \"" + s + "\": bad port");
  return std::make_pair(host.empty() ? std::string("0.0.0.0") : host, static_cast<uint16_t>(port));
}

int Run(const GatewayFlags& f) {
  if (f.upstreams.empty() == f.server.empty()) {
    return Fail(InvalidArgumentError("give either --server URL (serve an aicloud server's Deployments) or --upstreams FILE"));
  }
  StatusOr<std::pair<std::string, uint16_t>> listen = ParseListen(f.listen);
  if (!listen.ok()) return Fail(listen.status());
  if (f.threads < 1) return Fail(InvalidArgumentError("--threads: must be >= 1"));

  // SIGINT/SIGTERM are taken by sigwait below: blocked before any thread starts (the link's).
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);

  // Where the routes, keys and limits come from.
  std::unique_ptr<gateway::ControlLink> link;
  std::unique_ptr<gateway::StaticDirectory> static_directory;
  gateway::StaticKeys keys;
  gateway::Directory* directory = nullptr;
  gateway::Authenticator authenticate;
  std::function<uint64_t()> auth_epoch;
  std::string what;
  if (!f.server.empty()) {
    if (!f.budget_db.empty()) {
      return Fail(InvalidArgumentError("--budget-db: with --server, budgets are kept by the server (leave it out)"));
    }
    std::string token = f.token;
    if (token.empty() && std::getenv("AICLOUD_TOKEN") != nullptr) token = std::getenv("AICLOUD_TOKEN");
    if (token.empty()) {
      return Fail(InvalidArgumentError("--server: give the API key of a user with the gateway role (--token or $AICLOUD_TOKEN)"));
    }
    if (f.max_stale_s < 0) return Fail(InvalidArgumentError("--max-stale: must be >= 0 (0: no limit)"));
    gateway::ControlLinkOptions lo{.server_url = f.server, .token = token};
    lo.client.ca_file = f.ca_file;
    lo.client.cert_file = f.cert_file;
    lo.client.key_file = f.key_file;
    lo.max_stale = std::chrono::milliseconds(static_cast<int64_t>(f.max_stale_s * 1000));
    StatusOr<std::unique_ptr<gateway::ControlLink>> l = gateway::ControlLink::Connect(lo);
    if (!l.ok()) return Fail(l.status());
    link = std::move(*l);
    directory = link->directory();
    authenticate = link->authenticator();
    auth_epoch = link->auth_epoch();
    const gateway::ControlLink::Stats st = link->stats();
    what = fmt::format("server {}: {} models, {} keys, {} tenants", f.server, st.routes, st.keys, st.tenants);
  } else {
    StatusOr<gateway::UpstreamsConfig> cfg = gateway::LoadUpstreams(f.upstreams);
    if (!cfg.ok()) return Fail(cfg.status());
    static_directory = std::make_unique<gateway::StaticDirectory>(cfg->routes);
    for (auto& [token, caller] : cfg->keys) {
      if (Status s = keys.Add(token, caller); !s.ok()) return Fail(s);
    }
    directory = static_directory.get();
    authenticate = keys.AsAuthenticator();
    auth_epoch = keys.AsEpoch();
    size_t replicas = 0;
    for (const gateway::Route& r : cfg->routes) replicas += r.replicas.size();
    what = fmt::format("{} models, {} replicas, {} keys", cfg->routes.size(), replicas, keys.size());
  }
  std::unique_ptr<gateway::UsageSink> sink;
  std::FILE* usage_file = nullptr;
  if (f.usage_log == "none") {
    sink = std::make_unique<gateway::NullUsageSink>();
  } else if (f.usage_log == "-") {
    sink = std::make_unique<gateway::LogUsageSink>(stderr);
  } else {
    usage_file = std::fopen(f.usage_log.c_str(), "a");
    if (usage_file == nullptr) return Fail(InvalidArgumentError("--usage-log " + f.usage_log + ": cannot open for appending"));
    sink = std::make_unique<gateway::LogUsageSink>(usage_file);
  }
  // With a server, the records are summed into its tenants' usage too (ServingUsage objects).
  std::unique_ptr<gateway::UsageTally> tally;
  if (link) tally = std::make_unique<gateway::UsageTally>(link->store(), gateway::UsageTallyOptions{.next = sink.get()});
  std::unique_ptr<store::sqlite::SqliteStore> budget_db;
  store::Store* store = link ? link->store() : nullptr;
  if (!f.budget_db.empty()) {
    StatusOr<std::unique_ptr<store::sqlite::SqliteStore>> s = store::sqlite::SqliteStore::Open({.path = f.budget_db});
    if (!s.ok()) return Fail(s.status());
    budget_db = std::move(*s);
    store = budget_db.get();
  }

  gateway::GatewayOptions o;
  o.policy = f.policy;
  o.scrape_period = std::chrono::milliseconds(f.scrape_ms);
  o.hold_queue_size = f.hold_queue;
  o.hold_timeout = std::chrono::milliseconds(static_cast<int64_t>(f.hold_timeout_s * 1000));
  o.upstream_timeout = std::chrono::milliseconds(static_cast<int64_t>(f.upstream_timeout_s * 1000));
  o.default_max_tokens = f.default_max_tokens;
  o.fast_path = !f.no_fast_path;
  StatusOr<std::unique_ptr<gateway::Gateway>> gw = gateway::Gateway::Create(
      {.directory = directory, .authenticate = authenticate, .auth_epoch = auth_epoch, .usage = tally ? static_cast<gateway::UsageSink*>(tally.get()) : sink.get(),
       .store = store},
      o);
  if (!gw.ok()) return Fail(gw.status());
  if (link) link->ExportMetrics(&(*gw)->metrics());
  if (tally) tally->ExportMetrics(&(*gw)->metrics());

  StatusOr<std::unique_ptr<gateway::GatewayServer>> server = gateway::GatewayServer::Start(
      gw->get(), {.host = listen->first, .port = listen->second, .io_threads = f.threads, .worker_threads = f.workers},
      f.workers);
  if (!server.ok()) return Fail(server.status());
  std::cout << fmt::format("aicloud gateway: {}; policy {}\n", what, f.policy)
            << fmt::format("aicloud gateway listening on http://{}:{}\n", listen->first, (*server)->port()) << std::flush;
  int sig = 0;
  sigwait(&set, &sig);
  std::cout << "aicloud gateway: stopping\n" << std::flush;
  (*server)->Stop();
  (*gw)->Stop();
  gw->reset();
  if (tally) tally->Stop();  // the last usage sums go to the server
  if (link) link->Stop();  // and its last signals (arrivals, activity)
  sink.reset();
  if (usage_file != nullptr) std::fclose(usage_file);
  return 0;
}

}  // namespace

void AddGateway(CLI::App& app, int* exit_code) {
  auto* f = new GatewayFlags();
  CLI::App* cmd = app.add_subcommand("gateway", "OpenAI-compatible gateway in front of engine replicas");
  CLI::Option* server = cmd->add_option(
      "--server", f->server, "serve this aicloud server's Deployments with its keys, limits and budgets (http(s)://HOST:PORT)");
  cmd->add_option("--token", f->token, "with --server: API key of a user with the gateway role (default $AICLOUD_TOKEN)");
  cmd->add_option("--ca-file", f->ca_file, "with --server: CA certificates that sign the server's TLS certificate");
  cmd->add_option("--cert", f->cert_file, "with --server: client certificate, for a server that requires one (mTLS)");
  cmd->add_option("--key", f->key_file, "with --server: the client certificate's private key");
  cmd->add_option("--max-stale", f->max_stale_s,
                  "with --server: seconds without reaching the server after which every request gets 503 "
                  "(revocations would go unseen); 0: no limit")
      ->capture_default_str();
  cmd->add_option("--upstreams", f->upstreams, "YAML/JSON file: models, replicas, tenants, keys (docs/gateway.md)")
      ->excludes(server);
  cmd->add_option("--listen", f->listen, "HOST:PORT to listen on (port 0: any free port)")->capture_default_str();
  cmd->add_option("--policy", f->policy, "routing: score (GIE weights), least-request, round-robin, prefix")
      ->capture_default_str();
  cmd->add_option("--threads", f->threads, "I/O threads")->capture_default_str();
  cmd->add_option("--workers", f->workers, "threads for held requests and streams (one each)")->capture_default_str();
  cmd->add_flag("--no-fast-path", f->no_fast_path, "run every request on a worker thread with a blocking upstream client");
  cmd->add_option("--scrape-ms", f->scrape_ms, "replica /metrics period in ms (0: off)")->capture_default_str();
  cmd->add_option("--hold-queue", f->hold_queue, "requests held per deployment while no replica is ready")
      ->capture_default_str();
  cmd->add_option("--hold-timeout", f->hold_timeout_s, "seconds a held request waits before 503")->capture_default_str();
  cmd->add_option("--upstream-timeout", f->upstream_timeout_s, "seconds to the answer's head, and between chunks")
      ->capture_default_str();
  cmd->add_option("--default-max-tokens", f->default_max_tokens,
                  "max_tokens assumed (and sent, for budgeted keys) when a request has none")
      ->capture_default_str();
  cmd->add_option("--usage-log", f->usage_log, "usage records as JSON lines: - (stderr), a file, or none")
      ->capture_default_str();
  cmd->add_option("--budget-db", f->budget_db, "SQLite file keeping budget spend across restarts (default: memory)");
  cmd->callback([f, exit_code] { *exit_code = Run(*f); });
}

}  // namespace aicloud::cli
