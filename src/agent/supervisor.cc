#include "agent/supervisor.h"

#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <grp.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/thread_name.h"

namespace aicloud::agent {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr auto kPollInterval = std::chrono::milliseconds(5);
constexpr rlim_t kMaxTasksPerSandboxUid = 16384;
constexpr const char* kDefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

// What a child that failed before exec reports through its CLOEXEC pipe.
enum ChildStage : int {
  kStageCgroup = 1,
  kStageFds = 2,
  kStageChdir = 3,
  kStageExec = 4,
  kStageFork = 5,
  kStageNetwork = 6,
  kStageLimits = 7,
  kStageCredentials = 8,
  kStageNoNewPrivs = 9,
};
struct ChildError {
  int stage;
  int err;
};

std::string Errno(int err) { return std::strerror(err); }

std::string SignalName(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev != nullptr ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

std::string FormatGrace(std::chrono::milliseconds grace) {
  const int64_t ms = grace.count();
  if (ms % 1000 == 0) return std::to_string(ms / 1000) + "s";
  return std::to_string(ms) + "ms";
}

// The attempt id as one cgroup directory name.
std::string CgroupName(const std::string& attempt_id) {
  std::string leaf;
  for (char ch : attempt_id) {
    const bool ok = std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_' ||
                    ch == '.';
    leaf += ok ? ch : '_';
  }
  if (leaf == "." || leaf == "..") leaf = "_" + leaf;
  return leaf;
}

std::string MiB(int64_t bytes) {
  if (bytes % (1 << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  return std::to_string(bytes) + " bytes";
}

// Async-signal-safe helpers for the child between fork and exec.
[[noreturn]] void ChildFail(int fd, int stage, int err) {
  ChildError e{stage, err};
  ssize_t ignored = ::write(fd, &e, sizeof e);
  (void)ignored;
  ::_exit(127);
}

void CloseRange(int first, int last) {  // inclusive; last < 0: to the end
  if (last >= 0 && last < first) return;
  const unsigned hi = last < 0 ? ~0U : static_cast<unsigned>(last);
  if (::close_range(static_cast<unsigned>(first), hi, 0) != 0) {
    long max = ::sysconf(_SC_OPEN_MAX);
    if (max < 0 || max > 65536) max = 65536;
    if (last >= 0 && last < max) max = last + 1;
    for (int fd = first; fd < max; ++fd) ::close(fd);
  }
}

void CloseFrom(int first, int keep1, int keep2) {
  // Close everything >= first except the kept ones (CLOEXEC, they close at exec; -1 = none).
  int lo = keep1, hi = keep2;
  if (lo > hi) std::swap(lo, hi);
  if (lo < first) lo = -1;
  if (hi < first) hi = -1;
  int next = first;
  for (int keep : {lo, hi}) {
    if (keep < 0) continue;
    CloseRange(next, keep - 1);
    next = keep + 1;
  }
  CloseRange(next, -1);
}

// Brings the loopback interface of the current network namespace up.
int LoopbackUp() {
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  struct ifreq ifr {};
  ::memcpy(ifr.ifr_name, "lo", 3);
  int err = 0;
  if (::ioctl(fd, SIOCGIFFLAGS, &ifr) != 0) {
    err = errno;
  } else {
    ifr.ifr_flags = static_cast<short>(ifr.ifr_flags | IFF_UP | IFF_RUNNING);
    if (::ioctl(fd, SIOCSIFFLAGS, &ifr) != 0) err = errno;
  }
  ::close(fd);
  return err;
}

void WritePid(int fd, long pid, int* err) {
  char buf[24], rev[24];
  int n = 0;
  do {
    rev[n++] = static_cast<char>('0' + pid % 10);
    pid /= 10;
  } while (pid > 0);
  for (int i = 0; i < n; ++i) buf[i] = rev[n - 1 - i];
  if (::write(fd, buf, static_cast<size_t>(n)) < 0) *err = errno;
}

// The guardian: the process-group leader of an attempt that must die with its agent. It ignores
// the signals a stop sends to the group (the command handles those), waits for the command, and
// exits the way the command did. On the agent's death (kGuardSignal, set as its parent-death
// signal) it kills the whole group, grandchildren included.
constexpr int kGuardSignal = SIGUSR2;
volatile pid_t g_guard_parent = 0;

void OnStarterDeath(int) {
  // A stray SIGUSR2 sent to the group while the agent lives is not a death.
  if (::getppid() != g_guard_parent) ::kill(0, SIGKILL);
}

// Returns in the command's process (to exec it); the guardian never returns.
void GuardGroup(int err_fd) {
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGPIPE, SIGTSTP, SIGTTIN, SIGTTOU}) {
    ::sigaction(sig, &ignore, nullptr);
  }
  const pid_t command = ::fork();
  if (command < 0) ChildFail(err_fd, kStageFork, errno);
  if (command == 0) {
    // Back to default dispositions: ignored signals would survive exec.
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    for (int sig = 1; sig < NSIG; ++sig) {
      if (sig != SIGKILL && sig != SIGSTOP) ::sigaction(sig, &dfl, nullptr);
    }
    return;
  }
  // The pipe must close when the command execs, so the guardian lets go of its end.
  ::close(err_fd);
  int status = 0;
  for (;;) {
    const pid_t r = ::waitpid(command, &status, 0);
    if (r == command) break;
    if (r < 0 && errno != EINTR) ::_exit(127);
  }
  if (WIFEXITED(status)) ::_exit(WEXITSTATUS(status));
  // Die by the same signal, without a core file of the guardian.
  const int sig = WTERMSIG(status);
  struct rlimit no_core {0, 0};
  ::setrlimit(RLIMIT_CORE, &no_core);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(sig, &dfl, nullptr);
  sigset_t only;
  sigemptyset(&only);
  sigaddset(&only, sig);
  ::sigprocmask(SIG_UNBLOCK, &only, nullptr);
  ::kill(::getpid(), sig);
  ::_exit(128 + sig);
}

struct ChildArgs {
  int null_fd;
  int log_fd;
  int err_fd;
  int exe_fd;                // >= 0: exec this descriptor (the agent's own binary) instead
  const char* working_dir;   // nullptr: stay
  const char* const* cgroup_procs;  // nullptr-terminated; may be empty
  char* const* argv;
  char* const* envp;
  const std::vector<std::string>* candidates;
  pid_t parent_pid;  // the agent, for the death-signal race check
  bool die_with_parent;
  bool isolate_network;
  bool set_uid;
  uid_t uid;
  bool no_new_privs;
  rlim_t max_open_files;  // 0: leave
};

[[noreturn]] void ChildExec(const ChildArgs& c) {
  // Move our three descriptors above 2 first, so the dup2s below cannot clobber one another.
  const int err_fd = ::fcntl(c.err_fd, F_DUPFD_CLOEXEC, 3);
  if (err_fd < 0) ::_exit(127);
  const int null_fd = ::fcntl(c.null_fd, F_DUPFD, 3);
  const int log_fd = ::fcntl(c.log_fd, F_DUPFD, 3);
  if (null_fd < 0 || log_fd < 0) ChildFail(err_fd, kStageFds, errno);
  const int exe_fd = c.exe_fd < 0 ? -1 : ::fcntl(c.exe_fd, F_DUPFD_CLOEXEC, 3);
  if (c.exe_fd >= 0 && exe_fd < 0) ChildFail(err_fd, kStageFds, errno);

  // Default signal dispositions and an empty mask: ignored signals (SIGPIPE in a server) and a
  // blocked mask would otherwise be inherited through exec.
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP) ::sigaction(sig, &dfl, nullptr);
  }

