// MatMul: y = x * W^T for activations x in float and weights W in any WeightFormat.
//
// Two regimes, picked by the number of activation rows m:
// - m == 1 (single-stream decode) is bound by streaming W from memory once. Rows of W are split
//   over the pool; each thread reads its rows in their stored format (no conversion pass), four
//   rows at a time against one read of x. F16 weights halve and Q8 weights nearly quarter the
//   bytes of F32, and the speed follows the bytes.
// - m > 1 (prefill, batched decode) is bound by arithmetic. W is cut into panels of 48 rows;
//   a task converts one panel to float into a per-thread buffer (F32 weights are used in
//   place) and a 4x3 register-tiled kernel multiplies it with up to 256 rows of x, so each
//   weight is fetched from memory once per 256 activation rows, not once per row.
// For Q8, x is quantized to int8 blocks (see Q8Activations) and multiplied with the int8
// weights: at m == 1 row by row, at m > 1 in int8 register tiles over 48-row panels.
//
// Batch invariance: every element of y is computed with the same operations in the same order
// whatever m is (the GEMV sums a row in the GEMM tile's K chunks and lanes; the int8 tile
// repeats the GEMV's block sums), so a row's result is bit-identical alone or in any batch, and
// a sequence's output never depends on which other sequences share its step. (Not for the
// non-default Q8Activations::kFloat, whose m > 1 path dequantizes panels to float.) Tested in
// matmul_test (BatchInvariant) and end to end in the engine tests.
//
// On the 2-core AVX2 EPYC this was written for (bench/engine_kernels_bench.cc): m == 1 streams
// 16-20 GB/s of weights with 2 threads, so F16 finishes 1.3-2x and Q8 1.5-3.9x sooner than
// OpenBLAS sgemv on F32 weights; m = 8 and 32 run 1.1-4.8x OpenBLAS sgemm; m = 512 runs at
// 118-157 GFLOP/s, 0.8-1.0x OpenBLAS.
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
  // weights'. What llama.cpp's Q8_0 does; measured 2.2-3x faster than kFloat at m == 1.
  kInt8,
  // Weights are widened to float and multiplied with x as is: only the weights' error
  // (relative RMS error vs F32 0.5% instead of 0.7% on N(0, 0.02) weights).
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
