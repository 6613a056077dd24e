#include "engine/kernels/matrix.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "engine/kernels/cpu.h"
#include "engine/kernels/simd_avx2.h"

namespace aicloud::engine::kernels {
namespace {

#ifdef AICLOUD_KERNELS_HAVE_AVX2
AICLOUD_AVX2 void HalfToFloatAvx2(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, avx2::LoadHalf8(src + i));
  for (; i < n; ++i) dst[i] = HalfToFloat(src[i]);
}

AICLOUD_AVX2 void BF16ToFloatAvx2(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, avx2::LoadBF16x8(src + i));
  for (; i < n; ++i) dst[i] = BF16ToFloat(src[i]);
}

// F16C with round-to-nearest matches FloatToHalf bit for bit (NaNs included), so the vector and
// scalar paths agree exactly.
AICLOUD_AVX2 void FloatToHalfAvx2(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
  for (; i < n; ++i) dst[i] = FloatToHalf(src[i]);
}
#endif

void QuantizeBlock(const float* x, BlockQ8* out) {
  float amax = 0.0f;
  for (int64_t i = 0; i < kQ8BlockSize; ++i) amax = std::max(amax, std::fabs(x[i]));
  const uint16_t dh = FloatToHalf(amax / 127.0f);
  const float d = HalfToFloat(dh);
  const float id = d > 0.0f ? 1.0f / d : 0.0f;
  out->d = dh;
  for (int64_t i = 0; i < kQ8BlockSize; ++i) {
    const float v = std::nearbyint(x[i] * id);
    out->q[i] = static_cast<int8_t>(std::clamp(v, -127.0f, 127.0f));
  }
}

Status CheckShape(int64_t rows, int64_t cols) {
  if (rows < 0 || cols < 0) {
    return InvalidArgumentError("matrix shape must be non-negative, got " + std::to_string(rows) +
                                "x" + std::to_string(cols));
  }
  return OkStatus();
}

// Converts rows [0, src.rows) of src to `to` into dst (row stride dst row_bytes).
Status ConvertRows(const WeightView& src, WeightFormat to, std::byte* dst) {
  const int64_t cols = src.cols;
  const size_t dst_row = RowBytes(to, cols);
  if (src.format == to) {
    if (src.bytes() > 0) std::memcpy(dst, src.data, src.bytes());
    return OkStatus();
  }
  std::unique_ptr<float[]> tmp(new float[static_cast<size_t>(std::max<int64_t>(cols, 1))]);
  for (int64_t r = 0; r < src.rows; ++r) {
    DequantizeRow(src, r, tmp.get());
    std::byte* out = dst + static_cast<size_t>(r) * dst_row;
    switch (to) {
      case WeightFormat::kF32:
        std::memcpy(out, tmp.get(), dst_row);
        break;
      case WeightFormat::kF16:
        ConvertFromFloat(DType::kF16, tmp.get(), out, cols);
        break;
      case WeightFormat::kBF16:
        ConvertFromFloat(DType::kBF16, tmp.get(), out, cols);
        break;
      case WeightFormat::kQ8: {
        auto* blocks = reinterpret_cast<BlockQ8*>(out);
        for (int64_t b = 0; b < cols / kQ8BlockSize; ++b) {
          const float* x = tmp.get() + b * kQ8BlockSize;
          for (int64_t i = 0; i < kQ8BlockSize; ++i) {
            if (!std::isfinite(x[i])) {
              return InvalidArgumentError("QuantizeQ8: non-finite value at row " + std::to_string(r) +
                                          " col " + std::to_string(b * kQ8BlockSize + i));
            }
          }
          QuantizeBlock(x, &blocks[b]);
        }
        break;
      }
    }
  }
  return OkStatus();
}

}  // namespace

const char* WeightFormatName(WeightFormat f) {
  switch (f) {
    case WeightFormat::kF32: return "F32";
    case WeightFormat::kF16: return "F16";
    case WeightFormat::kBF16: return "BF16";
    case WeightFormat::kQ8: return "Q8";
  }
  return "?";
}

WeightFormat WeightFormatOf(DType t) {
  switch (t) {
    case DType::kF32: return WeightFormat::kF32;
    case DType::kF16: return WeightFormat::kF16;
    case DType::kBF16: return WeightFormat::kBF16;
  }
  return WeightFormat::kF32;
}

size_t RowBytes(WeightFormat f, int64_t cols) {
  const size_t c = static_cast<size_t>(cols);
  switch (f) {
    case WeightFormat::kF32: return 4 * c;
    case WeightFormat::kF16:
    case WeightFormat::kBF16: return 2 * c;
    case WeightFormat::kQ8: return c / kQ8BlockSize * sizeof(BlockQ8);
  }
  return 0;
}

Status Validate(const WeightView& w) {
  AICLOUD_RETURN_IF_ERROR(CheckShape(w.rows, w.cols));
  if (w.format == WeightFormat::kQ8 && w.cols % kQ8BlockSize != 0) {
    return InvalidArgumentError("Q8 matrix cols must be a multiple of 32, got " +
                                std::to_string(w.cols));
  }
  if (w.data == nullptr && w.rows > 0 && w.cols > 0) {
    return InvalidArgumentError("weight view has no data");
  }
  return OkStatus();
}

