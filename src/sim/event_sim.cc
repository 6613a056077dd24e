#include "sim/event_sim.h"

#include <algorithm>
#include <cassert>
#include <chrono>
#include <cmath>
#include <memory>
#include <queue>
#include <set>
#include <unordered_map>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "core/clock.h"
#include "core/rng.h"
#include "sched/registry.h"

namespace aicloud::sim {

StatusOr<std::vector<TracePod>> ParseTimedPods(const CsvTable& table, cluster::Cluster* cluster) {
  if (!table.HasColumn("creation_time") || !table.HasColumn("deletion_time")) {
    return InvalidArgumentError(
        table.name() + ": no creation_time and deletion_time columns; the event replay needs "
        "them (the multigpu pod lists have none: use `simulate fgd` for those)");
  }
  StatusOr<std::vector<TracePod>> pods = ParseOpenbPods(table, cluster);
  if (!pods.ok()) return pods.status();
  for (size_t i = 0; i < pods->size(); ++i) {
    const TracePod& tp = (*pods)[i];
    if (tp.creation_time < 0 || tp.deletion_time < 0) {
      return table.rows()[i].Error(tp.creation_time < 0 ? "creation_time" : "deletion_time",
                                   "missing or negative; the event replay needs both times");
    }
  }
  return pods;
}

StatusOr<std::vector<TracePod>> LoadTimedPods(const std::string& path, cluster::Cluster* cluster) {
  StatusOr<CsvTable> t = CsvTable::ReadFile(path);
  if (!t.ok()) return t.status();
  return ParseTimedPods(*t, cluster);
}

const char* FateName(PodOutcome::Fate fate) {
  switch (fate) {
    case PodOutcome::Fate::kPlaced: return "placed";
    case PodOutcome::Fate::kDropped: return "dropped";
    case PodOutcome::Fate::kUnplaceable: return "unplaceable";
    case PodOutcome::Fate::kStranded: return "stranded";
  }
  return "?";
}

namespace {

// Every request field a filter reads (as Scheduler::InternShape keys its memo), plus the tenant
// queue a quota pre-filter reads: pods with equal keys fit exactly the same nodes.
std::string ShapeKey(const sched::PodRequest& p) {
  std::string key = fmt::format("{},{},{},{},{},{},{},{},{}|", p.cpu_milli, p.mem_mib,
                                static_cast<int>(p.gpu_kind), p.gpu_count, p.gpu_milli,
                                p.gpu_mem_mib, static_cast<int>(p.topology), p.priority,
                                p.mig_profile);
  for (cluster::ModelId m : p.gpu_models) key += std::to_string(m) + ',';
  key += '|' + p.pool + '|' + p.queue + '|';
  for (const sched::Toleration& t : p.tolerations) {
    key += t.key + '=' + (t.op_exists ? std::string("*") : t.value) + ':' + t.effect + ';';
  }
  return key;
}

// GPU milli bound on a node, counted as Cluster::allocated_gpu_milli counts it.
int64_t NodeAllocatedMilli(const cluster::Node& n) {
  int64_t s = 0;
  for (const cluster::Gpu& g : n.gpus) {
    s += g.mig_active() ? (cluster::kMilliPerGpu * g.mig_compute_used) / 7
                        : cluster::kMilliPerGpu - g.free_milli;
  }
  return s;
}

double Percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  size_t rank = static_cast<size_t>(std::ceil(p / 100 * static_cast<double>(sorted.size())));
  return sorted[std::clamp<size_t>(rank, 1, sorted.size()) - 1];
}

// The cluster in a per-seed random node order, as the FGD experiment builds it.
cluster::Cluster ShuffledCopy(const cluster::Cluster& src, uint64_t seed) {
  std::vector<int32_t> order(src.nodes().size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
  Rng node_rng(seed ^ 0x6e6f646573ULL);
  for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[node_rng.Uniform(i)]);
  cluster::Cluster out;
  for (const std::string& m : src.models()) out.InternModel(m);
  for (const cluster::Rack& r : src.racks()) out.AddRack(r);
  for (int32_t id : order) out.AddNode(src.node(id));
  return out;
}

enum class State : uint8_t { kFuture, kPending, kRunning, kDone, kDropped, kUnplaceable };

// Kinds at equal times run in this order: capacity freed at t is offered to arrivals at t, and a
// pod whose wait ends at t still gets the pass at t.
enum class EventKind : uint8_t { kDeparture = 0, kExpire = 1 };

struct Event {
  int64_t t;
  EventKind kind;
  int64_t seq;     // the pod's arrival rank, for a deterministic order at equal times
  int32_t pod;
  int32_t gen;     // the pod's run generation; a preempted run's departure is stale
  bool operator>(const Event& o) const {
    if (t != o.t) return t > o.t;
    if (kind != o.kind) return kind > o.kind;
    return seq > o.seq;
  }
};

// One replay: the mutable state of EventSim::Run, so the loop's steps read as methods.
class Replay {
 public:
  Replay(const std::vector<TracePod>& trace, const EventConfig& config, cluster::Cluster cluster)
      : trace_(trace), config_(config), cluster_(std::move(cluster)) {}

