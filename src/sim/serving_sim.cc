#include "sim/serving_sim.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <map>
#include <memory>

#include <fmt/format.h>

#include "core/rng.h"
#include "fleet/autoscaler.h"
#include "fleet/node_pool.h"
#include "fleet/router.h"
#include "fleet/slo_autoscaler.h"

namespace aicloud::sim {
namespace {

// The arrival counters of a snapshot cover this long (the gateway's and engines' 10 s rates).
constexpr double kSnapshotWindowS = 10;

constexpr double kInf = std::numeric_limits<double>::infinity();

enum class SlotState { kStarting, kReady, kDraining, kGone };

struct Slot {
  std::unique_ptr<SimReplica> replica;
  SlotState state = SlotState::kStarting;
  std::string node;
  double node_ready_s = 0;  // the GPU is held from here
  double ready_at_s = 0;
  double gone_s = kInf;
};

struct NodeState {
  double ready_at_s = 0;
  bool used = false;
  double idle_since_s = 0;
};

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t rank = static_cast<size_t>(std::ceil(p * static_cast<double>(v.size())));
  rank = std::clamp<size_t>(rank, 1, v.size());
  return v[rank - 1];
}

// Load samples (t, replicas of work) of a re-sampled copy of the trace (ResampledDay), one every
// `every_s` (the autoscaler's tick), each the work of the last kSnapshotWindowS as the replay's
// snapshots give it.
std::vector<std::pair<double, double>> HistoryDay(const ServingTrace& trace, const ReplicaModel& model,
                                                  double period_s, double burst_gap_s, double max_shift_s,
                                                  double every_s, Rng& rng) {
  const fleet::ReplicaCapacity cap = model.Capacity();
  const ServingTrace day = ResampledDay(trace, period_s, burst_gap_s, rng, max_shift_s);
  std::vector<std::pair<double, double>> out;
  size_t lo = 0, hi = 0;
  double sum = 0;
  const auto work = [&](size_t i) {
    const ServingRequest& r = day.requests[i];
    return r.prompt_tokens / cap.prefill_tokens_per_s + r.output_tokens / cap.decode_tokens_per_s;
  };
  for (double t = 0; t < period_s; t += every_s) {
    while (hi < day.requests.size() && day.requests[hi].arrival_s <= t) sum += work(hi++);
    while (lo < hi && day.requests[lo].arrival_s <= t - kSnapshotWindowS) sum -= work(lo++);
    out.emplace_back(t, sum / kSnapshotWindowS);
  }
  return out;
}

fleet::ReplicaCapacity CapacityFor(const ServingConfig& c) {
  fleet::ReplicaCapacity cap = c.model.Capacity();
  if (c.max_concurrency > 0) cap.max_concurrency = c.max_concurrency;
  return cap;
}

class Replay {
 public:
  Replay(const ServingTrace& trace, const ServingConfig& c)
      : trace_(trace),
        c_(c),
        cap_(CapacityFor(c)),
        outcomes_(trace.requests.size()),
        provider_({c.provision_delay_s, c.warm_pool, c.warm_start_s}) {
    const int64_t blocks = c.model.prefix_cache_blocks > 0
                               ? c.model.prefix_cache_blocks
                               : (trace.block_tokens > 0 ? c.model.kv_capacity_tokens / trace.block_tokens : 0);
    cache_ = std::make_unique<fleet::PrefixIndex>(blocks, 1 << 30);
    router_config_.prefix_capacity_blocks = blocks;
  }

  StatusOr<ServingRun> Run();

 private:
  Status MakePolicy();
  void AddReplica(double now, bool warm_start_at_zero);
  void Dispatch(int request, double now);
  void Tick(double now);
  void Sample(double now);
  void RetireDrained(double now);
  void ReleaseIdleNodes(double now);
  int Active() const;

