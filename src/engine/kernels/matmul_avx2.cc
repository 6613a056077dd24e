// AVX2 + FMA + F16C versions of the MatMul building blocks (see matmul_internal.h).
#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/kernels/matmul_internal.h"
#include "engine/kernels/simd_avx2.h"

#ifdef AICLOUD_KERNELS_HAVE_AVX2

namespace aicloud::engine::kernels::internal {
namespace {

using avx2::HorizontalSum4;
using avx2::TailMask;

// Eight weights of a float-like row at column k, as floats.
template <WeightFormat F>
AICLOUD_AVX2_INLINE __m256 Load8(const std::byte* row, int64_t k) {
  if constexpr (F == WeightFormat::kF32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + k);
  } else if constexpr (F == WeightFormat::kF16) {
    return avx2::LoadHalf8(reinterpret_cast<const uint16_t*>(row) + k);
  } else {
    return avx2::LoadBF16x8(reinterpret_cast<const uint16_t*>(row) + k);
  }
}

template <WeightFormat F>
inline float Load1(const std::byte* row, int64_t k) {
  if constexpr (F == WeightFormat::kF32) {
    return reinterpret_cast<const float*>(row)[k];
  } else if constexpr (F == WeightFormat::kF16) {
    return HalfToFloat(reinterpret_cast<const uint16_t*>(row)[k]);
  } else {
    return BF16ToFloat(reinterpret_cast<const uint16_t*>(row)[k]);
  }
}

// Rows are short (1-2 KiB), so four rows read side by side are four short streams the
// hardware prefetcher barely ramps up on; measured cold, F16 and Q8 GEMV ran at half the
// bandwidth F32 (longer rows) got. The four rows of a group are contiguous, so the group after
// it starts 4 rows ahead: touch the same 16 columns of those rows now, while this group is
// computed, hiding DRAM latency behind it.
template <WeightFormat F>
AICLOUD_AVX2_INLINE void PrefetchNextGroup(const std::byte* r0, size_t ahead, int64_t k) {
  constexpr size_t kElem = F == WeightFormat::kF32 ? 4 : 2;
  const size_t row = ahead / 4;
  const char* p = reinterpret_cast<const char*>(r0) + ahead + static_cast<size_t>(k) * kElem;
  if ((k & (kElem == 4 ? 15 : 31)) == 0) {  // one hint per 64-byte line of each row
    _mm_prefetch(p, _MM_HINT_T0);
    _mm_prefetch(p + row, _MM_HINT_T0);
    _mm_prefetch(p + 2 * row, _MM_HINT_T0);
    _mm_prefetch(p + 3 * row, _MM_HINT_T0);
  }
}

// Next group for Q8 too (measured: 4, 8 and 16 rows ahead stream at the same rate).
constexpr size_t kQ8PrefetchRows = 4;

// The last n < 8 weights of a row from column k, zero-filled to eight floats (what a masked
// load of a converted panel gives the GEMM tile).
template <WeightFormat F>
AICLOUD_AVX2_INLINE __m256 LoadTail(const std::byte* row, int64_t k, int64_t n) {
  alignas(32) float t[8] = {};
  for (int64_t i = 0; i < n; ++i) t[i] = Load1<F>(row, k + i);
  return _mm256_load_ps(t);
}

// Four rows against one x, each element summed exactly as Tile sums it in the GEMM: per K
// chunk (KChunk) one 8-lane accumulator, x * w fused-added in column order, a zero-masked
// tail, HorizontalSum4, and the chunks added to y in order. So a row's result has the same
// bits at m == 1 as in any batch, and a sequence's tokens do not depend on its neighbours.
// One FMA chain per row is enough: the loop waits on memory, not on FMA latency.
template <WeightFormat F>
AICLOUD_AVX2 void GemvFloatRows(const float* x, const WeightView& w, int64_t n0, int64_t n1,
                                float* y) {
  const int64_t kk = w.cols;
  const int64_t kc = KChunk(kk);
  const size_t ahead = 4 * w.row_bytes();  // the next group of four rows
  for (int64_t n = n0; n < n1; n += 4) {
    const int64_t rows = std::min<int64_t>(4, n1 - n);
    // A short last group repeats its last row; the extra sums are not stored.
    const std::byte* r0 = w.row(n);
    const std::byte* r1 = w.row(n + std::min<int64_t>(1, rows - 1));
    const std::byte* r2 = w.row(n + std::min<int64_t>(2, rows - 1));
    const std::byte* r3 = w.row(n + std::min<int64_t>(3, rows - 1));
    for (int64_t k0 = 0; k0 < kk; k0 += kc) {
      const int64_t k1 = std::min(kk, k0 + kc);
      __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      int64_t k = k0;
      for (; k + 8 <= k1; k += 8) {
        PrefetchNextGroup<F>(r0, ahead, k);
        const __m256 xv = _mm256_loadu_ps(x + k);
        a0 = _mm256_fmadd_ps(xv, Load8<F>(r0, k), a0);
        a1 = _mm256_fmadd_ps(xv, Load8<F>(r1, k), a1);
        a2 = _mm256_fmadd_ps(xv, Load8<F>(r2, k), a2);
        a3 = _mm256_fmadd_ps(xv, Load8<F>(r3, k), a3);
      }
      if (k < k1) {
        const __m256 xv = _mm256_maskload_ps(x + k, TailMask(k1 - k));
        a0 = _mm256_fmadd_ps(xv, LoadTail<F>(r0, k, k1 - k), a0);
        a1 = _mm256_fmadd_ps(xv, LoadTail<F>(r1, k, k1 - k), a1);
        a2 = _mm256_fmadd_ps(xv, LoadTail<F>(r2, k, k1 - k), a2);
        a3 = _mm256_fmadd_ps(xv, LoadTail<F>(r3, k, k1 - k), a3);
      }
      alignas(16) float s[4];
      _mm_store_ps(s, HorizontalSum4(a0, a1, a2, a3));
      for (int64_t i = 0; i < rows; ++i) y[n + i] = k0 == 0 ? s[i] : y[n + i] + s[i];
    }
  }
}

// One 32-block of int8 weights times the matching |x| and sign(x): 8 int32 partial sums as
// floats. maddubs multiplies unsigned by signed bytes, so the sign of x moves onto w; |x| and
// |w| are at most 127, so the pairwise int16 sums (<= 2 * 127 * 127) cannot saturate.
AICLOUD_AVX2_INLINE __m256 BlockDot(__m256i ax, __m256i sx, const int8_t* wq) {
  const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wq));
  const __m256i p16 = _mm256_maddubs_epi16(ax, _mm256_sign_epi8(wv, sx));
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
}

