#include "engine/model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include <fmt/format.h>

namespace aicloud::engine {
namespace {

using nlohmann::json;

Status DataLoss(const std::filesystem::path& path, const std::string& problem) {
  return Status(StatusCode::kDataLoss, fmt::format("{}: {}", path.string(), problem));
}
Status TensorDataLoss(const std::filesystem::path& path, std::string_view tensor, const std::string& problem) {
  return Status(StatusCode::kDataLoss, fmt::format("{}: tensor '{}': {}", path.string(), tensor, problem));
}

// Every dtype the format defines, with its width in bits. Only F32, F16 and BF16 are loaded; the
// others are still checked so a file is either valid as a whole or rejected.
struct FormatDType {
  std::string_view name;
  uint32_t bits;
};
constexpr FormatDType kFormatDTypes[] = {
    {"BOOL", 8},  {"U8", 8},      {"I8", 8},      {"F8_E5M2", 8}, {"F8_E4M3", 8},
    {"F8_E8M0", 8}, {"I16", 16},  {"U16", 16},    {"F16", 16},    {"BF16", 16},
    {"I32", 32},  {"U32", 32},    {"F32", 32},    {"F64", 64},    {"I64", 64},
    {"U64", 64},  {"C64", 64},    {"F4", 4},      {"F6_E2M3", 6}, {"F6_E3M2", 6},
};

const FormatDType* FindFormatDType(std::string_view name) {
  for (const FormatDType& d : kFormatDTypes) {
    if (d.name == name) return &d;
  }
  return nullptr;
}

// One header entry before the tiling check.
struct Entry {
  std::string name;
  std::string dtype_name;
  std::optional<DType> dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0;
  uint64_t end = 0;
};

std::string JsonShape(const json& v) {
  std::string s = v.dump();
  return s.size() > 80 ? s.substr(0, 77) + "..." : s;
}

}  // namespace

std::string ShapeString(std::span<const int64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

size_t TensorView::row_size() const {
  size_t n = 1;
  for (size_t i = 1; i < shape.size(); ++i) n *= static_cast<size_t>(shape[i]);
  return n;
}

size_t TensorView::rows() const { return shape.empty() ? 1 : static_cast<size_t>(shape[0]); }

StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    std::string m = fmt::format("{}: cannot open: {}", path.string(), std::strerror(err));
    if (err == ENOENT) return NotFoundError(std::move(m));
    if (err == EACCES) return PermissionDeniedError(std::move(m));
    return UnavailableError(std::move(m));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return InvalidArgumentError(fmt::format("{}: not a regular file", path.string()));
  }
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  f->size_ = static_cast<uint64_t>(st.st_size);
  if (f->size_ < 8) {
    ::close(fd);
    return DataLoss(path, fmt::format("{} bytes is too short for a safetensors file (the header "
                                      "length alone takes 8)",
                                      f->size_));
  }
  void* p = ::mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);  // the mapping keeps the file referenced
  if (p == MAP_FAILED) {
    return ResourceExhaustedError(fmt::format("{}: mmap failed: {}", path.string(), std::strerror(err)));
  }
  f->base_ = static_cast<const std::byte*>(p);
  AICLOUD_RETURN_IF_ERROR(f->Parse());
  return f;
}

SafetensorsFile::~SafetensorsFile() {
  if (base_) ::munmap(const_cast<std::byte*>(base_), size_);
}

bool SafetensorsFile::Owns(const TensorView& view) const {
  const auto* d = static_cast<const std::byte*>(view.data);
  return base_ != nullptr && d >= base_ && view.nbytes <= size_ && d - base_ <= static_cast<ptrdiff_t>(size_ - view.nbytes);
}

