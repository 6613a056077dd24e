// The openb pod loader and the FGD fill-the-cluster experiment.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "cluster/cluster.h"
#include "cluster/openb.h"
#include "core/csv.h"
#include "core/rng.h"
#include "sim/fgd_experiment.h"
#include "sim/openb_pods.h"

namespace aicloud::sim {
namespace {

const std::string kTraceDir = std::string(AICLOUD_SOURCE_DIR) + "/data/traces/alibaba-gpu-v2023/";
const char* kHeader = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,creation_time,deletion_time\n";

StatusOr<std::vector<TracePod>> ParseText(const std::string& text, cluster::Cluster* c) {
  StatusOr<CsvTable> t = CsvTable::Parse(text, "pods.csv");
  if (!t.ok()) return t.status();
  return ParseOpenbPods(*t, c);
}

// ---------------------------------------------------------------------------------------------
// Loader

TEST(OpenbPodsTest, RowsBecomeTheThreeRequestForms) {
  cluster::Cluster c;
  const cluster::ModelId t4 = c.InternModel("T4");  // already known: its id is reused
  StatusOr<std::vector<TracePod>> pods = ParseText(
      std::string(kHeader) +
          "cpu,4000,8192,0,0,,0,100\n"
          "share,2000,4096,1,460,,10,20\n"
          "pair,8000,16384,2,1000,V100M16|V100M32,5,\n"
          "dup,1000,1024,1,1000,T4|T4,,\n"
          "gaps,1000,1024,1,250,|P100||,,\n"
          "cpuspec,1000,1024,0,0,A10,,\n",
      &c);
  ASSERT_TRUE(pods.ok()) << pods.status().ToString();
  ASSERT_EQ(pods->size(), 6u);
  const std::vector<TracePod>& p = *pods;
  for (size_t i = 0; i < p.size(); ++i) EXPECT_EQ(p[i].pod.uid, static_cast<int64_t>(i) + 1);

  EXPECT_EQ(p[0].pod.name, "cpu");
  EXPECT_EQ(p[0].pod.gpu_kind, sched::GpuKind::kNone);
  EXPECT_EQ(p[0].pod.gpu_count, 0);
  EXPECT_EQ(p[0].pod.total_gpu_milli(), 0);
  EXPECT_EQ(p[0].pod.cpu_milli, 4000);
  EXPECT_EQ(p[0].pod.mem_mib, 8192);
  EXPECT_EQ(p[0].creation_time, 0);
  EXPECT_EQ(p[0].deletion_time, 100);

  EXPECT_EQ(p[1].pod.gpu_kind, sched::GpuKind::kFraction);
  EXPECT_EQ(p[1].pod.gpu_count, 1);
  EXPECT_EQ(p[1].pod.gpu_milli, 460);
  EXPECT_TRUE(p[1].pod.gpu_models.empty());

  EXPECT_EQ(p[2].pod.gpu_kind, sched::GpuKind::kWhole);
  EXPECT_EQ(p[2].pod.gpu_count, 2);
  EXPECT_EQ(p[2].pod.gpu_milli, 1000);
  EXPECT_EQ(p[2].pod.total_gpu_milli(), 2000);
  ASSERT_EQ(p[2].pod.gpu_models.size(), 2u);
  EXPECT_EQ(c.model_name(p[2].pod.gpu_models[0]), "V100M16");
  EXPECT_EQ(c.model_name(p[2].pod.gpu_models[1]), "V100M32");
  EXPECT_EQ(p[2].creation_time, 5);
  EXPECT_EQ(p[2].deletion_time, -1);

  EXPECT_EQ(p[3].pod.gpu_models, (std::vector<cluster::ModelId>{t4})) << "duplicates collapse";
  ASSERT_EQ(p[4].pod.gpu_models.size(), 1u) << "empty names between bars are skipped";
  EXPECT_EQ(c.model_name(p[4].pod.gpu_models[0]), "P100");
  EXPECT_EQ(c.FindModel(""), cluster::kNoModel) << "no empty model name is interned";
  EXPECT_TRUE(p[5].pod.gpu_models.empty()) << "a CPU pod has no GPU model constraint";
  // Models are interned once each, in first-seen order after the ones already there.
  EXPECT_EQ(c.models(), (std::vector<std::string>{"T4", "V100M16", "V100M32", "P100"}));
}

TEST(OpenbPodsTest, TimesAreOptionalColumns) {
  cluster::Cluster c;
  StatusOr<std::vector<TracePod>> pods =
      ParseText("name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1000,0,1,1000\n", &c);
  ASSERT_TRUE(pods.ok()) << pods.status().ToString();
  EXPECT_EQ((*pods)[0].creation_time, -1);
  EXPECT_EQ((*pods)[0].deletion_time, -1);
  EXPECT_TRUE(c.models().empty());
}

struct MalformedCase {
  const char* name;
  std::string rows;  // after the header (line 1)
  const char* message;
};

TEST(OpenbPodsTest, MalformedRowsNameFileLineAndColumn) {
  const std::string ok_row = "ok,1000,1024,1,500,,0,10\n";
  const MalformedCase cases[] = {
      {"fractional share on two GPUs", ok_row + "bad,1000,1024,2,500,,0,10\n",
       "pods.csv:3: gpu_milli: a fractional share (< 1000) is only valid with num_gpu 1"},
      {"gpu_milli 0 on a GPU pod", "bad,1000,1024,1,0,,0,10\n",
       "pods.csv:2: gpu_milli: must be between 1 and 1000 for a GPU pod"},
      {"gpu_milli above 1000", ok_row + ok_row + "bad,1000,1024,1,1001,,0,10\n",
       "pods.csv:4: gpu_milli: must be between 1 and 1000 for a GPU pod"},
      {"negative gpu_milli", "bad,1000,1024,1,-5,,0,10\n",
       "pods.csv:2: gpu_milli: must be between 1 and 1000 for a GPU pod"},
      {"gpu_milli not a number", "bad,1000,1024,1,half,,0,10\n",
       "pods.csv:2: gpu_milli: 'half' is not an integer"},
      {"num_gpu above 64", "bad,1000,1024,65,1000,,0,10\n",
       "pods.csv:2: num_gpu: must be between 0 and 64"},
      {"negative num_gpu", "bad,1000,1024,-1,1000,,0,10\n",
       "pods.csv:2: num_gpu: must be between 0 and 64"},
      {"deletion before creation", ok_row + "bad,1000,1024,1,500,,100,99\n",
       "pods.csv:3: deletion_time: earlier than creation_time"},
      {"creation not a number", "bad,1000,1024,1,500,,soon,10\n",
       "pods.csv:2: creation_time: 'soon' is not an integer"},
      {"deletion not a number", "bad,1000,1024,1,500,,0,1e3\n",
       "pods.csv:2: deletion_time: '1e3' is not an integer"},
      {"negative cpu", "bad,-1,1024,0,0,,0,10\n", "pods.csv:2: cpu_milli: must not be negative"},
      {"negative memory", "bad,1,-1024,0,0,,0,10\n", "pods.csv:2: memory_mib: must not be negative"},
      {"empty name", ",1,1,0,0,,0,10\n", "pods.csv:2: name: empty pod name"},
      {"blank lines still count", ok_row + "\n\n" + "bad,1000,1024,2,999,,0,10\n",
       "pods.csv:5: gpu_milli: a fractional share (< 1000) is only valid with num_gpu 1"},
  };
  for (const MalformedCase& tc : cases) {
    SCOPED_TRACE(tc.name);
    cluster::Cluster c;
    StatusOr<std::vector<TracePod>> pods = ParseText(kHeader + tc.rows, &c);
    ASSERT_FALSE(pods.ok());
    EXPECT_EQ(pods.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(pods.status().message(), tc.message);
  }
  cluster::Cluster c;
  StatusOr<std::vector<TracePod>> missing =
      ParseText("name,cpu_milli,memory_mib,gpu_milli\na,1,1,0\n", &c);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().message(), "pods.csv:1: num_gpu: required column missing");
}

TEST(OpenbPodsTest, LoadsTheAlibabaTraceAndInternsItsGpuSpecs) {
  StatusOr<cluster::Cluster> c =
      cluster::LoadOpenbNodes(kTraceDir + "openb_node_list_gpu_node.csv");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  StatusOr<std::vector<TracePod>> pods =
      LoadOpenbPods(kTraceDir + "openb_pod_list_gpuspec10.csv", &*c);
  ASSERT_TRUE(pods.ok()) << pods.status().ToString();
  EXPECT_EQ(pods->size(), 8152u);
  int constrained = 0;
  for (const TracePod& tp : *pods) {
    if (tp.pod.gpu_models.empty()) continue;
    ++constrained;
    std::set<cluster::ModelId> distinct(tp.pod.gpu_models.begin(), tp.pod.gpu_models.end());
    EXPECT_EQ(distinct.size(), tp.pod.gpu_models.size()) << tp.pod.name;
  }
  EXPECT_EQ(constrained, 732);
  // Every model a pod names is one the node list already has.
  EXPECT_EQ(c->models().size(), 7u);
  const TracePod& p31 = (*pods)[31];
  EXPECT_EQ(p31.pod.name, "openb-pod-0031");
  EXPECT_EQ(p31.pod.gpu_models.size(), 2u) << "V100M16|V100M32|V100M32";
  EXPECT_FALSE(LoadOpenbPods(kTraceDir + "no_such_file.csv", &*c).ok());
}

// ---------------------------------------------------------------------------------------------
// FGD experiment on a small synthetic cluster

cluster::Cluster SmallCluster() {
  cluster::Cluster c;
  const cluster::ModelId t4 = c.InternModel("T4");
  const cluster::ModelId v100 = c.InternModel("V100M32");
  auto add = [&](const std::string& name, cluster::ModelId m, int gpus, int64_t cpu) {
    cluster::Node n;
    n.name = name;
    n.model = gpus > 0 ? m : cluster::kNoModel;
    n.cpu_milli = cpu;
    n.mem_mib = 262144;
    for (int i = 0; i < gpus; ++i) {
      cluster::Gpu g;
      g.mem_mib = 16384;
      n.gpus.push_back(g);
    }
    c.AddNode(n);
  };
  for (int k = 0; k < 4; ++k) add("t4-" + std::to_string(k), t4, 2, 32000);
  for (int k = 0; k < 2; ++k) add("v100-" + std::to_string(k), v100, 8, 96000);
  add("cpu-0", cluster::kNoModel, 0, 64000);
  return c;  // 24 GPUs
}

std::vector<TracePod> SmallTrace(const cluster::Cluster& c, int n = 40) {
  Rng rng(99);
  std::vector<TracePod> out;
  for (int i = 0; i < n; ++i) {
    sched::PodRequest p;
    const int64_t cpu = 1000 * static_cast<int64_t>(1 + rng.Uniform(8));
    switch (rng.Uniform(5)) {
      case 0:
        p = sched::CpuOnly(cpu, 2048);
        break;
      case 1:
      case 2:
        p = sched::FractionalGpu(static_cast<int32_t>(100 * (1 + rng.Uniform(9))), 0, cpu, 2048);
        break;
      default:
        p = sched::WholeGpus(1 + static_cast<int>(rng.Uniform(2)), cpu, 2048);
        break;
    }
    if (p.wants_gpu() && rng.Uniform(4) == 0) p.gpu_models = {c.FindModel("T4")};
    p.name = "pod-" + std::to_string(1000 + i);
    p.uid = i + 1;
    TracePod tp;
    tp.pod = p;
    out.push_back(tp);
  }
  return out;
}

int64_t Requested(const std::vector<sched::PodRequest>& pods) {
  int64_t s = 0;
  for (const sched::PodRequest& p : pods) s += p.total_gpu_milli();
  return s;
}

TEST(FgdExperimentTest, ArrivalsAreDeterministicPerSeed) {
  const cluster::Cluster c = SmallCluster();
  FgdExperiment exp(c, SmallTrace(c), "small");
  auto names = [](const std::vector<sched::PodRequest>& v) {
    std::vector<std::string> out;
    for (const sched::PodRequest& p : v) out.push_back(p.name + "#" + std::to_string(p.uid));
    return out;
  };
  EXPECT_EQ(names(exp.Arrivals(1, 1.3)), names(exp.Arrivals(1, 1.3)));
  EXPECT_NE(names(exp.Arrivals(1, 1.3)), names(exp.Arrivals(2, 1.3)));
  EXPECT_NE(names(exp.Arrivals(1, 0.5)), names(exp.Arrivals(2, 0.5)));
}

TEST(FgdExperimentTest, ArrivalsReachTheInflateTargetWithinOnePod) {
  const cluster::Cluster c = SmallCluster();
  const std::vector<TracePod> trace = SmallTrace(c);
  int64_t largest = 0, trace_total = 0;
  for (const TracePod& tp : trace) {
    largest = std::max(largest, tp.pod.total_gpu_milli());
    trace_total += tp.pod.total_gpu_milli();
  }
  FgdExperiment exp(c, trace, "small");
  const double capacity = static_cast<double>(c.total_gpu_milli());
  for (double inflate : {0.3, 1.0, 1.3, 2.0}) {
    for (uint64_t seed : {1, 2, 3}) {
      SCOPED_TRACE("inflate " + std::to_string(inflate) + " seed " + std::to_string(seed));
      const std::vector<sched::PodRequest> a = exp.Arrivals(seed, inflate);
      const double target = inflate * capacity;
      const double total = static_cast<double>(Requested(a));
      EXPECT_LE(std::abs(total - target), static_cast<double>(largest));
      if (target < static_cast<double>(trace_total)) {
        EXPECT_LE(total, target) << "dropping pods never undershoots past the target";
      }
      std::set<int64_t> uids;
      for (const sched::PodRequest& p : a) {
        EXPECT_TRUE(uids.insert(p.uid).second) << "uid " << p.uid << " twice";
      }
    }
  }
  // Above the trace total, copies are appended after every original pod.
  const std::vector<sched::PodRequest> a = exp.Arrivals(5, 2.0);
  ASSERT_GT(a.size(), trace.size());
  int copies = 0;
  for (const sched::PodRequest& p : a) copies += p.name.find("-tuned-") != std::string::npos;
  EXPECT_EQ(static_cast<size_t>(copies), a.size() - trace.size());
}

[[noreturn]] void ArrivalsInChild(const FgdExperiment& exp) {
  alarm(2);
#if !defined(__SANITIZE_ADDRESS__)
  const rlimit limit{rlim_t{2} << 30, rlim_t{2} << 30};
  setrlimit(RLIMIT_AS, &limit);
#endif
  const std::vector<sched::PodRequest> a = exp.Arrivals(1, 1.0);
  std::exit(a.size() >= 5 ? 0 : 3);
}

// A trace without GPU demand can never reach a GPU target: building the arrivals must still
// end. Run in a child with an alarm and a memory cap, so a hang fails only this test.
TEST(FgdExperimentTest, ArrivalsOfACpuOnlyTraceTerminate) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const cluster::Cluster c = SmallCluster();
  std::vector<TracePod> trace;
  for (int i = 0; i < 5; ++i) {
    TracePod tp;
    tp.pod = sched::CpuOnly(1000, 1024);
    tp.pod.name = "cpu-" + std::to_string(i);
    tp.pod.uid = i + 1;
    trace.push_back(tp);
  }
  FgdExperiment exp(c, trace, "cpu");
  EXPECT_EXIT(ArrivalsInChild(exp), ::testing::ExitedWithCode(0), "");
}

// As in the paper's artifact (Simulate: SetTypicalPods before TunePodsByNodeTotalResource), the
// typical shapes are the 95% cover of the trace as loaded, CPU-only pods included: the same
// for every seed and not affected by the resampled copies.
TEST(FgdExperimentTest, TypicalShapesComeFromTheTraceNotTheArrivals) {
  const cluster::Cluster c = SmallCluster();
  const std::vector<TracePod> trace = SmallTrace(c);
  std::vector<sched::PodRequest> pods;
  for (const TracePod& tp : trace) pods.push_back(tp.pod);
  FgdExperiment exp(c, trace, "small");
  const sched::TargetWorkload want = sched::BuildTargetWorkload(pods, 0.95);
  const sched::TargetWorkload& got = exp.target();
  ASSERT_EQ(got.shapes.size(), want.shapes.size());
  bool cpu_only = false;
  for (size_t i = 0; i < want.shapes.size(); ++i) {
    SCOPED_TRACE("shape " + std::to_string(i));
    EXPECT_EQ(got.shapes[i].cpu_milli, want.shapes[i].cpu_milli);
    EXPECT_EQ(got.shapes[i].gpu_milli, want.shapes[i].gpu_milli);
    EXPECT_EQ(got.shapes[i].gpu_count, want.shapes[i].gpu_count);
    EXPECT_EQ(got.shapes[i].models, want.shapes[i].models);
    EXPECT_DOUBLE_EQ(got.shapes[i].weight, want.shapes[i].weight);
    cpu_only = cpu_only || got.shapes[i].gpu_count == 0;
  }
  EXPECT_TRUE(cpu_only) << "CPU-only pods are part of the typical workload";
}

bool SameCurve(const FgdRun& a, const FgdRun& b) {
  if (a.curve.size() != b.curve.size()) return false;
  for (size_t i = 0; i < a.curve.size(); ++i) {
    const CurvePoint& x = a.curve[i];
    const CurvePoint& y = b.curve[i];
    if (x.arrived_pct != y.arrived_pct || x.allocation_pct != y.allocation_pct ||
        x.frag_amount_pct != y.frag_amount_pct || x.frag_ratio_pct != y.frag_ratio_pct) {
      return false;
    }
  }
  return true;
}

TEST(FgdExperimentTest, RunIsDeterministicPerSeedAndBounded) {
  const cluster::Cluster c = SmallCluster();
  FgdExperiment exp(c, SmallTrace(c), "small");
  ASSERT_FALSE(exp.target().shapes.empty());
  for (const char* policy : {"fgd", "bestfit", "packing", "random"}) {
    for (double inflate : {1.0, 1.3}) {
      SCOPED_TRACE(std::string(policy) + " inflate " + std::to_string(inflate));
      FgdConfig cfg;
      cfg.policy = policy;
      cfg.seed = 4;
      cfg.inflate = inflate;
      StatusOr<FgdRun> a = exp.Run(cfg);
      StatusOr<FgdRun> b = exp.Run(cfg);
      ASSERT_TRUE(a.ok()) << a.status().ToString();
      ASSERT_TRUE(b.ok());
      EXPECT_TRUE(SameCurve(*a, *b)) << "same seed, different curves";
      EXPECT_EQ(a->placed, b->placed);
      EXPECT_EQ(a->failed, b->failed);
      EXPECT_EQ(a->policy, policy);
      EXPECT_EQ(a->seed, 4u);
      EXPECT_EQ(a->workload, "small");
      EXPECT_EQ(a->pods, static_cast<int64_t>(exp.Arrivals(4, inflate).size()));
      EXPECT_EQ(a->placed + a->failed, a->pods);
      EXPECT_GT(a->placed, 0);
      const size_t points = static_cast<size_t>(std::lround(inflate * 100)) + 1;
      ASSERT_EQ(a->curve.size(), points);
      double previous = 0;
      for (size_t i = 0; i < points; ++i) {
        const CurvePoint& p = a->curve[i];
        EXPECT_EQ(p.arrived_pct, static_cast<int>(i));
        EXPECT_GE(p.allocation_pct, 0);
        EXPECT_LE(p.allocation_pct, 100.0 + 1e-9) << "at " << i;
        EXPECT_GE(p.frag_amount_pct, 0);
        EXPECT_LE(p.frag_amount_pct, 100.0 + 1e-9);
        // No departures: allocation never falls as demand arrives.
        EXPECT_GE(p.allocation_pct, previous - 1e-9) << "at " << i;
        previous = p.allocation_pct;
      }
      EXPECT_EQ(a->final_allocation_pct, a->curve.back().allocation_pct);
      EXPECT_LE(a->final_allocation_pct, 100.0 + 1e-9);
      if (inflate > 1.0) {
        EXPECT_GT(a->failed, 0) << "130% of the GPUs cannot all be placed";
      }
    }
  }
}

TEST(FgdExperimentTest, SeedsChangeTheRun) {
  const cluster::Cluster c = SmallCluster();
  FgdExperiment exp(c, SmallTrace(c), "small");
  FgdConfig cfg;
  cfg.policy = "fgd";
  int distinct = 0;
  StatusOr<FgdRun> base = exp.Run(cfg);
  ASSERT_TRUE(base.ok());
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    cfg.seed = seed;
    StatusOr<FgdRun> r = exp.Run(cfg);
    ASSERT_TRUE(r.ok());
    distinct += SameCurve(*r, *base) ? 0 : 1;
  }
  EXPECT_GT(distinct, 0);
}

