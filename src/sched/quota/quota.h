// QuotaManager: tenant queues with guaranteed (nominal) quota per resource flavor, borrowing and
// lending inside a cohort, and the dominant-resource share that orders queues fairly. It is the
// bookkeeping behind the `quota`, `drf_queue_sort` and `preemption` plugins; the semantics are
// Kueue's ClusterQueue/Cohort model (see docs/quotas.md).
//
// A flavor is a GPU model name as the cluster interns it ("H100-SXM"; amounts in GPU milli, so
// one whole GPU = 1000), or one of the special flavors "cpu" (millicores) and "memory" (MiB).
//
//   QuotaManager q;
//   q.AddQueue({.name = "team-a", .cohort = "research",
//               .flavors = {{"H100-SXM", {.nominal = 16000, .borrowing_limit = 8000}}}});
//   std::string why;
//   if (q.Fits("team-a", "H100-SXM", 8000, &why)) q.Charge("team-a", "H100-SXM", 8000);
//   else std::cout << why;  // "queue team-a: H100-SXM: 8000 requested, 4000 of 16000 ..."
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cluster/cluster.h"
#include "core/status.h"
#include "sched/request.h"

namespace aicloud::sched {

inline constexpr std::string_view kCpuFlavor = "cpu";        // millicores
inline constexpr std::string_view kMemoryFlavor = "memory";  // MiB

// One queue's quota of one flavor.
struct FlavorQuota {
  // Guaranteed to the queue: others may borrow it only while the queue leaves it unused, and the
  // queue can reclaim it by evicting the borrowers.
  int64_t nominal = 0;
  // How much beyond nominal the queue may use, borrowed from its cohort. nullopt = no limit other
  // than what the cohort lends.
  std::optional<int64_t> borrowing_limit;
  // How much of its nominal the queue lends to its cohort while unused. nullopt = all of it. The
  // rest (nominal - lending_limit) is reserved to the queue even when idle.
  std::optional<int64_t> lending_limit;
};

struct QueueSpec {
  std::string name;
  std::string cohort;  // queues sharing a cohort lend to each other; empty = a cohort of one
  double weight = 1.0;  // fair-share weight: a queue of weight 2 is "entitled" to twice the share
  std::map<std::string, FlavorQuota, std::less<>> flavors;
};

// The GPU flavor of a node: its model's name, or "" for a node without GPUs.
std::string NodeFlavor(const cluster::Cluster& cluster, int32_t node);

// Thread-compatible: the scheduler thread owns it, as it owns the Cluster.
class QuotaManager {
 public:
  // InvalidArgument for an empty name, a weight <= 0, negative quantities, or a lending limit
  // above nominal; AlreadyExists for a duplicate name.
  Status AddQueue(QueueSpec spec);

  bool HasQueue(std::string_view queue) const;
  // nullptr when unknown.
  const QueueSpec* queue(std::string_view queue) const;
  std::vector<std::string> QueueNames() const;
  // True when the queue has quota for the flavor (false for an unknown queue).
  bool Declares(std::string_view queue, std::string_view flavor) const;

  // How much more of `flavor` the queue may take now: its own unused guaranteed part plus what
  // the cohort still has to lend, capped by nominal + borrowing_limit. 0 when undeclared.
  int64_t Available(std::string_view queue, std::string_view flavor) const;
  // True when `amount` more fits. Otherwise, when `why` is not null, sets it to e.g.
  // "queue team-a: H100-SXM: 8000 requested, 4000 of 16000 nominal + 0 borrowable left".
  bool Fits(std::string_view queue, std::string_view flavor, int64_t amount,
            std::string* why) const;

  // Records admitted use. Charge does not check Fits (the caller admits; a refund being put back
  // must not be refused). NotFound for an unknown queue or undeclared flavor; InvalidArgument
  // for a negative amount; Uncharge refuses (FailedPrecondition) to take usage below zero.
  Status Charge(std::string_view queue, std::string_view flavor, int64_t amount);
  Status Uncharge(std::string_view queue, std::string_view flavor, int64_t amount);

  int64_t Usage(std::string_view queue, std::string_view flavor) const;
  int64_t Nominal(std::string_view queue, std::string_view flavor) const;
  // Usage above nominal: what the queue holds of other queues' quota.
  int64_t Borrowed(std::string_view queue, std::string_view flavor) const;
  // DRF: max over the queue's flavors of usage / (total nominal of that flavor in the cohort),
  // divided by the queue's weight. 0 for an unknown or idle queue.
  double DominantShare(std::string_view queue) const;

  // What a pod charges to its queue when placed on a node whose GPU model is `gpu_flavor` (empty
  // for a node without GPUs): the GPU flavor when the pod wants GPUs, and "cpu"/"memory" when the
  // queue declares them. One place decides this so admission, refund and preemption agree.
  std::vector<std::pair<std::string, int64_t>> PodCharges(const PodRequest& pod,
                                                          std::string_view gpu_flavor) const;
  // Fits for every charge of the pod. False with "queue X is not defined" for an unknown queue.
  bool FitsPod(const PodRequest& pod, std::string_view gpu_flavor, std::string* why) const;
  // All or nothing: on error nothing changed.
  Status ChargePod(const PodRequest& pod, std::string_view gpu_flavor);
  Status UnchargePod(const PodRequest& pod, std::string_view gpu_flavor);

 private:
  struct Queue {
    QueueSpec spec;
    std::map<std::string, int64_t, std::less<>> usage;
  };
  const Queue* Find(std::string_view name) const;
  // Queues sharing `q`'s cohort, `q` included.
  std::vector<const Queue*> CohortOf(const Queue& q) const;

  std::map<std::string, Queue, std::less<>> queues_;
};

}  // namespace aicloud::sched
