// BlockManager: accounting, slot mapping, prefix sharing, scopes, LRU eviction, watermark,
// waste, and a seeded property test that drives random operations against a shadow KV pool.
#include "engine/kv/block_manager.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <vector>

#include "core/rng.h"

namespace aicloud::engine {
namespace {

constexpr SipKey kKey{1, 2};

BlockManager Make(int32_t num_blocks, double watermark = 0.0, bool prefix_caching = true,
                  int32_t block_size = 16) {
  BlockManagerOptions o;
  o.num_blocks = num_blocks;
  o.block_size = block_size;
  o.watermark = watermark;
  o.enable_prefix_caching = prefix_caching;
  o.hash_key = kKey;
  StatusOr<BlockManager> bm = BlockManager::Create(o);
  EXPECT_TRUE(bm.ok()) << bm.status();
  return std::move(*bm);
}

std::vector<int32_t> Seq(int32_t first, int n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), first);
  return v;
}

std::vector<int32_t> Concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::vector<int32_t> Table(const BlockManager& bm, SeqId s) {
  std::span<const int32_t> t = bm.BlockTable(s);
  return {t.begin(), t.end()};
}

// Allocates all of `tokens` (prompt prefill) and marks them computed, as a finished prefill does.
int64_t Prefill(BlockManager& bm, SeqId s, const std::vector<int32_t>& tokens, CacheScope scope = {}) {
  const int64_t cached = bm.CachedPrefixLength(tokens, scope);
  StatusOr<int64_t> got = bm.Allocate(s, tokens, scope, static_cast<int64_t>(tokens.size()) - cached);
  EXPECT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, cached);
  bm.MarkComputed(s, tokens);
  return *got;
}

TEST(BlockManagerTest, CreateValidates) {
  struct Case {
    int32_t blocks, block_size;
    double watermark;
    bool ok;
  };
  const Case cases[] = {{10, 16, 0.01, true}, {0, 16, 0.0, false}, {-1, 16, 0.0, false},
                        {10, 0, 0.0, false},  {10, 16, -0.1, false}, {10, 16, 1.0, false},
                        {1, 1, 0.0, true}};
  for (const Case& c : cases) {
    BlockManagerOptions o;
    o.num_blocks = c.blocks;
    o.block_size = c.block_size;
    o.watermark = c.watermark;
    StatusOr<BlockManager> bm = BlockManager::Create(o);
    EXPECT_EQ(bm.ok(), c.ok) << c.blocks << " " << c.block_size << " " << c.watermark;
    if (!bm.ok()) {
      EXPECT_EQ(bm.status().code(), StatusCode::kInvalidArgument);
    }
  }
}

TEST(BlockManagerTest, BudgetArithmetic) {
  // SmolLM2-135M: 30 layers, 3 KV heads, head_dim 64, F16.
  EXPECT_EQ(KvBytesPerBlock(30, 3, 64, 2, 16), 2 * 30 * 3 * 64 * 2 * 16);
  EXPECT_EQ(NumBlocksForBudget(1 << 30, KvBytesPerBlock(30, 3, 64, 2, 16)), (1 << 30) / 368640);
  EXPECT_EQ(NumBlocksForBudget(100, 0), 0);
  EXPECT_EQ(NumBlocksForBudget(-5, 10), 0);
  EXPECT_EQ(NumBlocksForBudget(int64_t{1} << 62, 1), INT32_MAX);
}

TEST(BlockManagerTest, AllocateAppendFreeAccounting) {
  BlockManager bm = Make(8);
  ASSERT_TRUE(bm.Allocate(1, Seq(0, 20), {}, 20).ok());
  EXPECT_EQ(bm.BlockTable(1).size(), 2u);
  EXPECT_EQ(bm.NumSlots(1), 20);
  EXPECT_EQ(bm.NumFreeBlocks(), 6);
  EXPECT_EQ(bm.BlocksToAppend(1, 12), 0);
  ASSERT_TRUE(bm.AppendSlots(1, 12).ok());  // fills block 2 exactly: no new block
  EXPECT_EQ(bm.BlockTable(1).size(), 2u);
  ASSERT_TRUE(bm.AppendSlots(1, 1).ok());  // the 33rd slot opens block 3
  EXPECT_EQ(bm.BlockTable(1).size(), 3u);
  EXPECT_EQ(bm.NumFreeBlocks(), 5);
  EXPECT_TRUE(bm.CheckInvariants().ok()) << bm.CheckInvariants();
  bm.Free(1);
  bm.Free(1);  // unknown now: a no-op, never a double free
  EXPECT_EQ(bm.NumFreeBlocks(), 8);
  EXPECT_FALSE(bm.Contains(1));
  EXPECT_TRUE(bm.CheckInvariants().ok()) << bm.CheckInvariants();
}