void Matrix::Free::operator()(std::byte* p) const { std::free(p); }

Matrix::Matrix(WeightFormat f, int64_t rows, int64_t cols) : format_(f), rows_(rows), cols_(cols) {
  const size_t n = RowBytes(f, cols) * static_cast<size_t>(rows);
  // aligned_alloc wants a multiple of the alignment; round up, and never ask for 0 bytes.
  const size_t padded = std::max<size_t>(64, (n + 63) / 64 * 64);
  void* p = std::aligned_alloc(64, padded);
  if (p == nullptr) throw std::bad_alloc();
  bytes_.reset(static_cast<std::byte*>(p));
}

StatusOr<Matrix> QuantizeQ8(DType type, const void* data, int64_t rows, int64_t cols) {
  return ConvertMatrix(WeightView{WeightFormatOf(type), rows, cols, data}, WeightFormat::kQ8);
}

StatusOr<Matrix> ConvertMatrix(const WeightView& src, WeightFormat to) {
  AICLOUD_RETURN_IF_ERROR(Validate(src));
  if (to == WeightFormat::kQ8 && src.cols % kQ8BlockSize != 0) {
    return InvalidArgumentError("QuantizeQ8: cols must be a multiple of 32, got " +
                                std::to_string(src.cols));
  }
  Matrix m(to, src.rows, src.cols);
  AICLOUD_RETURN_IF_ERROR(ConvertRows(src, to, m.mutable_data()));
  return m;
}

StatusOr<Matrix> ConcatRows(std::span<const WeightView> parts, WeightFormat to) {
  if (parts.empty()) return InvalidArgumentError("ConcatRows: no parts");
  int64_t rows = 0;
  const int64_t cols = parts[0].cols;
  for (const WeightView& p : parts) {
    AICLOUD_RETURN_IF_ERROR(Validate(p));
    if (p.cols != cols) {
      return InvalidArgumentError("ConcatRows: parts have different cols (" + std::to_string(cols) +
                                  " vs " + std::to_string(p.cols) + ")");
    }
    rows += p.rows;
  }
  if (to == WeightFormat::kQ8 && cols % kQ8BlockSize != 0) {
    return InvalidArgumentError("QuantizeQ8: cols must be a multiple of 32, got " +
                                std::to_string(cols));
  }
  Matrix m(to, rows, cols);
  std::byte* out = m.mutable_data();
  for (const WeightView& p : parts) {
    AICLOUD_RETURN_IF_ERROR(ConvertRows(p, to, out));
    out += RowBytes(to, cols) * static_cast<size_t>(p.rows);
  }
  return m;
}

void DequantizeRow(const WeightView& w, int64_t r, float* out) {
  const std::byte* row = w.row(r);
  switch (w.format) {
    case WeightFormat::kF32:
      std::memcpy(out, row, static_cast<size_t>(w.cols) * 4);
      return;
    case WeightFormat::kF16:
      ConvertToFloat(DType::kF16, row, out, w.cols);
      return;
    case WeightFormat::kBF16:
      ConvertToFloat(DType::kBF16, row, out, w.cols);
      return;
    case WeightFormat::kQ8: {
      const auto* blocks = reinterpret_cast<const BlockQ8*>(row);
      for (int64_t b = 0; b < w.cols / kQ8BlockSize; ++b) {
        const float d = HalfToFloat(blocks[b].d);
        for (int64_t i = 0; i < kQ8BlockSize; ++i) out[b * kQ8BlockSize + i] = d * blocks[b].q[i];
      }
      return;
    }
  }
}

void ConvertToFloat(DType type, const void* src, float* dst, int64_t n) {
  const auto* s16 = static_cast<const uint16_t*>(src);
  switch (type) {
    case DType::kF32:
      if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case DType::kF16:
#ifdef AICLOUD_KERNELS_HAVE_AVX2
      if (ActiveIsa() == Isa::kAvx2) return HalfToFloatAvx2(s16, dst, n);
#endif
      for (int64_t i = 0; i < n; ++i) dst[i] = HalfToFloat(s16[i]);
      return;
    case DType::kBF16:
#ifdef AICLOUD_KERNELS_HAVE_AVX2
      if (ActiveIsa() == Isa::kAvx2) return BF16ToFloatAvx2(s16, dst, n);
#endif
      for (int64_t i = 0; i < n; ++i) dst[i] = BF16ToFloat(s16[i]);
      return;
  }
}

void ConvertFromFloat(DType type, const float* src, void* dst, int64_t n) {
  auto* d16 = static_cast<uint16_t*>(dst);
  switch (type) {
    case DType::kF32:
      if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case DType::kF16:
#ifdef AICLOUD_KERNELS_HAVE_AVX2
      if (ActiveIsa() == Isa::kAvx2) return FloatToHalfAvx2(src, d16, n);
#endif
      for (int64_t i = 0; i < n; ++i) d16[i] = FloatToHalf(src[i]);
      return;
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) d16[i] = FloatToBF16(src[i]);
      return;
  }
}

}  // namespace aicloud::engine::kernels
