// Table-driven tests for every built-in plugin, plus the in-node placement helpers they share.
//
// Plugins are built the way the scheduler builds them: Registry::BuiltIn().Create(name, args)
// with a real Scheduler as the Handle. Filter tables give a node state, a request and the exact
// status; score tables give two node states and which one must score higher.
#include <gtest/gtest.h>

#include <bit>
#include <cstdlib>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cluster/catalog.h"
#include "cluster/cluster.h"
#include "core/rng.h"
#include "sched/framework.h"
#include "sched/placement.h"
#include "sched/plugins/bestfit/bestfit.h"
#include "sched/plugins/fgd/fgd.h"
#include "sched/plugins/lane_taints/lane_taints.h"
#include "sched/profile.h"
#include "sched/registry.h"
#include "sched/request.h"
#include "sched/scheduler.h"
#include "sched/workload.h"

namespace aicloud::sched {
namespace {

using cluster::Gpu;
using cluster::ModelId;
using cluster::Node;

// Models interned in this order by every fixture below.
constexpr ModelId kH100 = 0;
constexpr ModelId kT4 = 1;
constexpr ModelId kA100 = 2;  // A100-80GB
constexpr ModelId kG2 = 3;    // undisclosed openb model: no catalog entry
constexpr int64_t kH100Mem = 81920;

void InternModels(cluster::Cluster& c) {
  c.InternModel("H100-SXM");
  c.InternModel("T4");
  c.InternModel("A100-80GB");
  c.InternModel("G2");
}

int64_t GpuMemOf(ModelId m) {
  switch (m) {
    case kT4: return 16384;
    case kG2: return 0;
    default: return kH100Mem;
  }
}

// A node with every counter at capacity. gpus_per_domain > 0 groups GPUs into NVLink domains
// (domain ids start at domain_base).
Node MakeNode(ModelId model, int gpus, int64_t cpu = 64000, int64_t mem = 262144,
              int gpus_per_domain = 0, int32_t id = 0, int domain_base = 0) {
  Node n;
  n.name = "n" + std::to_string(id);
  n.id = id;
  n.model = gpus > 0 ? model : cluster::kNoModel;
  n.cpu_milli = n.cpu_free_milli = cpu;
  n.mem_mib = n.mem_free_mib = mem;
  for (int i = 0; i < gpus; ++i) {
    Gpu g;
    g.mem_mib = g.mem_free_mib = GpuMemOf(model);
    g.nvlink_domain = gpus_per_domain > 0 ? domain_base + i / gpus_per_domain : -1;
    n.gpus.push_back(g);
  }
  return n;
}

// Node-state edits used by the tables.
void Share(Node& n, int gpu, int32_t milli, int64_t mem = 0) {
  n.gpus[gpu].free_milli -= milli;
  n.gpus[gpu].mem_free_mib -= mem;
  ++n.gpus[gpu].shares;
}
void Partition(Node& n, int gpu, uint8_t mask, int compute, int instances = 1) {
  n.gpus[gpu].mig_used_mask = mask;
  n.gpus[gpu].mig_compute_used = static_cast<int8_t>(compute);
  n.gpus[gpu].mig_instances = static_cast<int16_t>(instances);
  n.gpus[gpu].free_milli = 0;
}

template <typename F>
PodRequest With(PodRequest p, F edit) {
  edit(p);
  return p;
}

// A real Scheduler (the Handle plugins get) over a small cluster with the four models.
class PluginTest : public ::testing::Test {
 protected:
  void SetUp() override {
    InternModels(cluster_);
    cluster::Rack rack;
    rack.name = "r0";
    rack.power_budget_kw = 1.0;
    cluster_.AddRack(rack);
    cluster::Rack open;
    open.name = "r1";
    cluster_.AddRack(open);
    Node n = MakeNode(kH100, 8);
    n.rack = 0;
    cluster_.AddNode(n);
    TaskShape shape;
    shape.gpu_milli = 500;
    shape.gpu_count = 1;
    shape.weight = 1;
    workload_.shapes.push_back(shape);
    Profile p{"handle", {{"node_unschedulable"}}};
    SchedulerOptions opts;
    opts.workload = workload_;
    auto s = Scheduler::Create(&cluster_, p, Registry::BuiltIn(), opts);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    sched_ = std::move(*s);
  }

  std::unique_ptr<Plugin> Make(const std::string& name, std::map<std::string, double> params = {},
                               const TargetWorkload* workload = nullptr) {
    PluginArgs a;
    a.handle = sched_.get();
    a.workload = workload != nullptr ? workload : &workload_;
    a.seed = 7;
    a.params = std::move(params);
    StatusOr<std::unique_ptr<Plugin>> p = Registry::BuiltIn().Create(name, a);
    EXPECT_TRUE(p.ok()) << name << ": " << p.status().ToString();
    if (!p.ok()) return nullptr;
    EXPECT_EQ((*p)->Name(), name);
    return std::move(*p);
  }

  PluginStatus Filter(Plugin* p, const PodRequest& pod, const Node& node) {
    auto* f = dynamic_cast<FilterPlugin*>(p);
    EXPECT_NE(f, nullptr) << p->Name() << " is not a filter";
    CycleState state(&rng_);
    return f->Filter(state, pod, node);
  }

  int64_t Score(Plugin* p, const PodRequest& pod, const Node& node, GpuPick* pick = nullptr) {
    auto* s = dynamic_cast<ScorePlugin*>(p);
    EXPECT_NE(s, nullptr) << p->Name() << " is not a score plugin";
    CycleState state(&rng_);
    GpuPick local;
    return s->Score(state, pod, node, pick != nullptr ? pick : &local);
  }

  const ModelFacts& Facts(ModelId m) const { return sched_->model_facts()[m]; }

