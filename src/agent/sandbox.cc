#include "agent/sandbox.h"

#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <vector>

#include <spdlog/spdlog.h>

namespace aicloud::agent {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string Errno(int err) { return std::strerror(err); }

std::string Octal(mode_t mode) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

// Whether uid (gid == uid, no supplementary groups) has `bit` (1 = x, 4 = r) on `st`, by the
// permission bits (ACLs are not consulted).
bool Allowed(const struct stat& st, uint32_t uid, unsigned bit) {
  if (uid == 0) return true;
  if (st.st_uid == uid) return (st.st_mode >> 6) & bit;
  if (st.st_gid == uid) return (st.st_mode >> 3) & bit;
  return st.st_mode & bit;
}

std::string Describe(const std::string& path, const struct stat& st) {
  return path + " (mode " + Octal(st.st_mode) + ", owner " + std::to_string(st.st_uid) + ")";
}

// The directories from "/" to `path` (inclusive), absolute and normalised.
std::vector<std::string> Prefixes(const std::string& path) {
  std::vector<std::string> out;
  fs::path p = fs::absolute(path).lexically_normal();
  fs::path cur;
  for (const fs::path& part : p) {
    if (part.empty()) continue;
    cur /= part;
    out.push_back(cur.string());
  }
  while (out.size() > 1 && out.back().empty()) out.pop_back();
  return out;
}

// "" when no user or group of the system's databases has id `id`; else who does.
std::string IdOwner(uint32_t id) {
  std::vector<char> buf(16384);
  struct passwd pw {};
  struct passwd* user = nullptr;
  if (::getpwuid_r(id, &pw, buf.data(), buf.size(), &user) == 0 && user != nullptr) {
    return "uid " + std::to_string(id) + " is user " + user->pw_name + "; ";
  }
  struct group gr {};
  struct group* grp = nullptr;
  if (::getgrgid_r(id, &gr, buf.data(), buf.size(), &grp) == 0 && grp != nullptr) {
    return "gid " + std::to_string(id) + " is group " + grp->gr_name + "; ";
  }
  return "";
}

}  // namespace

std::string UidRange::ToString() const {
  return std::to_string(first) + "-" + std::to_string(last);
}

StatusOr<UidRange> ParseUidRange(const std::string& text, const std::string& passwd) {
  auto bad = [&](const std::string& why) {
    return InvalidArgumentError("sandbox uid range \"" + text + "\": " + why);
  };
  const size_t dash = text.find('-');
  if (dash == std::string::npos) return bad("want FIRST-LAST, e.g. 200000-299999");
  UidRange r;
  try {
    size_t used = 0;
    const unsigned long long first = std::stoull(text.substr(0, dash), &used);
    if (used != dash) return bad("FIRST is not a number");
    const std::string rest = text.substr(dash + 1);
    const unsigned long long last = std::stoull(rest, &used);
    if (used != rest.size()) return bad("LAST is not a number");
    if (first > 0xFFFFFFFEull || last > 0xFFFFFFFEull) return bad("uids end at 4294967294");
    r.first = static_cast<uint32_t>(first);
    r.last = static_cast<uint32_t>(last);
  } catch (const std::exception&) {
    return bad("want FIRST-LAST, e.g. 200000-299999");
  }
  if (r.first == 0) return bad("includes uid 0 (root)");
  if (r.last < r.first || r.last - r.first + 1 < kUidsPerTenant) {
    return bad("must hold at least " + std::to_string(kUidsPerTenant) + " uids (one tenant)");
  }
  std::ifstream in(passwd);
  std::string line;
  while (std::getline(in, line)) {
    // name:password:uid:gid:...
    std::vector<std::string> f;
    std::istringstream fields(line);
    for (std::string s; std::getline(fields, s, ':');) f.push_back(s);
    if (f.size() < 3) continue;
    char* end = nullptr;
    const unsigned long uid = std::strtoul(f[2].c_str(), &end, 10);
    if (end == f[2].c_str() || *end != '\0') continue;
    if (uid >= r.first && uid <= r.last) {
      return bad("includes user " + f[0] + " (uid " + f[2] + ") of " + passwd +
                 "; pick uids no account uses");
    }
  }
  return r;
}

