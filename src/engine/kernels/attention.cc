#include "engine/kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "engine/kernels/cpu.h"
#include "engine/kernels/matrix.h"
#include "engine/kernels/simd_avx2.h"

namespace aicloud::engine::kernels {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Rows (query token x query head) one work item handles at most, and how many consecutive
// tokens of one sequence may share an item.
constexpr int64_t kMaxRows = 24;
constexpr int64_t kMaxRunTokens = 8;

// A context is summed in parts of this many blocks at fixed boundaries (0, kPartBlocks, ...):
// the parts of long contexts run in parallel and are merged in order. The cut depends only on
// the token's own context, never on the batch, so a token's attention has the same bits alone
// or next to any other tokens.
constexpr int64_t kPartBlocks = 16;

// Shapes the AVX2 kernel takes; anything else runs the scalar kernel.
constexpr int64_t kMaxHeadDim = 256;
constexpr int64_t kMaxBlock = 32;

float Load(const KvCacheView& kv, const void* pool, int64_t index) {
  if (kv.type == DType::kF16) return HalfToFloat(static_cast<const uint16_t*>(pool)[index]);
  return static_cast<const float*>(pool)[index];
}

int64_t KIndex(const KvCacheView& kv, int64_t block, int64_t head, int64_t d, int64_t slot) {
  return block * kv.BlockElements() + (head * kv.head_dim + d) * kv.block_size + slot;
}
int64_t VIndex(const KvCacheView& kv, int64_t block, int64_t head, int64_t slot, int64_t d) {
  return block * kv.BlockElements() + (head * kv.block_size + slot) * kv.head_dim + d;
}

// A run of consecutive query tokens of one sequence at consecutive positions.
struct Run {
  int64_t first;
  int64_t count;
};

// Everything a work item needs, shared by all items of one call.
struct Job {
  const float* q;
  int64_t q_stride;
  std::span<const AttentionToken> tokens;
  int64_t heads;
  int64_t group;  // query heads per KV head
  const KvCacheView* kv;
  float scale;
  float* out;
  int64_t out_stride;
};

// Plain online softmax, one (token, head) row at a time.
void AttendScalar(const Job& job, const Run& run, int64_t kv_head) {
  const KvCacheView& kv = *job.kv;
  const int64_t dim = kv.head_dim;
  std::vector<float> acc(static_cast<size_t>(dim));
  for (int64_t t = run.first; t < run.first + run.count; ++t) {
    const AttentionToken& tok = job.tokens[static_cast<size_t>(t)];
    for (int64_t h = kv_head * job.group; h < (kv_head + 1) * job.group; ++h) {
      const float* q = job.q + t * job.q_stride + h * dim;
      std::fill(acc.begin(), acc.end(), 0.0f);
      float m = kNegInf, l = 0.0f;
      for (int64_t pos = 0; pos < tok.context_len; ++pos) {
        const int64_t block = tok.block_table[static_cast<size_t>(pos / kv.block_size)];
        const int64_t slot = pos % kv.block_size;
        float s = 0.0f;
        for (int64_t d = 0; d < dim; ++d) s += q[d] * Load(kv, kv.k, KIndex(kv, block, kv_head, d, slot));
        s *= job.scale;
        if (s > m) {
          const float alpha = std::exp(m - s);
          l *= alpha;
          for (float& a : acc) a *= alpha;
          m = s;
        }
        const float p = std::exp(s - m);
        l += p;
        for (int64_t d = 0; d < dim; ++d) acc[d] += p * Load(kv, kv.v, VIndex(kv, block, kv_head, slot, d));
      }
      float* o = job.out + t * job.out_stride + h * dim;
      for (int64_t d = 0; d < dim; ++d) o[d] = acc[d] / l;
    }
  }
}

#ifdef AICLOUD_KERNELS_HAVE_AVX2

// Eight cache elements as floats.
AICLOUD_AVX2_INLINE __m256 Load8(const float* p) { return _mm256_loadu_ps(p); }
AICLOUD_AVX2_INLINE __m256 Load8(const uint16_t* p) { return avx2::LoadHalf8(p); }

// s[r][0, 8 * KV) = q[r] . K[:, key] for R rows, K stored [dim][ldk]: 8 * KV keys per FMA
// column, no horizontal sums.
template <int KV, int R, typename T>
AICLOUD_AVX2 void Scores(const float* q, int64_t ldq, const T* k, int64_t ldk, int64_t dim,
                         float* s, int64_t lds) {
  __m256 acc[R][KV];
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int c = 0; c < KV; ++c) acc[r][c] = _mm256_setzero_ps();
  }
  for (int64_t d = 0; d < dim; ++d) {
    __m256 kv[KV];
#pragma GCC unroll 4
    for (int c = 0; c < KV; ++c) kv[c] = Load8(k + d * ldk + 8 * c);
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) {
      const __m256 qv = _mm256_broadcast_ss(q + r * ldq + d);
#pragma GCC unroll 4
      for (int c = 0; c < KV; ++c) acc[r][c] = _mm256_fmadd_ps(qv, kv[c], acc[r][c]);
    }
  }
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int c = 0; c < KV; ++c) _mm256_storeu_ps(s + r * lds + 8 * c, acc[r][c]);
  }
}

