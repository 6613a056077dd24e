#include "cluster/catalog.h"

#include <algorithm>
#include <cctype>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

namespace aicloud::cluster {
namespace {

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// ---------------------------------------------------------------------------------------------
// GPU models

struct ModelFacts {
  const char* name;
  const char* vendor;
  double memory_gib;
  double bandwidth_gbs;
  double nvlink_gbs;
  double tdp_w;
  bool mig;
  int nvlink_domain;
};

// Datasheet values (docs/hardware-catalog.md). A change here must be a deliberate data change.
const ModelFacts kFacts[] = {
    {"A100-40GB", "NVIDIA", 40, 1555, 600, 400, true, 8},
    {"A100-80GB", "NVIDIA", 80, 2039, 600, 400, true, 8},
    {"H100-SXM", "NVIDIA", 80, 3350, 900, 700, true, 8},
    {"H100-PCIE", "NVIDIA", 80, 2000, 600, 350, true, 2},
    {"H200", "NVIDIA", 141, 4800, 900, 700, true, 8},
    {"B200", "NVIDIA", 180, 8000, 1800, 1000, true, 8},
    {"GB200", "NVIDIA", 186, 8000, 1800, 1200, true, 72},
    {"L40S", "NVIDIA", 48, 864, 0, 350, false, 0},
    {"RTX4090", "NVIDIA", 24, 1008, 0, 450, false, 0},
    {"T4", "NVIDIA", 16, 320, 0, 70, false, 0},
    {"V100-16GB", "NVIDIA", 16, 900, 300, 300, false, 8},
    {"V100-32GB", "NVIDIA", 32, 900, 300, 300, false, 8},
    {"P100", "NVIDIA", 16, 732, 0, 250, false, 0},
    {"A10", "NVIDIA", 24, 600, 0, 150, false, 0},
    {"MI300X", "AMD", 192, 5300, 896, 750, false, 8},
    {"MI325X", "AMD", 256, 6000, 896, 1000, false, 8},
    {"MI355X", "AMD", 288, 8000, 1075.2, 1400, false, 8},
};

TEST(GpuCatalogTest, DatasheetFactsPerModel) {
  for (const ModelFacts& f : kFacts) {
    SCOPED_TRACE(f.name);
    const GpuModelSpec* spec = FindGpuModel(f.name);
    ASSERT_NE(spec, nullptr);
    EXPECT_EQ(spec->name, f.name);
    EXPECT_EQ(spec->vendor, f.vendor);
    EXPECT_DOUBLE_EQ(spec->memory_gib, f.memory_gib);
    EXPECT_DOUBLE_EQ(spec->memory_bandwidth_gbs, f.bandwidth_gbs);
    EXPECT_DOUBLE_EQ(spec->nvlink_gbs, f.nvlink_gbs);
    EXPECT_DOUBLE_EQ(spec->tdp_w, f.tdp_w);
    EXPECT_EQ(spec->mig, f.mig);
    EXPECT_EQ(spec->nvlink_domain_gpus, f.nvlink_domain);
  }
}

TEST(GpuCatalogTest, CatalogHasExactlyTheDocumentedModelsInStableOrder) {
  const std::vector<GpuModelSpec>& catalog = GpuCatalog();
  ASSERT_EQ(catalog.size(), std::size(kFacts));
  for (size_t i = 0; i < catalog.size(); ++i) EXPECT_EQ(catalog[i].name, kFacts[i].name);
}

TEST(GpuCatalogTest, EveryEntryIsComplete) {
  for (const GpuModelSpec& spec : GpuCatalog()) {
    SCOPED_TRACE(spec.name);
    EXPECT_FALSE(spec.architecture.empty());
    EXPECT_FALSE(spec.interconnect.empty());
    EXPECT_FALSE(spec.source.empty());
    EXPECT_GT(spec.memory_gib, 0);
    EXPECT_GT(spec.memory_bandwidth_gbs, 0);
    EXPECT_GT(spec.tdp_w, 0);
    EXPECT_GT(spec.price_per_hour, 0);
    EXPECT_GE(spec.pcie_gbs, 0);
    // A GPU with GPU-to-GPU links has peers to use them with, and vice versa.
    EXPECT_EQ(spec.nvlink_gbs > 0, spec.nvlink_domain_gpus > 1);
    // MIG is an NVIDIA feature; the catalog has a geometry for exactly the MIG models.
    if (spec.mig) {
      EXPECT_EQ(spec.vendor, "NVIDIA");
    }
    EXPECT_EQ(spec.mig, FindMigGeometry(spec.name) != nullptr);
  }
}

TEST(GpuCatalogTest, NamesAndAliasesAreUniqueIgnoringCase) {
  std::set<std::string> seen;
  for (const GpuModelSpec& spec : GpuCatalog()) {
    EXPECT_TRUE(seen.insert(Lower(spec.name)).second) << spec.name;
    for (const std::string& alias : spec.aliases) {
      EXPECT_TRUE(seen.insert(Lower(alias)).second) << alias;
    }
  }
}

TEST(GpuCatalogTest, AliasesResolve) {
  const std::pair<const char*, const char*> kCases[] = {
      // Alibaba openb trace spellings.
      {"V100M16", "V100-16GB"},
      {"V100M32", "V100-32GB"},
      {"P100", "P100"},
      {"T4", "T4"},
      {"A10", "A10"},
      // Short names.
      {"H100", "H100-SXM"},
      {"A100", "A100-80GB"},
      {"GB200-NVL72", "GB200"},
      // Case-insensitive, names and aliases alike.
      {"v100m16", "V100-16GB"},
      {"h100", "H100-SXM"},
      {"h100-pcie", "H100-PCIE"},
      {"a100-40gb", "A100-40GB"},
      {"mi300x", "MI300X"},
      {"Rtx4090", "RTX4090"},
  };
  for (const auto& [input, canonical] : kCases) {
    const GpuModelSpec* spec = FindGpuModel(input);
    ASSERT_NE(spec, nullptr) << input;
    EXPECT_EQ(spec->name, canonical) << input;
  }
}

TEST(GpuCatalogTest, UnknownModelsAreNull) {
  for (const char* name : {"", "G1", "G2", "G3", "H100 ", "A100-", "V100", "B300", "MI250X"}) {
    EXPECT_EQ(FindGpuModel(name), nullptr) << "'" << name << "'";
  }
}

TEST(GpuCatalogTest, SetGpuPriceOverridesAndValidates) {
  const double original = FindGpuModel("T4")->price_per_hour;
  ASSERT_TRUE(SetGpuPrice("t4", 0.11).ok());  // any spelling FindGpuModel accepts
  EXPECT_DOUBLE_EQ(FindGpuModel("T4")->price_per_hour, 0.11);
  EXPECT_DOUBLE_EQ(GpuCatalog()[9].price_per_hour, 0.11);  // the catalog itself changed

  EXPECT_EQ(SetGpuPrice("no-such-gpu", 1.0).code(), StatusCode::kNotFound);
  EXPECT_EQ(SetGpuPrice("T4", -1.0).code(), StatusCode::kInvalidArgument);
  EXPECT_DOUBLE_EQ(FindGpuModel("T4")->price_per_hour, 0.11);  // rejected calls change nothing

  ASSERT_TRUE(SetGpuPrice("T4", original).ok());
  EXPECT_DOUBLE_EQ(FindGpuModel("T4")->price_per_hour, original);
}

// ---------------------------------------------------------------------------------------------
// MIG geometry

TEST(MigGeometryTest, ProfileNamesPerModel) {
  const std::pair<const char*, std::vector<std::string>> kCases[] = {
      {"A100-40GB", {"1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"}},
      {"A100-80GB", {"1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"}},
      {"H100-SXM", {"1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"}},
      {"H100-PCIE", {"1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"}},
      {"H200", {"1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"}},
      {"B200", {"1g.23gb", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb"}},
      {"GB200", {"1g.23gb", "1g.47gb", "2g.47gb", "3g.93gb", "4g.93gb", "7g.186gb"}},
  };
  for (const auto& [model, names] : kCases) {
    SCOPED_TRACE(model);
    const MigGeometry* g = FindMigGeometry(model);
    ASSERT_NE(g, nullptr);
    EXPECT_EQ(g->model, model);
    std::vector<std::string> got;
    for (const MigProfile& p : g->profiles) got.push_back(p.name);
    EXPECT_EQ(got, names);
  }
}

TEST(MigGeometryTest, H100PlacementTableMatchesTheGuide) {
  struct Row {
    const char* name;
    int compute;
    int memory_slices;
    double memory_gib;
    int max_instances;
    std::vector<int> starts;
  };
  const Row kRows[] = {
      {"1g.10gb", 1, 1, 10, 7, {0, 1, 2, 3, 4, 5, 6}},
      {"1g.20gb", 1, 2, 20, 4, {0, 2, 4, 6}},
      {"2g.20gb", 2, 2, 20, 3, {0, 2, 4}},
      {"3g.40gb", 3, 4, 40, 2, {0, 4}},
      {"4g.40gb", 4, 4, 40, 1, {0}},
      {"7g.80gb", 7, 8, 80, 1, {0}},
  };
  const MigGeometry* g = FindMigGeometry("H100-SXM");
  ASSERT_NE(g, nullptr);
  ASSERT_EQ(g->profiles.size(), std::size(kRows));
  for (const Row& r : kRows) {
    SCOPED_TRACE(r.name);
    const int i = FindMigProfile(*g, r.name);
    ASSERT_GE(i, 0);
    const MigProfile& p = g->profiles[i];
    EXPECT_EQ(p.compute_slices, r.compute);
    EXPECT_EQ(p.memory_slices, r.memory_slices);
    EXPECT_DOUBLE_EQ(p.memory_gib, r.memory_gib);
    EXPECT_EQ(p.max_instances, r.max_instances);
    EXPECT_EQ(p.starts, r.starts);
  }
}

TEST(MigGeometryTest, EveryGeometryStaysInsideTheGpu) {
  for (const GpuModelSpec& spec : GpuCatalog()) {
    const MigGeometry* g = FindMigGeometry(spec.name);
    if (g == nullptr) continue;
    SCOPED_TRACE(spec.name);
    for (const MigProfile& p : g->profiles) {
      EXPECT_LE(p.compute_slices, 7);
      EXPECT_LE(p.memory_gib, spec.memory_gib);
      for (int s : p.starts) EXPECT_LE(s + p.memory_slices, 8) << p.name << " @" << s;
      // The largest profile spans the whole GPU.
      if (p.compute_slices == 7) {
        EXPECT_DOUBLE_EQ(p.memory_gib, spec.memory_gib);
      }
    }
  }
}

TEST(MigGeometryTest, LookupsByAliasAndFailures) {
  const MigGeometry* h100 = FindMigGeometry("h100");
  ASSERT_NE(h100, nullptr);
  EXPECT_EQ(h100->model, "H100-SXM");
  EXPECT_EQ(FindMigGeometry("L40S"), nullptr);   // no MIG
  EXPECT_EQ(FindMigGeometry("MI300X"), nullptr);  // no MIG
  EXPECT_EQ(FindMigGeometry("nope"), nullptr);
  EXPECT_EQ(FindMigProfile(*h100, "3G.40GB"), 3);
  EXPECT_EQ(FindMigProfile(*h100, "1g.10gb+me"), -1);  // media-extension profiles left out
  EXPECT_EQ(FindMigProfile(*h100, "3g.20gb"), -1);     // an A100-40GB name
}

// ---------------------------------------------------------------------------------------------
// ValidateMigLayout

using Layout = std::vector<std::pair<std::string, int>>;  // (profile name, start)

std::vector<std::pair<int, int>> Resolve(const MigGeometry& g, const Layout& layout) {
  std::vector<std::pair<int, int>> out;
  for (const auto& [name, start] : layout) {
    const int i = FindMigProfile(g, name);
    EXPECT_GE(i, 0) << name;
    out.emplace_back(i, start);
  }
  return out;
}

std::string ToString(const Layout& layout) {
  std::string s;
  for (const auto& [name, start] : layout) s += name + "@" + std::to_string(start) + " ";
  return s;
}

// Combinations built from the guide's placement diagram (H100/A100-80GB names): each profile sits
// on one of its documented starts and no two overlap.
const Layout kValidH100Layouts[] = {
    {},
    {{"7g.80gb", 0}},
    {{"1g.10gb", 0}, {"1g.10gb", 1}, {"1g.10gb", 2}, {"1g.10gb", 3},
     {"1g.10gb", 4}, {"1g.10gb", 5}, {"1g.10gb", 6}},
    {{"1g.20gb", 0}, {"1g.20gb", 2}, {"1g.20gb", 4}, {"1g.20gb", 6}},
    {{"2g.20gb", 0}, {"2g.20gb", 2}, {"2g.20gb", 4}, {"1g.10gb", 6}},
    {{"2g.20gb", 0}, {"2g.20gb", 2}, {"2g.20gb", 4}, {"1g.20gb", 6}},
    {{"3g.40gb", 0}, {"3g.40gb", 4}},
    // 4g + 3g: valid since driver R510 (the guide's "Partitioning" note).
    {{"4g.40gb", 0}, {"3g.40gb", 4}},
    {{"4g.40gb", 0}, {"2g.20gb", 4}, {"1g.10gb", 6}},
    {{"4g.40gb", 0}, {"1g.10gb", 4}, {"1g.10gb", 5}, {"1g.10gb", 6}},
    {{"4g.40gb", 0}, {"1g.20gb", 4}, {"1g.20gb", 6}},
    {{"3g.40gb", 0}, {"2g.20gb", 4}, {"1g.10gb", 6}},
    {{"3g.40gb", 0}, {"1g.10gb", 4}, {"1g.10gb", 5}, {"1g.10gb", 6}},
    // mig-parted "all-balanced" for 80GB parts: 2 x 1g.10gb + 1 x 2g.20gb + 1 x 3g.40gb.
    {{"2g.20gb", 0}, {"1g.10gb", 2}, {"1g.10gb", 3}, {"3g.40gb", 4}},
    {{"1g.20gb", 0}, {"1g.20gb", 2}, {"3g.40gb", 4}},
    // Order does not matter.
    {{"1g.10gb", 6}, {"3g.40gb", 0}, {"2g.20gb", 4}},
};

TEST(ValidateMigLayoutTest, DocumentedH100CombinationsAreValid) {
  for (const char* model : {"H100-SXM", "H100-PCIE", "A100-80GB"}) {
    const MigGeometry* g = FindMigGeometry(model);
    ASSERT_NE(g, nullptr);
    for (const Layout& layout : kValidH100Layouts) {
      Status s = ValidateMigLayout(*g, Resolve(*g, layout));
      EXPECT_TRUE(s.ok()) << model << ": " << ToString(layout) << "-> " << s.ToString();
    }
  }
}

TEST(ValidateMigLayoutTest, SameShapesValidateOnOtherModels) {
  // H200 and B200 share the placement geometry; translate a few layouts by profile position.
  const MigGeometry* h100 = FindMigGeometry("H100-SXM");
  for (const char* model : {"A100-40GB", "H200", "B200", "GB200"}) {
    const MigGeometry* g = FindMigGeometry(model);
    ASSERT_NE(g, nullptr);
    for (const Layout& layout : kValidH100Layouts) {
      std::vector<std::pair<int, int>> instances = Resolve(*h100, layout);
      EXPECT_TRUE(ValidateMigLayout(*g, instances).ok()) << model << ": " << ToString(layout);
    }
  }
}

struct InvalidCase {
  Layout layout;
  std::vector<std::string> message_parts;  // each must appear in the error
};

TEST(ValidateMigLayoutTest, InvalidH100LayoutsFailNamingProfileAndStart) {
  const InvalidCase kCases[] = {
      {{{"4g.40gb", 0}, {"4g.40gb", 0}}, {"4g.40gb at start 0", "overlaps"}},
      {{{"3g.40gb", 2}}, {"3g.40gb at start 2", "valid starts: 0,4"}},
      {{{"2g.20gb", 0}, {"1g.10gb", 1}}, {"1g.10gb at start 1", "overlaps", "2g.20gb at start 0"}},
      {{{"1g.10gb", 0}, {"1g.10gb", 1}, {"1g.10gb", 2}, {"1g.10gb", 3},
        {"1g.10gb", 4}, {"1g.10gb", 5}, {"1g.10gb", 6}, {"1g.10gb", 0}},
       {"1g.10gb at start 0", "overlaps"}},
      {{{"1g.10gb", 7}}, {"1g.10gb at start 7", "not a valid placement"}},
      {{{"1g.20gb", 1}}, {"1g.20gb at start 1"}},
      {{{"2g.20gb", 6}}, {"2g.20gb at start 6"}},
      {{{"4g.40gb", 4}}, {"4g.40gb at start 4"}},
      {{{"7g.80gb", 0}, {"1g.10gb", 3}}, {"1g.10gb at start 3", "7g.80gb at start 0"}},
      {{{"3g.40gb", 4}, {"1g.10gb", 6}}, {"1g.10gb at start 6", "overlaps memory slice 6"}},
      {{{"3g.40gb", 4}, {"1g.20gb", 6}}, {"1g.20gb at start 6", "overlaps"}},
      {{{"3g.40gb", 0}, {"3g.40gb", 4}, {"3g.40gb", 0}}, {"3g.40gb at start 0", "overlaps"}},
  };
  const MigGeometry* g = FindMigGeometry("H100-SXM");
  ASSERT_NE(g, nullptr);
  for (const InvalidCase& c : kCases) {
    Status s = ValidateMigLayout(*g, Resolve(*g, c.layout));
    ASSERT_FALSE(s.ok()) << ToString(c.layout);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    for (const std::string& part : c.message_parts) {
      EXPECT_NE(s.message().find(part), std::string::npos)
          << ToString(c.layout) << "-> " << s.message() << " (missing '" << part << "')";
    }
  }
}

TEST(ValidateMigLayoutTest, RejectsUnknownProfileIndex) {
  const MigGeometry* g = FindMigGeometry("H100-SXM");
  EXPECT_FALSE(ValidateMigLayout(*g, {{-1, 0}}).ok());
  EXPECT_FALSE(ValidateMigLayout(*g, {{99, 0}}).ok());
}

// The real geometries cannot exceed 7 compute slices or an instance limit without also
// overlapping, so these two rules are checked on a made-up geometry.
TEST(ValidateMigLayoutTest, ComputeAndInstanceLimitsOnSyntheticGeometry) {
  MigGeometry g;
  g.model = "TEST";
  MigProfile wide;
  wide.name = "4g.x";
  wide.compute_slices = 4;
  wide.memory_slices = 2;
  wide.max_instances = 2;
  wide.starts = {0, 2, 4};
  MigProfile once;
  once.name = "1g.once";
  once.compute_slices = 1;
  once.memory_slices = 1;
  once.max_instances = 1;
  once.starts = {6, 7};
  g.profiles = {wide, once};

  Status compute = ValidateMigLayout(g, {{0, 0}, {0, 2}});
  ASSERT_FALSE(compute.ok());
  EXPECT_NE(compute.message().find("4g.x at start 2"), std::string::npos) << compute.message();
  EXPECT_NE(compute.message().find("8 > 7"), std::string::npos) << compute.message();

  Status limit = ValidateMigLayout(g, {{1, 6}, {1, 7}});
  ASSERT_FALSE(limit.ok());
  EXPECT_NE(limit.message().find("1g.once at start 7"), std::string::npos) << limit.message();
  EXPECT_NE(limit.message().find("limit of 1"), std::string::npos) << limit.message();

  EXPECT_EQ(FindMigStart(g, 0, 0x03, 4), -1);  // fits in memory, not in compute
}

// ---------------------------------------------------------------------------------------------
// FindMigStart

unsigned Mask(int start, int slices) { return ((1u << slices) - 1u) << start; }

struct Gpu {
  unsigned mask = 0;
  int compute = 0;
  std::vector<std::pair<int, int>> layout;
};

// Places `profile` with FindMigStart; returns the start (or -1) and records the instance.
int Place(const MigGeometry& g, Gpu& gpu, int profile) {
  const int start = FindMigStart(g, profile, gpu.mask, gpu.compute);
  if (start >= 0) {
    gpu.mask |= Mask(start, g.profiles[profile].memory_slices);
    gpu.compute += g.profiles[profile].compute_slices;
    gpu.layout.emplace_back(profile, start);
  }
  return start;
}

TEST(FindMigStartTest, SevenSmallInstancesFillTheGpuFromTheTop) {
  const MigGeometry* g = FindMigGeometry("H100-SXM");
  const int p = FindMigProfile(*g, "1g.10gb");
  Gpu gpu;
  std::vector<int> starts;
  for (int i = 0; i < 7; ++i) starts.push_back(Place(*g, gpu, p));
  EXPECT_EQ(starts, (std::vector<int>{6, 5, 4, 3, 2, 1, 0}));
  EXPECT_EQ(Place(*g, gpu, p), -1);
  EXPECT_EQ(gpu.mask, 0x7Fu);  // slice 7 stays unused: 1g at 6 holds slice 6 only
  EXPECT_EQ(gpu.compute, 7);
  EXPECT_TRUE(ValidateMigLayout(*g, gpu.layout).ok());
}

TEST(FindMigStartTest, ThreeGAfterFourGGoesToFourThenNothingFits) {
  const MigGeometry* g = FindMigGeometry("H100-SXM");
  const int p4 = FindMigProfile(*g, "4g.40gb");
  const int p3 = FindMigProfile(*g, "3g.40gb");
  Gpu gpu;
  EXPECT_EQ(Place(*g, gpu, p4), 0);
  EXPECT_EQ(Place(*g, gpu, p3), 4);
  EXPECT_EQ(gpu.mask, 0xFFu);
  EXPECT_EQ(Place(*g, gpu, p3), -1);
  EXPECT_EQ(Place(*g, gpu, FindMigProfile(*g, "1g.10gb")), -1);
}

TEST(FindMigStartTest, PreferenceKeepsLargeBlocksFree) {
  const MigGeometry* g = FindMigGeometry("H100-SXM");
  const int p1 = FindMigProfile(*g, "1g.10gb");
  const int p1w = FindMigProfile(*g, "1g.20gb");
  const int p2 = FindMigProfile(*g, "2g.20gb");
  const int p3 = FindMigProfile(*g, "3g.40gb");
  const int p4 = FindMigProfile(*g, "4g.40gb");
  const int p7 = FindMigProfile(*g, "7g.80gb");

  // Empty GPU: ties go to the highest start.
  EXPECT_EQ(FindMigStart(*g, p1w, 0, 0), 6);
  EXPECT_EQ(FindMigStart(*g, p2, 0, 0), 4);
  EXPECT_EQ(FindMigStart(*g, p3, 0, 0), 4);
  EXPECT_EQ(FindMigStart(*g, p4, 0, 0), 0);
  EXPECT_EQ(FindMigStart(*g, p7, 0, 0), 0);

  // With slices 4..7 taken, a 1g goes to 3, not 0, and a 2g to 2, leaving {0,1} as a pair.
  EXPECT_EQ(FindMigStart(*g, p1, Mask(4, 4), 3), 3);
  EXPECT_EQ(FindMigStart(*g, p2, Mask(4, 4), 3), 2);

  // The room rule beats "highest start": next to a 2g at 0, a 1g.20gb goes to 2 (keeping the
  // 4-block 4..7 for a 3g), and next to a 1g at 0 a 1g goes to 1 (same reason).
  EXPECT_EQ(FindMigStart(*g, p1w, Mask(0, 2), 2), 2);
  EXPECT_EQ(FindMigStart(*g, p1, Mask(0, 1), 1), 1);
  EXPECT_EQ(FindMigStart(*g, p1, Mask(4, 1), 1), 5);

  // A 1g next to a 3g at 0 goes to 6: it keeps the pair {4,5} for a 2g.
  EXPECT_EQ(FindMigStart(*g, p1, Mask(0, 4), 3), 6);

  // 2g.20gb x3 lands on 4, 2, 0; then a 1g.10gb takes 6 and the GPU is full.
  Gpu gpu;
  EXPECT_EQ(Place(*g, gpu, p2), 4);
  EXPECT_EQ(Place(*g, gpu, p2), 2);
  EXPECT_EQ(Place(*g, gpu, p2), 0);
  EXPECT_EQ(Place(*g, gpu, p2), -1);
  EXPECT_EQ(Place(*g, gpu, p1), 6);
  EXPECT_EQ(Place(*g, gpu, p1), -1);
  EXPECT_TRUE(ValidateMigLayout(*g, gpu.layout).ok());

  // Once anything is placed, a 7g or a 4g (only start 0) may no longer fit.
  EXPECT_EQ(FindMigStart(*g, p7, Mask(6, 1), 1), -1);
  EXPECT_EQ(FindMigStart(*g, p4, Mask(6, 1), 1), 0);
  EXPECT_EQ(FindMigStart(*g, p4, Mask(3, 1), 1), -1);
}

TEST(FindMigStartTest, RespectsComputeAndBadArguments) {
  const MigGeometry* g = FindMigGeometry("H100-SXM");
  const int p1 = FindMigProfile(*g, "1g.10gb");
  EXPECT_EQ(FindMigStart(*g, p1, 0, 7), -1);  // compute full even if memory is free
  EXPECT_EQ(FindMigStart(*g, p1, 0, 6), 6);
  EXPECT_EQ(FindMigStart(*g, -1, 0, 0), -1);
  EXPECT_EQ(FindMigStart(*g, 99, 0, 0), -1);
  EXPECT_EQ(FindMigStart(*g, p1, 0xFFu, 0), -1);
}

// Exhaustive: over every memory mask, FindMigStart returns a start exactly when one fits, and what
// it returns is a documented, non-overlapping start.
TEST(FindMigStartTest, AgreesWithBruteForceOnEveryMask) {
  for (const char* model : {"A100-40GB", "H100-SXM", "B200"}) {
    const MigGeometry* g = FindMigGeometry(model);
    for (int pi = 0; pi < static_cast<int>(g->profiles.size()); ++pi) {
      const MigProfile& p = g->profiles[pi];
      for (unsigned mask = 0; mask < 256; ++mask) {
        bool any_fits = false;
        for (int s : p.starts) any_fits |= (mask & Mask(s, p.memory_slices)) == 0;
        const int got = FindMigStart(*g, pi, mask, 0);
        EXPECT_EQ(got >= 0, any_fits) << model << " " << p.name << " mask=" << mask;
        if (got >= 0) {
          EXPECT_NE(std::find(p.starts.begin(), p.starts.end(), got), p.starts.end());
          EXPECT_EQ(mask & Mask(got, p.memory_slices), 0u);
        }
      }
    }
  }
}

// Greedy packing with FindMigStart always yields a layout ValidateMigLayout accepts.
TEST(FindMigStartTest, GreedyPackingsValidate) {
  const MigGeometry* g = FindMigGeometry("H100-SXM");
  const int n = static_cast<int>(g->profiles.size());
  // Every sequence of 4 profile requests (6^4), each followed by filling with 1g.10gb.
  for (int code = 0; code < n * n * n * n; ++code) {
    Gpu gpu;
    int c = code;
    for (int k = 0; k < 4; ++k, c /= n) Place(*g, gpu, c % n);
    while (Place(*g, gpu, 0) >= 0) {
    }
    Status s = ValidateMigLayout(*g, gpu.layout);
    ASSERT_TRUE(s.ok()) << "sequence " << code << ": " << s.ToString();
    EXPECT_LE(gpu.compute, 7);
  }
}

}  // namespace
}  // namespace aicloud::cluster
