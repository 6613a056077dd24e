// Edge cases of the scheduling cycle: the cluster growing under a running scheduler, malformed
// requests, preemption whose retry fails, gang names, profile limits and the change log.
#include <gtest/gtest.h>

#include <limits>
#include <memory>

#include "cluster/cluster.h"
#include "sched/profile.h"
#include "sched/registry.h"
#include "sched/scheduler.h"

namespace aicloud::sched {
namespace {

cluster::Node GpuNode(const std::string& name, cluster::ModelId model, int gpus) {
  cluster::Node n;
  n.name = name;
  n.model = model;
  n.cpu_milli = 64000;
  n.mem_mib = 262144;
  n.gpus.resize(gpus);
  for (cluster::Gpu& g : n.gpus) g.mem_mib = 81920;
  return n;
}

std::unique_ptr<Scheduler> Make(cluster::Cluster* c, const Profile& p,
                                const Registry& r = Registry::BuiltIn()) {
  SchedulerOptions o;
  o.tie_break = SchedulerOptions::TieBreak::kFirst;
  o.workload.shapes.push_back({1000, 1000, 1, {}, 1.0});
  auto s = Scheduler::Create(c, p, r, o);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(*s) : nullptr;
}

TEST(SchedulerEdgeTest, ModelsAndNodesAddedAfterCreateAreScheduled) {
  cluster::Cluster c;
  c.AddNode([] {
    cluster::Node n;
    n.name = "cpu";
    n.cpu_milli = 8000;
    n.mem_mib = 8192;
    return n;
  }());
  auto s = Make(&c, *PolicyProfile("fgd"));
  ASSERT_NE(s, nullptr);
  EXPECT_FALSE(s->ScheduleOne(WholeGpus(1, 1000, 1024)).placed);
  const cluster::ModelId t4 = c.InternModel("T4");
  c.AddNode(GpuNode("t4-0", t4, 2));
  PodRequest p = WholeGpus(1, 1000, 1024);
  p.gpu_models = {t4};
  ScheduleResult r = s->ScheduleOne(p);
  ASSERT_TRUE(r.placed) << r.reason;
  EXPECT_EQ(r.node, 1);
}

TEST(SchedulerEdgeTest, MalformedRequestsAreRejectedWithTheirProblem) {
  cluster::Cluster c;
  const cluster::ModelId h = c.InternModel("H100-SXM");
  c.AddNode(GpuNode("n0", h, 8));
  auto s = Make(&c, *PolicyProfile("bestfit"));
  ASSERT_NE(s, nullptr);
  struct Case {
    PodRequest pod;
    const char* want;
  } cases[] = {
      {WholeGpus(0, 1000, 0), "whole-GPU count must be 1..64"},
      {FractionalGpu(0, 0, 1000, 0), "a fraction must be 1..999 milli"},
      {FractionalGpu(1000, 0, 1000, 0), "a fraction must be 1..999 milli"},
      {CpuOnly(-5, 0), "negative CPU or memory request"},
      {MigInstance("", 0, 0), "a MIG request names one profile"},
  };
  for (Case& k : cases) {
    k.pod.name = "bad";
    ScheduleResult r = s->ScheduleOne(k.pod);
    EXPECT_FALSE(r.placed);
    EXPECT_EQ(r.code, Code::kUnresolvable);
    EXPECT_EQ(r.reason, std::string("invalid request bad: ") + k.want);
  }
  EXPECT_EQ(c.allocated_gpu_milli(), 0);
  PodRequest big = CpuOnly(1000, 0);
  big.uid = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(s->ScheduleOne(big).code, Code::kError);
  big.uid = -3;
  EXPECT_EQ(s->ScheduleOne(big).code, Code::kError);
}

// A post-filter that always nominates node 0 and the first pod on it, whether or not that
// frees enough: the framework must put the victim back when the retry fails.
class StubbornPreemption final : public PostFilterPlugin {
 public:
  explicit StubbornPreemption(Handle* h) : h_(h) {}
  std::string_view Name() const override { return "stubborn"; }
  PostFilterResult PostFilter(CycleState&, const PodRequest&, const FilterSummary&) override {
    PostFilterResult r;
    r.nominated_node = 0;
    if (!h_->pods_on_node(0).empty()) r.victims.push_back(h_->pods_on_node(0).front());
    return r;
  }

