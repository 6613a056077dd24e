// The cgroup backends: v2 against a fake cgroupfs tree in a temp dir; v1 for real (these tests
// run as root on the project's cgroup v1 machines; on a cgroup v2 host the v1 ones say so).
#include "agent/cgroups.h"

#include <gtest/gtest.h>
#include <cstring>
#include <sys/sysmacros.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include "agent/agent_test_util.h"
#include "agent/supervisor.h"

namespace aicloud::agent {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using SteadyClock = std::chrono::steady_clock;

using testing::Slurp;
using testing::WaitDone;
using testing::WaitFor;

// A cgroup-like temp tree.
class TempDir : public testing::TempDir {
 public:
  TempDir() : testing::TempDir("cgroups_test") {}
};

void Put(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

// A directory shaped like a cgroup v2 root. (The kernel makes a group's files on mkdir; in this
// tree the control files are plain files the backend writes and the test reads.)
struct FakeV2 {
  FakeV2() {
    Put(tmp / "cgroup.controllers", "cpuset cpu io memory pids\n");
    Put(tmp / "cgroup.subtree_control", "");
  }
  TempDir tmp;
};

TEST(CgroupV2, WritesLimitsJoinsAndReportsOomFromMemoryEvents) {
  FakeV2 fake;
  // Another supervisor's group of the same name is not shared (its cleanup would kill ours).
  fs::create_directories(fake.tmp / "oom-1");
  StatusOr<std::unique_ptr<CgroupBackend>> v2 = OpenCgroupV2(fake.tmp.path());
  ASSERT_TRUE(v2.ok()) << v2.status();
  EXPECT_EQ(Slurp(fake.tmp / "cgroup.subtree_control"), "+cpu +memory");
  Supervisor sup(std::move(*v2), "");
  EXPECT_EQ(sup.cgroup_status().rfind("cgroup v2 at ", 0), 0u) << sup.cgroup_status();

  const std::string go = fake.tmp / "go";
  ProcessSpec spec;
  spec.attempt_id = "oom-1";
  spec.argv = {"/bin/sh", "-c", "while [ ! -e " + go + " ]; do sleep 0.01; done; kill -9 $$"};
  spec.cpu_millis = 200;
  spec.memory_bytes = int64_t{64} << 20;
  ASSERT_TRUE(sup.Start(spec).ok());
  const std::string group = fake.tmp / "oom-1.1";
  EXPECT_TRUE(fs::is_empty(fake.tmp / "oom-1"));
  EXPECT_EQ(Slurp(group + "/cpu.max"), "20000 100000");
  EXPECT_EQ(Slurp(group + "/memory.max"), "67108864");
  EXPECT_EQ(Slurp(group + "/cgroup.procs"), std::to_string(sup.Get("oom-1")->pid));

  // The kernel's OOM killer strikes: memory.events' oom_kill goes up, the process dies of SIGKILL.
  Put(group + "/cpu.stat", "usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n");
  Put(group + "/memory.events", "low 0\nhigh 0\nmax 9\noom 2\noom_kill 1\n");
  Put(go, "");
  ProcStatus s = WaitDone(sup, "oom-1");
  EXPECT_EQ(s.state, ProcState::kFailed);
  EXPECT_TRUE(s.oom_killed);
  EXPECT_EQ(s.message, "killed by signal 9 (SIGKILL): out of memory (limit 64 MiB)");
  EXPECT_GE(s.cpu_seconds, 2.5);  // cpu.stat's usage_usec counts when it is more than wait4's
  EXPECT_EQ(Slurp(group + "/cgroup.kill"), "1");  // leftovers killed
}

TEST(CgroupV2, AnOrdinaryEndIsNoOom) {
  FakeV2 fake;
  StatusOr<std::unique_ptr<CgroupBackend>> v2 = OpenCgroupV2(fake.tmp.path());
  ASSERT_TRUE(v2.ok()) << v2.status();
  Supervisor sup(std::move(*v2), "");
  ProcessSpec spec;
  spec.attempt_id = "ok-1";
  spec.argv = {"/bin/sh", "-c", "kill -9 $$"};
  spec.memory_bytes = int64_t{64} << 20;
  ASSERT_TRUE(sup.Start(spec).ok());
  ProcStatus s = WaitDone(sup, "ok-1");
  EXPECT_FALSE(s.oom_killed);
  EXPECT_EQ(s.message, "killed by signal 9 (SIGKILL)");
}

TEST(CgroupV2, AGroupThatCannotBeMadeFailsTheAttemptNamingTheFile) {
  FakeV2 fake;
  const std::string root = fake.tmp / "gone";
  fs::create_directories(root);
  Put(root + "/cgroup.controllers", "cpu memory\n");
  StatusOr<std::unique_ptr<CgroupBackend>> v2 = OpenCgroupV2(root);
  ASSERT_TRUE(v2.ok()) << v2.status();
  fs::remove_all(root);  // the hierarchy went away under the agent
  Supervisor sup(std::move(*v2), "");
  ProcessSpec spec;
  spec.attempt_id = "nolimits";
  spec.argv = {"/bin/true"};
  spec.cpu_millis = 500;
  ASSERT_TRUE(sup.Start(spec).ok());
  ProcStatus s = *sup.Get("nolimits");
  EXPECT_EQ(s.state, ProcState::kFailed);
  EXPECT_EQ(s.message, "could not start: cgroup " + root + "/nolimits: No such file or directory");
}

TEST(CgroupV2, RefusesWhatIsNotAV2Hierarchy) {
  TempDir tmp;
  StatusOr<std::unique_ptr<CgroupBackend>> none = OpenCgroupV2(tmp / "aicloud");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(std::string(none.status().message()).find("is not a cgroup v2 hierarchy"),
            std::string::npos)
      << none.status();
  Put(tmp / "cgroup.controllers", "cpu io\n");  // memory not delegated
  none = OpenCgroupV2(tmp.path());
  ASSERT_FALSE(none.ok());
  EXPECT_NE(std::string(none.status().message()).find("lacks memory"), std::string::npos)
      << none.status();
}

TEST(DetectCgroups, SaysWhyWhenNothingIsMounted) {
  TempDir tmp;
  Put(tmp / "mounts", "proc /proc proc rw 0 0\ntmpfs /sys/fs/cgroup tmpfs rw,mode=755 0 0\n");
  std::string why;
  EXPECT_EQ(DetectCgroups(&why, tmp / "mounts"), nullptr);
  EXPECT_EQ(why.rfind("no cgroup limits: neither a cgroup v2 hierarchy", 0), 0u) << why;
}

// ---- v1, for real --------------------------------------------------------------------------

bool HostHasV1() {
  std::ifstream in("/proc/mounts");
  std::string dev, dir, type, opts;
  bool v2_root = false, cpu = false, mem = false;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    f >> dev >> dir >> type >> opts;
    if (type == "cgroup2" && dir == "/sys/fs/cgroup") v2_root = true;
    if (type == "cgroup") {
      std::istringstream o(opts);
      for (std::string w; std::getline(o, w, ',');) {
        cpu |= w == "cpu";
        mem |= w == "memory";
      }
    }
  }
  return !v2_root && cpu && mem;
}

std::unique_ptr<Supervisor> V1Supervisor() {
  std::string why;
  std::unique_ptr<CgroupBackend> cg = DetectCgroups(&why);
  EXPECT_NE(cg, nullptr) << why;
  if (cg == nullptr) return nullptr;
  EXPECT_EQ(cg->Describe().rfind("cgroup v1 at ", 0), 0u) << cg->Describe();
  return std::make_unique<Supervisor>(std::move(cg), "");
}

TEST(CgroupV1, DetectedFromProcMounts) {
  ASSERT_TRUE(HostHasV1()) << "this host has no cgroup v1 cpu+memory hierarchies";
  ASSERT_EQ(::geteuid(), 0u) << "cgroup v1 groups need root";
  Supervisor sup;  // detection, as the agent does it
  EXPECT_EQ(sup.cgroup_status().rfind("cgroup v1 at ", 0), 0u) << sup.cgroup_status();
}

TEST(CgroupV1, AJobOverItsMemoryLimitIsKilledAndReportedAsOom) {
  ASSERT_TRUE(HostHasV1());
  std::unique_ptr<Supervisor> sup = V1Supervisor();
  ASSERT_NE(sup, nullptr);
  TempDir tmp;
  ProcessSpec spec;
  spec.attempt_id = "v1-oom";
  // A string that doubles until it is far over 64 MiB (swap is capped too).
  spec.argv = {"/bin/sh", "-c", "s=x; while :; do s=\"$s$s\"; done"};
  spec.memory_bytes = int64_t{64} << 20;
  spec.log_path = tmp / "log";
  spec.die_with_starter = true;  // as the agent runs it: the guardian ends the way dd did
  ASSERT_TRUE(sup->Start(spec).ok());
  ProcStatus s = WaitDone(*sup, "v1-oom");
  EXPECT_EQ(s.state, ProcState::kFailed) << s.message;
  EXPECT_TRUE(s.oom_killed) << s.message << "\n" << Slurp(tmp / "log");
  EXPECT_EQ(s.message, "killed by signal 9 (SIGKILL): out of memory (limit 64 MiB)");

  // The same program under a limit it fits in is not an OOM.
  ProcessSpec fits = spec;
  fits.attempt_id = "v1-fits";
  fits.argv = {"/bin/sh", "-c", "s=x; i=0; while [ $i -lt 16 ]; do s=\"$s$s\"; i=$((i+1)); done"};
  ASSERT_TRUE(sup->Start(fits).ok());
  s = WaitDone(*sup, "v1-fits");
  EXPECT_EQ(s.state, ProcState::kSucceeded) << s.message;
  EXPECT_FALSE(s.oom_killed);
}

// The devices controller keeps an attempt off the GPUs that are not its own: two character
// devices made like /dev/nvidia0 and /dev/nvidia1 (no driver behind them), the first denied.
// Opening a denied one is EPERM; the other gets as far as the (absent) driver: ENXIO.
TEST(CgroupV1, AnAttemptCannotOpenADeviceItIsDenied) {
  ASSERT_TRUE(HostHasV1());
  std::unique_ptr<Supervisor> sup = V1Supervisor();
  ASSERT_NE(sup, nullptr);
  std::string why;
  ASSERT_NE(DetectCgroups(&why)->Describe().find("devices at "), std::string::npos) << "no devices controller here";
  TempDir tmp;
  ASSERT_EQ(::mknod((tmp / "nvidia0").c_str(), S_IFCHR | 0666, makedev(195, 0)), 0) << std::strerror(errno);
  ASSERT_EQ(::mknod((tmp / "nvidia1").c_str(), S_IFCHR | 0666, makedev(195, 1)), 0) << std::strerror(errno);
  ProcessSpec spec;
  spec.attempt_id = "v1-devices";
  spec.argv = {"/bin/sh", "-c", "cat " + (tmp / "nvidia0") + "; cat " + (tmp / "nvidia1") + "; true"};
  spec.deny_devices = {"c 195:0 rwm"};
  spec.log_path = tmp / "log";
  ASSERT_TRUE(sup->Start(spec).ok());
  ProcStatus st = WaitDone(*sup, "v1-devices");
  EXPECT_EQ(st.state, ProcState::kSucceeded) << st.message;
  const std::string log = Slurp(tmp / "log");
  EXPECT_NE(log.find("nvidia0: Operation not permitted"), std::string::npos) << log;
  EXPECT_EQ(log.find("nvidia1: Operation not permitted"), std::string::npos) << log;
  EXPECT_NE(log.find("nvidia1: No such device or address"), std::string::npos) << log;

  // Without the rule both get as far as the driver.
  spec.attempt_id = "v1-no-devices";
  spec.deny_devices.clear();
  spec.log_path = tmp / "log2";
  ASSERT_TRUE(sup->Start(spec).ok());
  WaitDone(*sup, "v1-no-devices");
  EXPECT_EQ(Slurp(tmp / "log2").find("Operation not permitted"), std::string::npos) << Slurp(tmp / "log2");
}

TEST(CgroupV1, ACpuBoundJobIsHeldNearItsQuota) {
  ASSERT_TRUE(HostHasV1());
  std::unique_ptr<Supervisor> sup = V1Supervisor();
  ASSERT_NE(sup, nullptr);
  ProcessSpec spec;
  spec.attempt_id = "v1-cpu";
  // Spins for 1.5 s of wall time; wait4 counts the spinning shell that timeout reaps.
  spec.argv = {"timeout", "1.5", "sh", "-c", "while :; do :; done"};
  spec.cpu_millis = 200;
  ASSERT_TRUE(sup->Start(spec).ok());
  ProcStatus s = WaitDone(*sup, "v1-cpu");
  const double wall = std::chrono::duration<double>(s.finished - s.started).count();
  EXPECT_GE(wall, 1.4) << s.message;
  // 200 millicores = 0.2 s of CPU per wall second; unthrottled it would be ~1.0 (a margin for
  // the last period and for accounting).
  EXPECT_LT(s.cpu_seconds / wall, 0.4) << s.cpu_seconds << " s of CPU in " << wall << " s";
  EXPECT_GT(s.cpu_seconds, 0.05) << "it did not spin at all";
}

}  // namespace
}  // namespace aicloud::agent
