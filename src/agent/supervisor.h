// Supervisor: runs the processes of job attempts on this node and reports how they end.
//
// Each attempt is one process started with fork+exec in its own session (setsid), so its pid is
// also its process-group id and a signal to the group reaches everything it spawned. Its stdout
// and stderr go, interleaved, to one log file the supervisor opens (with O_APPEND) and hands
// over, so the process needs no access to the log's directory; stdin is /dev/null; every other
// descriptor is closed. Each attempt runs inside its own cgroup when the node has cgroups
// (cgroups.h: v2 or v1) and inside the sandbox its spec describes (sandbox.h: tenant uid,
// network namespace, no-new-privs, rlimits, clean environment). One reaper thread polls the children (waitpid WNOHANG every 5 ms),
// sends the SIGKILL that follows a Stop's SIGTERM once the grace period is over, and calls the
// listener.
//
//   Supervisor sup;                          // cgroup v2 or v1 limits when the node has them
//   sup.SetListener([](const ProcStatus& s) { Report(s); });   // running, then finished
//   ProcessSpec spec{.attempt_id = "train-1-a0",
//                    .argv = {"/bin/sh", "-c", "python train.py"},
//                    .env = {{"RANK", "0"}},
//                    .working_dir = "/var/lib/aicloud/attempts/train-1-a0",
//                    .log_path = "/var/lib/aicloud/logs/train-1-a0.log",
//                    .sandbox = {.uid = 200000, .isolate_network = true}};
//   Status s = sup.Start(spec);              // OK even when the program cannot be started:
//   std::optional<ProcStatus> st = sup.Get("train-1-a0");   // ...then st->state == kFailed
//   sup.Stop("train-1-a0");                  // SIGTERM now, SIGKILL after spec.term_grace
//   auto [bytes, next] = *ReadLog(spec.log_path, 0, 64 << 10);  // push logs incrementally
//
// Outcomes (ProcStatus::state / message):
//   exit code 0                      kSucceeded  "exited with code 0"
//   exit code N != 0                 kFailed     "exited with code 3"
//   killed by a signal, no Stop      kFailed     "killed by signal 11 (SIGSEGV)"
//   killed by the OOM killer         kFailed     "killed by signal 9 (SIGKILL): out of memory
//                                                 (limit 64 MiB)", oom_killed = true
//   ended after Stop was called      kKilled     "killed by signal 15 (SIGTERM) after Stop",
//                                                "killed by signal 9 after SIGTERM grace 2s",
//                                                "exited with code 0 after Stop"
//   could not be started             kFailed     "could not start: /nope: No such file or
//                                                 directory" (exit_code 127); under a sandbox
//                                                 uid, EACCES names the uid and the path
//                                                 component that blocks it
// When an attempt's main process ends, whatever is left of its process group is SIGKILLed (as a
// container runtime does when PID 1 exits); a descendant that called setsid itself escapes the
// group and is only caught by the cgroup (cgroup.kill in v2; in v1 every pid of cgroup.procs)
// when cgroups are in use.
//
// Thread-safe. The listener runs on the reaper thread, never under the supervisor's lock, so it
// may call Get/List/Stop/Forget (not SetListener, nor the destructor).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "agent/cgroups.h"
#include "agent/sandbox.h"
#include "core/status.h"

