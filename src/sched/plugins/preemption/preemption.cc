#include "sched/plugins/preemption/preemption.h"

#include <algorithm>
#include <climits>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "sched/quota/quota.h"

namespace aicloud::sched {
namespace {

class Preemption final : public PostFilterPlugin {
 public:
  Preemption(Handle* h, QuotaManager* q) : handle_(h), quotas_(q) {}
  std::string_view Name() const override { return "preemption"; }

  PostFilterResult PostFilter(CycleState& state, const PodRequest& pod,
                              const FilterSummary& summary) override {
    std::optional<Choice> best;
    for (const auto& [node, code] : summary.rejected) {
      // kUnresolvable: no eviction can help (wrong model, cordoned, too small).
      if (code != Code::kUnschedulable) continue;
      std::optional<Choice> c = TryNode(state, pod, node);
      if (c && (!best || c->Key() < best->Key())) best = std::move(c);
    }
    PostFilterResult r;
    if (!best) {
      r.status = PluginStatus::Unschedulable("no preemption victims make room");
      return r;
    }
    r.nominated_node = best->node;
    r.victims = std::move(best->victims);
    return r;
  }

 private:
  // Pods evicted together: one pod, or every placed member of its gang.
  struct Unit {
    std::vector<int64_t> uids;
    int32_t priority = INT32_MIN;  // highest member priority
    int64_t newest = 0;            // highest uid, a stand-in for start time
    std::string reclaim_queue;     // set when taken back from another queue's borrowing
  };

  struct Choice {
    int32_t node = -1;
    std::vector<int64_t> victims;
    int32_t max_priority = INT32_MIN;
    int64_t priority_sum = 0;
    std::tuple<size_t, int32_t, int64_t, int32_t> Key() const {
      return std::make_tuple(victims.size(), max_priority, priority_sum, node);
    }
  };

  enum class Why { kNo, kPriority, kReclaim };

  // Why `victim` may make room for `pod` on a node of `flavor`. `may_reclaim`: `pod`'s queue
  // stays within nominal there after admission.
  Why Eligible(const PodRequest& pod, const PodRequest& victim, bool may_reclaim) const {
    if (!victim.preemptible || victim.uid == pod.uid) return Why::kNo;
    if (victim.queue.empty() || victim.queue == pod.queue) {
      return victim.priority < pod.priority ? Why::kPriority : Why::kNo;
    }
    if (!may_reclaim || quotas_ == nullptr) return Why::kNo;
    const QueueSpec* mine = quotas_->queue(pod.queue);
    const QueueSpec* theirs = quotas_->queue(victim.queue);
    if (mine == nullptr || theirs == nullptr || mine->cohort.empty() ||
        mine->cohort != theirs->cohort) {
      return Why::kNo;
    }
    return Why::kReclaim;
  }

  // Reclaim needs the flavor the pod would charge on this node and the amount: the GPU model for
  // GPU work, "cpu" for CPU-only work. False when reclaim cannot apply.
  bool MayReclaim(const PodRequest& pod, int32_t node, std::string* flavor) const {
    if (quotas_ == nullptr || pod.queue.empty() || !quotas_->HasQueue(pod.queue)) return false;
    int64_t amount = 0;
    if (pod.wants_gpu()) {
      *flavor = NodeFlavor(handle_->cluster(), node);
      amount = pod.total_gpu_milli();
    } else {
      *flavor = std::string(kCpuFlavor);
      amount = pod.cpu_milli;
    }
    if (!quotas_->Declares(pod.queue, *flavor)) return false;
    // Reclaim takes back what the preemptor's queue is guaranteed, never more.
    return quotas_->Usage(pod.queue, *flavor) + amount <= quotas_->Nominal(pod.queue, *flavor);
  }

