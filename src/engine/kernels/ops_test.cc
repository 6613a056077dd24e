#include "engine/kernels/ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numbers>
#include <vector>

#include "engine/kernels/test_util.h"

namespace aicloud::engine::kernels {
namespace {

using testing::RandomVector;
using testing::TestIsas;

constexpr double kU = 0x1p-24;  // unit roundoff of float

// A weight vector stored in `type`, and the float values it really holds.
struct StoredVector {
  std::vector<uint16_t> half;
  std::vector<float> f32;
  std::vector<float> exact;
  VectorView view;
};
StoredVector Store(DType type, const std::vector<float>& v) {
  StoredVector s;
  s.exact.resize(v.size());
  if (type == DType::kF32) {
    s.f32 = v;
    s.exact = v;
    s.view = {type, static_cast<int64_t>(v.size()), s.f32.data()};
  } else {
    s.half.resize(v.size());
    ConvertFromFloat(type, v.data(), s.half.data(), static_cast<int64_t>(v.size()));
    ConvertToFloat(type, s.half.data(), s.exact.data(), static_cast<int64_t>(v.size()));
    s.view = {type, static_cast<int64_t>(v.size()), s.half.data()};
  }
  return s;
}

// The sum of squares (all terms positive) is within dim * u of exact relative to itself, the
// square root halves that, and the two multiplies add 2 u: the bound below.
TEST(RmsNorm, MatchesDoubleReference) {
  for (Isa isa : TestIsas()) {
    ScopedIsa scoped(isa);
    for (DType type : {DType::kF32, DType::kF16, DType::kBF16}) {
      for (int64_t dim : {1, 7, 8, 9, 64, 576, 1001}) {
        constexpr int64_t kRows = 3;
        const auto x = RandomVector(kRows * dim, static_cast<uint32_t>(dim), 3.0f);
        const StoredVector w = Store(type, RandomVector(dim, 99, 1.0f));
        std::vector<float> y(x.size());
        RmsNorm(x.data(), kRows, dim, w.view, 1e-5f, y.data());
        for (int64_t r = 0; r < kRows; ++r) {
          double ss = 0;
          for (int64_t i = 0; i < dim; ++i) ss += double{x[r * dim + i]} * x[r * dim + i];
          const double inv = 1.0 / std::sqrt(ss / dim + 1e-5);
          for (int64_t i = 0; i < dim; ++i) {
            const double ref = x[r * dim + i] * inv * w.exact[i];
            ASSERT_NEAR(y[r * dim + i], ref, (dim / 2.0 + 4) * kU * std::fabs(ref) + 1e-30)
                << IsaName(isa) << " " << DTypeName(type) << " dim=" << dim;
          }
        }
        // In place gives the same bits.
        std::vector<float> inplace = x;
        RmsNorm(inplace.data(), kRows, dim, w.view, 1e-5f, inplace.data());
        EXPECT_EQ(inplace, y);
      }
    }
  }
}

// Worked by hand: head_dim 4 (half 2), x = [1, 2, 3, 4], position 1, inv_freq = [1, 0.5].
// Pairs are (0, 2) and (1, 3):
//   x0' = 1 cos 1 - 3 sin 1     = 0.5403023 - 2.5244130 = -1.9841107
//   x2' = 3 cos 1 + 1 sin 1     = 1.6209069 + 0.8414710 =  2.4623779
//   x1' = 2 cos .5 - 4 sin .5   = 1.7551651 - 1.9177021 = -0.1625370
//   x3' = 4 cos .5 + 2 sin .5   = 3.5103302 + 0.9588511 =  4.4691813
// The interleaved convention would pair (0, 1) and (2, 3) and give other numbers.
TEST(Rope, HandComputedRotateHalfCase) {
  std::vector<float> x = {1, 2, 3, 4};
  const int32_t pos = 1;
  const std::vector<float> inv = {1.0f, 0.5f};
  Rope(x.data(), 1, 1, 4, 4, &pos, RopeTable(inv, 8));
  EXPECT_NEAR(x[0], -1.9841107f, 1e-6);
  EXPECT_NEAR(x[1], -0.1625370f, 1e-6);
  EXPECT_NEAR(x[2], 2.4623779f, 1e-6);
  EXPECT_NEAR(x[3], 4.4691813f, 1e-6);
}

TEST(Rope, PositionZeroIsIdentity) {
  auto x = RandomVector(2 * 3 * 64, 5);
  const auto before = x;
  const int32_t pos[2] = {0, 0};
  const auto inv = RopeInvFreq(64, 10000.0);
  Rope(x.data(), 2, 3, 64, 3 * 64, pos, RopeTable(inv, 1));
  EXPECT_EQ(x, before);
}

// SmolLM2 shapes (9 heads x 64, theta 1e5) read out of a fused qkv row of 960 floats: rotates
// the q heads, leaves the rest of the row alone, matches a double-precision evaluation of the
// HF formula, and keeps each pair's norm.
TEST(Rope, MatchesReferenceInsideFusedRows) {
  constexpr int64_t kTokens = 5, kHeads = 9, kDim = 64, kStride = 960;
  const auto inv = RopeInvFreq(kDim, 100000.0);
  ASSERT_EQ(inv.size(), 32u);
  EXPECT_EQ(inv[0], 1.0f);
  for (size_t i = 0; i < inv.size(); ++i) {
    EXPECT_NEAR(inv[i], std::pow(100000.0, -2.0 * i / kDim), 1e-6 * std::pow(100000.0, -2.0 * i / kDim));
  }
  auto x = RandomVector(kTokens * kStride, 6);
  const auto before = x;
  const int32_t pos[kTokens] = {0, 1, 17, 1000, 8191};
  const RopeTable table(inv, 4096);  // 8191 lies past it: computed on the fly
  for (Isa isa : TestIsas()) {
    ScopedIsa scoped(isa);
    x = before;
    Rope(x.data(), kTokens, kHeads, kDim, kStride, pos, table);
    for (int64_t t = 0; t < kTokens; ++t) {
      for (int64_t h = 0; h < kHeads; ++h) {
        const float* a = &before[t * kStride + h * kDim];
        const float* b = &x[t * kStride + h * kDim];
        for (int64_t i = 0; i < kDim / 2; ++i) {
          const double angle = static_cast<float>(pos[t]) * inv[i];  // float product, like HF
          const double c = std::cos(angle), s = std::sin(angle);
          const double r0 = a[i] * c - a[i + 32] * s;
          const double r1 = a[i + 32] * c + a[i] * s;
          const double scale = std::fabs(a[i]) + std::fabs(a[i + 32]);
          ASSERT_NEAR(b[i], r0, 4 * kU * scale);
          ASSERT_NEAR(b[i + 32], r1, 4 * kU * scale);
        }
      }
      for (int64_t j = kHeads * kDim; j < kStride; ++j) ASSERT_EQ(x[t * kStride + j], before[t * kStride + j]);
    }
  }
}

// A position inside the table and the same position past a smaller table rotate identically.
TEST(Rope, TableAndOnTheFlyAgree) {
  const auto inv = RopeInvFreq(64, 10000.0);
  const RopeTable big(inv, 2048), small(inv, 16);
  for (Isa isa : TestIsas()) {
    ScopedIsa scoped(isa);
    auto a = RandomVector(3 * 64, 11);
    auto b = a;
    const int32_t pos[3] = {5, 100, 2047};
    Rope(a.data(), 3, 1, 64, 64, pos, big);
    Rope(b.data(), 3, 1, 64, 64, pos, small);
    EXPECT_EQ(a, b);
  }
}

TEST(Rope, PartialRotaryLeavesTailDims) {
  const auto inv = RopeInvFreq(16, 10000.0);  // rotary_dim 16 of head_dim 64
  auto x = RandomVector(2 * 64, 7);
  const auto before = x;
  const int32_t pos = 3;
  Rope(x.data(), 1, 2, 64, 128, &pos, RopeTable(inv, 4));
  for (int h = 0; h < 2; ++h) {
    for (int i = 0; i < 16; ++i) EXPECT_NE(x[h * 64 + i], before[h * 64 + i]);
    for (int i = 16; i < 64; ++i) EXPECT_EQ(x[h * 64 + i], before[h * 64 + i]);
    // Pairs are (i, i + 8) within the rotary part.
    const double angle = 3.0f * inv[0];
    EXPECT_NEAR(x[h * 64], before[h * 64] * std::cos(angle) - before[h * 64 + 8] * std::sin(angle), 1e-5);
  }
}

// silu(g) * up with a polynomial exp accurate to 2e-7: 5e-7 relative covers it plus the
// division and multiply roundings. Inputs span the range where e^-g under/overflows.
TEST(SiluMul, MatchesDoubleReference) {
  for (Isa isa : TestIsas()) {
    ScopedIsa scoped(isa);
    std::vector<float> g, u;
    for (float v = -120.0f; v <= 120.0f; v += 0.0371f) g.push_back(v);
    for (float v : {0.0f, -0.0f, 1e-30f, -1e-30f, 88.0f, -88.0f, 89.0f, -89.0f}) g.push_back(v);
    u = RandomVector(g.size(), 8);
    std::vector<float> out(g.size());
    SiluMul(g.data(), u.data(), out.data(), static_cast<int64_t>(g.size()));
    for (size_t i = 0; i < g.size(); ++i) {
      const double ref = g[i] / (1.0 + std::exp(-double{g[i]})) * u[i];
      ASSERT_NEAR(out[i], ref, 5e-7 * std::fabs(ref) + 1e-30) << IsaName(isa) << " g=" << g[i];
    }
    // Fused [gate | up] rows.
    const auto gu = RandomVector(3 * 2 * 37, 9, 4.0f);
    std::vector<float> rows(3 * 37), ref(37);
    SiluMulRows(gu.data(), 3, 37, rows.data());
    for (int r = 0; r < 3; ++r) {
      SiluMul(&gu[r * 74], &gu[r * 74 + 37], ref.data(), 37);
      for (int i = 0; i < 37; ++i) EXPECT_EQ(rows[r * 37 + i], ref[i]);
    }
  }
}

// Each probability: x - max is rounded in float (relative error of e^(x - max) up to
// |x - max| u), the exp is good to 2e-7, and the sum of n terms adds n u:
// (4e-7 + (n + 2 |x - max|) u) relative.
TEST(Softmax, MatchesDoubleReference) {
  for (Isa isa : TestIsas()) {
    ScopedIsa scoped(isa);
    for (int64_t n : {1, 2, 7, 8, 9, 100, 49152}) {
      auto x = RandomVector(2 * n, static_cast<uint32_t>(n), 5.0f);
      if (n > 2) x[1] = -std::numeric_limits<float>::infinity();
      const auto in = x;
      Softmax(x.data(), 2, n);
      for (int64_t r = 0; r < 2; ++r) {
        double mx = -INFINITY, sum = 0;
        for (int64_t i = 0; i < n; ++i) mx = std::max(mx, double{in[r * n + i]});
        for (int64_t i = 0; i < n; ++i) sum += std::exp(in[r * n + i] - mx);
        for (int64_t i = 0; i < n; ++i) {
          const double ref = std::exp(in[r * n + i] - mx) / sum;
          if (std::isinf(in[r * n + i])) {
            ASSERT_EQ(x[r * n + i], 0.0f);
            continue;
          }
          ASSERT_NEAR(x[r * n + i], ref, (4e-7 + (n + 2 * (mx - in[r * n + i])) * kU) * ref + 1e-30) << IsaName(isa) << " n=" << n;
        }
      }
      if (n > 2) {
        EXPECT_EQ(x[1], 0.0f);
      }
    }
    std::vector<float> all_masked(9, -std::numeric_limits<float>::infinity());
    Softmax(all_masked.data(), 1, 9);
    for (float v : all_masked) EXPECT_TRUE(std::isnan(v));
  }
}

TEST(Add, ExactAndInPlace) {
  for (Isa isa : TestIsas()) {
    ScopedIsa scoped(isa);
    const auto a = RandomVector(1001, 1), b = RandomVector(1001, 2);
    std::vector<float> out(1001), acc = a;
    Add(a.data(), b.data(), out.data(), 1001);
    Add(acc.data(), b.data(), acc.data(), 1001);
    for (int i = 0; i < 1001; ++i) {
      EXPECT_EQ(out[i], a[i] + b[i]);
      EXPECT_EQ(acc[i], out[i]);
    }
  }
}

TEST(EmbeddingLookup, EveryFormatAndBadIds) {
  const auto table = RandomVector(50 * 64, 3);
  for (WeightFormat f : {WeightFormat::kF32, WeightFormat::kF16, WeightFormat::kBF16, WeightFormat::kQ8}) {
    StatusOr<Matrix> m = ConvertMatrix({WeightFormat::kF32, 50, 64, table.data()}, f);
    ASSERT_TRUE(m.ok());
    const int32_t ids[] = {0, 49, 7, 7};
    std::vector<float> out(4 * 64), row(64);
    ASSERT_TRUE(EmbeddingLookup(m->view(), ids, out.data()).ok());
    for (int i = 0; i < 4; ++i) {
      DequantizeRow(m->view(), ids[i], row.data());
      for (int j = 0; j < 64; ++j) ASSERT_EQ(out[i * 64 + j], row[j]);
      if (f == WeightFormat::kF32) {
        for (int j = 0; j < 64; ++j) ASSERT_EQ(out[i * 64 + j], table[ids[i] * 64 + j]);
      }
    }
    std::vector<float> untouched(2 * 64, 123.0f);
    const int32_t bad[] = {3, 50};
    EXPECT_EQ(EmbeddingLookup(m->view(), bad, untouched.data()).code(), StatusCode::kInvalidArgument);
    const int32_t negative[] = {-1};
    EXPECT_EQ(EmbeddingLookup(m->view(), negative, untouched.data()).code(), StatusCode::kInvalidArgument);
    for (float v : untouched) EXPECT_EQ(v, 123.0f);
  }
}

TEST(Argmax, TiesNaNsAndLargeInputs) {
  for (Isa isa : TestIsas()) {
    ScopedIsa scoped(isa);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> v = {1, 5, 3, 5, 2};
    EXPECT_EQ(Argmax(v.data(), 5), 1);  // first of the tied maxima
    v = {nan, -3, nan, -1, -2};
    EXPECT_EQ(Argmax(v.data(), 5), 3);  // NaNs skipped
    v = {nan, nan};
    EXPECT_EQ(Argmax(v.data(), 2), 0);
    EXPECT_EQ(Argmax(v.data(), 0), 0);
    v.assign(11, -std::numeric_limits<float>::infinity());
    EXPECT_EQ(Argmax(v.data(), 11), 0);
    auto logits = RandomVector(49152, 4);
    logits[40000] = 100.0f;
    logits[45000] = 100.0f;
    logits[7] = nan;
    EXPECT_EQ(Argmax(logits.data(), 49152), 40000);
  }
}

}  // namespace
}  // namespace aicloud::engine::kernels
