// Agent: the node agent's main loop. It registers the node with the control plane, runs the
// attempts the server assigns to it through a Supervisor, ships their output and reports their
// states (with host and GPU metrics) back.
//
//   Agent agent({.server_url = "https://cp:8443", .token = key, .node_name = "gpu-1",
//                .node_spec = *NodeSpecFromDiscovery(nvml), .work_dir = "/var/lib/aicloud",
//                .tls = {.ca_file = "ca.pem"}});
//   Status s = agent.Start();   // UNAVAILABLE when the server stays unreachable; 401/403/400
//                               // refusals come back as UNAUTHENTICATED / PERMISSION_DENIED / ...
//   ...
//   agent.Stop();               // or let it go out of scope: running attempts get TERM, then KILL
//
// Protocol (server side: src/control/api.cc), every call with "Authorization: Bearer <token>":
//   POST /api/v1/agent/nodes/{node}/register {"spec": ...}      -> {"epoch", "instance"}
//   GET  /api/v1/agent/nodes/{node}/assignments?epoch&instance&after&waitMs   (long poll)
//                                                                -> {"version", "instance",
//                                                                    "attempts": [...]}
//   POST /api/v1/agent/nodes/{node}/report?epoch  {"metrics", "attempts", "events"} -> {"stop"}
//   POST /api/v1/agent/nodes/{node}/logs?epoch&attempt&offset   raw bytes -> {"offset"}
//
// Two threads, each with its own http::Client:
//  - the assignments thread long-polls the desired set of attempts and reconciles: a desired
//    attempt that this Agent never started is started (an attempt id is never started twice in
//    the Agent's lifetime, even after it ended and was forgotten); a local attempt that is no
//    longer desired is stopped if still running.
//  - the report thread, every `heartbeat` or within ~20 ms of an attempt changing state, takes
//    the attempts' states, ships their new log bytes, then reports those states (so output is
//    complete on the server before it sees an attempt finish), and handles the answer's stop
//    list. Ended attempts are reported until the server drops them from the desired set (or
//    lists them in "stop"), then forgotten.
// A "failed_precondition" answer that names the epoch ("stale agent epoch", "not registered")
// makes the agent register again (new epoch) and stop and forget every local attempt: the
// server has already ended them. Transport errors and malformed answers are logged and retried
// with backoff (100 ms doubling, capped at 2 s); running attempts keep running meanwhile.
//
// Environment given to each attempt, on top of the assignment's env:
//   AICLOUD_CHECKPOINT_DIR  <work_dir>/checkpoints/<tenant>/<job> (created)
//   AICLOUD_NODE_ADDRESS    the node's address as registered (node_spec.address): where its
//                           services listen (a replica's engine binds there)
//   CUDA_VISIBLE_DEVICES    "0,3" (the assigned GPU indices; a MIG slice's "MIG-<uuid>"; "" with
//                           none), with CUDA_DEVICE_ORDER=PCI_BUS_ID when there are GPUs
//   AICLOUD_GPU_MILLI       "500,500" per GPU, only when a share is fractional (< 1000 milli),
//                           with CUDA_MPS_ACTIVE_THREAD_PERCENTAGE and, with a memory cap,
//                           CUDA_MPS_PINNED_DEVICE_MEM_LIMIT (gpu_isolation.h)
//   AICLOUD_GPU_MEMORY_MIB  "20480" per GPU, only when the assignment caps GPU memory
// Files: <work_dir>/attempts/<id> (working dir unless the assignment names one),
// <work_dir>/logs/<id>.log and <work_dir>/gpu-state.json (GpuIsolation's state).
//
// GPUs (gpu_isolation.h): before an attempt starts, the agent creates its MIG instance, wipes the
// GPU's memory when another tenant used it last, and records the new tenant durably; each step is
// an event in the next report. When that fails, the attempt is not started and is reported
// {"state": "Failed", "reason": "GpuSetupFailed"}: the server requeues it without using a retry.
// When an attempt has ended, its MIG instance is destroyed. GpuIsolation::Start runs before the
// first registration; MIG instances this agent did not create are listed in the registered spec
// as "foreignMigInstances".
//
// Sandbox (sandbox.h), on by default when the agent runs as root: each tenant gets a block of
// uids from `sandbox_uids` the first time it runs here (the map lives in
// <work_dir>/sandbox-uids.json and survives restarts; a corrupt one fails Start), and its
// attempts run as the block's first uid (all jobs of one tenant share it). Dirs:
//   <work_dir>, attempts/, checkpoints/           root, 0711 (the tenant uids pass through)
//   attempts/<id>, checkpoints/<tenant>[/<job>]   the tenant uid, 0700
//   logs/                                         root, 0700 (the agent hands the log fd over)
// Start fails when a parent of work_dir is not searchable by others, naming it. An assignment's
// "isolation": "network" gives the attempt its own network namespace with only loopback. Not
// root: attempts run as the agent's uid and the registered spec's "sandbox" says so; with
// sandbox = false (an operator's opt-out) attempts run as the agent, unisolated. The registered
// spec also carries "cgroups": the Supervisor's cgroup_status().
//
// Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "agent/gpu_discovery.h"
#include "agent/gpu_isolation.h"
#include "agent/supervisor.h"
#include "core/status.h"
#include "http/client.h"

