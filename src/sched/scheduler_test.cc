#include "sched/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "cluster/catalog.h"
#include "cluster/cluster.h"
#include "core/rng.h"
#include "sched/profile.h"
#include "sched/registry.h"
#include "sched/request.h"
#include "sched/workload.h"

namespace aicloud::sched {
namespace {

using cluster::ModelId;
using cluster::Node;

constexpr ModelId kH100 = 0;
constexpr ModelId kT4 = 1;
constexpr ModelId kA100 = 2;
constexpr ModelId kG2 = 3;

void InternModels(cluster::Cluster& c) {
  c.InternModel("H100-SXM");
  c.InternModel("T4");
  c.InternModel("A100-80GB");
  c.InternModel("G2");
}

// gpus_per_domain > 0: NVLink domains of that many GPUs, ids from domain_base (cluster-wide).
Node MakeNode(const std::string& name, ModelId model, int gpus, int64_t cpu = 64000,
              int64_t mem = 262144, int32_t rack = -1, int gpus_per_domain = 0,
              int domain_base = 0) {
  Node n;
  n.name = name;
  n.model = gpus > 0 ? model : cluster::kNoModel;
  n.cpu_milli = cpu;
  n.mem_mib = mem;
  n.rack = rack;
  for (int i = 0; i < gpus; ++i) {
    cluster::Gpu g;
    g.mem_mib = model == kT4 ? 16384 : model == kG2 ? 0 : 81920;
    g.nvlink_domain = gpus_per_domain > 0 ? domain_base + i / gpus_per_domain : -1;
    n.gpus.push_back(g);
  }
  return n;
}

template <typename T, typename F>
T With(T p, F edit) {
  edit(p);
  return p;
}

PodRequest Uid(PodRequest p, int64_t uid) {
  p.uid = uid;
  return p;
}

// Free counters of every node and rack (versions excluded: a refused attempt may bump them).
std::string Counters(const cluster::Cluster& c) {
  std::string s;
  for (const Node& n : c.nodes()) {
    s += n.name + " cpu=" + std::to_string(n.cpu_free_milli) + " mem=" +
         std::to_string(n.mem_free_mib) + " pods=" + std::to_string(n.pods) + " gpus=";
    for (const cluster::Gpu& g : n.gpus) {
      s += std::to_string(g.free_milli) + "/" + std::to_string(g.mem_free_mib) + "/" +
           std::to_string(g.mig_used_mask) + "/" + std::to_string(g.mig_compute_used) + "/" +
           std::to_string(g.shares) + " ";
    }
    s += "\n";
  }
  for (const cluster::Rack& r : c.racks()) {
    // Rounded: adding and removing the same draws may leave floating-point dust.
    s += r.name + " mw=" + std::to_string(std::llround(r.power_used_kw * 1e6) + 0) + "\n";
  }
  return s;
}

std::unique_ptr<Scheduler> MakeScheduler(cluster::Cluster* c, const std::string& policy,
                                         SchedulerOptions opts = {}) {
  if (opts.workload.shapes.empty()) opts.workload.shapes.push_back({1000, 500, 1, {}, 1.0});
  StatusOr<Profile> p = PolicyProfile(policy);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  auto s = Scheduler::Create(c, *p, Registry::BuiltIn(), std::move(opts));
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(*s) : nullptr;
}

// ---------------------------------------------------------------------------------------------
// Why a pod does not fit

TEST(SchedulerTest, UnschedulableReasonCountsEachFilterReason) {
  cluster::Cluster c;
  InternModels(c);
  c.AddNode(MakeNode("a", kH100, 8));
  c.AddNode(MakeNode("b", kH100, 8));
  c.AddNode(MakeNode("c", kT4, 4));
  cluster::Allocation busy;
  busy.cpu_milli = 60000;
  for (int node : {0, 1}) {
    busy.node = node;
    ASSERT_TRUE(c.Allocate(busy).ok());
  }
  std::unique_ptr<Scheduler> s = MakeScheduler(&c, "bestfit");
  const std::string before = Counters(c);
  const PodRequest pod =
      With(WholeGpus(1, 8000, 1024), [](PodRequest& p) { p.gpu_models = {kH100}; });
  for (int attempt = 0; attempt < 2; ++attempt) {  // the second one answers from the memo
    SCOPED_TRACE(attempt);
    ScheduleResult r = s->ScheduleOne(pod);
    EXPECT_FALSE(r.placed);
    EXPECT_EQ(r.code, Code::kUnschedulable);
    EXPECT_EQ(r.node, -1);
    EXPECT_EQ(r.reason, "0/3 nodes available: 2 insufficient CPU, 1 GPU model not allowed");
  }
  ScheduleResult r = s->ScheduleOne(
      With(WholeGpus(8, 8000, 1024), [](PodRequest& p) { p.gpu_models = {kH100}; }));
  EXPECT_EQ(r.reason, "0/3 nodes available: 2 insufficient CPU, 1 GPU model not allowed");
  EXPECT_EQ(Counters(c), before);
  EXPECT_EQ(s->placed_count(), 0u);

  // Equal counts are listed alphabetically.
  cluster::Cluster c2;
  InternModels(c2);
  c2.AddNode(MakeNode("a", kH100, 8));
  c2.AddNode(MakeNode("b", kH100, 8));
  c2.AddNode(MakeNode("c", kT4, 4));
  busy.node = 0;
  ASSERT_TRUE(c2.Allocate(busy).ok());
  std::unique_ptr<Scheduler> s2 = MakeScheduler(&c2, "bestfit");
  r = s2->ScheduleOne(With(WholeGpus(9, 8000, 1024), [](PodRequest& p) { p.gpu_models = {kH100}; }));
  EXPECT_EQ(r.reason,
            "0/3 nodes available: 1 GPU model not allowed, 1 insufficient CPU, "
            "1 node has fewer GPUs than requested");
}

TEST(SchedulerTest, CpuOnlyClusterAndEmptyCluster) {
  cluster::Cluster empty;
  std::unique_ptr<Scheduler> s0 = MakeScheduler(&empty, "spread");
  ScheduleResult r0 = s0->ScheduleOne(CpuOnly(1, 1));
  EXPECT_FALSE(r0.placed);
  EXPECT_EQ(r0.reason, "0/0 nodes available");

  cluster::Cluster c;
  c.AddNode(MakeNode("cpu", kH100, 0));
  std::unique_ptr<Scheduler> s = MakeScheduler(&c, "spread");
  ScheduleResult r = s->ScheduleOne(CpuOnly(1000, 1024));
  ASSERT_TRUE(r.placed) << r.reason;
  EXPECT_TRUE(r.alloc.gpus.empty());
  ScheduleResult g = s->ScheduleOne(WholeGpus(1, 0, 0));
  EXPECT_FALSE(g.placed);
  EXPECT_EQ(g.reason, "0/1 nodes available: 1 node has no GPU");
}

// ---------------------------------------------------------------------------------------------
// The memo and the fast paths behind it must not change a single placement.

cluster::Cluster RandomCluster(Rng& rng, int nodes) {
  cluster::Cluster c;
  InternModels(c);
  for (int r = 0; r < 3; ++r) {
    cluster::Rack rack;
    rack.name = "r" + std::to_string(r);
    rack.power_budget_kw = r == 0 ? 6.0 : 0;
    c.AddRack(rack);
  }
  int domain = 0;
  for (int k = 0; k < nodes; ++k) {
    const uint64_t kind = rng.Uniform(6);
    const ModelId model = kind == 5 ? kH100 : static_cast<ModelId>(kind % 4);
    const int gpus = kind == 4 ? 0 : model == kT4 ? 1 + static_cast<int>(rng.Uniform(4)) : 8;
    Node n = MakeNode("n" + std::to_string(k), model, gpus,
                      16000 * (1 + static_cast<int64_t>(rng.Uniform(6))),
                      65536 * (1 + static_cast<int64_t>(rng.Uniform(4))),
                      static_cast<int32_t>(rng.Uniform(3)), model == kH100 ? 4 : 0, domain);
    domain += 2;
    if (rng.Uniform(6) == 0) n.pool = "training";
    if (rng.Uniform(8) == 0) n.taints.push_back({"dedicated", "infer", "NoSchedule"});
    c.AddNode(std::move(n));
  }
  return c;
}

PodRequest RandomPod(Rng& rng) {
  PodRequest p;
  const int64_t cpu = 1000 * static_cast<int64_t>(rng.Uniform(9));
  const int64_t mem = 4096 * static_cast<int64_t>(rng.Uniform(9));
  switch (rng.Uniform(10)) {
    case 0:
    case 1:
      p = CpuOnly(cpu, mem);
      break;
    case 2:
    case 3:
    case 4:
      p = FractionalGpu(100 * (1 + static_cast<int32_t>(rng.Uniform(9))),
                        rng.Uniform(3) == 0 ? 8192 * static_cast<int64_t>(1 + rng.Uniform(4)) : 0,
                        cpu, mem);
      break;
    case 5: {
      static const char* kProfiles[] = {"1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb"};
      p = MigInstance(kProfiles[rng.Uniform(4)], cpu, mem);
      break;
    }
    default: {
      static const int kCounts[] = {1, 1, 2, 4, 8};
      p = WholeGpus(kCounts[rng.Uniform(5)], cpu, mem);
      if (p.gpu_count > 1 && rng.Uniform(3) == 0) p.topology = Topology::kNvlink;
      break;
    }
  }
  if (p.wants_gpu() && rng.Uniform(5) == 0) p.gpu_models = {static_cast<ModelId>(rng.Uniform(4))};
  if (rng.Uniform(8) == 0) p.pool = "training";
  if (rng.Uniform(8) == 0) p.tolerations.push_back({"dedicated", "infer", false, ""});
  return p;
}

struct Trace {
  std::vector<std::string> events;  // one line per operation
  std::string counters;
};

Trace RunWorkload(const std::string& policy, bool memoize, SchedulerOptions::TieBreak tie,
                  uint64_t seed) {
  Rng rng(seed);
  cluster::Cluster c = RandomCluster(rng, 24);
  // A rack power budget is state shared by the rack's nodes, which turns the memo off; this
  // comparison is about the memo, so budgets go (RackBudgetTurnsTheMemoOff covers them).
  for (cluster::Rack& r : c.racks()) r.power_budget_kw = 0;
  std::vector<PodRequest> pods;
  for (int i = 0; i < 500; ++i) pods.push_back(RandomPod(rng));
  SchedulerOptions opts;
  opts.seed = seed;
  opts.memoize = memoize;
  opts.tie_break = tie;
  opts.workload = BuildTargetWorkload(pods);
  std::unique_ptr<Scheduler> s = MakeScheduler(&c, policy, opts);
  Trace t;
  if (s == nullptr) return t;
  EXPECT_EQ(s->memoized(), memoize);
  std::vector<int64_t> live;
  for (size_t i = 0; i < pods.size(); ++i) {
    if (!live.empty() && rng.Uniform(4) == 0) {
      const size_t k = rng.Uniform(live.size());
      EXPECT_TRUE(s->Remove(live[k]).ok());
      t.events.push_back("remove " + std::to_string(live[k]));
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
    }
    PodRequest p = pods[i];
    p.uid = static_cast<int64_t>(i) + 1;
    ScheduleResult r = s->ScheduleOne(p);
    std::string e = std::to_string(p.uid) + " -> " + std::to_string(r.node);
    for (const cluster::GpuShare& g : r.alloc.gpus) {
      e += " g" + std::to_string(g.gpu) + "@" + std::to_string(g.mig_start);
    }
    if (!r.placed) e += " " + r.reason;
    t.events.push_back(e);
    if (r.placed) live.push_back(p.uid);
  }
  t.counters = Counters(c);
  return t;
}

void ExpectSameTrace(const std::string& policy, SchedulerOptions::TieBreak tie, uint64_t seed) {
  SCOPED_TRACE(policy + (tie == SchedulerOptions::TieBreak::kFirst ? " tie=first" : " tie=random"));
  const Trace memo = RunWorkload(policy, true, tie, seed);
  const Trace plain = RunWorkload(policy, false, tie, seed);
  ASSERT_EQ(memo.events.size(), plain.events.size());
  int placed = 0;
  for (size_t i = 0; i < memo.events.size(); ++i) {
    ASSERT_EQ(memo.events[i], plain.events[i]) << "first divergence at event " << i;
    placed += memo.events[i].find(" -> -1") == std::string::npos ? 1 : 0;
  }
  EXPECT_EQ(memo.counters, plain.counters);
  EXPECT_GT(placed, 100) << "the workload must actually place pods";
}

// The tie-break rule is deterministic: any difference is the memo answering wrongly.
// (clustering reads other pods, so it is not node-local and never memoised.)
TEST(SchedulerTest, MemoizedAndUnmemoizedPlaceIdenticallyWithFirstTieBreak) {
  for (const char* policy : {"fgd", "fgd_tiered", "bestfit", "packing", "spread", "dotprod"}) {
    ExpectSameTrace(policy, SchedulerOptions::TieBreak::kFirst, 17);
  }
}

// Random tie-breaks: the indexed path draws once per cycle among the tied best nodes, the full
// scan once per tie (reservoir sampling), so the two may pick different but equally good
// nodes. Each path must still repeat exactly for a seed, and differ across seeds.
TEST(SchedulerTest, RandomTieBreakRepeatsPerSeedOnBothPaths) {
  for (const char* policy : {"fgd", "fgd_tiered", "bestfit", "packing", "spread", "dotprod"}) {
    SCOPED_TRACE(policy);
    for (bool memo : {true, false}) {
      const Trace a = RunWorkload(policy, memo, SchedulerOptions::TieBreak::kRandom, 17);
      const Trace b = RunWorkload(policy, memo, SchedulerOptions::TieBreak::kRandom, 17);
      EXPECT_EQ(a.events, b.events);
      EXPECT_EQ(a.counters, b.counters);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Gangs: all or nothing, inside one topology domain when asked.

std::vector<PodRequest> Gang(const std::string& name, int size, const PodRequest& worker,
                             int64_t first_uid, int min_available = -1) {
  std::vector<PodRequest> out;
  for (int i = 0; i < size; ++i) {
    PodRequest p = worker;
    p.uid = first_uid + i;
    p.name = name + "-" + std::to_string(i);
    p.gang.name = name;
    p.gang.size = size;
    p.gang.min_available = min_available < 0 ? size : min_available;
    out.push_back(p);
  }
  return out;
}

class GangTest : public ::testing::Test {
 protected:
  void SetUp() override {
    InternModels(c_);
    c_.AddRack({"r0", 0, 0, "air", -1});
    c_.AddRack({"r1", 0, 0, "air", -1});
    // NVLink domain = rack here (an NVL-style rack): rack 0 is domain 0, rack 1 domain 1.
    c_.AddNode(MakeNode("a0", kH100, 8, 64000, 262144, 0, 8, 0));
    c_.AddNode(MakeNode("a1", kH100, 8, 64000, 262144, 0, 8, 0));
    c_.AddNode(MakeNode("b0", kH100, 8, 64000, 262144, 1, 8, 1));
    c_.AddNode(MakeNode("b1", kH100, 8, 64000, 262144, 1, 8, 1));
  }
  cluster::Cluster c_;
};

TEST_F(GangTest, AGangThatCannotFullyFitLeavesTheClusterUnchanged) {
  std::unique_ptr<Scheduler> s = MakeScheduler(&c_, "bestfit");
  ASSERT_TRUE(s->ScheduleOne(Uid(WholeGpus(4, 0, 0), 1)).placed);
  const std::string before = Counters(c_);
  // 4 workers × 8 GPUs on 28 free GPUs: three fit, the fourth does not.
  GangResult g = s->ScheduleGang(Gang("big", 4, WholeGpus(8, 1000, 1024), 100));
  EXPECT_FALSE(g.placed);
  EXPECT_TRUE(g.members.empty());
  EXPECT_EQ(g.reason.rfind("gang big: 4 of 4 workers needed together; ", 0), 0u) << g.reason;
  EXPECT_EQ(Counters(c_), before);
  EXPECT_EQ(s->placed_count(), 1u);
  EXPECT_TRUE(s->gang_members("big").empty());
  for (int64_t uid = 100; uid < 104; ++uid) EXPECT_EQ(s->placed(uid), nullptr);
  // Nothing was left behind: the cluster still takes three 8-GPU pods.
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(s->ScheduleOne(Uid(WholeGpus(8, 0, 0), 10 + i)).placed);
}

TEST_F(GangTest, AGangThatFitsBindsEveryMember) {
  std::unique_ptr<Scheduler> s = MakeScheduler(&c_, "bestfit");
  GangResult g = s->ScheduleGang(Gang("ok", 3, WholeGpus(8, 1000, 1024), 200));
  ASSERT_TRUE(g.placed) << g.reason;
  ASSERT_EQ(g.members.size(), 3u);
  EXPECT_EQ(s->placed_count(), 3u);
  std::set<int32_t> nodes;
  for (const ScheduleResult& m : g.members) {
    EXPECT_TRUE(m.placed);
    nodes.insert(m.node);
  }
  EXPECT_EQ(nodes.size(), 3u) << "8 GPUs each: three different nodes";
  std::vector<int64_t> members = s->gang_members("ok");
  std::sort(members.begin(), members.end());
  EXPECT_EQ(members, (std::vector<int64_t>{200, 201, 202}));
  EXPECT_EQ(c_.allocated_gpu_milli(), 24000);
  for (int64_t uid : members) EXPECT_TRUE(s->Remove(uid).ok());
  EXPECT_EQ(c_.allocated_gpu_milli(), 0);
  EXPECT_TRUE(s->gang_members("ok").empty());
}

TEST_F(GangTest, MinAvailableBindsWhatFits) {
  std::unique_ptr<Scheduler> s = MakeScheduler(&c_, "bestfit");
  GangResult g = s->ScheduleGang(Gang("elastic", 6, WholeGpus(8, 0, 0), 300, /*min_available=*/3));
  ASSERT_TRUE(g.placed) << g.reason;
  EXPECT_EQ(g.members.size(), 4u);
  EXPECT_EQ(s->placed_count(), 4u);
  EXPECT_EQ(c_.allocated_gpu_milli(), 32000);
}

TEST_F(GangTest, RackTopologyKeepsEveryMemberInOneRack) {
  // Spread alone would put the workers on the emptiest nodes of both racks.
  {
    std::unique_ptr<Scheduler> control = MakeScheduler(&c_, "spread");
    GangResult g = control->ScheduleGang(Gang("free", 3, WholeGpus(4, 0, 0), 1));
    ASSERT_TRUE(g.placed) << g.reason;
    std::set<int32_t> racks;
    for (const ScheduleResult& m : g.members) racks.insert(c_.node(m.node).rack);
    ASSERT_EQ(racks.size(), 2u) << "control: without topology the gang spans racks";
    for (int64_t uid = 1; uid <= 3; ++uid) ASSERT_TRUE(control->Remove(uid).ok());
  }
  std::unique_ptr<Scheduler> s = MakeScheduler(&c_, "spread");
  for (int round = 0; round < 2; ++round) {
    GangResult g = s->ScheduleGang(With(
        Gang("rack" + std::to_string(round), 3, WholeGpus(4, 0, 0), 10 + 10 * round),
        [](std::vector<PodRequest>& v) {
          for (PodRequest& p : v) p.topology = Topology::kRack;
        }));
    ASSERT_TRUE(g.placed) << g.reason;
    std::set<int32_t> racks;
    for (const ScheduleResult& m : g.members) racks.insert(c_.node(m.node).rack);
    EXPECT_EQ(racks.size(), 1u) << "round " << round;
  }
  // 8 GPUs are left, 4 in each rack: 3 workers × 4 GPUs fit in no single rack.
  const std::string before = Counters(c_);
  GangResult g = s->ScheduleGang(With(Gang("late", 3, WholeGpus(4, 0, 0), 50),
                                      [](std::vector<PodRequest>& v) {
                                        for (PodRequest& p : v) p.topology = Topology::kRack;
                                      }));
  EXPECT_FALSE(g.placed);
  EXPECT_EQ(g.reason, "gang late: no rack has room for 3 workers");
  EXPECT_EQ(Counters(c_), before);
}

TEST_F(GangTest, NvlinkTopologyKeepsAGangInOneDomain) {
  std::unique_ptr<Scheduler> s = MakeScheduler(&c_, "spread");
  GangResult g = s->ScheduleGang(With(Gang("nv", 4, WholeGpus(4, 0, 0), 1),
                                      [](std::vector<PodRequest>& v) {
                                        for (PodRequest& p : v) p.topology = Topology::kNvlink;
                                      }));
  ASSERT_TRUE(g.placed) << g.reason;
  std::set<int32_t> domains;
  for (const ScheduleResult& m : g.members) {
    for (const cluster::GpuShare& sh : m.alloc.gpus) {
      domains.insert(c_.node(m.node).gpus[sh.gpu].nvlink_domain);
    }
  }
  EXPECT_EQ(domains.size(), 1u);
}

TEST(NvlinkTest, AMultiGpuRequestStaysInOneNvlinkDomain) {
  cluster::Cluster c;
  InternModels(c);
  c.AddNode(MakeNode("n", kH100, 8, 64000, 262144, -1, /*gpus_per_domain=*/4));
  for (const char* policy : {"bestfit", "spread", "fgd", "packing"}) {
    SCOPED_TRACE(policy);
    cluster::Cluster cc = c;
    std::unique_ptr<Scheduler> s = MakeScheduler(&cc, policy);
    // Occupy GPU 1 and GPU 6 (lowest index first: place 1-GPU pods, then free the others).
    for (int64_t uid = 1; uid <= 7; ++uid) ASSERT_TRUE(s->ScheduleOne(Uid(WholeGpus(1, 0, 0), uid)).placed);
    std::map<int, int64_t> by_gpu;
    for (int64_t uid = 1; uid <= 7; ++uid) by_gpu[s->placed(uid)->alloc.gpus[0].gpu] = uid;
    for (const auto& [gpu, uid] : by_gpu) {
      if (gpu != 1 && gpu != 6) {
        ASSERT_TRUE(s->Remove(uid).ok());
      }
    }
    ASSERT_EQ(cc.node(0).gpus[1].free_milli, 0);
    const PodRequest nv4 =
        With(WholeGpus(4, 0, 0), [](PodRequest& p) { p.topology = Topology::kNvlink; });
    ScheduleResult r = s->ScheduleOne(nv4);
    if (cc.node(0).gpus[6].free_milli == 0) {
      EXPECT_FALSE(r.placed);
      EXPECT_EQ(r.reason, "0/1 nodes available: 1 free GPUs not in one NVLink domain");
      ASSERT_TRUE(s->Remove(by_gpu[6]).ok());
      r = s->ScheduleOne(nv4);
    }
    ASSERT_TRUE(r.placed) << r.reason;
    ASSERT_EQ(r.alloc.gpus.size(), 4u);
    std::set<int32_t> domains;
    for (const cluster::GpuShare& sh : r.alloc.gpus) domains.insert(cc.node(0).gpus[sh.gpu].nvlink_domain);
    EXPECT_EQ(domains, (std::set<int32_t>{1}));
  }
}

// ---------------------------------------------------------------------------------------------
// Remove, uids, configuration errors

TEST(SchedulerTest, RemoveReturnsEverything) {
  cluster::Cluster c;
  InternModels(c);
  cluster::Rack rack;
  rack.name = "r0";
  rack.power_budget_kw = 10;
  c.AddRack(rack);
  c.AddNode(MakeNode("n", kH100, 8, 64000, 262144, 0));
  std::unique_ptr<Scheduler> s = MakeScheduler(&c, "bestfit");
  const std::string before = Counters(c);
  const PodRequest pods[] = {WholeGpus(2, 4000, 8192), FractionalGpu(300, 4096, 1000, 1024),
                             MigInstance("3g.40gb", 500, 512), CpuOnly(2000, 2048)};
  for (int i = 0; i < 4; ++i) {
    ScheduleResult r = s->ScheduleOne(Uid(pods[i], i + 1));
    ASSERT_TRUE(r.placed) << i << ": " << r.reason;
  }
  EXPECT_NE(Counters(c), before);
  EXPECT_GT(c.racks()[0].power_used_kw, 0);
  EXPECT_EQ(s->pods_on_node(0).size(), 4u);
  for (int64_t uid : {3, 1, 4, 2}) EXPECT_TRUE(s->Remove(uid).ok());
  EXPECT_EQ(Counters(c), before);
  EXPECT_TRUE(s->pods_on_node(0).empty());
  EXPECT_EQ(s->placed_count(), 0u);
  Status again = s->Remove(2);
  EXPECT_EQ(again.code(), StatusCode::kNotFound);
  EXPECT_EQ(again.message(), "pod uid 2 is not placed");
}

TEST(SchedulerTest, DuplicateUidIsRejectedAndChangesNothing) {
  cluster::Cluster c;
  InternModels(c);
  c.AddNode(MakeNode("n", kH100, 8));
  c.AddNode(MakeNode("m", kH100, 8));
  std::unique_ptr<Scheduler> s = MakeScheduler(&c, "bestfit");
  ASSERT_TRUE(s->ScheduleOne(Uid(WholeGpus(1, 1000, 0), 7)).placed);
  const std::string before = Counters(c);
  ScheduleResult dup = s->ScheduleOne(Uid(WholeGpus(2, 1000, 0), 7));
  EXPECT_FALSE(dup.placed);
  EXPECT_EQ(dup.code, Code::kError);
  EXPECT_EQ(dup.reason, "pod uid 7 is already placed");
  EXPECT_EQ(Counters(c), before);
  EXPECT_EQ(s->placed(7)->pod.gpu_count, 1) << "the placed pod is untouched";
  // uid 0 asks for a fresh one, never a taken one.
  ScheduleResult fresh = s->ScheduleOne(WholeGpus(1, 0, 0));
  ASSERT_TRUE(fresh.placed);
  EXPECT_EQ(s->placed_count(), 2u);
}

TEST(SchedulerTest, GangWithATakenUidIsRejectedAndChangesNothing) {
  cluster::Cluster c;
  InternModels(c);
  c.AddNode(MakeNode("n", kH100, 8));
  c.AddNode(MakeNode("m", kH100, 8));
  std::unique_ptr<Scheduler> s = MakeScheduler(&c, "bestfit");
  ASSERT_TRUE(s->ScheduleOne(Uid(WholeGpus(1, 1000, 0), 7)).placed);
  const std::string before = Counters(c);
  GangResult g = s->ScheduleGang(Gang("g", 2, WholeGpus(2, 0, 0), /*first_uid=*/6));  // 6 and 7
  EXPECT_FALSE(g.placed);
  EXPECT_EQ(Counters(c), before) << "a gang member reusing uid 7 must not take resources";
  EXPECT_EQ(s->placed_count(), 1u);
  EXPECT_EQ(s->placed(7)->pod.gpu_count, 1);
  // Two members with one uid.
  std::vector<PodRequest> twins = Gang("t", 2, WholeGpus(1, 0, 0), 20);
  twins[1].uid = 20;
  GangResult t = s->ScheduleGang(twins);
  EXPECT_FALSE(t.placed);
  EXPECT_EQ(Counters(c), before);
  // Removing every uid the scheduler knows returns the cluster to empty: nothing leaked.
  for (int64_t uid : {6, 7, 20, 21}) (void)s->Remove(uid);
  EXPECT_EQ(s->placed_count(), 0u);
  EXPECT_EQ(c.allocated_gpu_milli(), 0) << "GPU milli held by allocations nobody can remove";
}

TEST(SchedulerTest, UnknownPolicyAndPluginAreNamed) {
  StatusOr<Profile> p = PolicyProfile("tetris");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("unknown policy 'tetris'"), std::string::npos)
      << p.status().message();
  EXPECT_NE(p.status().message().find("fgd"), std::string::npos) << "lists the known policies";
  for (const std::string& name : PolicyNames()) EXPECT_TRUE(PolicyProfile(name).ok()) << name;

  cluster::Cluster c;
  Profile bad{"bad", {{"resource_fit"}, {"gpu_tetris"}}};
  auto s = Scheduler::Create(&c, bad, Registry::BuiltIn(), {});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kNotFound);
  EXPECT_NE(s.status().message().find("unknown plugin 'gpu_tetris'"), std::string::npos)
      << s.status().message();
}

TEST(SchedulerTest, RackBudgetTurnsTheMemoOff) {
  Rng rng(5);
  cluster::Cluster with_budget = RandomCluster(rng, 8);
  cluster::Cluster without = with_budget;
  bool any = false;
  for (const cluster::Rack& r : with_budget.racks()) any = any || r.power_budget_kw > 0;
  ASSERT_TRUE(any) << "RandomCluster must give some rack a budget";
  for (cluster::Rack& r : without.racks()) r.power_budget_kw = 0;
  SchedulerOptions opts;
  opts.workload.shapes.push_back({1000, 1000, 1, {}, 1.0});
  std::unique_ptr<Scheduler> a = MakeScheduler(&with_budget, "fgd", opts);
  std::unique_ptr<Scheduler> b = MakeScheduler(&without, "fgd", opts);
  ASSERT_TRUE(a && b);
  EXPECT_FALSE(a->memoized());
  EXPECT_TRUE(b->memoized());
}

TEST(SchedulerTest, PolicyProfilesAreTheDefaultFiltersPlusOneScore) {
  const std::vector<std::string> filters = {"node_unschedulable", "lane_taints", "resource_fit",
                                            "gpu_model",          "gpu_share",   "mig_placement",
                                            "nvlink_topology",    "rack_power"};
  StatusOr<Profile> p = PolicyProfile("fgd");
  ASSERT_TRUE(p.ok());
  ASSERT_EQ(p->plugins.size(), filters.size() + 1);
  for (size_t i = 0; i < filters.size(); ++i) EXPECT_EQ(p->plugins[i].name, filters[i]);
  EXPECT_EQ(p->plugins.back().name, "fgd");
  EXPECT_EQ(p->name, "fgd");
}

// Minimal queue-sort plugins for profile validation.
class ArrivalOrder final : public QueueSortPlugin {
 public:
  explicit ArrivalOrder(bool reverse) : reverse_(reverse) {}
  std::string_view Name() const override { return reverse_ ? "lifo" : "fifo"; }
  bool Less(const QueuedPod& a, const QueuedPod& b) const override {
    return reverse_ ? a.enqueue_seq > b.enqueue_seq : a.enqueue_seq < b.enqueue_seq;
  }

 private:
  bool reverse_;
};

class NoExtensionPoint final : public Plugin {
 public:
  std::string_view Name() const override { return "nothing"; }
};

Registry TestRegistry() {
  Registry r;
  EXPECT_TRUE(r.Register("fifo", [](const PluginArgs&) -> StatusOr<std::unique_ptr<Plugin>> {
                 return std::unique_ptr<Plugin>(new ArrivalOrder(false));
               }).ok());
  EXPECT_TRUE(r.Register("lifo", [](const PluginArgs&) -> StatusOr<std::unique_ptr<Plugin>> {
                 return std::unique_ptr<Plugin>(new ArrivalOrder(true));
               }).ok());
  EXPECT_TRUE(r.Register("nothing", [](const PluginArgs&) -> StatusOr<std::unique_ptr<Plugin>> {
                 return std::unique_ptr<Plugin>(new NoExtensionPoint());
               }).ok());
  return r;
}

TEST(SchedulerTest, AProfileWithTwoQueueSortPluginsIsRejected) {
  cluster::Cluster c;
  const Registry r = TestRegistry();
  auto two = Scheduler::Create(&c, Profile{"two", {{"fifo"}, {"lifo"}}}, r, {});
  ASSERT_FALSE(two.ok());
  EXPECT_EQ(two.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(two.status().message(), "profile two: more than one queue-sort plugin (lifo)");

  auto one = Scheduler::Create(&c, Profile{"one", {{"lifo"}}}, r, {});
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  PodRequest pa, pb;
  EXPECT_TRUE((*one)->QueueLess({&pa, 2, 0}, {&pb, 1, 0})) << "the plugin's order is used";
  auto none = Scheduler::Create(&c, Profile{"none", {}}, r, {});
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE((*none)->QueueLess({&pa, 1, 0}, {&pb, 2, 0})) << "arrival order by default";
  EXPECT_FALSE((*none)->QueueLess({&pa, 2, 0}, {&pb, 1, 0}));

  auto useless = Scheduler::Create(&c, Profile{"u", {{"nothing"}}}, r, {});
  ASSERT_FALSE(useless.ok());
  EXPECT_EQ(useless.status().code(), StatusCode::kInternal);
  EXPECT_EQ(useless.status().message(), "plugin nothing implements no extension point");
}

TEST(SchedulerTest, ScoreWeightMustBePositive) {
  cluster::Cluster c;
  Profile p{"w", {{"resource_fit"}, {"bestfit", 0}}};
  auto s = Scheduler::Create(&c, p, Registry::BuiltIn(), {});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.status().message(), "profile w: plugin bestfit: weight must be positive");
}

// ---------------------------------------------------------------------------------------------
// Property: whatever happens, nothing is over-allocated and the cluster's counters equal
// capacity minus what the placed pods hold.

void ExpectNoOverAllocation(const cluster::Cluster& c, const Scheduler& s,
                            const std::set<int64_t>& live) {
  ASSERT_EQ(s.placed_count(), live.size());
  std::map<int32_t, int64_t> cpu, mem;
  std::map<std::pair<int32_t, int>, int64_t> milli, gmem;
  std::map<std::pair<int32_t, int>, std::vector<std::pair<int, int>>> mig;
  std::map<int32_t, double> power;
  for (int64_t uid : live) {
    const Placed* p = s.placed(uid);
    ASSERT_NE(p, nullptr) << uid;
    const cluster::Allocation& a = p->alloc;
    cpu[a.node] += a.cpu_milli;
    mem[a.node] += a.mem_mib;
    if (c.node(a.node).rack >= 0) power[c.node(a.node).rack] += a.power_kw;
    for (const cluster::GpuShare& g : a.gpus) {
      if (g.mig_profile >= 0) {
        mig[{a.node, g.gpu}].push_back({g.mig_profile, g.mig_start});
      } else {
        milli[{a.node, g.gpu}] += g.milli;
        gmem[{a.node, g.gpu}] += g.mem_mib;
      }
    }
  }
  for (const Node& n : c.nodes()) {
    ASSERT_GE(n.cpu_free_milli, 0) << n.name;
    ASSERT_GE(n.mem_free_mib, 0) << n.name;
    ASSERT_EQ(n.cpu_free_milli, n.cpu_milli - cpu[n.id]) << n.name;
    ASSERT_EQ(n.mem_free_mib, n.mem_mib - mem[n.id]) << n.name;
    for (int i = 0; i < n.gpu_count(); ++i) {
      const cluster::Gpu& g = n.gpus[i];
      const auto key = std::make_pair(n.id, i);
      ASSERT_GE(g.free_milli, 0) << n.name << " GPU " << i;
      ASSERT_LE(milli[key], cluster::kMilliPerGpu) << n.name << " GPU " << i;
      ASSERT_LE(gmem[key], g.mem_mib) << n.name << " GPU " << i;
      if (mig.count(key)) {
        ASSERT_EQ(milli[key], 0) << n.name << " GPU " << i << ": MIG and time-sliced work";
        const cluster::MigGeometry* geo = cluster::FindMigGeometry(c.model_name(n.model));
        ASSERT_NE(geo, nullptr) << n.name << ": MIG on a model without MIG";
        Status st = cluster::ValidateMigLayout(*geo, mig[key]);
        ASSERT_TRUE(st.ok()) << n.name << " GPU " << i << ": " << st.ToString();
      } else {
        ASSERT_EQ(g.free_milli, cluster::kMilliPerGpu - milli[key]) << n.name << " GPU " << i;
      }
    }
  }
  for (size_t r = 0; r < c.racks().size(); ++r) {
    const cluster::Rack& rack = c.racks()[r];
    ASSERT_NEAR(rack.power_used_kw, power[static_cast<int32_t>(r)], 1e-6) << rack.name;
    if (rack.power_budget_kw > 0) {
      ASSERT_LE(rack.power_used_kw, rack.power_budget_kw + 1e-9);
    }
  }
}

TEST(SchedulerPropertyTest, NoSequenceOfOperationsOverAllocates) {
  const char* kPolicies[] = {"fgd", "bestfit", "packing", "random", "spread", "clustering"};
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    const char* policy = kPolicies[seed % 6];
    SCOPED_TRACE(std::string(policy) + " seed " + std::to_string(seed));
    Rng rng(seed * 7919);
    cluster::Cluster c = RandomCluster(rng, 4 + static_cast<int>(rng.Uniform(12)));
    std::vector<PodRequest> sample;
    for (int i = 0; i < 50; ++i) sample.push_back(RandomPod(rng));
    Profile profile = PolicyProfile(policy).value();
    // After the default filters: rack_power assumes gpu_model already turned GPU work away
    // from CPU-only nodes (see PluginsTest.GpuFiltersOnACpuOnlyNodeDoNotCrash).
    profile.plugins.insert(profile.plugins.end() - 1, PluginConfig{"rack_power"});
    SchedulerOptions opts;
    opts.seed = seed;
    opts.workload = BuildTargetWorkload(sample);
    auto made = Scheduler::Create(&c, profile, Registry::BuiltIn(), opts);
    ASSERT_TRUE(made.ok()) << made.status().ToString();
    Scheduler& s = **made;
    std::set<int64_t> live;
    int64_t next_uid = 1;
    int placed = 0, gangs = 0;
    for (int step = 0; step < 300; ++step) {
      const uint64_t op = rng.Uniform(10);
      if (op < 3 && !live.empty()) {
        auto it = live.begin();
        std::advance(it, static_cast<std::ptrdiff_t>(rng.Uniform(live.size())));
        ASSERT_TRUE(s.Remove(*it).ok());
        live.erase(it);
      } else if (op < 5) {
        PodRequest worker = RandomPod(rng);
        const int size = 2 + static_cast<int>(rng.Uniform(3));
        static const Topology kTopo[] = {Topology::kNone, Topology::kRack, Topology::kNvlink,
                                         Topology::kNode};
        worker.topology = kTopo[rng.Uniform(4)];
        std::vector<PodRequest> members =
            Gang("g" + std::to_string(step), size, worker, next_uid,
                 1 + static_cast<int>(rng.Uniform(static_cast<uint64_t>(size))));
        next_uid += size;
        GangResult g = s.ScheduleGang(members);
        if (g.placed) {
          ++gangs;
          ASSERT_GE(g.members.size(), static_cast<size_t>(members[0].gang.min_available));
          for (size_t k = 0; k < g.members.size(); ++k) live.insert(members[k].uid);
        }
      } else {
        PodRequest p = RandomPod(rng);
        p.uid = next_uid++;
        ScheduleResult r = s.ScheduleOne(p);
        if (r.placed) {
          ++placed;
          live.insert(p.uid);
        } else {
          ASSERT_NE(r.code, Code::kError) << r.reason;
        }
      }
      ExpectNoOverAllocation(c, s, live);
      if (HasFatalFailure()) return;
    }
    EXPECT_GT(placed, 10);
    for (int64_t uid : live) ASSERT_TRUE(s.Remove(uid).ok());
    EXPECT_EQ(c.allocated_gpu_milli(), 0);
    for (const cluster::Rack& r : c.racks()) EXPECT_NEAR(r.power_used_kw, 0, 1e-6);
    (void)gangs;
  }
}

}  // namespace
}  // namespace aicloud::sched
