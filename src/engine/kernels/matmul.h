// MatMul: y = x * W^T for activations x in float and weights W in any WeightFormat.
//
// Two regimes, picked by the number of activation rows m:
// - m == 1 (single-stream decode) is bound by streaming W from memory once. Rows of W are split
//   over the pool; each thread reads its rows in their stored format (no conversion pass), four
//   rows at a time against one read of x. F16 weights halve and Q8 weights nearly quarter the
//   bytes of F32, and the speed follows the bytes.
// - m > 1 (prefill, batched decode) is bound by arithmetic. W is cut into panels of 48 rows,
//   each panel is converted to float once into a per-thread buffer (F32 weights are used in
//   place), and a 4x3 register-tiled kernel multiplies it with every row of x, so each weight is
//   fetched from memory once per call however many rows x has.
// For Q8, m == 1 multiplies int8 weights with x quantized to int8 blocks (see Q8Activations);
// m > 1 dequantizes panels to float. Both paths are tested against MatMulReference.
//
//   ThreadPool pool(2);
//   MatMul(pool, x, /*m=*/seqs, q_proj.view(), q);  // q[seqs][q_proj.rows()]
#pragma once

#include <cstdint>

#include "engine/kernels/matrix.h"
#include "engine/kernels/thread_pool.h"

namespace aicloud::engine::kernels {

// How Q8 weights meet float activations at m == 1.
enum class Q8Activations {
  // x is quantized per 32-block to int8 once per call and multiplied with int8 weights using
  // 8-bit multiply-adds; adds x's rounding error (at most max|x_block|/254 per element) to the
  // weights'. Fastest; what llama.cpp's Q8_0 does.
  kInt8,
  // Weights are widened to float and multiplied with x as is: only the weights' error.
  kFloat,
};

struct MatMulOptions {
  Q8Activations q8_activations = Q8Activations::kInt8;
};

// y[i][n] = sum_k x[i][k] * W[n][k] for i < m, n < w.rows, k < w.cols.
// x is m rows of w.cols floats, y is m rows of w.rows floats, both contiguous and not
// overlapping. Accumulates in float (F32 results match a double-precision reference to about
// 1e-6 relative of sum |x*w|).
// REQUIRES: Validate(w).ok(); m >= 0.
void MatMul(ThreadPool& pool, const float* x, int64_t m, const WeightView& w, float* y,
            const MatMulOptions& options = {});

// Same contract, single-threaded, scalar, accumulating in double: the tests' reference.
void MatMulReference(const float* x, int64_t m, const WeightView& w, float* y);

}  // namespace aicloud::engine::kernels