  ::setsid();  // new session and process group: pgid == pid

  for (const char* const* procs = c.cgroup_procs; *procs != nullptr; ++procs) {
    const int fd = ::open(*procs, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);  // see WriteControl
    if (fd < 0) ChildFail(err_fd, kStageCgroup, errno);
    int err = 0;
    WritePid(fd, ::getpid(), &err);
    if (err != 0) ChildFail(err_fd, kStageCgroup, err);
    ::close(fd);
  }

  if (c.isolate_network) {
    if (::unshare(CLONE_NEWNET) != 0) ChildFail(err_fd, kStageNetwork, errno);
    if (int err = LoopbackUp(); err != 0) ChildFail(err_fd, kStageNetwork, err);
  }

  {
    struct rlimit no_core {0, 0};
    if (::setrlimit(RLIMIT_CORE, &no_core) != 0) ChildFail(err_fd, kStageLimits, errno);
    struct rlimit files {};
    if (c.max_open_files > 0 && ::getrlimit(RLIMIT_NOFILE, &files) == 0) {
      const rlim_t n = std::min(c.max_open_files, files.rlim_max);
      files = {n, n};
      if (::setrlimit(RLIMIT_NOFILE, &files) != 0) ChildFail(err_fd, kStageLimits, errno);
    }
    // Tasks (processes and threads) of the sandbox uid on this node: a fork bomb of one tenant
    // stops there instead of taking the node's pid space.
    if (c.set_uid) {
      struct rlimit tasks {kMaxTasksPerSandboxUid, kMaxTasksPerSandboxUid};
      if (::setrlimit(RLIMIT_NPROC, &tasks) != 0) ChildFail(err_fd, kStageLimits, errno);
    }
  }