// Scores for `rows` <= 12 / KV rows: picks the instantiation with exactly that many.
template <int KV, typename T, int R = 12 / KV>
AICLOUD_AVX2 void ScoresRows(int rows, const float* q, int64_t ldq, const T* k, int64_t ldk,
                             int64_t dim, float* s, int64_t lds) {
  if constexpr (R > 1) {
    if (rows < R) return ScoresRows<KV, T, R - 1>(rows, q, ldq, k, ldk, dim, s, lds);
  }
  Scores<KV, R, T>(q, ldq, k, ldk, dim, s, lds);
}

template <int KV, typename T>
AICLOUD_AVX2 void ScoresAllRows(const float* q, int64_t ldq, int64_t rows, const T* k,
                                int64_t ldk, int64_t dim, float* s, int64_t lds) {
  constexpr int kGroup = 12 / KV;  // 12 accumulators
  for (int64_t r = 0; r < rows; r += kGroup) {
    ScoresRows<KV, T>(static_cast<int>(std::min<int64_t>(kGroup, rows - r)), q + r * ldq, ldq, k,
                      ldk, dim, s + r * lds, lds);
  }
}

// acc[r][d0, d0 + 8 * ND) += sum_{t < valid} p[r][t] * v[t][d0, ...) for NR rows: the
// accumulators stay in registers across the block's keys.
template <int NR, int ND, typename T>
AICLOUD_AVX2 void ValueTile(const float* p, int64_t ldp, const T* v, int64_t ldv, int64_t valid,
                            float* acc, int64_t ldacc) {
  __m256 a[NR][ND];
#pragma GCC unroll 3
  for (int r = 0; r < NR; ++r) {
#pragma GCC unroll 4
    for (int c = 0; c < ND; ++c) a[r][c] = _mm256_loadu_ps(acc + r * ldacc + 8 * c);
  }
  for (int64_t t = 0; t < valid; ++t) {
    __m256 vv[ND];
#pragma GCC unroll 4
    for (int c = 0; c < ND; ++c) vv[c] = Load8(v + t * ldv + 8 * c);
#pragma GCC unroll 3
    for (int r = 0; r < NR; ++r) {
      const __m256 pv = _mm256_broadcast_ss(p + r * ldp + t);
#pragma GCC unroll 4
      for (int c = 0; c < ND; ++c) a[r][c] = _mm256_fmadd_ps(pv, vv[c], a[r][c]);
    }
  }
#pragma GCC unroll 3
  for (int r = 0; r < NR; ++r) {
#pragma GCC unroll 4
    for (int c = 0; c < ND; ++c) _mm256_storeu_ps(acc + r * ldacc + 8 * c, a[r][c]);
  }
}