  Status Init(const sched::Profile& profile, const sched::TargetWorkload& target);
  Status Loop(EventRun* run);

 private:
  struct Pod {
    sched::PodRequest req;
    int64_t arrival_us = 0;
    int64_t remaining_us = 0;  // run time still to go (all of it until placed)
    int64_t start_us = -1;     // first placement
    int64_t end_us = -1;
    int64_t seq = 0;
    int32_t shape = 0;
    int32_t node = -1;
    int32_t gen = 0;
    uint64_t failed_epoch = UINT64_MAX;  // free_epoch_ of its last failed try
    State state = State::kFuture;
  };

  struct QueueOrder {
    const Replay* r;
    bool operator()(int32_t a, int32_t b) const {
      const sched::QueuedPod qa{&r->pods_[a].req, r->pods_[a].seq, 0};
      const sched::QueuedPod qb{&r->pods_[b].req, r->pods_[b].seq, 0};
      if (r->sched_->QueueLess(qa, qb)) return true;
      if (r->sched_->QueueLess(qb, qa)) return false;
      return qa.enqueue_seq < qb.enqueue_seq;
    }
  };

  int64_t Now() const { return clock_.NowMicros(); }
  // Whether pod i's shape fits some node of the empty cluster.
  bool Fits(int32_t i);
  void Enqueue(int32_t i);
  // Tries `candidates` (pending pods, in queue order). Returns true when the pass freed capacity
  // (preemption), so the caller passes again over the whole queue.
  StatusOr<bool> Pass(const std::vector<int32_t>& candidates);
  void Start(int32_t i, const sched::ScheduleResult& r);
  void Depart(int32_t i);
  void SetNodeAllocation(int32_t node);
  void AdvanceTo(int64_t t);

  const std::vector<TracePod>& trace_;
  const EventConfig& config_;
  cluster::Cluster cluster_;
  cluster::Cluster empty_;  // unplaceable probe: the same nodes, never anything bound
  std::unique_ptr<sched::Scheduler> sched_;
  std::unique_ptr<sched::Scheduler> probe_;
  bool shape_skip_ = false;
  FakeClock clock_;

  std::vector<Pod> pods_;
  std::vector<int32_t> arrivals_;  // pod indices by (arrival, file order)
  std::set<int32_t, QueueOrder> pending_{QueueOrder{this}};
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events_;
  std::vector<int8_t> shape_fits_;       // -1 unknown, 0 no, 1 yes (on the empty cluster)
  std::vector<uint64_t> shape_failed_;   // free_epoch_ in which the shape last failed
  uint64_t free_epoch_ = 0;              // bumped whenever capacity is freed

