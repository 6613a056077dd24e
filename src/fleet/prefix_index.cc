#include "fleet/prefix_index.h"

#include <algorithm>

namespace aicloud::fleet {

int PrefixIndex::MatchedBlocks(std::string_view replica, std::span<const uint64_t> hashes) const {
  auto it = replicas_.find(std::string(replica));
  if (it == replicas_.end()) return 0;
  const int limit = std::min(static_cast<int>(hashes.size()), max_match_);
  int n = 0;
  while (n < limit && it->second.where.count(hashes[static_cast<size_t>(n)]) > 0) ++n;
  return n;
}

void PrefixIndex::Record(std::string_view replica, std::span<const uint64_t> hashes) {
  if (capacity_ <= 0) return;
  Lru& lru = replicas_[std::string(replica)];
  for (uint64_t h : hashes) {
    auto found = lru.where.find(h);
    if (found != lru.where.end()) {
      lru.order.splice(lru.order.begin(), lru.order, found->second);
    } else {
      lru.order.push_front(h);
      lru.where.emplace(h, lru.order.begin());
    }
  }
  while (static_cast<int64_t>(lru.order.size()) > capacity_) {
    lru.where.erase(lru.order.back());
    lru.order.pop_back();
  }
}

void PrefixIndex::RemoveReplica(std::string_view replica) { replicas_.erase(std::string(replica)); }

int64_t PrefixIndex::BlocksOn(std::string_view replica) const {
  auto it = replicas_.find(std::string(replica));
  return it == replicas_.end() ? 0 : static_cast<int64_t>(it->second.order.size());
}

}  // namespace aicloud::fleet
