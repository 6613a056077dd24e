// Scheduler: runs one scheduling cycle per pending unit (a pod, or a whole gang) through the
// framework's extension points and binds the result into the Cluster it was given.
//
// The same Scheduler runs inside the server and inside the simulator; only the clock and the
// executor around it differ.
//
// Thread-compatible: one thread drives a Scheduler and its Cluster.
//
//   auto s = Scheduler::Create(&cluster, PolicyProfile("fgd").value(), Registry::BuiltIn(), opts);
//   ScheduleResult r = (*s)->ScheduleOne(pod);
//   if (!r.placed) std::cout << r.reason;  // "0/1213 nodes available: 800 insufficient GPU ..."
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "cluster/cluster.h"
#include "core/rng.h"
#include "core/status.h"
#include "sched/framework.h"
#include "sched/max_tree.h"
#include "sched/profile.h"
#include "sched/registry.h"
#include "sched/workload.h"

namespace aicloud::sched {

struct SchedulerOptions {
  uint64_t seed = 42;
  // Expected task shapes (FGD and others measure fragmentation against it). May be empty.
  TargetWorkload workload;
  // Memoise filter and score answers per (request shape, node version) when every enabled
  // filter and score plugin is node-local. Off only for tests that compare both paths.
  bool memoize = true;
  // How equal best scores are broken: uniformly at random (kube-scheduler's selectHost), or
  // the first node in cluster order (a deterministic, packing tie-break).
  enum class TieBreak { kRandom, kFirst };
  TieBreak tie_break = TieBreak::kRandom;
  // Tenant queues for the quota and preemption plugins; may be null. Must outlive the scheduler.
  QuotaManager* quotas = nullptr;
};

struct ScheduleResult {
  bool placed = false;
  Code code = Code::kSuccess;
  int32_t node = -1;
  cluster::Allocation alloc;
  std::string reason;               // why not placed, Kubernetes-style
  std::vector<int64_t> preempted;   // uids evicted to make room
};

struct GangResult {
  bool placed = false;
  std::vector<ScheduleResult> members;
  std::string reason;
  std::vector<int64_t> preempted;
};

class Scheduler final : public Handle {
 public:
  // `cluster` must outlive the scheduler.
  static StatusOr<std::unique_ptr<Scheduler>> Create(cluster::Cluster* cluster,
                                                     const Profile& profile,
                                                     const Registry& registry,
                                                     SchedulerOptions options);
  ~Scheduler() override;

  // Places one pod (not a gang member) and binds it. `pod.uid` must be unique among placed pods;
  // 0 asks the scheduler to assign one.
  ScheduleResult ScheduleOne(PodRequest pod);
  // Places all workers of a gang or none of them (all-or-nothing at min_available).
  GangResult ScheduleGang(std::vector<PodRequest> members);
  // Takes back a placement decided earlier (e.g. read from the store after a server restart):
  // allocates exactly `alloc` and runs the reserve plugins, without filters or scores.
  // INVALID_ARGUMENT if the uid is taken; the cluster's error if `alloc` no longer fits.
  Status Adopt(PodRequest pod, const cluster::Allocation& alloc);
  // Removes a placed pod (departure, cancel, eviction) and returns its resources.
  Status Remove(int64_t uid);

  // Queue order by the profile's queue-sort plugin (arrival order when it has none).
  bool QueueLess(const QueuedPod& a, const QueuedPod& b) const;

  // Handle.
  const cluster::Cluster& cluster() const override { return *cluster_; }
  const std::vector<ModelFacts>& model_facts() const override { return facts_; }
  const std::vector<int64_t>& pods_on_node(int32_t node) const override;
  const Placed* placed(int64_t uid) const override;
  std::vector<int64_t> gang_members(const std::string& gang) const override;
  PluginStatus RunFilters(CycleState& state, const PodRequest& pod,
                          const cluster::Node& node) override;
  void SuspendPod(int64_t uid) override;
  void ResumePod(int64_t uid) override;

  size_t placed_count() const { return placed_.size(); }
  const Profile& profile() const { return profile_; }
  bool memoized() const { return memo_enabled_; }
  // Refreshes per-model facts after models were added to the cluster.
  void RefreshModelFacts();

