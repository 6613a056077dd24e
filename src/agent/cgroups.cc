#include "agent/cgroups.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace aicloud::agent {
namespace {

std::string Errno(int err) { return std::strerror(err); }

std::string ReadSmallFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return "";
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Writes `text` to a control file; 0 or an errno. (O_CREAT changes nothing on cgroupfs, where
// the kernel made the file with the group or refuses to create one, and lets a test tree stand
// in for it.)
int WriteControl(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return errno;
  const ssize_t n = ::write(fd, text.data(), text.size());
  const int err = n < 0 ? errno : 0;
  ::close(fd);
  return err;
}

bool Exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

bool HasWord(const std::string& text, const std::string& word, char sep = ' ') {
  std::string w;
  std::istringstream in(text);
  while (std::getline(in, w, sep)) {
    while (!w.empty() && std::isspace(static_cast<unsigned char>(w.back()))) w.pop_back();
    if (w == word) return true;
  }
  return false;
}

// The value of `key` in a flat "key value" file (memory.events, memory.oom_control, cpu.stat).
int64_t KeyedValue(const std::string& text, const std::string& key) {
  std::istringstream in(text);
  std::string k;
  int64_t v = 0;
  while (in >> k >> v) {
    if (k == key) return v;
  }
  return 0;
}

Status MakeDir(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return FailedPreconditionError("cannot create " + dir + ": " + Errno(errno));
  }
  return OkStatus();
}

// Makes a new group directory named `name` (or "name.1", "name.2", ... when taken: a group is
// never shared with another supervisor, whose cleanup would kill our processes) under every one
// of `roots`; returns the name used.
StatusOr<std::string> MakeFreshGroup(const std::vector<std::string>& roots,
                                     const std::string& name) {
  for (int i = 0; i < 100; ++i) {
    const std::string candidate = i == 0 ? name : name + "." + std::to_string(i);
    size_t made = 0;
    int err = 0;
    for (; made < roots.size(); ++made) {
      if (::mkdir((roots[made] + "/" + candidate).c_str(), 0755) != 0) {
        err = errno;
        break;
      }
    }
    if (made == roots.size()) return candidate;
    for (size_t j = 0; j < made; ++j) ::rmdir((roots[j] + "/" + candidate).c_str());
    if (err != EEXIST) {
      return InternalError("cgroup " + roots[made] + "/" + candidate + ": " + Errno(err));
    }
  }
  return InternalError("cgroup " + roots[0] + "/" + name + ": 100 groups of that name exist");
}

Status WriteOrError(const std::string& path, const std::string& text) {
  if (int err = WriteControl(path, text); err != 0) {
    return InternalError("cgroup " + path + ": " + Errno(err));
  }
  return OkStatus();
}

// ---- v2 ---------------------------------------------------------------------------------------

class V2Group : public AttemptCgroup {
 public:
  explicit V2Group(std::string dir) : dir_(std::move(dir)), procs_{dir_ + "/cgroup.procs"} {}
  const std::vector<std::string>& ProcsFiles() const override { return procs_; }
  void KillAll() override {
    if (WriteControl(dir_ + "/cgroup.kill", "1") == 0) return;
    // Kernels before 5.14 have no cgroup.kill: signal what is listed.
    std::istringstream in(ReadSmallFile(dir_ + "/cgroup.procs"));
    for (long pid; in >> pid;) {
      if (pid > 0) ::kill(static_cast<pid_t>(pid), SIGKILL);
    }
  }
  double CpuSeconds() const override {
    const std::string stat = ReadSmallFile(dir_ + "/cpu.stat");
    if (stat.empty()) return -1;
    return static_cast<double>(KeyedValue(stat, "usage_usec")) / 1e6;
  }
  bool OomKilled() const override {
    return KeyedValue(ReadSmallFile(dir_ + "/memory.events"), "oom_kill") > 0;
  }
  bool Remove() override { return ::rmdir(dir_.c_str()) == 0 || errno == ENOENT; }

