#include "engine/kernels/matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "engine/kernels/cpu.h"
#include "engine/kernels/test_util.h"

namespace aicloud::engine::kernels {
namespace {

using testing::RandomVector;
using testing::TestIsas;

// Stores float weights in `format` (exactly for F32; rounded for F16/BF16; quantized for Q8)
// and returns the matrix.
Matrix MakeWeights(WeightFormat format, const std::vector<float>& w, int64_t rows, int64_t cols) {
  StatusOr<Matrix> m = ConvertMatrix(WeightView{WeightFormat::kF32, rows, cols, w.data()}, format);
  EXPECT_TRUE(m.ok()) << m.status();
  return std::move(m).value();
}

// The weights a matrix really holds, as floats.
std::vector<float> Dequantized(const WeightView& w) {
  std::vector<float> out(static_cast<size_t>(w.rows * w.cols));
  for (int64_t r = 0; r < w.rows; ++r) DequantizeRow(w, r, out.data() + r * w.cols);
  return out;
}

// sum_k |x[i][k] * w[n][k]|: the scale float accumulation error is proportional to.
double AbsDot(const float* x, const float* w, int64_t k) {
  double s = 0;
  for (int64_t j = 0; j < k; ++j) s += std::fabs(static_cast<double>(x[j]) * w[j]);
  return s;
}

struct Shape {
  int64_t m, n, k;
};

std::vector<Shape> Shapes(bool q8) {
  std::vector<Shape> shapes;
  const std::vector<int64_t> ks =
      q8 ? std::vector<int64_t>{32, 64, 96, 576, 1312}
         : std::vector<int64_t>{1, 3, 7, 8, 9, 16, 17, 33, 100, 576, 641, 1300};
  for (int64_t m : {1, 2, 3, 4, 5, 7, 9, 33, 130}) {
    for (int64_t n : {1, 2, 3, 5, 47, 49, 101}) {
      for (int64_t k : ks) {
        if (m * n * k > 3'000'000) continue;
        shapes.push_back({m, n, k});
      }
    }
  }
  return shapes;
}

// Float formats: the kernels must compute the exact product of the stored weights up to float
// accumulation error. A sum of K products accumulated in float is within K * 2^-24 * sum|x*w|
// of the exact value whatever the order; the vector kernels, which keep 8-16 partial sums, are
// typically 10-100x better than that bound.
TEST(MatMul, FloatFormatsMatchReference) {
  ThreadPool pool(3);
  for (WeightFormat format : {WeightFormat::kF32, WeightFormat::kF16, WeightFormat::kBF16}) {
    for (Isa isa : TestIsas()) {
      ScopedIsa scoped(isa);
      double worst = 0;
      for (const Shape& s : Shapes(false)) {
        const auto wf = RandomVector(s.n * s.k, 1 + s.n * 7 + s.k);
        const auto x = RandomVector(s.m * s.k, 2 + s.m * 13 + s.k);
        Matrix w = MakeWeights(format, wf, s.n, s.k);
        std::vector<float> y(s.m * s.n, NAN), ref(s.m * s.n);
        MatMul(pool, x.data(), s.m, w.view(), y.data());
        MatMulReference(x.data(), s.m, w.view(), ref.data());
        const std::vector<float> wd = Dequantized(w.view());
        for (int64_t i = 0; i < s.m; ++i) {
          for (int64_t n = 0; n < s.n; ++n) {
            const double scale = AbsDot(&x[i * s.k], &wd[n * s.k], s.k);
            const double err = std::fabs(y[i * s.n + n] - ref[i * s.n + n]);
            ASSERT_LE(err, s.k * 0x1p-24 * scale + 1e-30)
                << WeightFormatName(format) << " " << IsaName(isa) << " m=" << s.m << " n=" << s.n
                << " k=" << s.k << " at " << i << "," << n;
            if (scale > 0) worst = std::max(worst, err / scale);
          }
        }
      }
      std::cout << WeightFormatName(format) << " " << IsaName(isa)
                << ": worst |err| / sum|x*w| = " << worst << "\n";
    }
  }
}

// Q8: against the float weights it was quantized from, each weight is off by at most d/2 for
// its block's scale d, so |y - y_f32| <= sum_blocks d/2 * sum_block |x| (plus accumulation
// error). With int8 activations, x is also rounded to within dx/2 per element, which adds
// sum_blocks dx/2 * sum_block |w_q|.
TEST(MatMul, Q8WithinQuantizationBound) {
  ThreadPool pool(2);
  for (Q8Activations act : {Q8Activations::kFloat, Q8Activations::kInt8}) {
    for (Isa isa : TestIsas()) {
      ScopedIsa scoped(isa);
      for (const Shape& s : Shapes(true)) {
        const auto wf = RandomVector(s.n * s.k, 3 + s.n + s.k * 5);
        const auto x = RandomVector(s.m * s.k, 4 + s.m + s.k * 3);
        Matrix w = MakeWeights(WeightFormat::kQ8, wf, s.n, s.k);
        const std::vector<float> wd = Dequantized(w.view());
        std::vector<float> y(s.m * s.n, NAN), ref(s.m * s.n);
        MatMul(pool, x.data(), s.m, w.view(), y.data(), MatMulOptions{act});
        MatMulReference(x.data(), s.m, WeightView{WeightFormat::kF32, s.n, s.k, wf.data()},
                        ref.data());
        const bool int8_x = act == Q8Activations::kInt8;
        for (int64_t i = 0; i < s.m; ++i) {
          for (int64_t n = 0; n < s.n; ++n) {
            double bound = s.k * 0x1p-24 * AbsDot(&x[i * s.k], &wd[n * s.k], s.k);
            const auto* blocks = reinterpret_cast<const BlockQ8*>(w.view().row(n));
            for (int64_t b = 0; b < s.k / 32; ++b) {
              double sum_x = 0, sum_w = 0, amax_x = 0;
              for (int64_t j = b * 32; j < b * 32 + 32; ++j) {
                sum_x += std::fabs(x[i * s.k + j]);
                sum_w += std::fabs(wd[n * s.k + j]);
                amax_x = std::max<double>(amax_x, std::fabs(x[i * s.k + j]));
              }
              bound += HalfToFloat(blocks[b].d) / 2 * sum_x * 1.0001;
              if (int8_x) bound += amax_x / 127 / 2 * sum_w * 1.0001;
            }
            ASSERT_LE(std::fabs(y[i * s.n + n] - ref[i * s.n + n]), bound)
                << IsaName(isa) << " int8_x=" << int8_x << " m=" << s.m << " n=" << s.n
                << " k=" << s.k;
          }
        }
      }
    }
  }
}

// The error the engine will see on realistic data: weights ~ N(0, 0.02) like trained linear
// layers, activations ~ N(0, 1) after RMSNorm, shape of SmolLM2's MLP up projection.
TEST(MatMul, Q8RelativeErrorOnRealisticData) {
  ThreadPool pool(2);
  constexpr int64_t kN = 1536, kK = 576;
  const auto wf = RandomVector(kN * kK, 11, 0.02f);
  const auto x = RandomVector(kK, 12);
  std::vector<float> ref(kN), y(kN);
  MatMulReference(x.data(), 1, WeightView{WeightFormat::kF32, kN, kK, wf.data()}, ref.data());
  double ref_sq = 0;
  for (float v : ref) ref_sq += double{v} * v;
  for (WeightFormat format : {WeightFormat::kF16, WeightFormat::kBF16, WeightFormat::kQ8}) {
    for (Q8Activations act : {Q8Activations::kFloat, Q8Activations::kInt8}) {
      if (format != WeightFormat::kQ8 && act == Q8Activations::kInt8) continue;
      Matrix w = MakeWeights(format, wf, kN, kK);
      MatMul(pool, x.data(), 1, w.view(), y.data(), MatMulOptions{act});
      double err_sq = 0;
      for (int64_t n = 0; n < kN; ++n) err_sq += std::pow(double{y[n]} - ref[n], 2);
      const double rel = std::sqrt(err_sq / ref_sq);
      std::cout << WeightFormatName(format)
                << (format == WeightFormat::kQ8 ? act == Q8Activations::kInt8 ? " (int8 x)" : " (float x)" : "")
                << ": relative RMS error vs F32 = " << rel << "\n";
      // Expected: F16 ~3e-4 (11-bit mantissa), BF16 ~2e-3 (8-bit), Q8 ~5e-3 / ~7e-3.
      EXPECT_LT(rel, format == WeightFormat::kF16 ? 1e-3 : 1.5e-2);
    }
  }
}

// Batch invariance: a row of x gets bit-identical results alone, in any batch, and at any
// position in it, for every weight format and ISA (the engine relies on this so a sequence's
// tokens never depend on what else shares its step). m crosses the 4-row tile and the 256-row
// task; k = 1536 is cut into three K chunks, 1300 into a masked tail; n leaves short groups.
TEST(MatMul, BatchInvariant) {
  ThreadPool pool(2);
  for (WeightFormat format : {WeightFormat::kF32, WeightFormat::kF16, WeightFormat::kBF16, WeightFormat::kQ8}) {
    for (Isa isa : TestIsas()) {
      ScopedIsa scoped(isa);
      for (int64_t k : {64, 576, 1300, 1536}) {
        if (format == WeightFormat::kQ8 && k % 32 != 0) continue;
        for (int64_t n : {7, 101}) {
          const int64_t m = k == 576 ? 300 : 37;
          const auto wf = RandomVector(n * k, 21 + n + k);
          const auto x = RandomVector(m * k, 22 + k);
          Matrix w = MakeWeights(format, wf, n, k);
          std::vector<float> all(m * n);
          MatMul(pool, x.data(), m, w.view(), all.data());
          std::vector<float> one(n), few(5 * n);
          for (int64_t i = 0; i < m; ++i) {
            MatMul(pool, x.data() + i * k, 1, w.view(), one.data());
            ASSERT_EQ(0, std::memcmp(one.data(), all.data() + i * n, n * sizeof(float)))
                << WeightFormatName(format) << " " << IsaName(isa) << " k=" << k << " n=" << n
                << ": row " << i << " alone differs from row " << i << " of " << m;
          }
          for (int64_t i0 : {int64_t{0}, int64_t{3}, m - 5}) {
            MatMul(pool, x.data() + i0 * k, 5, w.view(), few.data());
            ASSERT_EQ(0, std::memcmp(few.data(), all.data() + i0 * n, 5 * n * sizeof(float)))
                << WeightFormatName(format) << " " << IsaName(isa) << " k=" << k << " n=" << n
                << ": rows " << i0 << ".." << i0 + 4 << " in a batch of 5 differ";
          }
        }
      }
    }
  }
}

// The int8 tile at every remainder: 1-3 leftover rows of x, 1 leftover weight row, and batches
// that span several tasks; each row must equal the single-row GEMV bit for bit.
TEST(MatMul, Q8BatchInvariantAtEveryRemainder) {
  ThreadPool pool(2);
  for (Isa isa : TestIsas()) {
    ScopedIsa scoped(isa);
    for (int64_t k : {32, 96}) {
      for (int64_t n : {1, 2, 3, 5, 48, 49, 50, 97}) {
        const auto wf = RandomVector(n * k, 31 + n + k);
        Matrix w = MakeWeights(WeightFormat::kQ8, wf, n, k);
        for (int64_t m : {2, 3, 6, 7, 11, 258, 259}) {
          const auto x = RandomVector(m * k, 32 + m + k);
          std::vector<float> all(m * n), one(n);
          MatMul(pool, x.data(), m, w.view(), all.data());
          for (int64_t i = 0; i < m; ++i) {
            MatMul(pool, x.data() + i * k, 1, w.view(), one.data());
            ASSERT_EQ(0, std::memcmp(one.data(), all.data() + i * n, n * sizeof(float)))
                << IsaName(isa) << " k=" << k << " n=" << n << " m=" << m << ": row " << i << " differs";
          }
        }
      }
    }
  }
}

TEST(MatMul, EmptyShapes) {
  ThreadPool pool(2);
  const std::vector<float> w(12, 1.0f), x(8, 1.0f);
  std::vector<float> y(8, NAN);
  MatMul(pool, x.data(), 0, WeightView{WeightFormat::kF32, 3, 4, w.data()}, y.data());
  EXPECT_TRUE(std::isnan(y[0]));  // m == 0 writes nothing
  MatMul(pool, x.data(), 2, WeightView{WeightFormat::kF32, 3, 0, w.data()}, y.data());
  for (int i = 0; i < 6; ++i) EXPECT_EQ(y[i], 0.0f);  // k == 0: empty sums
}

TEST(MatMul, SubViewOfRows) {
  ThreadPool pool(2);
  const auto wf = RandomVector(10 * 64, 5);
  const auto x = RandomVector(64, 6);
  Matrix w = MakeWeights(WeightFormat::kQ8, wf, 10, 64);
  std::vector<float> all(10), part(4);
  MatMul(pool, x.data(), 1, w.view(), all.data());
  MatMul(pool, x.data(), 1, w.view().Rows(3, 4), part.data());
  for (int i = 0; i < 4; ++i) EXPECT_EQ(part[i], all[3 + i]);
}

TEST(Matrix, QuantizeQ8RejectsBadInput) {
  const std::vector<float> w(2 * 48, 1.0f);
  EXPECT_EQ(QuantizeQ8(DType::kF32, w.data(), 2, 48).status().code(), StatusCode::kInvalidArgument);
  std::vector<float> bad(64, 1.0f);
  bad[40] = NAN;
  EXPECT_EQ(QuantizeQ8(DType::kF32, bad.data(), 1, 64).status().code(), StatusCode::kInvalidArgument);
  bad[40] = INFINITY;
  EXPECT_EQ(QuantizeQ8(DType::kF32, bad.data(), 1, 64).status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(Validate(WeightView{WeightFormat::kQ8, 1, 33, w.data()}).ok());
  EXPECT_FALSE(Validate(WeightView{WeightFormat::kF32, 1, 3, nullptr}).ok());
  EXPECT_FALSE(Validate(WeightView{WeightFormat::kF32, -1, 3, w.data()}).ok());
  EXPECT_TRUE(Validate(WeightView{WeightFormat::kF32, 0, 3, nullptr}).ok());
}

TEST(Matrix, QuantizeQ8FromEveryDTypeAndZeroBlocks) {
  std::vector<float> f(64);
  for (int i = 0; i < 64; ++i) f[i] = i < 32 ? 0.0f : (i - 48) * 0.25f;
  std::vector<uint16_t> h(64), b(64);
  ConvertFromFloat(DType::kF16, f.data(), h.data(), 64);
  ConvertFromFloat(DType::kBF16, f.data(), b.data(), 64);
  for (auto [t, p] : {std::pair<DType, const void*>{DType::kF32, f.data()},
                      {DType::kF16, h.data()}, {DType::kBF16, b.data()}}) {
    StatusOr<Matrix> q = QuantizeQ8(t, p, 1, 64);
    ASSERT_TRUE(q.ok());
    const auto* blocks = reinterpret_cast<const BlockQ8*>(q->view().data);
    EXPECT_EQ(blocks[0].d, 0);  // an all-zero block has scale 0 and q 0
    for (int i = 0; i < 32; ++i) EXPECT_EQ(blocks[0].q[i], 0);
    // max |x| = 4 maps to +-127 exactly when representable.
    EXPECT_EQ(blocks[1].q[0], -127);  // x = -4
    std::vector<float> back(64);
    DequantizeRow(q->view(), 0, back.data());
    for (int i = 32; i < 64; ++i) EXPECT_NEAR(back[i], f[i], 4.0 / 127 / 2 * 1.001);
  }
}

TEST(Matrix, ConcatRowsStacksAndConverts) {
  const auto a = RandomVector(3 * 64, 7), b = RandomVector(5 * 64, 8);
  const WeightView parts[] = {{WeightFormat::kF32, 3, 64, a.data()}, {WeightFormat::kF32, 5, 64, b.data()}};
  for (WeightFormat to : {WeightFormat::kF32, WeightFormat::kF16, WeightFormat::kQ8}) {
    StatusOr<Matrix> m = ConcatRows(parts, to);
    ASSERT_TRUE(m.ok());
    EXPECT_EQ(m->rows(), 8);
    StatusOr<Matrix> pa = ConvertMatrix(parts[0], to), pb = ConvertMatrix(parts[1], to);
    EXPECT_EQ(0, std::memcmp(m->view().row(0), pa->view().data, pa->bytes()));
    EXPECT_EQ(0, std::memcmp(m->view().row(3), pb->view().data, pb->bytes()));
  }
  const std::vector<float> c(2 * 32);
  const WeightView mismatched[] = {parts[0], {WeightFormat::kF32, 2, 32, c.data()}};
  EXPECT_FALSE(ConcatRows(mismatched, WeightFormat::kF32).ok());
  EXPECT_FALSE(ConcatRows({}, WeightFormat::kF32).ok());
}

}  // namespace
}  // namespace aicloud::engine::kernels