  cluster::Cluster cluster_;
  TargetWorkload workload_;
  std::unique_ptr<Scheduler> sched_;
  Rng rng_{1};
};

// ---------------------------------------------------------------------------------------------
// Filters: one table per plugin.

struct FilterRow {
  const char* name;
  std::function<void(Node&)> edit;  // applied to the table's base node
  PodRequest pod;
  Code code;
  const char* reason;  // nullptr for success
};

void NoEdit(Node&) {}

class FilterTableTest : public PluginTest {
 protected:
  void Run(const std::string& plugin, const Node& base, const std::vector<FilterRow>& rows) {
    std::unique_ptr<Plugin> p = Make(plugin);
    ASSERT_NE(p, nullptr);
    for (const FilterRow& row : rows) {
      SCOPED_TRACE(plugin + ": " + row.name);
      Node n = base;
      row.edit(n);
      PluginStatus st = Filter(p.get(), row.pod, n);
      EXPECT_EQ(static_cast<int>(st.code), static_cast<int>(row.code));
      if (row.reason == nullptr) {
        EXPECT_EQ(st.reason, nullptr);
        EXPECT_TRUE(st.ok());
      } else {
        ASSERT_NE(st.reason, nullptr);
        EXPECT_STREQ(st.reason, row.reason);
      }
    }
  }
};

TEST_F(FilterTableTest, NodeUnschedulable) {
  Run("node_unschedulable", MakeNode(kH100, 8),
      {
          {"schedulable", NoEdit, WholeGpus(1, 1000, 1024), Code::kSuccess, nullptr},
          {"cordoned", [](Node& n) { n.unschedulable = true; }, WholeGpus(1, 1000, 1024),
           Code::kUnresolvable, "node is cordoned"},
          {"cordoned, cpu-only work", [](Node& n) { n.unschedulable = true; }, CpuOnly(1, 1),
           Code::kUnresolvable, "node is cordoned"},
      });
}

TEST_F(FilterTableTest, LaneTaints) {
  auto taint = [](const char* key, const char* value, const char* effect) {
    return [=](Node& n) { n.taints.push_back({key, value, effect}); };
  };
  auto tolerate = [](const char* key, const char* value, bool exists, const char* effect) {
    return With(CpuOnly(100, 100), [=](PodRequest& p) {
      p.tolerations.push_back({key, value, exists, effect});
    });
  };
  const char* kLane = "node is in another lane";
  const char* kTaint = "untolerated taint";
  Run("lane_taints", MakeNode(kH100, 8),
      {
          {"no taints, no pool", NoEdit, CpuOnly(100, 100), Code::kSuccess, nullptr},
          {"pod pool differs", [](Node& n) { n.pool = "inference"; },
           With(CpuOnly(100, 100), [](PodRequest& p) { p.pool = "training"; }),
           Code::kUnresolvable, kLane},
          {"pod pool on a default node", NoEdit,
           With(CpuOnly(100, 100), [](PodRequest& p) { p.pool = "training"; }),
           Code::kUnresolvable, kLane},
          {"pod pool matches", [](Node& n) { n.pool = "training"; },
           With(CpuOnly(100, 100), [](PodRequest& p) { p.pool = "training"; }), Code::kSuccess,
           nullptr},
          {"no pool lands in any lane", [](Node& n) { n.pool = "training"; }, CpuOnly(100, 100),
           Code::kSuccess, nullptr},
          {"untolerated NoSchedule", taint("gpu", "h100", "NoSchedule"), CpuOnly(100, 100),
           Code::kUnresolvable, kTaint},
          {"tolerated by value", taint("gpu", "h100", "NoSchedule"),
           tolerate("gpu", "h100", false, ""), Code::kSuccess, nullptr},
          {"value mismatch", taint("gpu", "h100", "NoSchedule"), tolerate("gpu", "a100", false, ""),
           Code::kUnresolvable, kTaint},
          {"key mismatch", taint("gpu", "h100", "NoSchedule"), tolerate("tpu", "h100", false, ""),
           Code::kUnresolvable, kTaint},
          {"exists tolerates any value", taint("gpu", "h100", "NoSchedule"),
           tolerate("gpu", "", true, ""), Code::kSuccess, nullptr},
          {"effect must match when given", taint("gpu", "h100", "NoSchedule"),
           tolerate("gpu", "h100", false, "NoExecute"), Code::kUnresolvable, kTaint},
          {"matching effect", taint("gpu", "h100", "NoSchedule"),
           tolerate("gpu", "h100", false, "NoSchedule"), Code::kSuccess, nullptr},
          {"PreferNoSchedule is only a preference", taint("gpu", "h100", "PreferNoSchedule"),
           CpuOnly(100, 100), Code::kSuccess, nullptr},
          {"every taint must be tolerated",
           [](Node& n) {
             n.taints.push_back({"a", "1", "NoSchedule"});
             n.taints.push_back({"b", "2", "NoSchedule"});
           },
           tolerate("a", "1", false, ""), Code::kUnresolvable, kTaint},
      });
}

TEST_F(FilterTableTest, ResourceFit) {
  Run("resource_fit", MakeNode(kH100, 8, 64000, 262144),
      {
          {"fits", NoEdit, CpuOnly(1000, 1024), Code::kSuccess, nullptr},
          {"exactly all", NoEdit, CpuOnly(64000, 262144), Code::kSuccess, nullptr},
          {"cpu above capacity", NoEdit, CpuOnly(64001, 1), Code::kUnresolvable,
           "node too small for CPU"},
          {"memory above capacity", NoEdit, CpuOnly(1, 262145), Code::kUnresolvable,
           "node too small for memory"},
          {"cpu above free", [](Node& n) { n.cpu_free_milli = 999; }, CpuOnly(1000, 1),
           Code::kUnschedulable, "insufficient CPU"},
          {"memory above free", [](Node& n) { n.mem_free_mib = 1023; }, CpuOnly(1, 1024),
           Code::kUnschedulable, "insufficient memory"},
          {"cpu checked before memory",
           [](Node& n) {
             n.cpu_free_milli = 0;
             n.mem_free_mib = 0;
           },
           CpuOnly(1, 1), Code::kUnschedulable, "insufficient CPU"},
      });
}

TEST_F(FilterTableTest, GpuModel) {
  Run("gpu_model", MakeNode(kH100, 8),
      {
          {"any model", NoEdit, WholeGpus(1, 0, 0), Code::kSuccess, nullptr},
          {"cpu-only work on a GPU node", NoEdit, CpuOnly(1, 1), Code::kSuccess, nullptr},
          {"allowed model", NoEdit,
           With(WholeGpus(1, 0, 0), [](PodRequest& p) { p.gpu_models = {kT4, kH100}; }),
           Code::kSuccess, nullptr},
          {"model not allowed", NoEdit,
           With(WholeGpus(1, 0, 0), [](PodRequest& p) { p.gpu_models = {kT4}; }),
           Code::kUnresolvable, "GPU model not allowed"},
          {"more GPUs than the node has", NoEdit, WholeGpus(9, 0, 0), Code::kUnresolvable,
           "node has fewer GPUs than requested"},
          {"all the GPUs it has", NoEdit, WholeGpus(8, 0, 0), Code::kSuccess, nullptr},
          {"GPU work on a CPU node", [](Node& n) { n = MakeNode(kH100, 0); },
           FractionalGpu(100, 0, 0, 0), Code::kUnresolvable, "node has no GPU"},
          {"cpu-only work on a CPU node", [](Node& n) { n = MakeNode(kH100, 0); }, CpuOnly(1, 1),
           Code::kSuccess, nullptr},
      });
}

TEST_F(FilterTableTest, GpuShare) {
  auto used = [](std::vector<int> gpus) {
    return [=](Node& n) {
      for (int g : gpus) Share(n, g, 1000);
    };
  };
  Run("gpu_share", MakeNode(kH100, 4),
      {
          {"whole GPUs free", NoEdit, WholeGpus(4, 0, 0), Code::kSuccess, nullptr},
          {"one GPU short", used({2}), WholeGpus(4, 0, 0), Code::kUnschedulable,
           "insufficient free GPUs"},
          {"a partly used GPU is not whole", [](Node& n) { Share(n, 0, 1); }, WholeGpus(4, 0, 0),
           Code::kUnschedulable, "insufficient free GPUs"},
          {"a MIG GPU is not whole", [](Node& n) { Partition(n, 0, 0x01, 1); },
           WholeGpus(4, 0, 0), Code::kUnschedulable, "insufficient free GPUs"},
          {"enough left", used({0, 1}), WholeGpus(2, 0, 0), Code::kSuccess, nullptr},
          {"fraction fits a partly used GPU", [](Node& n) {
             for (int g = 0; g < 4; ++g) Share(n, g, 600);
           },
           FractionalGpu(400, 0, 0, 0), Code::kSuccess, nullptr},
          {"fraction too big everywhere", [](Node& n) {
             for (int g = 0; g < 4; ++g) Share(n, g, 600);
           },
           FractionalGpu(401, 0, 0, 0), Code::kUnschedulable, "insufficient GPU milli"},
          {"fraction memory cap too big", [](Node& n) {
             for (int g = 0; g < 4; ++g) Share(n, g, 100, 60000);
           },
           FractionalGpu(500, 30000, 0, 0), Code::kUnschedulable, "insufficient GPU memory"},
          {"fraction memory cap fits", [](Node& n) {
             for (int g = 0; g < 4; ++g) Share(n, g, 100, 60000);
           },
           FractionalGpu(500, 21920, 0, 0), Code::kSuccess, nullptr},
          {"fraction on MIG GPUs only", [](Node& n) {
             for (int g = 0; g < 4; ++g) Partition(n, g, 0x01, 1);
           },
           FractionalGpu(100, 0, 0, 0), Code::kUnschedulable, "insufficient GPU milli"},
          {"MIG requests are not its job", used({0, 1, 2, 3}), MigInstance("1g.10gb", 0, 0),
           Code::kSuccess, nullptr},
          {"cpu-only work passes", used({0, 1, 2, 3}), CpuOnly(1, 1), Code::kSuccess, nullptr},
      });
}

TEST_F(FilterTableTest, MigPlacement) {
  const Node h100 = MakeNode(kH100, 1);
  Run("mig_placement", h100,
      {
          {"empty GPU", NoEdit, MigInstance("3g.40gb", 0, 0), Code::kSuccess, nullptr},
          {"profile names are case-insensitive", NoEdit, MigInstance("3G.40GB", 0, 0),
           Code::kSuccess, nullptr},
          {"non-MIG work passes", [](Node& n) { Partition(n, 0, 0xFF, 7); }, WholeGpus(1, 0, 0),
           Code::kSuccess, nullptr},
          {"GPU without MIG", [](Node& n) { n = MakeNode(kT4, 1); }, MigInstance("1g.10gb", 0, 0),
           Code::kUnresolvable, "GPU model has no MIG"},
          {"unknown model", [](Node& n) { n = MakeNode(kG2, 1); }, MigInstance("1g.10gb", 0, 0),
           Code::kUnresolvable, "GPU model has no MIG"},
          {"profile of another model", NoEdit, MigInstance("1g.5gb", 0, 0), Code::kUnresolvable,
           "MIG profile not offered by this GPU model"},
          {"7g on a partitioned GPU", [](Node& n) { Partition(n, 0, 0x40, 1); },
           MigInstance("7g.80gb", 0, 0), Code::kUnschedulable, "no free MIG slot"},
          {"3g beside a 1g at slice 6", [](Node& n) { Partition(n, 0, 0x40, 1); },
           MigInstance("3g.40gb", 0, 0), Code::kSuccess, nullptr},
          {"4g needs slice 0", [](Node& n) { Partition(n, 0, 0x01, 1); },
           MigInstance("4g.40gb", 0, 0), Code::kUnschedulable, "no free MIG slot"},
          {"compute slices used up", [](Node& n) { Partition(n, 0, 0x3F, 7, 3); },
           MigInstance("1g.10gb", 0, 0), Code::kUnschedulable, "no free MIG slot"},
          {"a time-sliced GPU is not partitioned", [](Node& n) { Share(n, 0, 100); },
           MigInstance("1g.10gb", 0, 0), Code::kUnschedulable, "no free MIG slot"},
      });
  // A100-80GB offers the same profile names as H100.
  Run("mig_placement", MakeNode(kA100, 2),
      {
          {"A100 3g", NoEdit, MigInstance("3g.40gb", 0, 0), Code::kSuccess, nullptr},
          {"one GPU free of two", [](Node& n) { Partition(n, 0, 0xFF, 7); },
           MigInstance("7g.80gb", 0, 0), Code::kSuccess, nullptr},
      });
}

TEST_F(FilterTableTest, NvlinkTopology) {
  const char* kSplit = "free GPUs not in one NVLink domain";
  auto nv = [](int count) {
    return With(WholeGpus(count, 0, 0), [](PodRequest& p) { p.topology = Topology::kNvlink; });
  };
  Run("nvlink_topology", MakeNode(kH100, 8, 64000, 262144, /*gpus_per_domain=*/4),
      {
          {"one domain free", NoEdit, nv(4), Code::kSuccess, nullptr},
          {"each domain 3 free", [](Node& n) { Share(n, 1, 1000); Share(n, 6, 1000); }, nv(4),
           Code::kUnschedulable, kSplit},
          {"3 still fit", [](Node& n) { Share(n, 1, 1000); Share(n, 6, 1000); }, nv(3),
           Code::kSuccess, nullptr},
          {"more than a domain", NoEdit, nv(5), Code::kUnschedulable, kSplit},
          {"without topology anything goes",
           [](Node& n) { Share(n, 1, 1000); Share(n, 6, 1000); }, WholeGpus(6, 0, 0),
           Code::kSuccess, nullptr},
          {"one GPU needs no link", [](Node& n) { n = MakeNode(kH100, 8); }, nv(1),
           Code::kSuccess, nullptr},
          {"GPUs without a domain", [](Node& n) { n = MakeNode(kH100, 8); }, nv(2),
           Code::kUnschedulable, kSplit},
          {"fractions are not its job", [](Node& n) { n = MakeNode(kH100, 8); },
           With(FractionalGpu(100, 0, 0, 0), [](PodRequest& p) { p.topology = Topology::kNvlink; }),
           Code::kSuccess, nullptr},
      });
}

TEST_F(FilterTableTest, RackPowerReadsTheRackBudget) {
  std::unique_ptr<Plugin> p = Make("rack_power");
  ASSERT_NE(p, nullptr);
  EXPECT_FALSE(p->NodeLocal()) << "the budget is shared by the rack";
  struct Row {
    const char* name;
    int32_t rack;
    double used_kw;  // rack 0 has a 1.0 kW budget, rack 1 none
    PodRequest pod;
    Code code;
  };
  const Row rows[] = {
      // H100 TDP 700 W: one whole GPU draws 0.7 kW, a half share 0.35, a 3g instance 0.3.
      {"whole GPU fits", 0, 0.3, WholeGpus(1, 0, 0), Code::kSuccess},
      {"whole GPU over budget", 0, 0.31, WholeGpus(1, 0, 0), Code::kUnschedulable},
      {"two GPUs over budget", 0, 0, WholeGpus(2, 0, 0), Code::kUnschedulable},
      {"half share fits", 0, 0.65, FractionalGpu(500, 0, 0, 0), Code::kSuccess},
      {"half share over budget", 0, 0.66, FractionalGpu(500, 0, 0, 0), Code::kUnschedulable},
      {"3g instance fits", 0, 0.7, MigInstance("3g.40gb", 0, 0), Code::kSuccess},
      {"7g instance over budget", 0, 0.31, MigInstance("7g.80gb", 0, 0), Code::kUnschedulable},
      {"cpu-only work draws nothing here", 0, 1.0, CpuOnly(1000, 0), Code::kSuccess},
      {"rack without budget", 1, 100.0, WholeGpus(8, 0, 0), Code::kSuccess},
      {"node outside racks", -1, 0, WholeGpus(8, 0, 0), Code::kSuccess},
  };
  for (const Row& row : rows) {
    SCOPED_TRACE(row.name);
    cluster_.racks()[0].power_used_kw = row.rack == 0 ? row.used_kw : 0;
    cluster_.racks()[1].power_used_kw = row.rack == 1 ? row.used_kw : 0;
    Node n = MakeNode(kH100, 8);
    n.rack = row.rack;
    PluginStatus st = Filter(p.get(), row.pod, n);
    EXPECT_EQ(static_cast<int>(st.code), static_cast<int>(row.code));
    if (row.code != Code::kSuccess) {
      EXPECT_STREQ(st.reason, "rack power budget exceeded");
    }
  }
}

// Each filter must stand on its own: a profile may order them differently, so one that reads a
// node's model facts must not assume gpu_model already turned GPU work away from a CPU-only
// node (model kNoModel). Run in a child process so a crash fails only this test.
TEST_F(FilterTableTest, GpuFiltersOnACpuOnlyNodeDoNotCrash) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Node cpu = MakeNode(kH100, 0);
  cpu.rack = 0;
  const PodRequest nv2 =
      With(WholeGpus(2, 0, 0), [](PodRequest& p) { p.topology = Topology::kNvlink; });
  struct Row {
    const char* plugin;
    PodRequest pod;
  };
  const Row rows[] = {
      {"rack_power", WholeGpus(1, 0, 0)},     {"rack_power", MigInstance("3g.40gb", 0, 0)},
      {"mig_placement", MigInstance("1g.10gb", 0, 0)}, {"gpu_share", WholeGpus(1, 0, 0)},
      {"gpu_share", FractionalGpu(100, 0, 0, 0)},      {"nvlink_topology", nv2},
  };
  for (const Row& row : rows) {
    SCOPED_TRACE(row.plugin);
    std::unique_ptr<Plugin> p = Make(row.plugin);
    ASSERT_NE(p, nullptr);
    EXPECT_EXIT(
        {
          PluginStatus st = Filter(p.get(), row.pod, cpu);
          // rack_power may pass (no GPU draws power here); the GPU filters must reject.
          const bool ok = std::string(row.plugin) == "rack_power" || !st.ok();
          std::exit(ok ? 0 : 3);
        },
        ::testing::ExitedWithCode(0), "");
  }
}

TEST(LaneTaintsTest, ToleratesMatchesKeyValueAndEffect) {
  PodRequest p = CpuOnly(1, 1);
  p.tolerations.push_back({"gpu", "h100", false, "NoSchedule"});
  EXPECT_TRUE(Tolerates(p, {"gpu", "h100", "NoSchedule"}));
  EXPECT_FALSE(Tolerates(p, {"gpu", "h100", "NoExecute"}));
  EXPECT_FALSE(Tolerates(p, {"gpu", "a100", "NoSchedule"}));
  EXPECT_FALSE(Tolerates(CpuOnly(1, 1), {"gpu", "h100", "NoSchedule"}));
}

// ---------------------------------------------------------------------------------------------
// Scores: one table per plugin. Node A has id 0, node B id 1 (plugins may cache per node id).

enum class Prefer { kA, kB, kEqual };

struct ScoreRow {
  const char* name;
  std::function<void(Node&)> a;
  std::function<void(Node&)> b;
  PodRequest pod;
  Prefer prefer;
};

class ScoreTableTest : public PluginTest {
 protected:
  void Run(const std::string& plugin, const Node& base, const std::vector<ScoreRow>& rows,
           std::map<std::string, double> params = {}) {
    for (const ScoreRow& row : rows) {
      SCOPED_TRACE(plugin + ": " + row.name);
      // A fresh plugin per row: nothing cached from another row.
      std::unique_ptr<Plugin> p = Make(plugin, params);
      ASSERT_NE(p, nullptr);
      Node a = base, b = base;
      row.a(a);
      row.b(b);
      a.id = 0;
      b.id = 1;
      const int64_t sa = Score(p.get(), row.pod, a);
      const int64_t sb = Score(p.get(), row.pod, b);
      switch (row.prefer) {
        case Prefer::kA: EXPECT_GT(sa, sb); break;
        case Prefer::kB: EXPECT_LT(sa, sb); break;
        case Prefer::kEqual: EXPECT_EQ(sa, sb); break;
      }
    }
  }
};

auto CpuFree(int64_t v) {
  return [=](Node& n) { n.cpu_free_milli = v; };
}
auto GpusUsed(int k) {
  return [=](Node& n) {
    for (int i = 0; i < k; ++i) Share(n, i, 1000);
  };
}

TEST_F(ScoreTableTest, BestFitPrefersTheTighterNode) {
  Run("bestfit", MakeNode(kH100, 8),
      {
          {"less cpu left", CpuFree(8000), CpuFree(60000), CpuOnly(4000, 0), Prefer::kA},
          {"fewer GPUs left", GpusUsed(6), GpusUsed(0), WholeGpus(1, 0, 0), Prefer::kA},
          {"fewer GPUs left, B", GpusUsed(1), GpusUsed(5), FractionalGpu(300, 0, 0, 0),
           Prefer::kB},
          {"same state", GpusUsed(2), GpusUsed(2), WholeGpus(1, 0, 0), Prefer::kEqual},
      });
}

TEST_F(ScoreTableTest, BestFitRawScoreAndNormalisation) {
  std::unique_ptr<Plugin> p = Make("bestfit");
  // cpu term (64000 - 0) / 128000 = 0.5, gpu term (8000 - 1000) / 8000 = 0.875:
  // (1 - 0.25 - 0.4375) × 100 = 31.25.
  EXPECT_EQ(Score(p.get(), WholeGpus(1, 0, 0), MakeNode(kH100, 8)), 31);
  std::unique_ptr<Plugin> q = Make("bestfit", {{"max_cpu_milli", 64000}, {"max_gpu_milli", 8000}});
  EXPECT_EQ(Score(q.get(), WholeGpus(1, 0, 0), MakeNode(kH100, 8)), 6);  // 1 - 0.5 - 0.4375
  auto* s = dynamic_cast<ScorePlugin*>(p.get());
  ASSERT_TRUE(s->Normalizes());
  std::vector<int64_t> scores = {10, 30, 20, 10};
  s->Normalize(scores);
  EXPECT_EQ(scores, (std::vector<int64_t>{0, 100, 50, 0}));
  std::vector<int64_t> equal = {7, 7};
  MinMaxNormalize(equal);
  EXPECT_EQ(equal, (std::vector<int64_t>{0, 0}));
  std::vector<int64_t> negative = {-50, 50, 0};
  MinMaxNormalize(negative);
  EXPECT_EQ(negative, (std::vector<int64_t>{0, 100, 50}));
}

TEST_F(ScoreTableTest, DotProdPrefersTheSmallerDotProduct) {
  Run("dotprod", MakeNode(kH100, 8),
      {
          {"less gpu free", GpusUsed(6), GpusUsed(0), WholeGpus(1, 0, 0), Prefer::kA},
          {"less cpu free", CpuFree(16000), CpuFree(64000), CpuOnly(8000, 0), Prefer::kA},
          {"cpu free does not matter to a 0-cpu pod", CpuFree(16000), CpuFree(64000),
           WholeGpus(1, 0, 0), Prefer::kEqual},
      });
  std::unique_ptr<Plugin> p = Make("dotprod");
  // node (0.5, 1.0) · pod (0.25, 0.125) = 0.25 -> (1 - 0.125) × 100.
  EXPECT_EQ(Score(p.get(), WholeGpus(1, 32000, 0), MakeNode(kH100, 8)), 87);
}

TEST_F(ScoreTableTest, SpreadPrefersTheEmptierNode) {
  Run("spread", MakeNode(kH100, 8),
      {
          {"more GPUs free", GpusUsed(0), GpusUsed(4), WholeGpus(1, 0, 0), Prefer::kA},
          {"more cpu free", CpuFree(64000), CpuFree(10000), CpuOnly(1000, 0), Prefer::kA},
          {"fewer GPUs free", GpusUsed(7), GpusUsed(1), FractionalGpu(100, 0, 0, 0), Prefer::kB},
      });
  std::unique_ptr<Plugin> p = Make("spread");
  Node n = MakeNode(kH100, 8);
  n.cpu_free_milli = 32000;
  GpusUsed(4)(n);
  // ((32000 / 64000) + (4000 - 1000) / 8000) / 2 = 0.4375.
  EXPECT_EQ(Score(p.get(), WholeGpus(1, 0, 0), n), 43);
  EXPECT_EQ(Score(p.get(), CpuOnly(16000, 0), MakeNode(kH100, 0)), 75);  // CPU only: one dimension
}

TEST_F(ScoreTableTest, GpuPackingTiers) {
  const Node base = MakeNode(kH100, 4);
  std::unique_ptr<Plugin> p = Make("packing");
  struct Row {
    const char* name;
    std::function<void(Node&)> edit;
    PodRequest pod;
    int64_t lo, hi;  // tier bounds, inclusive
    int64_t exact;   // -1 = only the tier
  };
  const Row rows[] = {
      {"fraction on a partly used GPU (tier 1)", [](Node& n) { Share(n, 0, 500); },
       FractionalGpu(300, 0, 0, 0), 50, 100, 95},
      {"fraction on a fuller GPU scores higher", [](Node& n) { Share(n, 0, 600); },
       FractionalGpu(300, 0, 0, 0), 50, 100, 96},
      {"partly used GPU too small: a whole-free one of a used node (tier 2)",
       [](Node& n) { Share(n, 0, 800); }, FractionalGpu(300, 0, 0, 0), 33, 50, 49},
      {"whole GPU on a used node (tier 2)", [](Node& n) { Share(n, 0, 1000); }, WholeGpus(1, 0, 0),
       33, 50, 49},
      {"two whole GPUs on a used node", [](Node& n) { Share(n, 0, 1000); }, WholeGpus(2, 0, 0), 33,
       50, 48},
      {"idle node (tier 3)", [](Node&) {}, WholeGpus(1, 0, 0), 0, 33, 29},
      {"idle node, fraction", [](Node&) {}, FractionalGpu(100, 0, 0, 0), 0, 33, 29},
      {"cpu-only work", [](Node& n) { Share(n, 0, 500); }, CpuOnly(100, 0), 0, 0, 0},
  };
  for (const Row& row : rows) {
    SCOPED_TRACE(row.name);
    Node n = base;
    row.edit(n);
    const int64_t s = Score(p.get(), row.pod, n);
    EXPECT_GE(s, row.lo);
    EXPECT_LE(s, row.hi);
    if (row.exact >= 0) {
      EXPECT_EQ(s, row.exact);
    }
  }
  Run("packing", base,
      {
          {"partly used GPU over idle node", [](Node& n) { Share(n, 2, 500); }, NoEdit,
           FractionalGpu(500, 0, 0, 0), Prefer::kA},
          {"less leftover first", [](Node& n) { Share(n, 0, 600); },
           [](Node& n) { Share(n, 0, 100); }, FractionalGpu(300, 0, 0, 0), Prefer::kA},
          {"used node over idle node", NoEdit, [](Node& n) { Share(n, 3, 1000); },
           WholeGpus(2, 0, 0), Prefer::kB},
          {"partly used GPU over a used node's free GPU", [](Node& n) { Share(n, 1, 1000); },
           [](Node& n) { Share(n, 1, 200); }, FractionalGpu(500, 0, 0, 0), Prefer::kB},
      });
}

TEST_F(ScoreTableTest, GpuPackingSmallerIdleNodeFirstAndIdleStaysInTier3) {
  std::unique_ptr<Plugin> p = Make("packing");
  EXPECT_EQ(Score(p.get(), WholeGpus(1, 0, 0), MakeNode(kH100, 2)), 31);
  EXPECT_EQ(Score(p.get(), WholeGpus(1, 0, 0), MakeNode(kH100, 8)), 25);
  // Tier 3 is 0..33 for any node size, so an idle node never outranks a used one.
  Node used = MakeNode(kH100, 48);
  Share(used, 0, 1000);
  for (int gpus : {16, 34, 48}) {
    SCOPED_TRACE(std::to_string(gpus) + " idle GPUs");
    const int64_t idle = Score(p.get(), WholeGpus(16, 0, 0), MakeNode(kH100, gpus));
    EXPECT_GE(idle, 0);
    EXPECT_LE(idle, 33);
  }
  EXPECT_GT(Score(p.get(), WholeGpus(16, 0, 0), used),
            Score(p.get(), WholeGpus(16, 0, 0), MakeNode(kH100, 48)));
}

// Clustering reads the pods on each node through the Handle, so it runs on a scheduler's
// cluster: node k is in lane "nk" and work is steered there by pool.
class ClusteringTest : public ::testing::Test {
 protected:
  void SetUp() override {
    InternModels(cluster_);
    for (int k = 0; k < 5; ++k) {
      Node n = MakeNode(kH100, k == 4 ? 2 : 8, 64000, 262144, 0, k);
      n.pool = n.name;
      cluster_.AddNode(n);
    }
    Profile p{"place", DefaultFilters()};
    auto s = Scheduler::Create(&cluster_, p, Registry::BuiltIn(), {});
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    sched_ = std::move(*s);
  }
  void Place(PodRequest pod, int node) {
    pod.pool = "n" + std::to_string(node);
    ScheduleResult r = sched_->ScheduleOne(pod);
    ASSERT_TRUE(r.placed) << r.reason;
    ASSERT_EQ(r.node, node);
  }
  int64_t ScoreOn(const PodRequest& pod, int node) {
    PluginArgs a;
    a.handle = sched_.get();
    auto p = Registry::BuiltIn().Create("clustering", a);
    EXPECT_TRUE(p.ok());
    CycleState state(&rng_);
    GpuPick pick;
    return dynamic_cast<ScorePlugin*>(p->get())->Score(state, pod, cluster_.node(node), &pick);
  }
  cluster::Cluster cluster_;
  std::unique_ptr<Scheduler> sched_;
  Rng rng_{3};
};

TEST_F(ClusteringTest, TagsKeepLikeWithLike) {
  Place(FractionalGpu(400, 0, 0, 0), 0);   // n0: shares only
  Place(FractionalGpu(300, 0, 0, 0), 1);   // n1: mixed
  Place(WholeGpus(1, 0, 0), 1);
  Place(WholeGpus(1, 0, 0), 3);            // n3: 1-GPU pods only
  Place(CpuOnly(1000, 1024), 2);           // n2: no GPU work
  const PodRequest share = FractionalGpu(200, 0, 0, 0);
  const PodRequest one = WholeGpus(1, 0, 0);
  // base = 25 × used milli / 8000: n0 400 -> 1, n1 1300 -> 4, n2 0, n3 1000 -> 3.
  EXPECT_EQ(ScoreOn(share, 0), 1 + 75);   // same class only
  EXPECT_EQ(ScoreOn(share, 1), 4 + 50);   // mixed
  EXPECT_EQ(ScoreOn(share, 2), 0 + 25);   // no GPU work (CPU pods do not count)
  EXPECT_EQ(ScoreOn(share, 3), 3 + 0);    // other classes only
  EXPECT_EQ(ScoreOn(one, 3), 3 + 75);
  EXPECT_EQ(ScoreOn(one, 0), 1 + 0);
  EXPECT_EQ(ScoreOn(WholeGpus(2, 0, 0), 3), 3 + 0) << "2-GPU work is another class than 1-GPU";
  EXPECT_EQ(ScoreOn(CpuOnly(1, 1), 0), 0);
}

TEST_F(ClusteringTest, AnIdleSmallNodeHasNoUsedGpu) {
  // n4 has 2 GPUs and no work: used GPU milli is 0, so it scores like the idle 8-GPU n2.
  EXPECT_EQ(ScoreOn(WholeGpus(1, 0, 0), 2), 25);
  EXPECT_EQ(ScoreOn(WholeGpus(1, 0, 0), 4), 25);
}

// ---------------------------------------------------------------------------------------------
// FGD

struct FragRow {
  const char* name;
  int64_t cpu_free;
  std::vector<int32_t> gpu_free;
  ModelId model;
  double expected;
};

TEST(FgdTest, NodeFragmentationByHand) {
  // M = {A: 1 CPU, 0.5 GPU, p = 0.5; B: 1 CPU, 2 whole GPUs, p = 0.5}.
  TargetWorkload w;
  w.shapes.push_back({1000, 500, 1, {}, 0.5});
  w.shapes.push_back({1000, 1000, 2, {}, 0.5});
  const FragRow rows[] = {
      // A fits (GPUs 0 and 2): the 300 sliver is its fragment. B fits on one GPU only: all
      // 1900 free is B's fragment. 0.5 × 300 + 0.5 × 1900.
      {"mixed", 4000, {1000, 300, 600}, kH100, 1100},
      {"all fit, no slivers", 4000, {1000, 1000}, kH100, 0},
      {"no CPU for either shape", 500, {1000, 1000}, kH100, 2000},
      {"nothing free", 4000, {0, 0}, kH100, 0},
      {"no GPU fits A or B", 4000, {400, 400}, kH100, 800},
      {"A fits, B does not", 4000, {1000, 500, 100}, kH100, 0.5 * 100 + 0.5 * 1600},
      {"cpu boundary: exactly enough", 1000, {1000, 1000, 200}, kH100, 0.5 * 200 + 0.5 * 200},
  };
  for (const FragRow& r : rows) {
    SCOPED_TRACE(r.name);
    EXPECT_DOUBLE_EQ(NodeFragmentation(w, r.cpu_free, r.gpu_free, r.model), r.expected);
  }
  // A shape restricted to T4 cannot use an H100 at all.
  TargetWorkload t4;
  t4.shapes.push_back({0, 500, 1, {kT4}, 1.0});
  EXPECT_DOUBLE_EQ(NodeFragmentation(t4, 0, std::vector<int32_t>{1000, 200}, kH100), 1200);
  EXPECT_DOUBLE_EQ(NodeFragmentation(t4, 0, std::vector<int32_t>{1000, 200}, kT4), 200);
  // CPU-only shapes see every free GPU as a fragment.
  TargetWorkload cpu;
  cpu.shapes.push_back({1000, 0, 0, {}, 1.0});
  EXPECT_DOUBLE_EQ(NodeFragmentation(cpu, 64000, std::vector<int32_t>{700}, kH100), 700);
}

// The typical task shapes as the FGD artifact builds them (GetTypicalPods with
// isInvolvedCpuPods=true, podPopularityThreshold=95, step 1, gpuResWeight=0): one count per
// request, CPU-only requests included, memory not part of the shape, the most popular shapes
// kept until they cover >= 95% of requests, equal counts ordered larger shape first, weights
// renormalised over the kept shapes. Any change here moves every FGD number in
// bench/RESULTS.md; the variants that were measured against it are listed there.
TEST(FgdTest, TypicalShapesFollowTheArtifactsRules) {
  std::vector<PodRequest> pods;
  auto add = [&pods](int n, PodRequest p) {
    for (int i = 0; i < n; ++i) pods.push_back(p);
  };
  add(50, FractionalGpu(500, 0, 4000, 1024));
  add(20, CpuOnly(8000, 4096));
  add(10, WholeGpus(1, 4000, 2048));
  add(5, FractionalGpu(500, 0, 4000, 999999));  // same shape as the first: memory is ignored
  add(8, WholeGpus(8, 64000, 1024));            // 8 requests, 64 GPUs: counted once each
  add(3, WholeGpus(2, 8000, 1024));             // equal count with the next, larger CPU
  add(3, WholeGpus(2, 4000, 1024));
  add(1, FractionalGpu(250, 0, 2000, 1024));
  // Total 100. Cumulative: 55, 75, 85, 93, 96 -> five shapes cover >= 95%.
  const TargetWorkload w = BuildTargetWorkload(pods, 0.95);
  ASSERT_EQ(w.shapes.size(), 5u);
  EXPECT_EQ(w.shapes[0].gpu_milli, 500);
  EXPECT_EQ(w.shapes[0].cpu_milli, 4000);
  EXPECT_EQ(w.shapes[1].gpu_count, 0);  // the CPU-only shape is part of the workload
  EXPECT_EQ(w.shapes[1].cpu_milli, 8000);
  EXPECT_EQ(w.shapes[2].gpu_count, 1);
  EXPECT_EQ(w.shapes[3].gpu_count, 8);
  EXPECT_EQ(w.shapes[4].gpu_count, 2);
  EXPECT_EQ(w.shapes[4].cpu_milli, 8000) << "equal counts: the larger shape is kept first";
  double sum = 0;
  for (const TaskShape& s : w.shapes) sum += s.weight;
  EXPECT_NEAR(sum, 1.0, 1e-12);
  EXPECT_NEAR(w.shapes[0].weight, 55.0 / 96.0, 1e-12);
  EXPECT_NEAR(w.shapes[3].weight, 8.0 / 96.0, 1e-12) << "not weighted by GPUs requested";
  // Full cover keeps every shape.
  EXPECT_EQ(BuildTargetWorkload(pods, 1.0).shapes.size(), 7u);
}

TEST(FgdTest, ClusterFragmentationIsTheSumOverNodes) {
  TargetWorkload w;
  w.shapes.push_back({2000, 250, 1, {}, 0.4});
  w.shapes.push_back({4000, 1000, 1, {kH100}, 0.3});
  w.shapes.push_back({8000, 1000, 4, {}, 0.2});
  w.shapes.push_back({1000, 0, 0, {}, 0.1});
  cluster::Cluster c;
  InternModels(c);
  Rng rng(11);
  for (int k = 0; k < 40; ++k) {
    const ModelId m = static_cast<ModelId>(rng.Uniform(4));
    Node n = MakeNode(m, 1 + static_cast<int>(rng.Uniform(8)), 32000, 65536, 0, k);
    n.cpu_free_milli = static_cast<int64_t>(rng.Uniform(32001));
    for (Gpu& g : n.gpus) g.free_milli = static_cast<int32_t>(rng.Uniform(5)) * 250;
    c.AddNode(n);
  }
  double sum = 0;
  std::vector<int32_t> free;
  for (const Node& n : c.nodes()) {
    free.clear();
    for (const Gpu& g : n.gpus) free.push_back(g.free_milli);
    sum += NodeFragmentation(w, n.cpu_free_milli, free, n.model);
  }
  EXPECT_NEAR(ClusterFragmentation(w, c), sum, 1e-6);
  EXPECT_GT(sum, 0);
}

TEST_F(PluginTest, FgdPicksTheGpuThatLowersFragmentation) {
  TargetWorkload w;
  w.shapes.push_back({0, 600, 1, {}, 1.0});
  std::unique_ptr<Plugin> p = Make("fgd", {}, &w);
  ASSERT_NE(p, nullptr);
  // A: {1000, 700}. F before 0. Half a GPU on GPU 1 leaves a 200 sliver (F 200), on GPU 0 a
  // 500 one (F 500): GPU 1, score floor(sigmoid(-0.2) × 100) = 45.
  Node a = MakeNode(kH100, 2, 64000, 262144, 0, /*id=*/0);
  Share(a, 1, 300);
  GpuPick pick_a;
  EXPECT_EQ(Score(p.get(), FractionalGpu(500, 0, 0, 0), a, &pick_a), 45);
  EXPECT_EQ(pick_a.mask, uint64_t{1} << 1);
  // B: {1000, 500}. F before 500 (GPU 1 cannot host a 600). Filling GPU 1 removes the sliver:
  // F after 0, score floor(sigmoid(0.5) × 100) = 62.
  Node b = MakeNode(kH100, 2, 64000, 262144, 0, /*id=*/1);
  Share(b, 1, 500);
  GpuPick pick_b;
  EXPECT_EQ(Score(p.get(), FractionalGpu(500, 0, 0, 0), b, &pick_b), 62);
  EXPECT_EQ(pick_b.mask, uint64_t{1} << 1);
  // Memory caps rule a GPU out.
  Node c = MakeNode(kH100, 2, 64000, 262144, 0, /*id=*/2);
  Share(c, 1, 500, kH100Mem - 100);
  GpuPick pick_c;
  Score(p.get(), FractionalGpu(500, 1000, 0, 0), c, &pick_c);
  EXPECT_EQ(pick_c.mask, uint64_t{1} << 0);
}

TEST_F(PluginTest, FgdScoreTable) {
  TargetWorkload w;
  w.shapes.push_back({0, 600, 1, {}, 0.5});
  w.shapes.push_back({0, 1000, 2, {}, 0.5});
  const std::vector<ScoreRow> rows = {
      {"fill a sliver rather than open a GPU", [](Node& n) { Share(n, 1, 500); },
       [](Node& n) { Share(n, 1, 300); }, FractionalGpu(500, 0, 0, 0), Prefer::kA},
      {"whole GPU: keep a pair for the 2-GPU shape", GpusUsed(1), [](Node& n) {
         n = MakeNode(kH100, 2);
       },
       WholeGpus(1, 0, 0), Prefer::kA},
      {"same state", GpusUsed(1), GpusUsed(1), WholeGpus(1, 0, 0), Prefer::kEqual},
  };
  for (const ScoreRow& row : rows) {
    SCOPED_TRACE(row.name);
    std::unique_ptr<Plugin> p = Make("fgd", {}, &w);
    Node a = MakeNode(kH100, 4), b = MakeNode(kH100, 4);
    row.a(a);
    row.b(b);
    a.id = 0;
    b.id = 1;
    const int64_t sa = Score(p.get(), row.pod, a), sb = Score(p.get(), row.pod, b);
    if (row.prefer == Prefer::kA) {
      EXPECT_GT(sa, sb);
    }
    if (row.prefer == Prefer::kEqual) {
      EXPECT_EQ(sa, sb);
    }
  }
  std::unique_ptr<Plugin> p = Make("fgd", {}, &w);
  EXPECT_EQ(Score(p.get(), CpuOnly(0, 0), MakeNode(kH100, 4)), 100) << "nothing requested";
  std::unique_ptr<Plugin> fine = Make("fgd", {{"resolution", 10000}}, &w);
  EXPECT_EQ(Score(fine.get(), WholeGpus(4, 0, 0), MakeNode(kH100, 4, 64000, 262144, 0, 5)), 5000)
      << "F 0 before and after: sigmoid(0) × resolution";
}

TEST_F(PluginTest, FgdFactoryChecksItsArguments) {
  TargetWorkload empty;
  PluginArgs a;
  a.handle = sched_.get();
  a.workload = &empty;
  auto p = Registry::BuiltIn().Create("fgd", a);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kFailedPrecondition);
  a.workload = nullptr;
  EXPECT_EQ(Registry::BuiltIn().Create("fgd", a).status().code(), StatusCode::kFailedPrecondition);
  a.workload = &workload_;
  a.params = {{"resolution", 0.5}};
  EXPECT_EQ(Registry::BuiltIn().Create("fgd", a).status().code(), StatusCode::kInvalidArgument);
  for (const char* name : {"bestfit", "dotprod"}) {
    for (const char* param : {"max_cpu_milli", "max_gpu_milli"}) {
      a.params = {{param, 0}};
      EXPECT_EQ(Registry::BuiltIn().Create(name, a).status().code(), StatusCode::kInvalidArgument)
          << name << " " << param;
    }
  }
  a.params = {{"max_gpu_milli", -1}};
  EXPECT_EQ(Registry::BuiltIn().Create("clustering", a).status().code(),
            StatusCode::kInvalidArgument);
}

