#include "engine/lora/apply.h"

#include <cmath>
#include <cstring>
#include <string>

#include "engine/kernels/cpu.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define AICLOUD_LORA_HAVE_AVX2 1
// Function-level target, as the kernels do: the library runs on any x86-64 and takes these paths
// only when ActiveIsa() says the CPU has AVX2, FMA and F16C.
#define AICLOUD_LORA_AVX2 __attribute__((target("avx2,fma,f16c")))
#define AICLOUD_LORA_AVX2_INLINE __attribute__((target("avx2,fma,f16c"), always_inline)) static inline
#endif

namespace aicloud::engine {
namespace {

constexpr int kT = LoraBatch::kTileTokens;

// The rows of one tile: each token's input row, and its output row at the module's columns.
struct TileRows {
  int count = 0;
  const float* x[kT] = {};
  float* y[kT] = {};
};

// --- scalar (the reference order: the vector code performs exactly these operations) ---------

inline float Widen(float v) { return v; }
inline float Widen(uint16_t v) { return HalfToFloat(v); }

// u[t][j] = scale * sum_k x_t[k] * A^T[k][j], one fused multiply-add chain per (t, j) over k.
template <typename E>
void ShrinkScalar(const TileRows& io, int64_t in, const E* at, int64_t rp, float scale, float* u) {
  for (int t = 0; t < io.count; ++t) {
    for (int64_t j = 0; j < rp; ++j) {
      float acc = 0.0f;
      for (int64_t k = 0; k < in; ++k) acc = std::fma(io.x[t][k], Widen(at[k * rp + j]), acc);
      u[t * rp + j] = acc * scale;
    }
  }
}

// y_t[o] += sum_r u[t][r] * B^T[r][o], one fused multiply-add chain per (t, o) over r, added last.
template <typename E>
void ExpandScalar(const TileRows& io, const float* u, int64_t rp, const E* bt, int64_t out) {
  for (int t = 0; t < io.count; ++t) {
    for (int64_t o = 0; o < out; ++o) {
      float acc = 0.0f;
      for (int64_t r = 0; r < rp; ++r) acc = std::fma(u[t * rp + r], Widen(bt[r * out + o]), acc);
      io.y[t][o] = io.y[t][o] + acc;
    }
  }
}

// --- AVX2 ---------------------------------------------------------------------------------------

#if defined(AICLOUD_LORA_HAVE_AVX2)

AICLOUD_LORA_AVX2_INLINE __m256 Load8(const float* p) { return _mm256_loadu_ps(p); }
AICLOUD_LORA_AVX2_INLINE __m256 Load8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// Lanes [0, n) set; n in [1, 7].
AICLOUD_LORA_AVX2_INLINE __m256i TailMask(int64_t n) {
  alignas(32) static const int32_t kMask[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kMask + 8 - n));
}
AICLOUD_LORA_AVX2_INLINE __m256 LoadPartial(const float* p, int64_t n, __m256i mask) {
  (void)n;
  return _mm256_maskload_ps(p, mask);
}
AICLOUD_LORA_AVX2_INLINE __m256 LoadPartial(const uint16_t* p, int64_t n, __m256i mask) {
  (void)mask;
  alignas(16) uint16_t tmp[8] = {};
  std::memcpy(tmp, p, static_cast<size_t>(n) * sizeof(uint16_t));
  return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(tmp)));
}

// Ranks [rc, rc + 8 NV) of T tokens: one 8-wide accumulator per token and 8 ranks, fed by one
// broadcast input feature at a time.
template <int T, int NV, typename E>
AICLOUD_LORA_AVX2 void ShrinkChunk(const TileRows& io, int64_t in, const E* at, int64_t rp, int64_t rc, float scale,
                                   float* u) {
  __m256 acc[T][NV];
#pragma GCC unroll 4
  for (int t = 0; t < T; ++t) {
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) acc[t][v] = _mm256_setzero_ps();
  }
  const E* a = at + rc;
  for (int64_t k = 0; k < in; ++k, a += rp) {
    __m256 w[NV];
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) w[v] = Load8(a + 8 * v);
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      const __m256 xb = _mm256_broadcast_ss(io.x[t] + k);
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) acc[t][v] = _mm256_fmadd_ps(xb, w[v], acc[t][v]);
    }
  }
  const __m256 s = _mm256_set1_ps(scale);
#pragma GCC unroll 4
  for (int t = 0; t < T; ++t) {
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) _mm256_storeu_ps(u + t * rp + rc + 8 * v, _mm256_mul_ps(acc[t][v], s));
  }
}

