// BlockManager: the bookkeeping of the paged KV cache. The cache is a fixed pool of N physical
// blocks of `block_size` token slots (16 by default, vLLM's CacheConfig default); every sequence
// has a block table mapping its logical blocks (position / block_size) to physical ones. The
// manager owns no KV memory: it hands out block ids and slots, and the model runner writes K/V
// there (kernels/attention.h: StoreKv, PagedAttention).
//
//   BlockManagerOptions o;
//   o.num_blocks = NumBlocksForBudget(int64_t{8} << 30, KvBytesPerBlock(30, 3, 64, 2, 16));
//   StatusOr<BlockManager> bm = BlockManager::Create(o);
//   // A new sequence: share the cached prefix, get fresh blocks for the first chunk.
//   StatusOr<int64_t> cached = bm->Allocate(seq, prompt, scope, /*num_new_slots=*/chunk);
//   // ... runner computes positions [*cached, *cached + chunk), writing K/V at
//   //     bm->SlotIndex(seq, p); attention reads bm->BlockTable(seq) ...
//   bm->MarkComputed(seq, first_tokens);      // full blocks now enter the prefix cache
//   bm->AppendSlots(seq, 1);                  // each decode step: a new block when one fills
//   bm->Free(seq);                            // finished or preempted
//
// Prefix caching (vLLM's automatic prefix caching, docs/design/prefix_caching.md): a full block
// whose KV is computed is named by a hash chain, hash(parent block's hash, scope, its token ids)
// (block_hash.h), and entered in a hash -> block map. A new sequence whose tokens start with
// cached full blocks shares them (reference count + 1) and computes only the rest;
// Allocate returns how many tokens were found so the runner starts there. When the last
// reference goes, a cached block is not wiped: it waits in an LRU list of free cached blocks
// and is reclaimed, oldest first, only when a fresh block is needed and no never-cached free
// block is left. Hits are verified against the block's stored token ids, scope and parent hash,
// so a hash collision costs a miss, never wrong KV.
//
// Sharing rules that keep shared KV read-only:
//   - Only full blocks whose KV is computed (MarkComputed) are ever shared.
//   - At most (tokens - 1) / block_size blocks of a new sequence are taken from the cache: the
//     last token is always computed, because its logits are needed, and it always lands in a
//     private block. A sequence writes only at positions >= its computed length, which lie in
//     blocks it allocated itself, so a shared block is never written.
//
// Memory waste (the PagedAttention paper's metric): only a sequence's last block can be
// partly empty, so unfilled slots are < block_size per sequence (Stats()).
//
// Thread-safety: not thread-safe; one owner (the scheduler on the engine thread) calls
// everything. Movable, not copyable.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "engine/kv/block_hash.h"

namespace aicloud::engine {

// Identifies a sequence to the block manager (the scheduler uses its request id).
using SeqId = uint64_t;

// Bytes of KV one block holds over all layers: K and V (the 2), each layers x kv_heads x
// head_dim values of dtype_bytes, per token, times block_size tokens.
int64_t KvBytesPerBlock(int64_t layers, int64_t kv_heads, int64_t head_dim, int64_t dtype_bytes,
                        int64_t block_size);

// Blocks that fit in a byte budget: floor(budget / bytes_per_block), capped at INT32_MAX.
// 0 for a non-positive bytes_per_block.
int32_t NumBlocksForBudget(int64_t budget_bytes, int64_t bytes_per_block);

struct BlockManagerOptions {
  int32_t num_blocks = 0;  // physical blocks in the pool; > 0
  int32_t block_size = 16;  // token slots per block; > 0
  // Fraction of the pool that Allocate keeps free when asked to (a new sequence joining running
  // ones), so admitting it does not force a preemption on the very next decode step (vLLM V0's
  // default 0.01). In [0, 1).
  double watermark = 0.01;
  bool enable_prefix_caching = true;
  // Key of the block hash; a random one (RandomSipKey) when absent.
  std::optional<SipKey> hash_key;
};

// Where one token position of a sequence lives in the pool.
struct SlotLocation {
  int32_t block = -1;   // physical block id
  int32_t offset = 0;   // slot within the block, [0, block_size)
  bool operator==(const SlotLocation&) const = default;
};

// A snapshot for metrics and tests.
struct KvStats {
  int32_t num_blocks = 0;
  int32_t num_used_blocks = 0;         // referenced by at least one sequence
  int32_t num_free_blocks = 0;         // not referenced; includes cached ones
  int32_t num_cached_free_blocks = 0;  // free but still holding reusable KV (evictable)
  int32_t num_cached_blocks = 0;       // in the hash map, used or free
  int64_t num_seqs = 0;
  double usage = 0;                    // used / total (vllm:kv_cache_usage_perc)
  int64_t allocated_slots = 0;         // used blocks x block_size
  int64_t unfilled_slots = 0;          // allocated slots no position of any sequence maps to
  double waste = 0;                    // unfilled / allocated (0 when nothing is allocated)
  int64_t max_unfilled_slots_per_seq = 0;  // always < block_size
  int64_t prefix_queries = 0;          // tokens looked up by Allocate (vllm:prefix_cache_queries)
  int64_t prefix_hits = 0;             // of which were cached (vllm:prefix_cache_hits)
  int64_t evictions = 0;               // cached blocks reclaimed for new data
};

class BlockManager {
 public:
  // INVALID_ARGUMENT for num_blocks or block_size <= 0, or a watermark outside [0, 1).
  static StatusOr<BlockManager> Create(const BlockManagerOptions& options);