TEST_F(PluginTest, EveryBuiltInIsRegisteredUnderItsName) {
  const std::vector<std::string> expected = {
      "bestfit",     "clustering",   "dotprod",    "fgd",         "gpu_model",
      "gpu_share",   "lane_taints",  "mig_placement", "node_unschedulable", "nvlink_topology",
      "packing",     "rack_power",   "random",     "resource_fit", "spread"};
  const std::vector<std::string> names = Registry::BuiltIn().Names();
  for (const std::string& n : expected) {
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
    std::unique_ptr<Plugin> p = Make(n);
    ASSERT_NE(p, nullptr) << n;
  }
  Registry r;
  ASSERT_TRUE(r.Register("x", [](const PluginArgs&) -> StatusOr<std::unique_ptr<Plugin>> {
                 return InternalError("unused");
               }).ok());
  Status dup = r.Register("x", nullptr);
  EXPECT_EQ(dup.code(), StatusCode::kAlreadyExists);
}

// ---------------------------------------------------------------------------------------------
// Random: uniform among feasible nodes and among fitting GPUs.

// Pearson's chi-square statistic against a uniform expectation.
double ChiSquare(const std::vector<int>& counts) {
  double total = 0;
  for (int c : counts) total += c;
  const double expected = total / static_cast<double>(counts.size());
  double chi = 0;
  for (int c : counts) chi += (c - expected) * (c - expected) / expected;
  return chi;
}

