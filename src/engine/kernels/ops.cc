#include "engine/kernels/ops.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "engine/kernels/cpu.h"
#include "engine/kernels/simd_avx2.h"

namespace aicloud::engine::kernels {
namespace {

float WeightAt(const VectorView& w, int64_t i) {
  switch (w.type) {
    case DType::kF32: return static_cast<const float*>(w.data)[i];
    case DType::kF16: return HalfToFloat(static_cast<const uint16_t*>(w.data)[i]);
    case DType::kBF16: return BF16ToFloat(static_cast<const uint16_t*>(w.data)[i]);
  }
  return 0.0f;
}

inline float Silu(float g) { return g / (1.0f + std::exp(-g)); }

#ifdef AICLOUD_KERNELS_HAVE_AVX2

template <DType T>
AICLOUD_AVX2_INLINE __m256 LoadWeight8(const void* data, int64_t i) {
  if constexpr (T == DType::kF32) {
    return _mm256_loadu_ps(static_cast<const float*>(data) + i);
  } else if constexpr (T == DType::kF16) {
    return avx2::LoadHalf8(static_cast<const uint16_t*>(data) + i);
  } else {
    return avx2::LoadBF16x8(static_cast<const uint16_t*>(data) + i);
  }
}

template <DType T>
AICLOUD_AVX2 void RmsNormAvx2(const float* x, int64_t rows, int64_t dim, const VectorView& weight,
                              float eps, float* y) {
  const int64_t d8 = dim / 8 * 8;
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    __m256 acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i < d8; i += 8) {
      const __m256 v = _mm256_loadu_ps(xr + i);
      acc = _mm256_fmadd_ps(v, v, acc);
    }
    float ss = avx2::HorizontalSum(acc);
    for (; i < dim; ++i) ss += xr[i] * xr[i];
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(dim) + eps);
    const __m256 vinv = _mm256_set1_ps(inv);
    for (i = 0; i < d8; i += 8) {
      const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(xr + i), vinv);
      _mm256_storeu_ps(yr + i, _mm256_mul_ps(v, LoadWeight8<T>(weight.data, i)));
    }
    for (; i < dim; ++i) yr[i] = xr[i] * inv * WeightAt(weight, i);
  }
}

AICLOUD_AVX2 void SiluMulAvx2(const float* gate, const float* up, float* out, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 e = avx2::Exp(_mm256_xor_ps(g, sign));  // e^-g
    const __m256 s = _mm256_div_ps(g, _mm256_add_ps(one, e));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(s, _mm256_loadu_ps(up + i)));
  }
  for (; i < n; ++i) out[i] = Silu(gate[i]) * up[i];
}

AICLOUD_AVX2 void SoftmaxRowAvx2(float* x, int64_t n) {
  const int64_t n8 = n / 8 * 8;
  __m256 vmax = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  int64_t i = 0;
  for (; i < n8; i += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(x + i));
  float mx = avx2::HorizontalMax(vmax);
  for (; i < n; ++i) mx = std::max(mx, x[i]);
  const __m256 m = _mm256_set1_ps(mx);
  __m256 vsum = _mm256_setzero_ps();
  for (i = 0; i < n8; i += 8) {
    const __m256 e = avx2::Exp(_mm256_sub_ps(_mm256_loadu_ps(x + i), m));
    _mm256_storeu_ps(x + i, e);
    vsum = _mm256_add_ps(vsum, e);
  }
  float sum = avx2::HorizontalSum(vsum);
  for (; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const __m256 inv = _mm256_set1_ps(1.0f / sum);
  for (i = 0; i < n8; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), inv));
  for (; i < n; ++i) x[i] *= 1.0f / sum;
}

AICLOUD_AVX2 void AddAvx2(const float* a, const float* b, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(out + i, _mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
  }
  for (; i < n; ++i) out[i] = a[i] + b[i];
}

