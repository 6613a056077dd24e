#include "sched/scheduler.h"

#include <algorithm>
#include <limits>
#include <map>
#include <set>

#include "sched/placement.h"

namespace aicloud::sched {

struct Scheduler::Candidate {
  int32_t node = -1;
  int64_t raw[kMaxMemoScores] = {0, 0, 0};
  GpuPick pick;
};

struct Scheduler::MemoEntry {
  uint64_t version_plus_one = 0;  // 0 = empty
  bool feasible = false;
  Code code = Code::kSuccess;
  const char* reason = nullptr;
  int64_t raw[kMaxMemoScores] = {0, 0, 0};
  GpuPick pick;
};

namespace {
const std::vector<int64_t> kNoPods;
const ModelFacts kNoFacts;
constexpr size_t kMaxShapes = 4096;
}  // namespace

const ModelFacts& Scheduler::FactsOf(const cluster::Node& node) const {
  if (node.model < 0 || static_cast<size_t>(node.model) >= facts_.size()) return kNoFacts;
  return facts_[node.model];
}

std::string Scheduler::Validate(const PodRequest& p) {
  if (p.cpu_milli < 0 || p.mem_mib < 0) return "negative CPU or memory request";
  switch (p.gpu_kind) {
    case GpuKind::kNone:
      return "";
    case GpuKind::kWhole:
      if (p.gpu_count < 1 || p.gpu_count > 64) return "whole-GPU count must be 1..64";
      if (p.gpu_milli != cluster::kMilliPerGpu) return "whole GPUs take 1000 milli each";
      return "";
    case GpuKind::kFraction:
      if (p.gpu_count != 1) return "a fractional share is on exactly one GPU";
      if (p.gpu_milli < 1 || p.gpu_milli >= cluster::kMilliPerGpu) return "a fraction must be 1..999 milli";
      if (p.gpu_mem_mib < 0) return "negative GPU memory cap";
      return "";
    case GpuKind::kMig:
      if (p.gpu_count != 1 || p.mig_profile.empty()) return "a MIG request names one profile";
      return "";
  }
  return "unknown GPU request kind";
}

void Scheduler::PrepareCycle() {
  if (facts_.size() != cluster_->models().size()) RefreshModelFacts();
  if (pods_on_node_.size() < cluster_->nodes().size()) pods_on_node_.resize(cluster_->nodes().size());
}

void Scheduler::MaybeTrimChangeLog() {
  const auto& log = cluster_->change_log();
  const size_t n = cluster_->nodes().size();
  if (log.size() < 4 * n + 4096) return;
  // Shapes that fell more than a cluster's worth behind rebuild on next use anyway.
  const uint64_t end = cluster_->change_log_base() + log.size();
  uint64_t keep = end;
  for (ShapeIndex& idx : index_) {
    if (!idx.built) continue;
    if (end - idx.log_pos > n) {
      idx.built = false;
    } else {
      keep = std::min(keep, idx.log_pos);
    }
  }
  cluster_->TrimChangeLog(keep);
}

Scheduler::Scheduler(cluster::Cluster* cluster, Profile profile, SchedulerOptions options)
    : cluster_(cluster), profile_(std::move(profile)), options_(std::move(options)),
      rng_(options_.seed) {}

Scheduler::~Scheduler() = default;

StatusOr<std::unique_ptr<Scheduler>> Scheduler::Create(cluster::Cluster* cluster,
                                                       const Profile& profile,
                                                       const Registry& registry,
                                                       SchedulerOptions options) {
  std::unique_ptr<Scheduler> s(new Scheduler(cluster, profile, std::move(options)));
  AICLOUD_RETURN_IF_ERROR(s->Init(registry));
  return s;
}

void Scheduler::RefreshModelFacts() {
  facts_.clear();
  for (const std::string& name : cluster_->models()) {
    ModelFacts f;
    f.spec = cluster::FindGpuModel(name);
    f.mig = f.spec && f.spec->mig ? cluster::FindMigGeometry(f.spec->name) : nullptr;
    facts_.push_back(f);
  }
  pods_on_node_.resize(cluster_->nodes().size());
}

Status Scheduler::Init(const Registry& registry) {
  RefreshModelFacts();
  bool all_local = true;
  for (size_t i = 0; i < profile_.plugins.size(); ++i) {
    const PluginConfig& pc = profile_.plugins[i];
    PluginArgs args;
    args.handle = this;
    args.workload = &options_.workload;
    args.seed = options_.seed + i;
    args.params = pc.params;
    args.quotas = options_.quotas;
    StatusOr<std::unique_ptr<Plugin>> p = registry.Create(pc.name, args);
    if (!p.ok()) return p.status();
    Plugin* raw = p->get();
    bool used = false;
    if (auto* q = dynamic_cast<QueueSortPlugin*>(raw)) {
      if (queue_sort_ != nullptr) {
        return InvalidArgumentError("profile " + profile_.name +
                                    ": more than one queue-sort plugin (" + pc.name + ")");
      }
      queue_sort_ = q;
      used = true;
    }
    if (auto* x = dynamic_cast<PreFilterPlugin*>(raw)) pre_filters_.push_back(x), used = true;
    if (auto* x = dynamic_cast<FilterPlugin*>(raw)) {
      filters_.push_back(x);
      used = true;
      all_local = all_local && raw->NodeLocal();
    }
    if (auto* x = dynamic_cast<PostFilterPlugin*>(raw)) post_filters_.push_back(x), used = true;
    if (auto* x = dynamic_cast<ScorePlugin*>(raw)) {
      if (scores_.size() >= static_cast<size_t>(kMaxMemoScores)) {
        return InvalidArgumentError("profile " + profile_.name + ": at most " +
                                    std::to_string(kMaxMemoScores) + " score plugins (" + pc.name +
                                    " is one too many)");
      }
      if (pc.weight <= 0) {
        return InvalidArgumentError("profile " + profile_.name + ": plugin " + pc.name +
                                    ": weight must be positive");
      }
      scores_.push_back(x);
      score_weights_.push_back(pc.weight);
      any_normalize_ = any_normalize_ || x->Normalizes();
      all_local = all_local && raw->NodeLocal();
      used = true;
    }
    if (auto* x = dynamic_cast<ReservePlugin*>(raw)) reserves_.push_back(x), used = true;
    if (auto* x = dynamic_cast<PermitPlugin*>(raw)) permits_.push_back(x), used = true;
    if (auto* x = dynamic_cast<BindPlugin*>(raw)) binds_.push_back(x), used = true;
    if (!used) return InternalError("plugin " + pc.name + " implements no extension point");
    plugins_.push_back(std::move(*p));
  }
  memo_enabled_ = options_.memoize && all_local &&
                  scores_.size() <= static_cast<size_t>(kMaxMemoScores);
  return OkStatus();
}

bool Scheduler::QueueLess(const QueuedPod& a, const QueuedPod& b) const {
  if (queue_sort_ != nullptr) return queue_sort_->Less(a, b);
  return a.enqueue_seq < b.enqueue_seq;
}

int32_t Scheduler::InternShape(const PodRequest& p) {
  // Every field a filter or score may read, so equal keys get equal answers.
  std::string key;
  key.reserve(96);
  auto add = [&key](int64_t v) {
    key += std::to_string(v);
    key += ',';
  };
  add(p.cpu_milli);
  add(p.mem_mib);
  add(static_cast<int>(p.gpu_kind));
  add(p.gpu_count);
  add(p.gpu_milli);
  add(p.gpu_mem_mib);
  add(static_cast<int>(p.topology));
  add(p.priority);
  key += p.mig_profile;
  key += '|';
  for (cluster::ModelId m : p.gpu_models) add(m);
  key += '|';
  key += p.pool;
  key += '|';
  for (const Toleration& t : p.tolerations) {
    key += t.key + '=' + (t.op_exists ? std::string("*") : t.value) + ':' + t.effect + ';';
  }
  if (shape_index_.size() >= kMaxShapes) {
    // A bounded cache: start over rather than grow without limit on an endless variety of
    // request shapes.
    shape_index_.clear();
    memo_.clear();
    index_.clear();
  }
  auto [it, inserted] = shape_index_.emplace(std::move(key), static_cast<int32_t>(shape_index_.size()));
  if (inserted && memo_enabled_) {
    memo_.emplace_back();
    index_.emplace_back();
  }
  return it->second;
}

bool Scheduler::Evaluate(CycleState& state, const PodRequest& pod, const cluster::Node& node,
                         Candidate* out, const char** reason, Code* code) {
  MemoEntry* memo = nullptr;
  if (memo_enabled_) {
    std::vector<MemoEntry>& row = memo_[pod.shape];
    if (row.size() < cluster_->nodes().size()) row.resize(cluster_->nodes().size());
    memo = &row[node.id];
    if (memo->version_plus_one == node.version + 1) {
      if (!memo->feasible) {
        *reason = memo->reason;
        *code = memo->code;
        return false;
      }
      out->node = node.id;
      std::copy(memo->raw, memo->raw + kMaxMemoScores, out->raw);
      out->pick = memo->pick;
      return true;
    }
  }
  for (const FilterPlugin* f : filters_) {
    PluginStatus st = f->Filter(state, pod, node);
    if (!st.ok()) {
      *reason = st.reason != nullptr ? st.reason : "rejected";
      *code = st.code;
      if (memo != nullptr) {
        memo->version_plus_one = node.version + 1;
        memo->feasible = false;
        memo->reason = *reason;
        memo->code = *code;
      }
      return false;
    }
  }
  out->node = node.id;
  out->pick = GpuPick{};
  for (size_t j = 0; j < scores_.size(); ++j) {
    GpuPick pick;
    int64_t s = scores_[j]->Score(state, pod, node, &pick);
    if (j < static_cast<size_t>(kMaxMemoScores)) out->raw[j] = s;
    if (out->pick.empty() && !pick.empty()) out->pick = pick;
  }
  if (out->pick.empty() && pod.wants_gpu()) {
    out->pick = DefaultPick(pod, node, FactsOf(node));
  }
  if (memo != nullptr) {
    memo->version_plus_one = node.version + 1;
    memo->feasible = true;
    std::copy(out->raw, out->raw + kMaxMemoScores, memo->raw);
    memo->pick = out->pick;
  }
  return true;
}

std::string Scheduler::Unavailable(size_t nodes,
                                   const std::vector<std::pair<const char*, int>>& counts) {
  std::map<std::string_view, int> merged;
  for (const auto& [r, n] : counts) {
    if (n > 0) merged[r] += n;
  }
  std::vector<std::pair<int, std::string_view>> sorted;
  for (const auto& [r, n] : merged) sorted.emplace_back(n, r);
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  std::string out = "0/" + std::to_string(nodes) + " nodes available";
  for (size_t i = 0; i < sorted.size(); ++i) {
    out += (i == 0 ? ": " : ", ") + std::to_string(sorted[i].first) + " " +
           std::string(sorted[i].second);
  }
  return out;
}

bool Scheduler::IndexedBest(CycleState& state, const PodRequest& pod, Candidate* best,
                            bool* none_fit, std::string* reason) {
  *none_fit = false;
  if (!memo_enabled_ || any_normalize_) return false;
  ShapeIndex& idx = index_[pod.shape];
  const auto& nodes = cluster_->nodes();
  const auto& log = cluster_->change_log();
  const uint64_t base = cluster_->change_log_base();
  const uint64_t end = base + log.size();
  auto total_of = [&](const Candidate& c) {
    int64_t t = 0;
    for (size_t j = 0; j < scores_.size(); ++j) t += c.raw[j] * score_weights_[j];
    return t;
  };
  auto count = [&](const char* why, int delta) {
    if (why == nullptr) return;
    for (auto& [r, n] : idx.reason_counts) {
      if (r == why) {
        n += delta;
        return;
      }
    }
    idx.reason_counts.emplace_back(why, delta);
  };
  bool bulk = false;  // during a rebuild leaves are loaded first and the tree built once
  auto refresh = [&](int32_t id) {
    Candidate c;
    const char* why = nullptr;
    Code code = Code::kSuccess;
    const bool ok = Evaluate(state, pod, nodes[id], &c, &why, &code);
    if (bulk) {
      idx.tree.SetLeaf(id, ok ? total_of(c) : MaxTree::kNone);
    } else {
      idx.tree.Set(id, ok ? total_of(c) : MaxTree::kNone);
    }
    count(idx.reason_of[id], -1);
    idx.reason_of[id] = ok ? nullptr : why;
    count(idx.reason_of[id], +1);
  };
  // Behind by more than a cluster's worth of changes: one pass over every node is cheaper.
  if (!idx.built || idx.tree.size() != nodes.size() || idx.log_pos < base ||
      end - idx.log_pos > nodes.size()) {
    idx.tree.Reset(nodes.size());
    idx.reason_of.assign(nodes.size(), nullptr);
    idx.reason_counts.clear();
    bulk = true;
    for (const cluster::Node& n : nodes) refresh(n.id);
    bulk = false;
    idx.tree.Build();
    idx.built = true;
  } else {
    for (uint64_t pos = idx.log_pos; pos < end; ++pos) refresh(log[pos - base]);
  }
  idx.log_pos = end;
  if (idx.tree.empty()) {
    *none_fit = true;
    *reason = Unavailable(nodes.size(), idx.reason_counts);
    return false;
  }
  const size_t id = options_.tie_break == SchedulerOptions::TieBreak::kFirst
                        ? idx.tree.First()
                        : idx.tree.Nth(static_cast<int64_t>(rng_.Uniform(idx.tree.ties())));
  const char* why = nullptr;
  Code code = Code::kSuccess;
  return Evaluate(state, pod, nodes[id], best, &why, &code);
}

PluginStatus Scheduler::RunFilters(CycleState& state, const PodRequest& pod,
                                   const cluster::Node& node) {
  for (const FilterPlugin* f : filters_) {
    PluginStatus st = f->Filter(state, pod, node);
    if (!st.ok()) return st;
  }
  return PluginStatus::Ok();
}

ScheduleResult Scheduler::Cycle(CycleState& state, PodRequest& pod,
                                const std::vector<int32_t>* restrict_nodes,
                                bool allow_preemption) {
  ScheduleResult result;
  // 1. Pre-filter: checks on the request as a whole (quota).
  for (PreFilterPlugin* p : pre_filters_) {
    PluginStatus st = p->PreFilter(state, pod);
    if (!st.ok()) {
      result.code = st.code;
      result.reason = std::string(p->Name()) + ": " + (st.reason ? st.reason : "") +
                      (st.detail.empty() ? "" : (st.reason ? ": " : "") + st.detail);
      // As kube-scheduler does: a pre-filter "does not fit" (e.g. a queue whose quota is lent
      // out) marks every node unschedulable and still lets post-filters (reclaim) try.
      if (st.code != Code::kUnschedulable || !allow_preemption || post_filters_.empty()) {
        return result;
      }
      FilterSummary all;
      const size_t n = restrict_nodes ? restrict_nodes->size() : cluster_->nodes().size();
      for (size_t k = 0; k < n; ++k) {
        all.rejected.emplace_back(restrict_nodes ? (*restrict_nodes)[k] : static_cast<int32_t>(k),
                                  Code::kUnschedulable);
      }
      return PostFilterAndRetry(state, pod, all, std::move(result));
    }
  }
  // 2. Filter and score. Fast path: the shape's index already knows the best node.
  if (restrict_nodes == nullptr) {
    Candidate best;
    bool none_fit = false;
    std::string why;
    if (IndexedBest(state, pod, &best, &none_fit, &why)) {
      const cluster::Node& node = cluster_->nodes()[best.node];
      result.placed = true;
      result.node = best.node;
      result.alloc = MakeAllocation(pod, node, best.pick, FactsOf(node));
      return result;
    }
    // Nothing fits and no post-filter could change that: the index already knows why.
    if (none_fit && (post_filters_.empty() || !allow_preemption)) {
      result.code = Code::kUnschedulable;
      result.reason = std::move(why);
      return result;
    }
  }
  // Full scan: every candidate node, filtered and scored in the same pass.
  candidates_.clear();
  // Reasons are static strings: count them by pointer, merge equal texts when reporting.
  std::vector<std::pair<const char*, int>> reasons;
  FilterSummary summary;
  const auto& nodes = cluster_->nodes();
  const size_t n_nodes = restrict_nodes ? restrict_nodes->size() : nodes.size();
  for (size_t k = 0; k < n_nodes; ++k) {
    const cluster::Node& node = nodes[restrict_nodes ? (*restrict_nodes)[k] : k];
    Candidate c;
    const char* why = nullptr;
    Code code = Code::kSuccess;
    if (Evaluate(state, pod, node, &c, &why, &code)) {
      candidates_.push_back(c);
    } else {
      auto it = std::find_if(reasons.begin(), reasons.end(),
                             [why](const auto& r) { return r.first == why; });
      if (it == reasons.end()) {
        reasons.emplace_back(why, 1);
      } else {
        ++it->second;
      }
      if (!post_filters_.empty()) summary.rejected.emplace_back(node.id, code);
    }
  }
  // 3. Post-filter (preemption) when nothing fits.
  if (candidates_.empty()) {
    result.code = Code::kUnschedulable;
    result.reason = Unavailable(n_nodes, reasons);
    if (!allow_preemption) return result;
    return PostFilterAndRetry(state, pod, summary, std::move(result));
  }
  // 4. Normalize and weight the scores, then pick the best node; ties broken at random
  //    (reservoir sampling, as kube-scheduler's selectHost does).
  std::vector<int64_t> totals(candidates_.size(), 0);
  if (any_normalize_) {
    std::vector<int64_t> col(candidates_.size());
    for (size_t j = 0; j < scores_.size() && j < static_cast<size_t>(kMaxMemoScores); ++j) {
      for (size_t i = 0; i < candidates_.size(); ++i) col[i] = candidates_[i].raw[j];
      if (scores_[j]->Normalizes()) scores_[j]->Normalize(col);
      for (size_t i = 0; i < candidates_.size(); ++i) totals[i] += col[i] * score_weights_[j];
    }
  } else {
    for (size_t i = 0; i < candidates_.size(); ++i) {
      for (size_t j = 0; j < scores_.size() && j < static_cast<size_t>(kMaxMemoScores); ++j) {
        totals[i] += candidates_[i].raw[j] * score_weights_[j];
      }
    }
  }
  size_t best = 0;
  uint64_t ties = 1;
  for (size_t i = 1; i < candidates_.size(); ++i) {
    if (totals[i] > totals[best]) {
      best = i;
      ties = 1;
    } else if (totals[i] == totals[best] &&
               options_.tie_break == SchedulerOptions::TieBreak::kRandom) {
      ++ties;
      if (rng_.Uniform(ties) == 0) best = i;
    }
  }
  const Candidate& chosen = candidates_[best];
  const cluster::Node& node = nodes[chosen.node];
  result.placed = true;
  result.node = chosen.node;
  result.alloc = MakeAllocation(pod, node, chosen.pick, FactsOf(node));
  return result;
}

ScheduleResult Scheduler::PostFilterAndRetry(CycleState& state, PodRequest& pod,
                                             const FilterSummary& summary,
                                             ScheduleResult unschedulable) {
  for (PostFilterPlugin* p : post_filters_) {
    PostFilterResult pf = p->PostFilter(state, pod, summary);
    if (!pf.status.ok() || pf.nominated_node < 0) continue;
    // Victims leave whole gangs at a time. Take them off the node first and commit the
    // eviction only if the pod then really fits; otherwise everything goes back.
    std::vector<int64_t> victims;
    for (int64_t v : pf.victims) {
      const Placed* pl = placed(v);
      if (pl == nullptr) continue;
      std::vector<int64_t> unit = pl->pod.gang.name.empty() ? std::vector<int64_t>{v}
                                                            : gang_members(pl->pod.gang.name);
      for (int64_t u : unit) {
        if (std::find(victims.begin(), victims.end(), u) == victims.end()) victims.push_back(u);
      }
    }
    // Suspended victims also give back what reserve plugins accounted (quota), as a real
    // eviction would, so the retry sees the room they leave.
    for (int64_t v : victims) {
      SuspendPod(v);
      const Placed* pl = placed(v);
      for (ReservePlugin* rp : reserves_) rp->Unreserve(state, pl->pod, pl->alloc);
    }
    std::vector<int32_t> only{pf.nominated_node};
    ScheduleResult retry = Cycle(state, pod, &only, false);
    if (!retry.placed) {
      for (int64_t v : victims) {
        ResumePod(v);
        const Placed* pl = placed(v);
        for (ReservePlugin* rp : reserves_) (void)rp->Reserve(state, pl->pod, pl->alloc);
      }
      continue;
    }
    // Commit: forget the victims without refunding a second time.
    for (int64_t v : victims) {
      const Placed* pl = placed(v);
      for (ReservePlugin* rp : reserves_) (void)rp->Reserve(state, pl->pod, pl->alloc);
    }
    for (int64_t v : victims) {
      if (Remove(v).ok()) retry.preempted.push_back(v);
    }
    return retry;
  }
  return unschedulable;
}

Status Scheduler::Bind(PodRequest& pod, const cluster::Allocation& alloc, CycleState& state) {
  for (BindPlugin* b : binds_) {
    PluginStatus st = b->Bind(pod, alloc);
    if (!st.ok()) return InternalError("bind " + std::string(b->Name()) + ": " + st.detail);
  }
  (void)state;
  pods_on_node_[alloc.node].push_back(pod.uid);
  if (!pod.gang.name.empty()) gangs_[pod.gang.name].push_back(pod.uid);
  placed_.emplace(pod.uid, Placed{pod, alloc});
  return OkStatus();
}

ScheduleResult Scheduler::ScheduleOne(PodRequest pod) {
  if (pod.uid < 0 || pod.uid == std::numeric_limits<int64_t>::max()) {
    ScheduleResult r;
    r.code = Code::kError;
    r.reason = "pod uid " + std::to_string(pod.uid) + " is out of range";
    return r;
  }
  if (pod.uid == 0) pod.uid = next_uid_++;
  next_uid_ = std::max(next_uid_, pod.uid + 1);
  PrepareCycle();
  if (placed_.count(pod.uid)) {
    ScheduleResult r;
    r.code = Code::kError;
    r.reason = "pod uid " + std::to_string(pod.uid) + " is already placed";
    return r;
  }
  if (std::string bad = Validate(pod); !bad.empty()) {
    ScheduleResult r;
    r.code = Code::kUnresolvable;
    r.reason = "invalid request " + pod.name + ": " + bad;
    return r;
  }
  pod.shape = InternShape(pod);
  CycleState state(&rng_);
  ScheduleResult r = Cycle(state, pod, nullptr, true);
  if (!r.placed) return r;
  // 5. Reserve: assume the placement in the cluster, then let reserve plugins account for it.
  Status st = cluster_->Allocate(r.alloc);
  if (!st.ok()) {
    r.placed = false;
    r.code = Code::kError;
    r.reason = "reserve: " + st.message();
    return r;
  }
  for (size_t i = 0; i < reserves_.size(); ++i) {
    PluginStatus rs = reserves_[i]->Reserve(state, pod, r.alloc);
    if (!rs.ok()) {
      for (size_t j = 0; j < i; ++j) reserves_[j]->Unreserve(state, pod, r.alloc);
      cluster_->Release(r.alloc);
      r.placed = false;
      r.code = rs.code;
      r.reason = std::string(reserves_[i]->Name()) + ": " + (rs.reason ? rs.reason : "") + rs.detail;
      return r;
    }
  }
  // 6. Permit: a lone pod never waits.
  for (PermitPlugin* p : permits_) {
    PluginStatus ps = p->Permit(state, pod);
    if (ps.code != Code::kSuccess && ps.code != Code::kWait) {
      for (ReservePlugin* rp : reserves_) rp->Unreserve(state, pod, r.alloc);
      cluster_->Release(r.alloc);
      r.placed = false;
      r.code = ps.code;
      r.reason = std::string(p->Name()) + ": " + (ps.reason ? ps.reason : "") + ps.detail;
      return r;
    }
  }
  // 7. Bind.
  st = Bind(pod, r.alloc, state);
  if (!st.ok()) {
    for (ReservePlugin* rp : reserves_) rp->Unreserve(state, pod, r.alloc);
    cluster_->Release(r.alloc);
    r.placed = false;
    r.code = Code::kError;
    r.reason = st.message();
  }
  MaybeTrimChangeLog();
  return r;
}

GangResult Scheduler::ScheduleGang(std::vector<PodRequest> members) {
  GangResult g;
  if (members.empty()) {
    g.reason = "gang has no members";
    return g;
  }
  PrepareCycle();
  const std::string gang = members[0].gang.name;
  if (gang.empty() || gangs_.count(gang)) {
    g.reason = gang.empty() ? "gang has no name" : "gang " + gang + " already has placed members";
    return g;
  }
  const int min_available = std::max(1, std::min<int>(members[0].gang.min_available,
                                                      static_cast<int>(members.size())));
  const Topology topo = members[0].topology;
  std::set<int64_t> uids;
  for (PodRequest& m : members) {
    if (m.uid == 0) m.uid = next_uid_++;
    next_uid_ = std::max(next_uid_, m.uid + 1);
    if (std::string bad = Validate(m); !bad.empty()) {
      g.reason = "gang " + gang + ": invalid request " + m.name + ": " + bad;
      return g;
    }
    if (m.uid < 0 || m.uid == std::numeric_limits<int64_t>::max() || placed_.count(m.uid) ||
        !uids.insert(m.uid).second) {
      g.reason = "gang " + gang + ": pod uid " + std::to_string(m.uid) +
                 " is already placed or named twice";
      return g;
    }
    m.gang.name = gang;
    m.shape = InternShape(m);
  }
  // Candidate domains: the whole cluster, or one rack / NVLink domain / node at a time,
  // fullest first so a gang does not break open an empty domain it does not need.
  std::vector<std::vector<int32_t>> domains;
  const auto& nodes = cluster_->nodes();
  if (topo == Topology::kRack || topo == Topology::kNvlink ||
      (topo == Topology::kNode && members.size() > 1)) {
    std::map<int64_t, std::vector<int32_t>> by_key;
    for (const cluster::Node& n : nodes) {
      int64_t key = n.id;
      if (topo == Topology::kRack) key = n.rack;
      if (topo == Topology::kNvlink) key = n.gpus.empty() ? -1 : n.gpus[0].nvlink_domain;
      if (key < 0) continue;
      by_key[key].push_back(n.id);
    }
    std::vector<std::pair<int64_t, std::vector<int32_t>>> sorted;
    for (auto& [k, v] : by_key) {
      int64_t free = 0;
      for (int32_t id : v) free += nodes[id].gpu_free_milli_total();
      sorted.emplace_back(free, std::move(v));
    }
    std::stable_sort(sorted.begin(), sorted.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    // A rough pre-check on whole and fractional GPU demand; MIG members are left to the
    // filters (a partitioned GPU shows no free milli).
    int64_t need = 0;
    for (int k = 0; k < min_available; ++k) {
      if (members[k].gpu_kind != GpuKind::kMig) need += members[k].total_gpu_milli();
    }
    for (auto& [free, v] : sorted) {
      if (free >= need) domains.push_back(std::move(v));
    }
    if (domains.empty()) {
      g.reason = "gang " + gang + ": no " +
                 (topo == Topology::kRack ? std::string("rack") :
                  topo == Topology::kNvlink ? std::string("NVLink domain") : std::string("node")) +
                 " has room for " + std::to_string(min_available) + " workers";
      return g;
    }
  } else {
    domains.emplace_back();  // empty = every node
  }
  std::string last_reason;
  for (const std::vector<int32_t>& domain : domains) {
    CycleState state(&rng_);
    std::vector<ScheduleResult> reserved;
    size_t i = 0;
    for (; i < members.size(); ++i) {
      PodRequest& m = members[i];
      ScheduleResult r = Cycle(state, m, domain.empty() ? nullptr : &domain, false);
      if (!r.placed) {
        last_reason = r.reason;
        break;
      }
      if (Status st = cluster_->Allocate(r.alloc); !st.ok()) {
        last_reason = "reserve: " + st.message();
        break;
      }
      bool reserve_ok = true;
      for (size_t k = 0; k < reserves_.size(); ++k) {
        PluginStatus rs = reserves_[k]->Reserve(state, m, r.alloc);
        if (!rs.ok()) {
          for (size_t j = 0; j < k; ++j) reserves_[j]->Unreserve(state, m, r.alloc);
          cluster_->Release(r.alloc);
          last_reason = std::string(reserves_[k]->Name()) + ": " + (rs.reason ? rs.reason : "") + rs.detail;
          reserve_ok = false;
          break;
        }
      }
      if (!reserve_ok) break;
      reserved.push_back(std::move(r));
    }
    const int got = static_cast<int>(reserved.size());
    if (got >= min_available) {
      // Permit: every waiting member is released together.
      bool permitted = true;
      for (PermitPlugin* p : permits_) {
        for (size_t k = 0; k < reserved.size(); ++k) {
          PluginStatus ps = p->Permit(state, members[k]);
          if (ps.code != Code::kSuccess && ps.code != Code::kWait) {
            permitted = false;
            last_reason = std::string(p->Name()) + ": " + (ps.reason ? ps.reason : "") + ps.detail;
          }
        }
      }
      if (permitted) {
        size_t bound = 0;
        for (; bound < reserved.size(); ++bound) {
          Status st = Bind(members[bound], reserved[bound].alloc, state);
          if (!st.ok()) {
            last_reason = st.message();
            break;
          }
        }
        if (bound == reserved.size()) {
          g.placed = true;
          g.members = std::move(reserved);
          return g;
        }
        // A bind failed: all or nothing still holds. Bound members are removed (returning
        // their resources and quota), the rest unreserved, and the gang fails.
        for (size_t k = 0; k < bound; ++k) (void)Remove(members[k].uid);
        for (size_t k = bound; k < reserved.size(); ++k) {
          for (ReservePlugin* rp : reserves_) rp->Unreserve(state, members[k], reserved[k].alloc);
          cluster_->Release(reserved[k].alloc);
        }
        g.reason = "gang " + gang + ": bind failed: " + last_reason;
        return g;
      }
    }
    // Unreserve everything this attempt held: all-or-nothing.
    for (size_t k = reserved.size(); k-- > 0;) {
      for (ReservePlugin* rp : reserves_) rp->Unreserve(state, members[k], reserved[k].alloc);
      cluster_->Release(reserved[k].alloc);
    }
    if (last_reason.empty()) last_reason = "permit rejected";
  }
  g.reason = "gang " + gang + ": " + std::to_string(min_available) + " of " +
             std::to_string(members.size()) + " workers needed together; " + last_reason;
  return g;
}

Status Scheduler::Adopt(PodRequest pod, const cluster::Allocation& alloc) {
  if (pod.uid <= 0 || placed_.count(pod.uid)) {
    return InvalidArgumentError("adopt " + pod.name + ": uid " + std::to_string(pod.uid) +
                                " is invalid or already placed");
  }
  next_uid_ = std::max(next_uid_, pod.uid + 1);
  PrepareCycle();
  pod.shape = InternShape(pod);
  AICLOUD_RETURN_IF_ERROR(cluster_->Allocate(alloc));
  CycleState state(&rng_);
  for (size_t i = 0; i < reserves_.size(); ++i) {
    PluginStatus rs = reserves_[i]->Reserve(state, pod, alloc);
    if (!rs.ok()) {
      for (size_t j = 0; j < i; ++j) reserves_[j]->Unreserve(state, pod, alloc);
      cluster_->Release(alloc);
      return FailedPreconditionError("adopt " + pod.name + ": " + std::string(reserves_[i]->Name()) + ": " +
                                     (rs.reason ? rs.reason : "") + rs.detail);
    }
  }
  pods_on_node_[alloc.node].push_back(pod.uid);
  if (!pod.gang.name.empty()) gangs_[pod.gang.name].push_back(pod.uid);
  placed_.emplace(pod.uid, Placed{std::move(pod), alloc});
  return OkStatus();
}

Status Scheduler::Remove(int64_t uid) {
  auto it = placed_.find(uid);
  if (it == placed_.end()) return NotFoundError("pod uid " + std::to_string(uid) + " is not placed");
  if (!suspended_.count(uid)) cluster_->Release(it->second.alloc);
  suspended_.erase(uid);
  CycleState state(&rng_);
  for (ReservePlugin* rp : reserves_) rp->Unreserve(state, it->second.pod, it->second.alloc);
  std::vector<int64_t>& on = pods_on_node_[it->second.alloc.node];
  on.erase(std::remove(on.begin(), on.end(), uid), on.end());
  if (!it->second.pod.gang.name.empty()) {
    auto g = gangs_.find(it->second.pod.gang.name);
    if (g != gangs_.end()) {
      g->second.erase(std::remove(g->second.begin(), g->second.end(), uid), g->second.end());
      if (g->second.empty()) gangs_.erase(g);
    }
  }
  placed_.erase(it);
  return OkStatus();
}

void Scheduler::Evict(int64_t uid, std::vector<int64_t>* evicted) {
  const Placed* p = placed(uid);
  if (p == nullptr) return;
  // Never half a gang: evicting one worker evicts all of them.
  if (!p->pod.gang.name.empty()) {
    for (int64_t m : gang_members(p->pod.gang.name)) {
      if (Remove(m).ok()) evicted->push_back(m);
    }
    return;
  }
  if (Remove(uid).ok()) evicted->push_back(uid);
}

const std::vector<int64_t>& Scheduler::pods_on_node(int32_t node) const {
  if (node < 0 || static_cast<size_t>(node) >= pods_on_node_.size()) return kNoPods;
  return pods_on_node_[node];
}

const Placed* Scheduler::placed(int64_t uid) const {
  auto it = placed_.find(uid);
  return it == placed_.end() ? nullptr : &it->second;
}

std::vector<int64_t> Scheduler::gang_members(const std::string& gang) const {
  auto it = gangs_.find(gang);
  return it == gangs_.end() ? std::vector<int64_t>{} : it->second;
}

void Scheduler::SuspendPod(int64_t uid) {
  auto it = placed_.find(uid);
  if (it == placed_.end() || suspended_.count(uid)) return;
  cluster_->Release(it->second.alloc);
  suspended_[uid] = true;
}

void Scheduler::ResumePod(int64_t uid) {
  auto it = placed_.find(uid);
  if (it == placed_.end() || !suspended_.count(uid)) return;
  // Puts back exactly what SuspendPod took, without admission checks: a budget lowered in the
  // meantime must not turn an undo into a failure.
  cluster_->Restore(it->second.alloc);
  suspended_.erase(uid);
}

}  // namespace aicloud::sched