// A Q8 row times float x, as 8 partial sums.
AICLOUD_AVX2_INLINE __m256 Q8RowTimesFloat(const std::byte* row, const float* x, int64_t nb) {
  const auto* blocks = reinterpret_cast<const BlockQ8*>(row);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const float* xb = x + b * kQ8BlockSize;
    __m256 s = _mm256_mul_ps(avx2::LoadInt8x8(blocks[b].q), _mm256_loadu_ps(xb));
    s = _mm256_fmadd_ps(avx2::LoadInt8x8(blocks[b].q + 8), _mm256_loadu_ps(xb + 8), s);
    s = _mm256_fmadd_ps(avx2::LoadInt8x8(blocks[b].q + 16), _mm256_loadu_ps(xb + 16), s);
    s = _mm256_fmadd_ps(avx2::LoadInt8x8(blocks[b].q + 24), _mm256_loadu_ps(xb + 24), s);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(avx2::HalfToFloatF16C(blocks[b].d)), s, acc);
  }
  return acc;
}

}  // namespace

AICLOUD_AVX2 void GemvAvx2(const float* x, const WeightView& w, int64_t n0, int64_t n1, float* y) {
  switch (w.format) {
    case WeightFormat::kF32: return GemvFloatRows<WeightFormat::kF32>(x, w, n0, n1, y);
    case WeightFormat::kF16: return GemvFloatRows<WeightFormat::kF16>(x, w, n0, n1, y);
    case WeightFormat::kBF16: return GemvFloatRows<WeightFormat::kBF16>(x, w, n0, n1, y);
    case WeightFormat::kQ8: break;
  }
  // Q8 with float activations: widen each block to float.
  const int64_t nb = w.cols / kQ8BlockSize;
  int64_t n = n0;
  for (; n + 4 <= n1; n += 4) {
    alignas(16) float s[4];
    _mm_store_ps(s, HorizontalSum4(Q8RowTimesFloat(w.row(n), x, nb),
                                   Q8RowTimesFloat(w.row(n + 1), x, nb),
                                   Q8RowTimesFloat(w.row(n + 2), x, nb),
                                   Q8RowTimesFloat(w.row(n + 3), x, nb)));
    std::copy(s, s + 4, y + n);
  }
  for (; n < n1; ++n) y[n] = avx2::HorizontalSum(Q8RowTimesFloat(w.row(n), x, nb));
}