  if (c.set_uid) {
    // Groups first: setgroups and setgid need the privileges setuid gives up.
    if (::setgroups(0, nullptr) != 0 || ::setgid(static_cast<gid_t>(c.uid)) != 0 ||
        ::setuid(c.uid) != 0) {
      ChildFail(err_fd, kStageCredentials, errno);
    }
    if (::setuid(0) == 0) ChildFail(err_fd, kStageCredentials, EPERM);  // must be irreversible
  }
  if (c.no_new_privs && ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    ChildFail(err_fd, kStageNoNewPrivs, errno);
  }

  // Fencing: if the agent dies (kill -9, crash), its attempts die with it, because the server
  // will requeue them elsewhere and the same work must not run twice. The kernel's death signal
  // only reaches this process, not what the command forks, so this process stays behind as the
  // group's guardian (see GuardGroup) and the command runs in a child of it. (The signal fires
  // when the forking thread exits; the agent's threads live as long as the agent.) It is set
  // after setuid because a change of credentials clears it.
  if (c.die_with_parent) {
    g_guard_parent = c.parent_pid;
    struct sigaction on_death {};
    on_death.sa_handler = OnStarterDeath;
    sigemptyset(&on_death.sa_mask);
    ::sigaction(kGuardSignal, &on_death, nullptr);
    ::prctl(PR_SET_PDEATHSIG, kGuardSignal);
    if (::getppid() != c.parent_pid) {  // the agent died before prctl took effect
      ::kill(0, SIGKILL);
      ::_exit(127);
    }
  }

  if (::dup2(null_fd, 0) < 0 || ::dup2(log_fd, 1) < 0 || ::dup2(log_fd, 2) < 0) {
    ChildFail(err_fd, kStageFds, errno);
  }
  CloseFrom(3, err_fd, exe_fd);

  if (c.working_dir != nullptr && ::chdir(c.working_dir) != 0) {
    ChildFail(err_fd, kStageChdir, errno);
  }

  if (c.die_with_parent) GuardGroup(err_fd);

  if (exe_fd >= 0) {
    ::execveat(exe_fd, "", c.argv, c.envp, AT_EMPTY_PATH);
    ChildFail(err_fd, kStageExec, errno);
  }
  // execvp's rules: try each PATH entry; remember EACCES; stop at an error other than "not
  // here".
  int err = ENOENT;
  bool saw_eacces = false;
  for (const std::string& path : *c.candidates) {
    ::execve(path.c_str(), c.argv, c.envp);
    if (errno == EACCES) {
      saw_eacces = true;
    } else if (errno != ENOENT && errno != ENOTDIR) {
      err = errno;
      break;
    }
  }
  if (err == ENOENT && saw_eacces) err = EACCES;
  ChildFail(err_fd, kStageExec, err);
}

}  // namespace

const char* ProcStateName(ProcState state) {
  switch (state) {
    case ProcState::kRunning: return "Running";
    case ProcState::kSucceeded: return "Succeeded";
    case ProcState::kFailed: return "Failed";
    case ProcState::kKilled: return "Killed";
  }
  return "Unknown";
}

Supervisor::Supervisor(std::string cgroup_root) {
  if (cgroup_root.empty()) {
    cgroups_ = DetectCgroups(&cgroup_status_);
  } else if (StatusOr<std::unique_ptr<CgroupBackend>> v2 = OpenCgroupV2(cgroup_root); v2.ok()) {
    cgroups_ = std::move(*v2);
  } else {
    cgroup_status_ = "no cgroup limits: " + std::string(v2.status().message());
  }
  if (cgroups_) cgroup_status_ = cgroups_->Describe();
  StartReaper();
}

