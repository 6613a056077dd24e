#include "sim/event_sim.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "cluster/openb.h"
#include "core/csv.h"
#include "core/rng.h"
#include "sched/profile.h"
#include "sched/registry.h"
#include "sched/scheduler.h"
#include "sched/workload.h"

namespace aicloud::sim {
namespace {

cluster::Cluster Nodes(const std::string& rows) {
  StatusOr<CsvTable> t = CsvTable::Parse("sn,cpu_milli,memory_mib,gpu,model\n" + rows, "nodes.csv");
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  StatusOr<cluster::Cluster> c = cluster::ParseOpenbNodes(*t);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return std::move(*c);
}

// One node with `gpus` V100s and plenty of CPU and memory.
cluster::Cluster OneNode(int gpus) {
  return Nodes("n0,96000,786432," + std::to_string(gpus) + ",V100M16\n");
}

// Rows "name,num_gpu,gpu_milli,creation,deletion"; every pod asks for 1 CPU and 1 GiB.
std::vector<TracePod> Pods(const std::vector<std::string>& rows, cluster::Cluster* cluster) {
  std::string text = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time,deletion_time\n";
  for (const std::string& r : rows) {
    size_t comma = r.find(',');
    text += r.substr(0, comma) + ",1000,1024" + r.substr(comma) + "\n";
  }
  StatusOr<CsvTable> t = CsvTable::Parse(text, "pods.csv");
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  StatusOr<std::vector<TracePod>> pods = ParseTimedPods(*t, cluster);
  EXPECT_TRUE(pods.ok()) << pods.status().ToString();
  return std::move(*pods);
}

EventRun Replay(cluster::Cluster cluster, const std::vector<std::string>& rows,
                EventConfig config = {}) {
  std::vector<TracePod> pods = Pods(rows, &cluster);
  EventSim sim(cluster, std::move(pods), "tiny");
  StatusOr<EventRun> run = sim.Run(config);
  EXPECT_TRUE(run.ok()) << run.status().ToString();
  return run.ok() ? std::move(*run) : EventRun{};
}

TEST(EventSimTest, SecondPodWaitsUntilTheFirstLeaves) {
  EventRun r = Replay(OneNode(1), {"a,1,1000,0,100", "b,1,1000,10,110"});
  ASSERT_EQ(r.outcomes.size(), 2u);
  EXPECT_EQ(r.placed, 2);
  EXPECT_EQ(r.never_placed, 0);
  EXPECT_DOUBLE_EQ(r.outcomes[0].wait_s(), 0);
  // b starts at exactly a's departure and still runs its full 100 s.
  EXPECT_DOUBLE_EQ(r.outcomes[1].start_s, 100);
  EXPECT_DOUBLE_EQ(r.outcomes[1].wait_s(), 90);
  EXPECT_DOUBLE_EQ(r.outcomes[1].end_s, 200);
  EXPECT_DOUBLE_EQ(r.wait_mean_s, 45);
  EXPECT_DOUBLE_EQ(r.wait_p50_s, 0);
  EXPECT_DOUBLE_EQ(r.wait_p99_s, 90);
  EXPECT_DOUBLE_EQ(r.wait_max_s, 90);
  EXPECT_DOUBLE_EQ(r.makespan_s, 200);
  EXPECT_DOUBLE_EQ(r.time_weighted_allocation_pct, 100);
  EXPECT_DOUBLE_EQ(r.peak_allocation_pct, 100);
}

TEST(EventSimTest, TimeScaleMovesArrivalsButKeepsRunTimes) {
  EventConfig cfg;
  cfg.time_scale = 0.5;
  EventRun r = Replay(OneNode(1), {"a,1,1000,0,100", "b,1,1000,10,110"}, cfg);
  EXPECT_DOUBLE_EQ(r.outcomes[1].arrival_s, 5);
  EXPECT_DOUBLE_EQ(r.outcomes[1].start_s, 100);
  EXPECT_DOUBLE_EQ(r.outcomes[1].wait_s(), 95);
}

TEST(EventSimTest, QueuedPodsStartInArrivalOrderAsCapacityFrees) {
  EventRun r = Replay(OneNode(1), {"a,1,1000,0,100", "c,1,1000,20,30", "b,1,1000,10,60"});
  // File order is a, c, b; arrival order a, b, c: b (50 s) goes first, then c (10 s).
  EXPECT_DOUBLE_EQ(r.outcomes[2].start_s, 100);
  EXPECT_DOUBLE_EQ(r.outcomes[1].start_s, 150);
  EXPECT_DOUBLE_EQ(r.outcomes[1].end_s, 160);
  EXPECT_DOUBLE_EQ(r.makespan_s, 160);
}

TEST(EventSimTest, NoHeadOfLineBlocking) {
  // b (2 GPUs) cannot fit while a runs; c (1 GPU) arrives behind it and starts at once.
  EventRun r =
      Replay(OneNode(2), {"a,1,1000,0,100", "b,2,1000,1,11", "c,1,1000,2,102"});
  EXPECT_DOUBLE_EQ(r.outcomes[2].start_s, 2);
  // b needs both GPUs: it waits for c too.
  EXPECT_DOUBLE_EQ(r.outcomes[1].start_s, 102);
  EXPECT_DOUBLE_EQ(r.outcomes[1].end_s, 112);
  EXPECT_EQ(r.placed, 3);
}

TEST(EventSimTest, PodLargerThanAnyNodeIsNeverPlacedAndBlocksNothing) {
  EventRun r = Replay(OneNode(1), {"big,2,1000,0,100", "small,1,1000,1,51"});
  EXPECT_EQ(r.outcomes[0].fate, PodOutcome::Fate::kUnplaceable);
  EXPECT_DOUBLE_EQ(r.outcomes[0].start_s, -1);
  EXPECT_DOUBLE_EQ(r.outcomes[1].start_s, 1);
  EXPECT_EQ(r.placed, 1);
  EXPECT_EQ(r.unplaceable, 1);
  EXPECT_EQ(r.never_placed, 1);
  EXPECT_DOUBLE_EQ(r.wait_max_s, 0);
}

TEST(EventSimTest, FractionalSharesPackOneGpu) {
  EventRun r = Replay(OneNode(1), {"a,1,500,0,100", "b,1,500,0,100", "c,1,500,0,100"});
  EXPECT_DOUBLE_EQ(r.outcomes[0].start_s, 0);
  EXPECT_DOUBLE_EQ(r.outcomes[1].start_s, 0);
  EXPECT_DOUBLE_EQ(r.outcomes[2].start_s, 100);
  EXPECT_DOUBLE_EQ(r.peak_allocation_pct, 100);
  // 100% for 100 s, then 50% for 100 s.
  EXPECT_DOUBLE_EQ(r.time_weighted_allocation_pct, 75);
}

TEST(EventSimTest, MaxWaitDropsPodsThatWaitTooLong) {
  EventConfig cfg;
  cfg.max_wait_seconds = 50;
  EventRun r = Replay(OneNode(1), {"a,1,1000,0,100", "b,1,1000,10,110"}, cfg);
  EXPECT_EQ(r.outcomes[1].fate, PodOutcome::Fate::kDropped);
  EXPECT_EQ(r.dropped, 1);
  EXPECT_EQ(r.never_placed, 1);
  EXPECT_DOUBLE_EQ(r.makespan_s, 100);
}

TEST(EventSimTest, PodPlacedWhenCapacityFreesExactlyAtItsDeadline) {
  EventConfig cfg;
  cfg.max_wait_seconds = 90;
  EventRun r = Replay(OneNode(1), {"a,1,1000,0,100", "b,1,1000,10,110"}, cfg);
  EXPECT_EQ(r.outcomes[1].fate, PodOutcome::Fate::kPlaced);
  EXPECT_DOUBLE_EQ(r.outcomes[1].wait_s(), 90);
  EXPECT_EQ(r.dropped, 0);
}

TEST(EventSimTest, AllocationCurveSamplesTheGridAndTheEnd) {
  EventConfig cfg;
  cfg.sample_every_seconds = 100;
  EventRun r = Replay(OneNode(1), {"a,1,1000,0,100", "b,1,1000,300,400"}, cfg);
  std::vector<std::pair<double, double>> want = {
      {0, 100}, {100, 0}, {200, 0}, {300, 100}, {400, 0}};
  EXPECT_EQ(r.allocation_curve, want);
  EXPECT_DOUBLE_EQ(r.time_weighted_allocation_pct, 50);
  EXPECT_DOUBLE_EQ(r.makespan_s, 400);
}

TEST(EventSimTest, ZeroLengthPodsComeAndGo) {
  EventRun r = Replay(OneNode(1), {"a,1,1000,5,5", "b,1,1000,5,15"});
  EXPECT_EQ(r.placed, 2);
  EXPECT_DOUBLE_EQ(r.outcomes[1].start_s, 5);
}

// A contended random workload on a few mixed nodes.
std::vector<std::string> RandomRows(uint64_t seed, int n) {
  Rng rng(seed);
  std::vector<std::string> rows;
  int64_t t = 0;
  for (int i = 0; i < n; ++i) {
    t += static_cast<int64_t>(rng.Uniform(20));
    const int kind = static_cast<int>(rng.Uniform(4));
    const int num = kind == 0 ? 1 : kind == 1 ? 2 : kind == 2 ? 4 : 1;
    const int milli = kind == 3 ? 100 * (1 + static_cast<int>(rng.Uniform(9))) : 1000;
    rows.push_back("p" + std::to_string(i) + "," + std::to_string(num) + "," +
                   std::to_string(milli) + "," + std::to_string(t) + "," +
                   std::to_string(t + 50 + static_cast<int64_t>(rng.Uniform(500))));
  }
  return rows;
}

cluster::Cluster Mixed() {
  return Nodes(
      "n0,96000,786432,8,V100M16\nn1,96000,786432,8,V100M32\nn2,64000,262144,2,P100\n"
      "n3,96000,786432,4,T4\nn4,96000,786432,8,V100M16\n");
}

TEST(EventSimTest, SameSeedSameResults) {
  const std::vector<std::string> rows = RandomRows(7, 400);
  for (const char* policy : {"fgd", "bestfit", "random"}) {
    EventConfig cfg;
    cfg.policy = policy;
    cfg.seed = 11;
    cfg.max_wait_seconds = 2000;
    EventRun a = Replay(Mixed(), rows, cfg);
    EventRun b = Replay(Mixed(), rows, cfg);
    EXPECT_GT(a.wait_max_s, 0) << policy << ": the workload should contend";
    EXPECT_EQ(a.placed + a.never_placed, 400);
    EXPECT_EQ(FormatEventJson({a}), FormatEventJson({b})) << policy;
    EXPECT_EQ(FormatEventCsv({a}), FormatEventCsv({b})) << policy;
  }
}

// The loop without its shortcuts: after every event time, try every pending pod in arrival
// order. With a deterministic policy and first-node tie-break, failed tries change nothing, so
// the replay's shape skipping and unplaceable probe must give the same start times.
std::vector<double> NaiveStarts(cluster::Cluster cluster, const std::vector<std::string>& rows,
                                const std::string& policy) {
  std::vector<TracePod> pods = Pods(rows, &cluster);
  sched::SchedulerOptions opts;
  opts.tie_break = sched::SchedulerOptions::TieBreak::kFirst;
  std::vector<sched::PodRequest> reqs;
  for (const TracePod& tp : pods) reqs.push_back(tp.pod);
  opts.workload = sched::BuildTargetWorkload(reqs, 0.95);
  auto s = sched::Scheduler::Create(&cluster, *sched::PolicyProfile(policy),
                                    sched::Registry::BuiltIn(), opts);
  EXPECT_TRUE(s.ok());
  std::vector<double> start(pods.size(), -1), end(pods.size(), -1);
  std::vector<size_t> order(pods.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return pods[a].creation_time < pods[b].creation_time;
  });
  std::vector<bool> done(pods.size(), false);
  constexpr double kNever = 1e18;
  for (double now = -1;;) {
    double t = kNever;
    for (size_t i = 0; i < pods.size(); ++i) {
      const double created = static_cast<double>(pods[i].creation_time);
      if (start[i] < 0 && created > now) t = std::min(t, created);
      if (start[i] >= 0 && !done[i]) t = std::min(t, end[i]);
    }
    if (t == kNever) break;
    now = t;
    for (size_t i = 0; i < pods.size(); ++i) {
      if (start[i] >= 0 && !done[i] && end[i] <= now) {
        EXPECT_TRUE((*s)->Remove(pods[i].pod.uid).ok());
        done[i] = true;
      }
    }
    for (size_t i : order) {
      if (start[i] >= 0 || static_cast<double>(pods[i].creation_time) > now) continue;
      if ((*s)->ScheduleOne(pods[i].pod).placed) {
        start[i] = now;
        end[i] = now + static_cast<double>(pods[i].deletion_time - pods[i].creation_time);
      }
    }
  }
  return start;
}

TEST(EventSimTest, MatchesTheLoopWithoutShortcuts) {
  const std::vector<std::string> rows = RandomRows(5, 300);
  for (const char* policy : {"fgd", "bestfit"}) {
    EventConfig cfg;
    cfg.policy = policy;
    cfg.shuffle_nodes = false;
    EventRun r = Replay(Mixed(), rows, cfg);
    std::vector<double> want = NaiveStarts(Mixed(), rows, policy);
    ASSERT_EQ(r.outcomes.size(), want.size());
    int waited = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_DOUBLE_EQ(r.outcomes[i].start_s, want[i]) << policy << " pod " << i;
      waited += r.outcomes[i].wait_s() > 0;
    }
    EXPECT_GT(waited, 10) << policy << ": the workload should contend";
  }
}