  const ServingTrace& trace_;
  const ServingConfig& c_;
  fleet::ReplicaCapacity cap_;
  std::vector<RequestOutcome> outcomes_;
  fleet::WarmPoolProvider provider_;
  std::unique_ptr<fleet::PrefixIndex> cache_;
  fleet::RouterConfig router_config_;
  std::unique_ptr<fleet::Router> router_;
  std::unique_ptr<fleet::Autoscaler> autoscaler_;
  fleet::OscillationCounter oscillation_;
  std::vector<Slot> slots_;
  std::map<std::string, NodeState> nodes_;
  std::deque<int> pending_;
  fleet::SampleWindow arrivals_{60}, prompt_{60}, output_{60};
  int desired_ = 0;
  double initial_node_s_ = 0;  // node-seconds of released initial nodes
  ServingRun run_;
};

Status Replay::MakePolicy() {
  StatusOr<std::unique_ptr<fleet::Router>> router = fleet::MakeRouter(c_.router, router_config_);
  if (!router.ok()) return router.status();
  router_ = std::move(*router);
  if (c_.policy == "static") return OkStatus();
  if (c_.policy == "ours") {
    fleet::SloAutoscalerConfig oc;
    oc.bounds = c_.bounds;
    oc.predictive = c_.predictive;
    oc.target_utilization = c_.target_utilization;
    oc.arrival_curve = c_.arrival_curve;
    oc.lead_s = c_.provision_delay_s + c_.model.cold_start_s;
    oc.tick_s = c_.tick_s;
    oc.scale_down_window_s = c_.scale_down_window_s;
    oc.burst_ratio = c_.burst_ratio;
    oc.burst_hold_s = c_.burst_hold_s;
    oc.burst_early_s = c_.burst_early_s;
    oc.burst_utilization = c_.burst_utilization;
    oc.forecast.period_s = c_.period_s;
    oc.forecast.bin_s = c_.period_s >= 86400 ? 300 : 60;
    auto ours = std::make_unique<fleet::SloAutoscaler>(oc);
    Rng rng(c_.seed);
    for (int d = c_.history_days; d >= 1; --d) {
      for (const auto& [t, load] : HistoryDay(c_.history_trace != nullptr ? *c_.history_trace : trace_, c_.model, c_.period_s,
                                                    c_.history_burst_gap_s, c_.history_max_shift_s, c_.tick_s, rng)) {
        ours->ObserveHistory(t - d * c_.period_s, load, kSnapshotWindowS, c_.slo.ttft_p99_ms);
      }
    }
    autoscaler_ = std::move(ours);
    return OkStatus();
  }
  StatusOr<std::unique_ptr<fleet::Autoscaler>> a = fleet::MakeAutoscaler(c_.policy, c_.bounds);
  if (!a.ok()) return a.status();
  autoscaler_ = std::move(*a);
  return OkStatus();
}

int Replay::Active() const {
  int n = 0;
  for (const Slot& s : slots_) n += (s.state == SlotState::kStarting || s.state == SlotState::kReady) ? 1 : 0;
  return n;
}

void Replay::AddReplica(double now, bool ready_at_zero) {
  Slot s;
  const int index = static_cast<int>(slots_.size());
  s.replica = std::make_unique<SimReplica>(c_.model, trace_, &outcomes_, cache_.get(),
                                           "replica-" + std::to_string(index), index);
  if (ready_at_zero) {
    s.node = "initial-" + std::to_string(index);
    nodes_[s.node] = {0, true, 0};
    s.node_ready_s = 0;
    s.ready_at_s = 0;
    s.state = SlotState::kReady;
  } else {
    // A free node of ours (ready soonest), else the provider.
    std::string best;
    for (auto& [id, n] : nodes_) {
      if (!n.used && (best.empty() || n.ready_at_s < nodes_[best].ready_at_s)) best = id;
    }
    if (best.empty()) {
      fleet::NodeGrant g = provider_.Request(1, now).front();
      best = g.node_id;
      nodes_[best] = {g.ready_at_s, false, now};
    }
    NodeState& n = nodes_[best];
    n.used = true;
    s.node = best;
    s.node_ready_s = std::max(n.ready_at_s, now);
    s.ready_at_s = s.node_ready_s + c_.model.cold_start_s;
  }
  slots_.push_back(std::move(s));
}

void Replay::Dispatch(int request, double now) {
  std::vector<fleet::ReplicaView> views;
  std::vector<size_t> slot_of;
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].state != SlotState::kReady) continue;
    const SimReplica& r = *slots_[i].replica;
    fleet::ReplicaView v;
    v.id = r.id();
    v.ready = true;
    v.queue_depth = r.waiting();
    v.running = r.running();
    v.kv_usage = r.kv_usage();
    views.push_back(std::move(v));
    slot_of.push_back(i);
  }
  const ServingRequest& req = trace_.requests[static_cast<size_t>(request)];
  fleet::RouteRequest rr{trace_.name, "", req.block_hashes};
  StatusOr<size_t> pick = router_->Pick(rr, views);
  if (!pick.ok()) {
    pending_.push_back(request);  // held at the gateway until a replica is ready
    return;
  }
  slots_[slot_of[*pick]].replica->Enqueue(request, now);
}

