// NodeAutoscaler: adds nodes when jobs cannot be placed and gives back the nodes it added once
// they sit empty — the cluster autoscaler of `aicloud server` and `aicloud up`.
//
//   ScriptProvisioner hooks("/etc/aicloud/node-hook", {.gpus = 8, .cpu_millis = 96000, ...});
//   NodeAutoscaler na(store, &control, &clock, &hooks, {.max_nodes = 4});
//   na.Start();   // a thread: one Turn() every options.tick
//
// Each turn:
// 1. Scale up. Jobs Pending with reason Unschedulable for at least `pending_for` (the scheduler
//    found no room) whose workers would fit on one new node (GPU count, CPU, memory, GPU model)
//    are considered; workers that fit (first fit) in the room left on Ready nodes are taken
//    off, the rest summed, and ceil(demand / node shape) nodes — at most max_nodes added in
//    all — are powered on: names `<prefix>0`, `<prefix>1`, ... (a released name is reused first). One wave at a
//    time: nothing more is requested while a powered-on node has not registered yet (after
//    `provision_timeout` it is powered off again and counted as failed).
//    A job that already caused `n` waves and is still unschedulable counts again only after a
//    back-off of `backoff` * 2^(n-1), at most `max_backoff` (cluster-autoscaler's node group
//    back-off, 5 and 30 min): work the scheduler refuses for reasons this pass does not see
//    would otherwise power nodes on and off forever. A job that got placed starts afresh.
// 2. Scale down. A node this autoscaler added that is Ready with no job on it for
//    `unneeded_for` (cluster-autoscaler's scale-down-unneeded-time, 10 min) is cordoned, and
//    powered off at a later turn if still no job is on it (one the scheduler bound while the
//    cordon was being written shows up by then: the node is uncordoned and kept, unless an
//    operator cordoned it since: the cordon is marked aicloud/scale-down as the autoscaler's, and
//    only a marked one is undone; a restarted server finds it by the mark). It is powered off
//    only while still cordoned (and, when the cordon was the autoscaler's, still marked): an
//    operator's uncordon keeps it, and it counts as unneeded afresh. One that
//    stays NotReady for `provision_timeout` after it had registered is powered off too (and its
//    slot freed). Nodes it did not add are never touched.
// 3. Consolidate (with `consolidate_below` > 0). A node it added whose work uses less than that
//    share of it (GPUs requested / GPUs; CPU-only nodes: the larger of CPU and memory) for
//    `unneeded_for`, whose every job can move, and whose workers all fit (first fit) in the room
//    left on the other Ready nodes, is emptied and then powered off, as cluster-autoscaler's
//    utilization-based scale-down (--scale-down-utilization-threshold 0.5) and Karpenter's
//    consolidation do. One node at a time, and only while no job waits for room and no node is
//    being provisioned. The node is cordoned; Deployment replicas on it (of a Deployment that
//    exists) are labelled
//    aicloud/evict=true and their controller replaces them like replicas of an old revision
//    (the new one is started elsewhere first, within maxSurge / maxUnavailable); jobs labelled
//    aicloud/safe-to-evict=true are requeued by name (their attempt ends, not counted as a
//    failure) once no replica is left there, a turn after the cordon at the earliest. Other jobs
//    pin their node (a training job is never stopped to save a node): one found there meanwhile
//    abandons the move. It is abandoned too (node uncordoned, labels taken off, not tried again
//    for `backoff`, doubling per abandon up to `max_backoff`) when a job has waited
//    `pending_for` for room (the replacements do not fit after all) or the node is not empty
//    within `provision_timeout`. The fit check is in two steps: a coarse first fit (GPU count,
//    CPU, memory, GPU model, lanes; tainted nodes are no room, tolerations not modelled) picks
//    the candidates, then the emptiest one is kept only if the control plane's scheduler places
//    its jobs on a copy of the cluster without it (ControlPlane::WhatIfEmptied: MIG, NVLink and
//    every other filter; not quota); one it cannot place is underused afresh. The Node carries aicloud/consolidating=true meanwhile, so
//    a restarted server carries the move on. An operator's cordon, uncordon or drain drops that
//    mark (ControlPlane::CordonBy::kOperator): the move ends without touching the cordon or
//    powering the node off as consolidated. A node counts as underused only while no job waits
//    for room, no node is being provisioned and nothing else is being emptied.
// A node an operator labelled aicloud/do-not-disrupt=true is neither scaled down nor emptied: a
// move on it is abandoned, a scale-down whose cordon was written is undone (while it is still
// the autoscaler's, as above). The cordon before a
// power-off reads the label (and the mark) in the same write, so one written while a turn runs
// still counts. A node lost (NotReady for provision_timeout) is released regardless.
// A powered-off node's name is reused only once its Node is no longer Ready (its last heartbeat
// ages out), so the old machine's Node object is never taken for the new one registering.
// The nodes it added carry the label aicloud/autoscaled=true on their Node object, so a
// restarted server knows them.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "core/clock.h"
#include "core/metrics.h"
#include "core/status.h"
#include "store/store.h"

