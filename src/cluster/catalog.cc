#include "cluster/catalog.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

// Every number below is cited in docs/hardware-catalog.md, which also lists the choices made where
// a datasheet offers several SKUs (B200 180 GB, P100 PCIe, V100 SXM2, ...). Keep the two in sync.

namespace aicloud::cluster {
namespace {

// A MIG-capable GPU has 8 memory slices and 7 compute (SM) slices (MIG user guide, "Concepts").
constexpr int kMemorySlices = 8;
constexpr int kComputeSlices = 7;

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

GpuModelSpec Spec(std::string name, std::vector<std::string> aliases, std::string vendor,
                  std::string architecture, double memory_gib, double memory_bandwidth_gbs,
                  std::string interconnect, double nvlink_gbs, double pcie_gbs, double tdp_w,
                  bool mig, int nvlink_domain_gpus, double price_per_hour, std::string source) {
  GpuModelSpec s;
  s.name = std::move(name);
  s.aliases = std::move(aliases);
  s.vendor = std::move(vendor);
  s.architecture = std::move(architecture);
  s.memory_gib = memory_gib;
  s.memory_bandwidth_gbs = memory_bandwidth_gbs;
  s.interconnect = std::move(interconnect);
  s.nvlink_gbs = nvlink_gbs;
  s.pcie_gbs = pcie_gbs;
  s.tdp_w = tdp_w;
  s.mig = mig;
  s.nvlink_domain_gpus = nvlink_domain_gpus;
  s.price_per_hour = price_per_hour;
  s.source = std::move(source);
  return s;
}

std::vector<GpuModelSpec> BuildCatalog() {
  // PCIe figures are the bidirectional x16 numbers NVIDIA's datasheets quote (Gen3 32, Gen4 64,
  // Gen5 128 GB/s). nvlink_domain_gpus = 0 means the GPU has no NVLink/Infinity Fabric peers in
  // its reference system. Prices are rough on-demand defaults, meant to be overridden.
  std::vector<GpuModelSpec> c;
  c.push_back(Spec("A100-40GB", {"A100-SXM4-40GB"}, "NVIDIA", "Ampere", 40, 1555, "NVLink3", 600,
                   64, 400, true, 8, 3.00,
                   "NVIDIA A100 Tensor Core GPU datasheet, A100 40GB SXM column"));
  c.push_back(Spec("A100-80GB", {"A100", "A100-SXM4-80GB"}, "NVIDIA", "Ampere", 80, 2039,
                   "NVLink3", 600, 64, 400, true, 8, 3.50,
                   "NVIDIA A100 Tensor Core GPU datasheet, A100 80GB SXM column"));
  c.push_back(Spec("H100-SXM", {"H100", "H100-SXM5", "H100-SXM5-80GB"}, "NVIDIA", "Hopper", 80,
                   3350, "NVLink4", 900, 128, 700, true, 8, 4.00,
                   "NVIDIA H100 Tensor Core GPU datasheet, H100 SXM column"));
  // The PCIe card pairs over an NVLink bridge, so its NVLink domain is two GPUs.
  c.push_back(Spec("H100-PCIE", {"H100-PCIE-80GB"}, "NVIDIA", "Hopper", 80, 2000,
                   "PCIe Gen5 + NVLink bridge", 600, 128, 350, true, 2, 3.00,
                   "NVIDIA H100 Tensor Core GPU datasheet, H100 PCIe column (TDP 300-350 W)"));
  c.push_back(Spec("H200", {"H200-SXM", "H200-SXM5", "H200-141GB"}, "NVIDIA", "Hopper", 141, 4800,
                   "NVLink4", 900, 128, 700, true, 8, 5.00,
                   "NVIDIA H200 Tensor Core GPU datasheet, H200 SXM column"));
  // 180 GB usable per GPU: DGX/HGX B200 quote 1,440 GB for 8 GPUs and the MIG guide lists B200 as
  // 180GB (7g.180gb); the 192 GB figure is the raw HBM3e stack capacity.
  c.push_back(Spec("B200", {"HGX-B200", "B200-SXM"}, "NVIDIA", "Blackwell", 180, 8000, "NVLink5",
                   1800, 128, 1000, true, 8, 6.00,
                   "NVIDIA HGX B200 / DGX B200 datasheet (1,440 GB, 8 TB/s per GPU, 1.8 TB/s "
                   "NVLink); MIG user guide 'Supported GPUs' (B200 180GB)"));
  // GB200 reaches its host (Grace) over NVLink-C2C, not PCIe, hence pcie_gbs 0. The per-GPU power
  // is not in the NVL72 datasheet; 1200 W is NVIDIA's GB200 GPU configuration point.
  c.push_back(Spec("GB200", {"GB200-NVL72", "GB200NVL72"}, "NVIDIA", "Blackwell", 186, 8000,
                   "NVLink5 + NVLink-C2C", 1800, 0, 1200, true, 72, 8.00,
                   "NVIDIA GB200 NVL72 datasheet (13.4 TB HBM3e, 576 TB/s, 130 TB/s NVLink over 72 "
                   "GPUs); MIG user guide 'Supported GPUs' (GB200 186GB)"));
  c.push_back(Spec("L40S", {"L40S-48GB"}, "NVIDIA", "Ada Lovelace", 48, 864, "PCIe Gen4", 0, 64,
                   350, false, 0, 1.50, "NVIDIA L40S GPU datasheet"));
  c.push_back(Spec("RTX4090", {"RTX-4090", "GeForce-RTX-4090"}, "NVIDIA", "Ada Lovelace", 24,
                   1008, "PCIe Gen4", 0, 64, 450, false, 0, 0.50,
                   "NVIDIA GeForce RTX 4090 specifications (24 GB GDDR6X, 384-bit, 21 Gbps)"));
  c.push_back(Spec("T4", {"Tesla-T4"}, "NVIDIA", "Turing", 16, 320, "PCIe Gen3", 0, 32, 70, false,
                   0, 0.35, "NVIDIA T4 Tensor Core GPU datasheet / T4 product brief"));
  // The openb trace spells V100s as V100M16 / V100M32; its 4- and 8-GPU nodes are taken as SXM2.
  c.push_back(Spec("V100-16GB", {"V100M16", "V100-SXM2-16GB"}, "NVIDIA", "Volta", 16, 900,
                   "NVLink2", 300, 32, 300, false, 8, 2.50,
                   "NVIDIA Tesla V100 GPU datasheet, V100 SXM2 column"));
  c.push_back(Spec("V100-32GB", {"V100M32", "V100-SXM2-32GB"}, "NVIDIA", "Volta", 32, 900,
                   "NVLink2", 300, 32, 300, false, 8, 2.75,
                   "NVIDIA Tesla V100 GPU datasheet, V100 SXM2 column"));
  // The openb P100 nodes hold one or two GPUs, so the PCIe 16GB card is the one modelled.
  c.push_back(Spec("P100", {"P100-16GB", "P100-PCIE-16GB", "Tesla-P100"}, "NVIDIA", "Pascal", 16,
                   732, "PCIe Gen3", 0, 32, 250, false, 0, 1.50,
                   "NVIDIA Tesla P100 datasheet, P100 for PCIe 16GB column"));
  c.push_back(Spec("A10", {"A10-24GB"}, "NVIDIA", "Ampere", 24, 600, "PCIe Gen4", 0, 64, 150,
                   false, 0, 1.00, "NVIDIA A10 Tensor Core GPU datasheet"));
  // AMD quotes Infinity Fabric per link; the figure here is 7 links x per-link bandwidth, which is
  // what each OAM module has to its 7 peers on an 8-GPU UBB.
  c.push_back(Spec("MI300X", {"MI300X-192GB", "Instinct-MI300X"}, "AMD", "CDNA3", 192, 5300,
                   "Infinity Fabric", 896, 128, 750, false, 8, 4.00,
                   "AMD Instinct MI300X accelerator data sheet (7 x 128 GB/s IF links)"));
  c.push_back(Spec("MI325X", {"MI325X-256GB", "Instinct-MI325X"}, "AMD", "CDNA3", 256, 6000,
                   "Infinity Fabric", 896, 128, 1000, false, 8, 4.50,
                   "AMD Instinct MI325X accelerator data sheet (7 x 128 GB/s IF links)"));
  c.push_back(Spec("MI355X", {"MI355X-288GB", "Instinct-MI355X"}, "AMD", "CDNA4", 288, 8000,
                   "Infinity Fabric", 1075.2, 128, 1400, false, 8, 6.00,
                   "AMD Instinct MI355X accelerator data sheet (7 x 153.6 GB/s IF links)"));
  return c;
}

// Process-wide mutable copy so SetGpuPrice can override prices. Never destroyed (no exit-time
// destructor ordering problems); never resized, so pointers into it stay valid.
std::vector<GpuModelSpec>& MutableCatalog() {
  static auto* catalog = new std::vector<GpuModelSpec>(BuildCatalog());
  return *catalog;
}

GpuModelSpec* FindMutable(std::string_view name) {
  for (GpuModelSpec& spec : MutableCatalog()) {
    if (EqualsIgnoreCase(spec.name, name)) return &spec;
  }
  // Canonical names win over aliases, so an alias can never shadow another model's name.
  for (GpuModelSpec& spec : MutableCatalog()) {
    for (const std::string& alias : spec.aliases) {
      if (EqualsIgnoreCase(alias, name)) return &spec;
    }
  }
  return nullptr;
}

MigProfile Profile(std::string name, int compute, int memory_slices, double memory_gib,
                   int max_instances, std::vector<int> starts) {
  MigProfile p;
  p.name = std::move(name);
  p.compute_slices = compute;
  p.memory_slices = memory_slices;
  p.memory_gib = memory_gib;
  p.max_instances = max_instances;
  p.starts = std::move(starts);
  return p;
}

// All MIG GPUs in the catalog share one placement geometry (nvidia-smi mig -lgipp):
//   1g (1 slice) {0..6}:1, 1g (2 slices) {0,2,4,6}:2, 2g {0,2,4}:2, 3g {0,4}:4, 4g {0}:4,
//   7g {0}:8.
// Only the memory sizes in the profile names differ. Media-extension (+me) profiles are left out:
// they share the plain 1g profile's placement and are limited to one per GPU, which FindMigStart
// cannot see from a slice mask.
// `gb` holds the nominal GB in the names of the 1g-1slice, 1g-2slice/2g, 3g/4g and 7g profiles.
MigGeometry Geometry(std::string model, double gb1, double gb2, double gb4, double gb8) {
  auto fmt = [](int compute, double gb) {
    return std::to_string(compute) + "g." + std::to_string(static_cast<int>(gb)) + "gb";
  };
  MigGeometry g;
  g.model = std::move(model);
  g.profiles = {
      Profile(fmt(1, gb1), 1, 1, gb1, 7, {0, 1, 2, 3, 4, 5, 6}),
      Profile(fmt(1, gb2), 1, 2, gb2, 4, {0, 2, 4, 6}),
      Profile(fmt(2, gb2), 2, 2, gb2, 3, {0, 2, 4}),
      Profile(fmt(3, gb4), 3, 4, gb4, 2, {0, 4}),
      Profile(fmt(4, gb4), 4, 4, gb4, 1, {0}),
      Profile(fmt(7, gb8), 7, 8, gb8, 1, {0}),
  };
  return g;
}

const std::vector<MigGeometry>& MigGeometries() {
  static const auto* geometries = new std::vector<MigGeometry>{
      // MIG user guide, "Supported MIG Profiles", A100 table (A100-SXM4-40GB).
      Geometry("A100-40GB", 5, 10, 20, 40),
      // Same guide: the A100-80GB names scale with memory (1g.10gb ... 7g.80gb).
      Geometry("A100-80GB", 10, 20, 40, 80),
      // H100 table; the guide lists H100-SXM5 and H100-PCIE 80GB with the same profiles.
      Geometry("H100-SXM", 10, 20, 40, 80),
      Geometry("H100-PCIE", 10, 20, 40, 80),
      // H200 table.
      Geometry("H200", 18, 35, 71, 141),
      // B200 table.
      Geometry("B200", 23, 45, 90, 180),
      // The guide has no GB200 profile table; names from NVIDIA mig-parted's default config for
      // production GB200 boards (1g.23gb, 1g.47gb, 2g.47gb, 3g.93gb, 4g.93gb, 7g.186gb).
      Geometry("GB200", 23, 47, 93, 186),
  };
  return *geometries;
}

unsigned SliceMask(int start, int slices) {
  return ((1u << slices) - 1u) << start;
}

// How much room a memory-slice mask leaves for larger profiles: free aligned 4-slice blocks
// (3g/4g placements) first, then free aligned 2-slice blocks (1g-2slice/2g placements).
int RoomScore(unsigned used_mask) {
  int fours = 0;
  int twos = 0;
  for (int s = 0; s < kMemorySlices; s += 4) {
    if ((used_mask & SliceMask(s, 4)) == 0) ++fours;
  }
  for (int s = 0; s < kMemorySlices; s += 2) {
    if ((used_mask & SliceMask(s, 2)) == 0) ++twos;
  }
  return fours * 16 + twos;  // twos <= 4, so fours dominate
}

std::string JoinStarts(const std::vector<int>& starts) {
  std::string out;
  for (size_t i = 0; i < starts.size(); ++i) {
    if (i > 0) out += ",";
    out += std::to_string(starts[i]);
  }
  return out;
}

}  // namespace

const std::vector<GpuModelSpec>& GpuCatalog() { return MutableCatalog(); }

const GpuModelSpec* FindGpuModel(std::string_view name) { return FindMutable(name); }

Status SetGpuPrice(std::string_view name, double price_per_hour) {
  GpuModelSpec* spec = FindMutable(name);
  if (spec == nullptr) {
    return NotFoundError("unknown GPU model '" + std::string(name) + "'");
  }
  if (!std::isfinite(price_per_hour) || price_per_hour < 0) {
    return InvalidArgumentError("price for " + spec->name + " must be a finite number >= 0");
  }
  spec->price_per_hour = price_per_hour;
  return OkStatus();
}

const MigGeometry* FindMigGeometry(std::string_view model) {
  const GpuModelSpec* spec = FindGpuModel(model);
  if (spec == nullptr || !spec->mig) return nullptr;
  for (const MigGeometry& g : MigGeometries()) {
    if (g.model == spec->name) return &g;
  }
  return nullptr;
}

int FindMigProfile(const MigGeometry& geometry, std::string_view profile) {
  for (size_t i = 0; i < geometry.profiles.size(); ++i) {
    if (EqualsIgnoreCase(geometry.profiles[i].name, profile)) return static_cast<int>(i);
  }
  return -1;
}

int FindMigStart(const MigGeometry& geometry, int profile, unsigned used_mask, int used_compute) {
  if (profile < 0 || profile >= static_cast<int>(geometry.profiles.size())) return -1;
  const MigProfile& p = geometry.profiles[profile];
  if (used_compute < 0 || used_compute + p.compute_slices > kComputeSlices) return -1;
  int best_start = -1;
  int best_score = -1;
  for (int start : p.starts) {
    if (start < 0 || start + p.memory_slices > kMemorySlices) continue;
    const unsigned mask = SliceMask(start, p.memory_slices);
    if ((used_mask & mask) != 0) continue;
    const int score = RoomScore(used_mask | mask);
    // Ties go to the higher start: small instances pack from the top, keeping slice 0 (the only
    // start of 4g and 7g) free longest.
    if (score > best_score || (score == best_score && start > best_start)) {
      best_score = score;
      best_start = start;
    }
  }
  return best_start;
}

Status ValidateMigLayout(const MigGeometry& geometry,
                         const std::vector<std::pair<int, int>>& instances) {
  std::array<int, kMemorySlices> owner;  // index into `instances` holding each slice, or -1
  owner.fill(-1);
  std::vector<int> counts(geometry.profiles.size(), 0);
  int compute = 0;
  for (size_t i = 0; i < instances.size(); ++i) {
    const auto [index, start] = instances[i];
    if (index < 0 || index >= static_cast<int>(geometry.profiles.size())) {
      return InvalidArgumentError(geometry.model + ": instance " + std::to_string(i) +
                                  " has unknown MIG profile index " + std::to_string(index));
    }
    const MigProfile& p = geometry.profiles[index];
    const std::string where = geometry.model + ": " + p.name + " at start " + std::to_string(start);
    if (std::find(p.starts.begin(), p.starts.end(), start) == p.starts.end()) {
      return InvalidArgumentError(where + " is not a valid placement (valid starts: " +
                                  JoinStarts(p.starts) + ")");
    }
    for (int s = start; s < start + p.memory_slices; ++s) {
      if (owner[s] >= 0) {
        const auto [other_index, other_start] = instances[owner[s]];
        return InvalidArgumentError(where + " overlaps memory slice " + std::to_string(s) +
                                    " held by " + geometry.profiles[other_index].name +
                                    " at start " + std::to_string(other_start));
      }
      owner[s] = static_cast<int>(i);
    }
    compute += p.compute_slices;
    if (compute > kComputeSlices) {
      return InvalidArgumentError(where + " brings compute slices to " + std::to_string(compute) +
                                  " > " + std::to_string(kComputeSlices));
    }
    if (++counts[index] > p.max_instances) {
      return InvalidArgumentError(where + " exceeds the limit of " +
                                  std::to_string(p.max_instances) + " " + p.name +
                                  " instance(s) per GPU");
    }
  }
  return OkStatus();
}

}  // namespace aicloud::cluster