 private:
  std::string dir_;
  std::vector<std::string> procs_;
};

class V2Backend : public CgroupBackend {
 public:
  explicit V2Backend(std::string root) : root_(std::move(root)) {}
  std::string Describe() const override { return "cgroup v2 at " + root_; }
  StatusOr<std::unique_ptr<AttemptCgroup>> Create(const std::string& name,
                                                  const CgroupLimits& limits) const override {
    StatusOr<std::string> fresh = MakeFreshGroup({root_}, name);
    if (!fresh.ok()) return fresh.status();
    const std::string dir = root_ + "/" + *fresh;
    auto group = std::make_unique<V2Group>(dir);
    Status s = OkStatus();
    if (limits.cpu_millis > 0) {
      // "<quota> <period>" in microseconds: cpu_millis/1000 CPUs of a 100 ms period.
      const int64_t quota = std::max<int64_t>(1000, limits.cpu_millis * 100);
      s = WriteOrError(dir + "/cpu.max", std::to_string(quota) + " 100000");
    }
    if (s.ok() && limits.memory_bytes > 0) {
      s = WriteOrError(dir + "/memory.max", std::to_string(limits.memory_bytes));
      // Swap would let the attempt exceed its memory without being killed.
      if (s.ok() && Exists(dir + "/memory.swap.max")) s = WriteOrError(dir + "/memory.swap.max", "0");
    }
    if (!s.ok()) {
      group->Remove();
      return s;
    }
    return std::unique_ptr<AttemptCgroup>(std::move(group));
  }

 private:
  std::string root_;
};

// ---- v1 ---------------------------------------------------------------------------------------

class V1Group : public AttemptCgroup {
 public:
  V1Group(std::string cpu_dir, std::string memory_dir, std::string devices_dir)
      : cpu_dir_(std::move(cpu_dir)),
        memory_dir_(std::move(memory_dir)),
        devices_dir_(std::move(devices_dir)),
        procs_{cpu_dir_ + "/cgroup.procs", memory_dir_ + "/cgroup.procs"} {
    if (!devices_dir_.empty()) procs_.push_back(devices_dir_ + "/cgroup.procs");
  }
  const std::vector<std::string>& ProcsFiles() const override { return procs_; }
  void KillAll() override {
    // No cgroup.kill in v1: kill what is listed until nothing is (a process may fork meanwhile;
    // its child is in the group too and shows up on the next pass).
    for (int pass = 0; pass < 50; ++pass) {
      bool any = false;
      for (const std::string& procs : procs_) {
        std::istringstream in(ReadSmallFile(procs));
        for (long pid; in >> pid;) {
          if (pid > 0 && ::kill(static_cast<pid_t>(pid), SIGKILL) == 0) any = true;
        }
      }
      if (!any) return;
    }
  }
  double CpuSeconds() const override {
    const std::string usage = ReadSmallFile(cpu_dir_ + "/cpuacct.usage");  // when co-mounted
    if (usage.empty()) return -1;
    return static_cast<double>(std::strtoll(usage.c_str(), nullptr, 10)) / 1e9;
  }
  bool OomKilled() const override {
    return KeyedValue(ReadSmallFile(memory_dir_ + "/memory.oom_control"), "oom_kill") > 0;
  }
  bool Remove() override {
    bool gone = true;
    for (const std::string& dir : {cpu_dir_, memory_dir_, devices_dir_}) {
      if (!dir.empty() && ::rmdir(dir.c_str()) != 0 && errno != ENOENT) gone = false;
    }
    return gone;
  }

