// WriteSafetensors: writes tensors to a safetensors file atomically (temp file, fsync, rename,
// fsync of the directory), so a reader never sees half a checkpoint and a crash leaves either the
// old file or the new one.
//
//   std::vector<float> w = ...;
//   TensorToWrite t{.name = "model.norm.weight", .dtype = DType::kF32, .shape = {576},
//                   .data = std::as_bytes(std::span(w))};
//   Status s = WriteSafetensors(dir / "model.safetensors", {&t, 1});
//
// Layout choices (all allowed by the format, all what the reference writer does): header keys in
// sorted order, header padded with spaces so the data buffer starts at a multiple of 8 bytes, and
// tensors ordered by element size (largest first) and then by name, so every tensor's data is
// aligned to its element size when the file is mapped.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/kernels/dtype.h"

namespace aicloud::engine {

// One tensor to write. Give either `data` (the little-endian, row-major bytes; the caller keeps
// them alive for the call) or `fill`, which produces the bytes in order, chunk by chunk, so large
// tensors need not exist in memory at once.
struct TensorToWrite {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::span<const std::byte> data;
  // Called with consecutive chunks covering the tensor: `offset` is the chunk's first byte within
  // the tensor; chunks hold whole elements.
  std::function<void(size_t offset, std::span<std::byte> chunk)> fill;
};

// INVALID_ARGUMENT for duplicate or reserved names, negative dims, or `data` whose size does not
// match the shape; the I/O error otherwise (the temporary file is removed).
Status WriteSafetensors(const std::filesystem::path& path, std::span<const TensorToWrite> tensors,
                        const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

// Writes `text` to `path` atomically (same temp/fsync/rename sequence).
Status WriteFileAtomically(const std::filesystem::path& path, std::string_view text);

}  // namespace aicloud::engine
