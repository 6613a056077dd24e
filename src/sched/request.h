// PodRequest: one schedulable unit of work (a pod, or one worker of a gang) and what it asks for.
//
// GPU request forms (one of): whole GPUs {count, models, topology}; a MIG profile; or a fraction
// {milli, memory cap} (a time-sliced share of one GPU). CPU-only work asks for none.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cluster/node.h"

namespace aicloud::sched {

enum class GpuKind : uint8_t { kNone, kWhole, kFraction, kMig };

// Where the GPUs of a multi-GPU request (or the workers of a gang) must sit.
enum class Topology : uint8_t {
  kNone,    // anywhere
  kNode,    // all on one node (always true for one pod)
  kNvlink,  // all in one NVLink domain
  kRack,    // all in one rack
};

struct Toleration {
  std::string key;
  std::string value;     // ignored when op_exists
  bool op_exists = false;
  std::string effect;    // empty = any effect
};

struct GangSpec {
  std::string name;       // empty = not part of a gang
  int size = 1;           // workers in the gang
  int min_available = 1;  // workers that must be placed together before any binds
};

struct PodRequest {
  std::string name;
  int64_t uid = 0;
  int64_t cpu_milli = 0;
  int64_t mem_mib = 0;

  GpuKind gpu_kind = GpuKind::kNone;
  int gpu_count = 0;          // whole GPUs (1 for kFraction and kMig)
  int32_t gpu_milli = 0;      // per GPU: 1000 for whole GPUs, 1..999 for a fraction
  int64_t gpu_mem_mib = 0;    // memory cap of a fractional share (0 = no cap)
  std::string mig_profile;    // e.g. "3g.40gb"
  // Allowed GPU models; empty = any.
  std::vector<cluster::ModelId> gpu_models;
  Topology topology = Topology::kNone;

  std::vector<Toleration> tolerations;
  std::string pool;           // lane; empty = any pool whose taints it tolerates
  int32_t priority = 0;
  bool preemptible = true;
  std::string queue;          // tenant queue; empty = no quota accounting
  GangSpec gang;

  // Interned id of the fields filters and scores read (see ShapeTable). Set by the scheduler.
  int32_t shape = -1;

  bool wants_gpu() const { return gpu_kind != GpuKind::kNone; }
  // GPUs requested in milli (count × milli; a MIG instance counts as one GPU's worth of its
  // compute slices, see Scheduler).
  int64_t total_gpu_milli() const { return static_cast<int64_t>(gpu_count) * gpu_milli; }
};

// Builds the three request forms with their invariants.
PodRequest WholeGpus(int count, int64_t cpu_milli, int64_t mem_mib);
PodRequest FractionalGpu(int32_t milli, int64_t gpu_mem_mib, int64_t cpu_milli, int64_t mem_mib);
PodRequest MigInstance(std::string profile, int64_t cpu_milli, int64_t mem_mib);
PodRequest CpuOnly(int64_t cpu_milli, int64_t mem_mib);

}  // namespace aicloud::sched