template <int NV, typename E>
AICLOUD_LORA_AVX2 void ShrinkChunkAny(const TileRows& io, int64_t in, const E* at, int64_t rp, int64_t rc, float scale,
                                      float* u) {
  switch (io.count) {
    case 1:
      return ShrinkChunk<1, NV>(io, in, at, rp, rc, scale, u);
    case 2:
      return ShrinkChunk<2, NV>(io, in, at, rp, rc, scale, u);
    case 3:
      return ShrinkChunk<3, NV>(io, in, at, rp, rc, scale, u);
    default:
      return ShrinkChunk<4, NV>(io, in, at, rp, rc, scale, u);
  }
}

template <typename E>
AICLOUD_LORA_AVX2 void ShrinkAvx2(const TileRows& io, int64_t in, const E* at, int64_t rp, float scale, float* u) {
  int64_t rc = 0;
  for (; rc + 16 <= rp; rc += 16) ShrinkChunkAny<2>(io, in, at, rp, rc, scale, u);
  if (rc < rp) ShrinkChunkAny<1>(io, in, at, rp, rc, scale, u);  // rp is a multiple of 8
}

// Columns [c, c + 8 NV) of T tokens: one accumulator per token and 8 columns over the ranks.
template <int T, int NV, typename E>
AICLOUD_LORA_AVX2 void ExpandCols(const TileRows& io, const float* u, int64_t rp, const E* bt, int64_t out, int64_t c) {
  __m256 acc[T][NV];
#pragma GCC unroll 4
  for (int t = 0; t < T; ++t) {
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) acc[t][v] = _mm256_setzero_ps();
  }
  const E* b = bt + c;
  for (int64_t r = 0; r < rp; ++r, b += out) {
    __m256 w[NV];
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) w[v] = Load8(b + 8 * v);
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      const __m256 ub = _mm256_broadcast_ss(u + t * rp + r);
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) acc[t][v] = _mm256_fmadd_ps(ub, w[v], acc[t][v]);
    }
  }
#pragma GCC unroll 4
  for (int t = 0; t < T; ++t) {
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) {
      float* y = io.y[t] + c + 8 * v;
      _mm256_storeu_ps(y, _mm256_add_ps(_mm256_loadu_ps(y), acc[t][v]));
    }
  }
}

// The last n < 8 columns, masked.
template <int T, typename E>
AICLOUD_LORA_AVX2 void ExpandTail(const TileRows& io, const float* u, int64_t rp, const E* bt, int64_t out, int64_t c,
                                  int64_t n) {
  const __m256i mask = TailMask(n);
  __m256 acc[T];
#pragma GCC unroll 4
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  const E* b = bt + c;
  for (int64_t r = 0; r < rp; ++r, b += out) {
    const __m256 w = LoadPartial(b, n, mask);
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) acc[t] = _mm256_fmadd_ps(_mm256_broadcast_ss(u + t * rp + r), w, acc[t]);
  }
#pragma GCC unroll 4
  for (int t = 0; t < T; ++t) {
    float* y = io.y[t] + c;
    _mm256_maskstore_ps(y, mask, _mm256_add_ps(_mm256_maskload_ps(y, mask), acc[t]));
  }
}

template <int T, typename E>
AICLOUD_LORA_AVX2 void ExpandT(const TileRows& io, const float* u, int64_t rp, const E* bt, int64_t out) {
  int64_t c = 0;
  for (; c + 16 <= out; c += 16) ExpandCols<T, 2>(io, u, rp, bt, out, c);
  if (c + 8 <= out) {
    ExpandCols<T, 1>(io, u, rp, bt, out, c);
    c += 8;
  }
  if (c < out) ExpandTail<T>(io, u, rp, bt, out, c, out - c);
}

template <typename E>
AICLOUD_LORA_AVX2 void ExpandAvx2(const TileRows& io, const float* u, int64_t rp, const E* bt, int64_t out) {
  switch (io.count) {
    case 1:
      return ExpandT<1>(io, u, rp, bt, out);
    case 2:
      return ExpandT<2>(io, u, rp, bt, out);
    case 3:
      return ExpandT<3>(io, u, rp, bt, out);
    default:
      return ExpandT<4>(io, u, rp, bt, out);
  }
}

#endif  // AICLOUD_LORA_HAVE_AVX2

// One tile through one adapted module: shrink into u, expand into the tokens' rows.
template <typename E>
void RunTile(const TileRows& io, const LoraWeights& w, bool avx2) {
  alignas(32) float u[kT * kMaxLoraRank];
  const int64_t rp = w.padded_rank();
  const E* at = static_cast<const E*>(w.a_t());
  const E* bt = static_cast<const E*>(w.b_t());
#if defined(AICLOUD_LORA_HAVE_AVX2)
  if (avx2) {
    ShrinkAvx2(io, w.in(), at, rp, w.scale(), u);
    ExpandAvx2(io, u, rp, bt, w.out());
    return;
  }
#endif
  (void)avx2;
  ShrinkScalar(io, w.in(), at, rp, w.scale(), u);
  ExpandScalar(io, u, rp, bt, w.out());
}

}  // namespace