 private:
  struct Candidate;
  struct MemoEntry;
  static constexpr int kMaxMemoScores = 3;

  Scheduler(cluster::Cluster* cluster, Profile profile, SchedulerOptions options);
  Status Init(const Registry& registry);

  int32_t InternShape(const PodRequest& pod);
  // Facts of a node's GPU model; empty facts for CPU-only nodes and unknown models.
  const ModelFacts& FactsOf(const cluster::Node& node) const;
  // Empty when the request is well-formed, else what is wrong with it.
  static std::string Validate(const PodRequest& pod);
  // Catches up with models and nodes added to the cluster since the last cycle.
  void PrepareCycle();
  // Drops change-log entries every shape index has consumed.
  void MaybeTrimChangeLog();
  // The indexed fast path: the best node for `pod` from its shape's MaxTree, re-scoring only
  // the nodes that changed since. False when it does not apply or no node is feasible (the full
  // scan then runs and explains why).
  // *none_fit is set when the index proves no node is feasible (then *reason explains why).
  bool IndexedBest(CycleState& state, const PodRequest& pod, Candidate* best, bool* none_fit,
                   std::string* reason);
  // Filters and scores one node; true when feasible.
  bool Evaluate(CycleState& state, const PodRequest& pod, const cluster::Node& node,
                Candidate* out, const char** reason, Code* code);
  // Picks the best feasible node; -1 when none. `restrict_nodes` (optional) limits the search.
  ScheduleResult Cycle(CycleState& state, PodRequest& pod, const std::vector<int32_t>* restrict_nodes,
                       bool allow_preemption);
  // Runs post-filter plugins (preemption); on a nomination evicts the victims and retries on
  // that node only. Returns `unschedulable` when no plugin nominates.
  ScheduleResult PostFilterAndRetry(CycleState& state, PodRequest& pod,
                                    const FilterSummary& summary, ScheduleResult unschedulable);
  Status Bind(PodRequest& pod, const cluster::Allocation& alloc, CycleState& state);
  void Evict(int64_t uid, std::vector<int64_t>* evicted);

  cluster::Cluster* cluster_;
  Profile profile_;
  SchedulerOptions options_;
  Rng rng_;
  std::vector<ModelFacts> facts_;

  std::vector<std::unique_ptr<Plugin>> plugins_;  // profile order
  const QueueSortPlugin* queue_sort_ = nullptr;
  std::vector<PreFilterPlugin*> pre_filters_;
  std::vector<const FilterPlugin*> filters_;
  std::vector<PostFilterPlugin*> post_filters_;
  std::vector<ScorePlugin*> scores_;
  std::vector<int64_t> score_weights_;
  std::vector<ReservePlugin*> reserves_;
  std::vector<PermitPlugin*> permits_;
  std::vector<BindPlugin*> binds_;
  bool any_normalize_ = false;
  bool memo_enabled_ = false;

  std::unordered_map<std::string, int32_t> shape_index_;
  std::vector<std::vector<MemoEntry>> memo_;  // [shape][node]
  struct ShapeIndex {
    bool built = false;
    uint64_t log_pos = 0;  // cluster change log consumed up to here (absolute)
    MaxTree tree;          // total weighted score per node
    // Why each node is infeasible (nullptr = feasible) and how many nodes give each reason, so
    // an unschedulable answer needs no scan either.
    std::vector<const char*> reason_of;
    std::vector<std::pair<const char*, int>> reason_counts;
  };
  // Kubernetes-style "0/N nodes available: ..." from reason counts.
  static std::string Unavailable(size_t nodes, const std::vector<std::pair<const char*, int>>& counts);
  std::vector<ShapeIndex> index_;  // [shape]

  std::unordered_map<int64_t, Placed> placed_;
  std::unordered_map<int64_t, bool> suspended_;
  std::vector<std::vector<int64_t>> pods_on_node_;
  std::unordered_map<std::string, std::vector<int64_t>> gangs_;
  int64_t next_uid_ = 1;

  std::vector<Candidate> candidates_;  // scratch reused across cycles
};

}  // namespace aicloud::sched
