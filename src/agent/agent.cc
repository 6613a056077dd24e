#include "agent/agent.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <exception>
#include <filesystem>
#include <utility>
#include <vector>

#include "core/thread_name.h"
#include "agent/host_metrics.h"
#include "agent/replica_tls.h"

namespace aicloud::agent {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using std::chrono::milliseconds;

constexpr milliseconds kInitialBackoff{100};
constexpr milliseconds kMaxBackoff{2000};
constexpr size_t kLogChunk = 1 << 20;
constexpr int kMaxChunksPerPass = 64;

milliseconds Grow(milliseconds b) { return std::min(b * 2, kMaxBackoff); }

std::string QueryEscape(std::string_view s) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

// A name safe to use as one path component.
std::string PathComponent(const std::string& s) {
  if (s.empty() || s == "." || s == "..") return "_";
  std::string out = s;
  std::replace(out.begin(), out.end(), '/', '_');
  return out;
}

struct ApiError {
  std::string code, message;
};

ApiError ParseError(const http::ClientResponse& r) {
  ApiError e;
  try {
    json j = json::parse(r.body);
    if (j.is_object() && j.contains("error") && j["error"].is_object()) {
      e.code = j["error"].value("code", "");
      e.message = j["error"].value("message", "");
    }
  } catch (const std::exception&) {
  }
  if (e.message.empty()) e.message = r.body.substr(0, 200);
  return e;
}

bool IsEpochError(const ApiError& e) {
  return e.code == "failed_precondition" &&
         (e.message.find("epoch") != std::string::npos ||
          e.message.find("not registered") != std::string::npos);
}

std::string AsString(const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

}  // namespace

std::string AddressToReach(const std::string& server_url) {
  std::string rest = server_url;
  if (size_t p = rest.find("://"); p != std::string::npos) rest = rest.substr(p + 3);
  rest = rest.substr(0, rest.find('/'));
  std::string host = rest;
  if (!rest.empty() && rest[0] == '[') {
    host = rest.substr(1, rest.find(']') - 1);  // [v6]:port
  } else if (size_t colon = rest.rfind(':'); colon != std::string::npos) {
    host = rest.substr(0, colon);
  }
  // IPv4 first: a replica's engine listens on this address (AICLOUD_NODE_ADDRESS), and the
  // gateways and probes reach it over IPv4.
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  hints.ai_family = AF_INET;
  addrinfo* res = nullptr;
  if (host.empty()) return "";
  if (getaddrinfo(host.c_str(), "9", &hints, &res) != 0 || res == nullptr) {
    hints.ai_family = AF_UNSPEC;
    if (getaddrinfo(host.c_str(), "9", &hints, &res) != 0 || res == nullptr) return "";
  }
  std::string out;
  const int fd = socket(res->ai_family, SOCK_DGRAM, 0);
  if (fd >= 0) {
    sockaddr_storage local{};
    socklen_t len = sizeof local;
    // connect() on a UDP socket only chooses the route and source address.
    if (connect(fd, res->ai_addr, res->ai_addrlen) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      char buf[INET6_ADDRSTRLEN] = {0};
      const void* a = local.ss_family == AF_INET6
                          ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr)
                          : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr);
      if (inet_ntop(local.ss_family, a, buf, sizeof buf) != nullptr) out = buf;
    }
    close(fd);
  }
  freeaddrinfo(res);
  return out;
}

namespace {
AgentOptions WithAddress(AgentOptions o) {
  if (o.node_spec.is_object() && !o.node_spec.contains("address")) {
    const std::string a = AddressToReach(o.server_url);
    if (!a.empty()) o.node_spec["address"] = a;
  }
  return o;
}
}  // namespace

Agent::Agent(AgentOptions options) : options_(WithAddress(std::move(options))) {}

Agent::~Agent() { Stop(); }

http::Headers Agent::AuthHeaders() const {
  return {{"Authorization", "Bearer " + options_.token}};
}

std::string Agent::NodePath() const {
  return "/api/v1/agent/nodes/" + QueryEscape(options_.node_name);
}

std::string Agent::epoch() const {
  std::lock_guard<std::mutex> l(mu_);
  return epoch_;
}

