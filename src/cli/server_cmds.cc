// Process verbs of `aicloud`: `server` (API, store, scheduler, controllers), `agent` (one per
// machine: registers, heartbeats, runs assigned work) and `up` (a whole cluster on this machine:
// server + simulated GPU nodes whose work runs as real processes).
#include <signal.h>
#include <unistd.h>

#include <condition_variable>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <tuple>
#include <iostream>
#include <thread>

#include "agent/agent.h"
#include "agent/gpu_discovery.h"
#include "agent/node_info.h"
#include "cli/commands.h"
#include "cli/front_door.h"
#include "cli/up_demo.h"
#include "control/node_autoscaler.h"
#include "control/server.h"
#include "http/client.h"

namespace aicloud::cli {
namespace {

using nlohmann::json;

// Blocks SIGINT/SIGTERM in this thread (and the threads it starts) so WaitForSignal gets them.
void BlockSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

int WaitForSignal() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  int sig = 0;
  sigwait(&set, &sig);
  return sig;
}

int Fail(const Status& st) {
  std::cerr << "error: " << st.message() << "\n";
  return 1;
}

StatusOr<std::chrono::milliseconds> ParseDuration(const std::string& s) {
  if (s.empty()) return InvalidArgumentError("empty duration");
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) != 0)) ++i;
  if (i == 0) return InvalidArgumentError("duration \"" + s + "\": expected e.g. 40s, 500ms, 2m");
  int64_t n = std::stoll(s.substr(0, i));
  std::string unit = s.substr(i);
  if (unit == "ms") return std::chrono::milliseconds(n);
  if (unit == "s" || unit.empty()) return std::chrono::milliseconds(n * 1000);
  if (unit == "m") return std::chrono::milliseconds(n * 60000);
  return InvalidArgumentError("duration \"" + s + "\": unit must be ms, s or m");
}

struct ServerFlags {
  std::string data_dir = "./aicloud-data";
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string tls_cert, tls_key, tls_client_ca;
  std::string tls_ca;  // up: what its own agents, demo and saved CLI config trust
  std::string node_grace = "40s";
  std::string policy = "bestfit";
  // The cluster autoscaler (control/node_autoscaler.h): off while node_pool is 0.
  int node_pool = 0;
  std::string node_pending = "10s", node_unneeded = "10m", node_provision_timeout = "15m";
  std::string node_hook;           // aicloud server: the operator's script
  int node_gpus = 8;               // shape of a node it adds
  std::string node_gpu_model = "H100";
  int node_cpus = 64, node_memory_gib = 512;
  double node_consolidate_below = 0.5;
  // aicloud up: the simulated nodes' tenant sandbox (agent.h), one uid map for all of them.
  std::string sandbox_uids = "200000-299999";
  bool no_sandbox = false;
};

StatusOr<control::NodeAutoscalerOptions> ToNodeOptions(const ServerFlags& f) {
  control::NodeAutoscalerOptions o;
  o.max_nodes = f.node_pool;
  if (f.node_pool < 0) return InvalidArgumentError("--node-pool: must not be negative");
  for (auto [flag, text, out] : {std::tuple{"--node-pending", &f.node_pending, &o.pending_for},
                                 std::tuple{"--node-unneeded", &f.node_unneeded, &o.unneeded_for},
                                 std::tuple{"--node-provision-timeout", &f.node_provision_timeout, &o.provision_timeout}}) {
    StatusOr<std::chrono::milliseconds> d = ParseDuration(*text);
    if (!d.ok()) return InvalidArgumentError(std::string(flag) + ": " + std::string(d.status().message()));
    *out = *d;
  }
  if (!(f.node_consolidate_below >= 0 && f.node_consolidate_below <= 1)) {
    return InvalidArgumentError("--node-consolidate-below: must be a share between 0 and 1 (0: never move work)");
  }
  o.consolidate_below = f.node_consolidate_below;
  return o;
}

control::NodeShape ShapeOf(const ServerFlags& f) {
  return {.gpus = f.node_gpus, .gpu_model = f.node_gpu_model, .cpu_millis = int64_t{f.node_cpus} * 1000,
          .memory_mib = int64_t{f.node_memory_gib} * 1024};
}