void Replay::RetireDrained(double now) {
  for (Slot& s : slots_) {
    if (s.state == SlotState::kDraining && s.replica->empty()) {
      s.state = SlotState::kGone;
      s.gone_s = now;
      router_->RemoveReplica(s.replica->id());
      NodeState& n = nodes_[s.node];
      n.used = false;
      n.idle_since_s = now;
    }
  }
}

void Replay::ReleaseIdleNodes(double now) {
  std::vector<fleet::NodeUsage> usage;
  for (const auto& [id, n] : nodes_) {
    usage.push_back({id, n.used ? 1 : 0, std::max(n.idle_since_s, n.ready_at_s)});
  }
  for (const std::string& id : fleet::IdleNodesToRelease(usage, now, c_.node_idle_release_s)) {
    if (id.rfind("initial-", 0) == 0) initial_node_s_ += now;  // the run started with it
    provider_.Release(id, now);
    nodes_.erase(id);
  }
}

void Replay::Tick(double now) {
  fleet::DeploymentSnapshot s;
  s.now_s = now;
  int starting = 0;
  for (const Slot& slot : slots_) {
    if (slot.state == SlotState::kReady) s.replicas.push_back(slot.replica->Metrics(now, c_.metrics_window_s));
    if (slot.state == SlotState::kStarting) ++starting;
  }
  s.starting_replicas = starting;
  s.current_replicas = static_cast<int>(s.replicas.size()) + starting;
  s.pending_requests = static_cast<int>(pending_.size());
  s.window_s = kSnapshotWindowS;
  s.arrival_rps = arrivals_.Sum(now, 10) / 10;
  s.prompt_tokens_per_s = prompt_.Sum(now, 10) / 10;
  s.output_tokens_per_s = output_.Sum(now, 10) / 10;
  s.slo = c_.slo;
  s.capacity = cap_;
  const fleet::ScaleDecision d = autoscaler_->Recommend(s);
  desired_ = d.desired;
  oscillation_.Observe(d.desired);

  int active = Active();
  while (active < desired_) {
    AddReplica(now, false);
    ++active;
  }
  if (active > desired_) {
    int excess = active - desired_;
    // Cancel replicas still starting, the furthest from ready first.
    std::vector<size_t> starting_slots;
    for (size_t i = 0; i < slots_.size(); ++i) {
      if (slots_[i].state == SlotState::kStarting) starting_slots.push_back(i);
    }
    std::sort(starting_slots.begin(), starting_slots.end(),
              [&](size_t a, size_t b) { return slots_[a].ready_at_s > slots_[b].ready_at_s; });
    for (size_t i : starting_slots) {
      if (excess == 0) break;
      Slot& slot = slots_[i];
      slot.state = SlotState::kGone;
      // A replica whose node was not ready yet never held a GPU.
      slot.gone_s = std::max(now, slot.node_ready_s);
      NodeState& n = nodes_[slot.node];
      n.used = false;
      n.idle_since_s = now;
      --excess;
    }
    // Then drain the least busy ready replicas.
    std::vector<size_t> ready_slots;
    for (size_t i = 0; i < slots_.size(); ++i) {
      if (slots_[i].state == SlotState::kReady) ready_slots.push_back(i);
    }
    std::sort(ready_slots.begin(), ready_slots.end(), [&](size_t a, size_t b) {
      const SimReplica& x = *slots_[a].replica;
      const SimReplica& y = *slots_[b].replica;
      return std::make_pair(x.running() + x.waiting(), -static_cast<int>(a)) <
             std::make_pair(y.running() + y.waiting(), -static_cast<int>(b));
    });
    for (size_t i : ready_slots) {
      if (excess == 0) break;
      slots_[i].state = SlotState::kDraining;
      --excess;
    }
    RetireDrained(now);
  }
  ReleaseIdleNodes(now);
}