int Agent::registrations() const {
  std::lock_guard<std::mutex> l(mu_);
  return registrations_;
}

std::string Agent::sandbox_status() const {
  std::lock_guard<std::mutex> l(mu_);
  return sandbox_status_;
}

Status Agent::SetUpSandbox() {
  const fs::path work(options_.work_dir);
  // The log dir stays the agent's alone, sandbox or not: logs are opened by the agent.
  ::chmod((work / "logs").c_str(), 0700);
  if (!options_.sandbox) {
    sandbox_status_ = "off: disabled by the operator; attempts run as uid " +
                      std::to_string(::geteuid()) + ", unisolated";
    spdlog::warn("agent: sandbox {}", sandbox_status_);
    return OkStatus();
  }
  if (::geteuid() != 0) {
    sandbox_status_ = "off: the agent is not root (uid " + std::to_string(::geteuid()) +
                      ") and cannot switch uids; attempts run as uid " +
                      std::to_string(::geteuid());
    spdlog::warn("agent: sandbox {}", sandbox_status_);
    return OkStatus();
  }
  StatusOr<UidRange> range = ParseUidRange(options_.sandbox_uids);
  if (!range.ok()) return range.status();
  for (const fs::path& d : {work, work / "attempts", work / "checkpoints"}) {
    if (::chmod(d.c_str(), 0711) != 0) {
      return InternalError("sandbox: chmod 0711 " + d.string() + ": " + std::strerror(errno));
    }
  }
  AICLOUD_RETURN_IF_ERROR(CheckReachable((work / "attempts").string(), range->first));
  AICLOUD_RETURN_IF_ERROR(CheckReachable((work / "checkpoints").string(), range->first));
  const std::string map = options_.sandbox_uid_map.empty()
                              ? (work / "sandbox-uids.json").string()
                              : options_.sandbox_uid_map;
  StatusOr<std::unique_ptr<TenantUids>> uids = TenantUids::Open(map, *range);
  if (!uids.ok()) return uids.status();
  uids_ = std::move(*uids);
  sandbox_status_ = "on: tenants run as uids of " + range->ToString() + " (" +
                    std::to_string(kUidsPerTenant) + " per tenant, map " + map + ")";
  spdlog::info("agent: sandbox {}", sandbox_status_);
  return OkStatus();
}

Status Agent::SandboxAttemptLocked(const std::string& tenant, ProcessSpec* spec) {
  StatusOr<uint32_t> uid = uids_->UidOf(PathComponent(tenant));
  if (!uid.ok()) return uid.status();
  const fs::path work(options_.work_dir);
  // A Deployment replica runs as the uid after its tenant's (the block's second): the tenant's own
  // jobs cannot read its environment (/proc/<pid>/environ holds the replica's secret) nor its
  // files (its TLS key), so they too reach it only through the gateway. It has no checkpoints.
  const bool replica = spec->env.count("AICLOUD_REPLICA_SECRET") != 0;
  const uint32_t run_as = replica ? *uid + 1 : *uid;
  if (replica) {
    spec->env.erase("AICLOUD_CHECKPOINT_DIR");
  } else {
    const fs::path ckpt = spec->env["AICLOUD_CHECKPOINT_DIR"];
    AICLOUD_RETURN_IF_ERROR(MakePrivateDir(ckpt.parent_path().string(), *uid));
    AICLOUD_RETURN_IF_ERROR(MakePrivateDir(ckpt.string(), *uid));
  }
  // Only the attempt dir the agent chose (the exact path) is made the tenant's; a workingDir the
  // job names must already exist and be reachable by the tenant uid: the agent creates, chowns
  // or chmods nothing of it.
  if (spec->working_dir == (work / "attempts" / PathComponent(spec->attempt_id)).string()) {
    AICLOUD_RETURN_IF_ERROR(MakePrivateDir(spec->working_dir, run_as));
  } else {
    spec->create_working_dir = false;
  }
  spec->sandbox.uid = run_as;
  return OkStatus();
}

int Agent::running() const {
  std::lock_guard<std::mutex> l(mu_);
  if (!sup_) return 0;
  int n = 0;
  for (const ProcStatus& s : sup_->List()) n += s.state == ProcState::kRunning;
  return n;
}