Supervisor::Supervisor(std::unique_ptr<CgroupBackend> cgroups, std::string why_none)
    : cgroups_(std::move(cgroups)) {
  cgroup_status_ = cgroups_ ? cgroups_->Describe() : "no cgroup limits: " + why_none;
  StartReaper();
}

void Supervisor::StartReaper() {
  reaper_ = std::thread([this] {
    SetThreadName("agent-reaper");
    ReaperLoop();
  });
}

Supervisor::~Supervisor() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    shutting_down_ = true;
    for (auto& [id, a] : attempts_) {
      if (a.status.state == ProcState::kRunning) StopLocked(a);
    }
  }
  cv_.notify_all();
  reaper_.join();
  // A group empties only once its last killed process has exited: give stragglers a moment.
  const auto deadline = Clock::now() + std::chrono::seconds(1);
  for (auto& [id, a] : attempts_) {
    while (a.cgroup && !a.cgroup->Remove() && Clock::now() < deadline) {
      std::this_thread::sleep_for(kPollInterval);
    }
  }
}

std::string Supervisor::cgroup_status() const { return cgroup_status_; }

void Supervisor::SetListener(std::function<void(const ProcStatus&)> listener) {
  std::lock_guard<std::mutex> lock(listener_mu_);
  listener_ = std::move(listener);
}

