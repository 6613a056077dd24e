#include "engine/kernels/matmul.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "engine/kernels/cpu.h"
#include "engine/kernels/matmul_internal.h"

namespace aicloud::engine::kernels {
namespace internal {
namespace {

float Load1(const WeightView& w, const std::byte* row, int64_t k) {
  switch (w.format) {
    case WeightFormat::kF32: return reinterpret_cast<const float*>(row)[k];
    case WeightFormat::kF16: return HalfToFloat(reinterpret_cast<const uint16_t*>(row)[k]);
    case WeightFormat::kBF16: return BF16ToFloat(reinterpret_cast<const uint16_t*>(row)[k]);
    case WeightFormat::kQ8: {
      const BlockQ8& b = reinterpret_cast<const BlockQ8*>(row)[k / kQ8BlockSize];
      return HalfToFloat(b.d) * b.q[k % kQ8BlockSize];
    }
  }
  return 0.0f;
}

}  // namespace

void QuantizeActivations(const float* x, int64_t n, int8_t* q, float* d) {
#if defined(__x86_64__)
  if (ActiveIsa() == Isa::kAvx2) return QuantizeActivationsAvx2(x, n, q, d);
#endif
  for (int64_t b = 0; b < n / 32; ++b) {
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[b * 32 + i]));
    const float scale = amax / 127.0f;
    const float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
    d[b] = scale;
    for (int i = 0; i < 32; ++i) {
      const float v = std::nearbyint(x[b * 32 + i] * inv);
      q[b * 32 + i] = static_cast<int8_t>(std::clamp(v, -127.0f, 127.0f));
    }
  }
}

void GemvScalar(const float* x, const WeightView& w, int64_t n0, int64_t n1, float* y) {
  for (int64_t n = n0; n < n1; ++n) {
    const std::byte* row = w.row(n);
    float s = 0.0f;
    for (int64_t k = 0; k < w.cols; ++k) s += Load1(w, row, k) * x[k];
    y[n] = s;
  }
}

void GemvQ8Int8Scalar(const QuantizedRow& x, const WeightView& w, int64_t n0, int64_t n1, float* y) {
  for (int64_t n = n0; n < n1; ++n) {
    const auto* blocks = reinterpret_cast<const BlockQ8*>(w.row(n));
    float s = 0.0f;
    for (int64_t b = 0; b < x.blocks; ++b) {
      int32_t dot = 0;
      for (int i = 0; i < 32; ++i) dot += int32_t{blocks[b].q[i]} * x.q[b * 32 + i];
      s += static_cast<float>(dot) * (HalfToFloat(blocks[b].d) * x.d[b]);
    }
    y[n] = s;
  }
}

void ConvertPanel(const WeightView& w, int64_t n0, int64_t n1, int64_t k0, int64_t k1, float* out,
                  int64_t ld) {
#if defined(__x86_64__)
  if (ActiveIsa() == Isa::kAvx2) return ConvertPanelAvx2(w, n0, n1, k0, k1, out, ld);
#endif
  for (int64_t n = n0; n < n1; ++n) {
    const std::byte* row = w.row(n);
    for (int64_t k = k0; k < k1; ++k) out[(n - n0) * ld + (k - k0)] = Load1(w, row, k);
  }
}

}  // namespace internal

namespace {

using internal::kPanelRows;
using internal::kTaskRows;

// Per-thread scratch that only grows, so steady-state calls allocate nothing.
template <typename T>
T* Scratch(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

void Gemv(ThreadPool& pool, const float* x, const WeightView& w, float* y,
          const MatMulOptions& options) {
  const bool avx2 = ActiveIsa() == Isa::kAvx2;
  const int64_t groups = (w.rows + 3) / 4;  // the kernels work on four rows at a time
  const int64_t grain = 4;                  // at least 16 rows per range
  if (w.format == WeightFormat::kQ8 && options.q8_activations == Q8Activations::kInt8) {
    thread_local std::vector<int8_t> q_buf;
    thread_local std::vector<float> d_buf;
    const int64_t blocks = w.cols / kQ8BlockSize;
    int8_t* q = Scratch(q_buf, static_cast<size_t>(w.cols));
    float* d = Scratch(d_buf, static_cast<size_t>(blocks));
    internal::QuantizeActivations(x, w.cols, q, d);
    const internal::QuantizedRow qx{q, d, blocks};
    pool.ParallelFor(groups, [&](int64_t b, int64_t e) {
      const int64_t n0 = 4 * b, n1 = std::min(w.rows, 4 * e);
#if defined(__x86_64__)
      if (avx2) return internal::GemvQ8Int8Avx2(qx, w, n0, n1, y);
#endif
      internal::GemvQ8Int8Scalar(qx, w, n0, n1, y);
    }, grain);
    return;
  }
  pool.ParallelFor(groups, [&](int64_t b, int64_t e) {
    const int64_t n0 = 4 * b, n1 = std::min(w.rows, 4 * e);
#if defined(__x86_64__)
    if (avx2) return internal::GemvAvx2(x, w, n0, n1, y);
#endif
    internal::GemvScalar(x, w, n0, n1, y);
  }, grain);
}

// Q8 weights times x quantized to int8 per row, in int8 register tiles: the same arithmetic per
// element as the m == 1 path, so batching a row with others never changes its result.
void GemmQ8Int8(ThreadPool& pool, const float* x, int64_t m, const WeightView& w, float* y) {
  const int64_t n = w.rows;
  const int64_t k = w.cols;
  const int64_t blocks = k / kQ8BlockSize;
  thread_local std::vector<int8_t> q_buf;
  thread_local std::vector<float> d_buf;
  int8_t* q = Scratch(q_buf, static_cast<size_t>(m * k));
  float* d = Scratch(d_buf, static_cast<size_t>(m * blocks));
  pool.ParallelFor(m, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) internal::QuantizeActivations(x + i * k, k, q + i * k, d + i * blocks);
  }, 8);
  const int64_t panels = (n + kPanelRows - 1) / kPanelRows;
  const int64_t row_tasks = (m + kTaskRows - 1) / kTaskRows;
  pool.ParallelFor(panels * row_tasks, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t i0 = (t / panels) * kTaskRows;
      const int64_t i1 = std::min(m, i0 + kTaskRows);
      const int64_t n0 = (t % panels) * kPanelRows;
      const int64_t n1 = std::min(n, n0 + kPanelRows);
#if defined(__x86_64__)
      internal::GemmQ8Int8Avx2(q + i0 * k, d + i0 * blocks, i1 - i0, blocks, w, n0, n1, y + i0 * n, n);
#endif
    }
  });
}