bool Agent::SleepFor(milliseconds d) {
  std::unique_lock<std::mutex> l(stop_mu_);
  stop_cv_.wait_for(l, d, [&] { return stopping_.load(); });
  return !stopping_.load();
}

StatusOr<Agent::Registration> Agent::RegisterOnce(http::Client& client, bool* retryable) {
  *retryable = true;
  json body = {{"spec", options_.node_spec}};
  if (body["spec"].is_object()) {
    body["spec"]["sandbox"] = sandbox_status_;
    body["spec"]["cgroups"] = cgroup_status_;
    if (gpus_) {
      if (json foreign = gpus_->ForeignInstances(); !foreign.empty()) {
        body["spec"]["foreignMigInstances"] = std::move(foreign);
      }
    }
  }
  StatusOr<http::ClientResponse> r =
      client.Send("POST", NodePath() + "/register", body.dump(), AuthHeaders());
  if (!r.ok()) {
    if (r.status().code() == StatusCode::kInvalidArgument) *retryable = false;  // bad URL/TLS
    return r.status();
  }
  if (r->status == 200) {
    try {
      json j = json::parse(r->body);
      Registration reg{j.at("epoch").get<std::string>(), j.value("instance", "")};
      if (reg.epoch.empty()) return InternalError("register: empty epoch in answer");
      return reg;
    } catch (const std::exception& e) {
      return InternalError(std::string("register: malformed answer: ") + e.what());
    }
  }
  ApiError e = ParseError(*r);
  std::string msg = "register node " + options_.node_name + ": HTTP " +
                    std::to_string(r->status) + ": " + e.message;
  if (r->status >= 500 || r->status == 429 || r->status == 408) return UnavailableError(msg);
  *retryable = false;
  if (r->status == 401) return UnauthenticatedError(msg);
  if (r->status == 403) return PermissionDeniedError(msg);
  if (r->status == 400 && e.code != "failed_precondition") return InvalidArgumentError(msg);
  return FailedPreconditionError(msg);
}

Status Agent::Start() {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (started_threads_ || stopping_.load()) return FailedPreconditionError("agent already started");
  }
  for (const char* sub : {"attempts", "logs", "checkpoints"}) {
    std::error_code ec;
    fs::create_directories(fs::path(options_.work_dir) / sub, ec);
    if (ec) {
      return InternalError("cannot create " + (fs::path(options_.work_dir) / sub).string() +
                           ": " + ec.message());
    }
  }
  // GPUs first: leftover MIG instances are cleaned up, and foreign ones named at registration.
  if (!gpus_) {
    auto gpus = std::make_unique<GpuIsolation>(GpuIsolationOptions{
        .work_dir = options_.work_dir, .nvml_library = options_.nvml_library,
        .cuda_library = options_.cuda_library, .wipe_command = options_.gpu_wipe_command,
        .allow_unwiped_handover = options_.allow_unwiped_gpu_handover,
        .simulated = options_.simulated_gpus});
    json events = json::array();
    gpus->Start(&events);
    std::lock_guard<std::mutex> l(mu_);
    for (json& e : events) pending_events_.push_back(std::move(e));
    gpus_ = std::move(gpus);
  }
  AICLOUD_RETURN_IF_ERROR(SetUpSandbox());
  auto sup = std::make_unique<Supervisor>(options_.cgroup_root);
  cgroup_status_ = sup->cgroup_status();
  spdlog::info("agent: {}", cgroup_status_);
  http::Client client(options_.server_url, options_.tls);
  const auto deadline = std::chrono::steady_clock::now() + options_.register_deadline;
  milliseconds backoff = kInitialBackoff;
  Registration reg;
  while (true) {
    bool retryable = true;
    StatusOr<Registration> r = RegisterOnce(client, &retryable);
    if (r.ok()) {
      reg = *r;
      break;
    }
    if (!retryable) {
      spdlog::error("agent: registration refused: {}", r.status().ToString());
      return r.status();
    }
    auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      return UnavailableError("cannot register node " + options_.node_name + " with " +
                              options_.server_url + ": " + r.status().ToString());
    }
    spdlog::warn("agent: register failed ({}); retrying in {} ms", r.status().ToString(),
                 backoff.count());
    auto left = std::chrono::duration_cast<milliseconds>(deadline - now);
    if (!SleepFor(std::min(backoff, left + milliseconds(1)))) {
      return Status(StatusCode::kCancelled, "agent stopped while registering");
    }
    backoff = Grow(backoff);
  }
  spdlog::info("agent: node {} registered, epoch {}", options_.node_name, reg.epoch);

  if (options_.gpu_metrics) {
    StatusOr<std::unique_ptr<GpuDiscovery>> nvml = GpuDiscovery::Open(options_.nvml_library);
    if (nvml.ok()) {
      nvml_ = std::move(*nvml);
    } else {
      spdlog::info("agent: no GPU metrics: {}", nvml.status().ToString());
    }
  }
  sup->SetListener([this](const ProcStatus&) {
    {
      std::lock_guard<std::mutex> l(wake_mu_);
      wake_ = true;
    }
    wake_cv_.notify_all();
  });
  {
    std::lock_guard<std::mutex> l(mu_);
    epoch_ = reg.epoch;
    instance_ = reg.instance;
    version_ = -1;
    registrations_ = 1;
    sup_ = std::move(sup);
    started_threads_ = true;
  }
  poll_thread_ = std::thread([this] {
    SetThreadName("agent-poll");
    PollLoop();
  });
  report_thread_ = std::thread([this] {
    SetThreadName("agent-report");
    ReportLoop();
  });
  return OkStatus();
}

