// SafetensorsFile: a read-only, memory-mapped safetensors file and views of its tensors.
//
//   StatusOr<std::unique_ptr<SafetensorsFile>> f = SafetensorsFile::Open("model.safetensors");
//   if (!f.ok()) return f.status();  // DATA_LOSS naming the file and the tensor at fault
//   const TensorView* w = (*f)->Find("model.norm.weight");
//   std::vector<float> values = TensorToFloat(*w);
//
// Layout (huggingface/safetensors): 8-byte little-endian header length N, N bytes of JSON
// {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}}, then the
// data buffer; offsets are relative to the buffer's start. Open() checks every rule of the format
// before handing out a pointer, because checkpoints come from users: header length within the file
// and under 100 MB, valid UTF-8 JSON without duplicate names, known dtypes, shape products that do
// not overflow and match the byte span, spans inside the buffer, and spans that tile the buffer
// exactly (sorted, no overlap, no gap, no trailing bytes). Nothing is copied: opening costs one
// mmap and one JSON parse of the header, whatever the file size.
//
// Alignment: the data pointer of a view is NOT guaranteed to be aligned to its element size (the
// header length is arbitrary in files from other writers, and tensors are packed). Read elements
// with memcpy or the conversion helpers below; `TensorView::aligned()` says when direct typed
// access is safe. Files written by WriteSafetensors are always aligned.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "engine/kernels/dtype.h"

namespace aicloud::engine {

// Points into a mapped file; valid while the SafetensorsFile (or Checkpoint) that produced it is
// alive. Little-endian, row-major, no strides.
struct TensorView {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // [] for a scalar; a 0 dimension for an empty tensor
  const void* data = nullptr;  // possibly unaligned, see the file comment
  size_t nbytes = 0;

  // Elements (1 for a scalar).
  size_t numel() const { return nbytes / DTypeSize(dtype); }
  // Elements of one row: the product of all dimensions but the first (numel for rank 0 and 1
  // tensors are treated as one row).
  size_t row_size() const;
  size_t rows() const;
  bool aligned() const { return reinterpret_cast<uintptr_t>(data) % DTypeSize(dtype) == 0; }
  std::span<const std::byte> bytes() const { return {static_cast<const std::byte*>(data), nbytes}; }
};

// "[30, 576]" and "[]".
std::string ShapeString(std::span<const int64_t> shape);

// Immutable after Open; const methods may be called from any thread. Owns the mapping: every
// TensorView handed out dies with it. The file must not be truncated while open (a read past the
// new end raises SIGBUS, as with any mapped file).
class SafetensorsFile {
 public:
  // Largest header accepted, as the reference implementation does.
  static constexpr uint64_t kMaxHeaderBytes = 100'000'000;

  // NOT_FOUND when the file cannot be opened; DATA_LOSS for anything malformed. Tensors of a
  // dtype the format defines but the engine does not load (I64, F8_E4M3, ...) are checked like the
  // rest and listed in unsupported(), not in tensors().
  static StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::filesystem::path& path);

  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  ~SafetensorsFile();

  const std::filesystem::path& path() const { return path_; }
  uint64_t file_size() const { return size_; }
  // Sorted by data offset (the file's own order).
  const std::vector<TensorView>& tensors() const { return tensors_; }
  // nullptr when absent.
  const TensorView* Find(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Tensor name -> dtype name, for tensors of a dtype the engine does not load.
  const std::map<std::string, std::string, std::less<>>& unsupported() const { return unsupported_; }

  // Whether `view` points into this file's mapping.
  bool Owns(const TensorView& view) const;
  // Gives the pages of a tensor that was copied out back to the kernel (madvise MADV_DONTNEED on
  // the whole pages inside it), so loading does not hold the file and its converted copy at once.
  // The view stays valid: a later read faults the pages in from the file again. No-op for a view
  // this file does not own.
  void DropPages(const TensorView& view) const;

 private:
  SafetensorsFile() = default;
  Status Parse();

  std::filesystem::path path_;
  const std::byte* base_ = nullptr;  // the whole file, mapped
  uint64_t size_ = 0;
  std::vector<TensorView> tensors_;
  std::map<std::string_view, size_t, std::less<>> by_name_;  // keys point into tensors_
  std::map<std::string, std::string> metadata_;
  std::map<std::string, std::string, std::less<>> unsupported_;
};

// Element conversions that work on unaligned data. `first` and `out.size()` are in elements.
// REQUIRES: first + out.size() <= view.numel().
void ConvertToFloat(const TensorView& view, size_t first, std::span<float> out);
// The whole tensor as floats.
std::vector<float> TensorToFloat(const TensorView& view);
// Row `row` (see row_size()) into `out`. REQUIRES: out.size() == view.row_size(), row < rows().
void RowToFloat(const TensorView& view, size_t row, std::span<float> out);

}  // namespace aicloud::engine
