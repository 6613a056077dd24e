#include "agent/supervisor.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "agent/agent_test_util.h"

namespace aicloud::agent {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using SteadyClock = std::chrono::steady_clock;

using testing::Slurp;
using testing::TempDir;
using testing::WaitDone;
using testing::WaitFor;

ProcessSpec Shell(const std::string& id, const std::string& cmd, const TempDir& dir) {
  ProcessSpec spec;
  spec.attempt_id = id;
  spec.argv = {"/bin/sh", "-c", cmd};
  spec.log_path = dir / (id + ".log");
  return spec;
}

// Gone, or a zombie nobody has reaped yet (an orphan re-parented to a PID 1 that does not reap).
bool ProcessDead(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return true;
  std::string line;
  std::getline(stat, line);
  const size_t paren = line.rfind(')');
  if (paren == std::string::npos || paren + 2 >= line.size()) return true;
  const char state = line[paren + 2];
  return state == 'Z' || state == 'X';
}

double Seconds(SteadyClock::duration d) { return std::chrono::duration<double>(d).count(); }

TEST(Supervisor, ExitStatusTable) {
  struct Case {
    std::string cmd;
    ProcState state;
    int exit_code;
    int signal;
    std::string message;
    std::string log;
  };
  const Case cases[] = {
      {"exit 0", ProcState::kSucceeded, 0, 0, "exited with code 0", ""},
      {"echo hi; echo err >&2; exit 3", ProcState::kFailed, 3, 0, "exited with code 3",
       "hi\nerr\n"},
      {"echo out; exit 1", ProcState::kFailed, 1, 0, "exited with code 1", "out\n"},
      {"kill -SEGV $$", ProcState::kFailed, -1, SIGSEGV, "killed by signal 11 (SIGSEGV)", ""},
  };
  TempDir dir;
  Supervisor sup;
  int n = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.cmd);
    const std::string id = "exit-" + std::to_string(n++);
    ASSERT_TRUE(sup.Start(Shell(id, c.cmd, dir)).ok());
    ProcStatus s = WaitDone(sup, id);
    EXPECT_EQ(s.state, c.state);
    EXPECT_EQ(s.exit_code, c.exit_code);
    EXPECT_EQ(s.signal, c.signal);
    EXPECT_EQ(s.message, c.message);
    EXPECT_GT(s.pid, 0);
    EXPECT_GE(s.finished, s.started);
    EXPECT_EQ(Slurp(dir / (id + ".log")), c.log);
  }
}

TEST(Supervisor, StartReturnsWithTheProcessRunning) {
  TempDir dir;
  Supervisor sup;
  const auto t0 = SteadyClock::now();
  ASSERT_TRUE(sup.Start(Shell("run", "sleep 100", dir)).ok());
  std::optional<ProcStatus> s = sup.Get("run");
  EXPECT_LT(Seconds(SteadyClock::now() - t0), 0.5);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->state, ProcState::kRunning);
  EXPECT_EQ(s->message, "running");
  EXPECT_GT(s->pid, 0);
  EXPECT_EQ(::kill(static_cast<pid_t>(s->pid), 0), 0);
}

TEST(Supervisor, EnvironmentAndWorkingDirectory) {
  TempDir dir;
  ::setenv("AICLOUD_TEST_LEAK", "leaked", 1);
  Supervisor sup;
  ProcessSpec spec = Shell("env-1",
                           "pwd; echo \"$AICLOUD_X\"; echo \"$AICLOUD_ATTEMPT_ID\"; "
                           "echo \"${AICLOUD_TEST_LEAK-unset}\"; test -n \"$PATH\" && echo path; "
                           "echo \"$HOME\"",
                           dir);
  spec.working_dir = dir / "work/sub";  // does not exist yet
  spec.env = {{"AICLOUD_X", "hello world"}};
  ASSERT_TRUE(sup.Start(spec).ok());
  ProcStatus s = WaitDone(sup, "env-1");
  EXPECT_EQ(s.state, ProcState::kSucceeded) << s.message;
  EXPECT_EQ(Slurp(spec.log_path),
            dir / "work/sub" + "\nhello world\nenv-1\nunset\npath\n" + dir / "work/sub" + "\n");
  ::unsetenv("AICLOUD_TEST_LEAK");
}