  std::vector<int64_t> node_alloc_;
  int64_t alloc_milli_ = 0;
  double capacity_milli_ = 0;
  double area_ = 0;  // milli x microseconds
  int64_t last_t_ = 0;
  int64_t next_sample_ = 0;
  int64_t sample_every_us_ = 0;
  EventRun* run_ = nullptr;
};

Status Replay::Init(const sched::Profile& profile, const sched::TargetWorkload& target) {
  empty_ = cluster_;
  sched::SchedulerOptions opts;
  opts.seed = config_.seed;
  opts.workload = target;
  opts.tie_break = config_.tie_break;
  StatusOr<std::unique_ptr<sched::Scheduler>> s =
      sched::Scheduler::Create(&cluster_, profile, sched::Registry::BuiltIn(), opts);
  if (!s.ok()) return s.status();
  sched_ = std::move(*s);
  // The probe has its own Rng (seeded the same), so probing never shifts the replay's draws.
  StatusOr<std::unique_ptr<sched::Scheduler>> probe =
      sched::Scheduler::Create(&empty_, profile, sched::Registry::BuiltIn(), opts);
  if (!probe.ok()) return probe.status();
  probe_ = std::move(*probe);
  // Skipping by shape is sound only when filters depend on nothing but (shape, node), which is
  // what the scheduler's memo requires too.
  shape_skip_ = sched_->memoized();

  std::unordered_map<std::string, int32_t> shapes;
  pods_.resize(trace_.size());
  for (size_t i = 0; i < trace_.size(); ++i) {
    const TracePod& tp = trace_[i];
    Pod& p = pods_[i];
    p.req = tp.pod;
    p.req.uid = static_cast<int64_t>(i) + 1;
    p.arrival_us = std::llround(static_cast<double>(tp.creation_time) * config_.time_scale *
                                static_cast<double>(kMicrosPerSecond));
    p.remaining_us = (tp.deletion_time - tp.creation_time) * kMicrosPerSecond;
    auto [it, inserted] =
        shapes.emplace(ShapeKey(p.req), static_cast<int32_t>(shapes.size()));
    p.shape = it->second;
  }
  shape_fits_.assign(shapes.size(), -1);
  shape_failed_.assign(shapes.size(), UINT64_MAX);
  arrivals_.resize(pods_.size());
  for (size_t i = 0; i < arrivals_.size(); ++i) arrivals_[i] = static_cast<int32_t>(i);
  std::stable_sort(arrivals_.begin(), arrivals_.end(), [this](int32_t a, int32_t b) {
    return pods_[a].arrival_us < pods_[b].arrival_us;
  });
  for (size_t k = 0; k < arrivals_.size(); ++k) pods_[arrivals_[k]].seq = static_cast<int64_t>(k);
  node_alloc_.assign(cluster_.nodes().size(), 0);
  for (const cluster::Node& n : cluster_.nodes()) {
    alloc_milli_ += node_alloc_[n.id] = NodeAllocatedMilli(n);
  }
  capacity_milli_ = static_cast<double>(cluster_.total_gpu_milli());
  if (capacity_milli_ <= 0) return FailedPreconditionError("the cluster has no GPUs");
  return OkStatus();
}

bool Replay::Fits(int32_t i) {
  // Any pod of a shape stands for all of them; its uid is free on the probe.
  int8_t& known = shape_fits_[pods_[i].shape];
  if (known < 0) {
    sched::ScheduleResult r = probe_->ScheduleOne(pods_[i].req);
    known = r.placed ? 1 : 0;
    if (r.placed) (void)probe_->Remove(pods_[i].req.uid);
  }
  return known == 1;
}

void Replay::Enqueue(int32_t i) {
  Pod& p = pods_[i];
  p.state = State::kPending;
  pending_.insert(i);
  // A preempted pod already started: its wait is over, it cannot be dropped.
  if (config_.max_wait_seconds >= 0 && p.start_us < 0) {
    const int64_t max_wait_us =
        std::llround(config_.max_wait_seconds * static_cast<double>(kMicrosPerSecond));
    const int64_t deadline = p.arrival_us + max_wait_us;
    events_.push({std::max(deadline, Now()), EventKind::kExpire, p.seq, i, p.gen});
  }
}

void Replay::SetNodeAllocation(int32_t node) {
  const int64_t now = NodeAllocatedMilli(cluster_.node(node));
  alloc_milli_ += now - node_alloc_[node];
  node_alloc_[node] = now;
  const double pct = static_cast<double>(alloc_milli_) / capacity_milli_ * 100;
  run_->peak_allocation_pct = std::max(run_->peak_allocation_pct, pct);
}

void Replay::Start(int32_t i, const sched::ScheduleResult& r) {
  Pod& p = pods_[i];
  p.state = State::kRunning;
  p.node = r.node;
  if (p.start_us < 0) p.start_us = Now();
  p.end_us = Now() + p.remaining_us;
  events_.push({p.end_us, EventKind::kDeparture, p.seq, i, p.gen});
  SetNodeAllocation(r.node);
}

void Replay::Depart(int32_t i) {
  Pod& p = pods_[i];
  // Only Remove frees resources; a failure here means the replay's bookkeeping broke.
  Status s = sched_->Remove(p.req.uid);
  assert(s.ok());
  (void)s;
  p.state = State::kDone;
  p.remaining_us = 0;
  SetNodeAllocation(p.node);
  ++free_epoch_;
}

StatusOr<bool> Replay::Pass(const std::vector<int32_t>& candidates) {
  bool freed = false;
  for (int32_t i : candidates) {
    Pod& p = pods_[i];
    if (p.state != State::kPending || p.failed_epoch == free_epoch_) continue;
    // Placements only take capacity, so a shape that failed since the last free still fails.
    if (shape_skip_ && shape_failed_[p.shape] == free_epoch_) {
      p.failed_epoch = free_epoch_;
      continue;
    }
    ++run_->scheduling_cycles;
    sched::ScheduleResult r = sched_->ScheduleOne(p.req);
    if (r.code == sched::Code::kError) {
      return InternalError("scheduling " + p.req.name + ": " + r.reason);
    }
    if (!r.placed) {
      p.failed_epoch = free_epoch_;
      shape_failed_[p.shape] = free_epoch_;
      continue;
    }
    pending_.erase(i);
    for (int64_t uid : r.preempted) {
      // The scheduler already removed the victim; it goes back to the queue with its rest.
      const int32_t v = static_cast<int32_t>(uid - 1);
      Pod& victim = pods_[v];
      victim.remaining_us = std::max<int64_t>(0, victim.end_us - Now());
      ++victim.gen;
      SetNodeAllocation(victim.node);
      Enqueue(v);
      ++run_->preempted;
      ++free_epoch_;
      freed = true;
    }
    Start(i, r);
  }
  return freed;
}

void Replay::AdvanceTo(int64_t t) {
  // Allocation is constant between events: integrate it, and sample it where the grid falls.
  while (next_sample_ < t) {
    run_->allocation_curve.emplace_back(
        static_cast<double>(next_sample_) / kMicrosPerSecond,
        static_cast<double>(alloc_milli_) / capacity_milli_ * 100);
    next_sample_ += sample_every_us_;
  }
  area_ += static_cast<double>(alloc_milli_) * static_cast<double>(t - last_t_);
  last_t_ = t;
  clock_.SetMicros(t);
}

Status Replay::Loop(EventRun* run) {
  run_ = run;
  if (arrivals_.empty()) return OkStatus();
  const int64_t first = pods_[arrivals_.front()].arrival_us;
  sample_every_us_ = std::max<int64_t>(
      1, std::llround(config_.sample_every_seconds * static_cast<double>(kMicrosPerSecond)));
  next_sample_ = last_t_ = first;
  clock_.SetMicros(first);
  int64_t last_departure = first;
  size_t next_arrival = 0;
  std::vector<int32_t> batch;
  while (next_arrival < arrivals_.size() || !events_.empty()) {
    // 1. Advance the clock to the next event time.
    int64_t t = INT64_MAX;
    if (next_arrival < arrivals_.size()) t = pods_[arrivals_[next_arrival]].arrival_us;
    if (!events_.empty()) t = std::min(t, events_.top().t);
    AdvanceTo(t);
    // 2. Departures at t free their resources.
    bool freed = false;
    while (!events_.empty() && events_.top().t == t &&
           events_.top().kind == EventKind::kDeparture) {
      Event e = events_.top();
      events_.pop();
      if (pods_[e.pod].state != State::kRunning || pods_[e.pod].gen != e.gen) continue;
      Depart(e.pod);
      last_departure = t;
      freed = true;
    }
    // 3. Arrivals at t join the queue, unless no node could ever hold them.
    batch.clear();
    for (; next_arrival < arrivals_.size() && pods_[arrivals_[next_arrival]].arrival_us == t;
         ++next_arrival) {
      const int32_t i = arrivals_[next_arrival];
      if (!Fits(i)) {
        pods_[i].state = State::kUnplaceable;
        continue;
      }
      Enqueue(i);
      batch.push_back(i);
    }
    // 4. The scheduling pass: the whole queue after a free, else only the newcomers (everything
    //    older already failed since the last free).
    if (!freed) std::sort(batch.begin(), batch.end(), pending_.value_comp());
    for (bool again = true; again;) {
      if (freed) batch.assign(pending_.begin(), pending_.end());
      StatusOr<bool> more = Pass(batch);
      if (!more.ok()) return more.status();
      again = freed = *more;
    }
    // 5. Pods whose wait ran out at t (after the pass, so a free at t still counts) are dropped.
    while (!events_.empty() && events_.top().t == t && events_.top().kind == EventKind::kExpire) {
      Event e = events_.top();
      events_.pop();
      if (pods_[e.pod].state != State::kPending || pods_[e.pod].gen != e.gen) continue;
      pending_.erase(e.pod);
      pods_[e.pod].state = State::kDropped;
    }
  }
  const int64_t end = last_t_;
  AdvanceTo(end);  // flushes samples strictly before the end
  run->allocation_curve.emplace_back(static_cast<double>(end) / kMicrosPerSecond,
                                     static_cast<double>(alloc_milli_) / capacity_milli_ * 100);
  run->makespan_s = static_cast<double>(last_departure - first) / kMicrosPerSecond;
  run->time_weighted_allocation_pct =
      end > first ? area_ / capacity_milli_ / static_cast<double>(end - first) * 100
                  : static_cast<double>(alloc_milli_) / capacity_milli_ * 100;

  std::vector<double> waits;
  run->outcomes.reserve(pods_.size());
  for (size_t i = 0; i < pods_.size(); ++i) {
    const Pod& p = pods_[i];
    PodOutcome o;
    o.name = p.req.name;
    o.arrival_s = static_cast<double>(p.arrival_us) / kMicrosPerSecond;
    if (p.start_us >= 0) {
      o.start_s = static_cast<double>(p.start_us) / kMicrosPerSecond;
      o.end_s = static_cast<double>(p.end_us) / kMicrosPerSecond;
    }
    switch (p.state) {
      case State::kDone:
      case State::kRunning: o.fate = PodOutcome::Fate::kPlaced; break;
      case State::kDropped: o.fate = PodOutcome::Fate::kDropped; break;
      case State::kUnplaceable: o.fate = PodOutcome::Fate::kUnplaceable; break;
      case State::kPending:
      case State::kFuture: o.fate = PodOutcome::Fate::kStranded; break;
    }
    // A preempted pod that never got back on counts as placed: it did run.
    if (o.start_s >= 0 && o.fate != PodOutcome::Fate::kPlaced) o.fate = PodOutcome::Fate::kPlaced;
    switch (o.fate) {
      case PodOutcome::Fate::kPlaced:
        ++run->placed;
        waits.push_back(o.wait_s());
        break;
      case PodOutcome::Fate::kDropped: ++run->dropped; break;
      case PodOutcome::Fate::kUnplaceable: ++run->unplaceable; break;
      case PodOutcome::Fate::kStranded: ++run->stranded; break;
    }
    run->outcomes.push_back(std::move(o));
  }
  run->never_placed = run->dropped + run->unplaceable + run->stranded;
  std::sort(waits.begin(), waits.end());
  double sum = 0;
  for (double w : waits) sum += w;
  run->wait_mean_s = waits.empty() ? 0 : sum / static_cast<double>(waits.size());
  run->wait_p50_s = Percentile(waits, 50);
  run->wait_p95_s = Percentile(waits, 95);
  run->wait_p99_s = Percentile(waits, 99);
  run->wait_max_s = waits.empty() ? 0 : waits.back();
  return OkStatus();
}

}  // namespace

