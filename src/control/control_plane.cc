#include "control/control_plane.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>

#include <spdlog/spdlog.h>

#include "core/thread_name.h"
#include "cluster/catalog.h"
#include "control/deployment.h"
#include "control/node_autoscaler.h"
#include "control/replica_ca.h"
#include "control/replica_secret.h"
#include "sched/profile.h"
#include "sched/registry.h"

namespace aicloud::control {
namespace {

namespace fs = std::filesystem;

std::string RandomId(int bytes) {
  static thread_local std::mt19937_64 gen(std::random_device{}());
  static const char* kHex = "0123456789abcdef";
  std::string s;
  for (int i = 0; i < bytes; ++i) {
    uint64_t v = gen();
    s += kHex[v & 15];
    s += kHex[(v >> 4) & 15];
  }
  return s;
}

// With milliseconds: heartbeats are compared at sub-second resolution.
std::string NowRfc3339Ms() {
  auto now = std::chrono::system_clock::now();
  std::time_t t = std::chrono::system_clock::to_time_t(now);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms));
  return buf;
}

std::string Key(const std::string& tenant, const std::string& name) { return tenant + "/" + name; }

json AllocJson(const cluster::Allocation& a) {
  json gpus = json::array();
  for (const cluster::GpuShare& g : a.gpus) {
    json j = {{"index", g.gpu}, {"milli", g.milli}};
    if (g.mem_mib) j["memMiB"] = g.mem_mib;
    if (g.mig_profile >= 0) {
      j["migProfile"] = g.mig_profile;
      j["migStart"] = g.mig_start;
      j["migSlices"] = g.mig_slices;
      j["migCompute"] = g.mig_compute;
    }
    gpus.push_back(j);
  }
  return {{"cpuMillis", a.cpu_milli}, {"memoryMiB", a.mem_mib}, {"powerKw", a.power_kw},
          {"gpus", gpus}};
}

cluster::Allocation AllocFromJson(const json& j, int32_t node) {
  cluster::Allocation a;
  a.node = node;
  a.cpu_milli = j.value("cpuMillis", int64_t{0});
  a.mem_mib = j.value("memoryMiB", int64_t{0});
  a.power_kw = j.value("powerKw", 0.0);
  for (const json& g : j.value("gpus", json::array())) {
    cluster::GpuShare s;
    s.gpu = static_cast<int16_t>(g.value("index", 0));
    s.milli = g.value("milli", 0);
    s.mem_mib = g.value("memMiB", int64_t{0});
    s.mig_profile = static_cast<int8_t>(g.value("migProfile", -1));
    s.mig_start = static_cast<int8_t>(g.value("migStart", -1));
    s.mig_slices = static_cast<int8_t>(g.value("migSlices", 0));
    s.mig_compute = static_cast<int8_t>(g.value("migCompute", 0));
    a.gpus.push_back(s);
  }
  return a;
}

// Unique forever: the job's uid (a fresh UUID per created object), the attempt and the worker.
std::string AttemptId(const std::string& job_uid, int attempt, int worker) {
  return job_uid + "-a" + std::to_string(attempt) + "-w" + std::to_string(worker);
}

bool Terminal(const std::string& phase) { return phase == "Succeeded" || phase == "Failed"; }
bool WorkerDone(const std::string& s) { return s == "Succeeded" || s == "Failed" || s == "Killed" || s == "Lost"; }

// Places the workers of a job through `s` (one alone, several as a gang), their uids taken from
// *next_uid and their GPU models named in `c`. Returns the placements, all of them or none;
// *pods gets the requests and *reason the scheduler's reason when none.
std::vector<sched::ScheduleResult> PlaceWorkers(sched::Scheduler& s, cluster::Cluster& c, const JobSpec& spec,
                                                const std::string& tenant, const std::string& name,
                                                int64_t* next_uid, std::vector<sched::PodRequest>* pods,
                                                std::string* reason) {
  pods->clear();
  for (int i = 0; i < spec.workers; ++i) {
    sched::PodRequest p = WorkerRequest(spec, tenant, name, i);
    p.uid = (*next_uid)++;
    for (const std::string& m : spec.gpu_models) p.gpu_models.push_back(c.InternModel(m));
    pods->push_back(std::move(p));
  }
  std::vector<sched::ScheduleResult> placed;
  if (pods->size() == 1) {
    sched::ScheduleResult r = s.ScheduleOne((*pods)[0]);
    *reason = r.reason;
    if (r.placed) placed.push_back(r);
  } else {
    sched::GangResult g = s.ScheduleGang(*pods);
    *reason = g.reason;
    if (g.placed) placed = g.members;
  }
  return placed;
}

}  // namespace

ControlPlane::ControlPlane(store::Store* store, Clock* clock, Metrics* metrics,
                           ControlOptions options)
    : store_(store), clock_(clock), metrics_(metrics), options_(std::move(options)),
      instance_(RandomId(8)) {
  if (metrics_ != nullptr) {
    cycle_seconds_ = metrics_->AddHistogram("aicloud_scheduler_cycle_seconds",
                                            "Time of one scheduling pass over the pending jobs",
                                            {}, Histogram::LatencyBuckets());
    jobs_finished_ = metrics_->AddCounter("aicloud_jobs_finished_total",
                                          "Jobs that reached a terminal phase", {"tenant", "phase"});
    metrics_->AddGaugeFn("aicloud_jobs", "Jobs by phase and tenant", {"tenant", "phase"}, [this] {
      std::lock_guard<std::mutex> l(mu_);
      std::map<std::pair<std::string, std::string>, double> n;
      for (const auto& [k, j] : jobs_) n[{j.tenant, j.phase}] += 1;
      std::vector<std::pair<LabelValues, double>> rows;
      for (const auto& [k, v] : n) rows.push_back({{k.first, k.second}, v});
      return rows;
    });
    metrics_->AddGaugeFn("aicloud_queue_depth", "Pending jobs per tenant", {"tenant"}, [this] {
      std::lock_guard<std::mutex> l(mu_);
      std::map<std::string, double> n;
      for (const auto& [k, j] : jobs_) {
        if (j.phase == "Pending") n[j.tenant] += 1;
      }
      std::vector<std::pair<LabelValues, double>> rows;
      for (const auto& [k, v] : n) rows.push_back({{k}, v});
      return rows;
    });
    metrics_->AddGaugeFn("aicloud_gpu_allocated", "GPUs allocated, by model and tenant",
                         {"model", "tenant"}, [this] {
      std::lock_guard<std::mutex> l(mu_);
      std::map<std::pair<std::string, std::string>, double> n;
      for (const auto& [k, j] : jobs_) {
        for (const Worker& w : j.workers) {
          if (w.node.empty() || WorkerDone(w.state)) continue;
          int32_t id = cluster_.FindNode(w.node);
          if (id < 0) continue;
          const cluster::Node& node = cluster_.node(id);
          std::string model = node.model >= 0 ? cluster_.model_name(node.model) : "none";
          double gpus = 0;
          for (const cluster::GpuShare& g : w.alloc.gpus) {
            gpus += g.mig_profile >= 0 ? g.mig_compute / 7.0 : g.milli / 1000.0;
          }
          if (gpus > 0) n[{model, j.tenant}] += gpus;
        }
      }
      std::vector<std::pair<LabelValues, double>> rows;
      for (const auto& [k, v] : n) rows.push_back({{k.first, k.second}, v});
      return rows;
    });
    metrics_->AddGaugeFn("aicloud_nodes", "Nodes by readiness", {"state"}, [this] {
      std::lock_guard<std::mutex> l(mu_);
      double ready = 0, not_ready = 0, cordoned = 0;
      for (const auto& [k, n] : nodes_) {
        (n.ready ? ready : not_ready) += 1;
        if (n.cordoned) cordoned += 1;
      }
      return std::vector<std::pair<LabelValues, double>>{
          {{"Ready"}, ready}, {{"NotReady"}, not_ready}, {{"Cordoned"}, cordoned}};
    });
  }
}

