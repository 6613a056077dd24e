#include "engine/lora/apply.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/rng.h"
#include "engine/kernels/cpu.h"

namespace aicloud::engine {
namespace {

using kernels::Isa;
using kernels::ScopedIsa;
using kernels::ThreadPool;

float Uniform(Rng& rng, float bound) { return static_cast<float>((2.0 * rng.UniformDouble() - 1.0) * bound); }

// Random A [rank][in], B [out][rank].
LoraWeights RandomWeights(Rng& rng, int64_t in, int64_t out, int64_t rank, float scale, DType dtype) {
  std::vector<float> a(static_cast<size_t>(rank * in)), b(static_cast<size_t>(out * rank));
  for (float& v : a) v = Uniform(rng, 0.5f);
  for (float& v : b) v = Uniform(rng, 0.5f);
  return LoraWeights::FromFloat(in, out, rank, scale, a.data(), b.data(), dtype);
}

// Two "modules" of odd sizes so every tail path runs: kQ [in 37 -> out 45], kK [37 -> 21] in a
// fused row of width 45 + 21 + 3 (3 trailing columns no module owns).
constexpr int64_t kIn = 37, kOutQ = 45, kOutK = 21, kWidth = kOutQ + kOutK + 3;
constexpr int64_t kLayers = 2;

struct AdapterSpec {
  int64_t rank;
  DType dtype;
  bool q, k;  // modules adapted (in every layer)
};

std::shared_ptr<const LoraAdapter> MakeAdapter(uint64_t seed, const AdapterSpec& s) {
  Rng rng(seed);
  LoraConfig c;
  c.rank = s.rank;
  c.alpha = 2.0 * static_cast<double>(s.rank);
  auto a = std::make_shared<LoraAdapter>(c, kLayers);
  for (int64_t l = 0; l < kLayers; ++l) {
    if (s.q) a->Set(l, LoraModule::kQ, RandomWeights(rng, kIn, kOutQ, s.rank, 0.75f, s.dtype));
    if (s.k) a->Set(l, LoraModule::kK, RandomWeights(rng, kIn, kOutK, s.rank, 1.5f, s.dtype));
  }
  return a;
}

// Ranks 1 (padding), 8, 16 (two-vector chunks), 24 (16 + 8) and 64; F32 and F16; an adapter that
// leaves k alone and one that leaves q alone.
std::vector<std::shared_ptr<const LoraAdapter>> Slots() {
  const AdapterSpec specs[] = {{1, DType::kF32, true, true},   {8, DType::kF16, true, true},
                               {16, DType::kF32, true, false}, {24, DType::kF32, false, true},
                               {64, DType::kF16, true, true},  {5, DType::kF32, true, true}};
  std::vector<std::shared_ptr<const LoraAdapter>> slots;
  uint64_t seed = 100;
  for (const AdapterSpec& s : specs) slots.push_back(MakeAdapter(seed++, s));
  slots.push_back(nullptr);  // an empty slot
  return slots;
}

const LoraTarget kTargets[] = {{LoraModule::kQ, 0}, {LoraModule::kK, kOutQ}};

std::vector<float> RandomRows(uint64_t seed, int64_t rows, int64_t width) {
  Rng rng(seed);
  std::vector<float> v(static_cast<size_t>(rows * width));
  for (float& x : v) x = Uniform(rng, 1.0f);
  return v;
}

// The naive per-token reference, in double: y_t += B (scale * A x_t) of the token's adapter.
void Reference(std::span<const int32_t> token_slots, std::span<const std::shared_ptr<const LoraAdapter>> slots,
               int64_t layer, const float* x, int64_t x_stride, float* y, int64_t y_stride) {
  for (size_t t = 0; t < token_slots.size(); ++t) {
    if (token_slots[t] == kNoLora) continue;
    const LoraAdapter& a = *slots[static_cast<size_t>(token_slots[t])];
    for (const LoraTarget& target : kTargets) {
      const LoraWeights* w = a.weights(layer, target.module);
      if (w == nullptr) continue;
      std::vector<double> u(static_cast<size_t>(w->rank()));
      for (int64_t r = 0; r < w->rank(); ++r) {
        double s = 0;
        for (int64_t k = 0; k < w->in(); ++k) s += static_cast<double>(w->A(r, k)) * x[t * x_stride + k];
        u[static_cast<size_t>(r)] = s * w->scale();
      }
      for (int64_t o = 0; o < w->out(); ++o) {
        double s = 0;
        for (int64_t r = 0; r < w->rank(); ++r) s += static_cast<double>(w->B(o, r)) * u[static_cast<size_t>(r)];
        y[t * y_stride + target.y_offset + o] += static_cast<float>(s);
      }
    }
  }
}

std::vector<int32_t> RandomSlots(uint64_t seed, int64_t n, int32_t num_adapters) {
  Rng rng(seed);
  std::vector<int32_t> s(static_cast<size_t>(n));
  for (int32_t& v : s) v = static_cast<int32_t>(rng.Uniform(static_cast<uint64_t>(num_adapters) + 1)) - 1;
  return s;
}

TEST(ApplyLora, MatchesPerTokenReferenceInMixedBatches) {
  const auto slots = Slots();
  const int32_t adapters = static_cast<int32_t>(slots.size()) - 1;  // the last slot is empty
  ThreadPool pool(2);
  struct Case {
    const char* name;
    int64_t n;
    Isa isa;
  };
  for (const Case& c : {Case{"one token", 1, Isa::kAvx2}, Case{"decode step", 32, Isa::kAvx2},
                        Case{"prefill-sized", 203, Isa::kAvx2}, Case{"scalar", 32, Isa::kScalar}}) {
    SCOPED_TRACE(c.name);
    ScopedIsa isa(c.isa);
    const std::vector<int32_t> token_slots = RandomSlots(static_cast<uint64_t>(c.n), c.n, adapters);
    const int64_t x_stride = kIn + 5;  // rows wider than the module input, as in a fused buffer
    const std::vector<float> x = RandomRows(1, c.n, x_stride);
    const std::vector<float> y0 = RandomRows(2, c.n, kWidth);
    LoraBatch batch;
    ASSERT_TRUE(batch.Reset(token_slots, slots).ok());
    for (int64_t layer = 0; layer < kLayers; ++layer) {
      std::vector<float> got = y0, want = y0;
      ApplyLora(pool, batch, layer, kTargets, x.data(), x_stride, got.data(), kWidth);
      Reference(token_slots, slots, layer, x.data(), x_stride, want.data(), kWidth);
      for (int64_t t = 0; t < c.n; ++t) {
        for (int64_t j = 0; j < kWidth; ++j) {
          const size_t i = static_cast<size_t>(t * kWidth + j);
          if (token_slots[static_cast<size_t>(t)] == kNoLora || j >= kOutQ + kOutK) {
            ASSERT_EQ(std::memcmp(&got[i], &y0[i], sizeof(float)), 0) << "token " << t << " column " << j << " touched";
          } else {
            ASSERT_NEAR(got[i], want[i], 2e-5f * (1.0f + std::abs(want[i]))) << "token " << t << " column " << j;
          }
        }
      }
    }
  }
}

// The delta a token gets is bit-for-bit the same alone, among other tokens of its adapter, and
// among tokens of other adapters, on one thread or two, with the vector or the scalar code.
TEST(ApplyLora, TokenResultIndependentOfBatch) {
  const auto slots = Slots();
  const int32_t adapters = static_cast<int32_t>(slots.size()) - 1;
  const int64_t n = 61;
  const std::vector<int32_t> token_slots = RandomSlots(7, n, adapters);
  const std::vector<float> x = RandomRows(3, n, kIn);
  const std::vector<float> y0 = RandomRows(4, n, kWidth);

  auto run = [&](ThreadPool& pool, std::span<const int32_t> ts, std::span<const int64_t> rows) {
    // Gathers `rows` of x and y0 into a batch of their own, applies, returns the output rows.
    std::vector<float> xb, yb;
    for (int64_t r : rows) {
      xb.insert(xb.end(), x.begin() + r * kIn, x.begin() + (r + 1) * kIn);
      yb.insert(yb.end(), y0.begin() + r * kWidth, y0.begin() + (r + 1) * kWidth);
    }
    LoraBatch batch;
    EXPECT_TRUE(batch.Reset(ts, slots).ok());
    ApplyLora(pool, batch, 1, kTargets, xb.data(), kIn, yb.data(), kWidth);
    return yb;
  };
  ThreadPool pool2(2), pool1(1);
  std::vector<int64_t> all(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) all[static_cast<size_t>(i)] = i;
  const std::vector<float> mixed = run(pool2, token_slots, all);

  for (int64_t t = 0; t < n; ++t) {
    const int64_t one[] = {t};
    const int32_t slot[] = {token_slots[static_cast<size_t>(t)]};
    const std::vector<float> alone = run(pool1, slot, one);
    ASSERT_EQ(std::memcmp(alone.data(), mixed.data() + t * kWidth, kWidth * sizeof(float)), 0) << "token " << t;
  }
  // Reversed order (other tile partners) and a single thread.
  std::vector<int64_t> rev(all.rbegin(), all.rend());
  std::vector<int32_t> rev_slots(token_slots.rbegin(), token_slots.rend());
  const std::vector<float> reversed = run(pool1, rev_slots, rev);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(std::memcmp(reversed.data() + i * kWidth, mixed.data() + (n - 1 - i) * kWidth, kWidth * sizeof(float)), 0);
  }
  // The scalar code performs the same operations.
  if (kernels::DetectedIsa() == Isa::kAvx2) {
    ScopedIsa scalar(Isa::kScalar);
    const std::vector<float> s = run(pool2, token_slots, all);
    EXPECT_EQ(std::memcmp(s.data(), mixed.data(), mixed.size() * sizeof(float)), 0);
  }
}

// A fused call equals one call per module.
TEST(ApplyLora, FusedTargetsEqualSeparateCalls) {
  const auto slots = Slots();
  const int64_t n = 19;
  const std::vector<int32_t> token_slots = RandomSlots(9, n, static_cast<int32_t>(slots.size()) - 1);
  const std::vector<float> x = RandomRows(5, n, kIn), y0 = RandomRows(6, n, kWidth);
  LoraBatch batch;
  ASSERT_TRUE(batch.Reset(token_slots, slots).ok());
  ThreadPool pool(2);
  std::vector<float> fused = y0, separate = y0;
  ApplyLora(pool, batch, 0, kTargets, x.data(), kIn, fused.data(), kWidth);
  for (const LoraTarget& t : kTargets) {
    ApplyLora(pool, batch, 0, t.module, x.data(), kIn, separate.data(), kWidth, t.y_offset);
  }
  EXPECT_EQ(std::memcmp(fused.data(), separate.data(), fused.size() * sizeof(float)), 0);
}

TEST(LoraBatch, GroupsTokensByAdapterInTiles) {
  const auto slots = Slots();
  LoraBatch b;
  // Slot 2 first used at token 1, slot 0 at token 2; 6 tokens of slot 2 make two tiles.
  const std::vector<int32_t> ts = {-1, 2, 0, 2, 2, -1, 2, 0, 2, 2};
  ASSERT_TRUE(b.Reset(ts, slots).ok());
  EXPECT_EQ(b.num_tokens(), 10);
  EXPECT_EQ(b.num_adapters(), 2);
  ASSERT_EQ(b.tiles().size(), 3u);
  auto rows = [](const LoraBatch::Tile& t) { return std::vector<int32_t>(t.rows, t.rows + t.count); };
  EXPECT_EQ(b.tiles()[0].adapter, slots[2].get());
  EXPECT_EQ(rows(b.tiles()[0]), (std::vector<int32_t>{1, 3, 4, 6}));
  EXPECT_EQ(rows(b.tiles()[1]), (std::vector<int32_t>{8, 9}));
  EXPECT_EQ(b.tiles()[2].adapter, slots[0].get());
  EXPECT_EQ(rows(b.tiles()[2]), (std::vector<int32_t>{2, 7}));

  ASSERT_TRUE(b.Reset(std::vector<int32_t>{-1, -1}, slots).ok());
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(b.num_tokens(), 2);
}

TEST(LoraBatch, BadSlotsAreRefused) {
  const auto slots = Slots();  // 6 adapters, slot 6 empty
  struct Case {
    std::string name;
    std::vector<int32_t> token_slots;
    std::string want;
  };
  const Case cases[] = {
      {"past the table", {0, 7}, "token 1 names adapter slot 7, outside the 7 slots"},
      {"negative", {-2}, "token 0 names adapter slot -2"},
      {"empty slot", {1, 6}, "token 1 names adapter slot 6, which holds no adapter"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    LoraBatch b;
    ASSERT_TRUE(b.Reset(std::vector<int32_t>{0, 1}, slots).ok());
    const Status s = b.Reset(c.token_slots, slots);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find(c.want), std::string::npos) << s;
    EXPECT_TRUE(b.empty()) << "a refused batch applies nothing";
  }
}

TEST(LoraTargets, FusedRowOffsets) {
  ModelConfig c;
  c.hidden_size = 576;
  c.num_attention_heads = 9;
  c.num_key_value_heads = 3;
  c.head_dim = 64;
  c.intermediate_size = 1536;
  const auto qkv = QkvTargets(c);
  EXPECT_EQ(qkv[0].y_offset, 0);
  EXPECT_EQ(qkv[1].module, LoraModule::kK);
  EXPECT_EQ(qkv[1].y_offset, 576);
  EXPECT_EQ(qkv[2].y_offset, 768);
  const auto gu = GateUpTargets(c);
  EXPECT_EQ(gu[1].module, LoraModule::kUp);
  EXPECT_EQ(gu[1].y_offset, 1536);
}

}  // namespace
}  // namespace aicloud::engine