TEST(RandomScoreTest, PicksFeasibleNodesUniformly) {
  cluster::Cluster c;
  InternModels(c);
  for (int k = 0; k < 5; ++k) c.AddNode(MakeNode(kH100, 4, 64000, 262144, 0, k));
  c.node(4).unschedulable = true;
  Profile p = PolicyProfile("random").value();
  SchedulerOptions opts;
  opts.seed = 5;
  opts.tie_break = SchedulerOptions::TieBreak::kFirst;  // a constant score would always pick n0
  auto s = Scheduler::Create(&c, p, Registry::BuiltIn(), opts);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_FALSE((*s)->memoized()) << "random answers may not be memoised";
  std::vector<int> nodes(4, 0), gpus(4, 0);
  constexpr int kCycles = 4000;
  for (int i = 0; i < kCycles; ++i) {
    ScheduleResult r =
        (*s)->ScheduleOne(With(FractionalGpu(100, 0, 100, 100), [&](PodRequest& q) { q.uid = i + 1; }));
    ASSERT_TRUE(r.placed) << r.reason;
    ASSERT_GE(r.node, 0);
    ASSERT_LT(r.node, 4) << "the cordoned node was picked";
    ++nodes[r.node];
    ASSERT_EQ(r.alloc.gpus.size(), 1u);
    ++gpus[r.alloc.gpus[0].gpu];
    ASSERT_TRUE((*s)->Remove(i + 1).ok());
  }
  // 3 degrees of freedom: P(chi² > 16.27) = 0.001. Seeded, so this never flakes.
  EXPECT_LT(ChiSquare(nodes), 16.27) << nodes[0] << " " << nodes[1] << " " << nodes[2] << " "
                                      << nodes[3];
  EXPECT_LT(ChiSquare(gpus), 16.27) << gpus[0] << " " << gpus[1] << " " << gpus[2] << " "
                                     << gpus[3];
  for (int n : nodes) EXPECT_GT(n, kCycles / 4 * 8 / 10);
}