void Agent::Stop() {
  {
    std::lock_guard<std::mutex> l(stop_mu_);
    stopping_.store(true);
  }
  stop_cv_.notify_all();
  {
    std::lock_guard<std::mutex> l(wake_mu_);
  }
  wake_cv_.notify_all();
  if (poll_thread_.joinable()) poll_thread_.join();
  if (report_thread_.joinable()) report_thread_.join();
  std::unique_ptr<Supervisor> sup;
  {
    std::lock_guard<std::mutex> l(mu_);
    sup = std::move(sup_);
  }
  sup.reset();  // TERM, then KILL after each attempt's grace; waits for them
  if (gpus_) {  // their MIG instances go with them (events can no longer be sent)
    json events = json::array();
    for (const std::string& id : gpus_->Holders()) gpus_->Release(id, &events);
  }
}

void Agent::ReleaseEndedGpusLocked() {
  if (!gpus_ || !sup_) return;
  for (const std::string& id : gpus_->Holders()) {
    std::optional<ProcStatus> st = sup_->Get(id);
    auto it = local_.find(id);
    const bool ended = it == local_.end() || !it->second.start_error.empty() || !st ||
                       st->state != ProcState::kRunning;
    if (ended) gpus_->Release(id, &pending_events_);
  }
}

void Agent::Reregister(http::Client& client, const std::string& seen_epoch) {
  std::lock_guard<std::mutex> rl(register_mu_);
  {
    std::lock_guard<std::mutex> l(mu_);
    if (epoch_ != seen_epoch) return;  // the other thread already did
  }
  spdlog::warn("agent: epoch {} no longer valid; registering node {} again", seen_epoch,
               options_.node_name);
  milliseconds backoff = kInitialBackoff;
  Registration reg;
  while (true) {
    if (stopping()) return;
    bool retryable = true;
    StatusOr<Registration> r = RegisterOnce(client, &retryable);
    if (r.ok()) {
      reg = *r;
      break;
    }
    spdlog::warn("agent: re-register failed ({}); retrying in {} ms", r.status().ToString(),
                 backoff.count());
    if (!SleepFor(backoff)) return;
    backoff = Grow(backoff);
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    epoch_ = reg.epoch;
    instance_ = reg.instance;
    version_ = -1;
    ++registrations_;
    for (auto& [id, local] : local_) {
      local.orphaned = true;
      local.forget = true;
      local.desired = false;
      if (local.start_error.empty()) {
        std::optional<ProcStatus> st = sup_->Get(id);
        if (st && st->state == ProcState::kRunning) {
          spdlog::info("agent: stopping attempt {} (ended by re-registration)", id);
          (void)sup_->Stop(id);
        }
      }
    }
  }
  spdlog::info("agent: node {} registered again, epoch {}", options_.node_name, reg.epoch);
  {
    std::lock_guard<std::mutex> l(wake_mu_);
    wake_ = true;
  }
  wake_cv_.notify_all();
}