// --- LoraBatch --------------------------------------------------------------------------------

void LoraBatch::Clear() {
  num_tokens_ = 0;
  tiles_.clear();
  held_.clear();
}

Status LoraBatch::Reset(std::span<const int32_t> token_slots, std::span<const std::shared_ptr<const LoraAdapter>> slots) {
  Clear();
  const int32_t num_slots = static_cast<int32_t>(slots.size());
  for (size_t i = 0; i < token_slots.size(); ++i) {
    const int32_t s = token_slots[i];
    if (s == kNoLora) continue;
    if (s < 0 || s >= num_slots) {
      return InvalidArgumentError("LoRA batch: token " + std::to_string(i) + " names adapter slot " + std::to_string(s) +
                                  ", outside the " + std::to_string(num_slots) + " slots");
    }
    if (slots[static_cast<size_t>(s)] == nullptr) {
      return InvalidArgumentError("LoRA batch: token " + std::to_string(i) + " names adapter slot " + std::to_string(s) +
                                  ", which holds no adapter");
    }
  }
  num_tokens_ = static_cast<int64_t>(token_slots.size());
  // Slots in order of first use; each slot's tokens in step order, cut into tiles.
  first_of_slot_.assign(static_cast<size_t>(num_slots), -1);
  slot_order_.clear();
  for (size_t i = 0; i < token_slots.size(); ++i) {
    const int32_t s = token_slots[i];
    if (s == kNoLora || first_of_slot_[static_cast<size_t>(s)] >= 0) continue;
    first_of_slot_[static_cast<size_t>(s)] = static_cast<int32_t>(i);
    slot_order_.push_back(s);
  }
  for (int32_t s : slot_order_) {
    const std::shared_ptr<const LoraAdapter>& a = slots[static_cast<size_t>(s)];
    held_.push_back(a);
    Tile tile{a.get(), 0, {}};
    for (size_t i = static_cast<size_t>(first_of_slot_[static_cast<size_t>(s)]); i < token_slots.size(); ++i) {
      if (token_slots[i] != s) continue;
      tile.rows[tile.count++] = static_cast<int32_t>(i);
      if (tile.count == kTileTokens) {
        tiles_.push_back(tile);
        tile.count = 0;
      }
    }
    if (tile.count > 0) tiles_.push_back(tile);
  }
  return OkStatus();
}

// --- application ------------------------------------------------------------------------------

std::array<LoraTarget, 3> QkvTargets(const ModelConfig& c) {
  return {LoraTarget{LoraModule::kQ, 0}, LoraTarget{LoraModule::kK, c.q_dim()},
          LoraTarget{LoraModule::kV, c.q_dim() + c.kv_dim()}};
}

std::array<LoraTarget, 2> GateUpTargets(const ModelConfig& c) {
  return {LoraTarget{LoraModule::kGate, 0}, LoraTarget{LoraModule::kUp, c.intermediate_size}};
}

void ApplyLora(kernels::ThreadPool& pool, const LoraBatch& batch, int64_t layer, std::span<const LoraTarget> targets,
               const float* x, int64_t x_stride, float* y, int64_t y_stride) {
  const std::span<const LoraBatch::Tile> tiles = batch.tiles();
  const int64_t num_tiles = static_cast<int64_t>(tiles.size());
  const int64_t items = num_tiles * static_cast<int64_t>(targets.size());
  if (items == 0) return;
  const bool avx2 = kernels::ActiveIsa() == kernels::Isa::kAvx2;
  pool.ParallelFor(items, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const LoraTarget& target = targets[static_cast<size_t>(i / num_tiles)];
      const LoraBatch::Tile& tile = tiles[static_cast<size_t>(i % num_tiles)];
      const LoraWeights* w = tile.adapter->weights(layer, target.module);
      if (w == nullptr) continue;
      TileRows io;
      io.count = tile.count;
      for (int t = 0; t < tile.count; ++t) {
        io.x[t] = x + static_cast<int64_t>(tile.rows[t]) * x_stride;
        io.y[t] = y + static_cast<int64_t>(tile.rows[t]) * y_stride + target.y_offset;
      }
      if (w->dtype() == DType::kF16) {
        RunTile<uint16_t>(io, *w, avx2);
      } else {
        RunTile<float>(io, *w, avx2);
      }
    }
  });
}

void ApplyLora(kernels::ThreadPool& pool, const LoraBatch& batch, int64_t layer, LoraModule module, const float* x,
               int64_t x_stride, float* y, int64_t y_stride, int64_t y_offset) {
  const LoraTarget target{module, y_offset};
  ApplyLora(pool, batch, layer, std::span<const LoraTarget>(&target, 1), x, x_stride, y, y_stride);
}

}  // namespace aicloud::engine