TEST(RandomScoreTest, SameSeedSameChoices) {
  auto run = [](uint64_t seed) {
    cluster::Cluster c;
    InternModels(c);
    for (int k = 0; k < 6; ++k) c.AddNode(MakeNode(kH100, 8, 64000, 262144, 0, k));
    SchedulerOptions opts;
    opts.seed = seed;
    auto s = Scheduler::Create(&c, PolicyProfile("random").value(), Registry::BuiltIn(), opts);
    std::vector<int> out;
    for (int i = 0; i < 40; ++i) out.push_back((*s)->ScheduleOne(WholeGpus(1, 0, 0)).node);
    return out;
  };
  EXPECT_EQ(run(1), run(1));
  EXPECT_NE(run(1), run(2));
}

// ---------------------------------------------------------------------------------------------
// Placement inside a node: UsableGpus, GpusFit, DefaultPick, MakeAllocation.

TEST_F(PluginTest, UsableGpusByKind) {
  Node n = MakeNode(kH100, 6);
  Share(n, 0, 1000);              // full
  Share(n, 1, 600, 40000);        // 400 free, 41920 MiB free
  Share(n, 2, 100);               // 900 free
  Partition(n, 3, 0x01, 1);       // MIG, room left
  Partition(n, 4, 0xFF, 7, 1);    // MIG, full
  // GPU 5 empty.
  const ModelFacts& f = Facts(kH100);
  EXPECT_EQ(UsableGpus(CpuOnly(1, 1), n, f), 0u);
  EXPECT_EQ(UsableGpus(WholeGpus(1, 0, 0), n, f), 0b100000u);
  EXPECT_EQ(UsableGpus(FractionalGpu(400, 0, 0, 0), n, f), 0b100110u);
  EXPECT_EQ(UsableGpus(FractionalGpu(401, 0, 0, 0), n, f), 0b100100u);
  EXPECT_EQ(UsableGpus(FractionalGpu(300, 41921, 0, 0), n, f), 0b100100u);
  EXPECT_EQ(UsableGpus(MigInstance("1g.10gb", 0, 0), n, f), 0b101000u);
  EXPECT_EQ(UsableGpus(MigInstance("7g.80gb", 0, 0), n, f), 0b100000u);
  EXPECT_EQ(UsableGpus(MigInstance("nope", 0, 0), n, f), 0u);
  EXPECT_EQ(UsableGpus(MigInstance("1g.10gb", 0, 0), MakeNode(kT4, 2), Facts(kT4)), 0u);
}