TEST(Supervisor, ResolvesProgramThroughPath) {
  TempDir dir;
  Supervisor sup;
  ProcessSpec spec;
  spec.attempt_id = "path-1";
  spec.argv = {"echo", "found", "it"};
  spec.log_path = dir / "logs/deeper/path.log";  // parent directories are created
  ASSERT_TRUE(sup.Start(spec).ok());
  EXPECT_EQ(WaitDone(sup, "path-1").state, ProcState::kSucceeded);
  EXPECT_EQ(Slurp(spec.log_path), "found it\n");
}

TEST(Supervisor, ProgramThatCannotStartFailsWithItsName) {
  TempDir dir;
  const std::string not_exec = dir / "not-executable.sh";
  std::ofstream(not_exec) << "#!/bin/sh\necho no\n";
  ::chmod(not_exec.c_str(), 0644);
  struct Case {
    std::vector<std::string> argv;
    std::string message;
  };
  const Case cases[] = {
      {{"/nope/prog", "x"}, "could not start: /nope/prog: No such file or directory"},
      {{"aicloud-no-such-program"},
       "could not start: aicloud-no-such-program: No such file or directory"},
      {{not_exec}, "could not start: " + not_exec + ": Permission denied"},
  };
  Supervisor sup;
  std::mutex mu;
  std::vector<ProcStatus> events;
  sup.SetListener([&](const ProcStatus& s) {
    std::lock_guard<std::mutex> lock(mu);
    events.push_back(s);
  });
  int n = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.argv[0]);
    ProcessSpec spec;
    spec.attempt_id = "bad-" + std::to_string(n++);
    spec.argv = c.argv;
    spec.log_path = dir / (spec.attempt_id + ".log");
    ASSERT_TRUE(sup.Start(spec).ok());  // node-side failures are recorded, not returned
    std::optional<ProcStatus> s = sup.Get(spec.attempt_id);  // known at once
    ASSERT_TRUE(s.has_value());
    EXPECT_EQ(s->state, ProcState::kFailed);
    EXPECT_EQ(s->exit_code, 127);
    EXPECT_EQ(s->message, c.message);
  }
  ASSERT_TRUE(WaitFor([&] {
    std::lock_guard<std::mutex> lock(mu);
    return events.size() == 3;
  }));
  std::lock_guard<std::mutex> lock(mu);
  for (const ProcStatus& e : events) EXPECT_EQ(e.state, ProcState::kFailed);  // no kRunning
}

TEST(Supervisor, UncreatableWorkingDirectoryFailsTheAttempt) {
  TempDir dir;
  std::ofstream(dir / "file") << "x";
  Supervisor sup;
  ProcessSpec spec = Shell("wd-1", "true", dir);
  spec.working_dir = dir / "file/sub";
  ASSERT_TRUE(sup.Start(spec).ok());
  ProcStatus s = *sup.Get("wd-1");
  EXPECT_EQ(s.state, ProcState::kFailed);
  EXPECT_NE(s.message.find("could not start: working directory " + spec.working_dir),
            std::string::npos)
      << s.message;
}

TEST(Supervisor, StopEndsAProcessWithSigterm) {
  TempDir dir;
  Supervisor sup;
  ASSERT_TRUE(sup.Start(Shell("stop-1", "sleep 100", dir)).ok());
  const auto t0 = SteadyClock::now();
  ASSERT_TRUE(sup.Stop("stop-1").ok());
  ProcStatus s = WaitDone(sup, "stop-1");
  EXPECT_LT(Seconds(SteadyClock::now() - t0), 0.5);  // well before the 10 s grace
  EXPECT_EQ(s.state, ProcState::kKilled);
  EXPECT_EQ(s.signal, SIGTERM);
  EXPECT_EQ(s.message, "killed by signal 15 (SIGTERM) after Stop");
  EXPECT_TRUE(sup.Stop("stop-1").ok());  // already finished: nothing to do
}