void Agent::PollLoop() {
  http::ClientOptions copts = options_.tls;
  copts.timeout = options_.tls.timeout + options_.poll_wait;
  http::Client client(options_.server_url, copts);
  milliseconds backoff = kInitialBackoff;
  auto fail = [&](const std::string& what) {
    spdlog::warn("agent: assignments: {}; retrying in {} ms", what, backoff.count());
    SleepFor(backoff);
    backoff = Grow(backoff);
  };
  while (!stopping()) {
    std::string epoch, instance;
    int64_t after;
    {
      std::lock_guard<std::mutex> l(mu_);
      epoch = epoch_;
      instance = instance_;
      after = version_;
    }
    std::string target = NodePath() + "/assignments?epoch=" + QueryEscape(epoch) +
                         "&instance=" + QueryEscape(instance) +
                         "&after=" + std::to_string(after) +
                         "&waitMs=" + std::to_string(options_.poll_wait.count());
    StatusOr<http::ClientResponse> r = client.Send("GET", target, {}, AuthHeaders());
    if (stopping()) break;
    if (!r.ok()) {
      fail(r.status().ToString());
      continue;
    }
    if (r->status != 200) {
      ApiError e = ParseError(*r);
      if (IsEpochError(e)) {
        Reregister(client, epoch);
        backoff = kInitialBackoff;
        continue;
      }
      fail("HTTP " + std::to_string(r->status) + ": " + e.message);
      continue;
    }
    int64_t version;
    std::string new_instance;
    json attempts;
    try {
      json j = json::parse(r->body);
      version = j.at("version").get<int64_t>();
      new_instance = j.value("instance", "");
      attempts = j.at("attempts");
      if (!attempts.is_array()) throw std::runtime_error("\"attempts\" is not an array");
    } catch (const std::exception& e) {
      fail(std::string("malformed answer: ") + e.what());
      continue;
    }
    {
      std::lock_guard<std::mutex> l(mu_);
      if (epoch_ != epoch) continue;  // re-registered meanwhile: this answer is stale
      version_ = version;
      instance_ = new_instance;
    }
    backoff = kInitialBackoff;
    Reconcile(epoch, attempts);
  }
}

void Agent::Reconcile(const std::string& epoch, const json& attempts) {
  bool changed = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (epoch_ != epoch || !sup_) return;
    std::set<std::string> desired;
    for (const json& a : attempts) {
      std::string id;
      try {
        id = a.at("attempt").get<std::string>();
      } catch (const std::exception& e) {
        spdlog::error("agent: assignment without a valid attempt id ({}): {}", e.what(),
                      a.dump().substr(0, 200));
        continue;
      }
      if (id.empty()) continue;
      desired.insert(id);
      auto it = local_.find(id);
      if (it != local_.end()) {
        if (!it->second.orphaned) it->second.desired = true;
        continue;
      }
      if (ever_started_.count(id)) continue;  // never start an attempt twice
      ever_started_.insert(id);
      changed = true;
      try {
        StartAttemptLocked(a);
      } catch (const std::exception& e) {
        spdlog::error("agent: malformed assignment {}: {}", id, e.what());
        Local local;
        local.start_error = std::string("malformed assignment: ") + e.what();
        local.final_ship_done = true;
        local_[id] = std::move(local);
      }
    }
    for (auto& [id, local] : local_) {
      if (desired.count(id)) continue;
      if (local.desired) changed = true;
      local.desired = false;
      if (!local.start_error.empty()) continue;
      std::optional<ProcStatus> st = sup_->Get(id);
      if (st && st->state == ProcState::kRunning) {
        spdlog::info("agent: stopping attempt {} (no longer assigned to this node)", id);
        (void)sup_->Stop(id);
      }
    }
  }
  if (changed) {
    {
      std::lock_guard<std::mutex> l(wake_mu_);
      wake_ = true;
    }
    wake_cv_.notify_all();
  }
}