Status Supervisor::Start(const ProcessSpec& spec) {
  if (spec.attempt_id.empty()) return InvalidArgumentError("attempt_id is empty");
  if (spec.argv.empty() || spec.argv[0].empty()) {
    return InvalidArgumentError("attempt " + spec.attempt_id + ": argv is empty");
  }
  std::unique_lock<std::mutex> lock(mu_);
  if (shutting_down_) return FailedPreconditionError("supervisor is shutting down");
  if (attempts_.count(spec.attempt_id) != 0) {
    return AlreadyExistsError("attempt " + spec.attempt_id + " already exists");
  }
  Attempt a;
  a.status.attempt_id = spec.attempt_id;
  a.status.started = std::chrono::system_clock::now();
  a.status.message = "running";
  a.term_grace = spec.term_grace;

  auto record = [&](Attempt&& att) {
    pending_events_.push_back(att.status);
    attempts_.emplace(spec.attempt_id, std::move(att));
    cv_.notify_all();
    return OkStatus();
  };
  auto fail = [&](const std::string& what) {
    a.status.state = ProcState::kFailed;
    a.status.exit_code = 127;
    a.status.finished = std::chrono::system_clock::now();
    a.status.message = "could not start: " + what;
    if (a.cgroup && a.cgroup->Remove()) a.cgroup.reset();
    return record(std::move(a));
  };

  std::error_code ec;
  if (!spec.working_dir.empty() && spec.create_working_dir) {
    fs::create_directories(spec.working_dir, ec);
    if (ec) return fail("working directory " + spec.working_dir + ": " + ec.message());
  }
  const std::string log_path = spec.log_path.empty() ? "/dev/null" : spec.log_path;
  if (!spec.log_path.empty()) {
    const fs::path dir = fs::path(spec.log_path).parent_path();
    if (!dir.empty()) fs::create_directories(dir, ec);
    if (ec) return fail("log directory " + dir.string() + ": " + ec.message());
  }

  // Environment: a minimal inherited set, then the spec's.
  std::map<std::string, std::string> env;
  for (const char* name : {"PATH", "LANG"}) {
    if (const char* v = std::getenv(name)) env[name] = v;
  }
  if (env.count("PATH") == 0) env["PATH"] = kDefaultPath;
  if (!spec.working_dir.empty()) {
    env["HOME"] = spec.working_dir;
  } else if (const char* home = std::getenv("HOME"); home != nullptr && !spec.sandbox.uid) {
    env["HOME"] = home;
  }
  env["AICLOUD_ATTEMPT_ID"] = spec.attempt_id;
  for (const auto& [k, v] : spec.env) env[k] = v;
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);

  // Candidate paths for argv[0], resolved against the child's PATH.
  std::vector<std::string> candidates;
  const std::string& prog = spec.argv[0];
  if (prog.find('/') != std::string::npos) {
    candidates.push_back(prog);
  } else {
    std::string path = env["PATH"];
    if (path.empty()) path = kDefaultPath;
    size_t start = 0;
    while (start <= path.size()) {
      size_t end = path.find(':', start);
      if (end == std::string::npos) end = path.size();
      std::string dir = path.substr(start, end - start);
      candidates.push_back((dir.empty() ? "." : dir) + "/" + prog);
      start = end + 1;
    }
  }

  std::vector<char*> argv;
  for (const std::string& s : spec.argv) argv.push_back(const_cast<char*>(s.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const std::string& s : env_strings) envp.push_back(const_cast<char*>(s.c_str()));
  envp.push_back(nullptr);

  a.memory_bytes = spec.memory_bytes;
  if (cgroups_) {
    StatusOr<std::unique_ptr<AttemptCgroup>> group =
        cgroups_->Create(CgroupName(spec.attempt_id), {spec.cpu_millis, spec.memory_bytes, spec.deny_devices});
    if (!group.ok()) return fail(std::string(group.status().message()));
    a.cgroup = std::move(*group);
  }
  std::vector<const char*> cgroup_procs;
  if (a.cgroup) {
    for (const std::string& f : a.cgroup->ProcsFiles()) cgroup_procs.push_back(f.c_str());
  }
  cgroup_procs.push_back(nullptr);

  // The agent's own binary (platform replicas run `aicloud engine`) is exec'd through a
  // descriptor opened here, so a sandbox uid that cannot reach its install directory still
  // starts it.
  int exe_fd = -1;
  if (spec.sandbox.uid) {
    struct stat self {};
    if (::stat("/proc/self/exe", &self) == 0) {
      for (const std::string& c : candidates) {
        struct stat st {};
        if (::stat(c.c_str(), &st) != 0) continue;
        if (st.st_dev == self.st_dev && st.st_ino == self.st_ino) {
          exe_fd = ::open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
        }
        break;  // the first existing candidate is what execvp would run
      }
    }
  }
  auto close_exe = [&] {
    if (exe_fd >= 0) ::close(exe_fd);
  };

  const int log_fd = ::open(log_path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
  if (log_fd < 0) {
    const int err = errno;
    close_exe();
    return fail("log file " + log_path + ": " + Errno(err));
  }
  const int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null_fd < 0) {
    const int err = errno;
    ::close(log_fd);
    close_exe();
    return fail("/dev/null: " + Errno(err));
  }
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {
    const int err = errno;
    ::close(log_fd);
    ::close(null_fd);
    close_exe();
    return fail("pipe: " + Errno(err));
  }

  ChildArgs args{null_fd,
                 log_fd,
                 pipe_fds[1],
                 exe_fd,
                 spec.working_dir.empty() ? nullptr : spec.working_dir.c_str(),
                 cgroup_procs.data(),
                 argv.data(),
                 envp.data(),
                 &candidates,
                 ::getpid(),
                 spec.die_with_starter,
                 spec.sandbox.isolate_network,
                 spec.sandbox.uid.has_value(),
                 static_cast<uid_t>(spec.sandbox.uid.value_or(0)),
                 spec.sandbox.no_new_privs,
                 static_cast<rlim_t>(std::max<int64_t>(0, spec.sandbox.max_open_files))};
  const pid_t pid = ::fork();
  if (pid == 0) ChildExec(args);
  const int fork_errno = errno;
  ::close(pipe_fds[1]);
  ::close(log_fd);
  ::close(null_fd);
  close_exe();
  if (pid < 0) {
    ::close(pipe_fds[0]);
    return fail("fork: " + Errno(fork_errno));
  }
  a.status.pid = pid;

  // The pipe closes at exec (success) or carries the reason the child gave up.
  ChildError child_error{};
  size_t got = 0;
  while (got < sizeof child_error) {
    const ssize_t n = ::read(pipe_fds[0], reinterpret_cast<char*>(&child_error) + got,
                             sizeof child_error - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(pipe_fds[0]);
  if (got == sizeof child_error) {
    orphans_.push_back(pid);
    const std::string err = Errno(child_error.err);
    // Under a sandbox uid, EACCES says which uid and which path component.
    auto blocked = [&](const std::string& path, bool exec) -> std::string {
      if (child_error.err != EACCES || !spec.sandbox.uid) return "";
      const std::string uid = std::to_string(*spec.sandbox.uid);
      const std::string what = BlockingComponent(path, *spec.sandbox.uid, exec);
      if (what.empty()) return " (as sandbox uid " + uid + ")";
      return " (sandbox uid " + uid + " is blocked by " + what + ")";
    };
    switch (child_error.stage) {
      case kStageCgroup: {
        std::string files;
        for (const std::string& f : a.cgroup->ProcsFiles()) files += (files.empty() ? "" : ", ") + f;
        return fail("joining " + files + ": " + err);
      }
      case kStageChdir:
        return fail("chdir " + spec.working_dir + ": " + err + blocked(spec.working_dir, false));
      case kStageExec: {
        std::string why;
        for (const std::string& c : candidates) {
          struct stat st {};
          if (::stat(c.c_str(), &st) != 0) continue;
          why = blocked(c, true);
          if (!why.empty()) break;
        }
        return fail(prog + ": " + err + why);
      }
      case kStageFork: return fail("fork: " + err);
      case kStageNetwork: return fail("network namespace (isolation: network): " + err);
      case kStageLimits: return fail("setrlimit: " + err);
      case kStageCredentials:
        return fail("switching to sandbox uid " + std::to_string(spec.sandbox.uid.value_or(0)) +
                    ": " + err);
      case kStageNoNewPrivs: return fail("PR_SET_NO_NEW_PRIVS: " + err);
      default: return fail("setting up stdio: " + err);
    }
  }
  return record(std::move(a));
}

void Supervisor::StopLocked(Attempt& a) {
  if (a.status.state != ProcState::kRunning || a.stop_requested || a.status.pid <= 0) return;
  a.stop_requested = true;
  a.kill_at = Clock::now() + a.term_grace;
  ::killpg(static_cast<pid_t>(a.status.pid), SIGTERM);
}

Status Supervisor::Stop(const std::string& attempt_id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = attempts_.find(attempt_id);
    if (it == attempts_.end()) return NotFoundError("attempt " + attempt_id + " not found");
    StopLocked(it->second);
  }
  cv_.notify_all();
  return OkStatus();
}

std::optional<ProcStatus> Supervisor::Get(const std::string& attempt_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = attempts_.find(attempt_id);
  if (it == attempts_.end()) return std::nullopt;
  return it->second.status;
}

std::vector<ProcStatus> Supervisor::List() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ProcStatus> out;
  out.reserve(attempts_.size());
  for (const auto& [id, a] : attempts_) out.push_back(a.status);
  return out;
}