EventSim::EventSim(const cluster::Cluster& cluster, std::vector<TracePod> pods,
                   std::string workload)
    : cluster_(cluster), pods_(std::move(pods)), workload_(std::move(workload)) {
  std::vector<sched::PodRequest> reqs;
  reqs.reserve(pods_.size());
  for (const TracePod& tp : pods_) reqs.push_back(tp.pod);
  target_ = sched::BuildTargetWorkload(reqs, 0.95);
}

StatusOr<EventRun> EventSim::Run(const EventConfig& config) const {
  if (!(config.time_scale > 0) || config.time_scale > 1000) {
    return InvalidArgumentError("time scale must be in (0, 1000], got " +
                                std::to_string(config.time_scale));
  }
  // 2^63 us is ~292,000 years; this bound keeps every scaled time far inside it.
  constexpr int64_t kMaxTraceSeconds = int64_t{1} << 40;
  constexpr double kMaxSamples = 1e6;
  if (!(config.sample_every_seconds >= 1) || config.sample_every_seconds > kMaxTraceSeconds) {
    return InvalidArgumentError("sample interval must be 1 s or more, got " +
                                std::to_string(config.sample_every_seconds));
  }
  if (!std::isfinite(config.max_wait_seconds) || config.max_wait_seconds > kMaxTraceSeconds) {
    return InvalidArgumentError("max wait must be a finite number of seconds up to 2^40");
  }
  double span = 0;
  for (const TracePod& tp : pods_) {
    if (tp.creation_time < 0 || tp.deletion_time < tp.creation_time) {
      return InvalidArgumentError("pod " + tp.pod.name +
                                  " has no creation_time/deletion_time (or deletion < creation)");
    }
    if (tp.deletion_time > kMaxTraceSeconds ||
        static_cast<double>(tp.creation_time) * config.time_scale > kMaxTraceSeconds) {
      return InvalidArgumentError("pod " + tp.pod.name + ": time out of range at this time scale");
    }
    span = std::max(span, static_cast<double>(tp.creation_time) * config.time_scale +
                              static_cast<double>(tp.deletion_time - tp.creation_time));
  }
  if (span / config.sample_every_seconds > kMaxSamples) {
    return InvalidArgumentError("a sample every " + std::to_string(config.sample_every_seconds) +
                                " s over " + std::to_string(static_cast<int64_t>(span)) +
                                " s of trace is more than a million points; raise the interval");
  }
  StatusOr<sched::Profile> resolved = sched::ProfileOrPolicy(config.profile, config.policy);
  if (!resolved.ok()) return resolved.status();
  const sched::Profile profile = std::move(*resolved);
  EventRun run;
  run.policy = profile.name.empty() ? config.policy : profile.name;
  run.seed = config.seed;
  run.workload = workload_;
  run.time_scale = config.time_scale;
  run.max_wait_s = config.max_wait_seconds < 0 ? -1 : config.max_wait_seconds;
  run.pods = static_cast<int64_t>(pods_.size());

  const auto start = std::chrono::steady_clock::now();
  Replay replay(pods_, config,
                config.shuffle_nodes ? ShuffledCopy(cluster_, config.seed) : cluster_);
  AICLOUD_RETURN_IF_ERROR(replay.Init(profile, target_));
  AICLOUD_RETURN_IF_ERROR(replay.Loop(&run));
  run.wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return run;
}

