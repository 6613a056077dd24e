#include "engine/kv/block_manager.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

namespace aicloud::engine {

int64_t KvBytesPerBlock(int64_t layers, int64_t kv_heads, int64_t head_dim, int64_t dtype_bytes,
                        int64_t block_size) {
  return 2 * layers * kv_heads * head_dim * dtype_bytes * block_size;
}

int32_t NumBlocksForBudget(int64_t budget_bytes, int64_t bytes_per_block) {
  if (bytes_per_block <= 0 || budget_bytes <= 0) return 0;
  const int64_t n = budget_bytes / bytes_per_block;
  return static_cast<int32_t>(std::min<int64_t>(n, std::numeric_limits<int32_t>::max()));
}

StatusOr<BlockManager> BlockManager::Create(const BlockManagerOptions& options) {
  if (options.num_blocks <= 0) {
    return InvalidArgumentError("kv: num_blocks must be > 0, got " +
                                std::to_string(options.num_blocks));
  }
  if (options.block_size <= 0) {
    return InvalidArgumentError("kv: block_size must be > 0, got " +
                                std::to_string(options.block_size));
  }
  if (!(options.watermark >= 0 && options.watermark < 1)) {
    return InvalidArgumentError("kv: watermark must be in [0, 1), got " +
                                std::to_string(options.watermark));
  }
  return BlockManager(options);
}

BlockManager::BlockManager(const BlockManagerOptions& options)
    : num_blocks_(options.num_blocks),
      block_size_(options.block_size),
      watermark_blocks_(static_cast<int32_t>(std::floor(options.watermark * options.num_blocks))),
      prefix_caching_(options.enable_prefix_caching),
      key_(options.hash_key ? *options.hash_key : RandomSipKey()),
      blocks_(static_cast<size_t>(options.num_blocks)) {
  if (prefix_caching_) {
    block_tokens_.resize(static_cast<size_t>(num_blocks_) * static_cast<size_t>(block_size_));
  }
  // A stack popped from the back: block 0 is handed out first.
  blank_.reserve(static_cast<size_t>(num_blocks_));
  for (int32_t b = num_blocks_ - 1; b >= 0; --b) blank_.push_back(b);
}

int64_t BlockManager::BlocksFor(int64_t num_tokens) const {
  return num_tokens <= 0 ? 0 : (num_tokens + block_size_ - 1) / block_size_;
}

// ---- Prefix cache ------------------------------------------------------------------------------

void BlockManager::MatchPrefix(std::span<const int32_t> tokens, CacheScope scope,
                               std::vector<int32_t>* hits, uint64_t* last_hash) const {
  hits->clear();
  *last_hash = kRootBlockHash;
  if (!prefix_caching_ || tokens.empty()) return;
  // The last token is always computed (its logits are needed), so it never comes from the cache.
  const int64_t max_blocks = (static_cast<int64_t>(tokens.size()) - 1) / block_size_;
  const size_t bs = static_cast<size_t>(block_size_);
  uint64_t parent = kRootBlockHash;
  for (int64_t i = 0; i < max_blocks; ++i) {
    std::span<const int32_t> chunk = tokens.subspan(static_cast<size_t>(i) * bs, bs);
    const uint64_t h = HashBlock(key_, parent, scope, chunk);
    auto it = hash_to_block_.find(h);
    if (it == hash_to_block_.end()) break;
    const int32_t b = it->second;
    const Block& blk = blocks_[static_cast<size_t>(b)];
    // A collision (or a stale scope) is a miss, never wrong KV.
    if (blk.parent_hash != parent || !(blk.scope == scope) ||
        std::memcmp(TokensOf(b), chunk.data(), bs * sizeof(int32_t)) != 0) {
      break;
    }
    hits->push_back(b);
    parent = h;
  }
  *last_hash = parent;
}

int64_t BlockManager::CachedPrefixLength(std::span<const int32_t> tokens, CacheScope scope) const {
  std::vector<int32_t> hits;
  uint64_t last = 0;
  MatchPrefix(tokens, scope, &hits, &last);
  return static_cast<int64_t>(hits.size()) * block_size_;
}

// ---- Free lists --------------------------------------------------------------------------------

void BlockManager::LruRemove(int32_t b) {
  Block& blk = blocks_[static_cast<size_t>(b)];
  if (blk.prev >= 0) blocks_[static_cast<size_t>(blk.prev)].next = blk.next;
  else lru_head_ = blk.next;
  if (blk.next >= 0) blocks_[static_cast<size_t>(blk.next)].prev = blk.prev;
  else lru_tail_ = blk.prev;
  blk.prev = blk.next = -1;
  blk.in_lru = false;
  --lru_size_;
}

void BlockManager::LruPushBack(int32_t b) {
  Block& blk = blocks_[static_cast<size_t>(b)];
  blk.prev = lru_tail_;
  blk.next = -1;
  if (lru_tail_ >= 0) blocks_[static_cast<size_t>(lru_tail_)].next = b;
  else lru_head_ = b;
  lru_tail_ = b;
  blk.in_lru = true;
  ++lru_size_;
}

void BlockManager::Uncache(int32_t b) {
  Block& blk = blocks_[static_cast<size_t>(b)];
  if (!blk.cached) return;
  auto it = hash_to_block_.find(blk.hash);
  if (it != hash_to_block_.end() && it->second == b) hash_to_block_.erase(it);
  blk.cached = false;
}

int32_t BlockManager::TakeFreshBlock() {
  int32_t b;
  if (!blank_.empty()) {
    b = blank_.back();
    blank_.pop_back();
  } else {
    b = lru_head_;
    LruRemove(b);
    Uncache(b);
    ++evictions_;
  }
  blocks_[static_cast<size_t>(b)].ref_count = 1;
  return b;
}

// ---- Lifecycle ---------------------------------------------------------------------------------

StatusOr<int64_t> BlockManager::Allocate(SeqId seq, std::span<const int32_t> tokens,
                                         CacheScope scope, int64_t num_new_slots,
                                         bool apply_watermark) {
  if (seqs_.count(seq) > 0) {
    return FailedPreconditionError("kv: sequence " + std::to_string(seq) + " is already allocated");
  }
  if (tokens.empty()) return InvalidArgumentError("kv: a sequence needs at least one token");
  if (num_new_slots < 0) {
    return InvalidArgumentError("kv: num_new_slots must be >= 0, got " +
                                std::to_string(num_new_slots));
  }
  uint64_t last_hash = kRootBlockHash;
  MatchPrefix(tokens, scope, &hits_scratch_, &last_hash);
  const int64_t cached = static_cast<int64_t>(hits_scratch_.size()) * block_size_;
  const int64_t fresh = BlocksFor(cached + num_new_slots) - static_cast<int64_t>(hits_scratch_.size());
  // Hit blocks that sit in the free LRU stop being free when taken.
  int64_t hits_free = 0;
  for (int32_t b : hits_scratch_) hits_free += blocks_[static_cast<size_t>(b)].ref_count == 0;
  const int64_t available = NumFreeBlocks() - hits_free;
  const int64_t reserve = apply_watermark ? watermark_blocks_ : 0;
  if (fresh > available - reserve) {
    return ResourceExhaustedError(
        "kv: sequence " + std::to_string(seq) + " needs " + std::to_string(fresh) +
        " new blocks; " + std::to_string(available) + " free" +
        (reserve > 0 ? " (" + std::to_string(reserve) + " held back by the watermark)" : ""));
  }

  Seq s;
  s.scope = scope;
  s.blocks.reserve(static_cast<size_t>(BlocksFor(cached + num_new_slots)));
  for (int32_t b : hits_scratch_) {
    Block& blk = blocks_[static_cast<size_t>(b)];
    if (blk.ref_count == 0) LruRemove(b);
    ++blk.ref_count;
    s.blocks.push_back(b);
  }
  for (int64_t i = 0; i < fresh; ++i) s.blocks.push_back(TakeFreshBlock());
  s.num_slots = cached + num_new_slots;
  s.num_cached_tokens = cached;
  s.num_hashed_blocks = static_cast<int64_t>(hits_scratch_.size());
  s.last_hash = last_hash;
  seqs_.emplace(seq, std::move(s));

  if (prefix_caching_) {
    prefix_queries_ += static_cast<int64_t>(tokens.size());
    prefix_hits_ += cached;
  }
  return cached;
}

int64_t BlockManager::BlocksToAppend(SeqId seq, int64_t n) const {
  auto it = seqs_.find(seq);
  if (it == seqs_.end() || n <= 0) return 0;
  const Seq& s = it->second;
  return BlocksFor(s.num_slots + n) - static_cast<int64_t>(s.blocks.size());
}

bool BlockManager::CanAppendSlots(SeqId seq, int64_t n) const {
  return Contains(seq) && BlocksToAppend(seq, n) <= NumFreeBlocks();
}

Status BlockManager::AppendSlots(SeqId seq, int64_t n) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return NotFoundError("kv: unknown sequence " + std::to_string(seq));
  if (n < 0) return InvalidArgumentError("kv: cannot append " + std::to_string(n) + " slots");
  const int64_t need = BlocksToAppend(seq, n);
  if (need > NumFreeBlocks()) {
    return ResourceExhaustedError("kv: sequence " + std::to_string(seq) + " needs " +
                                  std::to_string(need) + " new blocks; " +
                                  std::to_string(NumFreeBlocks()) + " free");
  }
  Seq& s = it->second;
  for (int64_t i = 0; i < need; ++i) s.blocks.push_back(TakeFreshBlock());
  s.num_slots += n;
  return OkStatus();
}