TEST_F(PluginTest, DefaultPickTakesTheTightestGpuForAFraction) {
  Node n = MakeNode(kH100, 4);
  Share(n, 1, 600);  // 400
  Share(n, 2, 400);  // 600
  Share(n, 3, 700);  // 300
  const ModelFacts& f = Facts(kH100);
  EXPECT_EQ(DefaultPick(FractionalGpu(300, 0, 0, 0), n, f).mask, 1u << 3);
  EXPECT_EQ(DefaultPick(FractionalGpu(350, 0, 0, 0), n, f).mask, 1u << 1);
  EXPECT_EQ(DefaultPick(FractionalGpu(700, 0, 0, 0), n, f).mask, 1u << 0);
  EXPECT_TRUE(DefaultPick(CpuOnly(1, 1), n, f).empty());
  Share(n, 1, 0, kH100Mem);  // GPU 1 has no memory left for a capped share
  EXPECT_EQ(DefaultPick(FractionalGpu(350, 10, 0, 0), n, f).mask, 1u << 2);
}

TEST_F(PluginTest, DefaultPickWholeGpusLowestFirstAndTheSmallestNvlinkDomainThatHolds) {
  Node n = MakeNode(kH100, 8, 64000, 262144, /*gpus_per_domain=*/4);
  Share(n, 0, 1000);  // domain 0: GPUs 1,2,3 usable; domain 1: 4..7
  const ModelFacts& f = Facts(kH100);
  EXPECT_EQ(DefaultPick(WholeGpus(2, 0, 0), n, f).mask, 0b00000110u);
  auto nv = [](int count) {
    return With(WholeGpus(count, 0, 0), [](PodRequest& p) { p.topology = Topology::kNvlink; });
  };
  EXPECT_EQ(DefaultPick(nv(3), n, f).mask, 0b00001110u) << "the fuller domain that still holds 3";
  EXPECT_EQ(DefaultPick(nv(2), n, f).mask, 0b00000110u);
  EXPECT_EQ(DefaultPick(nv(4), n, f).mask, 0b11110000u) << "only domain 1 holds 4";
  EXPECT_TRUE(GpusFit(nv(4), n, f));
  EXPECT_FALSE(GpusFit(nv(5), n, f));
  Share(n, 5, 1000);
  EXPECT_FALSE(GpusFit(nv(4), n, f));
  EXPECT_TRUE(GpusFit(WholeGpus(4, 0, 0), n, f));
  EXPECT_EQ(DefaultPick(nv(3), n, f).mask, 0b00001110u) << "domains tie at 3: lower domain";
}

