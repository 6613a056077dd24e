// GpuIsolation: what the agent does to a node's GPUs around each attempt, so tenants stay apart.
//
//   GpuIsolation gpus({.work_dir = "/var/lib/aicloud"});
//   json events = json::array();
//   gpus.Start(&events);       // state file, NVML, reconciliation of leftover MIG instances
//   StatusOr<std::map<std::string, std::string>> env =
//       gpus.Prepare("a-17", "bob", "train", assignment["gpus"], &events);
//   if (!env.ok()) { /* GpuSetupFailed event added; do not start the attempt */ }
//   ...
//   gpus.Release("a-17", &events);   // when the attempt has ended: MIG instance destroyed
//
// Prepare, per assigned GPU entry {"index", "milli", "memMiB", "migStart", "migProfile"}:
//  1. MIG slice: creates the GPU instance of `migProfile` at `migStart` and a compute instance
//     over it through NVML (nvml_mig.h), records it in the state file at once, and puts its
//     "MIG-<uuid>" in CUDA_VISIBLE_DEVICES. Whole GPUs keep their index, with
//     CUDA_DEVICE_ORDER=PCI_BUS_ID so CUDA's numbering is NVML's.
//  2. Memory wipe: the last tenant of every memory slice (8 per GPU; a whole GPU is all 8) is
//     kept in the state file. When a slice the attempt gets was last used by another tenant, the
//     GPU or MIG instance is wiped (gpu_wipe.h) before the attempt starts; the event says how many
//     bytes in how long. A slice never used by this agent is not wiped, unless the state file was
//     lost to corruption (then every slice counts as dirty until wiped). No CUDA on the node: the
//     GPU is refused to the other tenant (secure default) unless allow_unwiped_handover, which
//     hands it over with a Warning event.
//  3. The new tenants are written to the state file (atomic rewrite, fsync) before Prepare returns,
//     so a restarted agent cannot skip a wipe.
//  4. Fractional shares (< 1000 milli): CUDA_MPS_ACTIVE_THREAD_PERCENTAGE (milli/10, at least 1)
//     and, with a memory cap, CUDA_MPS_PINNED_DEVICE_MEM_LIMIT "0=20480M" (device index as the
//     process sees it), besides the AICLOUD_GPU_MILLI / AICLOUD_GPU_MEMORY_MIB hints. These limits
//     bind only when an MPS control daemon runs on the node; the agent does not start one.
// Any NVML or CUDA failure undoes what this Prepare created, adds a Warning "GpuSetupFailed" event
// and returns the error: the caller must not start the attempt (the server requeues it).
//
// Start: loads <work_dir>/gpu-state.json; with NVML, destroys the MIG instances this agent created
// (recorded there) that still exist — no attempt survives an agent restart — and lists the ones it
// did not create ("foreign": left alone, logged, and added to the registered node spec).
//
// `simulated` (the in-process nodes of `aicloud up`): nothing touches a device; MIG creation and
// wipes are recorded as events saying so.
//
// Every decision that reaches a GPU (create, destroy, wipe, refusal, unwiped hand-over) is an event
// {"type", "reason", "message", "tenant", "job", "gpu"} for the agent's next report.
//
// Thread-safe (one mutex); Prepare may take as long as a wipe (about a second per 80 GB GPU).
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "agent/nvml_mig.h"
#include "core/status.h"

namespace aicloud::agent {

struct GpuIsolationOptions {
  std::string work_dir;
  std::string nvml_library = "libnvidia-ml.so.1";
  std::string cuda_library = "libcuda.so.1";
  // argv of the wipe helper, before its own flags; empty: {"/proc/self/exe", "gpu-wipe"} (the
  // aicloud binary's hidden `gpu-wipe` command).
  std::vector<std::string> wipe_command;
  std::chrono::milliseconds wipe_timeout{300000};
  bool allow_unwiped_handover = false;
  bool simulated = false;
};

class GpuIsolation {
 public:
  explicit GpuIsolation(GpuIsolationOptions options);
  ~GpuIsolation();
  GpuIsolation(const GpuIsolation&) = delete;
  GpuIsolation& operator=(const GpuIsolation&) = delete;

  void Start(nlohmann::json* events);
  StatusOr<std::map<std::string, std::string>> Prepare(const std::string& attempt,
                                                       const std::string& tenant,
                                                       const std::string& job,
                                                       const nlohmann::json& gpus,
                                                       nlohmann::json* events);
  // Idempotent; a no-op for an attempt that holds nothing.
  void Release(const std::string& attempt, nlohmann::json* events);
  // Attempts holding a MIG instance.
  std::vector<std::string> Holders() const;
  // MIG instances found at Start that this agent did not create:
  // [{"gpu", "gpuInstance", "profile", "start", "size", "uuid"}].
  nlohmann::json ForeignInstances() const;

 private:
  struct Holder {
    std::string attempt, tenant, job;
  };
  struct Created {
    MigInstance instance;
    std::string profile_name;
    std::vector<Holder> holders;
  };
  struct GpuState {
    std::string uuid;
    std::vector<std::string> slices = std::vector<std::string>(8);  // last tenant per slice
  };

  Status LoadLocked();
  Status SaveLocked();
  void ReconcileLocked(nlohmann::json* events);
  Status DestroyLocked(Created& c, nlohmann::json* events, const std::string& why);
  std::string StatePath() const;

  const GpuIsolationOptions options_;
  mutable std::mutex mu_;
  std::unique_ptr<NvmlMig> nvml_;   // null when NVML is not on this node
  std::string nvml_error_;
  std::map<int, GpuState> gpus_;
  std::vector<Created> created_;
  bool all_dirty_ = false;          // the state was lost: unknown slices count as dirty
  nlohmann::json foreign_ = nlohmann::json::array();
};

// The NVIDIA device files an attempt may not open, as devices.deny lines (cgroups.h): every GPU of
// the node (`node_gpus`, the registered spec's "gpus": [{"index"}...]) that is not among the
// attempt's (`assigned`, the assignment's "gpus"): "c 195:<index> rwm" (/dev/nvidia<index>; the
// control and UVM devices stay open). A CPU-only attempt on a GPU node gets every GPU denied.
std::vector<std::string> GpuDeviceDenials(const nlohmann::json& node_gpus, const nlohmann::json& assigned);

}  // namespace aicloud::agent