  // Candidate units with a member on `node`, lowest priority (then newest) first.
  std::vector<Unit> CandidatesOn(const PodRequest& pod, int32_t node, bool may_reclaim) const {
    std::vector<Unit> units;
    std::set<std::string> gangs_seen;
    for (int64_t uid : handle_->pods_on_node(node)) {
      const Placed* p = handle_->placed(uid);
      if (p == nullptr) continue;
      std::vector<int64_t> members{uid};
      if (!p->pod.gang.name.empty()) {
        if (!gangs_seen.insert(p->pod.gang.name).second) continue;
        members = handle_->gang_members(p->pod.gang.name);
      }
      Unit u;
      bool ok = true;
      for (int64_t m : members) {
        const Placed* mp = handle_->placed(m);
        if (mp == nullptr) continue;
        const Why why = Eligible(pod, mp->pod, may_reclaim);
        if (why == Why::kNo) {
          ok = false;  // one protected member protects the whole gang
          break;
        }
        if (why == Why::kReclaim) u.reclaim_queue = mp->pod.queue;
        u.uids.push_back(m);
        u.priority = std::max(u.priority, mp->pod.priority);
        u.newest = std::max(u.newest, m);
      }
      if (ok && !u.uids.empty()) units.push_back(std::move(u));
    }
    std::sort(units.begin(), units.end(), [](const Unit& a, const Unit& b) {
      return a.priority != b.priority ? a.priority < b.priority : a.newest > b.newest;
    });
    return units;
  }

  // Takes a unit off the cluster and out of its queue's usage, so both the resource filters and
  // the quota filter see the room its eviction would make.
  void Suspend(const Unit& u) {
    for (int64_t uid : u.uids) {
      handle_->SuspendPod(uid);
      const Placed* p = handle_->placed(uid);
      if (quotas_ != nullptr && p != nullptr && !p->pod.queue.empty() &&
          quotas_->UnchargePod(p->pod, NodeFlavor(handle_->cluster(), p->alloc.node)).ok()) {
        refunded_.insert(uid);
      }
    }
  }

  void Resume(const Unit& u) {
    for (int64_t uid : u.uids) {
      handle_->ResumePod(uid);
      const Placed* p = handle_->placed(uid);
      if (refunded_.erase(uid) > 0) {
        (void)quotas_->ChargePod(p->pod, NodeFlavor(handle_->cluster(), p->alloc.node));
      }
    }
  }

  bool Fits(CycleState& state, const PodRequest& pod, int32_t node) {
    return handle_->RunFilters(state, pod, handle_->cluster().node(node)).ok();
  }

  std::optional<Choice> TryNode(CycleState& state, const PodRequest& pod, int32_t node) {
    std::string flavor;
    const bool may_reclaim = MayReclaim(pod, node, &flavor);
    std::vector<Unit> units = CandidatesOn(pod, node, may_reclaim);
    if (units.empty()) return std::nullopt;
    // 1. Remove every candidate. A borrowing queue loses pods only while it still borrows, so
    //    reclaim never pushes it below its nominal by more than one pod's worth.
    std::vector<Unit> removed;
    for (Unit& u : units) {
      if (!u.reclaim_queue.empty() && quotas_->Borrowed(u.reclaim_queue, flavor) <= 0) continue;
      Suspend(u);
      removed.push_back(std::move(u));
    }
    std::optional<Choice> choice;
    if (!removed.empty() && Fits(state, pod, node)) {
      // 2. Reprieve from the most important down: keep each one that the pod fits beside.
      std::vector<Unit*> order;
      for (Unit& u : removed) order.push_back(&u);
      std::sort(order.begin(), order.end(), [](const Unit* a, const Unit* b) {
        return a->priority != b->priority ? a->priority > b->priority : a->newest < b->newest;
      });
      choice.emplace();
      choice->node = node;
      std::vector<const Unit*> victims;
      for (Unit* u : order) {
        Resume(*u);
        if (Fits(state, pod, node)) continue;
        Suspend(*u);
        victims.push_back(u);
      }
      // 3. Put the victims back too: the framework evicts them for real if this node wins.
      for (const Unit* u : victims) {
        Resume(*u);
        for (int64_t uid : u->uids) {
          choice->victims.push_back(uid);
          const int32_t prio = handle_->placed(uid)->pod.priority;
          choice->max_priority = std::max(choice->max_priority, prio);
          choice->priority_sum += prio;
        }
      }
      std::sort(choice->victims.begin(), choice->victims.end());
      if (choice->victims.empty()) choice.reset();  // fits without evicting: not our case
      removed.clear();  // all resumed above
    }
    for (const Unit& u : removed) Resume(u);
    return choice;
  }

  Handle* handle_;
  QuotaManager* quotas_;
  std::set<int64_t> refunded_;  // victims whose quota is refunded while suspended
};

}  // namespace

void RegisterPreemption(Registry& r) {
  (void)r.Register("preemption", [](const PluginArgs& a) -> StatusOr<std::unique_ptr<Plugin>> {
    return std::unique_ptr<Plugin>(new Preemption(a.handle, a.quotas));
  });
}

}  // namespace aicloud::sched