void Supervisor::Forget(const std::string& attempt_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = attempts_.find(attempt_id);
  if (it == attempts_.end() || it->second.status.state == ProcState::kRunning) return;
  if (it->second.cgroup) it->second.cgroup->Remove();
  attempts_.erase(it);
}

void Supervisor::Finish(Attempt& a, int wait_status, double cpu_seconds,
                        std::vector<ProcStatus>* events) {
  ProcStatus& s = a.status;
  s.finished = std::chrono::system_clock::now();
  s.cpu_seconds = cpu_seconds;
  const std::string after_stop = a.stop_requested ? " after Stop" : "";
  if (WIFEXITED(wait_status)) {
    s.exit_code = WEXITSTATUS(wait_status);
    s.signal = 0;
    s.message = "exited with code " + std::to_string(s.exit_code) + after_stop;
  } else if (WIFSIGNALED(wait_status)) {
    s.signal = WTERMSIG(wait_status);
    s.message = "killed by signal " + std::to_string(s.signal) + " (" + SignalName(s.signal) + ")";
    if (a.kill_sent && s.signal == SIGKILL) {
      s.message = "killed by signal 9 after SIGTERM grace " + FormatGrace(a.term_grace);
    } else {
      s.message += after_stop;
    }
  } else {
    s.message = "ended with wait status " + std::to_string(wait_status) + after_stop;
  }
  if (a.cgroup && a.cgroup->OomKilled()) {
    // The OOM killer's SIGKILL looks like any other: the cgroup's counter tells them apart.
    s.oom_killed = true;
    const std::string oom =
        "out of memory" +
        (a.memory_bytes > 0 ? " (limit " + MiB(a.memory_bytes) + ")" : std::string());
    if (WIFSIGNALED(wait_status) && s.signal == SIGKILL && !a.kill_sent) {
      s.message = "killed by signal 9 (SIGKILL): " + oom + after_stop;
    } else {
      s.message += "; " + oom;
    }
  }
  if (a.stop_requested) {
    s.state = ProcState::kKilled;
  } else if (WIFEXITED(wait_status) && s.exit_code == 0) {
    s.state = ProcState::kSucceeded;
  } else {
    s.state = ProcState::kFailed;
  }
  if (a.cgroup) {
    // Whatever escaped the process group dies with the cgroup; its CPU time counts too.
    a.cgroup->KillAll();
    s.cpu_seconds = std::max(s.cpu_seconds, a.cgroup->CpuSeconds());
    if (a.cgroup->Remove()) a.cgroup.reset();
  }
  events->push_back(s);
}

