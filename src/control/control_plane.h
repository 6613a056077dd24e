// ControlPlane: the server's controllers over the store — nodes (registration, heartbeats,
// NotReady after a grace), jobs (queue → scheduler → attempts on agents → terminal phase, with
// restart policy, cancel, drain) and accounting. The scheduler from the sched room runs here on
// the live cluster; the simulator runs the same code on a trace.
//
//   ControlPlane cp(store, &clock, &metrics, {.data_dir = dir});
//   cp.Start();                                   // recovers placements from the store
//   // agent side (through the HTTP API):
//   json reg = cp.RegisterNode("gpu-1", node_spec);            // {"epoch", "instance"}
//   json work = cp.WaitAssignments("gpu-1", epoch, 0, 25s);    // attempts to run
//   cp.AgentReport("gpu-1", epoch, {{"attempts", [...]}});     // heartbeat + attempt states
//
// Job lifecycle (status.phase): Pending → Scheduled (every worker placed; attempts handed to
// agents) → Running (every worker started) → Succeeded | Failed. A failed worker, a lost node
// or a drain ends the attempt; restartPolicy OnFailure with retries left puts the job back to
// Pending with attempt+1, else Failed with the reason. Cancel → Failed, reason Cancelled.
//
// Invariants:
// - A placement is written to the store before any agent sees it, so after a crash every
//   attempt that may be running is known and re-adopted.
// - Attempt ids are never reused; reports and logs for an attempt that is no longer current are
//   refused, and the agent is told to stop it (fencing). An agent that re-registers (new epoch)
//   loses its attempts: they are ended as lost and requeued by restart policy.
// - All job status writes happen on the controller thread, in batches (one store commit per
//   loop turn), so they never conflict with each other.
#pragma once

#include <chrono>
#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cluster/cluster.h"
#include "control/job.h"
#include "core/clock.h"
#include "core/metrics.h"
#include "core/status.h"
#include "sched/scheduler.h"
#include "store/store.h"

namespace aicloud::control {

using nlohmann::json;

class ReplicaSecrets;
class ReplicaCa;
struct ReplicaCert;

struct ControlOptions {
  std::string data_dir;  // job logs go to data_dir/logs/<attempt>.log
  // Attempts of Deployment replica Jobs (label aicloud/deployment) get their replica secret in
  // AICLOUD_REPLICA_SECRET (replica_secret.h). nullptr: none (replicas then answer anyone).
  const ReplicaSecrets* replica_secrets = nullptr;
  // Set when the cluster has TLS: attempts of Deployment replica Jobs also get a certificate for
  // their node's address, issued by this CA, in the assignment's "tls": {"cert", "key"} (PEM),
  // never in the stored Job (replica_ca.h). nullptr: replicas serve plain HTTP.
  const ReplicaCa* replica_ca = nullptr;
  std::chrono::milliseconds node_grace{40000};
  std::string policy = "bestfit";
  std::chrono::milliseconds tick{100};
};

struct LogChunk {
  std::string data;
  int64_t next_offset = 0;
  bool done = false;  // the attempt has ended and everything it wrote was read
  std::string attempt;
};

class ControlPlane {
 public:
  ControlPlane(store::Store* store, Clock* clock, Metrics* metrics, ControlOptions options);
  ~ControlPlane();

  // Loads nodes and jobs from the store (re-adopting placements) and starts the controller.
  Status Start();
  void Stop();

  // --- agent protocol ---
  // Creates or refreshes the Node object from the agent's description and returns a new epoch.
  StatusOr<json> RegisterNode(const std::string& name, const json& spec);
  // Heartbeat with metrics and attempt states: {"metrics": {...}, "attempts": [{"attempt", "state":
  // Running|Succeeded|Failed|Killed, "exitCode", "message", "cpuSeconds"}]}. Returns {"stop":
  // [attempts the agent must stop and forget]}. FAILED_PRECONDITION when the epoch is stale.
  StatusOr<json> AgentReport(const std::string& node, const std::string& epoch, const json& report);
  // The attempts this node must run: {"version", "instance", "attempts": [...]}. Returns as soon
  // as the node's version passes `after` (or the server instance differs), else after `wait`.
  StatusOr<json> WaitAssignments(const std::string& node, const std::string& epoch,
                                 const std::string& instance, int64_t after,
                                 std::chrono::milliseconds wait);
  // Appends agent-captured output of a current attempt at `offset` (idempotent: bytes the server
  // already has are skipped). Returns the server's new size. FAILED_PRECONDITION for a stale
  // attempt; OUT_OF_RANGE "expected offset N" for a gap.
  StatusOr<int64_t> AppendLog(const std::string& node, const std::string& attempt, int64_t offset,
                              std::string_view bytes);