void BlockManager::MarkComputed(SeqId seq, std::span<const int32_t> tokens) {
  if (!prefix_caching_) return;
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  Seq& s = it->second;
  const int64_t n = std::min<int64_t>(static_cast<int64_t>(tokens.size()), s.num_slots);
  const int64_t full = n / block_size_;
  const size_t bs = static_cast<size_t>(block_size_);
  for (int64_t i = s.num_hashed_blocks; i < full; ++i) {
    std::span<const int32_t> chunk = tokens.subspan(static_cast<size_t>(i) * bs, bs);
    const uint64_t h = HashBlock(key_, s.last_hash, s.scope, chunk);
    const int32_t b = s.blocks[static_cast<size_t>(i)];
    Block& blk = blocks_[static_cast<size_t>(b)];
    // An identical block computed by another sequence (or a collision) keeps its entry; this
    // copy stays private. Either way the chain continues from the content's hash.
    if (!blk.cached && hash_to_block_.emplace(h, b).second) {
      blk.cached = true;
      blk.hash = h;
      blk.parent_hash = s.last_hash;
      blk.scope = s.scope;
      std::memcpy(block_tokens_.data() + static_cast<size_t>(b) * bs, chunk.data(),
                  bs * sizeof(int32_t));
    }
    s.last_hash = h;
    s.num_hashed_blocks = i + 1;
  }
}

