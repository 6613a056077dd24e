// Cgroups: the CPU and memory limits of job attempts, behind one small interface with a backend
// per cgroup version. The Supervisor creates one group per attempt, the attempt's first process
// joins it between fork and exec (by writing its pid into each of ProcsFiles()), and when the
// attempt ends the Supervisor kills what is left in it, reads its CPU time and whether the OOM
// killer struck, and removes it.
//
//   std::string why;
//   std::unique_ptr<CgroupBackend> cg = DetectCgroups(&why);   // nullptr: no limits, `why` says
//   StatusOr<std::unique_ptr<AttemptCgroup>> g = cg->Create("train-1-a0", {.cpu_millis = 500,
//                                                                          .memory_bytes = 1 << 30});
//   // child: write getpid() to each of (*g)->ProcsFiles(); ...; parent, once it has ended:
//   (*g)->KillAll();  bool oom = (*g)->OomKilled();  (*g)->Remove();
//
// Backends:
//   v2  one directory <root>/<attempt> in the unified hierarchy (root /sys/fs/cgroup/aicloud):
//       cpu.max "<quota> 100000", memory.max, memory.swap.max 0 when present; OOM from
//       memory.events' oom_kill; leftovers killed with cgroup.kill; CPU from cpu.stat usage_usec.
//   v1  <cpu root>/<attempt> (cpu.cfs_quota_us / cpu.cfs_period_us; cpuacct.usage when the cpu
//       hierarchy carries cpuacct) and <memory root>/<attempt> (memory.limit_in_bytes, and
//       memory.memsw.limit_in_bytes when swap accounting is on, so swap cannot dodge the limit);
//       OOM from memory.oom_control's oom_kill counter; leftovers killed pid by pid from
//       cgroup.procs. Roots: <mount of the cpu controller>/aicloud and <mount of memory>/aicloud;
//       with the devices controller mounted, <devices root>/<attempt> gets the attempt's
//       devices.deny lines (CgroupLimits::deny_devices) when it has any.
// Every backend takes its directories as constructor parameters, so tests point them at a temp
// tree that imitates cgroupfs.
//
// Thread-compatible: a backend may be shared (Create is const and touches only the new group's
// files); one AttemptCgroup is used by one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

namespace aicloud::agent {

struct CgroupLimits {
  int64_t cpu_millis = 0;    // 0 = no CPU limit; 1000 = one CPU
  int64_t memory_bytes = 0;  // 0 = no memory limit
  // Devices the attempt may not open, as devices.deny lines ("c 195:3 rwm": another GPU's
  // /dev/nvidia3). v1 with the devices controller mounted only; elsewhere not enforced
  // (Describe says so).
  std::vector<std::string> deny_devices;
};

// One attempt's group (in v1, one directory per hierarchy).
class AttemptCgroup {
 public:
  virtual ~AttemptCgroup() = default;
  // The cgroup.procs files a process writes its pid into to join (all of them).
  virtual const std::vector<std::string>& ProcsFiles() const = 0;
  // SIGKILLs everything still in the group (descendants that left the process group too).
  virtual void KillAll() = 0;
  // CPU time the group used, in seconds; negative when unknown.
  virtual double CpuSeconds() const = 0;
  // True when the kernel's OOM killer killed a process of this group.
  virtual bool OomKilled() const = 0;
  // Removes the group's directories; true when they are gone (a group with live processes
  // stays: call again later).
  virtual bool Remove() = 0;
};

class CgroupBackend {
 public:
  virtual ~CgroupBackend() = default;
  // "cgroup v2 at /sys/fs/cgroup/aicloud", "cgroup v1 at /sys/fs/cgroup/cpu,cpuacct/aicloud and
  // /sys/fs/cgroup/memory/aicloud".
  virtual std::string Describe() const = 0;
  // Creates a new group `name` (one path component; "name.1", ... when a group of that name
  // exists, so two supervisors never share one) with `limits`. The error names the file that
  // could not be written.
  virtual StatusOr<std::unique_ptr<AttemptCgroup>> Create(const std::string& name,
                                                          const CgroupLimits& limits) const = 0;
};

// The unified-hierarchy backend rooted at `root` (created if its parent is a cgroup v2
// directory; "+cpu +memory" written to its cgroup.subtree_control). FAILED_PRECONDITION saying
// why when it cannot be used.
StatusOr<std::unique_ptr<CgroupBackend>> OpenCgroupV2(const std::string& root);

// The v1 backend: attempts get <cpu_root>/<name> and <memory_root>/<name>. The roots are created
// when missing. FAILED_PRECONDITION saying why when they cannot be used.
StatusOr<std::unique_ptr<CgroupBackend>> OpenCgroupV1(const std::string& cpu_root,
                                                      const std::string& memory_root,
                                                      const std::string& devices_root = "");

// Picks the backend from `mounts` (the format of /proc/mounts): v2 when /sys/fs/cgroup is a
// cgroup2 mount that offers cpu and memory, else v1 when the cpu and memory controllers are
// mounted (as cgroup), else none. Returns nullptr with *why set ("no cgroup limits: ...") when
// none can be used.
std::unique_ptr<CgroupBackend> DetectCgroups(std::string* why,
                                             const std::string& mounts = "/proc/mounts");

}  // namespace aicloud::agent
