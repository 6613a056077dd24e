// Sandbox: what keeps the processes of one tenant apart from another's, and from the agent, on a
// node. One implementation, used by job attempts now and meant for every process the agent runs
// for a tenant (MCP tool servers over stdio, headless browsers): the caller fills a
// SandboxSpec into the Supervisor's ProcessSpec, and the Supervisor applies it between fork and
// exec, in this order:
//   setsid; join the attempt's cgroups; unshare(CLONE_NEWNET) and bring `lo` up (when
//   isolate_network); rlimits (core 0, nofile); setgroups({}), setgid, setuid (when uid is set);
//   PR_SET_NO_NEW_PRIVS; the parent-death signal of the die_with_starter guardian (the kernel
//   clears it when credentials change, so it must come after setuid); chdir; exec.
// The environment is clean whatever the spec: PATH and LANG from the agent, HOME = the working
// directory, AICLOUD_ATTEMPT_ID, and the caller's env; nothing else of the agent's.
//
// Uids: an agent manages a range (default 200000-299999) cut into blocks of kUidsPerTenant; a
// tenant gets the next free block the first time one of its attempts runs on the node, and all of
// that tenant's attempts run as the block's first uid with gid = the same number (so jobs of one
// tenant can reach one another's files; the rest of the block is reserved for per-tool-server
// uids). TenantUids keeps the tenant -> block map in a JSON file (atomic rewrite, flock'd so
// agents sharing one map on a host never hand one block to two tenants):
//
//   StatusOr<UidRange> range = ParseUidRange("200000-299999");    // refuses 0 and passwd users
//   StatusOr<std::unique_ptr<TenantUids>> uids = TenantUids::Open(work + "/sandbox-uids.json", *range);
//   StatusOr<uint32_t> uid = (*uids)->UidOf("acme");              // 200000, now and after restarts
//
// What a sandbox does NOT isolate: the filesystem is seen with the tenant uid's permissions (as a
// Slurm job sees it), so world-readable files are readable and /tmp is shared; there is no
// seccomp filter, no PID or mount namespace; one tenant's jobs share a uid.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "core/status.h"

namespace aicloud::agent {

// Carried by ProcessSpec. The defaults (no uid, no network namespace) run the process as the
// agent, still with no-new-privs, core 0 and a bounded nofile.
struct SandboxSpec {
  std::optional<uint32_t> uid;   // run as uid:uid with no supplementary groups (needs root)
  bool isolate_network = false;  // own network namespace with only loopback up (needs root)
  bool no_new_privs = true;      // PR_SET_NO_NEW_PRIVS: setuid binaries cannot raise privileges
  int64_t max_open_files = 65536;  // RLIMIT_NOFILE soft and hard (capped at the agent's hard)
};

struct UidRange {
  uint32_t first = 0, last = 0;  // inclusive
  std::string ToString() const;
};

constexpr uint32_t kUidsPerTenant = 100;

// Parses "first-last" and checks it: it holds at least one block, excludes 0, and overlaps no
// user of `passwd` (INVALID_ARGUMENT naming the user: "uid range 1000-2000 includes user alice
// (uid 1000) of /etc/passwd").
StatusOr<UidRange> ParseUidRange(const std::string& text,
                                 const std::string& passwd = "/etc/passwd");

class TenantUids {
 public:
  // Reads the map at `path` (a missing file is an empty map). A file that cannot be read or
  // parsed, or whose entries do not fit `range`, is an error naming the file (never a silent
  // reset: the uids own files on disk).
  static StatusOr<std::unique_ptr<TenantUids>> Open(std::string path, UidRange range);

  // The tenant's uid (= gid), assigning the next free block on first use; the map file is
  // rewritten (write, fsync, rename) before the uid is returned. RESOURCE_EXHAUSTED when every
  // block is taken. Re-reads the file under an flock first, so agents sharing it agree.
  StatusOr<uint32_t> UidOf(const std::string& tenant);

  const std::string& path() const { return path_; }
  UidRange range() const { return range_; }

 private:
  TenantUids(std::string path, UidRange range) : path_(std::move(path)), range_(range) {}
  StatusOr<std::map<std::string, uint32_t>> Load() const;

  const std::string path_;
  const UidRange range_;
  std::mutex mu_;
};

// Checks that `uid` (with gid == uid, no supplementary groups) can search every directory from
// "/" down to `dir` (dir included). FAILED_PRECONDITION naming the first one that blocks it:
// "sandbox: uid 200000 cannot reach /tmp/x/agents/n1: /tmp/x is mode 0700 (owner 0); make it
// searchable (chmod o+x) or ...".
Status CheckReachable(const std::string& dir, uint32_t uid);

// The first path component of `path` that `uid` (gid == uid) cannot search (or, for the last
// component, execute when `exec`, or search when it is a directory), as "/tmp/x (mode 0700,
// owner 0)"; "" when the permission bits allow it all.
std::string BlockingComponent(const std::string& path, uint32_t uid, bool exec);

// Makes `dir` (and missing parents, root-owned 0711) and gives it to uid:uid with mode 0700. An
// existing directory is re-owned; a symlink is refused.
Status MakePrivateDir(const std::string& dir, uint32_t uid);

}  // namespace aicloud::agent
