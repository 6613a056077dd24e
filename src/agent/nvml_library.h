// NvmlLibrary: libnvidia-ml loaded at run time (dlopen) and initialised (nvmlInit_v2), shut down
// and closed when destroyed. GpuDiscovery (metrics, inventory) and NvmlMig (MIG instances) each
// open one and resolve the entry points they use through it, so the agent binary never links
// NVML and runs the same on CPU-only nodes.
//
//   StatusOr<std::unique_ptr<NvmlLibrary>> nvml = NvmlLibrary::Open("libnvidia-ml.so.1");
//   nvmlReturn_t (*count)(unsigned*) = nullptr;
//   if (!(*nvml)->Resolve("nvmlDeviceGetCount_v2", &count)) ...   // a driver without it
//   (*nvml)->ErrorString(rc)                                       // "Insufficient Resources"
//
// Thread-safe: NVML itself is, and the object holds nothing mutable after Open.
#pragma once

#include <memory>
#include <string>

#include "core/status.h"

namespace aicloud::agent {

class NvmlLibrary {
 public:
  // UNAVAILABLE "NVML not found: <library>: <dlerror>" when it cannot be loaded, "NVML:
  // <symbol> missing in <library>" without nvmlInit_v2 or nvmlShutdown, "NVML init failed:
  // <nvmlErrorString>" when initialisation fails (no driver).
  static StatusOr<std::unique_ptr<NvmlLibrary>> Open(const std::string& library);
  ~NvmlLibrary();  // nvmlShutdown, dlclose
  NvmlLibrary(const NvmlLibrary&) = delete;
  NvmlLibrary& operator=(const NvmlLibrary&) = delete;

  // Points *fn at `symbol`; false (and *fn nullptr) when the library lacks it.
  template <typename F>
  bool Resolve(const char* symbol, F* fn) const {
    *fn = reinterpret_cast<F>(Symbol(symbol));
    return *fn != nullptr;
  }
  // nvmlErrorString(rc), or "NVML error <rc>" when the library has no such function.
  std::string ErrorString(int rc) const;
  const std::string& library() const { return library_; }

 private:
  NvmlLibrary() = default;
  void* Symbol(const char* symbol) const;

  std::string library_;
  void* handle_ = nullptr;
  int (*shutdown_)() = nullptr;
  const char* (*error_string_)(int) = nullptr;
};

}  // namespace aicloud::agent