void SafetensorsFile::DropPages(const TensorView& view) const {
  if (!Owns(view)) return;
  static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(view.data);
  const uintptr_t first = (begin + page - 1) / page * page;
  const uintptr_t last = (begin + view.nbytes) / page * page;
  if (last > first) (void)::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

const TensorView* SafetensorsFile::Find(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

Status SafetensorsFile::Parse() {
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | static_cast<uint8_t>(base_[i]);
  if (header_len > kMaxHeaderBytes) {
    return DataLoss(path_, fmt::format("header length {} exceeds the {}-byte limit (not a safetensors "
                                       "file, or a corrupt one)",
                                       header_len, kMaxHeaderBytes));
  }
  if (header_len > size_ - 8) {
    return DataLoss(path_, fmt::format("header length {} runs past the end of the file ({} bytes; "
                                       "truncated?)",
                                       header_len, size_));
  }
  const char* header = reinterpret_cast<const char*>(base_ + 8);
  const uint64_t data_begin = 8 + header_len;
  const uint64_t data_size = size_ - data_begin;

  // nlohmann stops at a NUL as if the input ended, which would accept "{}\0<anything>"; JSON text
  // never contains a raw NUL.
  if (const void* nul = std::memchr(header, 0, header_len)) {
    return DataLoss(path_, fmt::format("header is not valid JSON: NUL byte at offset {}",
                                       static_cast<const char*>(nul) - header));
  }
  // nlohmann keeps the last of duplicate keys silently; the format forbids them, so watch the
  // parse and remember the first duplicate at any depth.
  std::vector<std::set<std::string>> open_objects;
  std::string duplicate;
  auto watch = [&](int /*depth*/, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) {
      open_objects.emplace_back();
    } else if (event == json::parse_event_t::object_end) {
      if (!open_objects.empty()) open_objects.pop_back();
    } else if (event == json::parse_event_t::key && !open_objects.empty()) {
      if (!open_objects.back().insert(parsed.get<std::string>()).second && duplicate.empty()) {
        duplicate = parsed.get<std::string>();
      }
    }
    return true;
  };
  json doc;
  try {
    doc = json::parse(header, header + header_len, watch);
  } catch (const json::exception& e) {
    return DataLoss(path_, fmt::format("header is not valid JSON: {}", e.what()));
  }
  if (!duplicate.empty()) return DataLoss(path_, fmt::format("header names '{}' twice", duplicate));
  if (!doc.is_object()) return DataLoss(path_, fmt::format("header must be a JSON object, got {}", doc.type_name()));

  std::vector<Entry> entries;
  entries.reserve(doc.size());
  for (const auto& [name, v] : doc.items()) {
    if (name == "__metadata__") {
      if (!v.is_object()) return DataLoss(path_, "__metadata__ must be an object of strings");
      for (const auto& [k, mv] : v.items()) {
        if (!mv.is_string()) {
          return DataLoss(path_, fmt::format("__metadata__.{} must be a string, got {}", k, mv.type_name()));
        }
        metadata_[k] = mv.get<std::string>();
      }
      continue;
    }
    if (!v.is_object()) return TensorDataLoss(path_, name, fmt::format("entry must be an object, got {}", v.type_name()));
    Entry e;
    e.name = name;
    // dtype
    auto dt = v.find("dtype");
    if (dt == v.end() || !dt->is_string()) return TensorDataLoss(path_, name, "missing or non-string dtype");
    e.dtype_name = dt->get<std::string>();
    const FormatDType* fd = FindFormatDType(e.dtype_name);
    if (!fd) return TensorDataLoss(path_, name, fmt::format("unknown dtype '{}'", e.dtype_name));
    e.dtype = ParseDType(e.dtype_name);
    // shape, with an overflow-checked element count
    auto sh = v.find("shape");
    if (sh == v.end() || !sh->is_array()) return TensorDataLoss(path_, name, "missing shape (a list of sizes)");
    uint64_t numel = 1;
    bool overflow = false;
    for (const json& d : *sh) {
      if (!d.is_number_unsigned() && !(d.is_number_integer() && d.get<int64_t>() >= 0)) {
        return TensorDataLoss(path_, name, fmt::format("shape {} must hold non-negative integers", JsonShape(*sh)));
      }
      const uint64_t dim = d.get<uint64_t>();
      if (dim > static_cast<uint64_t>(INT64_MAX)) overflow = true;
      else e.shape.push_back(static_cast<int64_t>(dim));
      overflow |= __builtin_mul_overflow(numel, dim, &numel);
    }
    uint64_t bits = 0;
    overflow |= __builtin_mul_overflow(numel, uint64_t{fd->bits}, &bits);
    if (overflow) {
      return TensorDataLoss(path_, name, fmt::format("shape {} overflows a 64-bit byte count", JsonShape(*sh)));
    }
    if (bits % 8 != 0) {
      return TensorDataLoss(path_, name, fmt::format("shape {} of {} is not a whole number of bytes",
                                                     JsonShape(*sh), e.dtype_name));
    }
    const uint64_t nbytes = bits / 8;
    // data_offsets
    auto off = v.find("data_offsets");
    if (off == v.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
        !(*off)[1].is_number_unsigned()) {
      return TensorDataLoss(path_, name, "data_offsets must be [begin, end] with non-negative integers");
    }
    e.begin = (*off)[0].get<uint64_t>();
    e.end = (*off)[1].get<uint64_t>();
    if (e.end < e.begin) {
      return TensorDataLoss(path_, name, fmt::format("data_offsets [{}, {}] end before they begin", e.begin, e.end));
    }
    if (e.end > data_size) {
      return TensorDataLoss(path_, name,
                            fmt::format("data_offsets [{}, {}] run past the end of the data ({} bytes; "
                                        "truncated file?)",
                                        e.begin, e.end, data_size));
    }
    if (e.end - e.begin != nbytes) {
      return TensorDataLoss(path_, name,
                            fmt::format("shape {} of {} needs {} bytes but data_offsets [{}, {}] hold {}",
                                        ShapeString(e.shape), e.dtype_name, nbytes, e.begin, e.end,
                                        e.end - e.begin));
    }
    entries.push_back(std::move(e));
  }

  // The spans must tile the buffer: sorted by offset, each starting where the previous ended.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t expected = 0;
  const Entry* prev = nullptr;
  for (const Entry& e : entries) {
    if (e.begin < expected) {
      return TensorDataLoss(path_, e.name,
                            fmt::format("data_offsets [{}, {}] overlap tensor '{}' (which ends at {})",
                                        e.begin, e.end, prev->name, expected));
    }
    if (e.begin > expected) {
      return TensorDataLoss(path_, e.name,
                            fmt::format("data_offsets [{}, {}] leave a gap of {} bytes after offset {} "
                                        "(tensors must be packed)",
                                        e.begin, e.end, e.begin - expected, expected));
    }
    expected = e.end;
    prev = &e;
  }
  if (expected != data_size) {
    return DataLoss(path_, fmt::format("the last {} bytes of the data buffer belong to no tensor",
                                       data_size - expected));
  }

  tensors_.reserve(entries.size());
  for (Entry& e : entries) {
    if (!e.dtype) {
      unsupported_[e.name] = e.dtype_name;
      continue;
    }
    TensorView t;
    t.name = std::move(e.name);
    t.dtype = *e.dtype;
    t.shape = std::move(e.shape);
    t.data = base_ + data_begin + e.begin;
    t.nbytes = static_cast<size_t>(e.end - e.begin);
    tensors_.push_back(std::move(t));
  }
  for (size_t i = 0; i < tensors_.size(); ++i) by_name_.emplace(tensors_[i].name, i);
  return OkStatus();
}

void ConvertToFloat(const TensorView& view, size_t first, std::span<float> out) {
  if (out.empty()) return;  // an empty vector's data() may be null, which memcpy must not see
  const auto* src = static_cast<const std::byte*>(view.data) + first * DTypeSize(view.dtype);
  switch (view.dtype) {
    case DType::kF32:
      std::memcpy(out.data(), src, out.size() * 4);
      return;
    case DType::kF16:
      for (size_t i = 0; i < out.size(); ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        out[i] = HalfToFloat(h);
      }
      return;
    case DType::kBF16:
      for (size_t i = 0; i < out.size(); ++i) {
        uint16_t b;
        std::memcpy(&b, src + 2 * i, 2);
        out[i] = BF16ToFloat(b);
      }
      return;
  }
}

std::vector<float> TensorToFloat(const TensorView& view) {
  std::vector<float> out(view.numel());
  ConvertToFloat(view, 0, out);
  return out;
}

void RowToFloat(const TensorView& view, size_t row, std::span<float> out) {
  ConvertToFloat(view, row * view.row_size(), out);
}

}  // namespace aicloud::engine