ControlPlane::~ControlPlane() { Stop(); }

void ControlPlane::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  RequestTurn();
  assign_cv_.notify_all();
  turn_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::string ControlPlane::LogPath(const std::string& attempt) const {
  return (fs::path(options_.data_dir) / "logs" / (attempt + ".log")).string();
}

ControlPlane::Node* ControlPlane::FindNode(const std::string& name) {
  auto it = nodes_.find(name);
  return it == nodes_.end() ? nullptr : &it->second;
}

ControlPlane::Job* ControlPlane::JobOfAttempt(const std::string& attempt) {
  auto it = attempt_job_.find(attempt);
  if (it == attempt_job_.end()) return nullptr;
  auto j = jobs_.find(it->second);
  return j == jobs_.end() ? nullptr : &j->second;
}

Status ControlPlane::AddClusterNode(Node& node, const json& spec) {
  cluster::Node n;
  n.name = node.name;
  n.cpu_milli = spec.value("cpuMillis", int64_t{0});
  n.mem_mib = spec.value("memoryBytes", int64_t{0}) >> 20;
  if (n.cpu_milli <= 0 || n.mem_mib <= 0) {
    return InvalidArgumentError("node " + node.name + ": spec.cpuMillis and spec.memoryBytes must be positive");
  }
  for (const json& g : spec.value("gpus", json::array())) {
    std::string model_name = g.value("model", "");
    const cluster::GpuModelSpec* m = cluster::FindGpuModel(model_name);
    if (m == nullptr) {
      return InvalidArgumentError("node " + node.name + ": GPU model \"" + model_name +
                                  "\" is not in the catalog");
    }
    cluster::ModelId id = cluster_.InternModel(m->name);
    if (n.model != cluster::kNoModel && n.model != id) {
      return InvalidArgumentError("node " + node.name + ": mixed GPU models on one node");
    }
    n.model = id;
    cluster::Gpu gpu;
    int64_t mem = g.value("memoryBytes", int64_t{0});
    gpu.mem_mib = mem > 0 ? (mem >> 20) : static_cast<int64_t>(m->memory_gib * 1024);
    gpu.numa = static_cast<int16_t>(g.value("numa", 0));
    gpu.pcie_switch = static_cast<int16_t>(g.value("pcieSwitch", -1));
    int domain = g.value("nvlinkDomain", -1);
    gpu.nvlink_domain = domain < 0 ? -1 : static_cast<int32_t>(cluster_.nodes().size()) * 64 + domain;
    n.gpus.push_back(gpu);
  }
  n.pool = spec.value("pool", "");
  const json labels = spec.value("labels", json::object());
  for (const auto& [k, v] : labels.items()) {
    if (v.is_string()) n.labels[k] = v.get<std::string>();
  }
  for (const json& t : spec.value("taints", json::array())) {
    n.taints.push_back({t.value("key", ""), t.value("value", ""), t.value("effect", "NoSchedule")});
  }
  std::string rack = spec.value("rack", "");
  if (!rack.empty()) {
    int32_t r = cluster_.FindRack(rack);
    if (r < 0) {
      cluster::Rack rk;
      rk.name = rack;
      r = cluster_.AddRack(rk);
    }
    n.rack = r;
  }
  n.unschedulable = true;  // until an agent heartbeats
  node.id = cluster_.AddNode(std::move(n));
  ++capacity_gen_;
  return OkStatus();
}

// --- start and recovery -----------------------------------------------------------------------

Status ControlPlane::Start() {
  std::error_code ec;
  fs::create_directories(fs::path(options_.data_dir) / "logs", ec);
  if (ec) return InternalError("cannot create " + options_.data_dir + "/logs: " + ec.message());
  // Jobs' output is their tenants' own: not for the sandboxed jobs of other tenants that may pass
  // through the data dir (aicloud up).
  fs::permissions(fs::path(options_.data_dir) / "logs", fs::perms::owner_all, fs::perm_options::replace, ec);
  if (ec) return InternalError("cannot make " + options_.data_dir + "/logs private (mode 0700): " + ec.message());
  StatusOr<sched::Profile> profile = sched::PolicyProfile(options_.policy);
  if (!profile.ok()) return profile.status();
  sched::SchedulerOptions so;
  so.tie_break = sched::SchedulerOptions::TieBreak::kFirst;
  StatusOr<std::unique_ptr<sched::Scheduler>> s =
      sched::Scheduler::Create(&cluster_, *profile, sched::Registry::BuiltIn(), so);
  if (!s.ok()) return s.status();
  scheduler_ = std::move(*s);
  profile_ = *profile;

  std::lock_guard<std::mutex> l(mu_);
  start_us_ = clock_->NowMicros();
  seen_revision_ = store_->Revision();
  // Nodes: known, not ready until their agent speaks again (the grace runs from now).
  StatusOr<store::ListResult> nodes = store_->List({.kind = "Node"});
  if (!nodes.ok()) return nodes.status();
  for (const json& o : nodes->items) {
    Node n;
    n.name = o["metadata"]["name"];
    n.cordoned = o["spec"].value("unschedulable", false);
    n.last_seen_us = start_us_;
    n.ready = false;
    Status st = AddClusterNode(n, o["spec"]);
    if (!st.ok()) continue;
    nodes_[n.name] = n;
  }
  StatusOr<store::ListResult> tenants = store_->List({.kind = "Tenant"});
  if (tenants.ok()) {
    for (const json& t : tenants->items) {
      if (t.contains("spec") && t["spec"].value("sleeping", false)) {
        sleeping_tenants_.insert(t["metadata"]["name"].get<std::string>());
      }
    }
  }
  // Jobs: re-adopt the placements of scheduled and running ones.
  std::string token;
  do {
    StatusOr<store::ListResult> page =
        store_->List({.kind = "Job", .limit = 1000, .continue_token = token});
    if (!page.ok()) return page.status();
    for (const json& o : page->items) {
      Job* j = AddJob(o);
      if (j == nullptr) continue;
      const json status = o.value("status", json::object());
      j->phase = status.value("phase", "Pending");
      j->reason = status.value("reason", "");
      j->message = status.value("message", "");
      j->attempt = status.value("attempt", 0);
      j->failures = status.value("failures", 0);
      if (status.contains("usage")) {
        j->gpu_seconds = status["usage"].value("gpuSeconds", 0.0);
        j->cpu_seconds = status["usage"].value("cpuSeconds", 0.0);
        j->cost = status["usage"].value("costUsd", 0.0);
      }
      if (j->phase != "Scheduled" && j->phase != "Running") continue;
      const std::string key = Key(j->tenant, j->name);
      bool ok = true;
      for (const json& wj : status.value("workers", json::array())) {
        Worker w;
        w.node = wj.value("node", "");
        w.attempt = wj.value("attempt", "");
        w.state = wj.value("state", "Pending");
        w.started_at = wj.value("startedAt", "");
        w.exit_code = wj.value("exitCode", -1);
        int32_t nid = cluster_.FindNode(w.node);
        if (nid < 0 || !j->spec) {
          ok = false;
          j->workers.push_back(w);
          continue;
        }
        w.alloc = AllocFromJson(wj.value("allocation", json::object()), nid);
        w.uid = next_uid_++;
        if (!WorkerDone(w.state)) {
          sched::PodRequest pod = WorkerRequest(*j->spec, j->tenant, j->name,
                                                static_cast<int>(j->workers.size()));
          pod.uid = w.uid;
          for (const std::string& m : j->spec->gpu_models) pod.gpu_models.push_back(cluster_.InternModel(m));
          Status st = scheduler_->Adopt(pod, w.alloc);
          if (!st.ok()) {
            ok = false;
          } else {
            uid_worker_[w.uid] = {key, static_cast<int>(j->workers.size())};
            nodes_[w.node].attempts.insert(w.attempt);
          }
        }
        attempt_job_[w.attempt] = key;
        j->workers.push_back(w);
      }
      if (!ok) {
        EndAttempt(*j, "Lost", "RecoveryFailed",
                   "placement could not be restored after a server restart", false);
      }
    }
    token = page->continue_token;
  } while (!token.empty());
  thread_ = std::thread([this] {
    SetThreadName("control-loop");
    Loop();
  });
  return OkStatus();
}