StatusOr<control::ServerConfig> ToConfig(const ServerFlags& f) {
  StatusOr<std::chrono::milliseconds> grace = ParseDuration(f.node_grace);
  if (!grace.ok()) return grace.status();
  if (f.port < 0 || f.port > 65535) return InvalidArgumentError("--port: must be 0..65535");
  // 64 workers: the OpenAI front door holds a worker per request it holds or streams.
  return control::ServerConfig{.data_dir = f.data_dir, .host = f.host, .port = static_cast<uint16_t>(f.port),
                               .tls_cert_file = f.tls_cert, .tls_key_file = f.tls_key,
                               .tls_client_ca_file = f.tls_client_ca, .node_grace = *grace,
                               .policy = f.policy, .worker_threads = 64};
}

void AddServerFlags(CLI::App* cmd, ServerFlags* f) {
  cmd->add_option("--data-dir", f->data_dir, "where the SQLite store and job logs live");
  cmd->add_option("--host", f->host, "address to listen on");
  cmd->add_option("--port", f->port, "port to listen on (0: any free port)");
  cmd->add_option("--tls-cert", f->tls_cert, "PEM certificate chain: serve HTTPS");
  cmd->add_option("--tls-key", f->tls_key, "PEM private key of --tls-cert");
  cmd->add_option("--tls-client-ca", f->tls_client_ca, "require client certificates signed by this CA (mTLS)");
  cmd->add_option("--node-grace", f->node_grace, "heartbeat silence before a node is NotReady (default 40s)");
  cmd->add_option("--policy", f->policy, "scheduling policy (bestfit, fgd, packing, spread, ...)");
  cmd->add_option("--node-pool", f->node_pool, "nodes the cluster autoscaler may add for unschedulable jobs (default 0: off)");
  cmd->add_option("--node-pending", f->node_pending, "how long a job stays unschedulable before nodes are added (default 10s)");
  cmd->add_option("--node-unneeded", f->node_unneeded, "idle time before an added node is powered off (default 10m)");
  cmd->add_option("--node-consolidate-below", f->node_consolidate_below,
                  "empty and power off an added node whose work uses less than this share of it and fits on the "
                  "other nodes, after --node-unneeded (default 0.5; 0: never move work)");
  cmd->add_option("--node-provision-timeout", f->node_provision_timeout, "power-on to registration, then given up (default 15m)");
  cmd->add_option("--node-gpus", f->node_gpus, "GPUs of an added node (default 8)");
  cmd->add_option("--node-gpu-model", f->node_gpu_model, "their model (default H100)");
  cmd->add_option("--node-cpus", f->node_cpus, "CPUs of an added node (default 64)");
  cmd->add_option("--node-memory-gib", f->node_memory_gib, "memory of an added node in GiB (default 512)");
}

// `aicloud up`'s provisioner: a powered-on node is a simulated agent in this process that
// registers after the provision delay (a warm pool is a short delay).
class SimProvisioner final : public control::NodeProvisioner {
 public:
  using Factory = std::function<StatusOr<std::unique_ptr<agent::Agent>>(const std::string& name)>;
  SimProvisioner(Factory make, std::chrono::milliseconds delay, control::NodeShape shape)
      : make_(std::move(make)), delay_(delay), shape_(std::move(shape)) {}
  ~SimProvisioner() override {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
    agents_.clear();
  }
  Status PowerOn(const std::string& node) override {
    std::lock_guard<std::mutex> l(mu_);
    wanted_.insert(node);
    threads_.emplace_back([this, node] {
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_for(lock, delay_, [this] { return stop_; }) || !wanted_.count(node)) return;
      lock.unlock();
      StatusOr<std::unique_ptr<agent::Agent>> a = make_(node);  // registers: outside the lock
      lock.lock();
      if (!a.ok()) {
        std::cerr << "aicloud up: node " << node << " did not start: " << a.status().message() << "\n";
        return;
      }
      if (!stop_ && wanted_.count(node)) agents_[node] = std::move(*a);
    });
    return OkStatus();
  }
  Status PowerOff(const std::string& node) override {
    std::unique_ptr<agent::Agent> gone;
    {
      std::lock_guard<std::mutex> l(mu_);
      wanted_.erase(node);
      auto it = agents_.find(node);
      if (it != agents_.end()) {
        gone = std::move(it->second);
        agents_.erase(it);
      }
    }
    gone.reset();  // stops the agent and its processes
    return OkStatus();
  }
  control::NodeShape Shape() const override { return shape_; }

 private:
  Factory make_;
  std::chrono::milliseconds delay_;
  control::NodeShape shape_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::set<std::string> wanted_;
  std::map<std::string, std::unique_ptr<agent::Agent>> agents_;
  std::vector<std::thread> threads_;
};

