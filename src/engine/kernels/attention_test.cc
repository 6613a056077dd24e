#include "engine/kernels/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "engine/kernels/test_util.h"

namespace aicloud::engine::kernels {
namespace {

using testing::RandomVector;
using testing::TestIsas;

// A KV cache filled with NaN (so any read of a slot that was never written poisons the result),
// sequences with random block tables, and each sequence's K/V also kept contiguous
// [position][kv_head][dim], as the values the cache really holds (rounded to F16 if it is F16).
struct Fixture {
  KvCacheView kv;
  std::vector<float> k32, v32;
  std::vector<uint16_t> k16, v16;
  std::vector<std::vector<int32_t>> tables;
  std::vector<std::vector<float>> seq_k, seq_v;

  Fixture(DType type, int64_t block_size, int64_t kv_heads, int64_t head_dim,
          const std::vector<int64_t>& lengths, uint32_t seed) {
    int64_t blocks_needed = 0;
    for (int64_t len : lengths) blocks_needed += (len + block_size - 1) / block_size;
    kv = {type, blocks_needed + 3, block_size, kv_heads, head_dim, nullptr, nullptr};
    const size_t elems = static_cast<size_t>(kv.num_blocks * kv.BlockElements());
    if (type == DType::kF16) {
      k16.assign(elems, 0x7e00);  // NaN
      v16.assign(elems, 0x7e00);
      kv.k = k16.data();
      kv.v = v16.data();
    } else {
      k32.assign(elems, std::numeric_limits<float>::quiet_NaN());
      v32.assign(elems, std::numeric_limits<float>::quiet_NaN());
      kv.k = k32.data();
      kv.v = v32.data();
    }
    // Hand out the blocks in a random order so tables are scattered over the pool.
    std::vector<int32_t> ids(static_cast<size_t>(kv.num_blocks));
    std::iota(ids.begin(), ids.end(), 0);
    std::mt19937 rng(seed);
    std::shuffle(ids.begin(), ids.end(), rng);
    size_t next = 0;
    const int64_t row = kv_heads * head_dim;
    for (size_t s = 0; s < lengths.size(); ++s) {
      const int64_t len = lengths[s];
      std::vector<int32_t> table;
      for (int64_t b = 0; b < (len + block_size - 1) / block_size; ++b) table.push_back(ids[next++]);
      auto k = RandomVector(len * row, seed * 31 + static_cast<uint32_t>(s), 1.0f);
      auto v = RandomVector(len * row, seed * 37 + static_cast<uint32_t>(s), 1.0f);
      std::vector<int64_t> slots(static_cast<size_t>(len));
      for (int64_t p = 0; p < len; ++p) slots[p] = table[p / block_size] * block_size + p % block_size;
      StoreKv(kv, slots.data(), k.data(), row, v.data(), row, len);
      if (type == DType::kF16) {
        for (float& f : k) f = HalfToFloat(FloatToHalf(f));
        for (float& f : v) f = HalfToFloat(FloatToHalf(f));
      }
      tables.push_back(std::move(table));
      seq_k.push_back(std::move(k));
      seq_v.push_back(std::move(v));
    }
  }
};

// Attention computed from the contiguous copies, in double.
std::vector<float> ContiguousReference(const Fixture& f, const std::vector<int>& seq_of_token,
                                       const std::vector<AttentionToken>& toks, const float* q,
                                       int64_t heads, float scale) {
  const int64_t dim = f.kv.head_dim, row = f.kv.kv_heads * dim, group = heads / f.kv.kv_heads;
  std::vector<float> out(toks.size() * heads * dim);
  for (size_t t = 0; t < toks.size(); ++t) {
    const auto& k = f.seq_k[seq_of_token[t]];
    const auto& v = f.seq_v[seq_of_token[t]];
    for (int64_t h = 0; h < heads; ++h) {
      const float* qh = q + t * heads * dim + h * dim;
      const int64_t kvh = h / group;
      std::vector<double> p(toks[t].context_len);
      double mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j < toks[t].context_len; ++j) {
        double s = 0;
        for (int64_t d = 0; d < dim; ++d) s += double{qh[d]} * k[j * row + kvh * dim + d];
        p[j] = s * scale;
        mx = std::max(mx, p[j]);
      }
      for (double& x : p) sum += (x = std::exp(x - mx));
      for (int64_t d = 0; d < dim; ++d) {
        double acc = 0;
        for (int64_t j = 0; j < toks[t].context_len; ++j) acc += p[j] * v[j * row + kvh * dim + d];
        out[t * heads * dim + h * dim + d] = static_cast<float>(acc / sum);
      }
    }
  }
  return out;
}

struct Case {
  DType type;
  int64_t block_size, kv_heads, group, head_dim;
};

// The output is a convex combination of V rows (|v| <~ 4 here), computed in float from float
// scores: 5e-6 absolute covers the float rounding of 64-256-term dot products, exp and sums
// with margin (observed worst errors are below 1e-6) while any indexing, masking or GQA
// mistake is off by O(0.1-1).
constexpr float kTol = 5e-6f;

void RunCase(const Case& c, uint32_t seed) {
  SCOPED_TRACE(::testing::Message() << DTypeName(c.type) << " block=" << c.block_size
                                    << " kv_heads=" << c.kv_heads << " group=" << c.group
                                    << " dim=" << c.head_dim);
  const int64_t heads = c.kv_heads * c.group;
  // Sequences: a long one being prefilled in a chunk, several decoding, one of length 1.
  const std::vector<int64_t> lengths = {70, 1, 33, 16, 17, 5, 200};
  Fixture f(c.type, c.block_size, c.kv_heads, c.head_dim, lengths, seed);
  std::vector<AttentionToken> toks;
  std::vector<int> seq_of_token;
  // Prefill chunk of sequence 0: its positions 60..69 (contexts 61..70).
  for (int32_t ctx = 61; ctx <= 70; ++ctx) {
    toks.push_back({f.tables[0], ctx});
    seq_of_token.push_back(0);
  }
  // One decode token per other sequence, at its last position.
  for (size_t s = 1; s < lengths.size(); ++s) {
    toks.push_back({f.tables[s], static_cast<int32_t>(lengths[s])});
    seq_of_token.push_back(static_cast<int>(s));
  }
  // A token of sequence 6 looking at only a prefix (a shorter context than its table allows).
  toks.push_back({f.tables[6], 41});
  seq_of_token.push_back(6);
  ASSERT_TRUE(ValidateAttention(toks, heads, f.kv).ok());

  const int64_t width = heads * c.head_dim;
  const auto q = RandomVector(toks.size() * width, seed + 5, 1.0f);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  const auto want = ContiguousReference(f, seq_of_token, toks, q.data(), heads, scale);

  std::vector<float> ref(want.size());
  PagedAttentionReference(q.data(), width, toks, heads, f.kv, scale, ref.data(), width);
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(ref[i], want[i], 1e-6) << i;

  for (Isa isa : TestIsas()) {
    ScopedIsa scoped(isa);
    for (int threads : {1, 2, 3}) {
      ThreadPool pool(threads);
      // Output rows wider than needed: the gap must stay untouched.
      const int64_t out_stride = width + 5;
      std::vector<float> out(toks.size() * out_stride, -7.0f);
      PagedAttention(pool, q.data(), width, toks, heads, f.kv, scale, out.data(), out_stride);
      float worst = 0;
      for (size_t t = 0; t < toks.size(); ++t) {
        for (int64_t i = 0; i < width; ++i) {
          const float got = out[t * out_stride + i], exp = want[t * width + i];
          ASSERT_NEAR(got, exp, kTol) << IsaName(isa) << " threads=" << threads << " token " << t
                                      << " elem " << i;
          worst = std::max(worst, std::fabs(got - exp));
        }
        for (int64_t i = width; i < out_stride; ++i) ASSERT_EQ(out[t * out_stride + i], -7.0f);
      }
      if (threads == 1) std::cout << "  " << IsaName(isa) << " worst abs error " << worst << "\n";
    }
  }
}

TEST(PagedAttention, MatchesContiguousReference) {
  const Case cases[] = {
      {DType::kF32, 16, 3, 3, 64},   // SmolLM2-135M: 9 heads over 3 KV heads
      {DType::kF16, 16, 3, 3, 64},   // F16 cache
      {DType::kF32, 16, 2, 1, 64},   // plain multi-head
      {DType::kF32, 16, 1, 8, 128},  // wide groups, head_dim 128
      {DType::kF32, 8, 2, 4, 40},    // head_dim not a multiple of 32, block 8
      {DType::kF16, 32, 2, 2, 96},   // block 32
      {DType::kF32, 16, 1, 20, 64},  // group larger than a work item's rows: scalar kernel
      {DType::kF32, 5, 2, 2, 12},    // odd block and head sizes: scalar kernel
  };
  uint32_t seed = 1;
  for (const Case& c : cases) RunCase(c, seed++);
}

// Large scores (q scaled up) over a long context make the running maximum jump many times:
// the online softmax must rescale its partial sums correctly. With few work items the context
// is also split into parts that run in parallel and are merged; a 4-token run at the end of the
// context, alone or with another sequence's token, covers both. Scores here reach |s| ~ 30,
// and float rounding of the 64-term dot products (~1e-6 of sum |q_d k_d| * scale ~ 60) shifts
// softmax weights by up to ~1e-5 relative, so this test allows 5e-5.
TEST(PagedAttention, LongContextWithLargeScores) {
  constexpr float kLargeTol = 5e-5f;
  Fixture f(DType::kF32, 16, 3, 64, {2000, 300}, 42);
  const int64_t heads = 9, width = heads * 64;
  const std::vector<std::vector<AttentionToken>> batches = {
      {{f.tables[0], 2000}},
      {{f.tables[0], 1997}, {f.tables[0], 1998}, {f.tables[0], 1999}, {f.tables[0], 2000}},
      {{f.tables[0], 2000}, {f.tables[1], 300}},
  };
  const std::vector<std::vector<int>> seqs = {{0}, {0, 0, 0, 0}, {0, 1}};
  for (size_t bi = 0; bi < batches.size(); ++bi) {
    const auto& toks = batches[bi];
    auto q = RandomVector(toks.size() * width, 43 + static_cast<uint32_t>(bi), 8.0f);
    const auto want = ContiguousReference(f, seqs[bi], toks, q.data(), heads, 0.125f);
    for (Isa isa : TestIsas()) {
      ScopedIsa scoped(isa);
      for (int threads : {1, 2, 3, 8}) {
        ThreadPool pool(threads);
        std::vector<float> out(toks.size() * width);
        PagedAttention(pool, q.data(), width, toks, heads, f.kv, 0.125f, out.data(), width);
        for (size_t i = 0; i < out.size(); ++i) {
          ASSERT_NEAR(out[i], want[i], kLargeTol) << IsaName(isa) << " batch " << bi << " threads "
                                             << threads << " elem " << i;
        }
      }
    }
  }
}

// A token's attention has the same bits alone and in any batch: decoding next to other
// sequences, inside a prefill run of its own sequence, with 1-3 threads, and for contexts on
// both sides of the 16-block part boundary (long contexts are summed in fixed parts).
TEST(PagedAttention, BatchInvariant) {
  for (DType type : {DType::kF32, DType::kF16}) {
    const int64_t kv_heads = 3, group = 3, dim = 64, heads = kv_heads * group, width = heads * dim;
    const std::vector<int64_t> lengths = {700, 250, 257, 40};  // 44, 16, 17 and 3 blocks of 16
    Fixture f(type, 16, kv_heads, dim, lengths, 77);
    const float scale = 0.125f;
    // The batch: a prefill run of sequence 0 (contexts 250..260, straddling blocks 16 and 17)
    // and one decode token of every sequence.
    std::vector<AttentionToken> batch;
    for (int32_t ctx = 250; ctx <= 260; ++ctx) batch.push_back({f.tables[0], ctx});
    for (size_t s = 0; s < lengths.size(); ++s) batch.push_back({f.tables[s], static_cast<int32_t>(lengths[s])});
    const auto q = RandomVector(batch.size() * width, 78, 1.0f);
    for (Isa isa : TestIsas()) {
      ScopedIsa scoped(isa);
      for (int threads : {1, 2, 3}) {
        ThreadPool pool(threads);
        std::vector<float> all(batch.size() * width), one(width);
        PagedAttention(pool, q.data(), width, batch, heads, f.kv, scale, all.data(), width);
        for (size_t t = 0; t < batch.size(); ++t) {
          PagedAttention(pool, q.data() + t * width, width, std::span(&batch[t], 1), heads, f.kv,
                         scale, one.data(), width);
          ASSERT_EQ(0, std::memcmp(one.data(), all.data() + t * width, width * sizeof(float)))
              << DTypeName(type) << " " << IsaName(isa) << " threads=" << threads << " token " << t
              << " (context " << batch[t].context_len << ") alone differs from in the batch";
        }
      }
    }
  }
}

TEST(PagedAttention, ContextOneReturnsTheOnlyValue) {
  Fixture f(DType::kF32, 16, 1, 8, {1}, 3);
  const std::vector<float> q(16, 100.0f);  // 2 heads; the score does not matter
  std::vector<AttentionToken> toks = {{f.tables[0], 1}};
  for (Isa isa : TestIsas()) {
    ScopedIsa scoped(isa);
    ThreadPool pool(1);
    std::vector<float> out(16);
    PagedAttention(pool, q.data(), 16, toks, 2, f.kv, 1.0f, out.data(), 16);
    for (int d = 0; d < 8; ++d) {
      EXPECT_FLOAT_EQ(out[d], f.seq_v[0][d]);
      EXPECT_FLOAT_EQ(out[8 + d], f.seq_v[0][d]);
    }
  }
}

TEST(PagedAttention, ValidateRejectsBadTables) {
  Fixture f(DType::kF32, 16, 3, 64, {20}, 4);
  const std::vector<int32_t> table = f.tables[0];  // 2 blocks
  EXPECT_TRUE(ValidateAttention(std::vector<AttentionToken>{{table, 20}}, 9, f.kv).ok());
  EXPECT_TRUE(ValidateAttention(std::vector<AttentionToken>{{table, 32}}, 9, f.kv).ok());
  EXPECT_FALSE(ValidateAttention(std::vector<AttentionToken>{{table, 33}}, 9, f.kv).ok());
  EXPECT_FALSE(ValidateAttention(std::vector<AttentionToken>{{table, 0}}, 9, f.kv).ok());
  EXPECT_FALSE(ValidateAttention(std::vector<AttentionToken>{{table, 20}}, 8, f.kv).ok());
  const std::vector<int32_t> bad = {table[0], static_cast<int32_t>(f.kv.num_blocks)};
  EXPECT_FALSE(ValidateAttention(std::vector<AttentionToken>{{bad, 20}}, 9, f.kv).ok());
  // Only the blocks the context reaches are checked.
  EXPECT_TRUE(ValidateAttention(std::vector<AttentionToken>{{bad, 16}}, 9, f.kv).ok());
  const std::vector<int32_t> negative = {-1};
  EXPECT_FALSE(ValidateAttention(std::vector<AttentionToken>{{negative, 1}}, 9, f.kv).ok());
  KvCacheView bf16 = f.kv;
  bf16.type = DType::kBF16;
  EXPECT_FALSE(Validate(bf16).ok());
}

}  // namespace
}  // namespace aicloud::engine::kernels