namespace aicloud::agent {

struct AgentOptions {
  std::string server_url;                 // http://127.0.0.1:8080
  std::string token;                      // API key with the agent role
  std::string node_name;
  nlohmann::json node_spec;               // what register sends as "spec"; without an
                                          // "address", the one AddressToReach finds is added
                                          // (where the server reaches this node's services)
  std::string work_dir;                   // attempts' dirs, logs, checkpoints live here
  std::chrono::milliseconds heartbeat{10000};
  std::chrono::milliseconds poll_wait{20000};   // long-poll waitMs
  http::ClientOptions tls;                // ca/cert/key for https/mTLS (its timeout bounds each
                                          // request; the long poll gets poll_wait on top)
  // How long Start keeps retrying registration while the server is unreachable (or answers
  // 5xx / malformed JSON) before it gives up with UNAVAILABLE.
  std::chrono::milliseconds register_deadline{10000};
  // Passed to the Supervisor ("" detects cgroup v2 or v1).
  std::string cgroup_root;
  // Run attempts in the tenant sandbox when root (false: unisolated, as the agent's uid).
  bool sandbox = true;
  // The uids tenants get: "FIRST-LAST", cut into blocks of kUidsPerTenant; must not include 0
  // or any /etc/passwd user.
  std::string sandbox_uids = "200000-299999";
  // The tenant -> uid block map ("" = <work_dir>/sandbox-uids.json). Agents that share a host
  // (aicloud up's simulated nodes) must share one map, or two tenants could get one uid.
  std::string sandbox_uid_map;
  // Try NVML for GPU metrics in the heartbeat.
  bool gpu_metrics = true;
  // GPU isolation (gpu_isolation.h): library paths (default the real sonames), the wipe helper's
  // argv (empty: this binary's `gpu-wipe`), whether a GPU may go to another tenant unwiped when
  // no CUDA driver can be loaded (default: refused), and simulated GPUs (nothing touches a device).
  std::string nvml_library = "libnvidia-ml.so.1";
  std::string cuda_library = "libcuda.so.1";
  std::vector<std::string> gpu_wipe_command;
  bool allow_unwiped_gpu_handover = false;
  bool simulated_gpus = false;
};

// The local IP address this host uses to reach `server_url`'s host (the source address the
// kernel picks for that route; no packet is sent), e.g. "10.0.3.17", or "127.0.0.1" for a
// loopback server. "" when the host cannot be resolved.
std::string AddressToReach(const std::string& server_url);

class Agent {
 public:
  explicit Agent(AgentOptions options);
  ~Agent();  // Stop()
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  // Creates the work directories, registers (retrying with backoff until register_deadline while
  // the server is unreachable: then UNAVAILABLE), then starts the threads. A refusal is returned
  // at once: 401 -> UNAUTHENTICATED, 403 -> PERMISSION_DENIED, 400 -> INVALID_ARGUMENT (or
  // FAILED_PRECONDITION), other 4xx -> FAILED_PRECONDITION, with the server's message.
  // FAILED_PRECONDITION when already started.
  Status Start();
  // Stops the threads (waiting for an outstanding long poll: at most poll_wait), then stops the
  // attempts still running (SIGTERM, SIGKILL after their grace) and waits for them. Idempotent.
  void Stop();