namespace aicloud::control {

class ControlPlane;

inline constexpr char kAutoscaledLabel[] = "aicloud/autoscaled";
// A job with this label set to "true" may be stopped and requeued to empty a node it runs on.
inline constexpr char kSafeToEvictLabel[] = "aicloud/safe-to-evict";
// On a Node being emptied by consolidation, so a restarted server carries the move on.
inline constexpr char kConsolidatingLabel[] = "aicloud/consolidating";
// An operator's "true" on a Node keeps the autoscaler from scaling it down or emptying it (as
// Karpenter's karpenter.sh/do-not-disrupt): a move in progress is abandoned, a scale-down that
// began is undone.
inline constexpr char kDoNotDisruptLabel[] = "aicloud/do-not-disrupt";
// On a Node the autoscaler cordoned to scale it down, with that cordon. An operator's cordon,
// uncordon or drain drops it; the autoscaler undoes its cordon (the node is kept after all) only
// while it is there, so a cordon an operator made since stays.
inline constexpr char kScaleDownLabel[] = "aicloud/scale-down";

// The capacity one new node brings.
struct NodeShape {
  int gpus = 8;
  std::string gpu_model;  // canonical catalog name ("H100"); "" = any
  int64_t cpu_millis = 64000;
  int64_t memory_mib = 512 * 1024;
};

// How nodes come and go in this environment. Calls return quickly; the node registers (its
// agent starts) some time after PowerOn.
class NodeProvisioner {
 public:
  virtual ~NodeProvisioner() = default;
  virtual Status PowerOn(const std::string& node) = 0;
  virtual Status PowerOff(const std::string& node) = 0;
  virtual NodeShape Shape() const = 0;
  // Still working on `node` (a hook running or queued): its name is not handed out again.
  virtual bool Busy(const std::string& node) const {
    (void)node;
    return false;
  }
};

// Runs the operator's hook: `<script> up <node>` and `<script> down <node>` through /bin/sh in
// the background (power on through IPMI, PXE install, start `aicloud agent --node <node>`...),
// with AICLOUD_NODE set. Hooks of one node run one at a time, in the order asked (a `down`
// never overlaps the `up` still installing that machine); different nodes' hooks run together.
// A hook still running after `timeout` is stopped (TERM, KILL 10 s later: coreutils timeout)
// and counts as failed, so one hung IPMI call cannot hold its node's later hooks forever. Its exit status and the last lines of its output are logged. A hook
// is done when its output closes: anything it leaves running must not keep stdout/stderr
// (redirect them, e.g. `nohup aicloud agent ... >/var/log/agent.log 2>&1 &`).
class ScriptProvisioner final : public NodeProvisioner {
 public:
  ScriptProvisioner(std::string script, NodeShape shape,
                    std::chrono::seconds timeout = std::chrono::seconds(900));
  ~ScriptProvisioner() override;  // waits for running hooks
  Status PowerOn(const std::string& node) override { return Run("up", node); }
  Status PowerOff(const std::string& node) override { return Run("down", node); }
  NodeShape Shape() const override { return shape_; }
  bool Busy(const std::string& node) const override;
  // Hooks finished so far with exit status 0 / other.
  int succeeded() const { return ok_.load(); }
  int failed() const { return failed_.load(); }