TEST_F(PluginTest, DefaultPickMigPrefersAPartitionedGpuAndAValidStart) {
  Node n = MakeNode(kH100, 3);
  Partition(n, 1, 0x40, 1);  // a 1g.10gb at slice 6
  const ModelFacts& f = Facts(kH100);
  const cluster::MigGeometry& geo = *f.mig;
  // 1g.10gb beside slice 6: starts 4 and 5 both keep the 0..3 block and two 2-blocks free;
  // ties go to the higher start.
  GpuPick one = DefaultPick(MigInstance("1g.10gb", 0, 0), n, f);
  EXPECT_EQ(one.mask, 1u << 1);
  EXPECT_EQ(one.mig_start, 5);
  GpuPick three = DefaultPick(MigInstance("3g.40gb", 0, 0), n, f);
  EXPECT_EQ(three.mask, 1u << 1);
  EXPECT_EQ(three.mig_start, 0);
  GpuPick seven = DefaultPick(MigInstance("7g.80gb", 0, 0), n, f);
  EXPECT_EQ(seven.mask, 1u << 0) << "only an empty GPU holds a 7g";
  EXPECT_EQ(seven.mig_start, 0);
  // The fuller partitioned GPU wins.
  Partition(n, 2, 0x0F, 4);  // a 4g at 0
  GpuPick again = DefaultPick(MigInstance("1g.10gb", 0, 0), n, f);
  EXPECT_EQ(again.mask, 1u << 2);
  EXPECT_EQ(again.mig_start, 6);
  // Every pick is a layout NVIDIA accepts.
  const int p1 = cluster::FindMigProfile(geo, "1g.10gb");
  const int p3 = cluster::FindMigProfile(geo, "3g.40gb");
  const int p4 = cluster::FindMigProfile(geo, "4g.40gb");
  EXPECT_TRUE(cluster::ValidateMigLayout(geo, {{p1, 6}, {p1, one.mig_start}}).ok());
  EXPECT_TRUE(cluster::ValidateMigLayout(geo, {{p1, 6}, {p3, three.mig_start}}).ok());
  EXPECT_TRUE(cluster::ValidateMigLayout(geo, {{p4, 0}, {p1, again.mig_start}}).ok());
}