void Agent::StartAttemptLocked(const json& a) {
  const std::string id = a.at("attempt").get<std::string>();
  Local local;
  local.tenant = a.value("tenant", "");
  local.job = a.value("job", "");
  const fs::path work(options_.work_dir);

  ProcessSpec spec;
  spec.attempt_id = id;
  for (const json& arg : a.value("argv", json::array())) spec.argv.push_back(AsString(arg));
  json env = a.value("env", json::object());
  if (env.is_object()) {
    for (auto it = env.begin(); it != env.end(); ++it) spec.env[it.key()] = AsString(it.value());
  }
  fs::path ckpt = work / "checkpoints" / PathComponent(local.tenant) / PathComponent(local.job);
  std::error_code ec;
  fs::create_directories(ckpt, ec);
  if (ec) spdlog::warn("agent: cannot create {}: {}", ckpt.string(), ec.message());
  spec.env["AICLOUD_CHECKPOINT_DIR"] = ckpt.string();
  // Where the node's services are reached: a Deployment replica listens there, not on every
  // interface of the node.
  if (const json address = options_.node_spec.is_object() ? options_.node_spec.value("address", json()) : json();
      address.is_string()) {
    spec.env["AICLOUD_NODE_ADDRESS"] = address.get<std::string>();
  }

  // GPUs: MIG instance, wipe between tenants, MPS limits (gpu_isolation.h).
  std::string devices;
  StatusOr<std::map<std::string, std::string>> gpu_env =
      gpus_->Prepare(id, local.tenant, local.job, a.value("gpus", json::array()), &pending_events_);
  if (!gpu_env.ok()) {
    spdlog::error("agent: not starting attempt {}: {}", id, gpu_env.status().ToString());
    local.start_error = gpu_env.status().message();
    local.gpu_setup_failed = true;
    local.final_ship_done = true;
    local_[id] = std::move(local);
    return;
  }
  for (const auto& [k, v] : *gpu_env) spec.env[k] = v;
  devices = spec.env["CUDA_VISIBLE_DEVICES"];
  // The other GPUs' device files stay closed to it (where the cgroups have a devices controller).
  if (options_.node_spec.is_object() && !options_.simulated_gpus) {
    spec.deny_devices = GpuDeviceDenials(options_.node_spec.value("gpus", json::array()), a.value("gpus", json::array()));
  }

  std::string wd = a.value("workingDir", "");
  spec.working_dir = wd.empty() ? (work / "attempts" / PathComponent(id)).string() : wd;
  spec.die_with_starter = true;  // the assignments thread lives as long as the agent
  spec.log_path = (work / "logs" / (PathComponent(id) + ".log")).string();
  fs::remove(spec.log_path, ec);  // offsets start at 0 on both sides
  spec.cpu_millis = a.value("cpuMillis", int64_t{0});
  spec.memory_bytes = a.value("memoryBytes", int64_t{0});
  spec.term_grace = std::chrono::seconds(a.value("graceSeconds", int64_t{10}));
  local.log_path = spec.log_path;
  const std::string isolation = a.value("isolation", "none");
  spec.sandbox.isolate_network = isolation == "network";

  Status s = isolation == "none" || isolation == "network"
                 ? OkStatus()
                 : InvalidArgumentError("unknown isolation \"" + isolation + "\"");
  if (s.ok() && uids_) s = SandboxAttemptLocked(local.tenant, &spec);
  // A replica's certificate and key, once its working dir has its owner (replica_tls.h): only
  // into the attempt dir the agent made, never a directory an assignment names.
  if (s.ok() && !a.value("tls", json()).is_null() && !wd.empty()) {
    s = InvalidArgumentError("a replica's working directory is the agent's; workingDir \"" + wd + "\" refused");
  }
  if (s.ok()) s = WriteReplicaTls(a.value("tls", json()), spec.working_dir, &spec.env);
  if (s.ok()) s = sup_->Start(spec);
  if (!s.ok()) {
    spdlog::error("agent: cannot start attempt {}: {}", id, s.ToString());
    local.start_error = s.ToString();
    local.final_ship_done = true;
  } else {
    spdlog::info("agent: started attempt {} ({}/{}, gpus \"{}\")", id, local.tenant, local.job,
                 devices);
  }
  local_[id] = std::move(local);
}

