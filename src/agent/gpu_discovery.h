// GPU discovery through NVML, loaded at run time: the agent binary never links libnvidia-ml, so
// the same build runs on CPU-only nodes (Open says UNAVAILABLE) and on GPU nodes.
//
//   StatusOr<std::unique_ptr<GpuDiscovery>> nvml = GpuDiscovery::Open();
//   if (!nvml.ok()) {
//     // UNAVAILABLE: NVML not found: libnvidia-ml.so.1: cannot open shared object file: ...
//     LOG(nvml.status().ToString());               // run CPU-only
//   } else {
//     for (const GpuInfo& g : (*nvml)->Devices()) Register(g);   // once, at start-up
//     for (const GpuSample& s : (*nvml)->Sample()) Push(s);       // every heartbeat
//   }
//   std::string model = CatalogModelForNvmlName("NVIDIA H100 80GB HBM3");   // "H100-SXM"
//
// Only the handful of NVML entry points used here are declared (types copied from nvml.h).
// A symbol an old driver lacks, or a query a device refuses (NVML_ERROR_NOT_SUPPORTED), leaves
// that field at its "not reported" value (-1, "" or empty) rather than failing the whole call.
//
// Thread-safe: NVML itself is; the object holds no mutable state after Open.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "agent/nvml_library.h"
#include "core/status.h"

namespace aicloud::agent {

struct GpuInfo {
  int index = 0;
  std::string name;        // NVML product name, "NVIDIA H100 80GB HBM3"
  std::string uuid;        // "GPU-8d4f..."
  std::string pci_bus_id;  // "00000000:18:00.0"
  int64_t memory_bytes = 0;
  bool mig_enabled = false;  // current MIG mode
  int numa_node = -1;        // NVML (nvmlDeviceGetNumaNodeId) or sysfs numa_node; -1 unknown
  std::vector<int> nvlink_peers;  // indices of GPUs this one reaches over NVLink (P2P status)
};

struct GpuSample {
  int index = 0;
  // -1 = not reported.
  double utilization_pct = -1;
  double memory_used_bytes = -1;
  double temperature_c = -1;
  double power_w = -1;
};

class GpuDiscovery {
 public:
  // dlopens `library` and initialises NVML. UNAVAILABLE "NVML not found: <library>: <dlerror>"
  // when the library cannot be loaded, "NVML: <symbol> missing" when a required symbol is
  // absent, "NVML init failed: <nvmlErrorString>" when nvmlInit_v2 fails (no driver).
  static StatusOr<std::unique_ptr<GpuDiscovery>> Open(
      const std::string& library = "libnvidia-ml.so.1");
  ~GpuDiscovery();  // nvmlShutdown, dlclose
  GpuDiscovery(const GpuDiscovery&) = delete;
  GpuDiscovery& operator=(const GpuDiscovery&) = delete;

  // One entry per device NVML reports, in NVML index order.
  std::vector<GpuInfo> Devices();
  std::vector<GpuSample> Sample();

  struct Api;  // the resolved function pointers (defined in the .cc)

 private:
  GpuDiscovery() = default;
  std::unique_ptr<NvmlLibrary> lib_;
  std::unique_ptr<Api> api_;
};

// Maps an NVML product name to the canonical model name of src/cluster/catalog.h, "" when the
// product is not in the catalog (or is ambiguous). Case-insensitive; the "NVIDIA", "Tesla" and
// "GeForce" brand words are ignored. Examples:
//   "NVIDIA H100 80GB HBM3" -> "H100-SXM"     "NVIDIA H100 PCIe" -> "H100-PCIE"
//   "NVIDIA A100-SXM4-40GB" -> "A100-40GB"    "NVIDIA A100 80GB PCIe" -> "A100-80GB"
//   "Tesla T4" -> "T4"                        "Tesla V100-SXM2-32GB" -> "V100-32GB"
//   "NVIDIA H100 NVL" -> "" (94 GB card, not in the catalog)   "NVIDIA A10G" -> ""
// The A100 and V100 catalog entries carry SXM datasheet figures; PCIe cards of the same memory
// size map to them too, since the scheduler matches on the model name.
std::string CatalogModelForNvmlName(std::string_view nvml_name);

}  // namespace aicloud::agent