 private:
  std::string cpu_dir_, memory_dir_, devices_dir_;
  std::vector<std::string> procs_;
};

class V1Backend : public CgroupBackend {
 public:
  V1Backend(std::string cpu_root, std::string memory_root, std::string devices_root)
      : cpu_root_(std::move(cpu_root)), memory_root_(std::move(memory_root)), devices_root_(std::move(devices_root)) {}
  std::string Describe() const override {
    return "cgroup v1 at " + cpu_root_ + " and " + memory_root_ +
           (devices_root_.empty() ? " (no devices controller: device access not limited)" : ", devices at " + devices_root_);
  }
  StatusOr<std::unique_ptr<AttemptCgroup>> Create(const std::string& name,
                                                  const CgroupLimits& limits) const override {
    const bool devices = !devices_root_.empty() && !limits.deny_devices.empty();
    std::vector<std::string> roots = {cpu_root_, memory_root_};
    if (devices) roots.push_back(devices_root_);
    StatusOr<std::string> fresh = MakeFreshGroup(roots, name);
    if (!fresh.ok()) return fresh.status();
    const std::string cpu = cpu_root_ + "/" + *fresh, mem = memory_root_ + "/" + *fresh;
    auto group = std::make_unique<V1Group>(cpu, mem, devices ? devices_root_ + "/" + *fresh : "");
    Status s = OkStatus();
    if (devices) {
      for (const std::string& rule : limits.deny_devices) {
        if (!s.ok()) break;
        s = WriteOrError(devices_root_ + "/" + *fresh + "/devices.deny", rule);
      }
    }
    if (s.ok() && limits.cpu_millis > 0) {
      const int64_t quota = std::max<int64_t>(1000, limits.cpu_millis * 100);
      s = WriteOrError(cpu + "/cpu.cfs_period_us", "100000");
      if (s.ok()) s = WriteOrError(cpu + "/cpu.cfs_quota_us", std::to_string(quota));
    }
    if (s.ok() && limits.memory_bytes > 0) {
      // memsw (memory + swap) must stay >= the memory limit, so the memory limit goes first.
      const std::string bytes = std::to_string(limits.memory_bytes);
      s = WriteOrError(mem + "/memory.limit_in_bytes", bytes);
      if (s.ok() && Exists(mem + "/memory.memsw.limit_in_bytes")) {
        s = WriteOrError(mem + "/memory.memsw.limit_in_bytes", bytes);
      }
    }
    if (!s.ok()) {
      group->Remove();
      return s;
    }
    return std::unique_ptr<AttemptCgroup>(std::move(group));
  }

 private:
  std::string cpu_root_, memory_root_, devices_root_;
};

struct Mount {
  std::string dir, type, options;
};

std::vector<Mount> ReadMounts(const std::string& file) {
  std::vector<Mount> out;
  std::istringstream in(ReadSmallFile(file));
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    Mount m;
    std::string device;
    if (f >> device >> m.dir >> m.type >> m.options) out.push_back(m);
  }
  return out;
}

// The agent's own group in a v1 hierarchy that carries `controller` ("/" at the top), from
// /proc/self/cgroup ("4:memory:/some/path").
std::string OwnV1Group(const std::string& controller) {
  std::istringstream in(ReadSmallFile("/proc/self/cgroup"));
  std::string line;
  while (std::getline(in, line)) {
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    if (HasWord(line.substr(a + 1, b - a - 1), controller, ',')) return line.substr(b + 1);
  }
  return "/";
}

}  // namespace

StatusOr<std::unique_ptr<CgroupBackend>> OpenCgroupV2(const std::string& root) {
  const std::string parent = root.substr(0, root.rfind('/'));
  if (!Exists(root + "/cgroup.controllers")) {
    if (!Exists(parent + "/cgroup.controllers")) {
      return FailedPreconditionError(parent + " is not a cgroup v2 hierarchy (no "
                                     "cgroup.controllers: cgroup v1, or not mounted)");
    }
    AICLOUD_RETURN_IF_ERROR(MakeDir(root));
  }
  const std::string controllers = ReadSmallFile(root + "/cgroup.controllers");
  std::string missing;
  for (const char* c : {"cpu", "memory"}) {
    if (!HasWord(controllers, c)) missing += missing.empty() ? c : std::string(", ") + c;
  }
  if (!missing.empty()) {
    return FailedPreconditionError(root + "/cgroup.controllers lacks " + missing +
                                   " (the parent must delegate them in its "
                                   "cgroup.subtree_control)");
  }
  if (::access(root.c_str(), W_OK) != 0) {
    return FailedPreconditionError("cannot write " + root + ": " + Errno(errno));
  }
  if (int err = WriteControl(root + "/cgroup.subtree_control", "+cpu +memory"); err != 0) {
    return FailedPreconditionError("cannot enable cpu and memory in " + root +
                                   "/cgroup.subtree_control: " + Errno(err));
  }
  return std::unique_ptr<CgroupBackend>(std::make_unique<V2Backend>(root));
}