ControlPlane::Job* ControlPlane::AddJob(const json& o) {
  const std::string tenant = o["metadata"].value("tenant", "");
  const std::string name = o["metadata"].value("name", "");
  const std::string key = Key(tenant, name);
  if (jobs_.count(key)) return nullptr;
  Job j;
  j.tenant = tenant;
  j.name = name;
  j.uid = o["metadata"].value("uid", "");
  j.object = o;
  j.rv = store::ResourceVersionOf(o);
  j.seq = next_seq_++;
  j.queued_us = clock_->NowMicros();
  StatusOr<JobSpec> spec = ParseJobSpec(o.value("spec", json::object()));
  if (spec.ok()) {
    j.spec = *spec;
  } else {
    j.phase = "Failed";
    j.reason = "InvalidSpec";
    j.message = spec.status().message();
    j.dirty = true;
  }
  auto [it, added] = jobs_.emplace(key, std::move(j));
  return &it->second;
}

// --- the controller loop ----------------------------------------------------------------------

void ControlPlane::Wake() { RequestTurn(); }

// Never takes mu_, so API threads do not wait out a turn (which commits to the store) just to
// ask for the next one. Turns requested while one runs coalesce into one more.
void ControlPlane::RequestTurn() {
  wake_.store(true);
  { std::lock_guard<std::mutex> w(wake_mu_); }  // the loop is either before its check or waiting
  wake_cv_.notify_one();
}

void ControlPlane::Sync() {
  std::unique_lock<std::mutex> l(mu_);
  RequestTurn();
  uint64_t target = turns_ + 2;
  turn_cv_.wait_for(l, std::chrono::seconds(10), [&] { return stop_ || turns_ >= target; });
}

void ControlPlane::Loop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> w(wake_mu_);
      wake_cv_.wait_for(w, options_.tick, [&] { return wake_.load(); });
    }
    wake_.store(false);
    std::unique_lock<std::mutex> l(mu_);
    if (stop_) break;
    Turn();
    ++turns_;
    l.unlock();
    turn_cv_.notify_all();
  }
}