StatusOr<std::unique_ptr<TenantUids>> TenantUids::Open(std::string path, UidRange range) {
  std::unique_ptr<TenantUids> t(new TenantUids(std::move(path), range));
  StatusOr<std::map<std::string, uint32_t>> m = t->Load();
  if (!m.ok()) return m.status();
  return t;
}

StatusOr<std::map<std::string, uint32_t>> TenantUids::Load() const {
  std::map<std::string, uint32_t> out;
  std::ifstream in(path_);
  if (!in) {
    if (errno == ENOENT) return out;
    return FailedPreconditionError("sandbox uid map " + path_ + ": cannot read: " + Errno(errno));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return FailedPreconditionError("sandbox uid map " + path_ + ": cannot read");
  auto corrupt = [&](const std::string& why) {
    return FailedPreconditionError(
        "sandbox uid map " + path_ + " is corrupt: " + why +
        " (it says which uid owns each tenant's files on this node; repair it, or remove it "
        "together with the node's attempts/ and checkpoints/ dirs)");
  };
  try {
    json j = json::parse(ss.str());
    if (j.value("range", "") != range_.ToString()) {
      return FailedPreconditionError(
          "sandbox uid map " + path_ + " was made for uid range " + j.value("range", "?") +
          ", not " + range_.ToString() + "; use the old range or move the map (and the files "
          "its uids own) away");
    }
    if (j.value("uidsPerTenant", int64_t{0}) != kUidsPerTenant) {
      return corrupt("uidsPerTenant is not " + std::to_string(kUidsPerTenant));
    }
    std::set<uint32_t> seen;
    for (const auto& [tenant, v] : j.at("tenants").items()) {
      if (!v.is_number_unsigned()) return corrupt("tenant " + tenant + ": uid is not a number");
      const uint64_t uid = v.get<uint64_t>();
      if (uid < range_.first || uid + kUidsPerTenant - 1 > range_.last ||
          (uid - range_.first) % kUidsPerTenant != 0) {
        return corrupt("tenant " + tenant + ": uid " + std::to_string(uid) +
                       " is not the start of a block in " + range_.ToString());
      }
      if (!seen.insert(static_cast<uint32_t>(uid)).second) {
        return corrupt("uid " + std::to_string(uid) + " is given to two tenants");
      }
      out[tenant] = static_cast<uint32_t>(uid);
    }
  } catch (const std::exception& e) {
    return corrupt(e.what());
  }
  return out;
}

StatusOr<uint32_t> TenantUids::UidOf(const std::string& tenant) {
  std::lock_guard<std::mutex> l(mu_);
  const std::string lock_path = path_ + ".lock";
  const int lock_fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock_fd < 0) return InternalError("sandbox uid map lock " + lock_path + ": " + Errno(errno));
  struct Unlock {
    int fd;
    ~Unlock() { ::close(fd); }  // closing drops the flock
  } unlock{lock_fd};
  while (::flock(lock_fd, LOCK_EX) != 0) {
    if (errno != EINTR) return InternalError("flock " + lock_path + ": " + Errno(errno));
  }
  StatusOr<std::map<std::string, uint32_t>> m = Load();
  if (!m.ok()) return m.status();
  if (auto it = m->find(tenant); it != m->end()) return it->second;
  std::set<uint32_t> taken;
  for (const auto& [t, uid] : *m) taken.insert(uid);
  std::optional<uint32_t> free;
  for (uint64_t uid = range_.first; uid + kUidsPerTenant - 1 <= range_.last; uid += kUidsPerTenant) {
    if (taken.count(static_cast<uint32_t>(uid))) continue;
    // A block whose uids in use (the tenant's, its replicas') name an account or a group of the
    // system's user database (files, LDAP, SSSD: whatever NSS answers) is skipped: a tenant never
    // runs as somebody.
    if (std::string who = IdOwner(static_cast<uint32_t>(uid)) + IdOwner(static_cast<uint32_t>(uid + 1)); !who.empty()) {
      spdlog::warn("sandbox: uid block {} skipped: {}", uid, who);
      continue;
    }
    free = static_cast<uint32_t>(uid);
    break;
  }
  if (!free) {
    return ResourceExhaustedError("sandbox: every uid block of " + range_.ToString() +
                                  " is taken (" + std::to_string(m->size()) +
                                  " tenants); give the agent a larger --sandbox-uids range");
  }
  (*m)[tenant] = *free;
  json j = {{"range", range_.ToString()}, {"uidsPerTenant", kUidsPerTenant}, {"tenants", *m}};
  const std::string text = j.dump(2) + "\n";
  const std::string tmp = path_ + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return InternalError("sandbox uid map " + tmp + ": " + Errno(errno));
  size_t done = 0;
  int err = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      err = errno;
      break;
    }
    done += static_cast<size_t>(n);
  }
  if (err == 0 && ::fsync(fd) != 0) err = errno;
  ::close(fd);
  if (err == 0 && ::rename(tmp.c_str(), path_.c_str()) != 0) err = errno;
  if (err != 0) {
    ::unlink(tmp.c_str());
    return InternalError("sandbox uid map " + path_ + ": " + Errno(err));
  }
  const std::string dir = fs::path(path_).parent_path().string();
  if (const int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return *free;
}