void BlockManager::Free(SeqId seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  const std::vector<int32_t>& table = it->second.blocks;
  // Tail first: the LRU then reclaims a chain from its end, keeping its prefix usable longest.
  for (auto r = table.rbegin(); r != table.rend(); ++r) {
    Block& blk = blocks_[static_cast<size_t>(*r)];
    if (--blk.ref_count > 0) continue;
    if (blk.cached) LruPushBack(*r);
    else blank_.push_back(*r);
  }
  seqs_.erase(it);
}

bool BlockManager::CanAllocate(int64_t num_tokens) const {
  return BlocksFor(num_tokens) <= NumFreeBlocks() - watermark_blocks_;
}

void BlockManager::ResetPrefixCache() {
  while (lru_head_ >= 0) {
    const int32_t b = lru_head_;
    LruRemove(b);
    Uncache(b);
    blank_.push_back(b);
  }
  for (size_t b = 0; b < blocks_.size(); ++b) Uncache(static_cast<int32_t>(b));
  hash_to_block_.clear();
  // Live sequences keep their chain position: their later blocks are still entered under
  // content hashes, but lookups walk from the root and stop at the first (now uncached) block.
}

// ---- Queries -----------------------------------------------------------------------------------

std::span<const int32_t> BlockManager::BlockTable(SeqId seq) const {
  return seqs_.at(seq).blocks;
}

int64_t BlockManager::NumSlots(SeqId seq) const { return seqs_.at(seq).num_slots; }

int64_t BlockManager::NumCachedTokens(SeqId seq) const {
  return seqs_.at(seq).num_cached_tokens;
}

SlotLocation BlockManager::Locate(SeqId seq, int64_t p) const {
  const Seq& s = seqs_.at(seq);
  SlotLocation loc;
  loc.block = s.blocks[static_cast<size_t>(p / block_size_)];
  loc.offset = static_cast<int32_t>(p % block_size_);
  return loc;
}

int64_t BlockManager::SlotIndex(SeqId seq, int64_t p) const {
  const SlotLocation loc = Locate(seq, p);
  return static_cast<int64_t>(loc.block) * block_size_ + loc.offset;
}

void BlockManager::AppendSlotMapping(SeqId seq, int64_t start, int64_t count,
                                     std::vector<int64_t>* out) const {
  const Seq& s = seqs_.at(seq);
  for (int64_t p = start; p < start + count; ++p) {
    out->push_back(static_cast<int64_t>(s.blocks[static_cast<size_t>(p / block_size_)]) *
                       block_size_ +
                   p % block_size_);
  }
}

std::vector<int32_t> BlockManager::EvictionOrder() const {
  std::vector<int32_t> order;
  for (int32_t b = lru_head_; b >= 0; b = blocks_[static_cast<size_t>(b)].next) order.push_back(b);
  return order;
}