void Supervisor::PollLocked(std::vector<ProcStatus>* events) {
  const auto now = Clock::now();
  for (auto& [id, a] : attempts_) {
    if (a.status.state != ProcState::kRunning && a.cgroup && a.cgroup->Remove()) {
      a.cgroup.reset();  // its last process has exited since Finish
    }
    if (a.status.state != ProcState::kRunning || a.status.pid <= 0) continue;
    const auto pid = static_cast<pid_t>(a.status.pid);
    if (a.stop_requested && !a.kill_sent && now >= a.kill_at) {
      ::killpg(pid, SIGKILL);
      a.kill_sent = true;
    }
    // Look without reaping first: while the leader is a zombie its pid (= the pgid) cannot be
    // reused, so the group kill below cannot hit an unrelated process.
    siginfo_t info{};
    if (::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) != 0) {
      if (errno == ECHILD) {
        a.status.state = a.stop_requested ? ProcState::kKilled : ProcState::kFailed;
        a.status.finished = std::chrono::system_clock::now();
        a.status.message = "lost: the process was reaped outside the supervisor";
        events->push_back(a.status);
      }
      continue;
    }
    if (info.si_pid != pid) continue;
    ::killpg(pid, SIGKILL);
    int wait_status = 0;
    struct rusage usage {};
    pid_t r;
    do {
      r = ::wait4(pid, &wait_status, 0, &usage);
    } while (r < 0 && errno == EINTR);
    const double cpu = static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
                       static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
    Finish(a, wait_status, cpu, events);
  }
  for (size_t i = 0; i < orphans_.size();) {
    int st = 0;
    const pid_t r = ::waitpid(static_cast<pid_t>(orphans_[i]), &st, WNOHANG);
    if (r == 0) {
      ++i;
    } else {
      orphans_.erase(orphans_.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }
}

void Supervisor::ReaperLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    std::vector<ProcStatus> events = std::move(pending_events_);
    pending_events_.clear();
    PollLocked(&events);
    if (!events.empty()) {
      lock.unlock();
      {
        std::lock_guard<std::mutex> listener_lock(listener_mu_);
        if (listener_) {
          for (const ProcStatus& e : events) listener_(e);
        }
      }
      lock.lock();
      continue;
    }
    bool busy = !orphans_.empty();
    for (const auto& [id, a] : attempts_) {
      if (a.status.state == ProcState::kRunning) busy = true;
    }
    if (!busy && shutting_down_) break;
    if (busy) {
      cv_.wait_for(lock, kPollInterval);
    } else {
      cv_.wait(lock, [&] { return shutting_down_ || !pending_events_.empty() || !orphans_.empty() ||
                                  [&] {
                                    for (const auto& [id, a] : attempts_) {
                                      if (a.status.state == ProcState::kRunning) return true;
                                    }
                                    return false;
                                  }(); });
    }
  }
}

StatusOr<std::pair<std::string, int64_t>> ReadLog(const std::string& path, int64_t offset,
                                                  size_t max_bytes) {
  if (offset < 0) return InvalidArgumentError("negative log offset " + std::to_string(offset));
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return NotFoundError("log " + path + ": " + Errno(err));
    return Status(StatusCode::kInternal, "log " + path + ": " + Errno(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return InternalError("log " + path + ": fstat: " + Errno(err));
  }
  if (offset > st.st_size) {
    ::close(fd);
    return OutOfRangeError("log " + path + ": offset " + std::to_string(offset) +
                           " is past its end (" + std::to_string(st.st_size) + " bytes)");
  }
  const size_t want =
      std::min(max_bytes, static_cast<size_t>(st.st_size - static_cast<off_t>(offset)));
  std::string out(want, '\0');
  size_t got = 0;
  while (got < want) {
    const ssize_t n = ::pread(fd, out.data() + got, want - got, static_cast<off_t>(offset) +
                                                                    static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return InternalError("log " + path + ": read: " + Errno(err));
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  out.resize(got);
  return std::make_pair(std::move(out), offset + static_cast<int64_t>(got));
}

}  // namespace aicloud::agent