TEST(Supervisor, StopEscalatesToSigkillAfterGrace) {
  TempDir dir;
  Supervisor sup;
  ProcessSpec spec = Shell("trap-1", "trap '' TERM; echo ready; sleep 100", dir);
  spec.term_grace = milliseconds(200);
  ASSERT_TRUE(sup.Start(spec).ok());
  ASSERT_TRUE(WaitFor([&] { return Slurp(spec.log_path) == "ready\n"; }));
  const auto t0 = SteadyClock::now();
  ASSERT_TRUE(sup.Stop("trap-1").ok());
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_EQ(sup.Get("trap-1")->state, ProcState::kRunning);  // TERM is ignored
  ProcStatus s = WaitDone(sup, "trap-1");
  const double elapsed = Seconds(SteadyClock::now() - t0);
  EXPECT_GE(elapsed, 0.19);
  EXPECT_LT(elapsed, 0.8);
  EXPECT_EQ(s.state, ProcState::kKilled);
  EXPECT_EQ(s.signal, SIGKILL);
  EXPECT_EQ(s.message, "killed by signal 9 after SIGTERM grace 200ms");
}

TEST(Supervisor, ProcessGroupDiesWithTheAttempt) {
  struct Case {
    std::string name;
    std::string cmd;
    bool stop;
  };
  const Case cases[] = {
      {"stopped", "sleep 100 & echo $! > PIDFILE; wait", true},
      {"exited", "sleep 100 & echo $! > PIDFILE; sleep 0.05; exit 0", false},
  };
  TempDir dir;
  Supervisor sup;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string pidfile = dir / (c.name + ".pid");
    std::string cmd = c.cmd;
    cmd.replace(cmd.find("PIDFILE"), 7, pidfile);
    ASSERT_TRUE(sup.Start(Shell(c.name, cmd, dir)).ok());
    pid_t grandchild = 0;
    ASSERT_TRUE(WaitFor([&] {
      std::ifstream in(pidfile);
      return static_cast<bool>(in >> grandchild) && grandchild > 0;
    }));
    EXPECT_FALSE(ProcessDead(grandchild));
    if (c.stop) {
      ASSERT_TRUE(sup.Stop(c.name).ok());
    }
    WaitDone(sup, c.name);
    EXPECT_TRUE(WaitFor([&] { return ProcessDead(grandchild); }, milliseconds(1000)))
        << "grandchild " << grandchild << " survived";
  }
}

// Attempts that must die with their agent run under a guardian process (the group leader);
// the agent sees the command's own exit status, stops still reach the command first.
TEST(Supervisor, GuardedAttemptsEndLikeTheirCommand) {
  struct Case {
    std::string cmd;
    bool stop;
    ProcState state;
    int exit_code;
    int signal;
  };
  const Case cases[] = {
      {"exit 0", false, ProcState::kSucceeded, 0, 0},
      {"echo hi; exit 3", false, ProcState::kFailed, 3, 0},
      {"kill -SEGV $$", false, ProcState::kFailed, -1, SIGSEGV},
      {"sleep 100", true, ProcState::kKilled, -1, SIGTERM},
      {"trap 'exit 7' TERM; echo ready; while :; do sleep 0.01; done", true, ProcState::kKilled,
       7, 0},
      {"trap '' TERM; echo ready; sleep 100", true, ProcState::kKilled, -1, SIGKILL},
      // A signal sent to the group while the agent lives is not the agent's death.
      {"trap '' USR2; kill -USR2 0; sleep 0.05; exit 4", false, ProcState::kFailed, 4, 0},
  };
  TempDir dir;
  Supervisor sup;
  int n = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.cmd);
    const std::string id = "guarded-" + std::to_string(n++);
    ProcessSpec spec = Shell(id, c.cmd, dir);
    spec.die_with_starter = true;
    spec.term_grace = milliseconds(200);
    ASSERT_TRUE(sup.Start(spec).ok());
    if (c.stop) {
      if (c.cmd.find("ready") != std::string::npos) {
        ASSERT_TRUE(WaitFor([&] { return Slurp(spec.log_path).starts_with("ready"); }));
      }
      ASSERT_TRUE(sup.Stop(id).ok());
    }
    ProcStatus s = WaitDone(sup, id);
    EXPECT_EQ(s.state, c.state) << s.message;
    EXPECT_EQ(s.exit_code, c.exit_code) << s.message;
    EXPECT_EQ(s.signal, c.signal) << s.message;
  }
  // Exec failures are known at once and name the program, as without a guardian.
  ProcessSpec bad = Shell("guarded-missing", "", dir);
  bad.argv = {"/nope/prog"};
  bad.die_with_starter = true;
  ASSERT_TRUE(sup.Start(bad).ok());
  std::optional<ProcStatus> s = sup.Get("guarded-missing");
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->state, ProcState::kFailed);
  EXPECT_EQ(s->message, "could not start: /nope/prog: No such file or directory");
}

