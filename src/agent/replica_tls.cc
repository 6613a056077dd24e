#include "agent/replica_tls.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace aicloud::agent {
namespace {

Status WriteOwnedFile(const std::string& path, const std::string& text, const struct stat& dir) {
  auto fail = [&](const char* what) {
    return InternalError("replica TLS: " + std::string(what) + " " + path + ": " + std::strerror(errno));
  };
  // The directory belongs to the tenant, who may have put anything at this name: a symlink, a
  // hard link to a root file, a FIFO that would block the open. Whatever is there goes; the file
  // is made afresh, and checked to be a plain file with one link before a byte is written.
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) return fail("cannot replace");
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600);
  if (fd < 0) return fail("cannot create");
  struct stat made {};
  if (::fstat(fd, &made) != 0 || !S_ISREG(made.st_mode) || made.st_nlink != 1) {
    ::close(fd);
    errno = EEXIST;
    return fail("not a fresh plain file:");
  }
  Status s = OkStatus();
  if (::fchmod(fd, 0600) != 0) s = fail("cannot chmod");
  size_t done = 0;
  while (s.ok() && done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) s = fail("cannot write");
    else done += static_cast<size_t>(n);
  }
  if (s.ok() && (dir.st_uid != ::geteuid() || dir.st_gid != ::getegid()) && ::fchown(fd, dir.st_uid, dir.st_gid) != 0) {
    s = fail("cannot chown");
  }
  if (::close(fd) != 0 && s.ok()) s = fail("cannot close");
  return s;
}

}  // namespace

Status WriteReplicaTls(const nlohmann::json& tls, const std::string& dir, std::map<std::string, std::string>* env) {
  if (tls.is_null()) return OkStatus();
  if (!tls.is_object() || !tls.contains("cert") || !tls["cert"].is_string() || !tls.contains("key") ||
      !tls["key"].is_string()) {
    return InvalidArgumentError("replica TLS: the assignment's \"tls\" is not {\"cert\", \"key\"}");
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return InternalError("replica TLS: working directory " + dir + ": " + ec.message());
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) return InternalError("replica TLS: stat " + dir + ": " + std::strerror(errno));
  if (!S_ISDIR(st.st_mode)) return InternalError("replica TLS: " + dir + " is not a directory");
  const std::string cert = (std::filesystem::path(dir) / "tls-cert.pem").string();
  const std::string key = (std::filesystem::path(dir) / "tls-key.pem").string();
  AICLOUD_RETURN_IF_ERROR(WriteOwnedFile(cert, tls["cert"].get<std::string>(), st));
  AICLOUD_RETURN_IF_ERROR(WriteOwnedFile(key, tls["key"].get<std::string>(), st));
  (*env)[kTlsCertFileEnv] = cert;
  (*env)[kTlsKeyFileEnv] = key;
  return OkStatus();
}

}  // namespace aicloud::agent
