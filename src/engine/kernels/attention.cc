#include "engine/kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "engine/kernels/cpu.h"
#include "engine/kernels/matrix.h"
#include "engine/kernels/simd_avx2.h"

namespace aicloud::engine::kernels {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Rows (query token x query head) one work item handles at most, and how many consecutive
// tokens of one sequence may share an item.
constexpr int64_t kMaxRows = 16;
constexpr int64_t kMaxRunTokens = 4;

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

// s[r][0, 8 * KV) = q[r] . K[:, key] for `rows` <= RG rows, K stored [dim][ldk].
template <int KV, int RG>
AICLOUD_AVX2 void Scores(const float* q, int64_t ldq, int rows, const float* k, int64_t ldk,
                         int64_t dim, float* s, int64_t lds) {
  __m256 acc[RG][KV];
#pragma GCC unroll 12
  for (int r = 0; r < RG; ++r) {
#pragma GCC unroll 4
    for (int c = 0; c < KV; ++c) acc[r][c] = _mm256_setzero_ps();
  }
  for (int64_t d = 0; d < dim; ++d) {
    __m256 kv[KV];
#pragma GCC unroll 4
    for (int c = 0; c < KV; ++c) kv[c] = _mm256_loadu_ps(k + d * ldk + 8 * c);
#pragma GCC unroll 12
    for (int r = 0; r < RG; ++r) {
      if (r < rows) {
        const __m256 qv = _mm256_broadcast_ss(q + r * ldq + d);
#pragma GCC unroll 4
        for (int c = 0; c < KV; ++c) acc[r][c] = _mm256_fmadd_ps(qv, kv[c], acc[r][c]);
      }
    }
  }
#pragma GCC unroll 12
  for (int r = 0; r < RG; ++r) {
    if (r < rows) {
#pragma GCC unroll 4
      for (int c = 0; c < KV; ++c) _mm256_storeu_ps(s + r * lds + 8 * c, acc[r][c]);
    }
  }
}

template <int KV>
AICLOUD_AVX2 void ScoresAllRows(const float* q, int64_t ldq, int64_t rows, const float* k,
                                int64_t ldk, int64_t dim, float* s, int64_t lds) {
  constexpr int kGroup = 12 / KV;  // 12 accumulators
  for (int64_t r = 0; r < rows; r += kGroup) {
    Scores<KV, kGroup>(q + r * ldq, ldq, static_cast<int>(std::min<int64_t>(kGroup, rows - r)), k,
                       ldk, dim, s + r * lds, lds);
  }
}

// acc[r][d0, d0 + 8 * ND) += sum_{t < valid} p[r][t] * v[t][d0, ...) for NR rows: the
// accumulators stay in registers across the block's keys.
template <int NR, int ND>
AICLOUD_AVX2 void ValueTile(const float* p, int64_t ldp, const float* v, int64_t ldv,
                            int64_t valid, float* acc, int64_t ldacc) {
  __m256 a[NR][ND];
#pragma GCC unroll 3
  for (int r = 0; r < NR; ++r) {
#pragma GCC unroll 4
    for (int c = 0; c < ND; ++c) a[r][c] = _mm256_loadu_ps(acc + r * ldacc + 8 * c);
  }
  for (int64_t t = 0; t < valid; ++t) {
    __m256 vv[ND];
#pragma GCC unroll 4
    for (int c = 0; c < ND; ++c) vv[c] = _mm256_loadu_ps(v + t * ldv + 8 * c);
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

template <int NR>
AICLOUD_AVX2 void ValueTileDims(int nd, const float* p, int64_t ldp, const float* v, int64_t ldv,
                                int64_t valid, float* acc, int64_t ldacc) {
  switch (nd) {
    case 1: return ValueTile<NR, 1>(p, ldp, v, ldv, valid, acc, ldacc);
    case 2: return ValueTile<NR, 2>(p, ldp, v, ldv, valid, acc, ldacc);
    case 3: return ValueTile<NR, 3>(p, ldp, v, ldv, valid, acc, ldacc);
    default: return ValueTile<NR, 4>(p, ldp, v, ldv, valid, acc, ldacc);
  }
}

// acc[r][0, dim) += sum_{t < valid} p[r][t] * v[t][0, dim), three rows and 32 dims at a time.
AICLOUD_AVX2 void AccumulateValues(const float* p, int64_t ldp, int64_t rows, const float* v,
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

AICLOUD_AVX2 void ToFloat(const KvCacheView& kv, const void* pool, int64_t index, int64_t n,
                          float* out) {
  const auto* h = static_cast<const uint16_t*>(pool) + index;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, avx2::LoadHalf8(h + i));
  for (; i < n; ++i) out[i] = HalfToFloat(h[i]);
  (void)kv;
}

// One work item: the rows (token, head) of a run that share KV head kv_head, walked block by
// block with an online softmax. Scores of masked positions are -inf before the max is taken, so
// stale cache contents past a token's context (even NaN) never reach the result; values are
// read only for positions below the run's longest context.
AICLOUD_AVX2 void AttendAvx2(const Job& job, const Run& run, int64_t kv_head) {
  const KvCacheView& kv = *job.kv;
  const int64_t dim = kv.head_dim;
  const int64_t bs = kv.block_size;
  const int64_t g = job.group;
  const int64_t rows = run.count * g;

  alignas(32) float qs[kMaxRows * kMaxHeadDim];
  alignas(32) float acc[kMaxRows * kMaxHeadDim];
  alignas(32) float s[kMaxRows * kMaxBlock];
  alignas(32) float kbuf[kMaxHeadDim * kMaxBlock];
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

  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t block = last.block_table[static_cast<size_t>(b)];
    const int64_t base = b * bs;
    const int64_t valid = std::min(bs, max_ctx - base);
    const int64_t k_index = KIndex(kv, block, kv_head, 0, 0);
    const int64_t v_index = VIndex(kv, block, kv_head, 0, 0);
    const float* kp;
    const float* vp;
    if (kv.type == DType::kF16) {
      ToFloat(kv, kv.k, k_index, dim * bs, kbuf);
      ToFloat(kv, kv.v, v_index, valid * dim, vbuf);
      kp = kbuf;
      vp = vbuf;
    } else {
      kp = static_cast<const float*>(kv.k) + k_index;
      vp = static_cast<const float*>(kv.v) + v_index;
    }

    switch (bs / 8) {
      case 1: ScoresAllRows<1>(qs, dim, rows, kp, bs, dim, s, bs); break;
      case 2: ScoresAllRows<2>(qs, dim, rows, kp, bs, dim, s, bs); break;
      default: ScoresAllRows<4>(qs, dim, rows, kp, bs, dim, s, bs); break;
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

    AccumulateValues(s, bs, rows, vp, valid, dim, acc, dim);
  }

  for (int64_t i = 0; i < run.count; ++i) {
    const int64_t t = run.first + i;
    for (int64_t j = 0; j < g; ++j) {
      const int64_t r = i * g + j;
      float* o = job.out + t * job.out_stride + (kv_head * g + j) * dim;
      const __m256 inv = _mm256_set1_ps(1.0f / l[r]);
      for (int64_t d = 0; d < dim; d += 8) {
        _mm256_storeu_ps(o + d, _mm256_mul_ps(_mm256_loadu_ps(acc + r * dim + d), inv));
      }
    }
  }
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
  pool.ParallelFor(items, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const Run& run = run_list[static_cast<size_t>(i / kv.kv_heads)];
      const int64_t kv_head = i % kv.kv_heads;
#ifdef AICLOUD_KERNELS_HAVE_AVX2
      if (avx2) {
        AttendAvx2(job, run, kv_head);
        continue;
      }
#endif
      AttendScalar(job, run, kv_head);
    }
  });
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