void Replay::Sample(double now) {
  TimelinePoint p;
  p.t_s = now;
  for (const Slot& s : slots_) {
    if (s.state == SlotState::kReady) ++p.ready;
    const bool holds = s.state != SlotState::kGone && s.node_ready_s <= now;
    if (holds) ++p.gpus;
  }
  p.desired = desired_;
  p.in_flight = static_cast<int>(pending_.size());
  for (const Slot& s : slots_) {
    if (s.state == SlotState::kReady || s.state == SlotState::kDraining) {
      p.in_flight += s.replica->running() + s.replica->waiting();
    }
  }
  p.load_replicas = OfferedLoad(trace_, c_.model, now, 60);
  run_.timeline.push_back(p);
}

StatusOr<ServingRun> Replay::Run() {
  if (trace_.requests.empty()) return InvalidArgumentError("trace has no requests");
  AICLOUD_RETURN_IF_ERROR(MakePolicy());
  const double span = trace_.span_s();
  const double end = span + c_.drain_limit_s;
  int initial = c_.static_replicas;
  if (c_.policy != "static") {
    initial = c_.initial_replicas > 0
                  ? c_.initial_replicas
                  : static_cast<int>(std::ceil(OfferedLoad(trace_, c_.model, 120, 120) / 0.7));
    // What the forecasts ask for at the start, as a controller running since before it would
    // have; a count set by the caller stands.
    if (auto* ours = dynamic_cast<fleet::SloAutoscaler*>(autoscaler_.get());
        ours != nullptr && c_.predictive && c_.initial_replicas <= 0) {
      initial = std::max(initial, ours->Predicted(0, c_.arrival_curve && c_.slo.ttft_p99_ms > 0));
    }
    initial = std::clamp(std::max(initial, 1), c_.bounds.min_replicas, c_.bounds.max_replicas);
  }
  if (initial < 1) return InvalidArgumentError("static replicas must be at least 1");
  for (int i = 0; i < initial; ++i) AddReplica(0, true);
  desired_ = initial;
  oscillation_.Observe(initial);

  size_t next_arrival = 0;
  double next_tick = autoscaler_ ? 0 : kInf;
  double next_sample = 0;
  while (true) {
    double t_replica = kInf;
    size_t which = 0;
    for (size_t i = 0; i < slots_.size(); ++i) {
      const Slot& s = slots_[i];
      if (s.state == SlotState::kGone) continue;
      if (s.state == SlotState::kStarting) {
        if (s.ready_at_s < t_replica) t_replica = s.ready_at_s, which = i;
      } else if (s.replica->next_event_s() < t_replica) {
        t_replica = s.replica->next_event_s(), which = i;
      }
    }
    const double t_arrival = next_arrival < trace_.requests.size() ? trace_.requests[next_arrival].arrival_s : kInf;
    const double t = std::min({t_replica, t_arrival, next_tick, next_sample});
    const bool work_left = next_arrival < trace_.requests.size() || !pending_.empty() || t_replica < kInf;
    if (t > end || (!work_left && t > span)) break;
    if (t == t_replica) {
      Slot& s = slots_[which];
      if (s.state == SlotState::kStarting) {
        s.state = SlotState::kReady;
        std::deque<int> held;
        held.swap(pending_);
        for (int r : held) Dispatch(r, t);
      } else {
        s.replica->CompleteStep();
        if (s.state == SlotState::kDraining && s.replica->empty()) RetireDrained(t);
      }
    } else if (t == t_arrival) {
      const ServingRequest& r = trace_.requests[next_arrival];
      arrivals_.Add(t, 1);
      prompt_.Add(t, r.prompt_tokens);
      output_.Add(t, r.output_tokens);
      Dispatch(static_cast<int>(next_arrival), t);
      ++next_arrival;
    } else if (t == next_tick) {
      Tick(t);
      next_tick = t + autoscaler_->tick_seconds();
    } else {
      if (t <= span) Sample(t);
      next_sample = t + c_.sample_every_s;
      if (t > span) next_sample = kInf;
    }
  }

  // Results.
  ServingRun& out = run_;
  out.policy = c_.policy;
  out.router = c_.router;
  out.trace = trace_.name;
  out.history_days = c_.policy == "ours" && c_.predictive ? c_.history_days : 0;
  out.static_replicas = c_.policy == "static" ? c_.static_replicas : 0;
  out.requests = static_cast<int64_t>(trace_.requests.size());
  out.slo_ttft_ms = c_.slo.ttft_p99_ms;
  out.span_s = span;
  std::vector<double> ttft, tpot;
  double ttft_sum = 0, e2e_sum = 0;
  int64_t met = 0, prompt_tokens = 0, cached = 0;
  for (size_t i = 0; i < outcomes_.size(); ++i) {
    const RequestOutcome& o = outcomes_[i];
    const ServingRequest& r = trace_.requests[i];
    prompt_tokens += r.prompt_tokens;
    cached += o.cached_tokens;
    const size_t minute = static_cast<size_t>(std::max(0.0, r.arrival_s) / 60);
    if (out.missed_by_minute.size() <= minute) out.missed_by_minute.resize(minute + 1, 0);
    if (o.first_token_s < 0) {
      ttft.push_back(kInf);
      ++out.missed_by_minute[minute];
      continue;
    }
    const double ms = (o.first_token_s - r.arrival_s) * 1000;
    ttft.push_back(ms);
    ttft_sum += ms;
    if (c_.slo.ttft_p99_ms <= 0 || ms <= c_.slo.ttft_p99_ms) ++met;
    else ++out.missed_by_minute[minute];
    if (o.finish_s >= 0) {
      ++out.completed;
      e2e_sum += o.finish_s - r.arrival_s;
      if (r.output_tokens > 1) tpot.push_back((o.finish_s - o.first_token_s) * 1000 / (r.output_tokens - 1));
    }
  }
  const int64_t first_tokens = std::count_if(ttft.begin(), ttft.end(), [](double v) { return v < kInf; });
  out.ttft_mean_ms = first_tokens ? ttft_sum / static_cast<double>(first_tokens) : 0;
  out.ttft_p50_ms = Percentile(ttft, 0.5);
  out.ttft_p99_ms = Percentile(ttft, 0.99);
  out.tpot_p99_ms = Percentile(tpot, 0.99);
  out.e2e_mean_s = out.completed ? e2e_sum / static_cast<double>(out.completed) : 0;
  out.slo_attainment = static_cast<double>(met) / static_cast<double>(out.requests);
  out.prefix_hit_rate = prompt_tokens ? static_cast<double>(cached) / static_cast<double>(prompt_tokens) : 0;
  for (const Slot& s : slots_) {
    const double from = std::max(0.0, s.node_ready_s);
    const double to = std::min(span, s.gone_s);
    if (to > from) out.gpu_hours += (to - from) / 3600;
  }
  double node_s = provider_.NodeSeconds(span) + std::min(initial_node_s_, span * initial);
  for (const auto& [id, n] : nodes_) {
    if (id.rfind("initial-", 0) == 0) node_s += span;  // nodes the run started with
  }
  out.node_hours = node_s / 3600;
  out.warm_idle_hours = provider_.WarmIdleSeconds(span) / 3600;
  out.nodes_provisioned = provider_.provisioned();
  out.oscillations = oscillation_.direction_changes();
  out.scale_events = oscillation_.scale_events();
  double gpu_sum = 0;
  for (const TimelinePoint& p : out.timeline) {
    out.peak_gpus = std::max(out.peak_gpus, p.gpus);
    gpu_sum += p.gpus;
  }
  out.mean_gpus = out.timeline.empty() ? 0 : gpu_sum / static_cast<double>(out.timeline.size());
  return std::move(out);
}

}  // namespace