// A simulated GPU node: declared hardware, real processes.
json SimNodeSpec(const std::string& name, const std::string& gpu, int gpus) {
  json g = json::array();
  for (int i = 0; i < gpus; ++i) {
    g.push_back({{"index", i}, {"model", gpu}, {"uuid", "GPU-sim-" + name + "-" + std::to_string(i)},
                 {"numa", i < gpus / 2 ? 0 : 1}, {"nvlinkDomain", 0}});
  }
  return {{"cpuMillis", 64000}, {"memoryBytes", int64_t{512} << 30}, {"gpus", g},
          {"labels", {{"aicloud/simulated", "true"}}}};
}

int RunUp(const ServerFlags& sf, int sim_nodes, const std::string& sim_gpu, int gpus_per_node,
          bool demo, bool exit_after_demo, const std::string& demo_tokenizer, const std::string& provision_delay) {
  BlockSignals();
  StatusOr<control::ServerConfig> cfg = ToConfig(sf);
  if (!cfg.ok()) return Fail(cfg.status());
  StatusOr<control::NodeAutoscalerOptions> node_opts = ToNodeOptions(sf);
  if (!node_opts.ok()) return Fail(node_opts.status());
  StatusOr<std::chrono::milliseconds> delay = ParseDuration(provision_delay);
  if (!delay.ok()) return Fail(InvalidArgumentError("--node-provision-delay: " + std::string(delay.status().message())));
  cfg->node_grace = std::min(cfg->node_grace, std::chrono::milliseconds(10000));
  FrontDoor door;
  cfg->front_door = door.Factory();
  cfg->front_door_metrics = door.Metrics();
  cfg->front_door_stop = [&door] { door.Stop(); };
  StatusOr<std::unique_ptr<control::ApiServer>> server = control::ApiServer::Start(*cfg);
  if (!server.ok()) return Fail(server.status());
  control::ApiServer& s = **server;
  std::cout << "aicloud up: server " << s.url() << ", data in " << sf.data_dir << "\n";

  // Credentials for this machine's operator and agents, made in-process.
  store::Store* st = s.store();
  auth::Principal admin{.user = "admin", .key_id = "bootstrap"};
  auto ensure = [&](json o) {
    Status made = st->Create(o).status();
    return made.ok() || made.code() == StatusCode::kAlreadyExists ? OkStatus() : made;
  };
  Status ok = ensure({{"apiVersion", "aicloud/v1"}, {"kind", "User"}, {"metadata", {{"name", "agent-up"}}}});
  if (ok.ok()) {
    ok = ensure({{"apiVersion", "aicloud/v1"}, {"kind", "RoleBinding"}, {"metadata", {{"name", "agent-up"}}},
                 {"spec", {{"role", "agent"}, {"subjects", {"agent-up"}}}}});
  }
  if (ok.ok()) {
    ok = ensure({{"apiVersion", "aicloud/v1"}, {"kind", "Tenant"}, {"metadata", {{"name", "demo"}}},
                 {"spec", {{"displayName", "Demo tenant made by aicloud up"}}}});
  }
  if (!ok.ok()) return Fail(ok);
  s.auth()->Invalidate();
  StatusOr<auth::AuthService::CreatedKey> admin_key = s.auth()->CreateApiKey(admin, "admin", std::nullopt, {}, std::nullopt);
  StatusOr<auth::AuthService::CreatedKey> agent_key = s.auth()->CreateApiKey(admin, "agent-up", std::nullopt, {}, std::nullopt);
  if (!admin_key.ok()) return Fail(admin_key.status());
  if (!agent_key.ok()) return Fail(agent_key.status());
  // With TLS, what this machine's own clients trust: --tls-ca, else the served certificate itself
  // (right for a self-signed one).
  const std::string trust = sf.tls_cert.empty() ? "" : !sf.tls_ca.empty() ? sf.tls_ca : sf.tls_cert;
  json client_config = {{"server", s.url()}, {"token", admin_key->token}, {"tenant", "demo"}};
  if (!trust.empty()) client_config["caFile"] = std::filesystem::absolute(trust).string();
  Status saved = SaveClientConfig(client_config);
  if (!saved.ok()) return Fail(saved);
  std::cout << "aicloud up: logged in as admin (tenant demo); credentials saved for the aicloud CLI\n";

  auto make_agent = [&, token = agent_key->token](const std::string& name) -> StatusOr<std::unique_ptr<agent::Agent>> {
    agent::AgentOptions ao;
    ao.server_url = s.url();
    ao.tls.ca_file = trust;
    ao.token = token;
    ao.node_name = name;
    ao.node_spec = SimNodeSpec(name, sim_gpu, gpus_per_node);
    ao.work_dir = sf.data_dir + "/agents/" + name;
    ao.sandbox = !sf.no_sandbox;
    ao.sandbox_uids = sf.sandbox_uids;
    // The simulated nodes share this machine: one map, so two tenants never share a uid.
    ao.sandbox_uid_map = sf.data_dir + "/agents/sandbox-uids.json";
    ao.heartbeat = std::chrono::milliseconds(2000);
    ao.poll_wait = std::chrono::milliseconds(2000);  // so Ctrl-C stops the agents promptly
    ao.simulated_gpus = true;  // simulated GPUs: MIG and wipes recorded, no device touched
    auto a = std::make_unique<agent::Agent>(ao);
    AICLOUD_RETURN_IF_ERROR(a->Start());
    return a;
  };
  std::vector<std::unique_ptr<agent::Agent>> agents;
  for (int i = 0; i < sim_nodes; ++i) {
    StatusOr<std::unique_ptr<agent::Agent>> a = make_agent("sim-" + std::to_string(i));
    if (!a.ok()) return Fail(a.status());
    agents.push_back(std::move(*a));
  }
  std::cout << "aicloud up: " << sim_nodes << " simulated node(s) with " << gpus_per_node << "x " << sim_gpu
            << " each; their jobs run as real processes on this machine\n";
  // Nodes added for unschedulable jobs are simulated nodes of the same shape.
  auto pool = std::make_unique<SimProvisioner>(
      make_agent, *delay,
      control::NodeShape{.gpus = gpus_per_node, .gpu_model = sim_gpu, .cpu_millis = 64000, .memory_mib = 512 * 1024});
  control::NodeAutoscaler node_autoscaler(st, s.control(), s.clock(), s.metrics(), pool.get(), *node_opts);
  if (Status na = node_autoscaler.Start(); !na.ok()) return Fail(na);
  if (node_opts->max_nodes > 0) {
    std::cout << "aicloud up: cluster autoscaler on: up to " << node_opts->max_nodes << " more node(s), "
              << provision_delay << " to provision, powered off after " << sf.node_unneeded << " unneeded\n";
  }

  std::string demo_key;  // tenant demo's key, made by the serving demo
  if (demo) {
    http::Client c(s.url(), http::ClientOptions{.ca_file = trust});
    http::Headers h = {{"Authorization", "Bearer " + admin_key->token}, {"Content-Type", "application/json"}};
    const std::string name = "hello-" + std::to_string(::time(nullptr));
    json job = {{"apiVersion", "aicloud/v1"}, {"kind", "Job"}, {"metadata", {{"name", name}}},
                {"spec", {{"workers", 2},
                          {"command", "echo \"worker $AICLOUD_WORKER of $AICLOUD_WORKERS on GPUs $CUDA_VISIBLE_DEVICES\"; sleep 1; echo done"},
                          {"resources", {{"cpu", "1"}, {"memory", "1Gi"}, {"gpu", {{"count", 1}}}}}}}};
    StatusOr<http::ClientResponse> r = c.Send("POST", "/api/v1/tenants/demo/jobs", job.dump(), h);
    if (!r.ok() || r->status != 201) return Fail(InternalError("demo job: " + (r.ok() ? r->body : r.status().message())));
    std::cout << "aicloud up: submitted job demo/" << name << " (2 workers x 1 GPU)\n";
    std::string phase;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < deadline) {
      StatusOr<http::ClientResponse> g = c.Send("GET", "/api/v1/tenants/demo/jobs/" + name, "", h);
      if (g.ok() && g->status == 200) {
        json j = json::parse(g->body, nullptr, false);
        std::string now = j.is_object() ? j.value("status", json::object()).value("phase", "Pending") : "";
        if (now != phase) {
          phase = now;
          std::cout << "  job " << name << ": " << phase << "\n";
        }
        if (phase == "Succeeded" || phase == "Failed") break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    for (int w = 0; w < 2; ++w) {
      StatusOr<http::ClientResponse> l =
          c.Send("GET", "/api/v1/tenants/demo/jobs/" + name + "/logs?worker=" + std::to_string(w), "", h);
      if (l.ok()) std::cout << "  logs of worker " << w << ":\n" << l->body;
    }
    std::cout << "\n";
    StatusOr<std::string> served = RunServingDemo(
        {.server_url = s.url(), .admin_token = admin_key->token, .data_dir = sf.data_dir, .tokenizer = demo_tokenizer,
         .ca_file = trust});
    if (served.ok()) demo_key = *served;
    else std::cerr << "aicloud up: serving demo failed: " << served.status().message() << "\n";
    if (exit_after_demo) {
      node_autoscaler.Stop();
      pool.reset();  // its agents stop before the server does
      agents.clear();
      s.Stop();
      return phase == "Succeeded" && served.ok() ? 0 : 1;
    }
  }
  std::cout << "aicloud up: ready. Try: aicloud get nodes; aicloud apply -f examples/job.yaml; "
               "aicloud get jobs. Ctrl-C stops.\n";
  if (!demo_key.empty()) {
    std::cout << "  and deployment demo/chat (it scales from zero again on the next request):\n"
              << "    curl -N " << s.url() << "/v1/chat/completions -H 'Authorization: Bearer " << demo_key
              << "' -d '{\"model\":\"chat\",\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}'\n"
              << "    aicloud get deployments\n";
  }
  std::cout << std::flush;
  WaitForSignal();
  std::cout << "aicloud up: stopping\n";
  node_autoscaler.Stop();
  pool.reset();  // its agents stop before the server does
  agents.clear();
  s.Stop();
  return 0;
}

}  // namespace