void ControlPlane::Turn() {
  ApplyStoreChanges();
  ApplyReports();
  CheckNodes();
  auto t0 = std::chrono::steady_clock::now();
  ScheduleJobs();
  if (cycle_seconds_ != nullptr) {
    cycle_seconds_->Observe({}, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  Flush();
}

void ControlPlane::ApplyStoreChanges() {
  while (true) {
    StatusOr<store::ChangesResult> ch = store_->Changes("", seen_revision_, 2000);
    if (!ch.ok()) {
      // Fell behind the bounded log: re-read jobs we do not know yet.
      seen_revision_ = store_->Revision();
      StatusOr<store::ListResult> all = store_->List({.kind = "Job"});
      if (all.ok()) {
        for (const json& o : all->items) AddJob(o);
      }
      return;
    }
    for (const store::WatchEvent& e : ch->events) {
      const std::string kind = e.object.value("kind", "");
      const json& meta = e.object["metadata"];
      if (kind == "Job") {
        const std::string key = Key(meta.value("tenant", ""), meta.value("name", ""));
        auto it = jobs_.find(key);
        if (e.type == store::EventType::kDeleted) {
          if (it != jobs_.end() && it->second.uid == meta.value("uid", "")) {
            ReleaseWorkers(it->second);
            for (const Worker& w : it->second.workers) attempt_job_.erase(w.attempt);
            jobs_.erase(it);
          }
        } else if (it == jobs_.end()) {
          AddJob(e.object);
        } else if (e.resource_version > it->second.rv) {
          // Someone else wrote it (labels): keep their metadata, our status.
          it->second.object = e.object;
          it->second.rv = e.resource_version;
        }
      } else if (kind == "Node") {
        const std::string name = meta.value("name", "");
        Node* n = FindNode(name);
        if (n != nullptr && e.type != store::EventType::kDeleted) {
          bool cordon = e.object.value("spec", json::object()).value("unschedulable", false);
          if (cordon != n->cordoned) {
            n->cordoned = cordon;
            cluster::Node& cn = cluster_.node(n->id);
            cn.unschedulable = n->cordoned || !n->ready;
            cluster_.Touch(n->id);
            ++capacity_gen_;
          }
        } else if (n != nullptr) {
          n->cordoned = true;
          cluster_.node(n->id).unschedulable = true;
          cluster_.Touch(n->id);
          ++capacity_gen_;
        }
      } else if (kind == "Tenant") {
        const std::string name = meta.value("name", "");
        if (e.type != store::EventType::kDeleted &&
            e.object.value("spec", json::object()).value("sleeping", false)) {
          sleeping_tenants_.insert(name);
        } else {
          sleeping_tenants_.erase(name);
          ++capacity_gen_;
        }
      }
    }
    seen_revision_ = ch->resource_version;
    if (ch->events.size() < 2000) return;
  }
}

void ControlPlane::ApplyReports() {
  std::vector<Report> reports;
  reports.swap(reports_);
  for (const Report& r : reports) {
    Job* job = JobOfAttempt(r.attempt);
    if (job == nullptr) continue;
    for (Worker& w : job->workers) {
      if (w.attempt != r.attempt || w.node != r.node || WorkerDone(w.state)) continue;
      if (r.state == "Running" && w.state == "Pending") {
        w.state = "Running";
        w.started_at = NowRfc3339Ms();
        w.started_us = clock_->NowMicros();
        job->dirty = true;
      } else if (r.state == "Succeeded" || r.state == "Failed" || r.state == "Killed") {
        if (w.started_us == 0) {
          w.started_us = clock_->NowMicros();
          w.started_at = NowRfc3339Ms();
        }
        w.state = r.state;
        w.exit_code = r.exit_code;
        w.message = r.message;
        w.finished_at = NowRfc3339Ms();
        w.cpu_seconds = r.cpu_seconds;
        double secs = static_cast<double>(clock_->NowMicros() - w.started_us) / kMicrosPerSecond;
        double gpus = job->spec ? job->spec->GpusPerWorker() : 0;
        job->gpu_seconds += secs * gpus;
        job->cpu_seconds += r.cpu_seconds > 0 ? r.cpu_seconds : 0;
        int32_t nid = cluster_.FindNode(w.node);
        if (nid >= 0 && cluster_.node(nid).model >= 0) {
          const cluster::GpuModelSpec* m =
              cluster::FindGpuModel(cluster_.model_name(cluster_.node(nid).model));
          if (m != nullptr) job->cost += secs * gpus / 3600.0 * m->price_per_hour;
        }
        // Free this worker's resources now; the node forgets the attempt.
        if (w.uid != 0) {
          (void)scheduler_->Remove(w.uid);
          ++capacity_gen_;
          uid_worker_.erase(w.uid);
          w.uid = 0;
        }
        if (Node* n = FindNode(w.node)) {
          n->attempts.erase(w.attempt);
          to_publish_.insert(w.node);
        }
        job->dirty = true;
        if (r.state != "Succeeded" && r.reason == "GpuSetupFailed") {
          // The node could not set up (or wipe) its GPUs for this attempt: requeued whatever
          // the restart policy, without using a retry, as for a drained node.
          EndAttempt(*job, "Killed", "GpuSetupFailed",
                     "worker " + w.attempt + " on " + w.node + ": " + r.message, false);
          break;
        }
        if (r.state != "Succeeded") {
          const std::string reason = r.oom_killed ? "OOMKilled" : "WorkerFailed";
          Event(*job, "Warning", reason,
                "worker on " + w.node + " (attempt " + w.attempt + "): " + r.message);
          EndAttempt(*job, "Killed", reason, "worker " + w.attempt + " " + r.message, true);
          break;
        }
      }
    }
    UpdatePhase(*job);
  }
}

void ControlPlane::UpdatePhase(Job& job) {
  if (Terminal(job.phase) || job.phase == "Pending" || job.workers.empty()) return;
  bool all_running = true, all_succeeded = true;
  for (const Worker& w : job.workers) {
    if (w.state != "Running" && w.state != "Succeeded") all_running = false;
    if (w.state != "Succeeded") all_succeeded = false;
  }
  if (all_succeeded) {
    job.phase = "Succeeded";
    job.reason = "Completed";
    job.message = "all " + std::to_string(job.workers.size()) + " workers exited 0";
    job.dirty = true;
    Event(job, "Normal", "Completed", job.message);
    if (jobs_finished_) jobs_finished_->Inc({job.tenant, job.phase});
  } else if (all_running && job.phase == "Scheduled") {
    job.phase = "Running";
    job.reason = "Started";
    job.dirty = true;
    Event(job, "Normal", "Started", "all workers running");
  }
}

void ControlPlane::ReleaseWorkers(Job& job) {
  for (Worker& w : job.workers) {
    if (w.uid != 0) {
      (void)scheduler_->Remove(w.uid);
      ++capacity_gen_;
      uid_worker_.erase(w.uid);
      w.uid = 0;
    }
    if (Node* n = FindNode(w.node)) {
      if (n->attempts.erase(w.attempt)) to_publish_.insert(w.node);
    }
  }
}

void ControlPlane::EndAttempt(Job& job, const std::string& worker_state, const std::string& reason,
                              const std::string& message, bool counts_as_failure) {
  for (Worker& w : job.workers) {
    if (!WorkerDone(w.state)) {
      w.state = worker_state;
      w.finished_at = NowRfc3339Ms();
      if (w.message.empty()) w.message = reason;
    }
  }
  ReleaseWorkers(job);
  if (counts_as_failure) ++job.failures;
  job.dirty = true;
  bool retry = false;
  if (!job.spec || reason == "Cancelled") {
    retry = false;
  } else if (!counts_as_failure) {
    retry = true;  // drained or not restorable: not the job's fault
  } else {
    retry = job.spec->restart_policy == "OnFailure" && job.failures <= job.spec->max_retries;
  }
  if (retry) {
    job.phase = "Pending";
    job.reason = reason;
    job.message = message + "; requeued";
    job.queued_us = clock_->NowMicros();
    Event(job, "Warning", "Requeued", job.message);
  } else {
    job.phase = "Failed";
    job.reason = reason;
    job.message = message;
    Event(job, "Warning", reason, message);
    if (jobs_finished_) jobs_finished_->Inc({job.tenant, job.phase});
  }
}

void ControlPlane::CheckNodes() {
  const int64_t now = clock_->NowMicros();
  const int64_t grace = std::chrono::duration_cast<std::chrono::microseconds>(options_.node_grace).count();
  for (auto& [name, n] : nodes_) {
    if (n.ready && now - n.last_seen_us > grace) {
      n.ready = false;
      n.dirty = true;
      cluster::Node& cn = cluster_.node(n.id);
      cn.unschedulable = true;
      cluster_.Touch(n.id);
      ++capacity_gen_;
      // Its attempts are lost: end them (requeued by restart policy).
      std::vector<std::string> lost(n.attempts.begin(), n.attempts.end());
      for (const std::string& a : lost) {
        Job* j = JobOfAttempt(a);
        if (j == nullptr || Terminal(j->phase) || j->phase == "Pending") continue;
        EndAttempt(*j, "Lost", "NodeLost",
                   "node " + name + " stopped heartbeating (grace " +
                       std::to_string(options_.node_grace.count() / 1000) + "s)",
                   true);
      }
    }
  }
}

void ControlPlane::ScheduleJobs() {
  std::vector<Job*> pending;
  for (auto& [k, j] : jobs_) {
    if (j.phase != "Pending" || !j.spec) continue;
    // Nothing freed or added since this job last failed to fit: it would fail again. Without
    // this every turn would retry every pending job, and a burst of submissions would cost
    // O(pending^2) placements.
    if (j.failed_gen == capacity_gen_) continue;
    if (sleeping_tenants_.count(j.tenant)) {
      if (j.reason != "TenantSleeping") {
        j.reason = "TenantSleeping";
        j.message = "tenant " + j.tenant + " is asleep; nothing of it is scheduled until it is woken";
        j.queue_message.clear();
        j.dirty = true;
      }
      continue;
    }
    pending.push_back(&j);
  }
  std::sort(pending.begin(), pending.end(), [](const Job* a, const Job* b) {
    if (a->spec->priority != b->spec->priority) return a->spec->priority > b->spec->priority;
    return a->seq < b->seq;
  });
  for (Job* j : pending) {
    const JobSpec& spec = *j->spec;
    const std::string key = Key(j->tenant, j->name);
    std::vector<sched::PodRequest> pods;
    std::string reason;
    std::vector<sched::ScheduleResult> placed =
        PlaceWorkers(*scheduler_, cluster_, spec, j->tenant, j->name, &next_uid_, &pods, &reason);
    if (placed.size() != pods.size()) {
      j->failed_gen = capacity_gen_;
      if (j->queue_message != reason) {
        j->queue_message = reason;
        j->reason = "Unschedulable";
        j->message = reason;
        j->dirty = true;
        Event(*j, "Warning", "FailedScheduling", reason);
      }
      continue;
    }
    ++j->attempt;
    j->workers.clear();
    for (size_t i = 0; i < placed.size(); ++i) {
      Worker w;
      w.uid = pods[i].uid;
      w.alloc = placed[i].alloc;
      w.node = cluster_.node(placed[i].node).name;
      w.attempt = AttemptId(j->uid, j->attempt, static_cast<int>(i));
      uid_worker_[w.uid] = {key, static_cast<int>(i)};
      attempt_job_[w.attempt] = key;
      nodes_[w.node].attempts.insert(w.attempt);
      to_publish_.insert(w.node);
      j->workers.push_back(std::move(w));
    }
    j->phase = "Scheduled";
    j->reason = "Scheduled";
    j->queue_message.clear();
    std::string where;
    for (const Worker& w : j->workers) where += (where.empty() ? "" : ", ") + w.node;
    j->message = "attempt " + std::to_string(j->attempt) + " on " + where;
    j->dirty = true;
    Event(*j, "Normal", "Scheduled", j->message);
  }
}

json ControlPlane::StatusOf(const Job& job) const {
  json workers = json::array();
  for (size_t i = 0; i < job.workers.size(); ++i) {
    const Worker& w = job.workers[i];
    json wj = {{"index", i}, {"node", w.node}, {"attempt", w.attempt}, {"state", w.state},
               {"allocation", AllocJson(w.alloc)}};
    if (!w.started_at.empty()) wj["startedAt"] = w.started_at;
    if (!w.finished_at.empty()) wj["finishedAt"] = w.finished_at;
    if (w.exit_code >= 0) wj["exitCode"] = w.exit_code;
    if (!w.message.empty()) wj["message"] = w.message;
    workers.push_back(wj);
  }
  json s = {{"phase", job.phase}, {"attempt", job.attempt}, {"failures", job.failures},
            {"workers", workers},
            {"usage", {{"gpuSeconds", job.gpu_seconds}, {"cpuSeconds", job.cpu_seconds},
                       {"costUsd", job.cost}}}};
  if (!job.reason.empty()) s["reason"] = job.reason;
  if (!job.message.empty()) s["message"] = job.message;
  if (Terminal(job.phase)) s["finishedAt"] = NowRfc3339Ms();
  return s;
}

void ControlPlane::Event(const Job& job, const std::string& type, const std::string& reason,
                         const std::string& message) {
  json e = {{"apiVersion", "aicloud/v1"},
            {"kind", "Event"},
            {"metadata", {{"name", job.name + "." + instance_ + "." + std::to_string(++event_counter_)},
                          {"tenant", job.tenant}}},
            {"spec", {{"type", type}, {"reason", reason}, {"message", message},
                      {"involvedObject", {{"kind", "Job"}, {"name", job.name}}}}}};
  events_.push_back(std::move(e));
}

void ControlPlane::Flush() {
  std::vector<std::string> keys;
  std::vector<store::WriteOp> ops;
  for (auto& [k, j] : jobs_) {
    if (!j.dirty) continue;
    json o = j.object;
    o["status"] = StatusOf(j);
    if (o["status"].contains("finishedAt") && j.object.contains("status") &&
        j.object["status"].contains("finishedAt")) {
      o["status"]["finishedAt"] = j.object["status"]["finishedAt"];
    }
    keys.push_back(k);
    ops.push_back(store::WriteOp::Update(std::move(o), j.rv));
  }
  for (auto& [name, n] : nodes_) {
    if (!n.dirty) continue;
    StatusOr<json> cur = store_->Get({"Node", "", name});
    if (!cur.ok()) {
      n.dirty = false;
      continue;
    }
    (*cur)["status"] = {{"phase", n.ready ? "Ready" : "NotReady"}, {"epoch", n.epoch},
                        {"lastHeartbeat", NowRfc3339Ms()}};
    keys.push_back("node:" + name);
    ops.push_back(store::WriteOp::Update(std::move(*cur), store::ResourceVersionOf(*cur)));
  }
  if (!ops.empty()) {
    StatusOr<std::vector<json>> done = store_->Commit(ops);
    std::vector<StatusOr<json>> results;
    if (done.ok()) {
      for (json& o : *done) results.emplace_back(std::move(o));
    } else {
      // One op failed (a conflict, a deleted job): write them one by one.
      for (store::WriteOp& op : ops) {
        StatusOr<std::vector<json>> one = store_->Commit({op});
        if (one.ok()) {
          results.emplace_back(std::move((*one)[0]));
        } else {
          results.emplace_back(one.status());
        }
      }
    }
    for (size_t i = 0; i < keys.size(); ++i) {
      if (keys[i].rfind("node:", 0) == 0) {
        // A write that lost to another writer of the Node (a cordon, a label) is made again
        // next turn from a fresh read, so a readiness change is never dropped.
        if (Node* n = FindNode(keys[i].substr(5)); n != nullptr && results[i].ok()) n->dirty = false;
        continue;
      }
      auto it = jobs_.find(keys[i]);
      if (it == jobs_.end()) continue;
      Job& j = it->second;
      if (results[i].ok()) {
        j.object = *results[i];
        j.rv = store::ResourceVersionOf(j.object);
        j.dirty = false;
        continue;
      }
      StatusOr<json> cur = store_->Get({"Job", j.tenant, j.name});
      if (cur.ok() && (*cur)["metadata"].value("uid", "") == j.uid) {
        // Conflict with a label edit: adopt the new version and write again next turn.
        j.object = *cur;
        j.rv = store::ResourceVersionOf(*cur);
      } else {
        // The job is gone: drop its placement before any agent sees it.
        ReleaseWorkers(j);
        j.phase = "Failed";
        j.dirty = false;
        for (const Worker& w : j.workers) attempt_job_.erase(w.attempt);
        jobs_.erase(it);
      }
    }
  }
  if (!events_.empty()) {
    std::vector<store::WriteOp> ev;
    for (json& e : events_) ev.push_back(store::WriteOp::Create(std::move(e)));
    events_.clear();
    (void)store_->Commit(std::move(ev));
  }
  // Only now, with placements durable, let agents see them.
  bool any = false;
  for (const std::string& n : to_publish_) {
    if (Node* node = FindNode(n)) {
      ++node->version;
      any = true;
    }
  }
  to_publish_.clear();
  if (any) assign_cv_.notify_all();
}

// --- agent protocol ---------------------------------------------------------------------------

StatusOr<json> ControlPlane::RegisterNode(const std::string& name, const json& spec) {
  std::unique_lock<std::mutex> l(mu_);
  if (stop_) return UnavailableError("server is stopping");
  Node* n = FindNode(name);
  StatusOr<json> cur = store_->Get({"Node", "", name});
  bool cordoned = cur.ok() && (*cur)["spec"].value("unschedulable", false);
  if (n == nullptr) {
    Node fresh;
    fresh.name = name;
    AICLOUD_RETURN_IF_ERROR(AddClusterNode(fresh, spec));
    n = &(nodes_[name] = fresh);
  } else {
    // A new agent incarnation: whatever the old one ran is lost.
    std::vector<std::string> lost(n->attempts.begin(), n->attempts.end());
    for (const std::string& a : lost) {
      Job* j = JobOfAttempt(a);
      if (j == nullptr || Terminal(j->phase) || j->phase == "Pending") continue;
      EndAttempt(*j, "Lost", "AgentRestarted", "agent on " + name + " restarted", true);
    }
  }
  json obj = cur.ok() ? *cur
                      : json{{"apiVersion", "aicloud/v1"}, {"kind", "Node"}, {"metadata", {{"name", name}}}};
  json s = spec;
  s["unschedulable"] = cordoned;
  // An address the operator set on the Node stays unless the agent reports one.
  if (!s.contains("address") && cur.ok() && (*cur)["spec"].contains("address")) s["address"] = (*cur)["spec"]["address"];
  obj["spec"] = s;
  n->address = s.contains("address") && s["address"].is_string() ? s["address"].get<std::string>() : "";
  n->epoch = RandomId(8);
  n->registered = true;
  n->ready = true;
  n->cordoned = cordoned;
  n->last_seen_us = clock_->NowMicros();
  obj["status"] = {{"phase", "Ready"}, {"epoch", n->epoch}, {"lastHeartbeat", NowRfc3339Ms()}};
  StatusOr<json> w = cur.ok() ? store_->Update(obj, store::ResourceVersionOf(*cur)) : store_->Create(obj);
  if (!w.ok()) return w.status();
  cluster::Node& cn = cluster_.node(n->id);
  cn.unschedulable = n->cordoned;
  cluster_.Touch(n->id);
  ++capacity_gen_;
  ++n->version;
  RequestTurn();
  assign_cv_.notify_all();
  return json{{"epoch", n->epoch}, {"instance", instance_}, {"node", name}};
}

StatusOr<json> ControlPlane::AgentReport(const std::string& node, const std::string& epoch,
                                         const json& report) {
  std::lock_guard<std::mutex> l(mu_);
  Node* n = FindNode(node);
  if (n == nullptr || !n->registered) return FailedPreconditionError("node " + node + " is not registered; register first");
  if (n->epoch != epoch) {
    return FailedPreconditionError("stale agent epoch " + epoch + " for node " + node + "; register again");
  }
  n->last_seen_us = clock_->NowMicros();
  if (report.contains("metrics")) n->metrics = report["metrics"];
  if (!n->ready) {
    n->ready = true;
    n->dirty = true;
    cluster::Node& cn = cluster_.node(n->id);
    cn.unschedulable = n->cordoned;
    cluster_.Touch(n->id);
    ++capacity_gen_;
    RequestTurn();
  }
  json stop = json::array();
  for (const json& a : report.value("attempts", json::array())) {
    const std::string id = a.value("attempt", "");
    if (!n->attempts.count(id)) {
      stop.push_back(id);  // not (or no longer) this node's: fence it off
      continue;
    }
    Report r;
    r.node = node;
    r.attempt = id;
    r.state = a.value("state", "");
    r.exit_code = a.value("exitCode", -1);
    r.message = a.value("message", "");
    r.reason = a.value("reason", "");
    r.cpu_seconds = a.value("cpuSeconds", 0.0);
    r.oom_killed = a.value("oomKilled", false);
    reports_.push_back(std::move(r));
  }
  // Events the agent saw (e.g. a GPU memory wipe between tenants), recorded in the tenant.
  for (const json& ev : report.value("events", json::array())) {
    const std::string tenant = ev.value("tenant", "");
    if (tenant.empty() || !ev.is_object()) continue;
    events_.push_back({{"apiVersion", "aicloud/v1"},
                       {"kind", "Event"},
                       {"metadata", {{"name", node + "." + instance_ + "." + std::to_string(++event_counter_)},
                                     {"tenant", tenant}}},
                       {"spec", {{"type", ev.value("type", "") == "Warning" ? "Warning" : "Normal"},
                                 {"reason", ev.value("reason", "AgentEvent")},
                                 {"message", "node " + node + ": " + ev.value("message", "")},
                                 {"involvedObject", {{"kind", "Job"}, {"name", ev.value("job", "")}}}}}});
  }
  if (!reports_.empty() || !events_.empty()) RequestTurn();
  return json{{"stop", stop}};
}

json ControlPlane::AttemptJson(const Job& job, const Worker& w) const {
  const JobSpec& s = *job.spec;
  json env = s.env;
  int index = static_cast<int>(&w - job.workers.data());
  env["AICLOUD_JOB"] = job.name;
  env["AICLOUD_TENANT"] = job.tenant;
  env["AICLOUD_WORKER"] = std::to_string(index);
  env["AICLOUD_WORKERS"] = std::to_string(job.workers.size());
  env["AICLOUD_ATTEMPT"] = w.attempt;
  if (options_.replica_secrets != nullptr) {
    // Only in the assignment: the stored Job (what the API shows) never holds the secret.
    const json labels = job.object.value("metadata", json::object()).value("labels", json::object());
    if (labels.is_object() && labels.contains(kDeploymentLabel)) {
      env[kReplicaSecretEnv] = options_.replica_secrets->For(job.tenant, job.name, w.attempt);
    }
  }
  json tls;
  if (options_.replica_ca != nullptr) {
    const json labels = job.object.value("metadata", json::object()).value("labels", json::object());
    if (labels.is_object() && labels.contains(kDeploymentLabel)) tls = ReplicaTlsJson(job, w);
  }
  json gpus = json::array();
  for (const cluster::GpuShare& g : w.alloc.gpus) {
    json gj = {{"index", g.gpu}, {"milli", g.milli}};
    if (g.mem_mib) gj["memMiB"] = g.mem_mib;
    if (g.mig_profile >= 0) {
      gj["migStart"] = g.mig_start;
      gj["migProfile"] = s.mig_profile;
    }
    gpus.push_back(gj);
  }
  json out = {{"attempt", w.attempt}, {"tenant", job.tenant}, {"job", job.name}, {"worker", index},
              {"argv", s.argv}, {"env", env}, {"workingDir", s.working_dir},
              {"cpuMillis", w.alloc.cpu_milli}, {"memoryBytes", w.alloc.mem_mib << 20},
              {"gpus", gpus}, {"graceSeconds", s.grace_seconds}, {"isolation", s.isolation}};
  if (!tls.is_null()) out["tls"] = std::move(tls);
  return out;
}

json ControlPlane::ReplicaTlsJson(const Job& job, const Worker& w) const {
  if (auto it = replica_tls_.find(w.attempt); it != replica_tls_.end()) return it->second;
  // The replica is reached at its node's address (the deployment controller's default when the
  // node reports none), and that is what its certificate names.
  std::string address = "127.0.0.1";
  if (auto n = nodes_.find(w.node); n != nodes_.end() && !n->second.address.empty()) address = n->second.address;
  StatusOr<ReplicaCert> cert = options_.replica_ca->Issue(address, job.tenant, job.name);
  if (!cert.ok()) {
    spdlog::error("replica {}/{} attempt {}: no TLS certificate: {}", job.tenant, job.name, w.attempt,
                  std::string(cert.status().message()));
    return json();
  }
  if (replica_tls_.size() >= 64) {
    std::erase_if(replica_tls_, [&](const auto& kv) {
      for (const auto& [name, node] : nodes_) {
        if (node.attempts.count(kv.first)) return false;
      }
      return true;
    });
  }
  json tls = {{"cert", std::move(cert->cert_pem)}, {"key", std::move(cert->key_pem)}};
  replica_tls_[w.attempt] = tls;
  return tls;
}

StatusOr<json> ControlPlane::WaitAssignments(const std::string& node, const std::string& epoch,
                                             const std::string& instance, int64_t after,
                                             std::chrono::milliseconds wait) {
  std::unique_lock<std::mutex> l(mu_);
  auto check = [&]() -> Status {
    Node* n = FindNode(node);
    if (n == nullptr || !n->registered) return FailedPreconditionError("node " + node + " is not registered; register first");
    if (n->epoch != epoch) return FailedPreconditionError("stale agent epoch " + epoch + " for node " + node + "; register again");
    return OkStatus();
  };
  AICLOUD_RETURN_IF_ERROR(check());
  assign_cv_.wait_for(l, wait, [&] {
    Node* n = FindNode(node);
    return stop_ || after < 0 || instance != instance_ || n == nullptr || n->epoch != epoch ||
           n->version > static_cast<uint64_t>(after);
  });
  AICLOUD_RETURN_IF_ERROR(check());
  Node* n = FindNode(node);
  json attempts = json::array();
  for (const std::string& a : n->attempts) {
    Job* j = JobOfAttempt(a);
    if (j == nullptr || !j->spec) continue;
    for (const Worker& w : j->workers) {
      if (w.attempt == a) attempts.push_back(AttemptJson(*j, w));
    }
  }
  return json{{"version", n->version}, {"instance", instance_}, {"attempts", attempts}};
}

StatusOr<int64_t> ControlPlane::AppendLog(const std::string& node, const std::string& attempt,
                                          int64_t offset, std::string_view bytes) {
  {
    std::lock_guard<std::mutex> l(mu_);
    Node* n = FindNode(node);
    if (n == nullptr || !n->attempts.count(attempt)) {
      // Late output of an attempt that just ended is still accepted from the node it ran on.
      Job* j = JobOfAttempt(attempt);
      bool ran_here = false;
      if (j != nullptr) {
        for (const Worker& w : j->workers) ran_here |= (w.attempt == attempt && w.node == node);
      }
      if (!ran_here) return FailedPreconditionError("attempt " + attempt + " is not running on node " + node);
    }
  }
  const std::string path = LogPath(attempt);
  std::error_code ec;
  int64_t size = fs::exists(path, ec) ? static_cast<int64_t>(fs::file_size(path, ec)) : 0;
  if (offset > size) return OutOfRangeError("expected offset " + std::to_string(size));
  int64_t skip = size - offset;
  if (skip >= static_cast<int64_t>(bytes.size())) return size;
  std::ofstream out(path, std::ios::app | std::ios::binary);
  out.write(bytes.data() + skip, static_cast<std::streamsize>(bytes.size() - skip));
  out.flush();
  if (!out) return InternalError("cannot write " + path);
  return size + static_cast<int64_t>(bytes.size() - skip);
}

// --- user verbs -------------------------------------------------------------------------------

Status ControlPlane::CancelJob(const std::string& tenant, const std::string& name) {
  std::unique_lock<std::mutex> l(mu_);
  ApplyStoreChanges();
  auto it = jobs_.find(Key(tenant, name));
  if (it == jobs_.end()) return NotFoundError("Job " + tenant + "/" + name + " not found");
  Job& j = it->second;
  if (Terminal(j.phase)) return FailedPreconditionError("Job " + tenant + "/" + name + " already " + j.phase);
  EndAttempt(j, "Killed", "Cancelled", "cancelled by request", false);
  RequestTurn();
  return OkStatus();
}

StatusOr<LogChunk> ControlPlane::ReadLog(const std::string& tenant, const std::string& job,
                                         int worker, int attempt, int64_t offset, size_t max_bytes) {
  LogChunk c;
  bool running = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = jobs_.find(Key(tenant, job));
    if (it == jobs_.end()) return NotFoundError("Job " + tenant + "/" + job + " not found");
    const Job& j = it->second;
    if (worker < 0 || (j.spec && worker >= j.spec->workers)) {
      return InvalidArgumentError("worker: " + std::to_string(worker) + " is out of range");
    }
    int a = attempt < 0 ? j.attempt : attempt;
    if (a <= 0) {
      c.done = Terminal(j.phase);
      return c;  // nothing ran yet
    }
    c.attempt = AttemptId(j.uid, a, worker);
    if (a == j.attempt && worker < static_cast<int>(j.workers.size())) {
      running = !WorkerDone(j.workers[worker].state) && !Terminal(j.phase);
    }
  }
  std::ifstream in(LogPath(c.attempt), std::ios::binary);
  c.next_offset = offset;
  if (in) {
    in.seekg(0, std::ios::end);
    int64_t size = in.tellg();
    if (offset < size) {
      in.seekg(offset);
      size_t n = std::min<size_t>(max_bytes, static_cast<size_t>(size - offset));
      c.data.resize(n);
      in.read(c.data.data(), static_cast<std::streamsize>(n));
      c.next_offset = offset + static_cast<int64_t>(n);
    }
    c.done = !running && c.next_offset >= size;
  } else {
    c.done = !running;
  }
  return c;
}

Status ControlPlane::Cordon(const std::string& node, bool cordon, CordonBy by) {
  for (int tries = 0; tries < 5; ++tries) {
    StatusOr<json> cur = store_->Get({"Node", "", node});
    if (!cur.ok()) return cur.status();
    json& labels = (*cur)["metadata"]["labels"];
    if (!labels.is_object()) labels = json::object();
    const bool marked = labels.value(kConsolidatingLabel, "") == "true";
    if (by == CordonBy::kMarked && !marked) {
      return FailedPreconditionError("Node " + node + " is no longer being emptied (an operator cordoned, uncordoned or drained it)");
    }
    if (by == CordonBy::kUnneeded && !cordon && labels.value(kScaleDownLabel, "") != "true") {
      return FailedPreconditionError("Node " + node + " was cordoned, uncordoned or drained by an operator since the scale-down began");
    }
    const json& spec = (*cur)["spec"];
    const bool was_cordoned = spec.is_object() && spec.value("unschedulable", false);
    const bool power_off = by == CordonBy::kPowerOff;
    if (power_off && !was_cordoned) {
      return FailedPreconditionError("Node " + node + " was uncordoned since the scale-down began");
    }
    if (power_off) {
      // Cordoned, so nothing new is bound to it from here; but work bound while an operator had
      // it uncordoned may be there.
      std::lock_guard<std::mutex> l(mu_);
      ApplyStoreChanges();
      if (Node* n = FindNode(node); n != nullptr) {
        for (const std::string& a : n->attempts) {
          const Job* j = JobOfAttempt(a);
          if (j != nullptr && !Terminal(j->phase) && j->phase != "Pending") {
            return FailedPreconditionError("Node " + node + " has work bound to it since the scale-down began");
          }
        }
      }
    }
    const bool autoscaler_cordon =
        cordon && (by == CordonBy::kMove || by == CordonBy::kMarked || by == CordonBy::kUnneeded || power_off);
    if (autoscaler_cordon && labels.value(kDoNotDisruptLabel, "") == "true") {
      return FailedPreconditionError("Node " + node + " is labelled " + kDoNotDisruptLabel + "=true");
    }
    if (by == CordonBy::kOperator || (by == CordonBy::kMarked && !cordon)) labels.erase(kConsolidatingLabel);
    if (by == CordonBy::kOperator || (by == CordonBy::kUnneeded && !cordon)) labels.erase(kScaleDownLabel);
    if (by == CordonBy::kMove) labels[kConsolidatingLabel] = "true";
    // Only a cordon of the autoscaler's own is marked: one an operator made before stays theirs.
    if (by == CordonBy::kUnneeded && cordon && !was_cordoned) labels[kScaleDownLabel] = "true";
    if (labels.empty()) (*cur)["metadata"].erase("labels");
    (*cur)["spec"]["unschedulable"] = cordon;
    StatusOr<json> w = store_->Update(*cur, store::ResourceVersionOf(*cur));
    if (w.ok()) {
      Wake();
      return OkStatus();
    }
    if (w.status().code() != StatusCode::kAborted) return w.status();
  }
  return AbortedError("Node " + node + ": too many concurrent writers");
}

Status ControlPlane::Drain(const std::string& node, CordonBy by) {
  AICLOUD_RETURN_IF_ERROR(Cordon(node, true, by));
  std::lock_guard<std::mutex> l(mu_);
  ApplyStoreChanges();
  Node* n = FindNode(node);
  if (n == nullptr) return NotFoundError("Node " + node + " not found");
  std::vector<std::string> on(n->attempts.begin(), n->attempts.end());
  for (const std::string& a : on) {
    Job* j = JobOfAttempt(a);
    if (j == nullptr || Terminal(j->phase) || j->phase == "Pending") continue;
    EndAttempt(*j, "Killed", "Drained", "node " + node + " drained", false);
  }
  RequestTurn();
  return OkStatus();
}

std::string ControlPlane::WhatIfEmptied(const std::string& node, const std::vector<std::string>& excluded,
                                        const std::vector<std::pair<std::string, std::string>>& jobs) {
  // Under the lock only what the what-if reads: the cluster (copied, the jobs' workers freed in
  // the copy) and the jobs' specs. The scheduler on the copy runs after, without the lock.
  struct Moving {
    std::string tenant, name;
    JobSpec spec;
  };
  std::vector<Moving> moving;
  cluster::Cluster copy;
  {
    std::lock_guard<std::mutex> l(mu_);
    ApplyStoreChanges();
    std::set<std::string> seen;
    for (const auto& [tenant, name] : jobs) {
      if (!seen.insert(Key(tenant, name)).second) continue;  // freed once
      auto it = jobs_.find(Key(tenant, name));
      if (it == jobs_.end() || !it->second.spec) return "job " + tenant + "/" + name + " is not known to the scheduler";
      moving.push_back({tenant, name, *it->second.spec});
    }
    copy = cluster_;
    for (const Moving& m : moving) {
      for (const Worker& w : jobs_.at(Key(m.tenant, m.name)).workers) {
        // Only what is allocated: a worker that finished before a restart keeps a uid but was
        // never adopted back.
        if (w.uid != 0 && uid_worker_.count(w.uid)) copy.Release(w.alloc);
      }
    }
  }
  auto take_nothing = [&](const std::string& name) {
    const int32_t id = copy.FindNode(name);
    if (id < 0) return;
    copy.node(id).unschedulable = true;
    copy.Touch(id);
  };
  take_nothing(node);
  for (const std::string& n : excluded) take_nothing(n);
  sched::SchedulerOptions so;
  so.tie_break = sched::SchedulerOptions::TieBreak::kFirst;
  StatusOr<std::unique_ptr<sched::Scheduler>> what_if =
      sched::Scheduler::Create(&copy, profile_, sched::Registry::BuiltIn(), so);
  if (!what_if.ok()) return "the scheduler's what-if: " + std::string(what_if.status().message());
  int64_t uid = 1;
  for (const Moving& m : moving) {
    std::vector<sched::PodRequest> pods;
    std::string reason;
    if (PlaceWorkers(**what_if, copy, m.spec, m.tenant, m.name, &uid, &pods, &reason).size() == pods.size()) continue;
    return "job " + m.tenant + "/" + m.name + " would not fit elsewhere: " + reason;
  }
  return "";
}

Status ControlPlane::EvictJob(const std::string& tenant, const std::string& name, const std::string& node) {
  std::lock_guard<std::mutex> l(mu_);
  ApplyStoreChanges();
  auto it = jobs_.find(Key(tenant, name));
  if (it == jobs_.end()) return NotFoundError("Job " + tenant + "/" + name + " not found");
  Job& j = it->second;
  const bool there = std::any_of(j.workers.begin(), j.workers.end(), [&](const Worker& w) { return w.node == node; });
  if (Terminal(j.phase) || j.phase == "Pending" || !there) {
    return FailedPreconditionError("Job " + tenant + "/" + name + " has no running attempt on node " + node);
  }
  EndAttempt(j, "Killed", "Drained", "moved off node " + node + " (consolidation)", false);
  RequestTurn();
  return OkStatus();
}

json ControlPlane::NodeRuntime() {
  std::lock_guard<std::mutex> l(mu_);
  json out = json::object();
  const int64_t now = clock_->NowMicros();
  for (const auto& [name, n] : nodes_) {
    const cluster::Node& cn = cluster_.node(n.id);
    out[name] = {{"ready", n.ready},
                 {"cordoned", n.cordoned},
                 {"heartbeatAgeSeconds", static_cast<double>(now - n.last_seen_us) / kMicrosPerSecond},
                 {"attempts", n.attempts.size()},
                 {"cpuFreeMillis", cn.cpu_free_milli},
                 {"gpus", cn.gpu_count()},
                 {"gpuFreeMilli", cn.gpu_free_milli_total()},
                 {"metrics", n.metrics}};
  }
  return out;
}

json ControlPlane::NodeMetrics(const std::string& node) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = nodes_.find(node);
  return it == nodes_.end() ? json() : it->second.metrics;
}