TEST(EventSimTest, ReportsNameEveryPolicy) {
  const std::vector<std::string> rows = RandomRows(3, 50);
  EventConfig fgd, best;
  best.policy = "bestfit";
  std::vector<EventRun> runs = {Replay(Mixed(), rows, fgd), Replay(Mixed(), rows, best)};
  const std::string table = FormatEventTable(runs);
  EXPECT_NE(table.find("fgd"), std::string::npos);
  EXPECT_NE(table.find("bestfit"), std::string::npos);
  EXPECT_NE(FormatEventJson(runs).find("\"allocation_curve\""), std::string::npos);
  // Header plus one row per pod and policy.
  const std::string csv = FormatEventCsv(runs);
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 1 + 2 * 50);
}

TEST(EventSimTest, PodFileWithoutTimesIsAnErrorNamingTheFile) {
  cluster::Cluster c = OneNode(1);
  const std::string path = std::string(AICLOUD_SOURCE_DIR) +
                           "/data/traces/alibaba-gpu-v2023/openb_pod_list_multigpu20.csv";
  StatusOr<std::vector<TracePod>> pods = LoadTimedPods(path, &c);
  ASSERT_FALSE(pods.ok());
  EXPECT_EQ(pods.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(pods.status().message().find(path), std::string::npos) << pods.status().message();
  EXPECT_NE(pods.status().message().find("creation_time"), std::string::npos);
}

TEST(EventSimTest, RowWithoutTimesIsAnErrorNamingTheLine) {
  cluster::Cluster c = OneNode(1);
  StatusOr<CsvTable> t = CsvTable::Parse(
      "name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time,deletion_time\n"
      "a,1000,1024,1,1000,0,100\nb,1000,1024,1,1000,,\n",
      "half.csv");
  ASSERT_TRUE(t.ok());
  StatusOr<std::vector<TracePod>> pods = ParseTimedPods(*t, &c);
  ASSERT_FALSE(pods.ok());
  EXPECT_NE(pods.status().message().find("half.csv:3"), std::string::npos)
      << pods.status().message();
}

TEST(EventSimTest, RejectsBadConfigAndUntimedPods) {
  cluster::Cluster c = OneNode(1);
  std::vector<TracePod> pods = Pods({"a,1,1000,0,100"}, &c);
  EventSim sim(c, pods, "tiny");
  EventConfig cfg;
  cfg.time_scale = 0;
  EXPECT_EQ(sim.Run(cfg).status().code(), StatusCode::kInvalidArgument);
  cfg = {};
  cfg.policy = "no-such-policy";
  EXPECT_FALSE(sim.Run(cfg).ok());
  pods[0].creation_time = -1;
  EventSim untimed(c, pods, "tiny");
  StatusOr<EventRun> r = untimed.Run({});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("pod a"), std::string::npos);
}

TEST(EventSimTest, RejectsTimesAndSamplingThatWouldOverflowOrExplode) {
  cluster::Cluster c = OneNode(1);
  std::vector<TracePod> pods = Pods({"a,1,1000,0,100"}, &c);
  pods[0].creation_time = int64_t{1} << 39;
  pods[0].deletion_time = (int64_t{1} << 39) + 10;
  EventSim far(c, pods, "tiny");
  EventConfig cfg;
  cfg.time_scale = 1000;  // 2^39 s x 1000 would overflow microseconds
  StatusOr<EventRun> r = far.Run(cfg);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("time out of range"), std::string::npos);
  cfg = {};
  cfg.sample_every_seconds = 1;  // 2^39 s of trace at 1 s would be 5e11 samples
  r = far.Run(cfg);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("more than a million points"), std::string::npos);
  cfg = {};
  cfg.sample_every_seconds = 1e-6;
  EXPECT_FALSE(far.Run(cfg).ok());
  cfg = {};
  cfg.max_wait_seconds = 1e300;
  EXPECT_FALSE(far.Run(cfg).ok());
}

}  // namespace
}  // namespace aicloud::sim