  // --- user verbs ---
  Status CancelJob(const std::string& tenant, const std::string& name);
  // worker's output from `offset`; attempt < 0 = the latest attempt that has one.
  StatusOr<LogChunk> ReadLog(const std::string& tenant, const std::string& job, int worker,
                             int attempt, int64_t offset, size_t max_bytes);
  // Whose cordon it is, for the cluster autoscaler's consolidation mark (aicloud/consolidating
  // on the Node), which the same write reads and changes:
  enum class CordonBy {
    kAny,       // the cordon flag alone
    kOperator,  // an operator (the API): drops the mark, taking the node out of a move in progress
    kMove,      // the autoscaler beginning a move: cordons and marks
    kMarked,    // the autoscaler carrying on (cordon) or giving up (uncordon, mark dropped) a move:
                // only while the mark is there, else FAILED_PRECONDITION (an operator took over)
    kUnneeded,  // the autoscaler scaling an empty node it added down: cordons and marks it
                // (aicloud/scale-down); with cordon = false, undoes that cordon only while the
                // mark is there, else FAILED_PRECONDITION (an operator cordoned it since)
    kPowerOff,  // the autoscaler about to power off a node it scales down: cordon = true only
                // while the node is still cordoned (else an operator uncordoned it since: they
                // want it) and no running or scheduled work is bound to it (bound while it was
                // uncordoned), else FAILED_PRECONDITION
  };
  // The autoscaler's cordons (kMove, kMarked with cordon = true, kUnneeded, kPowerOff) are refused with
  // FAILED_PRECONDITION while the Node is labelled aicloud/do-not-disrupt=true; its uncordons and
  // an operator's writes are not.
  Status Cordon(const std::string& node, bool cordon, CordonBy by = CordonBy::kAny);
  // Cordons and ends every attempt on the node (requeued without using a retry).
  Status Drain(const std::string& node, CordonBy by = CordonBy::kAny);
  // Ends the job's attempt if a worker of it runs on `node` (requeued without using a retry, as
  // a drain does); nothing else on the node is touched. FAILED_PRECONDITION when it does not.
  Status EvictJob(const std::string& tenant, const std::string& name, const std::string& node);
  // Whether the scheduler could place `jobs` (tenant, name) elsewhere were `node` emptied: on a
  // copy of the live cluster in which `node` and `excluded` take nothing, every worker of each
  // job, wherever it runs now, is freed and placed again with this server's profile (all MIG,
  // NVLink, GPU model, lane and taint rules), the jobs one after another. "" when all fit, else
  // which job does not and the scheduler's reason. The copy has no placed pods, so nothing is
  // preempted for them; quota is not checked again (the jobs were admitted). The lock is held
  // only while the cluster and the jobs' specs are copied.
  std::string WhatIfEmptied(const std::string& node, const std::vector<std::string>& excluded,
                            const std::vector<std::pair<std::string, std::string>>& jobs);
  // Runtime facts of nodes kept in memory (heartbeat age, readiness, metrics): name → object.
  json NodeRuntime();
  // The metrics of a node's last agent report ({"host": {...}, "gpus": [...]}, agent/host_metrics.h);
  // null for an unknown node or one that reported none.
  json NodeMetrics(const std::string& node);
  // GPUs in use by a tenant's scheduled/running jobs (for hard quota admission).
  double TenantGpusInUse(const std::string& tenant);
  // Nudges the controller (a Job was created or deleted, a node changed).
  void Wake();

  // For tests and benchmarks.
  const std::string& instance() const { return instance_; }
  // Blocks until the controller finished a loop turn that started after this call.
  void Sync();

 private:
  struct Worker {
    int64_t uid = 0;
    std::string node;
    std::string attempt;
    cluster::Allocation alloc;
    std::string state = "Pending";  // Pending | Running | Succeeded | Failed | Killed | Lost
    int exit_code = -1;
    std::string message;
    std::string started_at, finished_at;
    int64_t started_us = 0;
    double cpu_seconds = 0;
  };
  struct Job {
    std::string tenant, name, uid;
    json object;
    int64_t rv = 0;
    std::optional<JobSpec> spec;
    std::string phase = "Pending";
    std::string reason, message;
    int attempt = 0;    // attempts made so far (the current one when placed)
    int failures = 0;   // attempts that failed (against maxRetries)
    std::vector<Worker> workers;
    int64_t seq = 0;    // arrival order
    double gpu_seconds = 0, cpu_seconds = 0, cost = 0;
    int64_t queued_us = 0;
    std::string queue_message;  // last unschedulable reason (written once per change)
    uint64_t failed_gen = 0;    // capacity_gen_ when placement last failed (0: not yet)
    bool dirty = false;
  };
  struct Node {
    std::string name;
    int32_t id = -1;
    std::string epoch;
    int64_t last_seen_us = 0;
    bool ready = false;
    bool cordoned = false;
    bool registered = false;  // an agent registered since this server started
    std::string address;      // spec.address as last registered ("" when none)
    json metrics;
    uint64_t version = 0;
    std::set<std::string> attempts;  // current attempts placed here
    bool dirty = false;              // Node status must be written
  };
  struct Report {
    std::string node, attempt, state, message;
    std::string reason;  // "GpuSetupFailed": the node could not set up its GPUs (not the job's fault)
    int exit_code = -1;
    double cpu_seconds = 0;
    bool oom_killed = false;  // the agent saw its cgroup's OOM killer strike
  };