ServingTrace ResampledDay(const ServingTrace& trace, double period_s, double burst_gap_s, Rng& rng,
                          double max_shift_s) {
  ServingTrace day;
  day.name = trace.name;
  day.block_tokens = trace.block_tokens;
  double last = -std::numeric_limits<double>::infinity(), shift = 0;
  for (const ServingRequest& r : trace.requests) {
    // Each request its own shift, or one per burst: arrivals are sorted, and a burst is a run
    // of them without a gap of burst_gap_s.
    if (burst_gap_s <= 0 || r.arrival_s - last >= burst_gap_s) shift = (rng.UniformDouble() * 2 - 1) * max_shift_s;
    last = r.arrival_s;
    if (rng.UniformDouble() >= 0.9) continue;
    // The day repeats: what moves past its end comes back at its start, not piled up at either.
    ServingRequest moved = r;
    moved.arrival_s = std::fmod(r.arrival_s + shift, period_s);
    if (moved.arrival_s < 0) moved.arrival_s += period_s;
    day.requests.push_back(std::move(moved));
  }
  std::stable_sort(day.requests.begin(), day.requests.end(),
                   [](const ServingRequest& a, const ServingRequest& b) { return a.arrival_s < b.arrival_s; });
  return day;
}

double OfferedLoad(const ServingTrace& trace, const ReplicaModel& model, double t_s, double window_s) {
  const fleet::ReplicaCapacity cap = model.Capacity();
  auto lo = std::upper_bound(trace.requests.begin(), trace.requests.end(), t_s - window_s,
                             [](double v, const ServingRequest& r) { return v < r.arrival_s; });
  double work = 0;
  for (auto it = lo; it != trace.requests.end() && it->arrival_s <= t_s; ++it) {
    work += it->prompt_tokens / cap.prefill_tokens_per_s + it->output_tokens / cap.decode_tokens_per_s;
  }
  return work / window_s;
}