StatusOr<std::unique_ptr<CgroupBackend>> OpenCgroupV1(const std::string& cpu_root,
                                                      const std::string& memory_root,
                                                      const std::string& devices_root) {
  for (const std::string& root : {cpu_root, memory_root}) {
    AICLOUD_RETURN_IF_ERROR(MakeDir(root));
    if (!Exists(root + "/cgroup.procs")) {
      return FailedPreconditionError(root + " is not a cgroup directory (no cgroup.procs)");
    }
    if (::access(root.c_str(), W_OK) != 0) {
      return FailedPreconditionError("cannot write " + root + ": " + Errno(errno));
    }
  }
  if (!Exists(cpu_root + "/cpu.cfs_quota_us")) {
    return FailedPreconditionError(cpu_root + " has no cpu.cfs_quota_us (CFS bandwidth control "
                                   "is not in this kernel)");
  }
  if (!Exists(memory_root + "/memory.limit_in_bytes")) {
    return FailedPreconditionError(memory_root + " has no memory.limit_in_bytes");
  }
  // The devices controller is optional: without it (or without devices.deny) attempts can open
  // any device file their uid may.
  std::string devices;
  if (!devices_root.empty() && MakeDir(devices_root).ok() && Exists(devices_root + "/devices.deny") &&
      ::access(devices_root.c_str(), W_OK) == 0) {
    devices = devices_root;
  }
  return std::unique_ptr<CgroupBackend>(std::make_unique<V1Backend>(cpu_root, memory_root, devices));
}

std::unique_ptr<CgroupBackend> DetectCgroups(std::string* why, const std::string& mounts) {
  std::string cpu_mount, memory_mount, devices_mount;
  bool unified = false;
  for (const Mount& m : ReadMounts(mounts)) {
    if (m.type == "cgroup2" && m.dir == "/sys/fs/cgroup") unified = true;
    if (m.type != "cgroup") continue;
    if (cpu_mount.empty() && HasWord(m.options, "cpu", ',')) cpu_mount = m.dir;
    if (memory_mount.empty() && HasWord(m.options, "memory", ',')) memory_mount = m.dir;
    if (devices_mount.empty() && HasWord(m.options, "devices", ',')) devices_mount = m.dir;
  }
  if (unified) {
    StatusOr<std::unique_ptr<CgroupBackend>> v2 = OpenCgroupV2("/sys/fs/cgroup/aicloud");
    if (v2.ok()) return std::move(*v2);
    *why = "no cgroup limits: " + std::string(v2.status().message());
    return nullptr;
  }
  if (cpu_mount.empty() || memory_mount.empty()) {
    *why = "no cgroup limits: neither a cgroup v2 hierarchy at /sys/fs/cgroup nor cgroup v1 cpu "
           "and memory hierarchies are mounted (" + mounts + ")";
    return nullptr;
  }
  // Under the agent's own group, so whatever accounts for the agent accounts for its attempts.
  auto root = [](const std::string& mount, const std::string& controller) {
    std::string own = OwnV1Group(controller);
    if (own == "/") own.clear();
    return mount + own + "/aicloud";
  };
  StatusOr<std::unique_ptr<CgroupBackend>> v1 =
      OpenCgroupV1(root(cpu_mount, "cpu"), root(memory_mount, "memory"),
                   devices_mount.empty() ? "" : root(devices_mount, "devices"));
  if (v1.ok()) return std::move(*v1);
  *why = "no cgroup limits: " + std::string(v1.status().message());
  return nullptr;
}

}  // namespace aicloud::agent