 private:
  Handle* h_;
};

TEST(SchedulerEdgeTest, FailedPreemptionRetryPutsVictimsBack) {
  Registry reg = Registry::BuiltIn();
  ASSERT_TRUE(reg.Register("stubborn", [](const PluginArgs& a) -> StatusOr<std::unique_ptr<Plugin>> {
                   return std::unique_ptr<Plugin>(new StubbornPreemption(a.handle));
                 }).ok());
  cluster::Cluster c;
  const cluster::ModelId h = c.InternModel("H100-SXM");
  c.AddNode(GpuNode("n0", h, 2));
  Profile p = *PolicyProfile("bestfit");
  p.plugins.push_back({"stubborn"});
  auto s = Make(&c, p, reg);
  ASSERT_NE(s, nullptr);
  PodRequest a = WholeGpus(1, 1000, 0);
  a.uid = 1;
  PodRequest b = WholeGpus(1, 1000, 0);
  b.uid = 2;
  ASSERT_TRUE(s->ScheduleOne(a).placed);
  ASSERT_TRUE(s->ScheduleOne(b).placed);
  // Needs 2 GPUs; evicting one pod frees only one.
  PodRequest big = WholeGpus(2, 1000, 0);
  big.uid = 3;
  big.priority = 10;
  ScheduleResult r = s->ScheduleOne(big);
  EXPECT_FALSE(r.placed);
  EXPECT_TRUE(r.preempted.empty());
  EXPECT_EQ(s->placed_count(), 2u);
  EXPECT_NE(s->placed(1), nullptr);
  EXPECT_EQ(c.allocated_gpu_milli(), 2000);
  EXPECT_TRUE(s->Remove(1).ok());
  EXPECT_TRUE(s->Remove(2).ok());
  EXPECT_EQ(c.allocated_gpu_milli(), 0);
}

TEST(SchedulerEdgeTest, GangNameInUseIsRejected) {
  cluster::Cluster c;
  const cluster::ModelId h = c.InternModel("H100-SXM");
  c.AddNode(GpuNode("n0", h, 8));
  auto s = Make(&c, *PolicyProfile("bestfit"));
  ASSERT_NE(s, nullptr);
  auto gang = [](int64_t first) {
    std::vector<PodRequest> m(2, WholeGpus(1, 1000, 0));
    for (int i = 0; i < 2; ++i) {
      m[i].uid = first + i;
      m[i].gang = {"g", 2, 2};
    }
    return m;
  };
  ASSERT_TRUE(s->ScheduleGang(gang(1)).placed);
  GangResult again = s->ScheduleGang(gang(10));
  EXPECT_FALSE(again.placed);
  EXPECT_EQ(again.reason, "gang g already has placed members");
  EXPECT_EQ(s->gang_members("g").size(), 2u);
}

// Fails the second bind it sees.
class FlakyBind final : public BindPlugin {
 public:
  std::string_view Name() const override { return "flaky_bind"; }
  PluginStatus Bind(const PodRequest&, const cluster::Allocation&) override {
    return ++calls_ == 2 ? PluginStatus::Error("disk full") : PluginStatus::Ok();
  }