std::string FormatEventTable(const std::vector<EventRun>& runs) {
  if (runs.empty()) return "no runs\n";
  const EventRun& r0 = runs[0];
  std::string out = fmt::format(
      "Event replay: workload {}, seed {}, time scale {}, max wait {}\n\n", r0.workload, r0.seed,
      r0.time_scale, r0.max_wait_s < 0 ? std::string("none") : fmt::format("{} s", r0.max_wait_s));
  out += fmt::format("{:<12}{:>8}{:>8}{:>12}{:>12}{:>12}{:>10}{:>10}\n", "policy", "placed",
                     "never", "wait mean s", "wait p50 s", "wait p99 s", "alloc %", "peak %");
  for (const EventRun& r : runs) {
    out += fmt::format("{:<12}{:>8}{:>8}{:>12.1f}{:>12.1f}{:>12.1f}{:>10.2f}{:>10.2f}\n", r.policy,
                       r.placed, r.never_placed, r.wait_mean_s, r.wait_p50_s, r.wait_p99_s,
                       r.time_weighted_allocation_pct, r.peak_allocation_pct);
  }
  out += "\nnever = dropped (waited past --max-wait) + unplaceable (fits no empty node)\n"
         "        + stranded (still queued at the end); alloc % = time-weighted GPU allocation\n";
  for (const EventRun& r : runs) {
    out += fmt::format("  {}: {} dropped, {} unplaceable, {} stranded; wait p95 {:.1f} s, max "
                       "{:.1f} s; makespan {:.2f} days\n",
                       r.policy, r.dropped, r.unplaceable, r.stranded, r.wait_p95_s, r.wait_max_s,
                       r.makespan_s / 86400);
  }
  return out;
}

