#include "agent/supervisor.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
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
constexpr const char* kDefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

// What a child that failed before exec reports through its CLOEXEC pipe.
enum ChildStage : int {
  kStageCgroup = 1,
  kStageFds = 2,
  kStageChdir = 3,
  kStageExec = 4,
  kStageFork = 5,
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

// Reads a small file whole; "" when it cannot be read.
std::string ReadSmallFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return "";
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Writes `text` to an existing file (cgroup control files); 0 or an errno.
int WriteControl(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  const ssize_t n = ::write(fd, text.data(), text.size());
  const int err = n < 0 ? errno : 0;
  ::close(fd);
  return err;
}

bool HasWord(const std::string& text, const std::string& word) {
  std::istringstream in(text);
  std::string w;
  while (in >> w) {
    if (w == word) return true;
  }
  return false;
}

// Async-signal-safe helpers for the child between fork and exec.
[[noreturn]] void ChildFail(int fd, int stage, int err) {
  ChildError e{stage, err};
  ssize_t ignored = ::write(fd, &e, sizeof e);
  (void)ignored;
  ::_exit(127);
}

void CloseFrom(int first, int keep) {
  // Close everything >= first except `keep` (which is CLOEXEC and closes at exec).
  if (keep > first) {
    if (::close_range(static_cast<unsigned>(first), static_cast<unsigned>(keep - 1), 0) != 0) {
      for (int fd = first; fd < keep; ++fd) ::close(fd);
    }
  }
  if (::close_range(static_cast<unsigned>(keep + 1), ~0U, 0) != 0) {
    long max = ::sysconf(_SC_OPEN_MAX);
    if (max < 0 || max > 65536) max = 65536;
    for (int fd = keep + 1; fd < max; ++fd) ::close(fd);
  }
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
  const char* working_dir;   // nullptr: stay
  const char* cgroup_procs;  // nullptr: no cgroup
  char* const* argv;
  char* const* envp;
  const std::vector<std::string>* candidates;
  pid_t parent_pid;  // the agent, for the death-signal race check
  bool die_with_parent;
};

[[noreturn]] void ChildExec(const ChildArgs& c) {
  // Move our three descriptors above 2 first, so the dup2s below cannot clobber one another.
  const int err_fd = ::fcntl(c.err_fd, F_DUPFD_CLOEXEC, 3);
  if (err_fd < 0) ::_exit(127);
  const int null_fd = ::fcntl(c.null_fd, F_DUPFD, 3);
  const int log_fd = ::fcntl(c.log_fd, F_DUPFD, 3);
  if (null_fd < 0 || log_fd < 0) ChildFail(err_fd, kStageFds, errno);

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

  // Fencing: if the agent dies (kill -9, crash), its attempts die with it, because the server
  // will requeue them elsewhere and the same work must not run twice. The kernel's death signal
  // only reaches this process, not what the command forks, so this process stays behind as the
  // group's guardian (see GuardGroup) and the command runs in a child of it. (The signal fires
  // when the forking thread exits; the agent's threads live as long as the agent.)
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

  if (c.cgroup_procs != nullptr) {
    const int fd = ::open(c.cgroup_procs, O_WRONLY | O_CLOEXEC);
    if (fd < 0) ChildFail(err_fd, kStageCgroup, errno);
    char buf[24];
    int n = 0;
    long pid = ::getpid();
    char rev[24];
    do {
      rev[n++] = static_cast<char>('0' + pid % 10);
      pid /= 10;
    } while (pid > 0);
    for (int i = 0; i < n; ++i) buf[i] = rev[n - 1 - i];
    if (::write(fd, buf, static_cast<size_t>(n)) < 0) ChildFail(err_fd, kStageCgroup, errno);
    ::close(fd);
  }

  if (::dup2(null_fd, 0) < 0 || ::dup2(log_fd, 1) < 0 || ::dup2(log_fd, 2) < 0) {
    ChildFail(err_fd, kStageFds, errno);
  }
  CloseFrom(3, err_fd);

  if (c.working_dir != nullptr && ::chdir(c.working_dir) != 0) {
    ChildFail(err_fd, kStageChdir, errno);
  }

  if (c.die_with_parent) GuardGroup(err_fd);

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
  const std::string root = cgroup_root.empty() ? "/sys/fs/cgroup/aicloud" : cgroup_root;
  const std::string parent = fs::path(root).parent_path().string();
  auto off = [&](const std::string& why) { cgroup_status_ = "no cgroup limits: " + why; };
  std::error_code ec;
  if (!fs::exists(root + "/cgroup.controllers", ec)) {
    if (!fs::exists(parent + "/cgroup.controllers", ec)) {
      off(parent + " is not a cgroup v2 hierarchy (no cgroup.controllers: cgroup v1, or not "
          "mounted)");
    } else if (::mkdir(root.c_str(), 0755) != 0 && errno != EEXIST) {
      off("cannot create " + root + ": " + Errno(errno));
    }
  }
  if (cgroup_status_.empty()) {
    const std::string controllers = ReadSmallFile(root + "/cgroup.controllers");
    std::string missing;
    for (const char* c : {"cpu", "memory"}) {
      if (!HasWord(controllers, c)) missing += missing.empty() ? c : std::string(", ") + c;
    }
    if (!missing.empty()) {
      off(root + "/cgroup.controllers lacks " + missing +
          " (the parent must delegate them in its cgroup.subtree_control)");
    } else if (::access(root.c_str(), W_OK) != 0) {
      off("cannot write " + root + ": " + Errno(errno));
    } else if (int err = WriteControl(root + "/cgroup.subtree_control", "+cpu +memory");
               err != 0) {
      off("cannot enable cpu and memory in " + root + "/cgroup.subtree_control: " + Errno(err));
    } else {
      cgroup_root_ = root;
      cgroup_status_ = "cgroup v2 at " + root;
    }
  }
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
  for (auto& [id, a] : attempts_) {
    if (!a.cgroup_dir.empty()) ::rmdir(a.cgroup_dir.c_str());
  }
}

std::string Supervisor::cgroup_status() const { return cgroup_status_; }

void Supervisor::SetListener(std::function<void(const ProcStatus&)> listener) {
  std::lock_guard<std::mutex> lock(listener_mu_);
  listener_ = std::move(listener);
}

std::string Supervisor::SetUpCgroup(const ProcessSpec& spec, std::string* error) {
  if (cgroup_root_.empty()) return "";
  std::string leaf;
  for (char ch : spec.attempt_id) {
    const bool ok = std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_' ||
                    ch == '.';
    leaf += ok ? ch : '_';
  }
  if (leaf == "." || leaf == "..") leaf = "_" + leaf;
  const std::string dir = cgroup_root_ + "/" + leaf;
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    *error = "cgroup " + dir + ": " + Errno(errno);
    return "";
  }
  if (spec.cpu_millis > 0) {
    // cpu.max is "<quota> <period>" in microseconds: cpu_millis/1000 CPUs of a 100 ms period.
    const int64_t quota = std::max<int64_t>(1000, spec.cpu_millis * 100);
    if (int err = WriteControl(dir + "/cpu.max", std::to_string(quota) + " 100000"); err != 0) {
      *error = "cgroup " + dir + "/cpu.max: " + Errno(err);
      ::rmdir(dir.c_str());
      return "";
    }
  }
  if (spec.memory_bytes > 0) {
    if (int err = WriteControl(dir + "/memory.max", std::to_string(spec.memory_bytes)); err != 0) {
      *error = "cgroup " + dir + "/memory.max: " + Errno(err);
      ::rmdir(dir.c_str());
      return "";
    }
  }
  return dir;
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
    if (!a.cgroup_dir.empty() && ::rmdir(a.cgroup_dir.c_str()) == 0) a.cgroup_dir.clear();
    return record(std::move(a));
  };

  std::error_code ec;
  if (!spec.working_dir.empty()) {
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
  for (const char* name : {"PATH", "HOME", "LANG"}) {
    if (const char* v = std::getenv(name)) env[name] = v;
  }
  if (env.count("PATH") == 0) env["PATH"] = kDefaultPath;
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

  std::string cgroup_error;
  a.cgroup_dir = SetUpCgroup(spec, &cgroup_error);
  if (!cgroup_error.empty()) return fail(cgroup_error);
  const std::string cgroup_procs = a.cgroup_dir.empty() ? "" : a.cgroup_dir + "/cgroup.procs";

  const int log_fd = ::open(log_path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (log_fd < 0) return fail("log file " + log_path + ": " + Errno(errno));
  const int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null_fd < 0) {
    const int err = errno;
    ::close(log_fd);
    return fail("/dev/null: " + Errno(err));
  }
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {
    const int err = errno;
    ::close(log_fd);
    ::close(null_fd);
    return fail("pipe: " + Errno(err));
  }

  ChildArgs args{null_fd,
                 log_fd,
                 pipe_fds[1],
                 spec.working_dir.empty() ? nullptr : spec.working_dir.c_str(),
                 cgroup_procs.empty() ? nullptr : cgroup_procs.c_str(),
                 argv.data(),
                 envp.data(),
                 &candidates,
                 ::getpid(),
                 spec.die_with_starter};
  const pid_t pid = ::fork();
  if (pid == 0) ChildExec(args);
  const int fork_errno = errno;
  ::close(pipe_fds[1]);
  ::close(log_fd);
  ::close(null_fd);
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
    switch (child_error.stage) {
      case kStageCgroup: return fail("joining " + cgroup_procs + ": " + Errno(child_error.err));
      case kStageChdir:
        return fail("chdir " + spec.working_dir + ": " + Errno(child_error.err));
      case kStageExec: return fail(prog + ": " + Errno(child_error.err));
      case kStageFork: return fail("fork: " + Errno(child_error.err));
      default: return fail("setting up stdio: " + Errno(child_error.err));
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
  if (!it->second.cgroup_dir.empty()) ::rmdir(it->second.cgroup_dir.c_str());
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
  if (a.stop_requested) {
    s.state = ProcState::kKilled;
  } else if (WIFEXITED(wait_status) && s.exit_code == 0) {
    s.state = ProcState::kSucceeded;
  } else {
    s.state = ProcState::kFailed;
  }
  if (!a.cgroup_dir.empty()) {
    // Whatever escaped the process group dies with the cgroup; its CPU time counts too.
    WriteControl(a.cgroup_dir + "/cgroup.kill", "1");
    std::istringstream stat(ReadSmallFile(a.cgroup_dir + "/cpu.stat"));
    std::string key;
    int64_t value = 0;
    while (stat >> key >> value) {
      if (key == "usage_usec") s.cpu_seconds = std::max(s.cpu_seconds, value / 1e6);
    }
    if (::rmdir(a.cgroup_dir.c_str()) == 0) a.cgroup_dir.clear();
  }
  events->push_back(s);
}

void Supervisor::PollLocked(std::vector<ProcStatus>* events) {
  const auto now = Clock::now();
  for (auto& [id, a] : attempts_) {
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