 private:
  int calls_ = 0;
};

TEST(SchedulerEdgeTest, GangBindFailureLeavesNothingBehind) {
  Registry reg = Registry::BuiltIn();
  ASSERT_TRUE(reg.Register("flaky_bind", [](const PluginArgs&) -> StatusOr<std::unique_ptr<Plugin>> {
                   return std::unique_ptr<Plugin>(new FlakyBind());
                 }).ok());
  cluster::Cluster c;
  const cluster::ModelId h = c.InternModel("H100-SXM");
  c.AddNode(GpuNode("n0", h, 8));
  Profile p = *PolicyProfile("bestfit");
  p.plugins.push_back({"flaky_bind"});
  auto s = Make(&c, p, reg);
  ASSERT_NE(s, nullptr);
  std::vector<PodRequest> m(3, WholeGpus(2, 1000, 0));
  for (int i = 0; i < 3; ++i) {
    m[i].uid = 1 + i;
    m[i].gang = {"g", 3, 3};
  }
  GangResult r = s->ScheduleGang(m);
  EXPECT_FALSE(r.placed);
  EXPECT_EQ(r.reason, "gang g: bind failed: bind flaky_bind: disk full");
  EXPECT_EQ(s->placed_count(), 0u);
  EXPECT_TRUE(s->gang_members("g").empty());
  EXPECT_EQ(c.allocated_gpu_milli(), 0);
  EXPECT_EQ(c.node(0).cpu_free_milli, c.node(0).cpu_milli);
}

TEST(SchedulerEdgeTest, MigGangWithRackTopologyIsPlaced) {
  cluster::Cluster c;
  const cluster::ModelId h = c.InternModel("H100-SXM");
  c.AddRack({"r0", 0, 0, "air", -1});
  cluster::Node n = GpuNode("n0", h, 2);
  n.rack = 0;
  c.AddNode(n);
  auto s = Make(&c, *PolicyProfile("bestfit"));
  ASSERT_NE(s, nullptr);
  // One small instance partitions GPU 0: the rack then shows only GPU 1's 1000 milli free,
  // though both 3g.40gb workers fit (one beside the 1g instance, one on GPU 1).
  PodRequest small = MigInstance("1g.10gb", 100, 0);
  small.uid = 100;
  ASSERT_TRUE(s->ScheduleOne(small).placed);
  std::vector<PodRequest> m(2, MigInstance("3g.40gb", 100, 0));
  for (int i = 0; i < 2; ++i) {
    m[i].uid = 1 + i;
    m[i].gang = {"mig", 2, 2};
    m[i].topology = Topology::kRack;
  }
  GangResult r = s->ScheduleGang(m);
  ASSERT_TRUE(r.placed) << r.reason;
  EXPECT_EQ(s->gang_members("mig").size(), 2u);
}

TEST(SchedulerEdgeTest, AtMostThreeScorePlugins) {
  cluster::Cluster c;
  Profile p = *PolicyProfile("bestfit");
  p.plugins.push_back({"dotprod"});
  p.plugins.push_back({"spread"});
  p.plugins.push_back({"packing"});
  SchedulerOptions o;
  auto s = Scheduler::Create(&c, p, Registry::BuiltIn(), o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("at most 3 score plugins (packing is one too many)"),
            std::string::npos);
}

TEST(SchedulerEdgeTest, ChangeLogStaysBounded) {
  cluster::Cluster c;
  const cluster::ModelId h = c.InternModel("H100-SXM");
  for (int i = 0; i < 4; ++i) c.AddNode(GpuNode("n" + std::to_string(i), h, 8));
  auto s = Make(&c, *PolicyProfile("fgd"));
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(s->memoized());
  for (int64_t uid = 1; uid <= 20000; ++uid) {
    PodRequest p = WholeGpus(1, 1000, 0);
    p.uid = uid;
    ASSERT_TRUE(s->ScheduleOne(p).placed);
    ASSERT_TRUE(s->Remove(uid).ok());
  }
  EXPECT_LT(c.change_log().size(), 10000u);
  EXPECT_GT(c.change_log_base(), 0u);
  EXPECT_EQ(c.allocated_gpu_milli(), 0);
}

TEST(SchedulerEdgeTest, FgdOnANodeWithMoreThan32Gpus) {
  cluster::Cluster c;
  const cluster::ModelId h = c.InternModel("H100-SXM");
  c.AddNode(GpuNode("big", h, 40));
  auto s = Make(&c, *PolicyProfile("fgd"));
  ASSERT_NE(s, nullptr);
  for (int64_t uid = 1; uid <= 40; ++uid) {
    PodRequest p = FractionalGpu(600, 0, 100, 0);
    p.uid = uid;
    ScheduleResult r = s->ScheduleOne(p);
    ASSERT_TRUE(r.placed) << r.reason;
  }
  // Every GPU now has 400 left; a 400 share still fits, a 500 one does not.
  PodRequest fits = FractionalGpu(400, 0, 100, 0);
  fits.uid = 100;
  EXPECT_TRUE(s->ScheduleOne(fits).placed);
  PodRequest no = FractionalGpu(500, 0, 100, 0);
  no.uid = 101;
  EXPECT_FALSE(s->ScheduleOne(no).placed);
}

}  // namespace
}  // namespace aicloud::sched
