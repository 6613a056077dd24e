// The hardware catalog: datasheet facts for the GPU models aicloud schedules, their MIG
// profiles, and an hourly price the operator can override.
//
//   const GpuModelSpec* h100 = FindGpuModel("H100-SXM");   // also accepts aliases, e.g. "H100"
//   if (h100 && h100->mig) { const MigGeometry* g = FindMigGeometry(h100->name); ... }
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace aicloud::cluster {

struct GpuModelSpec {
  std::string name;              // canonical, e.g. "H100-SXM", "A100-80GB", "MI300X"
  std::vector<std::string> aliases;  // other spellings accepted on input, e.g. "H100"
  std::string vendor;            // "NVIDIA" | "AMD"
  std::string architecture;      // "Hopper", "CDNA3", ...
  double memory_gib = 0;         // device memory
  double memory_bandwidth_gbs = 0;   // GB/s
  std::string interconnect;      // "NVLink4", "PCIe Gen5", "Infinity Fabric", ...
  double nvlink_gbs = 0;         // total bidirectional GPU-to-GPU bandwidth per GPU, 0 = none
  double pcie_gbs = 0;           // bidirectional x16 host link; 0 = none (GB200: NVLink-C2C)
  double tdp_w = 0;
  bool mig = false;              // supports Multi-Instance GPU
  int nvlink_domain_gpus = 0;    // GPUs in one NVLink domain in the reference system (8, 72, ...)
                                 // 0 = no GPU-to-GPU links (PCIe-only cards)
  double price_per_hour = 0;     // default on-demand-like USD per GPU-hour; operator overrides
  std::string source;            // datasheet the facts come from
};

// The built-in catalog, in a stable order.
const std::vector<GpuModelSpec>& GpuCatalog();
// Case-insensitive lookup by canonical name or alias; nullptr when unknown.
const GpuModelSpec* FindGpuModel(std::string_view name);
// Overrides the hourly price of a model (process-wide). NotFound for an unknown model,
// InvalidArgument for a negative or non-finite price. Not thread-safe: call it during start-up,
// before other threads read the catalog.
Status SetGpuPrice(std::string_view name, double price_per_hour);

// One MIG profile of a GPU model (NVIDIA MIG user guide, "Supported MIG Profiles").
struct MigProfile {
  std::string name;              // e.g. "3g.40gb"
  int compute_slices = 0;        // the "Ng" part, of 7
  int memory_slices = 0;         // memory slices held, of 8
  double memory_gib = 0;         // nominal, the GB figure in the profile name
  int max_instances = 0;         // per GPU
  std::vector<int> starts;       // valid placement start slots (memory-slice index)
};

struct MigGeometry {
  std::string model;             // canonical model name
  std::vector<MigProfile> profiles;
};

// nullptr for a model without MIG.
const MigGeometry* FindMigGeometry(std::string_view model);
// Index of `profile` in geometry.profiles, or -1.
int FindMigProfile(const MigGeometry& geometry, std::string_view profile);

// Where `profile` can go on a GPU whose occupied memory slices are `used_mask` (bit i = slice i)
// and that already uses `used_compute` compute slices: the chosen start slot, or -1 when it
// cannot fit. Among valid starts it picks the one that leaves the most room for larger
// profiles (the highest valid start first, as nvidia-smi does for small instances).
// Precisely: the start whose placement leaves the most free aligned 4-slice blocks, then the most
// free aligned 2-slice blocks; ties go to the highest start. Deterministic. It cannot see
// per-profile instance counts; ValidateMigLayout checks those.
int FindMigStart(const MigGeometry& geometry, int profile, unsigned used_mask, int used_compute);

// Checks a complete layout (profile index, start) against the placement rules: starts valid,
// no overlapping memory slices, compute slices ≤ 7, per-profile instance limits.
Status ValidateMigLayout(const MigGeometry& geometry,
                         const std::vector<std::pair<int, int>>& instances);

}  // namespace aicloud::cluster