AICLOUD_AVX2 void GemvQ8Int8Avx2(const QuantizedRow& x, const WeightView& w, int64_t n0, int64_t n1, float* y) {
  const int64_t nb = x.blocks;
  const size_t row_bytes = w.row_bytes();
  const size_t ahead = kQ8PrefetchRows * row_bytes;
  int64_t n = n0;
  for (; n + 4 <= n1; n += 4) {
    const auto* w0 = reinterpret_cast<const BlockQ8*>(w.row(n));
    const auto* w1 = reinterpret_cast<const BlockQ8*>(w.row(n + 1));
    const auto* w2 = reinterpret_cast<const BlockQ8*>(w.row(n + 2));
    const auto* w3 = reinterpret_cast<const BlockQ8*>(w.row(n + 3));
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t b = 0; b < nb; ++b) {
      if ((b & 1) == 0) {  // see PrefetchNextGroup: 68 bytes per two blocks of each row
        const char* p = reinterpret_cast<const char*>(w0 + b) + ahead;
        _mm_prefetch(p, _MM_HINT_T0);
        _mm_prefetch(p + row_bytes, _MM_HINT_T0);
        _mm_prefetch(p + 2 * row_bytes, _MM_HINT_T0);
        _mm_prefetch(p + 3 * row_bytes, _MM_HINT_T0);
      }
      const __m256i sx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.q + b * 32));
      const __m256i ax = _mm256_sign_epi8(sx, sx);
      const float dx = x.d[b];
      a0 = _mm256_fmadd_ps(BlockDot(ax, sx, w0[b].q),
                           _mm256_set1_ps(avx2::HalfToFloatF16C(w0[b].d) * dx), a0);
      a1 = _mm256_fmadd_ps(BlockDot(ax, sx, w1[b].q),
                           _mm256_set1_ps(avx2::HalfToFloatF16C(w1[b].d) * dx), a1);
      a2 = _mm256_fmadd_ps(BlockDot(ax, sx, w2[b].q),
                           _mm256_set1_ps(avx2::HalfToFloatF16C(w2[b].d) * dx), a2);
      a3 = _mm256_fmadd_ps(BlockDot(ax, sx, w3[b].q),
                           _mm256_set1_ps(avx2::HalfToFloatF16C(w3[b].d) * dx), a3);
    }
    alignas(16) float s[4];
    _mm_store_ps(s, HorizontalSum4(a0, a1, a2, a3));
    std::copy(s, s + 4, y + n);
  }
  for (; n < n1; ++n) {
    const auto* w0 = reinterpret_cast<const BlockQ8*>(w.row(n));
    __m256 a0 = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const __m256i sx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.q + b * 32));
      const __m256i ax = _mm256_sign_epi8(sx, sx);
      a0 = _mm256_fmadd_ps(BlockDot(ax, sx, w0[b].q),
                           _mm256_set1_ps(avx2::HalfToFloatF16C(w0[b].d) * x.d[b]), a0);
    }
    const __m256 z = _mm256_setzero_ps();
    y[n] = _mm_cvtss_f32(HorizontalSum4(a0, z, z, z));  // as the groups and the GEMM tile sum
  }
}