// The agent killed with -9: the guardian kills the attempt's whole group, so nothing the command
// forked keeps running while the server reschedules the work elsewhere.
TEST(Supervisor, GuardedAttemptDiesWithItsAgentGrandchildrenIncluded) {
  TempDir dir;
  const std::string pidfile = dir / "grandchild.pid";
  const std::string leaderfile = dir / "leader.pid";
  const pid_t agent = ::fork();
  ASSERT_GE(agent, 0);
  if (agent == 0) {
    // The stand-in agent: starts the attempt, records the group leader, waits to be killed.
    Supervisor sup;
    ProcessSpec spec = Shell("orphan", "sleep 100 & echo $! > " + pidfile + "; wait", dir);
    spec.die_with_starter = true;
    if (!sup.Start(spec).ok()) ::_exit(1);
    std::ofstream(leaderfile) << sup.Get("orphan")->pid << "\n";
    for (;;) ::pause();
  }
  pid_t grandchild = 0;
  pid_t leader = 0;
  ASSERT_TRUE(WaitFor([&] {
    std::ifstream a(pidfile), b(leaderfile);
    return static_cast<bool>(a >> grandchild) && grandchild > 0 &&
           static_cast<bool>(b >> leader) && leader > 0;
  }));
  EXPECT_FALSE(ProcessDead(grandchild));
  ASSERT_EQ(::kill(agent, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(agent, &status, 0), agent);
  EXPECT_TRUE(WaitFor([&] { return ProcessDead(grandchild); }, milliseconds(2000)))
      << "grandchild " << grandchild << " survived its agent";
  EXPECT_TRUE(WaitFor([&] { return ProcessDead(leader); }, milliseconds(2000)))
      << "group leader " << leader << " survived its agent";
}

TEST(Supervisor, CallerMistakesAreErrors) {
  TempDir dir;
  Supervisor sup;
  ASSERT_TRUE(sup.Start(Shell("dup", "sleep 100", dir)).ok());
  EXPECT_EQ(sup.Start(Shell("dup", "true", dir)).code(), StatusCode::kAlreadyExists);
  ProcessSpec empty_argv;
  empty_argv.attempt_id = "x";
  EXPECT_EQ(sup.Start(empty_argv).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(sup.Start(Shell("", "true", dir)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(sup.Stop("unknown").code(), StatusCode::kNotFound);
  EXPECT_FALSE(sup.Get("unknown").has_value());
}

TEST(Supervisor, ForgetDropsOnlyFinishedAttempts) {
  TempDir dir;
  Supervisor sup;
  ASSERT_TRUE(sup.Start(Shell("f-run", "sleep 100", dir)).ok());
  ASSERT_TRUE(sup.Start(Shell("f-done", "exit 0", dir)).ok());
  WaitDone(sup, "f-done");
  sup.Forget("f-run");
  sup.Forget("f-done");
  sup.Forget("never-existed");
  EXPECT_TRUE(sup.Get("f-run").has_value());
  EXPECT_FALSE(sup.Get("f-done").has_value());
  ASSERT_TRUE(sup.Start(Shell("f-done", "exit 4", dir)).ok());  // id reusable after Forget
  EXPECT_EQ(WaitDone(sup, "f-done").exit_code, 4);
  std::vector<ProcStatus> all = sup.List();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].attempt_id, "f-done");
  EXPECT_EQ(all[1].attempt_id, "f-run");
}

TEST(Supervisor, ListenerSeesRunningThenFinished) {
  TempDir dir;
  Supervisor sup;
  std::mutex mu;
  std::vector<std::pair<std::string, ProcState>> events;
  sup.SetListener([&](const ProcStatus& s) {
    std::lock_guard<std::mutex> lock(mu);
    events.emplace_back(s.attempt_id, s.state);
    (void)sup.Get(s.attempt_id);  // the listener may call back into the supervisor
  });
  ASSERT_TRUE(sup.Start(Shell("l-1", "exit 0", dir)).ok());
  ASSERT_TRUE(sup.Start(Shell("l-2", "exit 2", dir)).ok());
  ASSERT_TRUE(WaitFor([&] {
    std::lock_guard<std::mutex> lock(mu);
    return events.size() == 4;
  }));
  std::lock_guard<std::mutex> lock(mu);
  auto position = [&](const std::string& id, ProcState st) {
    for (size_t i = 0; i < events.size(); ++i) {
      if (events[i] == std::make_pair(id, st)) return static_cast<int>(i);
    }
    return -1;
  };
  EXPECT_GE(position("l-1", ProcState::kRunning), 0);
  EXPECT_GT(position("l-1", ProcState::kSucceeded), position("l-1", ProcState::kRunning));
  EXPECT_GE(position("l-2", ProcState::kRunning), 0);
  EXPECT_GT(position("l-2", ProcState::kFailed), position("l-2", ProcState::kRunning));
}

TEST(Supervisor, ConcurrentShortProcessesAreAllReaped) {
  TempDir dir;
  Supervisor sup;
  constexpr int kCount = 20;
  std::vector<std::thread> threads;
  for (int i = 0; i < kCount; ++i) {
    threads.emplace_back([&, i] {
      const std::string id = "c-" + std::to_string(i);
      EXPECT_TRUE(sup.Start(Shell(id, "echo " + id + "; exit " + std::to_string(i % 4), dir)).ok());
    });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < kCount; ++i) {
    const std::string id = "c-" + std::to_string(i);
    ProcStatus s = WaitDone(sup, id);
    EXPECT_EQ(s.exit_code, i % 4) << id;
    EXPECT_EQ(s.state, i % 4 == 0 ? ProcState::kSucceeded : ProcState::kFailed) << id;
    EXPECT_EQ(Slurp(dir / (id + ".log")), id + "\n");
  }
  EXPECT_EQ(sup.List().size(), static_cast<size_t>(kCount));
}

TEST(Supervisor, ReportsCpuTime) {
  TempDir dir;
  Supervisor sup;
  ASSERT_TRUE(sup.Start(Shell("cpu-1",
                              "i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done", dir))
                  .ok());
  ProcStatus s = WaitDone(sup, "cpu-1", milliseconds(8000));
  EXPECT_EQ(s.state, ProcState::kSucceeded);
  EXPECT_GT(s.cpu_seconds, 0.02);
  EXPECT_LT(s.cpu_seconds, 30.0);
}

TEST(Supervisor, DestructorKillsWhatIsStillRunning) {
  TempDir dir;
  pid_t pid = 0;
  std::vector<ProcState> final_states;
  const auto t0 = SteadyClock::now();
  {
    Supervisor sup;
    sup.SetListener([&](const ProcStatus& s) {
      if (s.state != ProcState::kRunning) final_states.push_back(s.state);
    });
    ASSERT_TRUE(sup.Start(Shell("d-1", "sleep 100", dir)).ok());
    pid = static_cast<pid_t>(sup.Get("d-1")->pid);
  }
  EXPECT_LT(Seconds(SteadyClock::now() - t0), 2.0);
  EXPECT_TRUE(ProcessDead(pid));
  EXPECT_EQ(final_states, std::vector<ProcState>{ProcState::kKilled});
}

TEST(Supervisor, CgroupStatusExplainsItself) {
  Supervisor sup;
  const std::string status = sup.cgroup_status();
  EXPECT_TRUE(status.rfind("cgroup v2 at ", 0) == 0 || status.rfind("cgroup v1 at ", 0) == 0 ||
              status.rfind("no cgroup limits: ", 0) == 0)
      << status;

  TempDir dir;
  Supervisor no_root(dir / "no/such/parent/aicloud");
  EXPECT_EQ(no_root.cgroup_status().rfind("no cgroup limits: ", 0), 0u)
      << no_root.cgroup_status();
  // Limits requested without cgroups: the process still runs.
  ProcessSpec spec = Shell("limited", "exit 0", dir);
  spec.cpu_millis = 500;
  spec.memory_bytes = 64 << 20;
  ASSERT_TRUE(no_root.Start(spec).ok());
  EXPECT_EQ(WaitDone(no_root, "limited").state, ProcState::kSucceeded);
}

// ---- the sandbox (root only: these run as root on the project's machines) ---------------------

constexpr uint32_t kTenantUid = 200123;

// A temp dir the sandbox uid can pass through, with a private working dir for it.
struct SandboxDir {
  SandboxDir() {
    ::chmod(dir.path().c_str(), 0711);
    EXPECT_TRUE(MakePrivateDir(work(), kTenantUid).ok());
  }
  std::string work() const { return dir / "work"; }
  TempDir dir;
};

ProcessSpec Sandboxed(const std::string& id, const std::string& cmd, const SandboxDir& sd) {
  ProcessSpec spec = Shell(id, cmd, sd.dir);
  spec.working_dir = sd.work();
  spec.sandbox.uid = kTenantUid;
  return spec;
}

TEST(SupervisorSandbox, RunsAsTheTenantUidWithNoNewPrivsAndACleanEnvironment) {
  ASSERT_EQ(::geteuid(), 0u) << "the sandbox tests need root";
  SandboxDir sd;
  ::setenv("AICLOUD_TEST_SECRET", "hunter2", 1);
  Supervisor sup;
  ProcessSpec spec = Sandboxed(
      "sb-id",
      "id -u; id -g; id -G; grep -E '^(NoNewPrivs|CapEff)' /proc/self/status; ulimit -c; "
      "echo \"home=$HOME\"; env | grep -c SECRET; touch \"$HOME/mine\" && echo wrote",
      sd);
  spec.env = {{"FROM_SPEC", "1"}};
  ASSERT_TRUE(sup.Start(spec).ok());
  ProcStatus s = WaitDone(sup, "sb-id");
  ::unsetenv("AICLOUD_TEST_SECRET");
  EXPECT_EQ(s.state, ProcState::kSucceeded) << s.message;
  EXPECT_EQ(Slurp(spec.log_path), "200123\n200123\n200123\nCapEff:\t0000000000000000\n"
                                  "NoNewPrivs:\t1\n0\nhome=" + sd.work() + "\n0\nwrote\n");
  struct stat st {};
  ASSERT_EQ(::stat((sd.work() + "/mine").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, kTenantUid);
}

TEST(SupervisorSandbox, TheTenantUidOwnsWhatItWritesAndCannotReadRootsPrivateFiles) {
  SandboxDir sd;
  const std::string secret = sd.dir / "root-only";
  std::ofstream(secret) << "key\n";
  ::chmod(secret.c_str(), 0600);
  Supervisor sup;
  ProcessSpec spec = Sandboxed(
      "sb-own", "echo hi > \"$HOME/out\" && stat -c %u out; cat " + secret + " || echo denied", sd);
  ASSERT_TRUE(sup.Start(spec).ok());
  ProcStatus s = WaitDone(sup, "sb-own");
  EXPECT_EQ(s.state, ProcState::kSucceeded) << s.message;
  const std::string log = Slurp(spec.log_path);
  EXPECT_NE(log.find("200123\n"), std::string::npos) << log;
  EXPECT_NE(log.find("Permission denied"), std::string::npos) << log;
  EXPECT_NE(log.find("denied\n"), std::string::npos) << log;
  EXPECT_EQ(log.find("key"), std::string::npos) << log;
}

TEST(SupervisorSandbox, EaccesNamesTheUidAndTheBlockingDirectory) {
  SandboxDir sd;
  const std::string locked = sd.dir / "locked";
  ASSERT_EQ(::mkdir(locked.c_str(), 0700), 0);
  ASSERT_TRUE(MakePrivateDir(locked + "/inner", kTenantUid).ok());
  Supervisor sup;
  ProcessSpec spec = Sandboxed("sb-chdir", "true", sd);
  spec.working_dir = locked + "/inner";
  ASSERT_TRUE(sup.Start(spec).ok());
  ProcStatus s = WaitDone(sup, "sb-chdir");
  EXPECT_EQ(s.state, ProcState::kFailed);
  EXPECT_EQ(s.message, "could not start: chdir " + locked + "/inner: Permission denied (sandbox "
                       "uid 200123 is blocked by " + locked + " (mode 0700, owner 0))");

  // A program inside a directory the uid cannot search.
  ASSERT_EQ(::symlink("/bin/true", (locked + "/prog").c_str()), 0);
  ProcessSpec exec = Sandboxed("sb-exec", "", sd);
  exec.argv = {locked + "/prog"};
  ASSERT_TRUE(sup.Start(exec).ok());
  s = WaitDone(sup, "sb-exec");
  EXPECT_EQ(s.message, "could not start: " + locked + "/prog: Permission denied (sandbox uid "
                       "200123 is blocked by " + locked + " (mode 0700, owner 0))");
}

TEST(SupervisorSandbox, TheAgentsOwnBinaryStartsEvenWhereTheUidCannotReachIt) {
  SandboxDir sd;
  const std::string locked = sd.dir / "install";
  ASSERT_EQ(::mkdir(locked.c_str(), 0700), 0);
  char self[4096] = {0};
  ASSERT_GT(::readlink("/proc/self/exe", self, sizeof self - 1), 0);
  // Same inode as /proc/self/exe, reached through a directory the uid cannot search.
  ASSERT_EQ(::symlink(self, (locked + "/aicloud").c_str()), 0);
  struct stat st {};
  ASSERT_EQ(::stat(self, &st), 0);
  ASSERT_TRUE(st.st_mode & S_IXOTH) << self << " must be executable by others";
  Supervisor sup;
  ProcessSpec spec = Sandboxed("sb-self", "", sd);
  spec.argv = {locked + "/aicloud", "--gtest_list_tests", "--gtest_filter=SupervisorSandbox.*"};
  ASSERT_TRUE(sup.Start(spec).ok());
  ProcStatus s = WaitDone(sup, "sb-self", milliseconds(10000));
  EXPECT_EQ(s.state, ProcState::kSucceeded) << s.message << "\n" << Slurp(spec.log_path);
  EXPECT_NE(Slurp(spec.log_path).find("TheAgentsOwnBinaryStarts"), std::string::npos);
}

// A TCP listener on the host's 127.0.0.1; returns its port.
class HostListener {
 public:
  HostListener() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    EXPECT_EQ(::listen(fd_, 16), 0);
    socklen_t len = sizeof addr;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
  }
  ~HostListener() { ::close(fd_); }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

TEST(SupervisorSandbox, NetworkIsolationLeavesOnlyLoopback) {
  SandboxDir sd;
  HostListener host;
  Supervisor sup;
  // bash's /dev/tcp connects; a port nobody listens on shows whether lo is up ("refused") or
  // down ("unreachable").
  const std::string connect =
      "bash -c 'exec 3<>/dev/tcp/127.0.0.1/" + std::to_string(host.port()) +
      " && echo connected'; bash -c 'exec 3<>/dev/tcp/127.0.0.1/1' 2>&1 | grep -o refused";
  ProcessSpec open = Sandboxed("net-open", connect, sd);
  ProcessSpec isolated = Sandboxed("net-isolated", connect, sd);
  isolated.sandbox.isolate_network = true;
  ASSERT_TRUE(sup.Start(open).ok());
  ASSERT_TRUE(sup.Start(isolated).ok());
  WaitDone(sup, "net-open");
  WaitDone(sup, "net-isolated");
  EXPECT_NE(Slurp(open.log_path).find("connected\n"), std::string::npos) << Slurp(open.log_path);
  const std::string log = Slurp(isolated.log_path);
  EXPECT_EQ(log.find("connected"), std::string::npos) << log;
  EXPECT_NE(log.find("Connection refused"), std::string::npos) << log;
  EXPECT_NE(log.find("refused\n"), std::string::npos) << "loopback is not up: " << log;
}

TEST(SupervisorSandbox, GuardedSandboxedAttemptStillDiesWithItsAgent) {
  // The kernel clears the parent-death signal at setuid; it must be set after it.
  SandboxDir sd;
  const std::string leaderfile = sd.dir / "leader.pid";
  const std::string log = sd.dir / "orphan.log";
  const pid_t agent = ::fork();
  ASSERT_GE(agent, 0);
  if (agent == 0) {
    Supervisor sup;
    ProcessSpec spec = Sandboxed("orphan", "sleep 100 & echo $!; wait", sd);
    spec.die_with_starter = true;
    if (!sup.Start(spec).ok()) ::_exit(1);
    std::ofstream(leaderfile) << sup.Get("orphan")->pid << "\n";
    for (;;) ::pause();
  }
  pid_t grandchild = 0, leader = 0;
  ASSERT_TRUE(WaitFor([&] {
    std::ifstream a(log), b(leaderfile);
    return static_cast<bool>(a >> grandchild) && grandchild > 0 &&
           static_cast<bool>(b >> leader) && leader > 0;
  }));
  EXPECT_FALSE(ProcessDead(grandchild));
  ASSERT_EQ(::kill(agent, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(agent, &status, 0), agent);
  EXPECT_TRUE(WaitFor([&] { return ProcessDead(grandchild); }, milliseconds(2000)))
      << "sandboxed grandchild " << grandchild << " survived its agent";
  EXPECT_TRUE(WaitFor([&] { return ProcessDead(leader); }, milliseconds(2000)));
}

TEST(ReadLog, IncrementalReads) {
  TempDir dir;
  const std::string path = dir / "log";
  std::ofstream(path) << "hello world\n";
  StatusOr<std::pair<std::string, int64_t>> r = ReadLog(path, 0, 5);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->first, "hello");
  EXPECT_EQ(r->second, 5);
  r = ReadLog(path, r->second, 100);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->first, " world\n");
  EXPECT_EQ(r->second, 12);
  r = ReadLog(path, 12, 100);  // at the end: nothing new
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->first, "");
  EXPECT_EQ(r->second, 12);
  std::ofstream(path, std::ios::app) << "more\n";
  r = ReadLog(path, 12, 100);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->first, "more\n");
  EXPECT_EQ(r->second, 17);

  EXPECT_EQ(ReadLog(path, 18, 10).status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(ReadLog(path, -1, 10).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadLog(dir / "missing", 0, 10).status().code(), StatusCode::kNotFound);
}

TEST(ReadLog, FollowsARunningProcess) {
  TempDir dir;
  Supervisor sup;
  ProcessSpec spec = Shell("follow", "echo one; sleep 0.1; echo two", dir);
  ASSERT_TRUE(sup.Start(spec).ok());
  std::string seen;
  int64_t offset = 0;
  ASSERT_TRUE(WaitFor([&] {
    StatusOr<std::pair<std::string, int64_t>> r = ReadLog(spec.log_path, offset, 3);
    if (r.ok()) {
      seen += r->first;
      offset = r->second;
    }
    return seen == "one\ntwo\n";
  })) << seen;
}

}  // namespace
}  // namespace aicloud::agent