  BlockManager(BlockManager&&) noexcept = default;
  BlockManager& operator=(BlockManager&&) noexcept = default;
  BlockManager(const BlockManager&) = delete;
  BlockManager& operator=(const BlockManager&) = delete;

  int32_t block_size() const { return block_size_; }
  int32_t num_blocks() const { return num_blocks_; }
  // Blocks needed to hold `num_tokens` slots: ceil(num_tokens / block_size).
  int64_t BlocksFor(int64_t num_tokens) const;
  // Blocks kept free by the watermark.
  int32_t watermark_blocks() const { return watermark_blocks_; }

  // ---- Sequence lifecycle -------------------------------------------------------------------

  // How many leading tokens of `tokens` a new sequence with this scope would find cached: a
  // multiple of block_size, at most tokens.size() - 1. No side effects (stats included).
  int64_t CachedPrefixLength(std::span<const int32_t> tokens, CacheScope scope) const;

  // Starts `seq`: shares the cached prefix blocks of `tokens` (CachedPrefixLength of them), then
  // allocates fresh blocks so that positions [0, cached + num_new_slots) have a slot. Returns the
  // number of cached tokens: the runner computes from that position on. `tokens` are all the
  // token ids the sequence has now (prompt, plus generated ones when it resumes after a
  // preemption); they are only read for the lookup.
  // RESOURCE_EXHAUSTED, changing nothing, when the free blocks (cached ones included) cannot
  // cover the fresh blocks, or with `apply_watermark` would leave fewer than watermark_blocks()
  // free. FAILED_PRECONDITION if `seq` is live; INVALID_ARGUMENT for an empty `tokens`, or
  // num_new_slots < 0 or larger than the uncached tail.
  StatusOr<int64_t> Allocate(SeqId seq, std::span<const int32_t> tokens, CacheScope scope,
                             int64_t num_new_slots, bool apply_watermark = true);

  // Extends `seq` by `n` slots, taking a fresh block whenever its last block fills (one per
  // block_size slots). RESOURCE_EXHAUSTED, changing nothing, when the pool is out of blocks;
  // NOT_FOUND for an unknown seq.
  Status AppendSlots(SeqId seq, int64_t n);
  // Whether AppendSlots(seq, n) would succeed.
  bool CanAppendSlots(SeqId seq, int64_t n) const;
  // Fresh blocks AppendSlots(seq, n) would take.
  int64_t BlocksToAppend(SeqId seq, int64_t n) const;

  // Records that the KV of the first tokens.size() positions of `seq` is written, `tokens` being
  // the sequence's token ids at those positions. Every full block among them that is not yet
  // named is hashed and entered in the prefix cache, unless an identical block already is (then
  // this copy stays private and is plainly freed later). Cheap to call every step: only blocks
  // not hashed before are touched.
  // REQUIRES: seq live; tokens.size() <= NumSlots(seq); tokens extend those of earlier calls.
  void MarkComputed(SeqId seq, std::span<const int32_t> tokens);

  // Drops `seq`'s references. A block no one references any more goes to the free list: cached
  // blocks to the LRU end (a sequence's last block first, so a chain is reclaimed from its tail
  // and a surviving prefix stays usable), uncached ones to the pool of blank blocks that are
  // handed out before any cached block is evicted. No-op for an unknown seq.
  void Free(SeqId seq);

  // Whether a new sequence of `num_tokens` slots, with no cache hit, fits now above the
  // watermark.
  bool CanAllocate(int64_t num_tokens) const;

  // Forgets every cached block (used ones stay allocated but will not be shared again; free
  // ones become blank). For a model swap, or an adapter reloaded under an old id; call it when
  // no sequence of the old weights is still running, or one still prefilling could enter a
  // first block again. Giving every loaded adapter version a fresh id avoids the question.
  void ResetPrefixCache();

  // ---- Queries --------------------------------------------------------------------------------