namespace aicloud::agent {

struct ProcessSpec {
  std::string attempt_id;                       // unique id of this run attempt (fencing token)
  // argv[0] without a '/' is looked up in PATH (the child's: spec.env's PATH if given). Use
  // {"/bin/sh", "-c", cmd} for a shell command.
  std::vector<std::string> argv;
  // Added to (and overriding) the minimal environment the child gets: PATH and LANG copied from
  // the agent (PATH defaults to /usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin),
  // HOME = working_dir (the agent's HOME when working_dir is "") and
  // AICLOUD_ATTEMPT_ID=<attempt_id>. Nothing else of the agent's environment reaches it.
  std::map<std::string, std::string> env;
  std::string working_dir;                      // created if missing; "" = the agent's cwd
  // false: working_dir must exist already (a directory a sandboxed job names is never made by
  // the agent, as root, for it).
  bool create_working_dir = true;
  std::string log_path;                         // stdout+stderr appended here; "" = /dev/null
                                                // (parent directories are created)
  int64_t cpu_millis = 0;                       // cgroup CPU quota when available (0 = no limit)
  int64_t memory_bytes = 0;                     // cgroup memory limit when available (0 = none)
  // Device files the attempt may not open (devices.deny lines, cgroups.h), where the node's
  // cgroups can enforce it.
  std::vector<std::string> deny_devices;
  std::chrono::milliseconds term_grace{10000};  // SIGTERM -> grace -> SIGKILL
  // Kill the attempt's whole process group, grandchildren included, when the process that called
  // Start dies (Linux PR_SET_PDEATHSIG on a guardian: the group leader forks the command, ignores
  // the stop signals meant for it, ends the way it ended, and SIGKILLs the group if the starter
  // dies). The agent sets it: an agent killed with -9 takes its attempts with it, since the
  // server requeues them elsewhere and the same attempt must not keep running (fencing). The
  // kernel signals the guardian when the *forking thread* exits, so Start must be called from a
  // thread that lives as long as the process; an exiting thread alone does not kill the work.
  bool die_with_starter = false;
  // Who the process runs as and what it may reach (sandbox.h). With a uid, the working dir must
  // be reachable by that uid (the caller creates and chowns it), and argv[0] must be executable
  // by it, except the agent's own executable (same device and inode as /proc/self/exe), which is
  // exec'd through a descriptor opened before privileges are dropped.
  SandboxSpec sandbox;
};

enum class ProcState { kRunning, kSucceeded, kFailed, kKilled };

// "Running", "Succeeded", "Failed", "Killed".
const char* ProcStateName(ProcState state);

struct ProcStatus {
  std::string attempt_id;
  ProcState state = ProcState::kRunning;
  int exit_code = -1;  // when it exited; 127 when it could not be started; -1 otherwise
  int signal = 0;      // the signal that ended it, 0 if it exited
  int64_t pid = 0;     // 0 if no process was created
  std::chrono::system_clock::time_point started, finished;  // finished: epoch while running
  double cpu_seconds = 0;  // user+system of the process and its reaped descendants (wait4),
                           // or of its cgroup when that is more
  bool oom_killed = false;  // the kernel's OOM killer killed a process of the attempt's cgroup
  std::string message;     // see the table above; "running" while running
};

class Supervisor {
 public:
  // `cgroup_root` "" detects the node's cgroups (DetectCgroups: v2, else v1, else none); a path
  // is used as a cgroup v2 root (OpenCgroupV2). Each attempt then gets a group named after its
  // attempt id with its cpu/memory limits. Without cgroups processes run without limits and
  // cgroup_status() says why.
  explicit Supervisor(std::string cgroup_root = "");
  // With the given backend; nullptr runs without limits, `why_none` saying why.
  Supervisor(std::unique_ptr<CgroupBackend> cgroups, std::string why_none);
  // Stops everything still running (SIGTERM, then SIGKILL after each attempt's term_grace),
  // waits for it to end and joins the reaper thread. The listener still sees those endings.
  ~Supervisor();
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  // Starts an attempt. Returns an error only for the caller's mistakes: INVALID_ARGUMENT (empty
  // attempt_id or argv), ALREADY_EXISTS (attempt_id known, running or finished and not yet
  // forgotten). Everything that goes wrong on the node (working directory or log file cannot be
  // created, program not found or not executable, cgroup cannot be joined, fork fails) returns
  // OK and records the attempt as kFailed with "could not start: <what>: <strerror>"; the
  // listener then sees only that finished status. When Start returns, the program has been
  // exec'd (or has failed to be): Get shows kRunning with its pid, or kFailed.
  Status Start(const ProcessSpec& spec);
  // Asynchronous: SIGTERM to the attempt's process group now, SIGKILL to it term_grace later if
  // it is still running. OK for an attempt that already finished (nothing to do) or is already
  // stopping; NOT_FOUND if unknown.
  Status Stop(const std::string& attempt_id);
  std::optional<ProcStatus> Get(const std::string& attempt_id) const;
  // Every known attempt, ordered by attempt_id.
  std::vector<ProcStatus> List() const;
  // Drops a finished attempt's record (its id may then be started again). No-op for a running
  // or unknown attempt.
  void Forget(const std::string& attempt_id);
  // Called on the reaper thread whenever an attempt changes state: once with kRunning after it
  // started, once with its final state. Events are delivered in order.
  void SetListener(std::function<void(const ProcStatus&)> listener);
  // "cgroup v2 at /sys/fs/cgroup/aicloud", "cgroup v1 at ... and ..." or
  // "no cgroup limits: <why>".
  std::string cgroup_status() const;

 private:
  struct Attempt {
    ProcStatus status;
    std::chrono::milliseconds term_grace{0};
    bool stop_requested = false;
    bool kill_sent = false;
    std::chrono::steady_clock::time_point kill_at;
    int64_t memory_bytes = 0;
    std::unique_ptr<AttemptCgroup> cgroup;  // null when the attempt has none (or it was removed)
  };
  void StartReaper();
  void ReaperLoop();
  // REQUIRES: mu_ held. Polls the running attempts once; returns the events to deliver.
  void PollLocked(std::vector<ProcStatus>* events);
  void Finish(Attempt& a, int wait_status, double cpu_seconds, std::vector<ProcStatus>* events);
  void StopLocked(Attempt& a);

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Attempt> attempts_;
  std::vector<int64_t> orphans_;  // pids of children that failed before exec, to reap
  std::vector<ProcStatus> pending_events_;
  bool shutting_down_ = false;

  std::mutex listener_mu_;  // held while the listener runs
  std::function<void(const ProcStatus&)> listener_;

  std::unique_ptr<CgroupBackend> cgroups_;  // null when limits are off
  std::string cgroup_status_;
  std::thread reaper_;
};

// Reads at most `max_bytes` of the file at `path` from byte `offset` and returns them with the
// offset to pass next time (offset + bytes read); at the end of the file it returns "" and the
// same offset. NOT_FOUND when the file does not exist; INVALID_ARGUMENT for a negative offset;
// OUT_OF_RANGE when offset is past the end (the file was truncated or replaced: start over at 0).
StatusOr<std::pair<std::string, int64_t>> ReadLog(const std::string& path, int64_t offset,
                                                  size_t max_bytes);

}  // namespace aicloud::agent