void AddServer(CLI::App& app, int* exit_code) {
  auto sf = std::make_shared<ServerFlags>();
  auto* server = app.add_subcommand("server", "Run the API server, scheduler and controllers");
  AddServerFlags(server, sf.get());
  server->add_option("--node-hook", sf->node_hook,
                     "script the cluster autoscaler runs as SCRIPT up|down NODE (power on/off, install, start the agent)");
  server->callback([sf, exit_code] {
    BlockSignals();
    StatusOr<control::ServerConfig> cfg = ToConfig(*sf);
    if (!cfg.ok()) {
      *exit_code = Fail(cfg.status());
      return;
    }
    FrontDoor door;
    cfg->front_door = door.Factory();
    cfg->front_door_metrics = door.Metrics();
    cfg->front_door_stop = [&door] { door.Stop(); };
    StatusOr<std::unique_ptr<control::ApiServer>> s = control::ApiServer::Start(*cfg);
    if (!s.ok()) {
      *exit_code = Fail(s.status());
      return;
    }
    StatusOr<control::NodeAutoscalerOptions> node_opts = ToNodeOptions(*sf);
    if (!node_opts.ok()) {
      *exit_code = Fail(node_opts.status());
      return;
    }
    if (node_opts->max_nodes > 0 && sf->node_hook.empty()) {
      *exit_code = Fail(InvalidArgumentError("--node-pool needs --node-hook SCRIPT (called as SCRIPT up|down NODE)"));
      return;
    }
    // A hook may take as long as a node may take to register, no longer.
    control::ScriptProvisioner hooks(
        sf->node_hook, ShapeOf(*sf),
        std::max(std::chrono::seconds(1), std::chrono::duration_cast<std::chrono::seconds>(node_opts->provision_timeout)));
    control::NodeAutoscaler node_autoscaler((*s)->store(), (*s)->control(), (*s)->clock(), (*s)->metrics(), &hooks,
                                            *node_opts);
    if (Status na = node_autoscaler.Start(); !na.ok()) {
      *exit_code = Fail(na);
      return;
    }
    std::cout << "aicloud server listening on " << (*s)->url() << " (data: " << sf->data_dir << ")\n";
    if ((*s)->bootstrap_token()) {
      std::cout << "bootstrap admin token (shown once, stored only as a hash):\n  "
                << *(*s)->bootstrap_token() << "\n";
    }
    std::cout.flush();
    WaitForSignal();
    node_autoscaler.Stop();
    (*s)->Stop();
    *exit_code = 0;
  });

  auto up_nodes = std::make_shared<int>(4);
  auto up_gpu = std::make_shared<std::string>("H100");
  auto up_gpus = std::make_shared<int>(8);
  auto up_demo = std::make_shared<bool>(false);
  auto up_exit = std::make_shared<bool>(false);
  auto up_tokenizer = std::make_shared<std::string>("data/tokenizers/gpt2/tokenizer.json");
  auto usf = std::make_shared<ServerFlags>();
  usf->data_dir = "./aicloud-up";
  auto* up = app.add_subcommand("up", "Start a whole cluster on this machine: server + simulated GPU nodes");
  AddServerFlags(up, usf.get());
  up->add_option("--sim-nodes", *up_nodes, "simulated GPU nodes (default 4)");
  up->add_option("--sim-gpu", *up_gpu, "their GPU model (default H100)");
  up->add_option("--gpus-per-node", *up_gpus, "GPUs per simulated node (default 8)");
  up->add_flag("--demo", *up_demo,
               "submit a 2-worker GPU job and print its logs, then deploy a small random-weight model with min 0 "
               "replicas and call it through the OpenAI front door (held while a replica starts, streamed back, "
               "refused for another tenant, scaled back to zero)");
  up->add_flag("--exit-after-demo", *up_exit, "with --demo: stop once the demo ended (exit 0 if every step succeeded)");
  up->add_option("--demo-tokenizer", *up_tokenizer, "with --demo: the tokenizer.json of the demo model")
      ->capture_default_str();
  up->add_option("--sandbox-uids", usf->sandbox_uids,
                 "uids the simulated nodes give tenants (when root), FIRST-LAST")
      ->capture_default_str();
  up->add_option("--tls-ca", usf->tls_ca,
                 "with --tls-cert: the CA its simulated nodes, the demo and the saved CLI config trust "
                 "(default: --tls-cert itself, right for a self-signed certificate)");
  up->add_flag("--no-sandbox", usf->no_sandbox,
               "run jobs as this process's user, unisolated (no tenant uids)");
  auto up_delay = std::make_shared<std::string>("180s");
  up->add_option("--node-provision-delay", *up_delay, "with --node-pool: power-on to registration of an added node (default 180s)");
  up->callback([=] {
    *exit_code = RunUp(*usf, *up_nodes, *up_gpu, *up_gpus, *up_demo, *up_exit, *up_tokenizer, *up_delay);
  });

  auto a_server = std::make_shared<std::string>();
  auto a_token = std::make_shared<std::string>();
  auto a_inventory = std::make_shared<std::string>();
  auto a_node = std::make_shared<std::string>();
  auto a_discover = std::make_shared<bool>(false);
  auto a_work = std::make_shared<std::string>("./aicloud-agent");
  auto a_heartbeat = std::make_shared<std::string>("10s");
  auto a_ca = std::make_shared<std::string>();
  auto a_cert = std::make_shared<std::string>();
  auto a_key = std::make_shared<std::string>();
  auto* ag = app.add_subcommand("agent", "Run the node agent: register, heartbeat, run assigned work");
  ag->add_option("--server", *a_server, "server URL")->required();
  ag->add_option("--token", *a_token, "API key with the agent role")->required();
  ag->add_option("--inventory", *a_inventory, "declared hardware (inventory YAML) instead of NVML");
  ag->add_option("--node", *a_node, "node name (default: the inventory's only node, or the hostname)");
  ag->add_flag("--discover", *a_discover, "discover GPUs through NVML");
  auto a_address = std::make_shared<std::string>();
  ag->add_option("--address", *a_address,
                 "where the gateway reaches this node's replicas (default: the source address towards the server)");
  ag->add_option("--work-dir", *a_work, "attempt dirs, logs and checkpoints");
  ag->add_option("--heartbeat", *a_heartbeat, "heartbeat interval (default 10s)");
  ag->add_option("--ca-file", *a_ca, "CA of an https server");
  ag->add_option("--cert", *a_cert, "client certificate (mTLS)");
  ag->add_option("--key", *a_key, "client key (mTLS)");
  auto a_nvml = std::make_shared<std::string>("libnvidia-ml.so.1");
  auto a_cuda = std::make_shared<std::string>("libcuda.so.1");
  auto a_unwiped = std::make_shared<bool>(false);
  ag->add_option("--nvml-library", *a_nvml, "NVML library for discovery and MIG (default libnvidia-ml.so.1)");
  ag->add_option("--cuda-library", *a_cuda, "CUDA driver library for the memory wipe (default libcuda.so.1)");
  ag->add_flag("--allow-unwiped-gpu-handover", *a_unwiped,
               "when no CUDA driver loads, hand a GPU to another tenant unwiped (Warning event) "
               "instead of refusing it");
  auto a_sandbox_uids = std::make_shared<std::string>("200000-299999");
  auto a_no_sandbox = std::make_shared<bool>(false);
  ag->add_option("--sandbox-uids", *a_sandbox_uids,
                 "uids tenants' attempts run as when the agent is root: FIRST-LAST, 100 per tenant; "
                 "no /etc/passwd user may be in it")
      ->capture_default_str();
  ag->add_flag("--no-sandbox", *a_no_sandbox,
               "run attempts as the agent's own user, unisolated (tenants can read each other's files)");
  ag->callback([=] {
    BlockSignals();
    StatusOr<std::chrono::milliseconds> hb = ParseDuration(*a_heartbeat);
    if (!hb.ok()) {
      *exit_code = Fail(hb.status());
      return;
    }
    StatusOr<json> spec = InvalidArgumentError("give --inventory FILE or --discover");
    std::string name = *a_node;
    if (!a_inventory->empty()) {
      spec = agent::NodeSpecFromInventory(*a_inventory, *a_node);
    } else if (*a_discover) {
      StatusOr<std::unique_ptr<agent::GpuDiscovery>> d = agent::GpuDiscovery::Open(*a_nvml);
      if (!d.ok()) std::cerr << "no GPUs discovered (" << d.status().message() << "); registering as a CPU node\n";
      spec = agent::NodeSpecFromDiscovery(d.ok() ? d->get() : nullptr);
    }
    if (!spec.ok()) {
      *exit_code = Fail(spec.status());
      return;
    }
    if (name.empty()) name = spec->value("name", "");
    if (name.empty()) {
      char host[256] = {0};
      gethostname(host, sizeof host - 1);
      name = host;
    }
    spec->erase("name");
    if (!a_address->empty()) (*spec)["address"] = *a_address;
    agent::AgentOptions ao;
    ao.server_url = *a_server;
    ao.token = *a_token;
    ao.node_name = name;
    ao.node_spec = *spec;
    ao.work_dir = *a_work;
    ao.sandbox = !*a_no_sandbox;
    ao.sandbox_uids = *a_sandbox_uids;
    ao.heartbeat = *hb;
    ao.tls.ca_file = *a_ca;
    ao.tls.cert_file = *a_cert;
    ao.tls.key_file = *a_key;
    ao.nvml_library = *a_nvml;
    ao.cuda_library = *a_cuda;
    ao.allow_unwiped_gpu_handover = *a_unwiped;
    agent::Agent a(ao);
    Status st = a.Start();
    if (!st.ok()) {
      *exit_code = Fail(st);
      return;
    }
    std::cout << "aicloud agent: node " << name << " registered with " << *a_server << "\n";
    std::cout.flush();
    WaitForSignal();
    a.Stop();
    *exit_code = 0;
  });
}

}  // namespace aicloud::cli