double ControlPlane::TenantGpusInUse(const std::string& tenant) {
  std::lock_guard<std::mutex> l(mu_);
  double used = 0;
  for (const auto& [k, j] : jobs_) {
    if (j.tenant != tenant || Terminal(j.phase) || !j.spec) continue;
    used += j.spec->GpusPerWorker() * j.spec->workers;
  }
  return used;
}

Status AdmitJob(store::Store* store_, ControlPlane* control_, const json& job, std::string* warning,
                double unseen_gpus) {
  const std::string tenant = job["metadata"].value("tenant", "");
  StatusOr<json> t = store_->Get({"Tenant", "", tenant});
  if (!t.ok()) {
    if (t.status().code() == StatusCode::kNotFound) {
      return NotFoundError("metadata.tenant: tenant \"" + tenant + "\" does not exist");
    }
    return t.status();
  }
  StatusOr<JobSpec> spec = ParseJobSpec(job.value("spec", json::object()));
  if (!spec.ok()) return spec.status();
  const json ts = t->value("spec", json::object());
  const double gpus = spec->GpusPerWorker() * spec->workers;
  if (ts.value("requireLimits", false) && spec->gpu_kind != sched::GpuKind::kNone && !spec->limits_given) {
    return InvalidArgumentError("spec.resources: admission rule requireLimits of tenant " + tenant +
                                ": GPU jobs must set resources.cpu and resources.memory");
  }
  if (ts.contains("maxGpusPerJob") && gpus > ts["maxGpusPerJob"].get<double>()) {
    return PermissionDeniedError("admission rule maxGpusPerJob of tenant " + tenant + ": job asks for " +
                                 std::to_string(gpus) + " GPUs, the cap is " +
                                 std::to_string(ts["maxGpusPerJob"].get<int64_t>()));
  }
  if (ts.contains("quota") && gpus > 0) {
    const json q = ts["quota"];
    const double used = control_->TenantGpusInUse(tenant) + unseen_gpus;
    if (q.contains("gpus") && used + gpus > q["gpus"].get<double>()) {
      return PermissionDeniedError("admission rule hard-quota of tenant " + tenant + ": " +
                                   std::to_string(used) + " GPUs in use + " + std::to_string(gpus) +
                                   " requested > hard limit " + std::to_string(q["gpus"].get<int64_t>()));
    }
    if (q.contains("gpusSoft") && used + gpus > q["gpusSoft"].get<double>()) {
      *warning = "soft quota of tenant " + tenant + " exceeded: " + std::to_string(used + gpus) +
                 " GPUs > soft limit " + std::to_string(q["gpusSoft"].get<int64_t>());
    }
  }
  return OkStatus();
}

}  // namespace aicloud::control