void Agent::ShipLogs(http::Client& client, const std::string& epoch) {
  struct Item {
    std::string id, path;
    int64_t offset;
    bool ended;  // the attempt had ended before this pass began
  };
  std::vector<Item> items;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto& [id, local] : local_) {
      if (local.log_done || !local.start_error.empty()) continue;
      std::optional<ProcStatus> st = sup_->Get(id);
      items.push_back({id, local.log_path, local.shipped,
                       st.has_value() && st->state != ProcState::kRunning});
    }
  }
  bool transport_down = false;
  for (Item& item : items) {
    if (transport_down || stopping()) break;
    bool eof = false, refused = false;
    for (int chunk = 0; chunk < kMaxChunksPerPass; ++chunk) {
      StatusOr<std::pair<std::string, int64_t>> read = ReadLog(item.path, item.offset, kLogChunk);
      if (!read.ok()) {
        if (read.status().code() == StatusCode::kNotFound) {
          eof = true;
        } else if (read.status().code() == StatusCode::kOutOfRange) {
          item.offset = 0;  // the file was replaced
        } else {
          spdlog::warn("agent: reading log of {}: {}", item.id, read.status().ToString());
        }
        break;
      }
      if (read->first.empty()) {
        eof = true;
        break;
      }
      std::string target = NodePath() + "/logs?epoch=" + QueryEscape(epoch) +
                           "&attempt=" + QueryEscape(item.id) +
                           "&offset=" + std::to_string(item.offset);
      http::Headers headers = AuthHeaders();
      headers.emplace_back("Content-Type", "application/octet-stream");
      StatusOr<http::ClientResponse> r = client.Send("POST", target, read->first, headers);
      if (!r.ok()) {
        spdlog::warn("agent: shipping log of {}: {}", item.id, r.status().ToString());
        transport_down = true;
        break;
      }
      if (r->status == 200) {
        try {
          item.offset = json::parse(r->body).at("offset").get<int64_t>();
        } catch (const std::exception& e) {
          spdlog::warn("agent: shipping log of {}: malformed answer: {}", item.id, e.what());
          item.offset = read->second;
        }
        continue;
      }
      ApiError e = ParseError(*r);
      if (e.code == "out_of_range" || r->body.find("out_of_range") != std::string::npos) {
        size_t at = e.message.find("expected offset ");
        int64_t expected = -1;
        if (at != std::string::npos) {
          try {
            expected = std::stoll(e.message.substr(at + 16));
          } catch (const std::exception&) {
          }
        }
        if (expected >= 0 && expected != item.offset) {
          item.offset = expected;  // resend from what the server has
          continue;
        }
        spdlog::warn("agent: shipping log of {}: {}", item.id, e.message);
        break;
      }
      if (e.code == "failed_precondition") {
        spdlog::info("agent: server takes no more log of {}: {}", item.id, e.message);
        refused = true;
        break;
      }
      spdlog::warn("agent: shipping log of {}: HTTP {}: {}", item.id, r->status, e.message);
      break;
    }
    std::lock_guard<std::mutex> l(mu_);
    auto it = local_.find(item.id);
    if (it == local_.end()) continue;
    it->second.shipped = item.offset;
    if (refused) it->second.log_done = true;
    if (item.ended && (eof || refused)) it->second.final_ship_done = true;
  }
}

