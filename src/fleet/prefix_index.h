// PrefixIndex: the router's approximate view of which prompt-prefix KV blocks each replica
// holds, built from its own routing history (GIE's approximate prefix-cache scorer; Dynamo's
// --no-kv-events indexer works the same way). A request's blocks are recorded on the replica it
// was sent to; each replica keeps at most `capacity_blocks` blocks, least recently used first
// out, so the index forgets roughly when the replica's cache would.
//
//   PrefixIndex index(3906);                   // 31,250 blocks of 64 tokens, in 512-token blocks
//   int hit = index.MatchedBlocks("r1", hashes);   // leading blocks believed cached on r1
//   index.Record("r1", hashes);
//
// Block hashes are chained (a block's hash covers the prefix before it), as in vLLM and the
// Mooncake trace, so matching stops at the first miss. Not thread-safe.
#pragma once

#include <cstdint>
#include <list>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>

namespace aicloud::fleet {

class PrefixIndex {
 public:
  // GIE prefix-cache-scorer defaults: lruCapacityPerServer 31,250 blocks, maxPrefixBlocksToMatch 256.
  explicit PrefixIndex(int64_t capacity_blocks = 31250, int max_blocks_to_match = 256)
      : capacity_(capacity_blocks), max_match_(max_blocks_to_match) {}

  // Leading blocks of `hashes` recorded on `replica` (at most max_blocks_to_match).
  int MatchedBlocks(std::string_view replica, std::span<const uint64_t> hashes) const;
  // Marks the blocks as most recently used on `replica`, evicting the least recently used ones
  // beyond the capacity.
  void Record(std::string_view replica, std::span<const uint64_t> hashes);
  void RemoveReplica(std::string_view replica);
  int64_t BlocksOn(std::string_view replica) const;

 private:
  struct Lru {
    std::list<uint64_t> order;  // front = most recent
    std::unordered_map<uint64_t, std::list<uint64_t>::iterator> where;
  };
  int64_t capacity_;
  int max_match_;
  std::unordered_map<std::string, Lru> replicas_;
};

}  // namespace aicloud::fleet