  std::string epoch() const;
  // Attempts currently running.
  int running() const;
  // How many times the node registered (1 after Start; +1 per re-registration).
  int registrations() const;
  // "on: ...", "off: ..." (set by Start; also registered as the node spec's "sandbox").
  std::string sandbox_status() const;

 private:
  struct Local {
    std::string tenant, job;
    std::string log_path;
    bool desired = true;          // in the latest desired set
    bool forget = false;          // stop-listed or ended by a re-registration: forget once ended
    bool orphaned = false;        // ended by a re-registration: no longer reported
    bool terminal_reported = false;
    bool final_ship_done = false;  // a log pass ran after the attempt had ended
    bool log_done = false;        // the server refuses this attempt's log: stop shipping
    int64_t shipped = 0;          // log bytes the server has
    std::string start_error;      // Supervisor::Start refused it (reported as Failed)
    bool gpu_setup_failed = false;  // start_error came from GPU setup: reason GpuSetupFailed
  };
  struct Registration {
    std::string epoch, instance;
  };

  StatusOr<Registration> RegisterOnce(http::Client& client, bool* retryable);
  // Sets up the work dirs' modes and the uid map (when sandboxing) and sandbox_status_.
  Status SetUpSandbox();
  // Gives the attempt its tenant's uid and private dirs. REQUIRES: mu_ held, uids_ set.
  Status SandboxAttemptLocked(const std::string& tenant, ProcessSpec* spec);
  // Registers again unless another thread already did since `seen_epoch`; retries until it
  // works or the agent stops. Then stops and orphans every local attempt.
  void Reregister(http::Client& client, const std::string& seen_epoch);
  void PollLoop();
  void ReportLoop();
  void Reconcile(const std::string& epoch, const nlohmann::json& attempts);
  void StartAttemptLocked(const nlohmann::json& a);
  void ShipLogs(http::Client& client, const std::string& epoch);
  // Destroys the MIG instances of attempts that have ended (events queued). REQUIRES: mu_ held.
  void ReleaseEndedGpusLocked();
  // Returns false when the agent is stopping. Waits `d` or until Stop.
  bool SleepFor(std::chrono::milliseconds d);
  bool stopping() const { return stopping_.load(); }
  http::Headers AuthHeaders() const;
  std::string NodePath() const;

  const AgentOptions options_;
  std::unique_ptr<Supervisor> sup_;
  std::unique_ptr<GpuDiscovery> nvml_;
  std::unique_ptr<TenantUids> uids_;  // null: attempts run as the agent
  std::string sandbox_status_;        // written by Start before any thread reads it
  std::string cgroup_status_;

  mutable std::mutex mu_;
  std::string epoch_, instance_;
  int64_t version_ = -1;
  int registrations_ = 0;
  bool started_threads_ = false;
  std::map<std::string, Local> local_;
  std::set<std::string> ever_started_;
  std::unique_ptr<GpuIsolation> gpus_;
  nlohmann::json pending_events_ = nlohmann::json::array();

  std::mutex register_mu_;  // one re-registration at a time

  std::mutex wake_mu_;  // the report thread's wake-up (the Supervisor listener takes only this)
  std::condition_variable wake_cv_;
  bool wake_ = false;

  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  std::atomic<bool> stopping_{false};

  std::thread poll_thread_, report_thread_;
};

}  // namespace aicloud::agent
