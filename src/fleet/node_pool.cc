#include "fleet/node_pool.h"

#include <algorithm>

namespace aicloud::fleet {

WarmPoolProvider::WarmPoolProvider(WarmPoolConfig config) : config_(config) {
  // The pool exists before time 0: its nodes are ready from the start.
  for (int i = 0; i < config_.warm_pool_size; ++i) {
    std::string id = NewId();
    warm_since_[id] = 0;
    warm_.emplace_back(std::move(id), 0.0);
  }
}

void WarmPoolProvider::Refill(double now_s) {
  // Replacements are provisioned in the background and join the pool when ready.
  while (static_cast<int>(warm_.size()) < config_.warm_pool_size) {
    std::string id = NewId();
    warm_since_[id] = now_s;
    warm_.emplace_back(std::move(id), now_s + config_.provision_delay_s);
  }
}

std::vector<NodeGrant> WarmPoolProvider::Request(int n, double now_s) {
  std::vector<NodeGrant> out;
  // Ready warm nodes first, then warm nodes still provisioning (they are ahead of a new one).
  std::stable_sort(warm_.begin(), warm_.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
  while (n > 0 && !warm_.empty()) {
    auto [id, ready_at] = warm_.front();
    warm_.erase(warm_.begin());
    closed_warm_s_ += now_s - warm_since_[id];
    warm_since_.erase(id);
    in_use_[id] = now_s;
    out.push_back({id, std::max(ready_at, now_s) + config_.warm_start_s, true});
    --n;
  }
  for (; n > 0; --n) {
    std::string id = NewId();
    in_use_[id] = now_s;
    out.push_back({id, now_s + config_.provision_delay_s, false});
  }
  Refill(now_s);
  return out;
}

void WarmPoolProvider::Release(const std::string& node_id, double now_s) {
  auto it = in_use_.find(node_id);
  if (it == in_use_.end()) return;
  closed_node_s_ += now_s - it->second;
  in_use_.erase(it);
  if (static_cast<int>(warm_.size()) < config_.warm_pool_size) {
    warm_since_[node_id] = now_s;
    warm_.emplace_back(node_id, now_s);
  }
}

int WarmPoolProvider::WarmAvailable(double now_s) const {
  int n = 0;
  for (const auto& w : warm_) n += w.second <= now_s ? 1 : 0;
  return n;
}

double WarmPoolProvider::WarmIdleSeconds(double now_s) const {
  double total = closed_warm_s_;
  for (const auto& [id, since] : warm_since_) total += now_s - since;
  return total;
}

double WarmPoolProvider::NodeSeconds(double now_s) const {
  double total = closed_node_s_;
  for (const auto& [id, since] : in_use_) total += now_s - since;
  return total + WarmIdleSeconds(now_s);
}

std::vector<std::string> IdleNodesToRelease(std::span<const NodeUsage> nodes, double now_s,
                                            double idle_release_s) {
  std::vector<std::string> out;
  for (const NodeUsage& n : nodes) {
    if (n.used_slots == 0 && now_s - n.idle_since_s >= idle_release_s) out.push_back(n.node_id);
  }
  return out;
}

}  // namespace aicloud::fleet