std::string BlockingComponent(const std::string& path, uint32_t uid, bool exec) {
  const std::vector<std::string> dirs = Prefixes(path);
  for (size_t i = 0; i < dirs.size(); ++i) {
    struct stat st {};
    if (::stat(dirs[i].c_str(), &st) != 0) return "";  // missing: not a permission problem
    const bool last = i + 1 == dirs.size();
    if (last && !S_ISDIR(st.st_mode)) {
      if (exec && !Allowed(st, uid, 1)) return Describe(dirs[i], st);
      continue;
    }
    if (S_ISDIR(st.st_mode) && !Allowed(st, uid, 1)) return Describe(dirs[i], st);
  }
  return "";
}

Status CheckReachable(const std::string& dir, uint32_t uid) {
  std::error_code ec;
  const fs::path real = fs::canonical(dir, ec);
  if (ec) return FailedPreconditionError("sandbox: " + dir + ": " + ec.message());
  for (const std::string& d : Prefixes(real.string())) {
    struct stat st {};
    if (::stat(d.c_str(), &st) != 0) {
      return FailedPreconditionError("sandbox: " + d + ": " + Errno(errno));
    }
    if (!Allowed(st, uid, 1)) {
      return FailedPreconditionError(
          "sandbox: uid " + std::to_string(uid) + " cannot reach " + real.string() + ": " + d +
          " is mode " + Octal(st.st_mode) + " (owner " + std::to_string(st.st_uid) +
          "); make it searchable (chmod o+x " + d + "), or give the agent a --work-dir whose "
          "parents are, or run it with --no-sandbox (unisolated)");
    }
  }
  return OkStatus();
}

Status MakePrivateDir(const std::string& dir, uint32_t uid) {
  std::error_code ec;
  const fs::path parent = fs::path(dir).parent_path();
  if (!parent.empty() && !fs::exists(parent, ec)) {
    fs::create_directories(parent, ec);
    if (ec) return InternalError("cannot create " + parent.string() + ": " + ec.message());
  }
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return InternalError("cannot create " + dir + ": " + Errno(errno));
  }
  // O_NOFOLLOW: a tenant that replaced its dir with a symlink must not get us to chown the target.
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return InternalError("cannot open " + dir + ": " + Errno(errno));
  int err = 0;
  if (::fchown(fd, uid, uid) != 0 || ::fchmod(fd, 0700) != 0) err = errno;
  ::close(fd);
  if (err != 0) return InternalError("cannot give " + dir + " to uid " + std::to_string(uid) +
                                     ": " + Errno(err));
  return OkStatus();
}

}  // namespace aicloud::agent
