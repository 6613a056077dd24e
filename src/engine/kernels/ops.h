// Row and elementwise kernels of a Llama-style forward pass: RMSNorm, rotary embeddings
// (Hugging Face "rotate_half" convention), SwiGLU, softmax, residual add, embedding lookup and
// argmax.
//
// They run on the calling thread and are vectorised (AVX2) where the CPU allows. Row kernels
// take a row count, so a caller with many rows (prefill) can split them over a pool:
//
//   pool.ParallelFor(tokens, [&](int64_t b, int64_t e) {
//     RmsNorm(x + b * dim, e - b, dim, norm_weight, eps, h + b * dim);
//   });
//
// Numerics follow the Hugging Face Llama code computed in float32: the results match a
// double-precision reference to a few float ulps (exp/silu use a polynomial exp accurate to
// 2e-7 relative).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "engine/kernels/dtype.h"
#include "engine/kernels/matrix.h"

namespace aicloud::engine::kernels {

// A read-only 1-D tensor in a checkpoint type: norm weights, biases. Does not own data.
struct VectorView {
  DType type = DType::kF32;
  int64_t size = 0;
  const void* data = nullptr;
};

// y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * weight for each of `rows` rows of `dim` floats.
// y may be x. REQUIRES: weight.size == dim.
void RmsNorm(const float* x, int64_t rows, int64_t dim, const VectorView& weight, float eps,
             float* y);

// inv_freq[i] = 1 / theta^(2i / rotary_dim) for i < rotary_dim / 2, computed in float as
// Hugging Face does (default rope_type; scaled variants such as Llama 3's build their own table).
std::vector<float> RopeInvFreq(int64_t rotary_dim, double theta);

// cos and sin of position * inv_freq[i] for positions [0, max_positions), computed once (at
// model load) so Rope does no trigonometry per token; the angle is rounded to float before
// cos/sin as HF's float32 `position * inv_freq` is. Immutable after construction, so one table
// is shared by all threads and layers.
class RopeTable {
 public:
  RopeTable(std::span<const float> inv_freq, int64_t max_positions);

  int64_t half() const { return half_; }
  int64_t max_positions() const { return max_positions_; }
  std::span<const float> inv_freq() const { return inv_freq_; }
  // half() values each. REQUIRES: 0 <= pos < max_positions().
  const float* cos(int64_t pos) const { return cos_sin_.data() + pos * 2 * half_; }
  const float* sin(int64_t pos) const { return cos_sin_.data() + pos * 2 * half_ + half_; }

 private:
  int64_t half_;
  int64_t max_positions_;
  std::vector<float> inv_freq_;
  std::vector<float> cos_sin_;  // per position: half cos, then half sin
};

// Applies rotary position embeddings in place to `tokens` rows of `heads` heads of `head_dim`
// floats; row t starts at x + t * row_stride, head h at + h * head_dim (so q or k can be read
// straight out of a fused qkv output). With half = table.half() (rotary_dim / 2), every pair
// (i, i + half), i < half, of each head rotates by angle positions[t] * inv_freq[i]:
//   x'[i]        = x[i] * cos - x[i + half] * sin
//   x'[i + half] = x[i + half] * cos + x[i] * sin
// which is HF's `q * cos + rotate_half(q) * sin`; dims at and past 2 * half are left alone
// (partial rotary). This is NOT the interleaved (2i, 2i + 1) GPT-J/GGUF convention.
// Positions past the table are computed on the fly (slower, same result).
// REQUIRES: 2 * table.half() <= head_dim; row_stride >= heads * head_dim; positions >= 0.
void Rope(float* x, int64_t tokens, int64_t heads, int64_t head_dim, int64_t row_stride,
          const int32_t* positions, const RopeTable& table);

// SwiGLU: out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + e^-g). out may be gate or up.
void SiluMul(const float* gate, const float* up, float* out, int64_t n);

// SwiGLU over rows of a fused [gate | up] projection: row r of gate_up holds 2 * dim floats,
// gate first; out[r] gets dim floats.
void SiluMulRows(const float* gate_up, int64_t rows, int64_t dim, float* out);

// In-place softmax of each of `rows` rows of n floats, max-subtracted. -inf entries get 0; a
// row of all -inf becomes all NaN, as in PyTorch.
void Softmax(float* x, int64_t rows, int64_t n);

// out[i] = a[i] + b[i]. out may be a or b (residual connections).
void Add(const float* a, const float* b, float* out, int64_t n);

// out[i] = table row ids[i] as floats (any WeightFormat, so a Q8 or F16 embedding table shared
// with the LM head works). InvalidArgument for an id outside [0, table.rows); nothing is
// written then.
Status EmbeddingLookup(const WeightView& table, std::span<const int32_t> ids, float* out);

// Index of the largest of n floats (the first on ties; NaNs are skipped; 0 if n == 0 or every
// value is NaN).
int64_t Argmax(const float* x, int64_t n);

}  // namespace aicloud::engine::kernels
