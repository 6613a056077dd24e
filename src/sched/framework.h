// The scheduling framework's extension points, modelled on the Kubernetes scheduling framework:
// queue sort, pre-filter, filter, post-filter (preemption), score, normalize, reserve/unreserve,
// permit (gang waits) and bind. Each policy is a plugin that implements one or more of them; a
// Profile (profile.h) enables, orders and weights plugins by name.
//
// Contract for plugin authors:
// - Plugins never call each other; the framework owns iteration. Scratch data for one cycle
//   travels in CycleState.
// - Filter and Score must be pure functions of (request, node state) when NodeLocal() is true:
//   the framework then memoises their answers per (request shape, node version). A plugin whose
//   answers depend on anything else (rack state, randomness, other pods) returns false.
// - Hot-path reasons are static strings; a filter should allocate nothing per node.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cluster/catalog.h"
#include "cluster/cluster.h"
#include "core/rng.h"
#include "sched/request.h"

namespace aicloud::sched {

// Kubernetes' split: kError (something broke) vs kUnschedulable (does not fit; preemption may
// help) vs kUnschedulableAndUnresolvable (nothing will help on this node).
enum class Code : uint8_t { kSuccess, kUnschedulable, kUnresolvable, kWait, kError };

struct PluginStatus {
  Code code = Code::kSuccess;
  const char* reason = nullptr;  // static text, e.g. "insufficient GPU milli"
  std::string detail;            // optional dynamic text (pre-filter, permit; not per node)

  bool ok() const { return code == Code::kSuccess; }
  static PluginStatus Ok() { return {}; }
  static PluginStatus Unschedulable(const char* r) { return {Code::kUnschedulable, r, {}}; }
  static PluginStatus Unresolvable(const char* r) { return {Code::kUnresolvable, r, {}}; }
  static PluginStatus Wait(const char* r) { return {Code::kWait, r, {}}; }
  static PluginStatus Error(std::string d) { return {Code::kError, "error", std::move(d)}; }
};

// Which GPUs of a node a placement takes. Bit i of mask = GPU index i.
struct GpuPick {
  uint64_t mask = 0;
  int8_t mig_start = -1;
  bool empty() const { return mask == 0; }
};

// Facts about each GPU model of a cluster, indexed by cluster::ModelId.
struct ModelFacts {
  const cluster::GpuModelSpec* spec = nullptr;     // nullptr for models not in the catalog
  const cluster::MigGeometry* mig = nullptr;       // nullptr without MIG
};

// Per-cycle scratch space. Slot i belongs to the plugin at index i of the profile.
class CycleState {
 public:
  struct Data {
    virtual ~Data() = default;
  };
  explicit CycleState(Rng* rng) : rng_(rng) {}
  void Write(size_t slot, std::unique_ptr<Data> d) {
    if (data_.size() <= slot) data_.resize(slot + 1);
    data_[slot] = std::move(d);
  }
  Data* Read(size_t slot) const { return slot < data_.size() ? data_[slot].get() : nullptr; }
  Rng& rng() { return *rng_; }

 private:
  Rng* rng_;
  std::vector<std::unique_ptr<Data>> data_;
};

// A placed unit of work, as the framework remembers it.
struct Placed {
  PodRequest pod;
  cluster::Allocation alloc;
};

// What plugins may ask of the framework (Kubernetes' framework.Handle).
class Handle {
 public:
  virtual ~Handle() = default;
  virtual const cluster::Cluster& cluster() const = 0;
  virtual const std::vector<ModelFacts>& model_facts() const = 0;
  // uids of the work placed on a node.
  virtual const std::vector<int64_t>& pods_on_node(int32_t node) const = 0;
  virtual const Placed* placed(int64_t uid) const = 0;
  // uids of the placed members of a gang.
  virtual std::vector<int64_t> gang_members(const std::string& gang) const = 0;
  // Runs every enabled filter plugin against a node.
  virtual PluginStatus RunFilters(CycleState& state, const PodRequest& pod,
                                  const cluster::Node& node) = 0;
  // Takes a placed pod off its node without forgetting it, and puts it back. Used by
  // preemption to try "what if these victims were gone".
  virtual void SuspendPod(int64_t uid) = 0;
  virtual void ResumePod(int64_t uid) = 0;
};

class Plugin {
 public:
  virtual ~Plugin() = default;
  virtual std::string_view Name() const = 0;
  // True when Filter/Score answers depend only on (request shape, node state). See above.
  virtual bool NodeLocal() const { return true; }
};

// An entry of the pending queue, as queue-sort plugins see it.
struct QueuedPod {
  const PodRequest* pod;
  int64_t enqueue_seq;  // arrival order
  double queue_share;   // dominant-resource share of the pod's queue (0 without quotas)
};

class QueueSortPlugin : public virtual Plugin {
 public:
  // Strict weak order: true when `a` should be tried before `b`.
  virtual bool Less(const QueuedPod& a, const QueuedPod& b) const = 0;
};

class PreFilterPlugin : public virtual Plugin {
 public:
  // Checks the request as a whole (e.g. quota); may store scratch data in state.
  virtual PluginStatus PreFilter(CycleState& state, const PodRequest& pod) = 0;
};

class FilterPlugin : public virtual Plugin {
 public:
  virtual PluginStatus Filter(CycleState& state, const PodRequest& pod,
                              const cluster::Node& node) const = 0;
};

// Nodes the filters rejected, with each one's status, for post-filter plugins.
struct FilterSummary {
  std::vector<std::pair<int32_t, Code>> rejected;  // (node id, code)
};

struct PostFilterResult {
  PluginStatus status;
  int32_t nominated_node = -1;
  std::vector<int64_t> victims;  // uids to evict before the pod can go to nominated_node
};

class PostFilterPlugin : public virtual Plugin {
 public:
  // Called when no node passes the filters: may nominate a node and victims (preemption).
  virtual PostFilterResult PostFilter(CycleState& state, const PodRequest& pod,
                                      const FilterSummary& summary) = 0;
};

class ScorePlugin : public virtual Plugin {
 public:
  // Raw score of a feasible node; higher is better. May set *pick to choose the GPUs (the
  // framework uses the pick of the first picking plugin in profile order).
  virtual int64_t Score(CycleState& state, const PodRequest& pod, const cluster::Node& node,
                        GpuPick* pick) = 0;
  // When true, Normalize maps the raw scores of all feasible nodes (in place) to 0..100.
  virtual bool Normalizes() const { return false; }
  virtual void Normalize(std::span<int64_t> /*scores*/) const {}
};

class ReservePlugin : public virtual Plugin {
 public:
  virtual PluginStatus Reserve(CycleState& state, const PodRequest& pod,
                               const cluster::Allocation& alloc) = 0;
  virtual void Unreserve(CycleState& state, const PodRequest& pod,
                         const cluster::Allocation& alloc) = 0;
};

class PermitPlugin : public virtual Plugin {
 public:
  // kSuccess to bind now, kWait to hold the reservation (gang members), anything else rejects.
  virtual PluginStatus Permit(CycleState& state, const PodRequest& pod) = 0;
};

class BindPlugin : public virtual Plugin {
 public:
  virtual PluginStatus Bind(const PodRequest& pod, const cluster::Allocation& alloc) = 0;
};

// Score scale of the framework (Kubernetes' MaxNodeScore).
inline constexpr int64_t kMaxNodeScore = 100;

}  // namespace aicloud::sched