AICLOUD_AVX2 void RotateRowAvx2(float* row, int64_t heads, int64_t head_dim, int64_t half,
                                const float* cs, const float* sn) {
  for (int64_t h = 0; h < heads; ++h) {
    float* v = row + h * head_dim;
    int64_t i = 0;
    for (; i + 8 <= half; i += 8) {
      const __m256 a = _mm256_loadu_ps(v + i), b = _mm256_loadu_ps(v + i + half);
      const __m256 c = _mm256_loadu_ps(cs + i), s = _mm256_loadu_ps(sn + i);
      // Same roundings as the scalar a * c - b * s: the products are rounded, then subtracted.
      _mm256_storeu_ps(v + i, _mm256_sub_ps(_mm256_mul_ps(a, c), _mm256_mul_ps(b, s)));
      _mm256_storeu_ps(v + i + half, _mm256_add_ps(_mm256_mul_ps(b, c), _mm256_mul_ps(a, s)));
    }
    for (; i < half; ++i) {
      const float a = v[i], b = v[i + half];
      v[i] = a * cs[i] - b * sn[i];
      v[i + half] = b * cs[i] + a * sn[i];
    }
  }
}

// The largest non-NaN value of x (-inf if none), 8 lanes at a time. max_ps returns its second
// operand when either is NaN, so NaNs in x never replace the running maximum.
AICLOUD_AVX2 float MaxIgnoringNaNAvx2(const float* x, int64_t n) {
  __m256 m = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) m = _mm256_max_ps(_mm256_loadu_ps(x + i), m);
  float best = avx2::HorizontalMax(m);
  for (; i < n; ++i) {
    if (x[i] > best) best = x[i];
  }
  return best;
}

#endif  // AICLOUD_KERNELS_HAVE_AVX2

}  // namespace

void RmsNorm(const float* x, int64_t rows, int64_t dim, const VectorView& weight, float eps,
             float* y) {
#ifdef AICLOUD_KERNELS_HAVE_AVX2
  if (ActiveIsa() == Isa::kAvx2) {
    switch (weight.type) {
      case DType::kF32: return RmsNormAvx2<DType::kF32>(x, rows, dim, weight, eps, y);
      case DType::kF16: return RmsNormAvx2<DType::kF16>(x, rows, dim, weight, eps, y);
      case DType::kBF16: return RmsNormAvx2<DType::kBF16>(x, rows, dim, weight, eps, y);
    }
  }
#endif
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    float ss = 0.0f;
    for (int64_t i = 0; i < dim; ++i) ss += xr[i] * xr[i];
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(dim) + eps);
    for (int64_t i = 0; i < dim; ++i) yr[i] = xr[i] * inv * WeightAt(weight, i);
  }
}

std::vector<float> RopeInvFreq(int64_t rotary_dim, double theta) {
  std::vector<float> inv(static_cast<size_t>(rotary_dim / 2));
  for (int64_t i = 0; i < rotary_dim / 2; ++i) {
    // HF: 1.0 / (base ** (arange(0, dim, 2).float() / dim)), all in float32.
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(rotary_dim);
    inv[static_cast<size_t>(i)] =
        1.0f / static_cast<float>(std::pow(static_cast<float>(theta), exponent));
  }
  return inv;
}

namespace {

void CosSin(std::span<const float> inv_freq, int64_t pos, float* cs, float* sn) {
  const auto p = static_cast<float>(pos);
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    // The angle is rounded to float first, as HF's float32 `position * inv_freq` is.
    const double angle = static_cast<double>(p * inv_freq[i]);
    cs[i] = static_cast<float>(std::cos(angle));
    sn[i] = static_cast<float>(std::sin(angle));
  }
}

// Rotates the heads of one row by the given cos/sin.
void RotateRow(float* row, int64_t heads, int64_t head_dim, int64_t half, const float* cs,
               const float* sn) {
#ifdef AICLOUD_KERNELS_HAVE_AVX2
  if (ActiveIsa() == Isa::kAvx2) return RotateRowAvx2(row, heads, head_dim, half, cs, sn);
#endif
  for (int64_t h = 0; h < heads; ++h) {
    float* v = row + h * head_dim;
    for (int64_t i = 0; i < half; ++i) {
      const float a = v[i], b = v[i + half];
      v[i] = a * cs[i] - b * sn[i];
      v[i + half] = b * cs[i] + a * sn[i];
    }
  }
}

}  // namespace