std::string FormatEventJson(const std::vector<EventRun>& runs) {
  nlohmann::json all = nlohmann::json::array();
  for (const EventRun& r : runs) {
    nlohmann::json j;
    j["policy"] = r.policy;
    j["seed"] = r.seed;
    j["workload"] = r.workload;
    j["time_scale"] = r.time_scale;
    j["max_wait_s"] = r.max_wait_s;
    j["pods"] = r.pods;
    j["placed"] = r.placed;
    j["never_placed"] = r.never_placed;
    j["dropped"] = r.dropped;
    j["unplaceable"] = r.unplaceable;
    j["stranded"] = r.stranded;
    j["preempted"] = r.preempted;
    j["wait_s"] = {{"mean", r.wait_mean_s}, {"p50", r.wait_p50_s}, {"p95", r.wait_p95_s},
                   {"p99", r.wait_p99_s},   {"max", r.wait_max_s}};
    j["time_weighted_allocation_pct"] = r.time_weighted_allocation_pct;
    j["peak_allocation_pct"] = r.peak_allocation_pct;
    j["makespan_s"] = r.makespan_s;
    j["scheduling_cycles"] = r.scheduling_cycles;
    nlohmann::json curve = nlohmann::json::array();
    for (const auto& [t, pct] : r.allocation_curve) curve.push_back({t, pct});
    j["allocation_curve"] = curve;
    all.push_back(std::move(j));
  }
  nlohmann::json doc;
  doc["workload"] = runs.empty() ? "" : runs[0].workload;
  doc["runs"] = all;
  return doc.dump(2) + "\n";
}

std::string FormatEventCsv(const std::vector<EventRun>& runs) {
  std::string out = "policy,pod,arrival_s,start_s,end_s,wait_s,fate\n";
  for (const EventRun& r : runs) {
    for (const PodOutcome& o : r.outcomes) {
      out += fmt::format("{},{},{},{},{},{},{}\n", r.policy, o.name, o.arrival_s,
                         o.start_s < 0 ? "" : fmt::format("{}", o.start_s),
                         o.end_s < 0 ? "" : fmt::format("{}", o.end_s),
                         o.start_s < 0 ? "" : fmt::format("{}", o.wait_s()), FateName(o.fate));
    }
  }
  return out;
}

}  // namespace aicloud::sim
