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

// x quantized per 32-block for the int8 Q8 path: q[k] = round(x[k] / d[k / 32]).
struct QuantizedRow {
  const int8_t* q;
  const float* d;
  int64_t blocks;
};

// Quantizes n floats (n % 32 == 0) to q (n int8) and d (n / 32 scales), scalar or AVX2.
void QuantizeActivations(const float* x, int64_t n, int8_t* q, float* d);

// y[n] = dot(x, W[n]) for n in [n0, n1), m == 1.
void GemvScalar(const float* x, const WeightView& w, int64_t n0, int64_t n1, float* y);
void GemvQ8Int8Scalar(const QuantizedRow& x, const WeightView& w, int64_t n0, int64_t n1, float* y);

// Converts rows [n0, n1) x cols [k0, k1) of w to float, row stride ld.
void ConvertPanel(const WeightView& w, int64_t n0, int64_t n1, int64_t k0, int64_t k1, float* out,
                  int64_t ld);

#if defined(__x86_64__)
void GemvAvx2(const float* x, const WeightView& w, int64_t n0, int64_t n1, float* y);
void GemvQ8Int8Avx2(const QuantizedRow& x, const WeightView& w, int64_t n0, int64_t n1, float* y);
void QuantizeActivationsAvx2(const float* x, int64_t n, int8_t* q, float* d);
void ConvertPanelAvx2(const WeightView& w, int64_t n0, int64_t n1, int64_t k0, int64_t k1,
                      float* out, int64_t ld);
// y[i][j] (+)= sum_k x[i][k] * p[j][k] for i < m, j < n, k < kc; strides in floats.
// accumulate: add to y instead of overwriting it.
void GemmBlockAvx2(const float* x, int64_t ldx, int64_t m, const float* p, int64_t ldp, int64_t n,
                   int64_t kc, float* y, int64_t ldy, bool accumulate);
#endif

}  // namespace aicloud::engine::kernels::internal