AICLOUD_AVX2 void QuantizeActivationsAvx2(const float* x, int64_t n, int8_t* q, float* d) {
  const __m256 sign_bit = _mm256_set1_ps(-0.0f);
  for (int64_t b = 0; b < n / 32; ++b) {
    const float* xb = x + b * 32;
    __m256 v[4];
    __m256 amax = _mm256_setzero_ps();
    for (int i = 0; i < 4; ++i) {
      v[i] = _mm256_loadu_ps(xb + 8 * i);
      amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign_bit, v[i]));
    }
    const float m = avx2::HorizontalMax(amax);
    const float scale = m / 127.0f;
    d[b] = scale;
    const __m256 inv = _mm256_set1_ps(scale > 0.0f ? 1.0f / scale : 0.0f);
    __m256i qi[4];
    for (int i = 0; i < 4; ++i) {
      // cvtps rounds to nearest even under the default MXCSR, like std::nearbyint.
      qi[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], inv));
    }
    // Pack 32-bit -> 16-bit -> 8-bit (saturating) and undo the lane interleave of the packs.
    const __m256i p01 = _mm256_packs_epi32(qi[0], qi[1]);
    const __m256i p23 = _mm256_packs_epi32(qi[2], qi[3]);
    __m256i p = _mm256_packs_epi16(p01, p23);
    p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + b * 32), p);
  }
}

AICLOUD_AVX2 void ConvertPanelAvx2(const WeightView& w, int64_t n0, int64_t n1, int64_t k0, int64_t k1,
                      float* out, int64_t ld) {
  const int64_t kc = k1 - k0;
  for (int64_t n = n0; n < n1; ++n) {
    const std::byte* row = w.row(n);
    float* o = out + (n - n0) * ld;
    switch (w.format) {
      case WeightFormat::kF32:
        std::copy(reinterpret_cast<const float*>(row) + k0, reinterpret_cast<const float*>(row) + k1, o);
        break;
      case WeightFormat::kF16: {
        const auto* h = reinterpret_cast<const uint16_t*>(row) + k0;
        int64_t k = 0;
        for (; k + 8 <= kc; k += 8) _mm256_storeu_ps(o + k, avx2::LoadHalf8(h + k));
        for (; k < kc; ++k) o[k] = HalfToFloat(h[k]);
        break;
      }
      case WeightFormat::kBF16: {
        const auto* h = reinterpret_cast<const uint16_t*>(row) + k0;
        int64_t k = 0;
        for (; k + 8 <= kc; k += 8) _mm256_storeu_ps(o + k, avx2::LoadBF16x8(h + k));
        for (; k < kc; ++k) o[k] = BF16ToFloat(h[k]);
        break;
      }
      case WeightFormat::kQ8: {
        // k0 and k1 are multiples of 32 for Q8 (the caller's chunking keeps them so).
        const auto* blocks = reinterpret_cast<const BlockQ8*>(row) + k0 / kQ8BlockSize;
        for (int64_t b = 0; b < kc / kQ8BlockSize; ++b) {
          const __m256 d = _mm256_set1_ps(avx2::HalfToFloatF16C(blocks[b].d));
          for (int i = 0; i < 4; ++i) {
            _mm256_storeu_ps(o + b * 32 + 8 * i,
                             _mm256_mul_ps(d, avx2::LoadInt8x8(blocks[b].q + 8 * i)));
          }
        }
        break;
      }
    }
  }
}

namespace {

// The register tile: R rows of x times C rows of the panel, 8 columns of k per step.
// R * C accumulators + C panel vectors + 1 x vector must fit the 16 ymm registers.
template <int R, int C>
AICLOUD_AVX2 void Tile(const float* x, int64_t ldx, const float* p, int64_t ldp, int64_t kc,
                       float* y, int64_t ldy, bool accumulate) {
  __m256 acc[R][C];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  }
  int64_t k = 0;
  for (; k + 8 <= kc; k += 8) {
    __m256 wv[C];
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) wv[c] = _mm256_loadu_ps(p + c * ldp + k);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256 xv = _mm256_loadu_ps(x + r * ldx + k);
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) acc[r][c] = _mm256_fmadd_ps(xv, wv[c], acc[r][c]);
    }
  }
  if (k < kc) {
    const __m256i mask = TailMask(kc - k);
    __m256 wv[C];
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) wv[c] = _mm256_maskload_ps(p + c * ldp + k, mask);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256 xv = _mm256_maskload_ps(x + r * ldx + k, mask);
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) acc[r][c] = _mm256_fmadd_ps(xv, wv[c], acc[r][c]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    __m256 v[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) v[c] = acc[r][c];
    alignas(16) float s[4];
    _mm_store_ps(s, HorizontalSum4(v[0], v[1], v[2], v[3]));
    float* yr = y + r * ldy;
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) yr[c] = accumulate ? yr[c] + s[c] : s[c];
  }
}