TEST_F(PluginTest, MakeAllocationFillsEveryField) {
  Node n = MakeNode(kH100, 4, 64000, 262144, 0, /*id=*/0);
  const ModelFacts& f = Facts(kH100);
  GpuPick two;
  two.mask = 0b1010;
  cluster::Allocation whole = MakeAllocation(WholeGpus(2, 3000, 4096), n, two, f);
  EXPECT_EQ(whole.node, 0);
  EXPECT_EQ(whole.cpu_milli, 3000);
  EXPECT_EQ(whole.mem_mib, 4096);
  EXPECT_DOUBLE_EQ(whole.power_kw, 1.4);
  ASSERT_EQ(whole.gpus.size(), 2u);
  EXPECT_EQ(whole.gpus[0].gpu, 1);
  EXPECT_EQ(whole.gpus[1].gpu, 3);
  EXPECT_EQ(whole.gpus[0].milli, 1000);
  EXPECT_EQ(whole.gpus[0].mem_mib, 0);
  EXPECT_EQ(whole.gpus[0].mig_profile, -1);

  GpuPick one;
  one.mask = 0b0100;
  cluster::Allocation frac = MakeAllocation(FractionalGpu(250, 8192, 500, 1024), n, one, f);
  ASSERT_EQ(frac.gpus.size(), 1u);
  EXPECT_EQ(frac.gpus[0].gpu, 2);
  EXPECT_EQ(frac.gpus[0].milli, 250);
  EXPECT_EQ(frac.gpus[0].mem_mib, 8192);
  EXPECT_DOUBLE_EQ(frac.power_kw, 0.175);

  GpuPick mig;
  mig.mask = 0b0001;
  mig.mig_start = 4;
  cluster::Allocation m = MakeAllocation(MigInstance("3g.40gb", 0, 0), n, mig, f);
  ASSERT_EQ(m.gpus.size(), 1u);
  EXPECT_EQ(m.gpus[0].mig_profile, cluster::FindMigProfile(*f.mig, "3g.40gb"));
  EXPECT_EQ(m.gpus[0].mig_start, 4);
  EXPECT_EQ(m.gpus[0].mig_slices, 4);
  EXPECT_EQ(m.gpus[0].mig_compute, 3);
  EXPECT_EQ(m.gpus[0].milli, 3000 / 7);
  EXPECT_NEAR(m.power_kw, 0.3, 1e-12);

  EXPECT_DOUBLE_EQ(PlacementPowerKw(WholeGpus(1, 0, 0), Facts(kT4)), 0.07);
  EXPECT_DOUBLE_EQ(PlacementPowerKw(WholeGpus(1, 0, 0), Facts(kG2)), 0) << "no datasheet, no TDP";
  EXPECT_DOUBLE_EQ(PlacementPowerKw(CpuOnly(1000, 0), f), 0);
  cluster::Allocation cpu = MakeAllocation(CpuOnly(1000, 2048), n, GpuPick{}, f);
  EXPECT_TRUE(cpu.gpus.empty());
}

// ---------------------------------------------------------------------------------------------
// Score plugins end to end: a one-policy scheduler places on the node the plugin prefers.

TEST(ScorePolicyTest, EachPolicyPlacesWhereItsScorePoints) {
  struct Row {
    const char* policy;
    PodRequest pod;
    int expected;  // node: 0 = four whole GPUs used, 1 = idle, 2 = one GPU with a 600 share
  };
  TaskShape shape{0, 500, 1, {}, 1.0};
  const Row rows[] = {
      {"bestfit", WholeGpus(1, 0, 0), 0},
      {"packing", FractionalGpu(400, 0, 0, 0), 2},
      {"packing", WholeGpus(1, 0, 0), 0},  // nodes 0 and 2 tie in tier 2: first node
      {"spread", WholeGpus(1, 0, 0), 1},
      {"dotprod", WholeGpus(1, 0, 0), 0},
      {"fgd", FractionalGpu(400, 0, 0, 0), 2},  // fills the 400 sliver a 500 shape cannot use
      {"clustering", FractionalGpu(100, 0, 0, 0), 2},
  };
  for (const Row& row : rows) {
    SCOPED_TRACE(row.policy);
    cluster::Cluster c;
    InternModels(c);
    for (int k = 0; k < 3; ++k) {
      Node n = MakeNode(kH100, 8, 64000, 262144, 0, k);
      n.pool = n.name;  // set-up work is steered by pool; the tested pod names none
      c.AddNode(n);
    }
    SchedulerOptions opts;
    opts.workload.shapes.push_back(shape);
    opts.tie_break = SchedulerOptions::TieBreak::kFirst;
    auto s = Scheduler::Create(&c, PolicyProfile(row.policy).value(), Registry::BuiltIn(), opts);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    for (int i = 0; i < 4; ++i) {
      ASSERT_TRUE((*s)->ScheduleOne(With(WholeGpus(1, 0, 0), [](PodRequest& p) { p.pool = "n0"; }))
                      .placed);
    }
    ASSERT_TRUE(
        (*s)->ScheduleOne(With(FractionalGpu(600, 0, 0, 0), [](PodRequest& p) { p.pool = "n2"; }))
            .placed);
    ScheduleResult r = (*s)->ScheduleOne(row.pod);
    ASSERT_TRUE(r.placed) << r.reason;
    EXPECT_EQ(r.node, row.expected);
    if (row.expected == 2 && row.pod.gpu_milli == 400) {
      ASSERT_EQ(r.alloc.gpus.size(), 1u);
      EXPECT_EQ(c.node(2).gpus[r.alloc.gpus[0].gpu].free_milli, 0) << "the 400 left on the shared GPU";
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Property: MIG placement through the scheduler only ever builds layouts NVIDIA accepts.

TEST(MigPropertyTest, RandomMigRequestsOnlyBuildValidLayouts) {
  const char* kModels[] = {"H100-SXM", "A100-80GB", "A100-40GB"};
  for (const char* policy : {"bestfit", "packing", "random"}) {
    for (uint64_t seed = 1; seed <= 3; ++seed) {
      SCOPED_TRACE(std::string(policy) + " seed " + std::to_string(seed));
      Rng rng(seed * 977);
      cluster::Cluster c;
      std::vector<const cluster::MigGeometry*> geo;
      for (const char* m : kModels) {
        c.InternModel(m);
        geo.push_back(cluster::FindMigGeometry(m));
        ASSERT_NE(geo.back(), nullptr) << m;
      }
      const int nodes = 3 + static_cast<int>(rng.Uniform(4));
      for (int k = 0; k < nodes; ++k) {
        const ModelId m = static_cast<ModelId>(rng.Uniform(3));
        Node n = MakeNode(kH100, 1 + static_cast<int>(rng.Uniform(8)), 256000, 1 << 20, 0, k);
        n.model = m;
        c.AddNode(n);
      }
      auto s = Scheduler::Create(&c, PolicyProfile(policy).value(), Registry::BuiltIn(),
                                 SchedulerOptions{.seed = seed});
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      std::vector<int64_t> live;
      int mig_placed = 0;
      for (int step = 0; step < 400; ++step) {
        const uint64_t roll = rng.Uniform(10);
        if (roll < 3 && !live.empty()) {
          const size_t k = rng.Uniform(live.size());
          ASSERT_TRUE((*s)->Remove(live[k]).ok());
          live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
        } else {
          PodRequest pod;
          if (roll == 3) {
            pod = FractionalGpu(100 * (1 + static_cast<int>(rng.Uniform(9))), 0, 100, 100);
          } else {
            const cluster::MigGeometry* g = geo[rng.Uniform(geo.size())];
            pod = MigInstance(g->profiles[rng.Uniform(g->profiles.size())].name, 100, 100);
          }
          pod.uid = step + 1;
          ScheduleResult r = (*s)->ScheduleOne(pod);
          if (r.placed) {
            live.push_back(pod.uid);
            if (pod.gpu_kind == GpuKind::kMig) ++mig_placed;
          } else {
            ASSERT_NE(r.code, Code::kError) << r.reason;
          }
        }
        // Rebuild every GPU's instance list from the placed pods and check it.
        std::map<std::pair<int, int>, std::vector<std::pair<int, int>>> layouts;
        std::map<std::pair<int, int>, int> shares;
        for (int64_t uid : live) {
          const Placed* p = (*s)->placed(uid);
          ASSERT_NE(p, nullptr);
          for (const cluster::GpuShare& g : p->alloc.gpus) {
            if (g.mig_profile >= 0) {
              layouts[{p->alloc.node, g.gpu}].push_back({g.mig_profile, g.mig_start});
            } else {
              ++shares[{p->alloc.node, g.gpu}];
            }
          }
        }
        for (const auto& [where, instances] : layouts) {
          const Node& n = c.node(where.first);
          const cluster::MigGeometry& g = *geo[n.model];
          Status st = cluster::ValidateMigLayout(g, instances);
          ASSERT_TRUE(st.ok()) << n.name << " GPU " << where.second << ": " << st.ToString();
          ASSERT_EQ(shares.count(where), 0u) << "time-sliced work on a partitioned GPU";
          unsigned mask = 0;
          int compute = 0;
          for (const auto& [profile, start] : instances) {
            const cluster::MigProfile& prof = g.profiles[profile];
            mask |= ((1u << prof.memory_slices) - 1u) << start;
            compute += prof.compute_slices;
          }
          const Gpu& gpu = n.gpus[where.second];
          ASSERT_EQ(gpu.mig_used_mask, mask);
          ASSERT_EQ(gpu.mig_compute_used, compute);
          ASSERT_EQ(gpu.mig_instances, static_cast<int>(instances.size()));
        }
      }
      EXPECT_GT(mig_placed, 50);
    }
  }
}

}  // namespace
}  // namespace aicloud::sched
