#include "control/node_autoscaler.h"

#include <spdlog/spdlog.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <set>

#include "core/thread_name.h"
#include "cluster/catalog.h"
#include "control/control_plane.h"
#include "control/deployment.h"
#include "control/job.h"

namespace aicloud::control {
namespace {

using nlohmann::json;

// Free capacity of a node in the sizing pass.
struct Room {
  int64_t gpus = 0, cpu = 0, mem = 0;  // GPUs, mCPU, MiB
  std::string model;
  std::string pool;      // the node's lane ("" = none)
  bool tainted = false;  // a taint that keeps work off (not PreferNoSchedule)
};

// Whole GPUs one worker takes (a fraction or a MIG slice counts as one: the pass is coarse).
int64_t WorkerGpus(const JobSpec& s) { return s.gpu_kind == sched::GpuKind::kNone ? 0 : std::max(1, s.gpu_count); }

std::string CanonicalModel(const std::string& name) {
  const cluster::GpuModelSpec* m = cluster::FindGpuModel(name);
  return m != nullptr ? m->name : name;
}

// A job with workers on a node, as consolidation sees it.
struct Resident {
  std::string tenant, name;
  bool movable = false;   // a Deployment replica or labelled safe-to-evict, with a spec we read
  bool replica = false;   // a Deployment replica: its controller starts a successor first
  bool marked = false;    // labelled aicloud/evict=true already
  int64_t gpus = 0, cpu = 0, mem = 0;  // one worker's
  std::vector<std::string> models;     // GPU models it accepts; empty = any
  std::string pool;                    // the lane it must run in ("" = any)
  int workers = 0;                     // of its workers, on this node
};

// True when every worker of `residents` finds room in `room` (first fit, taken from it). A node
// in another lane, or with a taint that keeps work off, is no room (tolerations are not modelled).
bool FitsFirstFit(const std::vector<Resident>& residents, std::map<std::string, Room> room) {
  for (const Resident& r : residents) {
    auto model_ok = [&](const std::string& model) {
      return r.models.empty() || model.empty() || std::find(r.models.begin(), r.models.end(), model) != r.models.end();
    };
    for (int w = 0; w < r.workers; ++w) {
      bool placed = false;
      for (auto& [name, left] : room) {
        if (left.gpus >= r.gpus && left.cpu >= r.cpu && left.mem >= r.mem && (r.gpus == 0 || model_ok(left.model)) &&
            !left.tainted && (r.pool.empty() || r.pool == left.pool)) {
          left.gpus -= r.gpus, left.cpu -= r.cpu, left.mem -= r.mem;
          placed = true;
          break;
        }
      }
      if (!placed) return false;
    }
  }
  return true;
}

// Sets (or removes) label `key` = "true" on an object (a Job, a Node), retrying conflicting writes.
Status SetLabel(store::Store* store, const store::ObjectKey& which, const char* key, bool set) {
  for (int tries = 0; tries < 5; ++tries) {
    StatusOr<json> cur = store->Get(which);
    if (!cur.ok()) return cur.status();
    json o = *cur;
    json& labels = o["metadata"]["labels"];
    if (!labels.is_object()) labels = json::object();
    if (set == (labels.value(key, "") == "true")) return OkStatus();
    if (set) {
      labels[key] = "true";
    } else {
      labels.erase(key);
    }
    StatusOr<json> w = store->Update(o, store::ResourceVersionOf(*cur));
    if (w.ok()) return OkStatus();
    if (w.status().code() != StatusCode::kAborted) return w.status();
  }
  return AbortedError(which.ToString() + ": too many concurrent writers");
}

// Whether the Node carries label `key` = "true" (the consolidation mark, do-not-disrupt).
bool NodeLabelled(store::Store* store, const std::string& node, const char* key) {
  StatusOr<json> n = store->Get({"Node", "", node});
  if (!n.ok()) return false;
  const json labels = n->value("metadata", json::object()).value("labels", json::object());
  return labels.is_object() && labels.value(key, "") == "true";
}

// Quotes a word for /bin/sh.
std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

// --- ScriptProvisioner ------------------------------------------------------------------------

ScriptProvisioner::ScriptProvisioner(std::string script, NodeShape shape, std::chrono::seconds timeout)
    : script_(std::move(script)), shape_(std::move(shape)), timeout_(timeout) {}

bool ScriptProvisioner::Busy(const std::string& node) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = last_.find(node);
  return it != last_.end() && it->second.wait_for(std::chrono::seconds(0)) != std::future_status::ready;
}

ScriptProvisioner::~ScriptProvisioner() {
  std::vector<Hook> running;
  {
    std::lock_guard<std::mutex> l(mu_);
    running.swap(running_);
  }
  for (Hook& h : running) h.thread.join();
}

Status ScriptProvisioner::Run(const std::string& verb, const std::string& node) {
  if (script_.empty()) return FailedPreconditionError("no node hook script configured");
  const std::string cmd = "AICLOUD_NODE=" + ShellQuote(node) + " timeout -k 10 " + std::to_string(timeout_.count()) + " " +
                          ShellQuote(script_) + " " + verb + " " + ShellQuote(node) + " 2>&1";
  std::lock_guard<std::mutex> l(mu_);
  for (auto it = running_.begin(); it != running_.end();) {  // join the finished ones
    if (it->done->load()) {
      it->thread.join();
      it = running_.erase(it);
    } else {
      ++it;
    }
  }
  auto done = std::make_shared<std::atomic<bool>>(false);
  // Chain behind this node's previous hook; forget the chain once it has run out.
  std::shared_future<void> before;
  if (auto it = last_.find(node); it != last_.end()) before = it->second;
  auto finished = std::make_shared<std::promise<void>>();
  last_[node] = finished->get_future().share();
  for (auto it = last_.begin(); it != last_.end();) {
    const bool idle = it->first != node &&
                      it->second.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
    it = idle ? last_.erase(it) : std::next(it);
  }
  running_.push_back({std::thread([this, cmd, verb, node, done, before, finished] {
    struct MarkDone {
      std::atomic<bool>* d;
      std::promise<void>* p;
      ~MarkDone() {
        p->set_value();
        d->store(true);
      }
    } mark{done.get(), finished.get()};
    if (before.valid()) before.wait();
    FILE* p = popen(cmd.c_str(), "r");
    if (p == nullptr) {
      spdlog::warn("node hook {} {}: cannot start {}", verb, node, script_);
      ++failed_;
      return;
    }
    std::string tail;
    std::array<char, 512> buf{};
    size_t n;
    while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) {
      tail.append(buf.data(), n);
      if (tail.size() > 2048) tail.erase(0, tail.size() - 2048);
    }
    const int st = pclose(p);
    const int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    if (code == 0) {
      ++ok_;
      spdlog::info("node hook {} {}: done", verb, node);
    } else if (code == 124 || code == 137) {
      ++failed_;
      spdlog::warn("node hook {} {}: still running after {} s: stopped: {}", verb, node, timeout_.count(), tail);
    } else {
      ++failed_;
      spdlog::warn("node hook {} {}: exit {}: {}", verb, node, code, tail);
    }
  }), done});
  return OkStatus();
}