KvStats BlockManager::Stats() const {
  KvStats st;
  st.num_blocks = num_blocks_;
  st.num_free_blocks = NumFreeBlocks();
  st.num_used_blocks = num_blocks_ - st.num_free_blocks;
  st.num_cached_free_blocks = lru_size_;
  st.num_cached_blocks = static_cast<int32_t>(hash_to_block_.size());
  st.num_seqs = static_cast<int64_t>(seqs_.size());
  st.usage = static_cast<double>(st.num_used_blocks) / num_blocks_;
  st.allocated_slots = static_cast<int64_t>(st.num_used_blocks) * block_size_;
  // Only the last block of a sequence can be partly empty, and it is never shared, so the
  // per-sequence sums count no slot twice.
  for (const auto& [id, s] : seqs_) {
    const int64_t unfilled = static_cast<int64_t>(s.blocks.size()) * block_size_ - s.num_slots;
    st.unfilled_slots += unfilled;
    st.max_unfilled_slots_per_seq = std::max(st.max_unfilled_slots_per_seq, unfilled);
  }
  st.waste = st.allocated_slots > 0
                 ? static_cast<double>(st.unfilled_slots) / static_cast<double>(st.allocated_slots)
                 : 0.0;
  st.prefix_queries = prefix_queries_;
  st.prefix_hits = prefix_hits_;
  st.evictions = evictions_;
  return st;
}

Status BlockManager::CheckInvariants() const {
  auto fail = [](std::string what) { return InternalError("kv invariant: " + what); };
  const size_t n = blocks_.size();
  std::vector<int32_t> refs(n, 0);
  std::vector<int32_t> shared_seen(n, 0);
  for (const auto& [id, s] : seqs_) {
    if (static_cast<int64_t>(s.blocks.size()) != BlocksFor(s.num_slots)) {
      return fail("sequence " + std::to_string(id) + " has " + std::to_string(s.blocks.size()) +
                  " blocks for " + std::to_string(s.num_slots) + " slots");
    }
    for (int32_t b : s.blocks) {
      if (b < 0 || b >= num_blocks_) return fail("block id " + std::to_string(b) + " out of range");
      ++refs[static_cast<size_t>(b)];
    }
    // A sequence's last block may be partly filled: it must be private.
    if (!s.blocks.empty() && s.num_slots % block_size_ != 0 &&
        blocks_[static_cast<size_t>(s.blocks.back())].ref_count != 1) {
      return fail("partly filled last block " + std::to_string(s.blocks.back()) + " of sequence " +
                  std::to_string(id) + " is shared");
    }
  }
  std::vector<uint8_t> where(n, 0);  // 1 blank, 2 lru
  for (int32_t b : blank_) {
    if (where[static_cast<size_t>(b)] != 0) return fail("block " + std::to_string(b) + " twice in the blank list");
    where[static_cast<size_t>(b)] = 1;
  }
  int32_t count = 0;
  int32_t prev = -1;
  for (int32_t b = lru_head_; b >= 0; b = blocks_[static_cast<size_t>(b)].next) {
    if (++count > num_blocks_) return fail("LRU list has a cycle");
    if (where[static_cast<size_t>(b)] != 0) return fail("block " + std::to_string(b) + " both blank and in the LRU");
    where[static_cast<size_t>(b)] = 2;
    if (blocks_[static_cast<size_t>(b)].prev != prev) return fail("LRU back link broken at " + std::to_string(b));
    prev = b;
  }
  if (prev != lru_tail_ || count != lru_size_) return fail("LRU tail or size wrong");
  int32_t used = 0;
  for (size_t b = 0; b < n; ++b) {
    const Block& blk = blocks_[b];
    const std::string id = std::to_string(b);
    if (blk.ref_count != refs[b]) {
      return fail("block " + id + " ref_count " + std::to_string(blk.ref_count) + " but " +
                  std::to_string(refs[b]) + " table entries");
    }
    if (blk.ref_count > 0) {
      ++used;
      if (where[b] != 0) return fail("used block " + id + " is on a free list");
    } else if (where[b] == 0) {
      return fail("free block " + id + " is on no free list (leaked)");
    }
    if (where[b] == 2 && !blk.cached) return fail("uncached block " + id + " in the LRU");
    if (where[b] == 1 && blk.cached) return fail("cached block " + id + " in the blank list");
    if (blk.in_lru != (where[b] == 2)) return fail("in_lru flag of block " + id + " wrong");
    if (blk.cached) {
      auto it = hash_to_block_.find(blk.hash);
      if (it == hash_to_block_.end() || it->second != static_cast<int32_t>(b)) {
        return fail("cached block " + id + " missing from the hash map");
      }
    }
  }
  for (const auto& [h, b] : hash_to_block_) {
    if (!blocks_[static_cast<size_t>(b)].cached || blocks_[static_cast<size_t>(b)].hash != h) {
      return fail("hash map names block " + std::to_string(b) + " that does not carry the hash");
    }
  }
  if (used + static_cast<int32_t>(blank_.size()) + lru_size_ != num_blocks_) {
    return fail("used + free != num_blocks");
  }
  return OkStatus();
}

}  // namespace aicloud::engine