constexpr int kTileRows = 4;
constexpr int kTileCols = 3;

template <int R>
AICLOUD_AVX2 void TileRowsDispatch(int c, const float* x, int64_t ldx, const float* p, int64_t ldp,
                                   int64_t kc, float* y, int64_t ldy, bool accumulate) {
  switch (c) {
    case 1: return Tile<R, 1>(x, ldx, p, ldp, kc, y, ldy, accumulate);
    case 2: return Tile<R, 2>(x, ldx, p, ldp, kc, y, ldy, accumulate);
    default: return Tile<R, 3>(x, ldx, p, ldp, kc, y, ldy, accumulate);
  }
}

// The int8 tile's shape: kQ8Rows rows of x times kQ8Cols weight rows.
constexpr int64_t kQ8Rows = 4, kQ8Cols = 2;
constexpr int64_t kQ8Lanes = kQ8Rows * kQ8Cols;  // one scale product per accumulator

// The int8 register tile: R rows of quantized x times C Q8 weight rows, one 32-block per step.
// Each accumulator takes the same operations in the same order as GemvQ8Int8Avx2's (BlockDot,
// then a fused add scaled by d_w * d_x), so batched and single-row results are identical.
// The scale products come precomputed from `s` (s[b * 8 + r * 2 + c] = d_w[c][b] * d_x[r][b],
// see ScaleTable): a broadcast load per accumulator instead of a multiply leaves the vector
// ALUs five operations per 32 multiply-adds instead of six, and the scales no longer hold
// registers.
template <int R, int C>
AICLOUD_AVX2 void Q8Tile(const int8_t* q, const float* s, int64_t nb, const BlockQ8* const* wr,
                         float* y, int64_t ldy) {
  __m256 acc[R][C];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b) {
    const float* sb = s + b * kQ8Lanes;
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m256i sx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + (r * nb + b) * 32));
      const __m256i ax = _mm256_sign_epi8(sx, sx);
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) {
        acc[r][c] = _mm256_fmadd_ps(BlockDot(ax, sx, wr[c][b].q),
                                    _mm256_broadcast_ss(sb + r * kQ8Cols + c), acc[r][c]);
      }
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    __m256 v[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) v[c] = acc[r][c];
    alignas(16) float t[4];
    _mm_store_ps(t, HorizontalSum4(v[0], v[1], v[2], v[3]));
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) y[r * ldy + c] = t[c];
  }
}

template <int R>
AICLOUD_AVX2 void Q8TileCols(int64_t c, const int8_t* q, const float* s, int64_t nb,
                             const BlockQ8* const* wr, float* y, int64_t ldy) {
  if (c == 2) return Q8Tile<R, 2>(q, s, nb, wr, y, ldy);
  Q8Tile<R, 1>(q, s, nb, wr, y, ldy);
}

// The tile's scale products, s[b * 8 + r * 2 + c] = dw[b * 2 + c] * dx[b * 4 + r]: the same
// float products the GEMV forms (HalfToFloat(d_w) * d_x), one multiply per block for all
// eight accumulators. dx holds a row group's activation scales block-major ([b][4]), dw a
// column pair's weight scales ([b][2]).
AICLOUD_AVX2 void ScaleTable(const float* dx, const float* dw, int64_t nb, float* s) {
  const __m256i dup = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
  for (int64_t b = 0; b < nb; ++b) {
    const __m256 x = _mm256_permutevar8x32_ps(_mm256_broadcast_ps(reinterpret_cast<const __m128*>(dx + 4 * b)), dup);
    const __m256 w = _mm256_castpd_ps(_mm256_broadcast_sd(reinterpret_cast<const double*>(dw + 2 * b)));
    _mm256_storeu_ps(s + b * kQ8Lanes, _mm256_mul_ps(w, x));
  }
}

}  // namespace