// Float weights (Q8 dequantized when float activations were asked for); AVX2 only.
void Gemm(ThreadPool& pool, const float* x, int64_t m, const WeightView& w, float* y) {
  const int64_t n = w.rows;
  const int64_t k = w.cols;
  const int64_t kc_max = internal::KChunk(k);
  const int64_t panels = (n + kPanelRows - 1) / kPanelRows;
  const int64_t row_tasks = (m + kTaskRows - 1) / kTaskRows;
  const bool in_place = w.format == WeightFormat::kF32;

  pool.ParallelFor(panels * row_tasks, [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> panel_buf;
    float* panel = in_place ? nullptr : Scratch(panel_buf, static_cast<size_t>(kPanelRows * kc_max));
    for (int64_t t = begin; t < end; ++t) {
      // Consecutive tasks share their rows of x, which stay in this core's L2.
      const int64_t i0 = (t / panels) * kTaskRows;
      const int64_t i1 = std::min(m, i0 + kTaskRows);
      const int64_t n0 = (t % panels) * kPanelRows;
      const int64_t n1 = std::min(n, n0 + kPanelRows);
      for (int64_t k0 = 0; k0 < k; k0 += kc_max) {
        const int64_t k1 = std::min(k, k0 + kc_max);
        const float* p;
        int64_t ldp;
        if (in_place) {
          p = reinterpret_cast<const float*>(w.row(n0)) + k0;
          ldp = k;
        } else {
          internal::ConvertPanel(w, n0, n1, k0, k1, panel, kc_max);
          p = panel;
          ldp = kc_max;
        }
        const float* xb = x + i0 * k + k0;
        float* yb = y + i0 * n + n0;
#if defined(__x86_64__)
        internal::GemmBlockAvx2(xb, k, i1 - i0, p, ldp, n1 - n0, k1 - k0, yb, n, k0 > 0);
#endif
      }
    }
  });
}

}  // namespace

void MatMul(ThreadPool& pool, const float* x, int64_t m, const WeightView& w, float* y,
            const MatMulOptions& options) {
  if (m <= 0 || w.rows <= 0) return;
  if (w.cols == 0) {
    std::fill(y, y + m * w.rows, 0.0f);
    return;
  }
  if (m == 1) return Gemv(pool, x, w, y, options);
  const bool int8_x = w.format == WeightFormat::kQ8 && options.q8_activations == Q8Activations::kInt8;
  if (ActiveIsa() != Isa::kAvx2) {
    // The scalar kernels: one GEMV per row of x, the same arithmetic as m == 1.
    for (int64_t i = 0; i < m; ++i) Gemv(pool, x + i * w.cols, w, y + i * w.rows, options);
    return;
  }
  if (int8_x) return GemmQ8Int8(pool, x, m, w, y);
  Gemm(pool, x, m, w, y);
}

void MatMulReference(const float* x, int64_t m, const WeightView& w, float* y) {
  std::vector<float> row(static_cast<size_t>(w.cols));
  for (int64_t n = 0; n < w.rows; ++n) {
    DequantizeRow(w, n, row.data());
    for (int64_t i = 0; i < m; ++i) {
      double s = 0.0;
      for (int64_t k = 0; k < w.cols; ++k) s += static_cast<double>(x[i * w.cols + k]) * row[k];
      y[i * w.rows + n] = static_cast<float>(s);
    }
  }
}

}  // namespace aicloud::engine::kernels
