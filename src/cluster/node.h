// The cluster model the scheduler reads and changes: nodes with CPU, memory and GPUs, the
// topology around them (NUMA, PCIe switch, NVLink domain, rack, leaf switch), and the
// allocations placed on them.
//
// A Node is plain data. Its free counters change only through Cluster::Allocate/Release, which
// also bump Node::version so caches keyed on a node's state (the scheduler's per-node score memo)
// know it changed.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace aicloud::cluster {

// Index into Cluster::models(); kNoModel for a CPU-only node.
using ModelId = int16_t;
inline constexpr ModelId kNoModel = -1;

inline constexpr int32_t kMilliPerGpu = 1000;
// Memory slices of a MIG-capable GPU (NVIDIA's MIG user guide: 8 memory slices, 7 compute).
inline constexpr int kMigMemorySlices = 8;

struct Gpu {
  int32_t free_milli = kMilliPerGpu;  // time-sliced compute share left, 0..1000
  int64_t mem_mib = 0;                // device memory
  int64_t mem_free_mib = 0;           // memory not promised to a fractional share
  int16_t numa = 0;
  int16_t pcie_switch = -1;
  int32_t nvlink_domain = -1;         // cluster-wide id; GPUs sharing it talk over NVLink
  // MIG: bit i set = memory slice i is held by an instance; compute slices in use (of 7).
  uint8_t mig_used_mask = 0;
  int8_t mig_compute_used = 0;
  int16_t mig_instances = 0;
  int16_t shares = 0;                 // fractional tasks sharing this GPU

  bool whole_free() const { return free_milli == kMilliPerGpu && mig_instances == 0; }
  bool mig_active() const { return mig_instances > 0; }
};

struct Taint {
  std::string key;
  std::string value;
  // NoSchedule: a request must tolerate it to land here.
  std::string effect = "NoSchedule";
};

struct Node {
  std::string name;
  int32_t id = -1;
  ModelId model = kNoModel;
  int64_t cpu_milli = 0;
  int64_t mem_mib = 0;
  int64_t cpu_free_milli = 0;
  int64_t mem_free_mib = 0;
  std::vector<Gpu> gpus;
  int32_t rack = -1;
  int32_t leaf_switch = -1;
  std::string pool;  // the lane (e.g. "training", "inference"); empty = default
  std::map<std::string, std::string> labels;
  std::vector<Taint> taints;
  bool unschedulable = false;  // cordoned
  int64_t pods = 0;
  // Bumped on every change to the fields the scheduler reads.
  uint64_t version = 0;

  int gpu_count() const { return static_cast<int>(gpus.size()); }
  int32_t gpu_free_milli_total() const {
    int32_t s = 0;
    for (const Gpu& g : gpus) s += g.free_milli;
    return s;
  }
};

struct Rack {
  std::string name;
  double power_budget_kw = 0;  // 0 = unlimited
  double power_used_kw = 0;
  std::string cooling = "air";  // air | liquid
  int32_t leaf_switch = -1;
};

// What one placed task holds on one GPU.
struct GpuShare {
  int16_t gpu = -1;
  int32_t milli = 0;        // 1000 for a whole GPU or a MIG instance's GPU time
  int64_t mem_mib = 0;      // memory cap of a fractional share
  int8_t mig_profile = -1;  // index into the model's MIG profile table
  int8_t mig_start = -1;    // first memory slice
  int8_t mig_slices = 0;    // memory slices held
  int8_t mig_compute = 0;   // compute slices held
};

// Everything a placed task holds on its node.
struct Allocation {
  int32_t node = -1;
  int64_t cpu_milli = 0;
  int64_t mem_mib = 0;
  double power_kw = 0;
  std::vector<GpuShare> gpus;
};

}  // namespace aicloud::cluster