template <int NR, typename T>
AICLOUD_AVX2 void ValueTileDims(int nd, const float* p, int64_t ldp, const T* v, int64_t ldv,
                                int64_t valid, float* acc, int64_t ldacc) {
  switch (nd) {
    case 1: return ValueTile<NR, 1>(p, ldp, v, ldv, valid, acc, ldacc);
    case 2: return ValueTile<NR, 2>(p, ldp, v, ldv, valid, acc, ldacc);
    case 3: return ValueTile<NR, 3>(p, ldp, v, ldv, valid, acc, ldacc);
    default: return ValueTile<NR, 4>(p, ldp, v, ldv, valid, acc, ldacc);
  }
}

// acc[r][0, dim) += sum_{t < valid} p[r][t] * v[t][0, dim), three rows and 32 dims at a time.
template <typename T>
AICLOUD_AVX2 void AccumulateValues(const float* p, int64_t ldp, int64_t rows, const T* v,
                                   int64_t valid, int64_t dim, float* acc, int64_t ldacc) {
  for (int64_t r0 = 0; r0 < rows; r0 += 3) {
    const int64_t nr = std::min<int64_t>(3, rows - r0);
    for (int64_t d0 = 0; d0 < dim; d0 += 32) {
      const int nd = static_cast<int>(std::min<int64_t>(32, dim - d0) / 8);
      const float* pr = p + r0 * ldp;
      float* ar = acc + r0 * ldacc + d0;
      switch (nr) {
        case 1: ValueTileDims<1>(nd, pr, ldp, v + d0, dim, valid, ar, ldacc); break;
        case 2: ValueTileDims<2>(nd, pr, ldp, v + d0, dim, valid, ar, ldacc); break;
        default: ValueTileDims<3>(nd, pr, ldp, v + d0, dim, valid, ar, ldacc); break;
      }
    }
  }
}

// Pulls n elements at p into the cache (one hint per 64-byte line).
template <typename T>
AICLOUD_AVX2 void Prefetch(const T* p, int64_t n) {
  const char* c = reinterpret_cast<const char*>(p);
  for (int64_t off = 0; off < n * static_cast<int64_t>(sizeof(T)); off += 64) {
    _mm_prefetch(c + off, _MM_HINT_T0);
  }
}

// Scores of all rows against one block of bs keys (bs a multiple of 8, at most 32).
template <typename T>
AICLOUD_AVX2 void BlockScores(const float* q, int64_t ldq, int64_t rows, const T* k, int64_t bs,
                              int64_t dim, float* s) {
  switch (bs / 8) {
    case 1: return ScoresAllRows<1>(q, ldq, rows, k, bs, dim, s, bs);
    case 2: return ScoresAllRows<2>(q, ldq, rows, k, bs, dim, s, bs);
    default: return ScoresAllRows<4>(q, ldq, rows, k, bs, dim, s, bs);
  }
}

AICLOUD_AVX2 void WidenHalf(const uint16_t* h, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, avx2::LoadHalf8(h + i));
  for (; i < n; ++i) out[i] = HalfToFloat(h[i]);
}