double ProfiledConcurrency(const ServingRun& static_run) {
  std::map<int64_t, std::pair<double, int>> minutes;  // minute -> (sum in flight, samples)
  for (const TimelinePoint& p : static_run.timeline) {
    auto& m = minutes[static_cast<int64_t>(p.t_s / 60)];
    m.first += p.gpus > 0 ? static_cast<double>(p.in_flight) / p.gpus : 0;
    ++m.second;
  }
  double best = 0;
  for (const auto& [minute, m] : minutes) best = std::max(best, m.first / m.second);
  return std::max(best, 1.0);
}

StatusOr<ServingRun> RunServing(const ServingTrace& trace, const ServingConfig& config) {
  if (config.policy != "static") {
    const std::vector<std::string> names = fleet::AutoscalerNames();
    if (std::find(names.begin(), names.end(), config.policy) == names.end()) {
      return InvalidArgumentError("unknown autoscaling policy '" + config.policy +
                                  "' (known: hpa, kpa, aibrix, ours, static)");
    }
  }
  if (!(config.tick_s > 0)) return InvalidArgumentError("tick must be positive seconds, not " + std::to_string(config.tick_s));
  const ServingTrace& history = config.history_trace != nullptr ? *config.history_trace : trace;
  if (config.policy == "ours" && config.predictive && config.history_days > 0 && !history.requests.empty() &&
      history.requests.front().arrival_s < 0) {
    return InvalidArgumentError(fmt::format("history days need arrivals at 0 s or later; the trace's first is at {:.3f} s",
                                            history.requests.front().arrival_s));
  }
  if (config.policy == "ours" && config.predictive && config.history_days > 0 && !history.requests.empty() &&
      history.requests.back().arrival_s >= config.period_s) {
    return InvalidArgumentError(fmt::format(
        "history days repeat a {:.0f} s period, but the trace's last request arrives at {:.0f} s: a day "
        "of history would fold the trace onto itself; replay it without history",
        config.period_s, history.requests.back().arrival_s));
  }
  Replay replay(trace, config);
  return replay.Run();
}

