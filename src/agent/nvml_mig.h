// MIG instances through NVML, loaded at run time like gpu_discovery.h: the agent creates the GPU
// instance the scheduler placed (profile + start slot), one compute instance spanning it, finds
// the MIG device's UUID for CUDA_VISIBLE_DEVICES, and destroys both when the attempt ends.
//
//   StatusOr<std::unique_ptr<NvmlMig>> nvml = NvmlMig::Open("libnvidia-ml.so.1");
//   StatusOr<MigProfileIds> ids = MigProfileIdsFor(3, 4);          // "3g.40gb": 3 compute, 4 memory
//   StatusOr<MigInstance> m = (*nvml)->Create(0, *ids, /*start=*/4);
//   // m->uuid == "MIG-8d4f...": CUDA_VISIBLE_DEVICES=MIG-8d4f...
//   (*nvml)->Destroy(*m);                                           // compute instance, then GPU instance
//
// Every NVML failure comes back as a Status whose message names the call, the GPU and NVML's
// own error string, e.g. "nvmlDeviceCreateGpuInstanceWithPlacement(GPU 0, profile 9, start 6):
// Insufficient Resources" (FAILED_PRECONDITION for NOT_SUPPORTED / INSUFFICIENT_RESOURCES /
// IN_USE, UNAVAILABLE for a missing library or symbol, INTERNAL otherwise).
//
// Only the NVML entry points used here are declared in the .cc, with the types and constants of
// nvml.h (NVML API reference, "Multi Instance GPU Management"). Nothing here changes MIG mode.
//
// Thread-compatible: NVML is thread-safe, but Create/Destroy on one GPU should not race (the
// agent calls them under its lock).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "agent/nvml_library.h"
#include "core/status.h"

namespace aicloud::agent {

// NVML's ids for a MIG profile: NVML_GPU_INSTANCE_PROFILE_* and the compute instance profile
// (NVML_COMPUTE_INSTANCE_PROFILE_*) that spans the whole GPU instance.
struct MigProfileIds {
  unsigned gpu_instance = 0;
  unsigned compute_instance = 0;
  int memory_slices = 0;  // the placement size
};

// (compute slices, memory slices) of a catalog profile -> NVML ids:
//   1g/1 slice -> 1_SLICE (0x0)       1g/2 slices -> 1_SLICE_REV2 (0x9)   2g -> 2_SLICE (0x1)
//   3g -> 3_SLICE (0x2)               4g -> 4_SLICE (0x3)                 7g -> 7_SLICE (0x4)
// INVALID_ARGUMENT for any other pair.
StatusOr<MigProfileIds> MigProfileIdsFor(int compute_slices, int memory_slices);

struct MigInstance {
  int gpu = -1;               // NVML index of the parent GPU
  std::string gpu_uuid;       // parent's "GPU-..."
  unsigned gi_id = 0;         // GPU instance id
  unsigned profile_id = 0;    // NVML GPU instance profile id
  int start = 0, size = 0;    // placement, in memory slices
  std::vector<unsigned> ci_ids;  // its compute instances
  std::string uuid;           // "MIG-..." of the first compute instance's MIG device ("" if none)
};

class NvmlMig {
 public:
  // UNAVAILABLE when the library cannot be loaded, lacks a MIG symbol, or nvmlInit_v2 fails.
  static StatusOr<std::unique_ptr<NvmlMig>> Open(const std::string& library);
  ~NvmlMig();  // nvmlShutdown, dlclose
  NvmlMig(const NvmlMig&) = delete;
  NvmlMig& operator=(const NvmlMig&) = delete;

  StatusOr<int> DeviceCount();
  StatusOr<std::string> Uuid(int gpu);
  StatusOr<std::string> Name(int gpu);
  // Current MIG mode (read only).
  StatusOr<bool> MigEnabled(int gpu);

  // Creates the GPU instance at `start` and one compute instance over all of it. When the
  // compute instance cannot be made, the GPU instance is destroyed again before returning.
  StatusOr<MigInstance> Create(int gpu, const MigProfileIds& ids, int start);
  // Destroys every compute instance of the GPU instance, then the GPU instance. NOT_FOUND when
  // the GPU instance no longer exists.
  Status Destroy(const MigInstance& instance);
  // The GPU instances that exist on `gpu` now (any creator), with their compute instances.
  StatusOr<std::vector<MigInstance>> List(int gpu);

  struct Api;  // resolved function pointers (defined in the .cc)

 private:
  NvmlMig() = default;
  StatusOr<void*> Device(int gpu);
  Status Check(int rc, const std::string& call);
  StatusOr<std::string> MigUuid(void* device, unsigned gi_id, unsigned ci_id);
  StatusOr<std::vector<unsigned>> ComputeInstanceIds(void* gpu_instance);

  std::unique_ptr<NvmlLibrary> lib_;
  std::unique_ptr<Api> api_;
};

}  // namespace aicloud::agent
