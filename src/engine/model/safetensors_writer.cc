#include "engine/model/safetensors_writer.h"

#include <fcntl.h>
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

constexpr size_t kChunkBytes = size_t{8} << 20;

// A temporary file next to the target that becomes the target on Commit(), or disappears.
class AtomicFile {
 public:
  explicit AtomicFile(std::filesystem::path path)
      : path_(std::move(path)), tmp_(path_.string() + fmt::format(".tmp-{}", ::getpid())) {}
  ~AtomicFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(tmp_.c_str());
  }

  Status Open() {
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) return Error("cannot create");
    return OkStatus();
  }

  Status Write(const void* p, size_t n) {
    const char* c = static_cast<const char*>(p);
    while (n > 0) {
      const ssize_t w = ::write(fd_, c, std::min(n, size_t{1} << 30));
      if (w < 0) {
        if (errno == EINTR) continue;
        return Error("write failed");
      }
      c += w;
      n -= static_cast<size_t>(w);
    }
    return OkStatus();
  }

  Status Commit() {
    if (::fsync(fd_) != 0) return Error("fsync failed");
    if (::close(fd_) != 0) {
      fd_ = -1;
      return Error("close failed");
    }
    fd_ = -1;
    if (::rename(tmp_.c_str(), path_.c_str()) != 0) return Error("rename failed");
    committed_ = true;
    // Make the rename itself durable.
    std::filesystem::path dir = path_.parent_path();
    if (dir.empty()) dir = ".";
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      ::fsync(dfd);
      ::close(dfd);
    }
    return OkStatus();
  }

 private:
  Status Error(std::string_view what) {
    return UnavailableError(fmt::format("{}: {}: {}", path_.string(), what, std::strerror(errno)));
  }

  std::filesystem::path path_;
  std::filesystem::path tmp_;
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace

Status WriteSafetensors(const std::filesystem::path& path, std::span<const TensorToWrite> tensors,
                        const std::map<std::string, std::string>& metadata) {
  // Check every tensor and compute its size before touching the disk.
  std::vector<uint64_t> nbytes(tensors.size());
  std::set<std::string_view> names;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorToWrite& t = tensors[i];
    auto bad = [&](const std::string& problem) {
      return InvalidArgumentError(fmt::format("{}: tensor '{}': {}", path.string(), t.name, problem));
    };
    if (t.name.empty() || t.name == "__metadata__") return bad("reserved or empty name");
    if (!names.insert(t.name).second) return bad("given twice");
    uint64_t n = DTypeSize(t.dtype);
    for (int64_t d : t.shape) {
      if (d < 0) return bad("negative dimension");
      if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) return bad("shape overflows");
    }
    nbytes[i] = n;
    if (!t.fill && t.data.size() != n) {
      return bad(fmt::format("{} bytes given, shape needs {}", t.data.size(), n));
    }
  }

  std::vector<size_t> order(tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const size_t sa = DTypeSize(tensors[a].dtype), sb = DTypeSize(tensors[b].dtype);
    return sa != sb ? sa > sb : tensors[a].name < tensors[b].name;
  });

  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (size_t i : order) {
    const TensorToWrite& t = tensors[i];
    header[t.name] = {{"dtype", DTypeName(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + nbytes[i]}}};
    offset += nbytes[i];
  }
  std::string text = header.dump();  // keys sorted: nlohmann's object is an ordered map by key
  text.append((8 - text.size() % 8) % 8, ' ');
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(static_cast<uint64_t>(text.size()) >> (8 * i));

  AtomicFile file(path);
  AICLOUD_RETURN_IF_ERROR(file.Open());
  AICLOUD_RETURN_IF_ERROR(file.Write(len, 8));
  AICLOUD_RETURN_IF_ERROR(file.Write(text.data(), text.size()));
  std::vector<std::byte> buffer;
  for (size_t i : order) {
    const TensorToWrite& t = tensors[i];
    if (!t.fill) {
      AICLOUD_RETURN_IF_ERROR(file.Write(t.data.data(), t.data.size()));
      continue;
    }
    const size_t elem = DTypeSize(t.dtype);
    const size_t chunk = std::max(elem, kChunkBytes / elem * elem);
    for (uint64_t done = 0; done < nbytes[i];) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(chunk, nbytes[i] - done));
      buffer.resize(n);
      t.fill(static_cast<size_t>(done), buffer);
      AICLOUD_RETURN_IF_ERROR(file.Write(buffer.data(), n));
      done += n;
    }
  }
  return file.Commit();
}

Status WriteFileAtomically(const std::filesystem::path& path, std::string_view text) {
  AtomicFile file(path);
  AICLOUD_RETURN_IF_ERROR(file.Open());
  AICLOUD_RETURN_IF_ERROR(file.Write(text.data(), text.size()));
  return file.Commit();
}

}  // namespace aicloud::engine