TEST(BlockManagerTest, ErrorsChangeNothing) {
  BlockManager bm = Make(4);
  ASSERT_TRUE(bm.Allocate(1, Seq(0, 40), {}, 40).ok());  // 3 blocks
  const KvStats before = bm.Stats();

  StatusOr<int64_t> dup = bm.Allocate(1, Seq(0, 4), {}, 4);
  EXPECT_EQ(dup.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(bm.Allocate(2, {}, {}, 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bm.Allocate(2, Seq(0, 4), {}, -1).status().code(), StatusCode::kInvalidArgument);
  StatusOr<int64_t> big = bm.Allocate(2, Seq(100, 17), {}, 17);  // needs 2, 1 free
  EXPECT_EQ(big.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(big.status().message().find("needs 2 new blocks; 1 free"), std::string::npos)
      << big.status();
  EXPECT_EQ(bm.AppendSlots(1, 9 + 16).code(), StatusCode::kResourceExhausted);  // needs 2
  EXPECT_FALSE(bm.CanAppendSlots(1, 25));
  EXPECT_TRUE(bm.CanAppendSlots(1, 24));
  EXPECT_EQ(bm.AppendSlots(7, 1).code(), StatusCode::kNotFound);
  EXPECT_FALSE(bm.CanAppendSlots(7, 1));
  EXPECT_EQ(bm.AppendSlots(1, -1).code(), StatusCode::kInvalidArgument);

  const KvStats after = bm.Stats();
  EXPECT_EQ(after.num_free_blocks, before.num_free_blocks);
  EXPECT_EQ(after.num_seqs, 1);
  EXPECT_EQ(bm.NumSlots(1), 40);
  EXPECT_EQ(after.prefix_queries, before.prefix_queries);  // failed attempts are not counted
  EXPECT_TRUE(bm.CheckInvariants().ok()) << bm.CheckInvariants();
}

TEST(BlockManagerTest, SlotMapping) {
  BlockManager bm = Make(8);
  // Take blocks 0 and 1 with another sequence so seq 2's blocks are not 0, 1, 2.
  ASSERT_TRUE(bm.Allocate(1, Seq(0, 32), {}, 32).ok());
  ASSERT_TRUE(bm.Allocate(2, Seq(0, 35), {}, 35).ok());
  const std::vector<int32_t> table = Table(bm, 2);
  ASSERT_EQ(table, (std::vector<int32_t>{2, 3, 4}));
  struct Case {
    int64_t pos;
    SlotLocation want;
  };
  const Case cases[] = {{0, {2, 0}}, {15, {2, 15}}, {16, {3, 0}}, {31, {3, 15}}, {34, {4, 2}}};
  for (const Case& c : cases) {
    EXPECT_EQ(bm.Locate(2, c.pos), c.want) << c.pos;
    EXPECT_EQ(bm.SlotIndex(2, c.pos), int64_t{c.want.block} * 16 + c.want.offset) << c.pos;
  }
  std::vector<int64_t> slots;
  bm.AppendSlotMapping(2, 14, 4, &slots);
  EXPECT_EQ(slots, (std::vector<int64_t>{2 * 16 + 14, 2 * 16 + 15, 3 * 16 + 0, 3 * 16 + 1}));
}

TEST(BlockManagerTest, CommonFortyTokenPrefixSharesTwoBlocks) {
  BlockManager bm = Make(16);
  const std::vector<int32_t> prefix = Seq(1000, 40);
  const std::vector<int32_t> a = Concat(prefix, Seq(1, 7));
  const std::vector<int32_t> b = Concat(prefix, Seq(500, 9));
  EXPECT_EQ(Prefill(bm, 1, a), 0);
  EXPECT_EQ(bm.CachedPrefixLength(b, {}), 32);
  EXPECT_EQ(Prefill(bm, 2, b), 32);
  EXPECT_EQ(bm.NumCachedTokens(2), 32);

  const std::vector<int32_t> ta = Table(bm, 1), tb = Table(bm, 2);
  ASSERT_EQ(ta.size(), 3u);
  ASSERT_EQ(tb.size(), 4u);  // 49 tokens
  EXPECT_EQ(ta[0], tb[0]);
  EXPECT_EQ(ta[1], tb[1]);
  EXPECT_NE(ta[2], tb[2]);  // block 3 holds 8 common tokens but is not full in a: never shared
  EXPECT_EQ(bm.RefCount(ta[0]), 2);
  EXPECT_EQ(bm.RefCount(ta[1]), 2);
  EXPECT_EQ(bm.RefCount(ta[2]), 1);
  EXPECT_EQ(bm.NumFreeBlocks(), 16 - 5);

  const KvStats st = bm.Stats();
  EXPECT_EQ(st.prefix_queries, 47 + 49);
  EXPECT_EQ(st.prefix_hits, 32);
  EXPECT_TRUE(bm.CheckInvariants().ok()) << bm.CheckInvariants();
}

TEST(BlockManagerTest, ScopesNeverShare) {
  const std::vector<int32_t> prompt = Seq(7, 50);
  struct Case {
    const char* name;
    CacheScope second;
    int64_t want_cached;
  };
  const Case cases[] = {
      {"same adapter", {3, 0}, 48},
      {"other adapter", {4, 0}, 0},
      {"base model", {0, 0}, 0},
      {"other salt", {3, 99}, 0},
  };
  for (const Case& c : cases) {
    BlockManager bm = Make(16);
    Prefill(bm, 1, prompt, CacheScope{3, 0});
    EXPECT_EQ(Prefill(bm, 2, prompt, c.second), c.want_cached) << c.name;
  }
}

TEST(BlockManagerTest, LastTokenIsAlwaysComputed) {
  BlockManager bm = Make(16);
  Prefill(bm, 1, Seq(0, 48));
  struct Case {
    int n;
    int64_t want;
  };
  // A prompt equal to cached content still recomputes its last token, in a private block.
  const Case cases[] = {{48, 32}, {49, 48}, {47, 32}, {33, 32}, {32, 16}, {17, 16}, {16, 0}, {1, 0}};
  for (const Case& c : cases) EXPECT_EQ(bm.CachedPrefixLength(Seq(0, c.n), {}), c.want) << c.n;
  EXPECT_EQ(Prefill(bm, 2, Seq(0, 48)), 32);
  const std::vector<int32_t> t1 = Table(bm, 1), t2 = Table(bm, 2);
  EXPECT_NE(t1[2], t2[2]);
  // Seq 2's recomputed block 3 duplicates seq 1's cached one: it stays private.
  EXPECT_FALSE(bm.IsCached(t2[2]));
  EXPECT_TRUE(bm.CheckInvariants().ok()) << bm.CheckInvariants();
}

TEST(BlockManagerTest, OnlyComputedBlocksAreShared) {
  BlockManager bm = Make(16);
  const std::vector<int32_t> p = Seq(0, 40);
  ASSERT_TRUE(bm.Allocate(1, p, {}, 40).ok());  // slots reserved, KV not written yet
  EXPECT_EQ(bm.CachedPrefixLength(p, {}), 0);
  bm.MarkComputed(1, std::span(p).first(20));  // first chunk done: one full block
  EXPECT_EQ(bm.CachedPrefixLength(p, {}), 16);
  bm.MarkComputed(1, p);
  EXPECT_EQ(bm.CachedPrefixLength(p, {}), 32);
}

TEST(BlockManagerTest, CachedBlocksAreReusedAfterFree) {
  BlockManager bm = Make(8);
  const std::vector<int32_t> p = Seq(0, 40);
  Prefill(bm, 1, p);
  const std::vector<int32_t> t1 = Table(bm, 1);
  bm.Free(1);
  EXPECT_EQ(bm.NumFreeBlocks(), 8);
  EXPECT_EQ(bm.Stats().num_cached_free_blocks, 2);
  EXPECT_EQ(bm.EvictionOrder(), (std::vector<int32_t>{t1[1], t1[0]}));  // chain tail first

  EXPECT_EQ(Prefill(bm, 2, p), 32);
  const std::vector<int32_t> t2 = Table(bm, 2);
  EXPECT_EQ(t2[0], t1[0]);
  EXPECT_EQ(t2[1], t1[1]);
  EXPECT_EQ(bm.RefCount(t2[0]), 1);
  EXPECT_EQ(bm.Stats().num_cached_free_blocks, 0);
  EXPECT_EQ(bm.NumFreeBlocks(), 5);
  EXPECT_EQ(bm.Stats().evictions, 0);
  EXPECT_TRUE(bm.CheckInvariants().ok()) << bm.CheckInvariants();
}

TEST(BlockManagerTest, LruEvictsOldestFreedFirstAndBlankBeforeCached) {
  BlockManager bm = Make(5);
  const std::vector<int32_t> a = Seq(0, 33), b = Seq(100, 33);
  Prefill(bm, 1, a);  // blocks 0 1 (cached) + 2 (blank when freed)
  const std::vector<int32_t> ta = Table(bm, 1);
  bm.Free(1);
  Prefill(bm, 2, b);  // takes blank 2 first, then 3 and 4: no eviction
  EXPECT_EQ(bm.Stats().evictions, 0);
  const std::vector<int32_t> tb = Table(bm, 2);
  bm.Free(2);
  // a freed before b: a's blocks go first, each chain from its tail.
  EXPECT_EQ(bm.EvictionOrder(), (std::vector<int32_t>{ta[1], ta[0], tb[1], tb[0]}));
  EXPECT_EQ(bm.Stats().num_cached_free_blocks, 4);

  ASSERT_TRUE(bm.Allocate(3, Seq(900, 16), {}, 16).ok());  // the one blank block
  EXPECT_EQ(bm.Stats().evictions, 0);
  ASSERT_TRUE(bm.Allocate(4, Seq(950, 16), {}, 16).ok());  // evicts a's tail block
  EXPECT_EQ(bm.Stats().evictions, 1);
  EXPECT_EQ(Table(bm, 4)[0], ta[1]);
  EXPECT_EQ(bm.CachedPrefixLength(a, {}), 16);  // a's first block survives
  EXPECT_EQ(bm.CachedPrefixLength(b, {}), 32);

  // A hit refreshes: b's blocks are taken and freed again, moving behind a's survivor.
  bm.Free(3);  // a blank block for b's private tail
  Prefill(bm, 5, b);
  EXPECT_EQ(bm.Stats().evictions, 1);
  bm.Free(5);
  EXPECT_EQ(bm.EvictionOrder().front(), ta[0]);
  EXPECT_TRUE(bm.CheckInvariants().ok()) << bm.CheckInvariants();
}

TEST(BlockManagerTest, HitsInTheFreeListAreNotCountedTwice) {
  BlockManager bm = Make(3);
  const std::vector<int32_t> a = Seq(0, 33);
  Prefill(bm, 1, a);
  bm.Free(1);  // 2 cached free + 1 blank
  // Sharing both cached blocks leaves one free block for the rest.
  std::vector<int32_t> b = Concat(Seq(0, 32), Seq(77, 10));
  EXPECT_EQ(Prefill(bm, 2, b), 32);
  EXPECT_EQ(bm.NumFreeBlocks(), 0);
  bm.Free(2);
  // 17 uncached tokens need 2 fresh blocks; with the 2 hits that is all 3 blocks of the pool
  // plus one: must fail even though 3 blocks are "free".
  std::vector<int32_t> c = Concat(Seq(0, 32), Seq(300, 18));
  EXPECT_EQ(bm.Allocate(3, c, {}, 18).status().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(bm.CheckInvariants().ok()) << bm.CheckInvariants();
}

TEST(BlockManagerTest, Watermark) {
  BlockManager bm = Make(100, 0.1);
  EXPECT_EQ(bm.watermark_blocks(), 10);
  EXPECT_TRUE(bm.CanAllocate(90 * 16));
  EXPECT_FALSE(bm.CanAllocate(90 * 16 + 1));
  EXPECT_EQ(bm.Allocate(1, Seq(0, 4), {}, 91 * 16).status().code(),
            StatusCode::kResourceExhausted);
  ASSERT_TRUE(bm.Allocate(1, Seq(0, 4), {}, 91 * 16, /*apply_watermark=*/false).ok());
  // Growing a running sequence ignores the watermark: it may use the reserve.
  EXPECT_TRUE(bm.AppendSlots(1, 9 * 16).ok());
  EXPECT_EQ(bm.NumFreeBlocks(), 0);
}

TEST(BlockManagerTest, PrefixCachingOff) {
  BlockManager bm = Make(16, 0.0, /*prefix_caching=*/false);
  Prefill(bm, 1, Seq(0, 40));
  EXPECT_EQ(Prefill(bm, 2, Seq(0, 40)), 0);
  bm.Free(1);
  EXPECT_EQ(bm.Stats().num_cached_free_blocks, 0);
  EXPECT_EQ(bm.Stats().prefix_queries, 0);
  EXPECT_TRUE(bm.CheckInvariants().ok()) << bm.CheckInvariants();
}

TEST(BlockManagerTest, ResetPrefixCache) {
  BlockManager bm = Make(16);
  Prefill(bm, 1, Seq(0, 40));
  Prefill(bm, 2, Seq(0, 40));  // shares 2 blocks
  bm.Free(1);
  Prefill(bm, 3, Seq(500, 40));
  bm.Free(3);
  bm.ResetPrefixCache();
  EXPECT_EQ(bm.CachedPrefixLength(Seq(0, 40), {}), 0);
  EXPECT_EQ(bm.Stats().num_cached_blocks, 0);
  EXPECT_EQ(bm.Stats().num_cached_free_blocks, 0);
  EXPECT_TRUE(bm.CheckInvariants().ok()) << bm.CheckInvariants();
  bm.Free(2);
  EXPECT_EQ(bm.NumFreeBlocks(), 16);
  EXPECT_TRUE(bm.CheckInvariants().ok()) << bm.CheckInvariants();
}

TEST(BlockManagerTest, WasteIsUnderOneBlockPerSequence) {
  BlockManager bm = Make(4096);
  Rng rng(5);
  int64_t total_slots = 0;
  for (SeqId s = 0; s < 200; ++s) {
    const int n = 1 + static_cast<int>(rng.Uniform(300));
    ASSERT_TRUE(bm.Allocate(s, Seq(static_cast<int32_t>(s) * 1000, n), {}, n).ok());
    const int extra = static_cast<int>(rng.Uniform(50));
    ASSERT_TRUE(bm.AppendSlots(s, extra).ok());
    total_slots += n + extra;
  }
  const KvStats st = bm.Stats();
  EXPECT_LT(st.max_unfilled_slots_per_seq, 16);
  EXPECT_EQ(st.allocated_slots, int64_t{st.num_used_blocks} * 16);
  EXPECT_EQ(st.allocated_slots - st.unfilled_slots, total_slots);
  EXPECT_DOUBLE_EQ(st.waste, static_cast<double>(st.unfilled_slots) / st.allocated_slots);
  EXPECT_LT(st.unfilled_slots, 200 * 16);
  // Expected ~7.5 slots per sequence over ~165-token sequences: a few percent, as the
  // PagedAttention paper reports (< 4% of a GPU's KV memory with longer sequences).
  EXPECT_LT(st.waste, 0.08);
  EXPECT_DOUBLE_EQ(st.usage, static_cast<double>(st.num_used_blocks) / 4096);
}

// Random operations on a small pool against a shadow KV pool: every slot a sequence writes is
// stamped with (scope, token, position); a sequence that shares cached blocks must find its own
// tokens there; nothing is written into a block another sequence references; invariants hold
// after every step; freeing everything returns every block.
TEST(BlockManagerTest, RandomOperationsKeepInvariants) {
  struct Stamp {
    int32_t adapter = -1;
    int32_t token = -1;
    int64_t pos = -1;
  };
  struct Live {
    std::vector<int32_t> tokens;  // all known tokens (prompt + generated)
    int64_t computed = 0;         // KV written for [0, computed)
    CacheScope scope;
  };
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    const int32_t num_blocks = 6 + static_cast<int32_t>(seed % 20);
    const int32_t bs = seed % 3 == 0 ? 4 : 16;
    BlockManager bm = Make(num_blocks, seed % 4 == 0 ? 0.1 : 0.0, seed % 7 != 0, bs);
    Rng rng(seed);
    std::vector<Stamp> pool(static_cast<size_t>(num_blocks) * static_cast<size_t>(bs));
    std::map<SeqId, Live> live;
    // A few prompt families so prefixes repeat.
    std::vector<std::vector<int32_t>> families;
    for (int f = 0; f < 3; ++f) families.push_back(Seq(f * 10000, 120));
    SeqId next_id = 1;
    int64_t total_hits = 0;

    auto write = [&](SeqId s, Live& l, int64_t upto) {
      for (int64_t p = l.computed; p < upto; ++p) {
        const SlotLocation loc = bm.Locate(s, p);
        ASSERT_EQ(bm.RefCount(loc.block), 1) << "write into shared block " << loc.block;
        pool[static_cast<size_t>(bm.SlotIndex(s, p))] =
            Stamp{l.scope.adapter_id, l.tokens[static_cast<size_t>(p)], p};
      }
      l.computed = upto;
      bm.MarkComputed(s, std::span(l.tokens).first(static_cast<size_t>(upto)));
    };

    for (int op = 0; op < 400; ++op) {
      const uint64_t kind = rng.Uniform(10);
      if (kind < 4) {  // new sequence: a family prefix plus a random tail
        Live l;
        l.scope.adapter_id = static_cast<int32_t>(rng.Uniform(2));
        const auto& fam = families[rng.Uniform(families.size())];
        const size_t keep = 1 + rng.Uniform(fam.size());
        l.tokens.assign(fam.begin(), fam.begin() + static_cast<long>(keep));
        const size_t tail = rng.Uniform(20);
        for (size_t i = 0; i < tail; ++i) l.tokens.push_back(static_cast<int32_t>(50000 + rng.Uniform(5)));
        const int64_t cached = bm.CachedPrefixLength(l.tokens, l.scope);
        const int64_t rest = static_cast<int64_t>(l.tokens.size()) - cached;
        const int64_t chunk = 1 + static_cast<int64_t>(rng.Uniform(static_cast<uint64_t>(rest)));
        const SeqId s = next_id++;
        StatusOr<int64_t> got = bm.Allocate(s, l.tokens, l.scope, chunk, rng.Uniform(2) == 0);
        if (!got.ok()) {
          ASSERT_EQ(got.status().code(), StatusCode::kResourceExhausted) << got.status();
          ASSERT_FALSE(bm.Contains(s));
        } else {
          ASSERT_EQ(*got, cached);
          total_hits += cached;
          // Shared KV must be exactly this sequence's tokens at those positions.
          for (int64_t p = 0; p < cached; ++p) {
            const Stamp& st = pool[static_cast<size_t>(bm.SlotIndex(s, p))];
            ASSERT_EQ(st.adapter, l.scope.adapter_id);
            ASSERT_EQ(st.token, l.tokens[static_cast<size_t>(p)]);
            ASSERT_EQ(st.pos, p);
          }
          l.computed = cached;
          auto& ref = live[s] = std::move(l);
          write(s, ref, cached + chunk);
        }
      } else if (kind < 8 && !live.empty()) {  // grow: the rest of a prefill, or a decode
        auto it = live.begin();
        std::advance(it, static_cast<long>(rng.Uniform(live.size())));
        Live& l = it->second;
        if (l.computed == static_cast<int64_t>(l.tokens.size())) {
          l.tokens.push_back(static_cast<int32_t>(60000 + rng.Uniform(3)));  // a sampled token
        }
        const int64_t want = static_cast<int64_t>(l.tokens.size()) - l.computed;
        const int64_t n = 1 + static_cast<int64_t>(rng.Uniform(static_cast<uint64_t>(want)));
        const int64_t have = bm.NumSlots(it->first) - l.computed;
        Status st = bm.AppendSlots(it->first, std::max<int64_t>(0, n - have));
        if (!st.ok()) {
          ASSERT_EQ(st.code(), StatusCode::kResourceExhausted) << st;
        } else {
          write(it->first, l, l.computed + n);
        }
      } else if (!live.empty()) {  // finish or preempt
        auto it = live.begin();
        std::advance(it, static_cast<long>(rng.Uniform(live.size())));
        bm.Free(it->first);
        live.erase(it);
      }
      if (rng.Uniform(200) == 0) bm.ResetPrefixCache();
      const Status inv = bm.CheckInvariants();
      ASSERT_TRUE(inv.ok()) << "op " << op << ": " << inv;
      const KvStats st = bm.Stats();
      ASSERT_EQ(st.num_used_blocks + st.num_free_blocks, num_blocks);
      ASSERT_LT(st.max_unfilled_slots_per_seq, bs);
    }
    if (seed % 7 != 0) {
      EXPECT_GT(total_hits, 0) << "the test should exercise sharing";
    }
    for (auto& [s, l] : live) bm.Free(s);
    EXPECT_EQ(bm.NumFreeBlocks(), num_blocks);
    EXPECT_EQ(bm.Stats().num_used_blocks, 0);
    EXPECT_TRUE(bm.CheckInvariants().ok()) << bm.CheckInvariants();
  }
}

}  // namespace
}  // namespace aicloud::engine