  bool Contains(SeqId seq) const { return seqs_.count(seq) > 0; }
  // Logical block i -> physical block id. Valid until the next call that changes `seq`.
  // REQUIRES: Contains(seq).
  std::span<const int32_t> BlockTable(SeqId seq) const;
  // Positions [0, NumSlots) of `seq` have a slot. REQUIRES: Contains(seq).
  int64_t NumSlots(SeqId seq) const;
  // Tokens found in the prefix cache when `seq` was allocated. REQUIRES: Contains(seq).
  int64_t NumCachedTokens(SeqId seq) const;
  // Where position p of `seq` lives. REQUIRES: Contains(seq), 0 <= p < NumSlots(seq).
  SlotLocation Locate(SeqId seq, int64_t p) const;
  // The flat slot index block * block_size + offset that StoreKv takes.
  int64_t SlotIndex(SeqId seq, int64_t p) const;
  // Appends SlotIndex(seq, p) for p in [start, start + count) to *out.
  // REQUIRES: start + count <= NumSlots(seq).
  void AppendSlotMapping(SeqId seq, int64_t start, int64_t count, std::vector<int64_t>* out) const;

  // Free blocks, cached ones included (they are reclaimable).
  int32_t NumFreeBlocks() const { return static_cast<int32_t>(blank_.size()) + lru_size_; }
  // References to physical block b (tests and debugging).
  int32_t RefCount(int32_t block) const { return blocks_[static_cast<size_t>(block)].ref_count; }
  // Whether block b currently names cached content.
  bool IsCached(int32_t block) const { return blocks_[static_cast<size_t>(block)].cached; }
  // The free cached blocks, next to be evicted first.
  std::vector<int32_t> EvictionOrder() const;

  KvStats Stats() const;

  // Checks every internal invariant (O(blocks + table entries)); INTERNAL naming the first that
  // fails. For tests and debug builds:
  //   - each block's reference count equals the number of block-table entries naming it;
  //   - every block is exactly one of: used (count > 0), blank free, cached free (in the LRU);
  //   - the LRU list is well linked; the hash map and the cached flags agree;
  //   - a partly filled last block is private; each table covers exactly its sequence's slots.
  Status CheckInvariants() const;

 private:
  struct Block {
    int32_t ref_count = 0;
    bool cached = false;       // named in hash_to_block_ with `hash`
    bool in_lru = false;
    uint64_t hash = 0;
    uint64_t parent_hash = 0;  // verified on hits, with scope and tokens
    CacheScope scope;
    int32_t prev = -1;         // LRU links (free cached blocks only)
    int32_t next = -1;
  };
  struct Seq {
    std::vector<int32_t> blocks;
    int64_t num_slots = 0;
    int64_t num_cached_tokens = 0;
    CacheScope scope;
    int64_t num_hashed_blocks = 0;  // blocks[0, n) carry the chain's hashes
    uint64_t last_hash = kRootBlockHash;  // hash of blocks[num_hashed_blocks - 1]
  };

  explicit BlockManager(const BlockManagerOptions& options);

  // Fills hits with the cached blocks a sequence of `tokens` would share, and the chain hash of
  // the last one in *last_hash.
  void MatchPrefix(std::span<const int32_t> tokens, CacheScope scope, std::vector<int32_t>* hits,
                   uint64_t* last_hash) const;
  // A block for new data: a blank one, else the LRU head evicted. REQUIRES: NumFreeBlocks() > 0.
  int32_t TakeFreshBlock();
  void LruRemove(int32_t b);
  void LruPushBack(int32_t b);
  void Uncache(int32_t b);
  const int32_t* TokensOf(int32_t b) const {
    return block_tokens_.data() + static_cast<size_t>(b) * static_cast<size_t>(block_size_);
  }

  int32_t num_blocks_ = 0;
  int32_t block_size_ = 16;
  int32_t watermark_blocks_ = 0;
  bool prefix_caching_ = true;
  SipKey key_;

  std::vector<Block> blocks_;
  std::vector<int32_t> block_tokens_;  // token ids of cached blocks, block_size per block
  std::vector<int32_t> blank_;         // free, never-cached (or uncached) blocks; a stack
  int32_t lru_head_ = -1;              // free cached blocks, least recently freed first
  int32_t lru_tail_ = -1;
  int32_t lru_size_ = 0;
  std::unordered_map<uint64_t, int32_t> hash_to_block_;
  std::unordered_map<SeqId, Seq> seqs_;

  int64_t prefix_queries_ = 0;
  int64_t prefix_hits_ = 0;
  int64_t evictions_ = 0;

  // Scratch for MatchPrefix in Allocate.
  std::vector<int32_t> hits_scratch_;
};

}  // namespace aicloud::engine