// One work item: the rows (token, head) of a run that share KV head kv_head, walked block by
// block with an online softmax. Scores of masked positions are -inf before the max is taken, so
// stale cache contents past a token's context (even NaN) never reach the result; values are
// read only for positions below the run's longest context.
template <typename T>
AICLOUD_AVX2 void AttendAvx2Impl(const Job& job, const Run& run, int64_t kv_head, int64_t part,
                                 float* partial) {
  const KvCacheView& kv = *job.kv;
  const int64_t dim = kv.head_dim;
  const int64_t bs = kv.block_size;
  const int64_t g = job.group;
  const int64_t rows = run.count * g;

  alignas(32) float qs[kMaxRows * kMaxHeadDim];
  alignas(32) float acc[kMaxRows * kMaxHeadDim];
  alignas(32) float s[kMaxRows * kMaxBlock];
  alignas(32) float kbuf[kMaxHeadDim * kMaxBlock];  // widened F16 block, prefill runs only
  alignas(32) float vbuf[kMaxHeadDim * kMaxBlock];
  float m[kMaxRows], l[kMaxRows];
  int64_t ctx[kMaxRows];

  const __m256 scale = _mm256_set1_ps(job.scale);
  for (int64_t i = 0; i < run.count; ++i) {
    const int64_t t = run.first + i;
    for (int64_t j = 0; j < g; ++j) {
      const int64_t r = i * g + j;
      const float* q = job.q + t * job.q_stride + (kv_head * g + j) * dim;
      for (int64_t d = 0; d < dim; d += 8) {
        _mm256_storeu_ps(qs + r * dim + d, _mm256_mul_ps(_mm256_loadu_ps(q + d), scale));
      }
      std::fill(acc + r * dim, acc + (r + 1) * dim, 0.0f);
      m[r] = kNegInf;
      l[r] = 0.0f;
      ctx[r] = job.tokens[static_cast<size_t>(t)].context_len;
    }
  }
  const AttentionToken& last = job.tokens[static_cast<size_t>(run.first + run.count - 1)];
  const int64_t max_ctx = last.context_len;  // contexts grow along a run
  const int64_t blocks = (max_ctx + bs - 1) / bs;
  const __m256 neg_inf = _mm256_set1_ps(kNegInf);

  const int64_t b_end = std::min(blocks, (part + 1) * kPartBlocks);
  for (int64_t b = part * kPartBlocks; b < b_end; ++b) {
    const int64_t block = last.block_table[static_cast<size_t>(b)];
    const int64_t base = b * bs;
    const int64_t valid = std::min(bs, max_ctx - base);
    const T* kp = static_cast<const T*>(kv.k) + KIndex(kv, block, kv_head, 0, 0);
    const T* vp = static_cast<const T*>(kv.v) + VIndex(kv, block, kv_head, 0, 0);
    // Blocks are scattered over the pool, so the hardware prefetcher restarts at each one: ask
    // for the next block's K and V while this one is being computed.
    if (b + 1 < b_end) {
      const int64_t next = last.block_table[static_cast<size_t>(b + 1)];
      Prefetch(static_cast<const T*>(kv.k) + KIndex(kv, next, kv_head, 0, 0), dim * bs);
      Prefetch(static_cast<const T*>(kv.v) + VIndex(kv, next, kv_head, 0, 0),
               std::min(bs, max_ctx - (b + 1) * bs) * dim);
    }
    // F16 blocks are widened while loading; when several row groups read the block (prefill
    // runs), widening it once into a float copy is cheaper.
    bool widened = false;
    if constexpr (std::is_same_v<T, uint16_t>) {
      if (rows > 3) {
        WidenHalf(kp, dim * bs, kbuf);
        WidenHalf(vp, valid * dim, vbuf);
        widened = true;
      }
    }
    if (widened) {
      BlockScores(qs, dim, rows, kbuf, bs, dim, s);
    } else {
      BlockScores(qs, dim, rows, kp, bs, dim, s);
    }

    for (int64_t r = 0; r < rows; ++r) {
      float* sr = s + r * bs;
      // Mask positions at or past this row's context.
      __m256 vmax = neg_inf;
      for (int64_t c = 0; c < bs; c += 8) {
        const __m256 pos = _mm256_cvtepi32_ps(
            _mm256_add_epi32(_mm256_set1_epi32(static_cast<int32_t>(base + c)),
                             _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
        const __m256 masked = _mm256_cmp_ps(pos, _mm256_set1_ps(static_cast<float>(ctx[r])), _CMP_GE_OQ);
        const __m256 v = _mm256_blendv_ps(_mm256_loadu_ps(sr + c), neg_inf, masked);
        _mm256_storeu_ps(sr + c, v);
        vmax = _mm256_max_ps(vmax, v);
      }
      const float bmax = avx2::HorizontalMax(vmax);
      if (bmax == kNegInf) {  // nothing visible to this row in this block
        std::fill(sr, sr + bs, 0.0f);
        continue;
      }
      const float m_new = std::max(m[r], bmax);
      const __m256 vm = _mm256_set1_ps(m_new);
      __m256 vsum = _mm256_setzero_ps();
      for (int64_t c = 0; c < bs; c += 8) {
        const __m256 p = avx2::Exp(_mm256_sub_ps(_mm256_loadu_ps(sr + c), vm));
        _mm256_storeu_ps(sr + c, p);
        vsum = _mm256_add_ps(vsum, p);
      }
      if (m_new > m[r]) {
        const float alpha = std::exp(m[r] - m_new);  // 0 on the first visible block
        l[r] *= alpha;
        const __m256 va = _mm256_set1_ps(alpha);
        float* ar = acc + r * dim;
        for (int64_t d = 0; d < dim; d += 8) _mm256_storeu_ps(ar + d, _mm256_mul_ps(_mm256_loadu_ps(ar + d), va));
        m[r] = m_new;
      }
      l[r] += avx2::HorizontalSum(vsum);
    }

    if (widened) {
      AccumulateValues(s, bs, rows, static_cast<const float*>(vbuf), valid, dim, acc, dim);
    } else {
      AccumulateValues(s, bs, rows, vp, valid, dim, acc, dim);
    }
  }

  if (partial != nullptr) {  // one of several parts of the context: keep m, l, acc for Merge
    std::copy(acc, acc + rows * dim, partial);
    std::copy(m, m + rows, partial + kMaxRows * dim);
    std::copy(l, l + rows, partial + kMaxRows * dim + kMaxRows);
    return;
  }
  for (int64_t i = 0; i < run.count; ++i) {
    const int64_t t = run.first + i;
    for (int64_t j = 0; j < g; ++j) {
      const int64_t r = i * g + j;
      float* o = job.out + t * job.out_stride + (kv_head * g + j) * dim;
      // Divided, not multiplied by 1 / l: Merge of a single part gives exactly this.
      const __m256 vl = _mm256_set1_ps(l[r]);
      for (int64_t d = 0; d < dim; d += 8) {
        _mm256_storeu_ps(o + d, _mm256_div_ps(_mm256_loadu_ps(acc + r * dim + d), vl));
      }
    }
  }
}

void AttendAvx2(const Job& job, const Run& run, int64_t kv_head, int64_t part, float* partial) {
  if (job.kv->type == DType::kF16) {
    return AttendAvx2Impl<uint16_t>(job, run, kv_head, part, partial);
  }
  AttendAvx2Impl<float>(job, run, kv_head, part, partial);
}

AICLOUD_AVX2 void StoreKvAvx2Row(const KvCacheView& kv, int64_t block, int64_t slot,
                                 const float* k, const float* v) {
  // V row per head is contiguous; K is scattered with stride block_size.
  for (int64_t h = 0; h < kv.kv_heads; ++h) {
    const int64_t vi = VIndex(kv, block, h, slot, 0);
    if (kv.type == DType::kF16) {
      ConvertFromFloat(DType::kF16, v + h * kv.head_dim, static_cast<uint16_t*>(kv.v) + vi, kv.head_dim);
    } else {
      std::copy(v + h * kv.head_dim, v + (h + 1) * kv.head_dim, static_cast<float*>(kv.v) + vi);
    }
  }
  for (int64_t h = 0; h < kv.kv_heads; ++h) {
    for (int64_t d = 0; d < kv.head_dim; ++d) {
      const int64_t ki = KIndex(kv, block, h, d, slot);
      if (kv.type == DType::kF16) {
        static_cast<uint16_t*>(kv.k)[ki] = FloatToHalf(k[h * kv.head_dim + d]);
      } else {
        static_cast<float*>(kv.k)[ki] = k[h * kv.head_dim + d];
      }
    }
  }
}

#endif  // AICLOUD_KERNELS_HAVE_AVX2

// Floats one context part of a work item leaves for Merge: acc [kMaxRows][dim], m, l.
int64_t PartialFloats(int64_t dim) { return kMaxRows * (dim + 2); }

// Combines the parts of one work item: with M = max m_p, the softmax sums and accumulators of
// the parts scale by e^(m_p - M). A part that saw nothing of a row has m_p = -inf, weight 0.
void Merge(const Job& job, const Run& run, int64_t kv_head, int64_t parts, const float* partials) {
  const int64_t dim = job.kv->head_dim;
  const int64_t g = job.group;
  const int64_t stride = PartialFloats(dim);
  for (int64_t i = 0; i < run.count; ++i) {
    for (int64_t j = 0; j < g; ++j) {
      const int64_t r = i * g + j;
      float mx = kNegInf;
      for (int64_t p = 0; p < parts; ++p) mx = std::max(mx, partials[p * stride + kMaxRows * dim + r]);
      float* o = job.out + (run.first + i) * job.out_stride + (kv_head * g + j) * dim;
      std::fill(o, o + dim, 0.0f);
      float l = 0.0f;
      for (int64_t p = 0; p < parts; ++p) {
        const float* part = partials + p * stride;
        const float mp = part[kMaxRows * dim + r];
        if (mp == kNegInf) continue;
        const float w = std::exp(mp - mx);
        l += w * part[kMaxRows * dim + kMaxRows + r];
        for (int64_t d = 0; d < dim; ++d) o[d] += w * part[r * dim + d];
      }
      for (int64_t d = 0; d < dim; ++d) o[d] /= l;
    }
  }
}

bool Avx2Shape(const KvCacheView& kv, int64_t group) {
  return kv.head_dim % 8 == 0 && kv.head_dim <= kMaxHeadDim && kv.block_size % 8 == 0 &&
         kv.block_size <= kMaxBlock && group <= kMaxRows;
}

}  // namespace

Status Validate(const KvCacheView& kv) {
  if (kv.type != DType::kF32 && kv.type != DType::kF16) {
    return InvalidArgumentError(std::string("KV cache type must be F32 or F16, got ") +
                                std::string(DTypeName(kv.type)));
  }
  if (kv.num_blocks <= 0 || kv.block_size <= 0 || kv.kv_heads <= 0 || kv.head_dim <= 0) {
    return InvalidArgumentError("KV cache sizes must be positive");
  }
  if (kv.k == nullptr || kv.v == nullptr) return InvalidArgumentError("KV cache pools missing");
  return OkStatus();
}

void StoreKv(const KvCacheView& kv, const int64_t* slots, const float* k, int64_t k_stride,
             const float* v, int64_t v_stride, int64_t tokens) {
  for (int64_t i = 0; i < tokens; ++i) {
    const int64_t block = slots[i] / kv.block_size;
    const int64_t slot = slots[i] % kv.block_size;
    const float* ki = k + i * k_stride;
    const float* vi = v + i * v_stride;
#ifdef AICLOUD_KERNELS_HAVE_AVX2
    if (ActiveIsa() == Isa::kAvx2) {
      StoreKvAvx2Row(kv, block, slot, ki, vi);
      continue;
    }
#endif
    for (int64_t h = 0; h < kv.kv_heads; ++h) {
      for (int64_t d = 0; d < kv.head_dim; ++d) {
        const int64_t kx = KIndex(kv, block, h, d, slot);
        const int64_t vx = VIndex(kv, block, h, slot, d);
        const float kf = ki[h * kv.head_dim + d], vf = vi[h * kv.head_dim + d];
        if (kv.type == DType::kF16) {
          static_cast<uint16_t*>(kv.k)[kx] = FloatToHalf(kf);
          static_cast<uint16_t*>(kv.v)[vx] = FloatToHalf(vf);
        } else {
          static_cast<float*>(kv.k)[kx] = kf;
          static_cast<float*>(kv.v)[vx] = vf;
        }
      }
    }
  }
}

Status ValidateAttention(std::span<const AttentionToken> tokens, int64_t heads,
                         const KvCacheView& kv) {
  AICLOUD_RETURN_IF_ERROR(Validate(kv));
  if (heads <= 0 || heads % kv.kv_heads != 0) {
    return InvalidArgumentError("heads (" + std::to_string(heads) +
                                ") must be a positive multiple of kv_heads (" +
                                std::to_string(kv.kv_heads) + ")");
  }
  for (size_t t = 0; t < tokens.size(); ++t) {
    const AttentionToken& tok = tokens[t];
    const int64_t capacity = static_cast<int64_t>(tok.block_table.size()) * kv.block_size;
    if (tok.context_len < 1 || tok.context_len > capacity) {
      return InvalidArgumentError("token " + std::to_string(t) + ": context_len " +
                                  std::to_string(tok.context_len) + " outside [1, " +
                                  std::to_string(capacity) + "]");
    }
    const int64_t used = (tok.context_len + kv.block_size - 1) / kv.block_size;
    for (int64_t b = 0; b < used; ++b) {
      const int32_t id = tok.block_table[static_cast<size_t>(b)];
      if (id < 0 || id >= kv.num_blocks) {
        return InvalidArgumentError("token " + std::to_string(t) + ": block id " +
                                    std::to_string(id) + " outside the pool of " +
                                    std::to_string(kv.num_blocks));
      }
    }
  }
  return OkStatus();
}

void PagedAttention(ThreadPool& pool, const float* q, int64_t q_stride,
                    std::span<const AttentionToken> tokens, int64_t heads, const KvCacheView& kv,
                    float scale, float* out, int64_t out_stride) {
  if (tokens.empty()) return;
  const int64_t group = heads / kv.kv_heads;
  const Job job{q, q_stride, tokens, heads, group, &kv, scale, out, out_stride};

  // Runs: consecutive tokens of one sequence (same block table) at consecutive positions, as a
  // prefill chunk is; decode tokens of different sequences are runs of one.
  thread_local std::vector<Run> runs;
  runs.clear();
  const int64_t max_run = std::clamp<int64_t>(kMaxRows / std::max<int64_t>(group, 1), 1, kMaxRunTokens);
  for (int64_t t = 0; t < static_cast<int64_t>(tokens.size()); ++t) {
    if (!runs.empty()) {
      Run& r = runs.back();
      const AttentionToken& prev = tokens[static_cast<size_t>(t - 1)];
      const AttentionToken& cur = tokens[static_cast<size_t>(t)];
      if (r.count < max_run && cur.block_table.data() == prev.block_table.data() &&
          cur.block_table.size() == prev.block_table.size() &&
          cur.context_len == prev.context_len + 1) {
        ++r.count;
        continue;
      }
    }
    runs.push_back({t, 1});
  }

  const bool avx2 = ActiveIsa() == Isa::kAvx2 && Avx2Shape(kv, group);
  const int64_t items = static_cast<int64_t>(runs.size()) * kv.kv_heads;
  const std::vector<Run>& run_list = runs;  // the workers read the caller's runs

  // Work units: each item's context in parts of kPartBlocks blocks (AVX2 kernel only; the
  // scalar kernel sums a context in one piece). An item of one part is computed in place;
  // the parts of longer ones leave partial sums that Merge combines in part order.
  thread_local std::vector<int64_t> first_unit;  // per item, its first unit; then the total
  thread_local std::vector<int64_t> unit_item;
  first_unit.assign(static_cast<size_t>(items) + 1, 0);
  unit_item.clear();
  for (int64_t item = 0; item < items; ++item) {
    const Run& r = run_list[static_cast<size_t>(item / kv.kv_heads)];
    const int64_t ctx = tokens[static_cast<size_t>(r.first + r.count - 1)].context_len;
    const int64_t blocks = (ctx + kv.block_size - 1) / kv.block_size;
    const int64_t parts = avx2 ? std::max<int64_t>(1, (blocks + kPartBlocks - 1) / kPartBlocks) : 1;
    first_unit[static_cast<size_t>(item) + 1] = first_unit[static_cast<size_t>(item)] + parts;
    unit_item.insert(unit_item.end(), static_cast<size_t>(parts), item);
  }
  const int64_t units = first_unit[static_cast<size_t>(items)];
  const std::vector<int64_t>& starts = first_unit;
  const std::vector<int64_t>& owner = unit_item;

#ifdef AICLOUD_KERNELS_HAVE_AVX2
  thread_local std::vector<float> partial_buf;
  const int64_t stride = PartialFloats(kv.head_dim);
  if (units > items && partial_buf.size() < static_cast<size_t>(units * stride)) {
    partial_buf.resize(static_cast<size_t>(units * stride));
  }
  float* partials = partial_buf.data();
#endif
  pool.ParallelFor(units, [&](int64_t begin, int64_t end) {
    for (int64_t u = begin; u < end; ++u) {
      const int64_t item = owner[static_cast<size_t>(u)];
      const Run& run = run_list[static_cast<size_t>(item / kv.kv_heads)];
      const int64_t kv_head = item % kv.kv_heads;
#ifdef AICLOUD_KERNELS_HAVE_AVX2
      if (avx2) {
        const int64_t first = starts[static_cast<size_t>(item)];
        const bool split = starts[static_cast<size_t>(item) + 1] - first > 1;
        AttendAvx2(job, run, kv_head, u - first, split ? partials + u * stride : nullptr);
        continue;
      }
#endif
      AttendScalar(job, run, kv_head);
    }
  });
#ifdef AICLOUD_KERNELS_HAVE_AVX2
  if (units == items) return;
  for (int64_t item = 0; item < items; ++item) {
    const int64_t first = starts[static_cast<size_t>(item)];
    const int64_t parts = starts[static_cast<size_t>(item) + 1] - first;
    if (parts > 1) {
      Merge(job, run_list[static_cast<size_t>(item / kv.kv_heads)], item % kv.kv_heads, parts,
            partials + first * stride);
    }
  }
#endif
}

void PagedAttentionReference(const float* q, int64_t q_stride,
                             std::span<const AttentionToken> tokens, int64_t heads,
                             const KvCacheView& kv, float scale, float* out, int64_t out_stride) {
  const int64_t group = heads / kv.kv_heads;
  const int64_t dim = kv.head_dim;
  for (size_t t = 0; t < tokens.size(); ++t) {
    const AttentionToken& tok = tokens[t];
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t kvh = h / group;
      const float* qh = q + static_cast<int64_t>(t) * q_stride + h * dim;
      std::vector<double> scores(static_cast<size_t>(tok.context_len));
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t pos = 0; pos < tok.context_len; ++pos) {
        const int64_t block = tok.block_table[static_cast<size_t>(pos / kv.block_size)];
        const int64_t slot = pos % kv.block_size;
        double s = 0;
        for (int64_t d = 0; d < dim; ++d) s += double{qh[d]} * Load(kv, kv.k, KIndex(kv, block, kvh, d, slot));
        scores[static_cast<size_t>(pos)] = s * scale;
        mx = std::max(mx, s * scale);
      }
      double sum = 0;
      for (double& s : scores) sum += (s = std::exp(s - mx));
      float* o = out + static_cast<int64_t>(t) * out_stride + h * dim;
      for (int64_t d = 0; d < dim; ++d) {
        double acc = 0;
        for (int64_t pos = 0; pos < tok.context_len; ++pos) {
          const int64_t block = tok.block_table[static_cast<size_t>(pos / kv.block_size)];
          acc += scores[static_cast<size_t>(pos)] *
                 Load(kv, kv.v, VIndex(kv, block, kvh, pos % kv.block_size, d));
        }
        o[d] = static_cast<float>(acc / sum);
      }
    }
  }
}

}  // namespace aicloud::engine::kernels