AICLOUD_AVX2 void GemmQ8Int8Avx2(const int8_t* q, const float* d, int64_t m, int64_t blocks,
                                 const WeightView& w, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  // Scales rearranged once per call for ScaleTable: the weight rows' (F16 -> float) by column
  // pair, [pair][b][2], and each row group's activation scales, [b][4]; padding lanes are 0.
  const int64_t pairs = (n1 - n0 + kQ8Cols - 1) / kQ8Cols;
  thread_local std::vector<float> dw_buf, dx_buf, s_buf;
  dw_buf.assign(static_cast<size_t>(pairs * blocks * kQ8Cols), 0.0f);
  if (dx_buf.size() < static_cast<size_t>(blocks * kQ8Rows)) dx_buf.resize(blocks * kQ8Rows);
  if (s_buf.size() < static_cast<size_t>(blocks * kQ8Lanes)) s_buf.resize(blocks * kQ8Lanes);
  float* dw = dw_buf.data();
  float* dx = dx_buf.data();
  float* s = s_buf.data();
  for (int64_t j = n0; j < n1; ++j) {
    const auto* wb = reinterpret_cast<const BlockQ8*>(w.row(j));
    float* o = dw + ((j - n0) / kQ8Cols) * blocks * kQ8Cols + (j - n0) % kQ8Cols;
    for (int64_t b = 0; b < blocks; ++b) o[b * kQ8Cols] = avx2::HalfToFloatF16C(wb[b].d);
  }
  for (int64_t i = 0; i < m; i += kQ8Rows) {
    const int64_t r = std::min(kQ8Rows, m - i);
    const int8_t* qi = q + i * blocks * 32;
    for (int64_t b = 0; b < blocks; ++b) {
      for (int64_t k = 0; k < kQ8Rows; ++k) dx[b * kQ8Rows + k] = k < r ? d[(i + k) * blocks + b] : 0.0f;
    }
    for (int64_t j = n0; j < n1; j += kQ8Cols) {
      const int64_t c = std::min(kQ8Cols, n1 - j);
      const BlockQ8* wr[kQ8Cols] = {reinterpret_cast<const BlockQ8*>(w.row(j)),
                                    reinterpret_cast<const BlockQ8*>(w.row(j + c - 1))};
      ScaleTable(dx, dw + ((j - n0) / kQ8Cols) * blocks * kQ8Cols, blocks, s);
      float* yij = y + i * ldy + j;
      switch (r) {
        case 1: Q8TileCols<1>(c, qi, s, blocks, wr, yij, ldy); break;
        case 2: Q8TileCols<2>(c, qi, s, blocks, wr, yij, ldy); break;
        case 3: Q8TileCols<3>(c, qi, s, blocks, wr, yij, ldy); break;
        default: Q8TileCols<4>(c, qi, s, blocks, wr, yij, ldy); break;
      }
    }
  }
}

AICLOUD_AVX2 void GemmBlockAvx2(const float* x, int64_t ldx, int64_t m, const float* p, int64_t ldp, int64_t n,
                   int64_t kc, float* y, int64_t ldy, bool accumulate) {
  for (int64_t i = 0; i < m; i += kTileRows) {
    const int r = static_cast<int>(std::min<int64_t>(kTileRows, m - i));
    for (int64_t j = 0; j < n; j += kTileCols) {
      const int c = static_cast<int>(std::min<int64_t>(kTileCols, n - j));
      const float* xi = x + i * ldx;
      const float* pj = p + j * ldp;
      float* yij = y + i * ldy + j;
      switch (r) {
        case 1: TileRowsDispatch<1>(c, xi, ldx, pj, ldp, kc, yij, ldy, accumulate); break;
        case 2: TileRowsDispatch<2>(c, xi, ldx, pj, ldp, kc, yij, ldy, accumulate); break;
        case 3: TileRowsDispatch<3>(c, xi, ldx, pj, ldp, kc, yij, ldy, accumulate); break;
        default: TileRowsDispatch<4>(c, xi, ldx, pj, ldp, kc, yij, ldy, accumulate); break;
      }
    }
  }
}

}  // namespace aicloud::engine::kernels::internal

#endif  // AICLOUD_KERNELS_HAVE_AVX2
