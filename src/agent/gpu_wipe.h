// Clearing a GPU's (or a MIG instance's) free memory between tenants through the CUDA driver API,
// loaded at run time (libcuda.so.1, never linked).
//
// The wipe runs in a short-lived helper process, never in the agent: CUDA fixes the devices a
// process sees at cuInit (a MIG instance created afterwards, or a second MIG instance, is not
// visible to an already initialised process; NVIDIA MIG user guide, "CUDA Device Enumeration"),
// and a CUDA context left in the agent would itself hold memory on a tenant's GPU.
//
//   agent:  RunWipeHelper({"/proc/self/exe", "gpu-wipe"}, "libcuda.so.1", "MIG-8d4f...", 5min)
//   helper: aicloud gpu-wipe --cuda-library libcuda.so.1 --device MIG-8d4f...
//           -> sets CUDA_VISIBLE_DEVICES=MIG-8d4f..., WipeDeviceMemory(...), prints one JSON line
//
// WipeDeviceMemory: cuInit, the device (CUDA_VISIBLE_DEVICES names it; a UUID is checked against
// cuDeviceGetUuid_v2, a PCI bus id is looked up with cuDeviceGetByPCIBusId), its primary context,
// then cuMemAlloc_v2 of chunks (1 GiB first, halved on CUDA_ERROR_OUT_OF_MEMORY down to a 2 MiB
// floor) until no more memory can be had, cuMemsetD8_v2 zero over each, cuCtxSynchronize, free.
// What another live process holds is not touched (it cannot be allocated); what is left below the
// floor is not cleared.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace aicloud::agent {

struct WipeResult {
  int64_t bytes = 0;        // bytes set to zero
  double ms = 0;            // wall time of the whole wipe (context included)
  double memset_ms = 0;     // allocation + memset + synchronize only
  int64_t chunks = 0;
  int64_t verified_bytes = 0;  // read back as zero (check mode only)
  std::string device;       // what was wiped, as named
};

struct WipeOptions {
  int64_t first_chunk = int64_t{1} << 30;
  int64_t floor = int64_t{2} << 20;
  // gpu-check: before the wipe, fill the free memory with 0xA5; after it, read back the first
  // and last MiB of every chunk and fail unless they are zero.
  bool check = false;
};

// In this process. `device` is "GPU-<uuid>", "MIG-<uuid>", a PCI bus id ("00000000:18:00.0") or
// a CUDA ordinal ("0"); the caller sets CUDA_VISIBLE_DEVICES for UUIDs before calling (the helper
// does). UNAVAILABLE when the CUDA library cannot be loaded or lacks a symbol; INTERNAL with the
// CUDA call and its error name otherwise.
StatusOr<WipeResult> WipeDeviceMemory(const std::string& cuda_library, const std::string& device,
                                      const WipeOptions& options = {});

// The helper's main: `--cuda-library PATH --device SEL [--check]`. Prints one JSON line:
// {"ok":true,"bytes":...,"ms":...} (exit 0), {"ok":false,"error":...} (exit 1), or with
// "unavailable":true when CUDA cannot be loaded (exit 3). Bad arguments: exit 2.
int GpuWipeMain(int argc, char** argv);

// Runs `command` + {"--cuda-library", cuda_library, "--device", device} and parses its answer.
// The helper is killed after `timeout`. UNAVAILABLE when the helper says CUDA cannot be loaded;
// INTERNAL for any other failure (the helper's error, a crash, a timeout, unreadable output).
StatusOr<WipeResult> RunWipeHelper(const std::vector<std::string>& command,
                                   const std::string& cuda_library, const std::string& device,
                                   std::chrono::milliseconds timeout);

}  // namespace aicloud::agent