int PeakProvisionedReplicas(const ServingTrace& trace, const ReplicaModel& model, double window_s,
                            double utilization) {
  const fleet::ReplicaCapacity cap = model.Capacity();
  if (trace.requests.empty() || window_s <= 0 || utilization <= 0 || cap.prefill_tokens_per_s <= 0 ||
      cap.decode_tokens_per_s <= 0) {
    return 0;
  }
  // Two pointers over arrivals (sorted): the work arriving in [t, t + window_s).
  double peak = 0, work = 0;
  size_t lo = 0, hi = 0;
  const std::vector<ServingRequest>& r = trace.requests;
  auto cost = [&](const ServingRequest& q) {
    return q.prompt_tokens / cap.prefill_tokens_per_s + q.output_tokens / cap.decode_tokens_per_s;
  };
  for (double t = r.front().arrival_s; t <= r.back().arrival_s; t += 10) {
    while (hi < r.size() && r[hi].arrival_s < t + window_s) work += cost(r[hi++]);
    while (lo < hi && r[lo].arrival_s < t) work -= cost(r[lo++]);
    peak = std::max(peak, work);
  }
  return std::max(1, static_cast<int>(std::ceil(peak / window_s / utilization)));
}

int SloPeakProvisionedReplicas(const ServingTrace& trace, const ReplicaModel& model, double slo_s,
                               double utilization, double max_window_s) {
  const fleet::ReplicaCapacity cap = model.Capacity();
  if (trace.requests.empty() || slo_s <= 0 || utilization <= 0 || cap.prefill_tokens_per_s <= 0 ||
      cap.decode_tokens_per_s <= 0) {
    return 0;
  }
  const std::vector<ServingRequest>& r = trace.requests;
  std::vector<double> cum(r.size() + 1, 0);  // work of requests [0, i)
  for (size_t i = 0; i < r.size(); ++i) {
    cum[i + 1] = cum[i] + r[i].prompt_tokens / cap.prefill_tokens_per_s + r[i].output_tokens / cap.decode_tokens_per_s;
  }
  double peak = 0;
  for (size_t i = 0; i < r.size(); ++i) {
    for (size_t j = i; j < r.size() && r[j].arrival_s - r[i].arrival_s <= max_window_s; ++j) {
      peak = std::max(peak, (cum[j + 1] - cum[i]) / (r[j].arrival_s - r[i].arrival_s + slo_s));
    }
  }
  return std::max(1, static_cast<int>(std::ceil(peak / utilization - 1e-9)));
}

StatusOr<ServingRun> RunStaticBaseline(const ServingTrace& trace, ServingConfig config, double target,
                                       int max_replicas) {
  config.policy = "static";
  config.static_replicas = max_replicas;
  StatusOr<ServingRun> best = RunServing(trace, config);
  if (!best.ok()) return best.status();
  if (best->slo_attainment < target) {
    return FailedPreconditionError(fmt::format("even {} static replicas reach only {:.2f}% TTFT-SLO attainment",
                                               max_replicas, best->slo_attainment * 100));
  }
  int lo = 1, hi = max_replicas;  // hi meets the target
  while (lo < hi) {
    const int mid = lo + (hi - lo) / 2;
    config.static_replicas = mid;
    StatusOr<ServingRun> run = RunServing(trace, config);
    if (!run.ok()) return run.status();
    if (run->slo_attainment >= target) {
      hi = mid;
      best = std::move(run);
    } else {
      lo = mid + 1;
    }
  }
  if (best->static_replicas != hi) {
    config.static_replicas = hi;
    best = RunServing(trace, config);
  }
  return best;
}

}  // namespace aicloud::sim