void Agent::ReportLoop() {
  http::Client client(options_.server_url, options_.tls);
  HostMetrics host;
  milliseconds backoff = kInitialBackoff;
  milliseconds next_wait{0};  // the first report goes out at once
  while (!stopping()) {
    {
      std::unique_lock<std::mutex> l(wake_mu_);
      wake_cv_.wait_for(l, next_wait, [&] { return wake_ || stopping_.load(); });
      wake_ = false;
    }
    if (stopping()) break;
    next_wait = options_.heartbeat;

    // 1. The states to report, taken before the logs are shipped: a terminal state is only
    //    reported once every byte written before it has been shipped.
    std::string epoch;
    json attempts = json::array();
    std::vector<std::string> terminal;
    json events;
    {
      std::lock_guard<std::mutex> l(mu_);
      epoch = epoch_;
      ReleaseEndedGpusLocked();
      for (const auto& [id, local] : local_) {
        if (local.orphaned) continue;
        if (!local.start_error.empty()) {
          attempts.push_back({{"attempt", id}, {"state", "Failed"}, {"exitCode", 127},
                              {"message", "could not start: " + local.start_error},
                              {"cpuSeconds", 0.0}});
          if (local.gpu_setup_failed) attempts.back()["reason"] = "GpuSetupFailed";
          terminal.push_back(id);
          continue;
        }
        std::optional<ProcStatus> st = sup_->Get(id);
        if (!st) continue;
        attempts.push_back({{"attempt", id}, {"state", ProcStateName(st->state)},
                            {"exitCode", st->exit_code}, {"message", st->message},
                            {"cpuSeconds", st->cpu_seconds}});
        if (st->oom_killed) attempts.back()["oomKilled"] = true;
        if (st->state != ProcState::kRunning) terminal.push_back(id);
      }
      events = std::move(pending_events_);
      pending_events_ = json::array();
    }

    // 2. Logs.
    ShipLogs(client, epoch);

    // 3. The report.
    json body = {{"attempts", attempts}, {"events", events}};
    StatusOr<HostSample> h = host.Sample();
    if (h.ok()) {
      body["metrics"] = MetricsPayload(*h, nvml_ ? nvml_->Sample() : std::vector<GpuSample>{});
    }
    StatusOr<http::ClientResponse> r =
        client.Send("POST", NodePath() + "/report?epoch=" + QueryEscape(epoch), body.dump(),
                    AuthHeaders());
    bool sent = false;
    if (!r.ok()) {
      spdlog::warn("agent: report: {}; retrying in {} ms", r.status().ToString(), backoff.count());
    } else if (r->status != 200) {
      ApiError e = ParseError(*r);
      if (IsEpochError(e)) {
        Reregister(client, epoch);
        events = json::array();  // they were about the old epoch's attempts
        backoff = kInitialBackoff;
        next_wait = milliseconds(0);
      } else {
        spdlog::warn("agent: report: HTTP {}: {}; retrying in {} ms", r->status, e.message,
                     backoff.count());
      }
    } else {
      try {
        json answer = json::parse(r->body);
        std::vector<std::string> stop;
        for (const json& id : answer.value("stop", json::array())) {
          stop.push_back(id.get<std::string>());
        }
        sent = true;
        std::lock_guard<std::mutex> l(mu_);
        for (const std::string& id : terminal) {
          auto it = local_.find(id);
          if (it != local_.end()) it->second.terminal_reported = true;
        }
        for (const std::string& id : stop) {
          auto it = local_.find(id);
          if (it == local_.end()) continue;
          it->second.forget = true;
          if (!it->second.start_error.empty()) continue;
          std::optional<ProcStatus> st = sup_->Get(id);
          if (st && st->state == ProcState::kRunning) {
            spdlog::info("agent: stopping attempt {} (the server fenced it off)", id);
            (void)sup_->Stop(id);
          }
        }
      } catch (const std::exception& e) {
        spdlog::warn("agent: report: malformed answer: {}; retrying in {} ms", e.what(),
                     backoff.count());
      }
    }
    if (sent) {
      backoff = kInitialBackoff;
    } else if (next_wait.count() != 0) {
      next_wait = std::min(backoff, options_.heartbeat);
      backoff = Grow(backoff);
      if (!events.empty()) {  // keep them for the next report
        std::lock_guard<std::mutex> l(mu_);
        for (json& e : pending_events_) events.push_back(std::move(e));
        pending_events_ = std::move(events);
      }
    }

    // 4. Forget what has ended, been shipped and is no longer wanted.
    std::lock_guard<std::mutex> l(mu_);
    for (auto it = local_.begin(); it != local_.end();) {
      Local& local = it->second;
      bool ended = !local.start_error.empty();
      if (!ended) {
        std::optional<ProcStatus> st = sup_->Get(it->first);
        ended = !st || st->state != ProcState::kRunning;
      }
      bool shipped = local.final_ship_done || local.log_done;
      bool unwanted = local.forget || (!local.desired && local.terminal_reported);
      if (ended && shipped && unwanted) {
        spdlog::info("agent: forgetting attempt {}", it->first);
        sup_->Forget(it->first);
        it = local_.erase(it);
      } else {
        ++it;
      }
    }
  }
}

}  // namespace aicloud::agent
