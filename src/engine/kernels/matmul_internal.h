// Internal: the pieces of MatMul that live in different translation units. Not public API.
#pragma once

#include <cstdint>

#include "engine/kernels/matrix.h"

namespace aicloud::engine::kernels::internal {

// GEMM blocking (m > 1). Panels of kPanelRows weight rows are converted to float once per task;
// K is cut into chunks of at most kMaxKChunk so a 4-row x tile and a 3-row weight tile stay in
// L1; a task covers up to kTaskRows rows of x (measured best of 128/256/512 for prefill: 256),
// so a panel is converted at most twice for a 512-token prompt.
inline constexpr int64_t kPanelRows = 48;
inline constexpr int64_t kMaxKChunk = 640;
inline constexpr int64_t kTaskRows = 256;

// The K chunk of float GEMM: (nearly) equal chunks of at most kMaxKChunk, multiples of 32 so
// Q8 blocks are never split. GEMV sums each row chunk by chunk at the same boundaries, so a
// row's result has the same bits whether it is multiplied alone or with other rows.
inline int64_t KChunk(int64_t k) {
  const int64_t num_k = (k + kMaxKChunk - 1) / kMaxKChunk;
  const int64_t c = ((k + num_k - 1) / num_k + 31) / 32 * 32;
  return c < k ? c : k;
}

// x quantized per 32-block for the int8 Q8 path: q[k] = round(x[k] / d[k / 32]).
struct QuantizedRow {
  const int8_t* q;
  const float* d;
  int64_t blocks;
};

// Quantizes n floats (n % 32 == 0) to q (n int8) and d (n / 32 scales), scalar or AVX2.
void QuantizeActivations(const float* x, int64_t n, int8_t* q, float* d);

// y[n] = dot(x, W[n]) for n in [n0, n1), m == 1. The scalar kernels are also the scalar GEMM
// (called once per row of x), so results never depend on m on machines without AVX2 either.
void GemvScalar(const float* x, const WeightView& w, int64_t n0, int64_t n1, float* y);
void GemvQ8Int8Scalar(const QuantizedRow& x, const WeightView& w, int64_t n0, int64_t n1, float* y);

// Converts rows [n0, n1) x cols [k0, k1) of w to float, row stride ld.
void ConvertPanel(const WeightView& w, int64_t n0, int64_t n1, int64_t k0, int64_t k1, float* out,
                  int64_t ld);

#if defined(__x86_64__)
void GemvAvx2(const float* x, const WeightView& w, int64_t n0, int64_t n1, float* y);
void GemvQ8Int8Avx2(const QuantizedRow& x, const WeightView& w, int64_t n0, int64_t n1, float* y);
void QuantizeActivationsAvx2(const float* x, int64_t n, int8_t* q, float* d);
// y[i][n] = dot(x_i, W[n]) for i < m, n in [n0, n1): m rows of quantized x (row i at
// q + i * blocks * 32 and d + i * blocks) against Q8 weights, int8 multiply-adds; each element
// is accumulated exactly as GemvQ8Int8Avx2 accumulates it.
void GemmQ8Int8Avx2(const int8_t* q, const float* d, int64_t m, int64_t blocks, const WeightView& w,
                    int64_t n0, int64_t n1, float* y, int64_t ldy);
void ConvertPanelAvx2(const WeightView& w, int64_t n0, int64_t n1, int64_t k0, int64_t k1,
                      float* out, int64_t ld);
// y[i][j] (+)= sum_k x[i][k] * p[j][k] for i < m, j < n, k < kc; strides in floats.
// accumulate: add to y instead of overwriting it.
void GemmBlockAvx2(const float* x, int64_t ldx, int64_t m, const float* p, int64_t ldp, int64_t n,
                   int64_t kc, float* y, int64_t ldy, bool accumulate);
#endif

}  // namespace aicloud::engine::kernels::internal