// --- NodeAutoscaler ---------------------------------------------------------------------------

NodeAutoscaler::NodeAutoscaler(store::Store* store, ControlPlane* control, Clock* clock, Metrics* metrics,
                               NodeProvisioner* provisioner, NodeAutoscalerOptions options)
    : store_(store), control_(control), clock_(clock), provisioner_(provisioner), options_(std::move(options)) {
  if (metrics != nullptr) {
    powered_on_ = metrics->AddCounter("aicloud_node_autoscaler_powered_on_total",
                                      "Nodes the cluster autoscaler powered on", {});
    powered_off_ = metrics->AddCounter("aicloud_node_autoscaler_powered_off_total",
                                       "Nodes the cluster autoscaler powered off", {"reason"});
    consolidations_ = metrics->AddCounter("aicloud_node_autoscaler_consolidations_total",
                                          "Nodes the cluster autoscaler began to empty, those it gave up on, and those an operator took over",
                                          {"outcome"});
  }
}

NodeAutoscaler::~NodeAutoscaler() { Stop(); }

Status NodeAutoscaler::Start() {
  if (thread_.joinable()) return FailedPreconditionError("node autoscaler already started");
  if (options_.max_nodes <= 0) return OkStatus();
  thread_ = std::thread([this] {
    SetThreadName("node-autoscaler");
    std::unique_lock<std::mutex> l(mu_);
    while (!stop_) {
      l.unlock();
      Turn();
      l.lock();
      cv_.wait_for(l, options_.tick, [this] { return stop_; });
    }
  });
  return OkStatus();
}

void NodeAutoscaler::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

int NodeAutoscaler::active() const {
  std::lock_guard<std::mutex> l(mu_);
  return static_cast<int>(added_.size());
}

std::string NodeAutoscaler::FreeName() const {
  for (int i = 0;; ++i) {
    const std::string n = options_.name_prefix + std::to_string(i);
    if (!added_.count(n) && !released_.count(n) && !provisioner_->Busy(n)) return n;
  }
}

int64_t NodeAutoscaler::EndMove(Added& a, int64_t now) const {
  a.consolidating_since_us = 0;
  a.resumed = a.marked = false;
  a.requeued.clear();
  ++a.abandoned;
  const int64_t wait = std::min(options_.max_backoff.count() * 1000,
                                (options_.backoff.count() * 1000) << std::min(a.abandoned - 1, 20));
  a.consolidate_retry_us = now + wait;
  return wait;
}