RopeTable::RopeTable(std::span<const float> inv_freq, int64_t max_positions)
    : half_(static_cast<int64_t>(inv_freq.size())),
      max_positions_(std::max<int64_t>(0, max_positions)),
      inv_freq_(inv_freq.begin(), inv_freq.end()),
      cos_sin_(static_cast<size_t>(max_positions_ * 2 * half_)) {
  for (int64_t p = 0; p < max_positions_; ++p) {
    CosSin(inv_freq_, p, cos_sin_.data() + p * 2 * half_, cos_sin_.data() + p * 2 * half_ + half_);
  }
}

void Rope(float* x, int64_t tokens, int64_t heads, int64_t head_dim, int64_t row_stride,
          const int32_t* positions, const RopeTable& table) {
  const int64_t half = table.half();
  std::vector<float> scratch;  // only for positions past the table
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t pos = positions[t];
    if (pos < table.max_positions()) {
      RotateRow(x + t * row_stride, heads, head_dim, half, table.cos(pos), table.sin(pos));
      continue;
    }
    scratch.resize(static_cast<size_t>(2 * half));
    CosSin(table.inv_freq(), pos, scratch.data(), scratch.data() + half);
    RotateRow(x + t * row_stride, heads, head_dim, half, scratch.data(), scratch.data() + half);
  }
}

void SiluMul(const float* gate, const float* up, float* out, int64_t n) {
#ifdef AICLOUD_KERNELS_HAVE_AVX2
  if (ActiveIsa() == Isa::kAvx2) return SiluMulAvx2(gate, up, out, n);
#endif
  for (int64_t i = 0; i < n; ++i) out[i] = Silu(gate[i]) * up[i];
}

void SiluMulRows(const float* gate_up, int64_t rows, int64_t dim, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    SiluMul(gate_up + r * 2 * dim, gate_up + r * 2 * dim + dim, out + r * dim, dim);
  }
}

void Softmax(float* x, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) {
    float* xr = x + r * n;
#ifdef AICLOUD_KERNELS_HAVE_AVX2
    if (ActiveIsa() == Isa::kAvx2) {
      SoftmaxRowAvx2(xr, n);
      continue;
    }
#endif
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t i = 0; i < n; ++i) mx = std::max(mx, xr[i]);
    float sum = 0.0f;
    for (int64_t i = 0; i < n; ++i) {
      xr[i] = std::exp(xr[i] - mx);
      sum += xr[i];
    }
    for (int64_t i = 0; i < n; ++i) xr[i] *= 1.0f / sum;
  }
}

void Add(const float* a, const float* b, float* out, int64_t n) {
#ifdef AICLOUD_KERNELS_HAVE_AVX2
  if (ActiveIsa() == Isa::kAvx2) return AddAvx2(a, b, out, n);
#endif
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

Status EmbeddingLookup(const WeightView& table, std::span<const int32_t> ids, float* out) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= table.rows) {
      return InvalidArgumentError("token id " + std::to_string(ids[i]) + " at " +
                                  std::to_string(i) + " outside vocabulary of " +
                                  std::to_string(table.rows));
    }
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    DequantizeRow(table, ids[i], out + static_cast<int64_t>(i) * table.cols);
  }
  return OkStatus();
}

int64_t Argmax(const float* x, int64_t n) {
#ifdef AICLOUD_KERNELS_HAVE_AVX2
  if (ActiveIsa() == Isa::kAvx2) {
    // Two passes (max, then its first index) beat one branchy scalar pass on 50k-entry logits.
    const float best = MaxIgnoringNaNAvx2(x, n);
    for (int64_t i = 0; i < n; ++i) {
      if (x[i] == best) return i;
    }
    return 0;  // empty or all NaN
  }
#endif
  int64_t best = 0;
  float best_v = -std::numeric_limits<float>::infinity();
  bool found = false;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(x[i])) continue;
    if (!found || x[i] > best_v) {
      best = i;
      best_v = x[i];
      found = true;
    }
  }
  return best;
}

}  // namespace aicloud::engine::kernels
