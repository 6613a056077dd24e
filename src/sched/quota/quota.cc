#include "sched/quota/quota.h"

#include <algorithm>
#include <limits>

namespace aicloud::sched {
namespace {

constexpr int64_t kUnlimited = std::numeric_limits<int64_t>::max() / 4;

// The part of nominal a queue offers its cohort, and the part it keeps for itself.
int64_t Lendable(const FlavorQuota& f) {
  return f.lending_limit ? std::min(f.nominal, *f.lending_limit) : f.nominal;
}
int64_t Guaranteed(const FlavorQuota& f) { return f.nominal - Lendable(f); }

}  // namespace

std::string NodeFlavor(const cluster::Cluster& cluster, int32_t node) {
  if (node < 0 || static_cast<size_t>(node) >= cluster.nodes().size()) return {};
  const cluster::ModelId m = cluster.node(node).model;
  return m == cluster::kNoModel ? std::string() : cluster.model_name(m);
}

Status QuotaManager::AddQueue(QueueSpec spec) {
  if (spec.name.empty()) return InvalidArgumentError("queue: name is empty");
  if (!(spec.weight > 0)) {
    return InvalidArgumentError("queue " + spec.name + ": weight must be positive");
  }
  for (const auto& [flavor, f] : spec.flavors) {
    const std::string where = "queue " + spec.name + ": " + flavor + ": ";
    if (f.nominal < 0) return InvalidArgumentError(where + "nominal is negative");
    // Sums of quotas over a cohort must stay far from int64 overflow.
    constexpr int64_t kMaxQuota = int64_t{1} << 50;
    if (f.nominal > kMaxQuota || (f.borrowing_limit && *f.borrowing_limit > kMaxQuota)) {
      return InvalidArgumentError(where + "quota above 2^50 (leave borrowing_limit unset for no cap)");
    }
    if (f.borrowing_limit && *f.borrowing_limit < 0) {
      return InvalidArgumentError(where + "borrowing_limit is negative");
    }
    if (f.lending_limit && (*f.lending_limit < 0 || *f.lending_limit > f.nominal)) {
      return InvalidArgumentError(where + "lending_limit must be within 0..nominal");
    }
  }
  if (queues_.count(spec.name)) {
    return AlreadyExistsError("queue " + spec.name + " is already defined");
  }
  std::string name = spec.name;
  queues_.emplace(std::move(name), Queue{std::move(spec), {}});
  return OkStatus();
}

const QuotaManager::Queue* QuotaManager::Find(std::string_view name) const {
  auto it = queues_.find(name);
  return it == queues_.end() ? nullptr : &it->second;
}

bool QuotaManager::HasQueue(std::string_view queue) const { return Find(queue) != nullptr; }

const QueueSpec* QuotaManager::queue(std::string_view queue) const {
  const Queue* q = Find(queue);
  return q ? &q->spec : nullptr;
}

std::vector<std::string> QuotaManager::QueueNames() const {
  std::vector<std::string> out;
  for (const auto& [name, q] : queues_) out.push_back(name);
  return out;
}

bool QuotaManager::Declares(std::string_view queue, std::string_view flavor) const {
  const Queue* q = Find(queue);
  return q != nullptr && q->spec.flavors.count(flavor) > 0;
}

std::vector<const QuotaManager::Queue*> QuotaManager::CohortOf(const Queue& q) const {
  if (q.spec.cohort.empty()) return {&q};
  std::vector<const Queue*> out;
  for (const auto& [name, other] : queues_) {
    if (other.spec.cohort == q.spec.cohort) out.push_back(&other);
  }
  return out;
}

int64_t QuotaManager::Usage(std::string_view queue, std::string_view flavor) const {
  const Queue* q = Find(queue);
  if (q == nullptr) return 0;
  auto it = q->usage.find(flavor);
  return it == q->usage.end() ? 0 : it->second;
}

int64_t QuotaManager::Nominal(std::string_view queue, std::string_view flavor) const {
  const Queue* q = Find(queue);
  if (q == nullptr) return 0;
  auto it = q->spec.flavors.find(flavor);
  return it == q->spec.flavors.end() ? 0 : it->second.nominal;
}

int64_t QuotaManager::Borrowed(std::string_view queue, std::string_view flavor) const {
  return std::max<int64_t>(0, Usage(queue, flavor) - Nominal(queue, flavor));
}

int64_t QuotaManager::Available(std::string_view queue, std::string_view flavor) const {
  const Queue* q = Find(queue);
  if (q == nullptr) return 0;
  auto fit = q->spec.flavors.find(flavor);
  if (fit == q->spec.flavors.end()) return 0;
  const FlavorQuota& mine = fit->second;
  const int64_t used = Usage(queue, flavor);
  // The cohort is one pool made of every member's lendable nominal. Each member's usage comes
  // first out of its own guaranteed part and then out of the pool, so a member's unused lendable
  // quota is exactly what the others may borrow: min(unused, lending_limit) when alone.
  int64_t pool = 0;
  int64_t pool_used = 0;
  for (const Queue* m : CohortOf(*q)) {
    auto f = m->spec.flavors.find(flavor);
    if (f == m->spec.flavors.end()) continue;
    auto u = m->usage.find(flavor);
    const int64_t mu = u == m->usage.end() ? 0 : u->second;
    pool += Lendable(f->second);
    pool_used += std::max<int64_t>(0, mu - Guaranteed(f->second));
  }
  const int64_t own_left = std::max<int64_t>(0, Guaranteed(mine) - used);
  const int64_t pool_left = std::max<int64_t>(0, pool - pool_used);
  const int64_t cap_left = mine.borrowing_limit
                               ? mine.nominal + *mine.borrowing_limit - used
                               : kUnlimited;
  return std::max<int64_t>(0, std::min(cap_left, own_left + pool_left));
}

bool QuotaManager::Fits(std::string_view queue, std::string_view flavor, int64_t amount,
                        std::string* why) const {
  const Queue* q = Find(queue);
  if (q == nullptr) {
    if (why) *why = "queue " + std::string(queue) + " is not defined";
    return false;
  }
  if (!q->spec.flavors.count(flavor)) {
    if (why) {
      *why = "queue " + std::string(queue) + ": " + std::string(flavor) + ": " +
             std::to_string(amount) + " requested, no quota for this flavor";
    }
    return false;
  }
  const int64_t avail = Available(queue, flavor);
  if (amount <= avail) return true;
  if (why) {
    // Split what is left into the queue's own nominal and what it could still borrow, so an
    // operator sees whether raising nominal or the cohort's lending would help.
    const int64_t nominal = Nominal(queue, flavor);
    const int64_t unused = std::max<int64_t>(0, nominal - Usage(queue, flavor));
    const int64_t nominal_left = std::min(avail, unused);
    *why = "queue " + std::string(queue) + ": " + std::string(flavor) + ": " +
           std::to_string(amount) + " requested, " + std::to_string(nominal_left) + " of " +
           std::to_string(nominal) + " nominal + " + std::to_string(avail - nominal_left) +
           " borrowable left";
    // Unused nominal that others borrowed: only reclaim (preemption) gives it back.
    if (unused > nominal_left) {
      *why += " (" + std::to_string(unused - nominal_left) + " of its nominal lent to the cohort)";
    }
  }
  return false;
}

Status QuotaManager::Charge(std::string_view queue, std::string_view flavor, int64_t amount) {
  auto it = queues_.find(queue);
  if (it == queues_.end()) return NotFoundError("queue " + std::string(queue) + " is not defined");
  if (!it->second.spec.flavors.count(flavor)) {
    return NotFoundError("queue " + std::string(queue) + " has no quota for " +
                         std::string(flavor));
  }
  if (amount < 0) return InvalidArgumentError("charge of a negative amount");
  auto u = it->second.usage.find(flavor);
  if (u == it->second.usage.end()) u = it->second.usage.emplace(std::string(flavor), 0).first;
  u->second += amount;
  return OkStatus();
}

Status QuotaManager::Uncharge(std::string_view queue, std::string_view flavor, int64_t amount) {
  auto it = queues_.find(queue);
  if (it == queues_.end()) return NotFoundError("queue " + std::string(queue) + " is not defined");
  if (amount < 0) return InvalidArgumentError("refund of a negative amount");
  auto u = it->second.usage.find(flavor);
  const int64_t have = u == it->second.usage.end() ? 0 : u->second;
  if (amount > have) {
    return FailedPreconditionError("queue " + std::string(queue) + ": " + std::string(flavor) +
                                   ": refund of " + std::to_string(amount) + " exceeds usage " +
                                   std::to_string(have));
  }
  if (amount > 0) u->second -= amount;
  return OkStatus();
}

double QuotaManager::DominantShare(std::string_view queue) const {
  const Queue* q = Find(queue);
  if (q == nullptr) return 0;
  const std::vector<const Queue*> cohort = CohortOf(*q);
  double share = 0;
  for (const auto& [flavor, used] : q->usage) {
    int64_t total = 0;
    for (const Queue* m : cohort) {
      auto f = m->spec.flavors.find(flavor);
      if (f != m->spec.flavors.end()) total += f->second.nominal;
    }
    if (total > 0) share = std::max(share, static_cast<double>(used) / static_cast<double>(total));
  }
  return share / q->spec.weight;
}

std::vector<std::pair<std::string, int64_t>> QuotaManager::PodCharges(
    const PodRequest& pod, std::string_view gpu_flavor) const {
  std::vector<std::pair<std::string, int64_t>> out;
  if (pod.wants_gpu()) out.emplace_back(std::string(gpu_flavor), pod.total_gpu_milli());
  if (pod.cpu_milli > 0 && Declares(pod.queue, kCpuFlavor)) {
    out.emplace_back(std::string(kCpuFlavor), pod.cpu_milli);
  }
  if (pod.mem_mib > 0 && Declares(pod.queue, kMemoryFlavor)) {
    out.emplace_back(std::string(kMemoryFlavor), pod.mem_mib);
  }
  return out;
}

bool QuotaManager::FitsPod(const PodRequest& pod, std::string_view gpu_flavor,
                           std::string* why) const {
  if (!HasQueue(pod.queue)) {
    if (why) *why = "queue " + pod.queue + " is not defined";
    return false;
  }
  for (const auto& [flavor, amount] : PodCharges(pod, gpu_flavor)) {
    if (!Fits(pod.queue, flavor, amount, why)) return false;
  }
  return true;
}

Status QuotaManager::ChargePod(const PodRequest& pod, std::string_view gpu_flavor) {
  const auto charges = PodCharges(pod, gpu_flavor);
  for (size_t i = 0; i < charges.size(); ++i) {
    Status st = Charge(pod.queue, charges[i].first, charges[i].second);
    if (!st.ok()) {
      // All or nothing, so a failed charge leaves no partial usage behind.
      for (size_t j = 0; j < i; ++j) (void)Uncharge(pod.queue, charges[j].first, charges[j].second);
      return st;
    }
  }
  return OkStatus();
}

Status QuotaManager::UnchargePod(const PodRequest& pod, std::string_view gpu_flavor) {
  const auto charges = PodCharges(pod, gpu_flavor);
  // Checked first so a refund is all or nothing, like the charge it undoes.
  if (!HasQueue(pod.queue)) return NotFoundError("queue " + pod.queue + " is not defined");
  for (const auto& [flavor, amount] : charges) {
    if (amount > Usage(pod.queue, flavor)) {
      return FailedPreconditionError("queue " + pod.queue + ": " + flavor + ": refund of " +
                                     std::to_string(amount) + " exceeds usage " +
                                     std::to_string(Usage(pod.queue, flavor)));
    }
  }
  for (const auto& [flavor, amount] : charges) (void)Uncharge(pod.queue, flavor, amount);
  return OkStatus();
}

}  // namespace aicloud::sched
