// Weight matrices as the kernels read them: WeightView (non-owning) and Matrix (owning).
//
// A weight matrix is [rows = out features][cols = in features], row-major, exactly as Hugging
// Face checkpoints store linear layers, so MatMul computes y = x * W^T. The element format is
// one of the checkpoint types (F32, F16, BF16) kept as loaded, or Q8: int8 blocks quantized at
// load time by QuantizeQ8.
//
// Q8 layout: each row is cols/32 consecutive BlockQ8 {half scale d; int8 q[32]} (34 bytes; the
// same bytes as GGUF's Q8_0), value = d * q. Per 32 weights that is 34 bytes instead of 64
// (F16), which is what makes single-stream decode, bound by weight streaming, about 1.9x faster.
//
//   StatusOr<Matrix> q = QuantizeQ8(DType::kBF16, tensor_bytes, /*rows=*/1536, /*cols=*/576);
//   if (!q.ok()) return q.status();
//   MatMul(pool, x, m, q->view(), y);
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "core/status.h"
#include "engine/kernels/dtype.h"

namespace aicloud::engine::kernels {

enum class WeightFormat : uint8_t {
  kF32,
  kF16,
  kBF16,
  kQ8,  // BlockQ8 rows; cols must be a multiple of kQ8BlockSize
};

const char* WeightFormatName(WeightFormat f);  // "F32", "F16", "BF16", "Q8"
WeightFormat WeightFormatOf(DType t);           // the format a checkpoint tensor of type t has

inline constexpr int64_t kQ8BlockSize = 32;

struct BlockQ8 {
  uint16_t d;  // IEEE half scale
  int8_t q[kQ8BlockSize];
};
static_assert(sizeof(BlockQ8) == 34, "BlockQ8 must be packed like GGUF Q8_0");

// Bytes of one row of `cols` elements. REQUIRES: for kQ8, cols % kQ8BlockSize == 0.
size_t RowBytes(WeightFormat f, int64_t cols);

// A read-only view of a weight matrix. Trivially copyable; does not own `data`, which must
// outlive every use of the view.
struct WeightView {
  WeightFormat format = WeightFormat::kF32;
  int64_t rows = 0;  // out features (N)
  int64_t cols = 0;  // in features (K)
  const void* data = nullptr;

  size_t row_bytes() const { return RowBytes(format, cols); }
  size_t bytes() const { return row_bytes() * static_cast<size_t>(rows); }
  const std::byte* row(int64_t r) const {
    return static_cast<const std::byte*>(data) + static_cast<size_t>(r) * row_bytes();
  }
  // Rows [begin, begin + count) as a view of their own.
  WeightView Rows(int64_t begin, int64_t count) const {
    return {format, count, cols, row(begin)};
  }
};

// InvalidArgument unless the view is usable by the kernels (non-negative shape, data present
// when non-empty, Q8 cols a multiple of 32).
Status Validate(const WeightView& w);

// An owned weight matrix, 64-byte aligned. Move-only.
class Matrix {
 public:
  Matrix() = default;
  // Uninitialised storage for a rows x cols matrix of format f.
  // REQUIRES: for kQ8, cols % kQ8BlockSize == 0.
  Matrix(WeightFormat f, int64_t rows, int64_t cols);

  WeightView view() const { return {format_, rows_, cols_, bytes_.get()}; }
  WeightFormat format() const { return format_; }
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  std::byte* mutable_data() { return bytes_.get(); }
  size_t bytes() const { return view().bytes(); }

 private:
  struct Free {
    void operator()(std::byte* p) const;
  };
  WeightFormat format_ = WeightFormat::kF32;
  int64_t rows_ = 0;
  int64_t cols_ = 0;
  std::unique_ptr<std::byte[], Free> bytes_;
};

// Quantizes a checkpoint tensor [rows][cols] of type `type` to Q8: per block of 32 values,
// d = max|x| / 127 rounded to half, q = round(x / d). The error of each weight is at most d/2.
// InvalidArgument if cols is not a multiple of 32 or a value is not finite.
StatusOr<Matrix> QuantizeQ8(DType type, const void* data, int64_t rows, int64_t cols);

// Converts (or quantizes) any view to format `to`. Q8 sources can be converted to float
// formats (dequantized) but not re-quantized losslessly; Q8 -> Q8 copies.
StatusOr<Matrix> ConvertMatrix(const WeightView& src, WeightFormat to);

// Stacks the parts' rows into one matrix of format `to` (all parts must have the same cols).
// Fusing q/k/v or gate/up projections this way lets one MatMul (one ParallelFor) do the work of
// several, which matters at decode where each call is short.
StatusOr<Matrix> ConcatRows(std::span<const WeightView> parts, WeightFormat to);

// Row r of w as floats: out[0, w.cols). Exact for F32/F16/BF16; d * q for Q8.
void DequantizeRow(const WeightView& w, int64_t r, float* out);

// n elements of type `type` at src converted to float (vectorised where the CPU allows).
void ConvertToFloat(DType type, const void* src, float* dst, int64_t n);
// n floats to type `type`, rounding to nearest even.
void ConvertFromFloat(DType type, const float* src, void* dst, int64_t n);

}  // namespace aicloud::engine::kernels