 private:
  Status Run(const std::string& verb, const std::string& node);

  std::string script_;
  NodeShape shape_;
  std::chrono::seconds timeout_;
  struct Hook {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  mutable std::mutex mu_;
  std::vector<Hook> running_;  // GUARDED_BY(mu_); finished ones are joined by the next Run
  std::map<std::string, std::shared_future<void>> last_;  // GUARDED_BY(mu_): per node, the newest hook
  std::atomic<int> ok_{0}, failed_{0};
};

struct NodeAutoscalerOptions {
  int max_nodes = 0;  // nodes it may add in all; 0 = off
  std::chrono::milliseconds pending_for{10000};
  std::chrono::milliseconds unneeded_for{600000};
  std::chrono::milliseconds provision_timeout{900000};
  std::chrono::milliseconds tick{2000};
  std::chrono::milliseconds backoff{300000};       // a job's second wave waits this long
  std::chrono::milliseconds max_backoff{1800000};  // doubling up to this
  double consolidate_below = 0.5;  // step 3's utilization threshold; 0 = never move work
  std::string name_prefix = "auto-";
};

class NodeAutoscaler {
 public:
  NodeAutoscaler(store::Store* store, ControlPlane* control, Clock* clock, Metrics* metrics,
                 NodeProvisioner* provisioner, NodeAutoscalerOptions options);
  ~NodeAutoscaler();  // Stop()

  Status Start();
  void Stop();
  // One pass (what the thread runs each tick; tests call it with a fake clock).
  void Turn();

  // Nodes powered on and not (yet) released, registered or not.
  int active() const;

 private:
  struct Added {
    int64_t powered_on_us = 0;
    bool registered = false;
    int64_t idle_since_us = 0;       // 0 = busy (or not yet seen idle)
    int64_t not_ready_since_us = 0;  // registered, then NotReady since; 0 = Ready
    bool cordoned = false;           // scale-down began: powered off at a later turn if still empty
    int64_t underused_since_us = 0;  // 0 = not a consolidation candidate (yet)
    int64_t consolidating_since_us = 0;  // 0 = not being emptied
    bool resumed = false;            // a move found on the Node at start: cordoned again first
    bool marked = false;             // the Node carries kConsolidatingLabel, as far as this knows
    std::set<std::string> requeued;  // "tenant/name" of the safe-to-evict jobs moved off it
    int64_t consolidate_retry_us = 0;  // an abandoned consolidation is not tried again before this
    int abandoned = 0;                 // consolidations of it abandoned: the wait doubles each time
  };
  struct Waiting {  // a job Pending as Unschedulable
    int64_t since_us = 0;
    int waves = 0;          // node waves it caused
    int64_t retry_us = 0;   // not demand again before this
  };

  std::string FreeName() const;
  // Ends `a`'s move (abandoned, or taken over by an operator): not tried again for a back-off
  // that doubles per move ended, up to max_backoff. Returns that wait in µs.
  int64_t EndMove(Added& a, int64_t now) const;

  store::Store* store_;
  ControlPlane* control_;
  Clock* clock_;
  NodeProvisioner* provisioner_;
  NodeAutoscalerOptions options_;
  Counter* powered_on_ = nullptr;
  Counter* powered_off_ = nullptr;
  Counter* consolidations_ = nullptr;

  mutable std::mutex mu_;
  std::map<std::string, Added> added_;               // GUARDED_BY(mu_)
  std::map<std::string, Waiting> waiting_;            // job key -> GUARDED_BY(mu_)
  std::set<std::string> released_;  // powered off, Node still Ready: names not reused; GUARDED_BY(mu_)
  bool loaded_ = false;                              // added_ rebuilt from Node labels
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace aicloud::control