TEST(FgdExperimentTest, RunRejectsBadConfigs) {
  const cluster::Cluster c = SmallCluster();
  FgdExperiment exp(c, SmallTrace(c), "small");
  FgdConfig cfg;
  cfg.inflate = 0;
  StatusOr<FgdRun> r = exp.Run(cfg);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  cfg.inflate = 10.5;
  EXPECT_EQ(exp.Run(cfg).status().code(), StatusCode::kInvalidArgument);
  cfg.inflate = 1.0;
  cfg.policy = "tetris";
  StatusOr<FgdRun> unknown = exp.Run(cfg);
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("tetris"), std::string::npos);

  cluster::Cluster cpu_only;
  cluster::Node n;
  n.name = "cpu";
  n.cpu_milli = 1000;
  n.mem_mib = 1024;
  cpu_only.AddNode(n);
  FgdExperiment none(cpu_only, SmallTrace(c), "small");
  cfg.policy = "fgd";
  StatusOr<FgdRun> no_gpus = none.Run(cfg);
  ASSERT_FALSE(no_gpus.ok());
  EXPECT_EQ(no_gpus.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(no_gpus.status().message(), "the cluster has no GPUs");
}

TEST(FgdExperimentTest, MeanRunAveragesPointByPoint) {
  FgdRun a, b;
  a.final_allocation_pct = 80;
  b.final_allocation_pct = 90;
  a.pods = 10;
  b.pods = 20;
  a.curve = {{0, 10, 2, 4}, {1, 20, 4, 8}};
  b.curve = {{0, 30, 4, 8}, {1, 40, 8, 16}};
  FgdRun m = MeanRun({a, b});
  EXPECT_DOUBLE_EQ(m.final_allocation_pct, 85);
  EXPECT_EQ(m.pods, 15);
  ASSERT_EQ(m.curve.size(), 2u);
  EXPECT_EQ(m.curve[1].arrived_pct, 1);
  EXPECT_DOUBLE_EQ(m.curve[0].allocation_pct, 20);
  EXPECT_DOUBLE_EQ(m.curve[1].frag_amount_pct, 6);
  EXPECT_DOUBLE_EQ(m.curve[1].frag_ratio_pct, 12);
  EXPECT_TRUE(MeanRun({}).curve.empty());
}

}  // namespace
}  // namespace aicloud::sim
