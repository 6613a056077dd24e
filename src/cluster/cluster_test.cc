#include "cluster/cluster.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "cluster/catalog.h"
#include "core/rng.h"

namespace aicloud::cluster {
namespace {

constexpr int64_t kGpuMem = 81920;  // H100 80 GiB

// One rack ("r0", 2 kW budget) holding one 8-GPU node "n0" (64 cores, 512 GiB).
Cluster OneNode(double power_budget_kw = 2.0) {
  Cluster c;
  Rack r;
  r.name = "r0";
  r.power_budget_kw = power_budget_kw;
  c.AddRack(r);
  Node n;
  n.name = "n0";
  n.model = c.InternModel("H100-SXM");
  n.cpu_milli = 64000;
  n.mem_mib = 524288;
  n.rack = 0;
  for (int i = 0; i < 8; ++i) {
    Gpu g;
    g.mem_mib = kGpuMem;
    g.nvlink_domain = 0;
    n.gpus.push_back(g);
  }
  c.AddNode(std::move(n));
  return c;
}

GpuShare Whole(int gpu) {
  GpuShare s;
  s.gpu = static_cast<int16_t>(gpu);
  s.milli = kMilliPerGpu;
  return s;
}

GpuShare Fraction(int gpu, int32_t milli, int64_t mem = 0) {
  GpuShare s;
  s.gpu = static_cast<int16_t>(gpu);
  s.milli = milli;
  s.mem_mib = mem;
  return s;
}

// A MIG instance with an explicit geometry (profile index only marks it as MIG).
GpuShare Mig(int gpu, int start, int slices, int compute, int profile = 0) {
  GpuShare s;
  s.gpu = static_cast<int16_t>(gpu);
  s.milli = kMilliPerGpu * compute / 7;
  s.mig_profile = static_cast<int8_t>(profile);
  s.mig_start = static_cast<int8_t>(start);
  s.mig_slices = static_cast<int8_t>(slices);
  s.mig_compute = static_cast<int8_t>(compute);
  return s;
}

Allocation Alloc(int64_t cpu, int64_t mem, std::vector<GpuShare> gpus = {}, double kw = 0,
                 int32_t node = 0) {
  Allocation a;
  a.node = node;
  a.cpu_milli = cpu;
  a.mem_mib = mem;
  a.power_kw = kw;
  a.gpus = std::move(gpus);
  return a;
}

// Every counter Allocate/Release may touch, so "nothing changed" is one comparison.
struct GpuState {
  int32_t free_milli;
  int64_t mem_free_mib;
  uint8_t mig_used_mask;
  int8_t mig_compute_used;
  int16_t mig_instances;
  int16_t shares;
  bool operator==(const GpuState&) const = default;
};
struct NodeState {
  int64_t cpu_free;
  int64_t mem_free;
  int64_t pods;
  uint64_t version;
  std::vector<GpuState> gpus;
  bool operator==(const NodeState&) const = default;
};
struct ClusterState {
  std::vector<NodeState> nodes;
  std::vector<double> rack_power;
  bool operator==(const ClusterState&) const = default;
};

void PrintTo(const ClusterState& s, std::ostream* os) {
  for (size_t i = 0; i < s.nodes.size(); ++i) {
    const NodeState& n = s.nodes[i];
    *os << "\n node " << i << ": cpu_free=" << n.cpu_free << " mem_free=" << n.mem_free
        << " pods=" << n.pods << " version=" << n.version;
    for (size_t k = 0; k < n.gpus.size(); ++k) {
      const GpuState& g = n.gpus[k];
      *os << "\n  gpu " << k << ": free=" << g.free_milli << " mem_free=" << g.mem_free_mib
          << " mask=" << int{g.mig_used_mask} << " compute=" << int{g.mig_compute_used}
          << " instances=" << g.mig_instances << " shares=" << g.shares;
    }
  }
  for (size_t r = 0; r < s.rack_power.size(); ++r) *os << "\n rack " << r << ": " << s.rack_power[r] << " kW";
}

ClusterState Snapshot(const Cluster& c) {
  ClusterState s;
  for (const Node& n : c.nodes()) {
    NodeState ns{n.cpu_free_milli, n.mem_free_mib, n.pods, n.version, {}};
    for (const Gpu& g : n.gpus) {
      ns.gpus.push_back({g.free_milli, g.mem_free_mib, g.mig_used_mask, g.mig_compute_used,
                         g.mig_instances, g.shares});
    }
    s.nodes.push_back(std::move(ns));
  }
  for (const Rack& r : c.racks()) s.rack_power.push_back(r.power_used_kw);
  return s;
}

// ---------------------------------------------------------------------------------------------
// Registration

TEST(ClusterTest, AddNodeStartsFreeCountersAtCapacityAndIndexesNames) {
  Cluster c = OneNode();
  const Node& n = c.node(0);
  EXPECT_EQ(n.id, 0);
  EXPECT_EQ(n.cpu_free_milli, 64000);
  EXPECT_EQ(n.mem_free_mib, 524288);
  for (const Gpu& g : n.gpus) {
    EXPECT_EQ(g.mem_free_mib, kGpuMem);
    EXPECT_TRUE(g.whole_free());
  }
  EXPECT_EQ(c.FindNode("n0"), 0);
  EXPECT_EQ(c.FindNode("n1"), -1);
  EXPECT_EQ(c.FindRack("r0"), 0);
  EXPECT_EQ(c.FindRack("r1"), -1);
  EXPECT_EQ(c.total_gpus(), 8);
  EXPECT_EQ(c.total_gpu_milli(), 8000);
  EXPECT_EQ(c.allocated_gpu_milli(), 0);
}

TEST(ClusterTest, InternModelIsIdempotent) {
  Cluster c;
  ModelId a = c.InternModel("T4");
  ModelId b = c.InternModel("V100M16");
  EXPECT_NE(a, b);
  EXPECT_EQ(c.InternModel("T4"), a);
  EXPECT_EQ(c.FindModel("V100M16"), b);
  EXPECT_EQ(c.FindModel("A10"), kNoModel);
  EXPECT_EQ(c.model_name(b), "V100M16");
  EXPECT_EQ(c.models().size(), 2u);
}

// ---------------------------------------------------------------------------------------------
// Allocate / Release round trip

TEST(ClusterTest, AllocateTakesEveryCounterAndReleaseRestoresThem) {
  Cluster c = OneNode();
  const ClusterState before = Snapshot(c);
  const uint64_t v0 = c.node(0).version;
  // A whole GPU, a fractional share with a memory cap, and a 3g MIG instance at start 4.
  Allocation a = Alloc(8000, 65536, {Whole(0), Fraction(1, 300, 20000), Mig(2, 4, 4, 3)}, 1.25);
  ASSERT_TRUE(c.Allocate(a).ok());

  const Node& n = c.node(0);
  EXPECT_EQ(n.cpu_free_milli, 64000 - 8000);
  EXPECT_EQ(n.mem_free_mib, 524288 - 65536);
  EXPECT_EQ(n.pods, 1);
  EXPECT_EQ(n.version, v0 + 1);
  EXPECT_EQ(n.gpus[0].free_milli, 0);
  EXPECT_EQ(n.gpus[0].shares, 0);  // a whole GPU is not a share
  EXPECT_EQ(n.gpus[1].free_milli, 700);
  EXPECT_EQ(n.gpus[1].mem_free_mib, kGpuMem - 20000);
  EXPECT_EQ(n.gpus[1].shares, 1);
  EXPECT_EQ(n.gpus[2].mig_used_mask, 0xF0);
  EXPECT_EQ(n.gpus[2].mig_compute_used, 3);
  EXPECT_EQ(n.gpus[2].mig_instances, 1);
  EXPECT_EQ(n.gpus[2].free_milli, 0);  // partitioned: closed to time-sliced work
  EXPECT_TRUE(n.gpus[3].whole_free());
  EXPECT_DOUBLE_EQ(c.racks()[0].power_used_kw, 1.25);

  c.Release(a);
  EXPECT_EQ(n.version, v0 + 2);
  ClusterState after = Snapshot(c);
  after.nodes[0].version = before.nodes[0].version;
  EXPECT_EQ(after, before);
}

TEST(ClusterTest, LastMigInstanceReleasedReopensTheGpu) {
  Cluster c = OneNode();
  Allocation a = Alloc(0, 0, {Mig(0, 0, 2, 2)});
  Allocation b = Alloc(0, 0, {Mig(0, 4, 4, 3)});
  ASSERT_TRUE(c.Allocate(a).ok());
  ASSERT_TRUE(c.Allocate(b).ok());
  EXPECT_EQ(c.node(0).gpus[0].mig_used_mask, 0xF3);
  EXPECT_EQ(c.node(0).gpus[0].mig_compute_used, 5);
  c.Release(a);
  EXPECT_EQ(c.node(0).gpus[0].mig_used_mask, 0xF0);
  EXPECT_EQ(c.node(0).gpus[0].free_milli, 0) << "one instance left: still partitioned";
  c.Release(b);
  EXPECT_TRUE(c.node(0).gpus[0].whole_free());
  EXPECT_EQ(c.node(0).gpus[0].mig_used_mask, 0);
  EXPECT_EQ(c.node(0).pods, 0);
}

TEST(ClusterTest, ExactFitIsAccepted) {
  Cluster c = OneNode(/*power_budget_kw=*/1.0);
  Allocation a = Alloc(64000, 524288, {Fraction(0, 1000, kGpuMem)}, 1.0);
  ASSERT_TRUE(c.Allocate(a).ok());
  EXPECT_EQ(c.node(0).cpu_free_milli, 0);
  EXPECT_EQ(c.node(0).mem_free_mib, 0);
  EXPECT_EQ(c.node(0).gpus[0].free_milli, 0);
  EXPECT_EQ(c.node(0).gpus[0].mem_free_mib, 0);
  // Seven 1-slice instances fill all 7 compute slices.
  for (int s = 0; s < 7; ++s) ASSERT_TRUE(c.Allocate(Alloc(0, 0, {Mig(1, s, 1, 1)})).ok()) << s;
  EXPECT_EQ(c.node(0).gpus[1].mig_compute_used, 7);
}

// ---------------------------------------------------------------------------------------------
// Every over-allocation is refused and changes nothing

struct RefusalCase {
  const char* name;
  std::vector<Allocation> before;  // applied first, each must succeed
  Allocation refused;
  StatusCode code;
  const char* message;
};

TEST(ClusterTest, OverAllocationIsRefusedAndChangesNothing) {
  const RefusalCase cases[] = {
      {"cpu", {Alloc(60000, 0)}, Alloc(4001, 0), StatusCode::kResourceExhausted,
       "n0: not enough CPU"},
      {"memory", {Alloc(0, 524000)}, Alloc(0, 289), StatusCode::kResourceExhausted,
       "n0: not enough memory"},
      {"gpu milli", {Alloc(0, 0, {Fraction(3, 600)})}, Alloc(0, 0, {Fraction(3, 401)}),
       StatusCode::kResourceExhausted, "n0: GPU 3 has not enough free share"},
      {"whole gpu on a shared gpu", {Alloc(0, 0, {Fraction(3, 1)})}, Alloc(0, 0, {Whole(3)}),
       StatusCode::kResourceExhausted, "n0: GPU 3 has not enough free share"},
      {"gpu memory", {Alloc(0, 0, {Fraction(2, 100, 80000)})},
       Alloc(0, 0, {Fraction(2, 100, kGpuMem - 80000 + 1)}), StatusCode::kResourceExhausted,
       "n0: GPU 2 has not enough free memory"},
      {"mig overlap", {Alloc(0, 0, {Mig(0, 0, 4, 3)})}, Alloc(0, 0, {Mig(0, 2, 2, 2)}),
       StatusCode::kResourceExhausted, "n0: MIG slices already in use on GPU 0"},
      {"mig overlap by one slice", {Alloc(0, 0, {Mig(0, 0, 4, 3)})}, Alloc(0, 0, {Mig(0, 3, 1, 1)}),
       StatusCode::kResourceExhausted, "n0: MIG slices already in use on GPU 0"},
      {"more than 7 compute slices", {Alloc(0, 0, {Mig(0, 0, 4, 4)})},
       Alloc(0, 0, {Mig(0, 4, 4, 4)}), StatusCode::kResourceExhausted,
       "n0: MIG slices already in use on GPU 0"},
      {"fraction on a mig gpu", {Alloc(0, 0, {Mig(5, 0, 1, 1)})}, Alloc(0, 0, {Fraction(5, 100)}),
       StatusCode::kResourceExhausted, "n0: GPU 5 is partitioned into MIG instances"},
      {"whole gpu on a mig gpu", {Alloc(0, 0, {Mig(5, 0, 1, 1)})}, Alloc(0, 0, {Whole(5)}),
       StatusCode::kResourceExhausted, "n0: GPU 5 is partitioned into MIG instances"},
      {"partition a shared gpu", {Alloc(0, 0, {Fraction(6, 500)})}, Alloc(0, 0, {Mig(6, 0, 1, 1)}),
       StatusCode::kResourceExhausted, "n0: GPU 6 is shared and cannot be partitioned"},
      {"partition a whole-allocated gpu", {Alloc(0, 0, {Whole(6)})}, Alloc(0, 0, {Mig(6, 0, 1, 1)}),
       StatusCode::kResourceExhausted, "n0: GPU 6 is shared and cannot be partitioned"},
      {"same gpu twice", {}, Alloc(0, 0, {Fraction(1, 300), Fraction(1, 300)}),
       StatusCode::kInvalidArgument, "n0: allocation names GPU 1 twice"},
      {"same gpu twice, whole", {}, Alloc(0, 0, {Whole(0), Whole(1), Whole(0)}),
       StatusCode::kInvalidArgument, "n0: allocation names GPU 0 twice"},
      {"same gpu twice, mig", {}, Alloc(0, 0, {Mig(2, 0, 1, 1), Mig(2, 1, 1, 1)}),
       StatusCode::kInvalidArgument, "n0: allocation names GPU 2 twice"},
      {"rack power", {Alloc(0, 0, {}, 1.5)}, Alloc(0, 0, {Whole(0)}, 0.6),
       StatusCode::kResourceExhausted, "r0: rack power budget exceeded"},
      {"mig outside the slices", {}, Alloc(0, 0, {Mig(0, 6, 4, 3)}), StatusCode::kInvalidArgument,
       "n0: MIG instance outside the GPU's slices"},
      {"mig negative start", {}, Alloc(0, 0, {Mig(0, -1, 1, 1)}), StatusCode::kInvalidArgument,
       "n0: MIG instance outside the GPU's slices"},
      {"no such gpu", {}, Alloc(0, 0, {Whole(8)}), StatusCode::kInvalidArgument, "n0: no GPU 8"},
      {"negative gpu index", {}, Alloc(0, 0, {Whole(-1)}), StatusCode::kInvalidArgument,
       "n0: no GPU -1"},
      {"no such node", {}, Alloc(0, 0, {}, 0, /*node=*/1), StatusCode::kInvalidArgument,
       "allocation names node 1 which does not exist"},
      {"second share fails after the first fits", {},
       Alloc(1000, 1000, {Whole(0), Fraction(1, 200, kGpuMem + 1)}, 0.5),
       StatusCode::kResourceExhausted, "n0: GPU 1 has not enough free memory"},
  };
  for (const RefusalCase& tc : cases) {
    SCOPED_TRACE(tc.name);
    Cluster c = OneNode();
    for (const Allocation& a : tc.before) ASSERT_TRUE(c.Allocate(a).ok());
    const ClusterState before = Snapshot(c);
    const int64_t allocated = c.allocated_gpu_milli();
    Status st = c.Allocate(tc.refused);
    EXPECT_EQ(st.code(), tc.code) << st.ToString();
    EXPECT_EQ(st.message(), tc.message);
    EXPECT_EQ(Snapshot(c), before) << "a refused allocation changed the cluster";
    EXPECT_EQ(c.allocated_gpu_milli(), allocated);
  }
}

// Negative amounts would raise free counters above capacity: that is over-allocation in
// disguise (the README: Allocate "refuses anything that would over-allocate").
TEST(ClusterTest, NegativeAmountsAreRefused) {
  const Allocation cases[] = {
      Alloc(-1000, 0),
      Alloc(0, -1024),
      Alloc(0, 0, {Fraction(0, -500)}),
      Alloc(0, 0, {Fraction(0, 100, -4096)}),
  };
  for (const Allocation& a : cases) {
    Cluster c = OneNode();
    const ClusterState before = Snapshot(c);
    Status st = c.Allocate(a);
    EXPECT_FALSE(st.ok()) << "cpu " << a.cpu_milli << " mem " << a.mem_mib
                          << " gpu milli " << (a.gpus.empty() ? 0 : a.gpus[0].milli);
    if (!st.ok()) {
      EXPECT_EQ(Snapshot(c), before);
    }
    const Node& n = c.node(0);
    EXPECT_LE(n.cpu_free_milli, n.cpu_milli);
    EXPECT_LE(n.mem_free_mib, n.mem_mib);
    EXPECT_LE(n.gpus[0].free_milli, kMilliPerGpu);
    EXPECT_LE(n.gpus[0].mem_free_mib, n.gpus[0].mem_mib);
  }
}

TEST(ClusterTest, RackWithoutBudgetIsUnlimitedButStillAccounted) {
  Cluster c = OneNode(/*power_budget_kw=*/0);
  ASSERT_TRUE(c.Allocate(Alloc(0, 0, {}, 1000.0)).ok());
  EXPECT_DOUBLE_EQ(c.racks()[0].power_used_kw, 1000.0);
}

TEST(ClusterTest, PowerBudgetBoundaryIsInclusive) {
  Cluster c = OneNode(/*power_budget_kw=*/2.1);
  // 0.7 × 3 in floating point exceeds 2.1 by rounding only; the budget must still admit it.
  ASSERT_TRUE(c.Allocate(Alloc(0, 0, {Whole(0)}, 0.7)).ok());
  ASSERT_TRUE(c.Allocate(Alloc(0, 0, {Whole(1)}, 0.7)).ok());
  ASSERT_TRUE(c.Allocate(Alloc(0, 0, {Whole(2)}, 0.7)).ok());
  EXPECT_FALSE(c.Allocate(Alloc(0, 0, {Whole(3)}, 0.001)).ok());
}

// ---------------------------------------------------------------------------------------------
// allocated_gpu_milli

TEST(ClusterTest, AllocatedGpuMilliCountsWholeFractionalAndMig) {
  Cluster c = OneNode();
  Allocation whole = Alloc(0, 0, {Whole(0), Whole(1)});
  Allocation frac = Alloc(0, 0, {Fraction(2, 250)});
  Allocation frac2 = Alloc(0, 0, {Fraction(2, 125)});
  Allocation mig = Alloc(0, 0, {Mig(3, 4, 4, 3)});
  Allocation mig2 = Alloc(0, 0, {Mig(3, 0, 2, 2)});
  ASSERT_TRUE(c.Allocate(whole).ok());
  EXPECT_EQ(c.allocated_gpu_milli(), 2000);
  ASSERT_TRUE(c.Allocate(frac).ok());
  ASSERT_TRUE(c.Allocate(frac2).ok());
  EXPECT_EQ(c.allocated_gpu_milli(), 2375);
  ASSERT_TRUE(c.Allocate(mig).ok());
  EXPECT_EQ(c.allocated_gpu_milli(), 2375 + 3000 / 7);
  ASSERT_TRUE(c.Allocate(mig2).ok());
  EXPECT_EQ(c.allocated_gpu_milli(), 2375 + 5000 / 7);
  c.Release(mig);
  c.Release(whole);
  EXPECT_EQ(c.allocated_gpu_milli(), 375 + 2000 / 7);
  c.Release(mig2);
  c.Release(frac);
  c.Release(frac2);
  EXPECT_EQ(c.allocated_gpu_milli(), 0);
}

// ---------------------------------------------------------------------------------------------
// Property: random allocate/release sequences keep every counter within [0, capacity] and equal
// to capacity minus what the live allocations hold.

Cluster PropertyCluster() {
  Cluster c;
  Rack r0;
  r0.name = "r0";
  r0.power_budget_kw = 3.0;
  c.AddRack(r0);
  Rack r1;
  r1.name = "r1";
  c.AddRack(r1);
  const ModelId h100 = c.InternModel("H100-SXM");
  for (int k = 0; k < 3; ++k) {
    Node n;
    n.name = "n" + std::to_string(k);
    n.model = h100;
    n.cpu_milli = 16000 * (k + 1);
    n.mem_mib = 65536 * (k + 1);
    n.rack = k == 2 ? 1 : 0;
    for (int i = 0; i < 2 + 2 * k; ++i) {
      Gpu g;
      g.mem_mib = kGpuMem;
      n.gpus.push_back(g);
    }
    c.AddNode(std::move(n));
  }
  return c;
}

Allocation RandomAllocation(Rng& rng, const Cluster& c) {
  const MigGeometry* geo = FindMigGeometry("H100-SXM");
  Allocation a;
  a.node = static_cast<int32_t>(rng.Uniform(c.nodes().size()));
  const Node& n = c.node(a.node);
  a.cpu_milli = static_cast<int64_t>(rng.Uniform(static_cast<uint64_t>(n.cpu_milli) / 2 + 1));
  a.mem_mib = static_cast<int64_t>(rng.Uniform(static_cast<uint64_t>(n.mem_mib) / 2 + 1));
  a.power_kw = static_cast<double>(rng.Uniform(8)) * 0.25;
  const int shares = static_cast<int>(rng.Uniform(3));
  for (int k = 0; k < shares; ++k) {
    const int gpu = static_cast<int>(rng.Uniform(static_cast<uint64_t>(n.gpu_count())));
    switch (rng.Uniform(3)) {
      case 0:
        a.gpus.push_back(Whole(gpu));
        break;
      case 1:
        a.gpus.push_back(Fraction(gpu, 1 + static_cast<int32_t>(rng.Uniform(999)),
                                  static_cast<int64_t>(rng.Uniform(kGpuMem / 2))));
        break;
      default: {
        const int p = static_cast<int>(rng.Uniform(geo->profiles.size()));
        const MigProfile& prof = geo->profiles[p];
        // Any start, valid for the profile or not: Allocate checks slices, not NVIDIA's table.
        const int start = static_cast<int>(rng.Uniform(kMigMemorySlices - prof.memory_slices + 1));
        a.gpus.push_back(Mig(gpu, start, prof.memory_slices, prof.compute_slices, p));
        break;
      }
    }
  }
  return a;
}

void ExpectConsistent(const Cluster& c, const std::vector<Allocation>& live) {
  for (const Node& n : c.nodes()) {
    int64_t cpu = 0, mem = 0, pods = 0;
    std::vector<int64_t> milli(n.gpus.size(), 0), gmem(n.gpus.size(), 0);
    std::vector<int> compute(n.gpus.size(), 0), instances(n.gpus.size(), 0), shares(n.gpus.size(), 0);
    std::vector<unsigned> mask(n.gpus.size(), 0);
    for (const Allocation& a : live) {
      if (a.node != n.id) continue;
      cpu += a.cpu_milli;
      mem += a.mem_mib;
      ++pods;
      for (const GpuShare& s : a.gpus) {
        if (s.mig_profile >= 0) {
          const unsigned m = ((1u << s.mig_slices) - 1u) << s.mig_start;
          ASSERT_EQ(mask[s.gpu] & m, 0u) << n.name << " GPU " << s.gpu << ": overlapping instances";
          mask[s.gpu] |= m;
          compute[s.gpu] += s.mig_compute;
          ++instances[s.gpu];
        } else {
          milli[s.gpu] += s.milli;
          gmem[s.gpu] += s.mem_mib;
          if (s.milli < kMilliPerGpu) ++shares[s.gpu];
        }
      }
    }
    ASSERT_GE(n.cpu_free_milli, 0) << n.name;
    ASSERT_LE(n.cpu_free_milli, n.cpu_milli) << n.name;
    ASSERT_EQ(n.cpu_free_milli, n.cpu_milli - cpu) << n.name;
    ASSERT_GE(n.mem_free_mib, 0) << n.name;
    ASSERT_EQ(n.mem_free_mib, n.mem_mib - mem) << n.name;
    ASSERT_EQ(n.pods, pods) << n.name;
    for (size_t i = 0; i < n.gpus.size(); ++i) {
      const Gpu& g = n.gpus[i];
      SCOPED_TRACE(n.name + " GPU " + std::to_string(i));
      ASSERT_GE(g.free_milli, 0);
      ASSERT_LE(g.free_milli, kMilliPerGpu);
      ASSERT_GE(g.mem_free_mib, 0);
      ASSERT_LE(g.mem_free_mib, g.mem_mib);
      ASSERT_GE(g.mig_compute_used, 0);
      ASSERT_LE(g.mig_compute_used, 7);
      ASSERT_EQ(g.mig_used_mask, mask[i]);
      ASSERT_EQ(g.mig_compute_used, compute[i]);
      ASSERT_EQ(g.mig_instances, instances[i]);
      ASSERT_FALSE(instances[i] > 0 && milli[i] > 0) << "MIG and time-sliced work on one GPU";
      ASSERT_EQ(g.free_milli, instances[i] > 0 ? 0 : kMilliPerGpu - milli[i]);
      ASSERT_EQ(g.mem_free_mib, g.mem_mib - gmem[i]);
      ASSERT_EQ(g.shares, shares[i]);
    }
  }
  std::vector<double> power(c.racks().size(), 0);
  for (const Allocation& a : live) {
    const int32_t rack = c.node(a.node).rack;
    if (rack >= 0) power[rack] += a.power_kw;
  }
  for (size_t r = 0; r < c.racks().size(); ++r) {
    const Rack& rack = c.racks()[r];
    ASSERT_NEAR(rack.power_used_kw, power[r], 1e-9) << rack.name;
    ASSERT_GE(rack.power_used_kw, -1e-9) << rack.name;
    if (rack.power_budget_kw > 0) {
      ASSERT_LE(rack.power_used_kw, rack.power_budget_kw + 1e-9) << rack.name;
    }
  }
}

TEST(ClusterTest, RandomAllocateReleaseNeverOverAllocates) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Rng rng(seed);
    Cluster c = PropertyCluster();
    const ClusterState empty = Snapshot(c);
    std::vector<Allocation> live;
    int accepted = 0, refused = 0;
    for (int step = 0; step < 400; ++step) {
      if (!live.empty() && rng.Uniform(3) == 0) {
        const size_t k = rng.Uniform(live.size());
        c.Release(live[k]);
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
      } else {
        Allocation a = RandomAllocation(rng, c);
        const ClusterState before = Snapshot(c);
        if (c.Allocate(a).ok()) {
          live.push_back(a);
          ++accepted;
        } else {
          ++refused;
          ASSERT_EQ(Snapshot(c), before) << "refused allocation at step " << step << " changed state";
        }
      }
      ExpectConsistent(c, live);
      if (HasFatalFailure()) return;
    }
    // The generator must exercise both outcomes or the property says little.
    EXPECT_GT(accepted, 20);
    EXPECT_GT(refused, 20);
    for (const Allocation& a : live) c.Release(a);
    ClusterState end = Snapshot(c);
    for (size_t i = 0; i < end.nodes.size(); ++i) end.nodes[i].version = empty.nodes[i].version;
    for (double& p : end.rack_power) p = std::abs(p) < 1e-9 ? 0 : p;
    EXPECT_EQ(end, empty);
  }
}

}  // namespace
}  // namespace aicloud::cluster