void NodeAutoscaler::Turn() {
  if (options_.max_nodes <= 0) return;
  const int64_t now = clock_->NowMicros();
  StatusOr<store::ListResult> nodes = store_->List({.kind = "Node"});
  StatusOr<store::ListResult> jobs = store_->List({.kind = "Job"});
  StatusOr<store::ListResult> deployments = store_->List({.kind = "Deployment"});
  if (!nodes.ok() || !jobs.ok() || !deployments.ok()) {
    const Status& bad = !nodes.ok() ? nodes.status() : !jobs.ok() ? jobs.status() : deployments.status();
    spdlog::warn("node autoscaler: cannot list: {}", std::string(bad.message()));
    return;
  }
  std::set<std::string> serving;  // "tenant/name" of the Deployments: their replicas are replaced
  for (const json& d : deployments->items) {
    serving.insert(d["metadata"].value("tenant", "") + "/" + d["metadata"].value("name", ""));
  }
  // Which nodes are Ready, which are busy, which did we add.
  std::map<std::string, bool> ready;
  std::set<std::string> labelled, consolidating;  // ours; being emptied (as stored)
  std::set<std::string> keep;  // labelled do-not-disrupt by an operator
  std::set<std::string> scaled_down;  // cordoned by a scale-down of ours (aicloud/scale-down)
  std::set<std::string> cordoned;     // spec.unschedulable, by whoever
  std::map<std::string, Room> free;      // Ready, schedulable nodes: capacity, then minus what runs there
  std::map<std::string, Room> capacity;  // Ready nodes' capacity
  for (const json& n : nodes->items) {
    const std::string name = n["metadata"].value("name", "");
    ready[name] = n.value("status", json::object()).value("phase", "") == "Ready";
    const json spec = n.value("spec", json::object());
    if (ready[name] && spec.is_object()) {
      const json gpus = spec.value("gpus", json::array());
      capacity[name] = {.gpus = gpus.is_array() ? static_cast<int64_t>(gpus.size()) : 0,
                        .cpu = spec.value("cpuMillis", int64_t{0}),
                        .mem = spec.value("memoryBytes", int64_t{0}) >> 20,
                        .model = gpus.is_array() && !gpus.empty() && gpus[0].is_object()
                                     ? CanonicalModel(gpus[0].value("model", ""))
                                     : "",
                        .pool = spec.value("pool", std::string())};
      for (const json& t : spec.value("taints", json::array())) {
        if (t.is_object() && t.value("effect", "") != "PreferNoSchedule") capacity[name].tainted = true;
      }
      if (!spec.value("unschedulable", false)) free[name] = capacity[name];
    }
    const json labels = n["metadata"].value("labels", json::object());
    if (labels.is_object() && labels.value(kAutoscaledLabel, "") == "true") labelled.insert(name);
    if (labels.is_object() && labels.value(kConsolidatingLabel, "") == "true") consolidating.insert(name);
    if (labels.is_object() && labels.value(kScaleDownLabel, "") == "true" && spec.is_object() &&
        spec.value("unschedulable", false)) scaled_down.insert(name);
    if (labels.is_object() && labels.value(kDoNotDisruptLabel, "") == "true") keep.insert(name);
    if (spec.is_object() && spec.value("unschedulable", false)) cordoned.insert(name);
  }
  std::set<std::string> busy;
  std::map<std::string, std::vector<Resident>> on_node;  // the jobs with workers on each node
  struct Pending {
    std::string key;
    JobSpec spec;
  };
  std::vector<Pending> pending;
  for (const json& j : jobs->items) {
    const json st = j.value("status", json::object());
    const std::string phase = st.is_object() ? st.value("phase", "Pending") : "Pending";
    if (phase == "Succeeded" || phase == "Failed") continue;
    StatusOr<JobSpec> spec = ParseJobSpec(j.value("spec", json::object()));
    const json labels = j["metadata"].value("labels", json::object());
    auto label = [&](const char* key) { return labels.is_object() ? labels.value(key, "") : std::string(); };
    for (const json& w : st.value("workers", json::array())) {
      const std::string node = w.is_object() ? w.value("node", "") : "";
      if (node.empty()) continue;
      busy.insert(node);
      std::vector<Resident>& here = on_node[node];
      const std::string name = j["metadata"].value("name", ""), tenant = j["metadata"].value("tenant", "");
      if (here.empty() || here.back().name != name || here.back().tenant != tenant) {
        Resident r{.tenant = tenant, .name = name};
        // A replica only if its Deployment exists (whose controller starts the successor).
        r.replica = !label(kDeploymentLabel).empty() && serving.count(tenant + "/" + label(kDeploymentLabel));
        r.movable = spec.ok() && (r.replica || label(kSafeToEvictLabel) == "true");
        r.marked = label(kEvictLabel) == "true";
        if (spec.ok()) r.gpus = WorkerGpus(*spec), r.cpu = spec->cpu_milli, r.mem = spec->mem_mib;
        if (spec.ok()) for (const std::string& m : spec->gpu_models) r.models.push_back(CanonicalModel(m));
        if (spec.ok()) r.pool = spec->pool;
        here.push_back(std::move(r));
      }
      ++here.back().workers;
      auto it = free.find(node);
      if (it != free.end() && spec.ok()) {
        it->second.gpus -= WorkerGpus(*spec);
        it->second.cpu -= spec->cpu_milli;
        it->second.mem -= spec->mem_mib;
      }
    }
    if (phase == "Pending" && st.value("reason", "") == "Unschedulable" && spec.ok()) {
      pending.push_back({j["metadata"].value("tenant", "") + "/" + j["metadata"].value("name", ""), *spec});
    }
  }

  std::vector<std::string> to_power_on, to_cordon, to_uncordon;
  std::map<std::string, int> abandoned_before;  // of the nodes in off_reasons: their moves ended
  std::vector<std::pair<std::string, std::string>> off_reasons;
  struct Move {
    std::string node, why;
    std::vector<Resident> residents;
  };
  std::vector<Move> to_consolidate, to_abandon, to_drain;
  std::vector<Move> to_release;  // moves an operator took over: residents unlabelled, the node left alone
  std::vector<Resident> stale_marks;  // eviction labels no move stands behind (found at start)
  std::vector<Move> to_continue;  // a move's later turns: why "cordon" = cordon again; replicas to label
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!loaded_) {  // nodes a previous server added
      for (const std::string& n : labelled) {
        if (!ready[n]) continue;  // powered-off ones stay free
        added_[n] = {.powered_on_us = now, .registered = true};
        added_[n].cordoned = scaled_down.count(n) > 0;  // the scale-down cordon a previous server wrote
        // One being emptied when that server stopped: carried on (or abandoned) from here.
        if (consolidating.count(n)) {
          added_[n].consolidating_since_us = now, added_[n].resumed = true, added_[n].marked = true;
        } else {
          // Replicas still labelled for eviction from a move that ended while no server ran
          // (an operator took the node over, or an abandon's clean-up failed): they stay.
          for (const Resident& r : on_node[n]) {
            if (r.marked) stale_marks.push_back(r);
          }
        }
      }
      loaded_ = true;
    }
    // 0. Names of powered-off nodes come free once their Node stops looking Ready.
    for (auto it = released_.begin(); it != released_.end();) {
      it = ready[*it] ? std::next(it) : released_.erase(it);
    }
    // 1. Registration and provisioning timeouts.
    for (auto& [name, a] : added_) {
      if (!a.registered && ready[name]) {
        a.registered = true;
        spdlog::info("node autoscaler: {} registered {:.1f} s after power-on", name, (now - a.powered_on_us) / 1e6);
      }
      if (!a.registered && now - a.powered_on_us > options_.provision_timeout.count() * 1000) {
        off_reasons.emplace_back(name, "provision_timeout");
      }
    }
    // 2. Scale down: our Ready nodes that stayed empty, and ours that went away.
    for (auto& [name, a] : added_) {
      if (a.registered && !ready[name]) {
        if (a.not_ready_since_us == 0) a.not_ready_since_us = now;
        if (now - a.not_ready_since_us > options_.provision_timeout.count() * 1000) {
          off_reasons.emplace_back(name, "lost");
          continue;  // released, labelled do-not-disrupt or not
        }
      } else {
        a.not_ready_since_us = 0;
      }
      if (a.consolidating_since_us != 0 && a.marked && !consolidating.count(name)) {
        // An operator cordoned, uncordoned or drained it (CordonBy::kOperator drops the mark):
        // the move ends here, the node stays as the operator left it.
        const int64_t wait = EndMove(a, now);
        to_release.push_back({name, fmt::format("an operator cordoned, uncordoned or drained it; not tried again for {} s",
                                                wait / 1'000'000),
                              on_node[name]});
        a.idle_since_us = 0;
        continue;
      }
      if (a.consolidating_since_us != 0) {  // being emptied (step 3): gone once empty
        if (keep.count(name)) continue;  // step 3 abandons the move
        // (A resumed move cordons again first: the node goes a turn later at the earliest.)
        if (a.registered && ready[name] && !busy.count(name) && !a.resumed) off_reasons.emplace_back(name, "consolidated");
        continue;
      }
      if (keep.count(name)) {  // an operator keeps it: a scale-down that began is undone
        if (a.cordoned) {
          spdlog::info("node autoscaler: {} is labelled {}=true: kept, undoing its scale-down cordon", name,
                       kDoNotDisruptLabel);
          to_uncordon.push_back(name);
          a.cordoned = false;
        }
        a.idle_since_us = 0;
        continue;
      }
      if (!a.registered || !ready[name] || busy.count(name)) {
        if (a.cordoned && busy.count(name)) {  // bound while the cordon was written: keep it
          spdlog::info("node autoscaler: {} got work while being scaled down; keeping it", name);
          to_uncordon.push_back(name);
          a.cordoned = false;
        }
        a.idle_since_us = 0;
        continue;
      }
      if (a.cordoned && control_ != nullptr && !cordoned.count(name)) {
        // An operator uncordoned it since the scale-down cordon: they want it. It counts as
        // unneeded afresh from now. (Without a control plane nothing is cordoned.)
        spdlog::info("node autoscaler: {} was uncordoned since its scale-down began; kept", name);
        a.cordoned = false;
        a.idle_since_us = now;
        continue;
      }
      if (a.cordoned) {
        off_reasons.emplace_back(name, "unneeded");  // still empty a turn after the cordon
        continue;
      }
      if (a.idle_since_us == 0) a.idle_since_us = now;
      if (now - a.idle_since_us >= options_.unneeded_for.count() * 1000) {
        a.cordoned = true;
        to_cordon.push_back(name);
      }
    }
    for (const auto& [name, reason] : off_reasons) {
      abandoned_before[name] = added_[name].abandoned;  // kept if the power-off is refused
      added_.erase(name);
      released_.insert(name);
      if (reason == "provision_timeout") {
        // The node never came: no evidence that nodes do not help the jobs waiting for it.
        for (auto& [key, w] : waiting_) {
          w.waves = std::max(0, w.waves - 1);
          w.retry_us = 0;
        }
      }
    }

    // 3. Consolidation: empty an underused node whose work fits on the nodes that stay.
    bool in_flight = false;
    for (const auto& [name, a] : added_) in_flight |= !a.registered;
    std::string moving;  // the node being emptied
    for (const auto& [name, a] : added_) {
      if (a.consolidating_since_us != 0) moving = name;
    }
    bool moving_now = !moving.empty();  // no scale-up this turn: the moved work is still landing
    bool searched = false;
    if (!moving.empty()) {
      Added& a = added_[moving];
      const std::vector<Resident>& here = on_node[moving];
      std::string why;
      if (keep.count(moving)) why = std::string("an operator labelled it ") + kDoNotDisruptLabel + "=true";
      for (const Pending& p : pending) {
        if (!why.empty()) break;
        auto w = waiting_.find(p.key);
        if (w != waiting_.end() && now - w->second.since_us >= options_.pending_for.count() * 1000) {
          why = "job " + p.key + " has found no room meanwhile";
          break;
        }
      }
      for (const Resident& r : here) {
        if (why.empty() && !r.movable) why = "job " + r.tenant + "/" + r.name + " runs there and cannot move";
      }
      if (why.empty() && now - a.consolidating_since_us > options_.provision_timeout.count() * 1000) {
        why = fmt::format("its work has not moved within {} s", options_.provision_timeout.count() / 1000);
      }
      if (why.empty() && options_.consolidate_below <= 0) why = "consolidation is off (--node-consolidate-below 0)";
      if (!why.empty()) {
        const int64_t wait = EndMove(a, now);
        to_abandon.push_back({moving, why + fmt::format("; not tried again for {} s", wait / 1'000'000), here});
      } else {
        // Each turn: replicas not labelled yet (a write that failed, a move resumed after a
        // restart) are labelled; once none is left, the jobs that may be requeued are, each
        // once, by name (a turn after the cordon at the earliest, so this list shows what the
        // scheduler bound before it).
        Move step{moving, a.resumed ? "cordon" : "", {}};
        a.resumed = false;
        const bool replicas_left = std::any_of(here.begin(), here.end(), [](const Resident& r) { return r.replica; });
        const bool may_requeue = !replicas_left && step.why.empty();  // not in the turn of a cordon
        for (const Resident& r : here) {
          if (r.replica && !r.marked) step.residents.push_back(r);
          if (!r.replica && may_requeue && a.requeued.insert(r.tenant + "/" + r.name).second) {
            to_drain.push_back({moving, "", {r}});
          }
        }
        if (!step.why.empty() || !step.residents.empty()) to_continue.push_back(std::move(step));
      }
    } else if (options_.consolidate_below > 0 && pending.empty() && !in_flight) {
      searched = true;
      // Room on the nodes that stay: not ours, or ours with work on them (moving work onto an
      // empty node of ours would only swap which node goes).
      std::map<std::string, Room> stays = free;
      for (const auto& [name, a] : added_) {
        if (!busy.count(name) || a.cordoned) stays.erase(name);
      }
      std::vector<std::pair<double, std::string>> ripe;  // (use, node): underused for unneeded_for
      for (auto& [name, a] : added_) {
        double use = 1;
        bool candidate = false;
        if (a.registered && ready[name] && busy.count(name) && free.count(name) && !keep.count(name) &&
            now >= a.consolidate_retry_us) {
          const Room& cap = capacity[name];
          int64_t g = 0, c = 0, m = 0;
          bool movable = true;
          for (const Resident& r : on_node[name]) {
            g += r.gpus * r.workers, c += r.cpu * r.workers, m += r.mem * r.workers;
            movable &= r.movable;
          }
          auto share = [](int64_t used, int64_t total) { return total > 0 ? static_cast<double>(used) / total : 1.0; };
          use = cap.gpus > 0 ? share(g, cap.gpus) : std::max(share(c, cap.cpu), share(m, cap.mem));
          if (movable && use < options_.consolidate_below) {
            std::map<std::string, Room> others = stays;
            others.erase(name);
            candidate = FitsFirstFit(on_node[name], std::move(others));
          }
        }
        if (!candidate) {
          a.underused_since_us = 0;
          continue;
        }
        if (a.underused_since_us == 0) a.underused_since_us = now;
        if (now - a.underused_since_us >= options_.unneeded_for.count() * 1000) ripe.emplace_back(use, name);
      }
      // The emptiest first whose work the scheduler itself could place elsewhere (the coarse
      // check above knows neither MIG, NVLink nor tolerations). One that could not is underused
      // afresh: asked again after another unneeded_for.
      std::sort(ripe.begin(), ripe.end());
      std::string best;
      double best_use = 2;
      for (const auto& [use, name] : ripe) {
        std::string why;
        if (control_ != nullptr) {
          std::vector<std::string> excluded;
          for (const auto& [other, b] : added_) {
            if (other != name && (!busy.count(other) || b.cordoned)) excluded.push_back(other);
          }
          std::vector<std::pair<std::string, std::string>> residents;
          for (const Resident& r : on_node[name]) residents.emplace_back(r.tenant, r.name);
          why = control_->WhatIfEmptied(name, excluded, residents);
        }
        if (why.empty()) {
          best = name;
          best_use = use;
          break;
        }
        spdlog::info("node autoscaler: {} is underused ({:.0f}%) but not emptied: {}", name, use * 100, why);
        added_[name].underused_since_us = 0;
      }
      if (!best.empty()) {
        Added& a = added_[best];
        a.consolidating_since_us = now;
        a.underused_since_us = 0;
        a.requeued.clear();
        to_consolidate.push_back({best, fmt::format("{:.0f}% of it in use", best_use * 100), on_node[best]});
        moving_now = true;
      }
    }
    if (!searched) {  // a node is underused only while nothing else is going on
      for (auto& [name, a] : added_) a.underused_since_us = 0;
    }

    // 4. Scale up, one wave at a time.
    std::set<std::string> seen;
    int64_t gpus = 0, cpu = 0, mem = 0;
    const NodeShape shape = provisioner_->Shape();
    const std::string shape_model = CanonicalModel(shape.gpu_model);
    std::vector<std::pair<std::string, Waiting*>> causes;  // the jobs this turn's demand comes from
    for (const Pending& p : pending) {
      seen.insert(p.key);
      Waiting& w = waiting_.emplace(p.key, Waiting{.since_us = now}).first->second;
      if (now - w.since_us < options_.pending_for.count() * 1000 || now < w.retry_us) continue;
      const JobSpec& s = p.spec;
      const int64_t worker_gpus = WorkerGpus(s);
      auto model_ok = [&](const std::string& model) {
        return s.gpu_models.empty() || model.empty() ||
               std::find(s.gpu_models.begin(), s.gpu_models.end(), model) != s.gpu_models.end();
      };
      if (!model_ok(shape_model) || worker_gpus > shape.gpus || s.cpu_milli > shape.cpu_millis ||
          s.mem_mib > shape.memory_mib || !s.pool.empty()) {
        continue;  // a new node of this shape would not help
      }
      // Workers that fit in the room left on existing nodes (first fit) need no new node; the
      // others are the demand. (The scheduler may still have reasons this pass does not see.)
      const int64_t gpus_before = gpus, cpu_before = cpu, mem_before = mem;
      for (int worker = 0; worker < s.workers; ++worker) {
        bool placed = false;
        for (auto& [name, room] : free) {
          if (room.gpus >= worker_gpus && room.cpu >= s.cpu_milli && room.mem >= s.mem_mib &&
              (worker_gpus == 0 || model_ok(room.model))) {
            room.gpus -= worker_gpus, room.cpu -= s.cpu_milli, room.mem -= s.mem_mib;
            placed = true;
            break;
          }
        }
        if (placed) continue;
        gpus += worker_gpus;
        cpu += s.cpu_milli;
        mem += s.mem_mib;
      }
      if (gpus != gpus_before || cpu != cpu_before || mem != mem_before) causes.emplace_back(p.key, &w);
    }
    if (!in_flight && !moving_now && (gpus > 0 || cpu > 0 || mem > 0)) {
      auto ceil_div = [](int64_t a, int64_t b) { return b <= 0 ? (a > 0 ? 1 << 20 : 0) : (a + b - 1) / b; };
      int64_t want = std::max({ceil_div(gpus, shape.gpus), ceil_div(cpu, shape.cpu_millis), ceil_div(mem, shape.memory_mib)});
      want = std::min<int64_t>(want, options_.max_nodes - static_cast<int>(added_.size()));
      for (int64_t i = 0; i < want; ++i) {
        const std::string name = FreeName();
        added_[name] = {.powered_on_us = now};
        to_power_on.push_back(name);
      }
      if (want > 0) {
        spdlog::info("node autoscaler: unschedulable work needs {} GPU(s), {} mCPU, {} MiB: powering on {} node(s)",
                     gpus, cpu, mem, want);
        for (const auto& [key, w] : causes) {
          ++w->waves;
          const int64_t base = options_.backoff.count() * 1000;
          const int64_t cap = options_.max_backoff.count() * 1000;
          const int64_t wait = std::min(cap, base << std::min(w->waves - 1, 20));
          w->retry_us = now + wait;
          if (w->waves > 1) {
            spdlog::warn("node autoscaler: job {} is still unschedulable after {} node wave(s); if this one does not "
                         "help either, next try in {:.0f} s", key, w->waves - 1, wait / 1e6);
          }
        }
      }
    }
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      it = seen.count(it->first) ? std::next(it) : waiting_.erase(it);
    }
  }

  for (const std::string& name : to_cordon) {
    Status c = control_ != nullptr ? control_->Cordon(name, true, ControlPlane::CordonBy::kUnneeded) : OkStatus();
    if (c.ok()) {
      spdlog::info("node autoscaler: {} unneeded: cordoned, powered off next turn if still empty", name);
      continue;
    }
    if (c.code() == StatusCode::kFailedPrecondition) {  // labelled do-not-disrupt since this turn read it
      spdlog::info("node autoscaler: {} unneeded, but kept: {}", name, std::string(c.message()));
      std::lock_guard<std::mutex> l(mu_);
      if (auto it = added_.find(name); it != added_.end()) it->second.cordoned = false;
      continue;
    }
    // Not cordoned: the scheduler may still place work there, so it must not go next turn.
    spdlog::warn("node autoscaler: {} unneeded, but cordon failed (tried again next turn): {}", name,
                 std::string(c.message()));
    std::lock_guard<std::mutex> l(mu_);
    if (auto it = added_.find(name); it != added_.end()) it->second.cordoned = false;
  }
  for (const std::string& name : to_uncordon) {
    if (control_ == nullptr) continue;
    Status u = control_->Cordon(name, false, ControlPlane::CordonBy::kUnneeded);
    if (u.ok()) {
      spdlog::info("node autoscaler: {}: its scale-down cordon undone", name);
    } else if (u.code() == StatusCode::kFailedPrecondition) {
      spdlog::info("node autoscaler: {}: its scale-down cordon is no longer the autoscaler's, left as it is: {}", name,
                   std::string(u.message()));
    } else {  // tried again next turn
      spdlog::warn("node autoscaler: uncordon {} (tried again next turn): {}", name, std::string(u.message()));
      std::lock_guard<std::mutex> l(mu_);
      if (auto it = added_.find(name); it != added_.end()) it->second.cordoned = true;
    }
  }
  for (const Move& m : to_consolidate) {
    // Cordoned and marked in one write (the mark: a restarted server carries the move on).
    Status c = control_ != nullptr ? control_->Cordon(m.node, true, ControlPlane::CordonBy::kMove)
                                   : SetLabel(store_, {"Node", "", m.node}, kConsolidatingLabel, true);
    if (c.code() == StatusCode::kFailedPrecondition) {  // labelled do-not-disrupt since the turn read it
      spdlog::info("node autoscaler: {} could be emptied ({}), but is kept: {}", m.node, m.why, std::string(c.message()));
    } else if (!c.ok()) {
      spdlog::warn("node autoscaler: {} could be emptied ({}), but cordon failed (tried again later): {}", m.node, m.why,
                   std::string(c.message()));
    }
    if (!c.ok()) {
      std::lock_guard<std::mutex> l(mu_);
      if (auto it = added_.find(m.node); it != added_.end()) it->second.consolidating_since_us = 0;
      continue;
    }
    {
      std::lock_guard<std::mutex> l(mu_);
      if (auto it = added_.find(m.node); it != added_.end()) it->second.marked = true;
    }
    int replicas = 0, requeued = 0;
    for (const Resident& r : m.residents) {
      (r.replica ? replicas : requeued) += 1;
      if (!r.replica) continue;
      Status l = SetLabel(store_, {"Job", r.tenant, r.name}, kEvictLabel, true);
      if (!l.ok()) spdlog::warn("node autoscaler: replica {}/{}: {}", r.tenant, r.name, std::string(l.message()));
    }
    spdlog::info("node autoscaler: consolidating {} ({}; its work fits on the other nodes): cordoned; {} replica(s) "
                 "replaced elsewhere, then {} safe-to-evict job(s) requeued; powered off once empty",
                 m.node, m.why, replicas, requeued);
    if (consolidations_ != nullptr) consolidations_->Inc({"started"});
  }
  for (const Move& m : to_continue) {
    if (m.why == "cordon" && control_ != nullptr) {
      Status c = control_->Cordon(m.node, true, ControlPlane::CordonBy::kMarked);
      if (c.code() == StatusCode::kFailedPrecondition) {
        spdlog::info("node autoscaler: {}: {}", m.node, std::string(c.message()));  // next turn ends the move
      } else if (!c.ok()) {  // nothing is requeued or powered off until it is cordoned: tried next turn
        spdlog::warn("node autoscaler: cordon {} (a move carried on): {}", m.node, std::string(c.message()));
        std::lock_guard<std::mutex> l(mu_);
        if (auto it = added_.find(m.node); it != added_.end()) it->second.resumed = true;
      }
    }
    for (const Resident& r : m.residents) {
      Status l = SetLabel(store_, {"Job", r.tenant, r.name}, kEvictLabel, true);
      if (!l.ok()) spdlog::warn("node autoscaler: replica {}/{}: {}", r.tenant, r.name, std::string(l.message()));
    }
  }
  for (const Move& m : to_drain) {
    for (const Resident& r : m.residents) {
      Status d = control_ != nullptr ? control_->EvictJob(r.tenant, r.name, m.node) : OkStatus();
      if (d.ok() || d.code() == StatusCode::kFailedPrecondition) continue;  // requeued, or not running there
      spdlog::warn("node autoscaler: requeue {}/{} off {} (tried again next turn): {}", r.tenant, r.name, m.node,
                   std::string(d.message()));
      std::lock_guard<std::mutex> l(mu_);
      if (auto it = added_.find(m.node); it != added_.end()) it->second.requeued.erase(r.tenant + "/" + r.name);
    }
  }
  for (const Resident& r : stale_marks) {
    spdlog::info("node autoscaler: replica {}/{} keeps its place: its node is no longer being emptied", r.tenant, r.name);
    Status l = SetLabel(store_, {"Job", r.tenant, r.name}, kEvictLabel, false);
    if (!l.ok()) spdlog::warn("node autoscaler: replica {}/{}: {}", r.tenant, r.name, std::string(l.message()));
  }
  for (const Move& m : to_release) {
    spdlog::warn("node autoscaler: consolidation of {} stopped: {}", m.node, m.why);
    for (const Resident& r : m.residents) {
      if (!r.marked) continue;
      Status l = SetLabel(store_, {"Job", r.tenant, r.name}, kEvictLabel, false);
      if (!l.ok()) spdlog::warn("node autoscaler: replica {}/{}: {}", r.tenant, r.name, std::string(l.message()));
    }
    if (consolidations_ != nullptr) consolidations_->Inc({"taken_over"});
  }
  for (const Move& m : to_abandon) {
    // Uncordoned and unmarked in one write, unless an operator took the node over meanwhile.
    Status c = control_ != nullptr ? control_->Cordon(m.node, false, ControlPlane::CordonBy::kMarked)
                                   : SetLabel(store_, {"Node", "", m.node}, kConsolidatingLabel, false);
    spdlog::warn("node autoscaler: consolidation of {} abandoned: {}; {}", m.node, m.why,
                 c.ok() ? "node uncordoned"
                 : c.code() == StatusCode::kFailedPrecondition ? "node left as an operator set it"
                                                               : "uncordon failed: " + std::string(c.message()));
    for (const Resident& r : m.residents) {
      if (!r.marked) continue;
      Status l = SetLabel(store_, {"Job", r.tenant, r.name}, kEvictLabel, false);
      if (!l.ok()) spdlog::warn("node autoscaler: replica {}/{}: {}", r.tenant, r.name, std::string(l.message()));
    }
    if (consolidations_ != nullptr) consolidations_->Inc({"abandoned"});
  }
  for (const auto& [name, reason] : off_reasons) {
    // An emptied node goes only while it is still marked, and an unneeded or emptied one only
    // while it is not labelled do-not-disrupt: an operator may have written either since this
    // turn read the Nodes. (A node lost or never registered goes regardless.)
    const bool voluntary = reason == "consolidated" || reason == "unneeded";
    // An unneeded one also only while still cordoned and without work bound to it: an operator
    // may have uncordoned it, and the scheduler placed work there meanwhile.
    const ControlPlane::CordonBy by = reason == "consolidated" ? ControlPlane::CordonBy::kMarked
                                      : reason == "unneeded"   ? ControlPlane::CordonBy::kPowerOff
                                                               : ControlPlane::CordonBy::kAny;
    Status c = control_ != nullptr ? control_->Cordon(name, true, by)
               : voluntary && NodeLabelled(store_, name, kDoNotDisruptLabel)
                   ? FailedPreconditionError("Node " + name + " is labelled " + kDoNotDisruptLabel + "=true")
               : reason == "consolidated" && !NodeLabelled(store_, name, kConsolidatingLabel)
                   ? FailedPreconditionError("Node " + name + " is no longer being emptied")
                   : OkStatus();
    if (voluntary && c.code() == StatusCode::kFailedPrecondition) {
      spdlog::info("node autoscaler: {} not powered off: {}", name, std::string(c.message()));
      const bool kept = NodeLabelled(store_, name, kDoNotDisruptLabel);
      const bool marked = reason == "consolidated" && NodeLabelled(store_, name, kConsolidatingLabel);
      std::lock_guard<std::mutex> l(mu_);
      released_.erase(name);
      Added& a = added_[name];
      a = {.powered_on_us = now, .registered = true, .abandoned = abandoned_before[name]};
      if (reason == "unneeded") {  // the next turn: uncordons it (labelled, or busy) or leaves it (uncordoned)
        a.cordoned = true;
      } else if (kept && marked) {  // still a move of ours: the next turn abandons it (uncordon, unmark)
        a.consolidating_since_us = now;
        a.marked = true;
      } else {  // an operator took it over: the same back-off as for a move abandoned
        (void)EndMove(a, now);
        if (consolidations_ != nullptr) consolidations_->Inc({"taken_over"});
      }
      continue;
    }
    if (!c.ok() && c.code() != StatusCode::kNotFound) spdlog::warn("node autoscaler: cordon {}: {}", name, std::string(c.message()));
    // Whatever the reason (a node lost mid-move too): a stale mark would make a later server
    // resume a move on the machine that takes this name next.
    (void)SetLabel(store_, {"Node", "", name}, kConsolidatingLabel, false);
    Status off = provisioner_->PowerOff(name);
    spdlog::info("node autoscaler: powering off {} ({}){}", name, reason, off.ok() ? "" : ": " + std::string(off.message()));
    if (powered_off_ != nullptr) powered_off_->Inc({reason});
  }
  for (const std::string& name : to_power_on) {
    // A released name comes back: let the scheduler use it again once it registers. The old
    // machine's marks go: a new machine is not kept by an operator's label for the old one.
    if (control_ != nullptr && store_->Get({"Node", "", name}).ok()) (void)control_->Cordon(name, false);
    (void)SetLabel(store_, {"Node", "", name}, kConsolidatingLabel, false);
    (void)SetLabel(store_, {"Node", "", name}, kDoNotDisruptLabel, false);
    (void)SetLabel(store_, {"Node", "", name}, kScaleDownLabel, false);
    Status on = provisioner_->PowerOn(name);
    if (!on.ok()) {
      spdlog::warn("node autoscaler: power on {}: {}", name, std::string(on.message()));
      std::lock_guard<std::mutex> l(mu_);
      added_.erase(name);
      continue;
    }
    if (powered_on_ != nullptr) powered_on_->Inc();
  }
  // Label the nodes we added once their Node objects exist (a restarted server finds them).
  std::set<std::string> ours;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& [name, a] : added_) if (a.registered && !labelled.count(name)) ours.insert(name);
  }
  for (const std::string& name : ours) {
    StatusOr<json> n = store_->Get({"Node", "", name});
    if (!n.ok()) continue;
    json u = *n;
    u["metadata"]["labels"][kAutoscaledLabel] = "true";
    (void)store_->Update(u, store::ResourceVersionOf(*n));  // lost race: retried next turn
  }
}

}  // namespace aicloud::control