  void Loop();
  void Turn();  // one controller iteration; mu_ held
  void ApplyStoreChanges();
  void ApplyReports();
  void CheckNodes();
  void ScheduleJobs();
  void RequestTurn();
  void Flush();
  void Publish(const std::string& node);

  Job* AddJob(const json& object);
  void EndAttempt(Job& job, const std::string& why_state, const std::string& reason,
                  const std::string& message, bool counts_as_failure);
  void ReleaseWorkers(Job& job);
  void UpdatePhase(Job& job);
  void Event(const Job& job, const std::string& type, const std::string& reason,
             const std::string& message);
  json StatusOf(const Job& job) const;
  json AttemptJson(const Job& job, const Worker& w) const;
  // The certificate of a replica attempt (issued once per attempt, then cached); "tls" of its
  // assignment. null json when it cannot be issued (logged).
  json ReplicaTlsJson(const Job& job, const Worker& w) const;
  std::string LogPath(const std::string& attempt) const;
  Node* FindNode(const std::string& name);
  Status AddClusterNode(Node& node, const json& spec);
  Job* JobOfAttempt(const std::string& attempt);

  store::Store* store_;
  Clock* clock_;
  Metrics* metrics_;
  ControlOptions options_;
  std::string instance_;

  std::mutex mu_;
  std::condition_variable assign_cv_;  // WaitAssignments
  std::condition_variable turn_cv_;    // Sync
  bool stop_ = false;
  // Asking for a controller turn: a leaf lock (taken inside mu_ or alone, never the reverse).
  std::mutex wake_mu_;
  std::condition_variable wake_cv_;
  std::atomic<bool> wake_{false};
  uint64_t turns_ = 0;
  std::thread thread_;

  cluster::Cluster cluster_;
  std::unique_ptr<sched::Scheduler> scheduler_;
  sched::Profile profile_;  // scheduler_'s, for what-if copies
  std::map<std::string, Job> jobs_;    // "tenant/name"
  std::map<std::string, Node> nodes_;  // name
  std::map<std::string, std::string> attempt_job_;  // attempt → job key
  std::map<int64_t, std::pair<std::string, int>> uid_worker_;  // sched uid → (job key, worker)
  std::set<std::string> sleeping_tenants_;
  std::vector<Report> reports_;
  std::vector<json> events_;  // Event objects to create on the next flush
  std::set<std::string> to_publish_;
  // Replica attempts' certificates ({"cert", "key"}), issued once per attempt; entries of
  // attempts no node runs any more are dropped as new ones come. GUARDED_BY(mu_)
  mutable std::map<std::string, json> replica_tls_;
  int64_t next_seq_ = 0;
  int64_t next_uid_ = 1;
  // Moves whenever capacity may have grown (a node added, changed or back, resources freed, a
  // tenant woken); a pending job is retried only after it moved.
  uint64_t capacity_gen_ = 1;
  int64_t seen_revision_ = 0;
  int64_t start_us_ = 0;
  int64_t event_counter_ = 0;

  // Metrics.
  Histogram* cycle_seconds_ = nullptr;
  Counter* jobs_finished_ = nullptr;
};

// The Tenant admission rules for a new Job (requireLimits, maxGpusPerJob, hard and soft GPU
// quota against what the tenant's jobs hold now): NOT_FOUND for an unknown tenant,
// INVALID_ARGUMENT / PERMISSION_DENIED naming the rule; a soft-quota excess is OK with
// *warning set. The API applies it to created Jobs, the deployment controller to replicas.
// `unseen_gpus`: GPUs of the tenant's jobs admitted but not yet known to `control` (created in
// the same pass), counted as in use.
Status AdmitJob(store::Store* store, ControlPlane* control, const nlohmann::json& job, std::string* warning,
                double unseen_gpus = 0);

}  // namespace aicloud::control
