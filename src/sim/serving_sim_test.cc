#include "sim/serving_sim.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace aicloud::sim {
namespace {

// A trickle of one `prompt`-token request every `every_s` for `seconds`, plus a burst of `n`
// such requests `spacing_s` apart at each of `bursts`; sorted by arrival.
ServingTrace TrickleAndBursts(int prompt, double seconds, double every_s, const std::vector<double>& bursts, int n,
                              double spacing_s) {
  ServingTrace t;
  t.name = "bursts";
  for (double s = 0; s < seconds; s += every_s) t.requests.push_back({.arrival_s = s, .prompt_tokens = prompt, .output_tokens = 1});
  for (double b : bursts) {
    for (int i = 0; i < n; ++i) t.requests.push_back({.arrival_s = b + i * spacing_s, .prompt_tokens = prompt, .output_tokens = 1});
  }
  std::sort(t.requests.begin(), t.requests.end(),
            [](const ServingRequest& a, const ServingRequest& b) { return a.arrival_s < b.arrival_s; });
  return t;
}

ServingTrace Steady(double rps, double seconds, int prompt, int output) {
  ServingTrace t;
  t.name = "steady";
  for (double s = 0; s < seconds; s += 1 / rps) t.requests.push_back({s, prompt, output, {}});
  return t;
}

TEST(ReplicaModelTest, MatchesTheEngineCalibration) {
  ReplicaModel m;
  m.speedup = 1;
  // bench/RESULTS.md section 6: pp512 ~520 t/s, tg ~70 t/s single stream, ~350 t/s at 32.
  EXPECT_NEAR(512 / m.StepSeconds(0, 512), 520, 15);
  EXPECT_NEAR(1 / m.StepSeconds(1, 0), 70, 1);
  EXPECT_NEAR(32 / m.StepSeconds(32, 0), 350, 5);
  m.speedup = 4;
  EXPECT_NEAR(1 / m.StepSeconds(1, 0), 280, 4);
}

TEST(SimReplicaTest, UnloadedLatencyIsPrefillThenOneStepPerToken) {
  ServingTrace t;
  t.requests.push_back({0, 1000, 11, {}});
  ReplicaModel m;
  m.speedup = 1;
  m.prefill_chunk_tokens = 4096;
  std::vector<RequestOutcome> out(1);
  SimReplica r(m, t, &out, nullptr, "r0", 0);
  r.Enqueue(0, 0);
  while (r.next_event_s() < 1e18) r.CompleteStep();
  EXPECT_NEAR(out[0].first_token_s, m.StepSeconds(0, 1000), 1e-9);
  EXPECT_NEAR(out[0].finish_s - out[0].first_token_s, 10 * m.StepSeconds(1, 0), 1e-9);
  EXPECT_TRUE(r.empty());
  EXPECT_DOUBLE_EQ(r.kv_usage(), 0);
}

// A 20,000-token prompt, then a 100-token one: in arrival order the short one waits for the whole
// long prefill; shortest-first prefills it in the next step; and with max_overtake_s passed the
// long one goes first again.
TEST(SimReplicaTest, PrefillOrder) {
  ServingTrace t;
  t.requests.push_back({0, 20000, 1, {}});
  t.requests.push_back({0.001, 100, 1, {}});
  struct Case {
    PrefillOrder order;
    double max_overtake_s;
    bool short_first;
  };
  for (Case c : {Case{PrefillOrder::kFcfs, 60, false}, Case{PrefillOrder::kShortestFirst, 60, true},
                 Case{PrefillOrder::kShortestFirst, 0.0005, false}}) {
    ReplicaModel m;
    m.prefill_order = c.order;
    m.max_overtake_s = c.max_overtake_s;
    std::vector<RequestOutcome> out(2);
    SimReplica r(m, t, &out, nullptr, "r0", 0);
    r.Enqueue(0, 0);
    r.Enqueue(1, 0.001);
    while (r.next_event_s() < 1e18) r.CompleteStep();
    ASSERT_GT(out[0].first_token_s, 0);
    ASSERT_GT(out[1].first_token_s, 0);
    EXPECT_EQ(out[1].first_token_s < out[0].first_token_s, c.short_first)
        << "order " << static_cast<int>(c.order) << ", max overtake " << c.max_overtake_s;
    if (c.short_first) {
      // The first step (2,048 tokens of the long one) was under way; the short one is in the next.
      EXPECT_NEAR(out[1].first_token_s, m.StepSeconds(0, 2048) * 2, 1e-9);
    }
  }
}

TEST(SimReplicaTest, PrefixCacheSkipsCachedBlocks) {
  ServingTrace t;
  t.block_tokens = 512;
  t.requests.push_back({0, 1024, 1, {1, 2}});
  t.requests.push_back({10, 1100, 1, {1, 2, 3}});
  ReplicaModel m;
  std::vector<RequestOutcome> out(2);
  fleet::PrefixIndex cache(100, 1 << 30);
  SimReplica r(m, t, &out, &cache, "r0", 0);
  r.Enqueue(0, 0);
  while (r.next_event_s() < 1e18) r.CompleteStep();
  r.Enqueue(1, 10);
  while (r.next_event_s() < 1e18) r.CompleteStep();
  EXPECT_EQ(out[0].cached_tokens, 0);
  EXPECT_EQ(out[1].cached_tokens, 1024);
  EXPECT_NEAR(out[1].first_token_s - 10, m.StepSeconds(0, 76), 1e-9);
}

TEST(ServingSimTest, StaticEnoughReplicasMeetTheSlo) {
  const ServingTrace t = Steady(4, 600, 500, 50);
  ServingConfig c;
  c.policy = "static";
  c.static_replicas = 4;
  c.slo.ttft_p99_ms = 2000;
  StatusOr<ServingRun> run = RunServing(t, c);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->completed, run->requests);
  EXPECT_DOUBLE_EQ(run->slo_attainment, 1.0);
  EXPECT_NEAR(run->gpu_hours, 4 * run->span_s / 3600, 1e-6);
  EXPECT_EQ(run->oscillations, 0);
}

TEST(ServingSimTest, TooFewReplicasMissTheSlo) {
  const ServingTrace t = Steady(20, 300, 2000, 50);
  ServingConfig c;
  c.policy = "static";
  c.static_replicas = 1;
  c.slo.ttft_p99_ms = 2000;
  StatusOr<ServingRun> run = RunServing(t, c);
  ASSERT_TRUE(run.ok());
  EXPECT_LT(run->slo_attainment, 0.2);
}

TEST(ServingSimTest, AutoscalersFollowAStepInLoad) {
  // 10 minutes quiet, 20 minutes at 6x, 10 minutes quiet.
  ServingTrace t;
  t.name = "step";
  for (double s = 0; s < 2400; s += (s >= 600 && s < 1800) ? 1.0 / 12 : 0.5) t.requests.push_back({s, 600, 60, {}});
  for (const char* policy : {"hpa", "kpa", "aibrix", "ours"}) {
    ServingConfig c;
    c.policy = policy;
    c.slo.ttft_p99_ms = 2000;
    StatusOr<ServingRun> run = RunServing(t, c);
    ASSERT_TRUE(run.ok()) << policy << ": " << run.status();
    int before = 0, during = 0, after = 0;
    for (const TimelinePoint& p : run->timeline) {
      if (p.t_s > 500 && p.t_s < 600) before = std::max(before, p.gpus);
      if (p.t_s > 1500 && p.t_s < 1800) during = std::max(during, p.gpus);
      if (p.t_s > 2350) after = p.gpus;
    }
    EXPECT_GT(during, before) << policy;
    EXPECT_LT(after, during) << policy;
    EXPECT_GT(run->slo_attainment, 0.5) << policy;
  }
}

TEST(ServingSimTest, RepeatsExactly) {
  const ServingTrace t = Steady(3, 300, 800, 40);
  ServingConfig c;
  c.policy = "ours";
  c.history_days = 2;
  StatusOr<ServingRun> a = RunServing(t, c);
  StatusOr<ServingRun> b = RunServing(t, c);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(FormatServingJson({*a}), FormatServingJson({*b}));
}

TEST(ServingSimTest, StaticBaselineFindsTheSmallestCount) {
  const ServingTrace t = Steady(4, 300, 1000, 20);
  ServingConfig c;
  c.slo.ttft_p99_ms = 1500;
  StatusOr<ServingRun> best = RunStaticBaseline(t, c, 0.99, 32);
  ASSERT_TRUE(best.ok()) << best.status();
  EXPECT_GE(best->slo_attainment, 0.99);
  c.policy = "static";
  c.static_replicas = best->static_replicas - 1;
  if (c.static_replicas >= 1) {
    StatusOr<ServingRun> fewer = RunServing(t, c);
    ASSERT_TRUE(fewer.ok());
    EXPECT_LT(fewer->slo_attainment, 0.99);
  }
  c.slo.ttft_p99_ms = 1;  // impossible
  EXPECT_EQ(RunStaticBaseline(t, c, 0.99, 4).status().code(), StatusCode::kFailedPrecondition);
}

TEST(ServingSimTest, PeakProvisioningSizesForTheBusiestMinute) {
  ReplicaModel m;
  const fleet::ReplicaCapacity cap = m.Capacity();
  // Each request is ~1 s of one replica's work: prompt_tokens = prefill capacity, no output.
  const int prompt = static_cast<int>(cap.prefill_tokens_per_s);  // a hair under 1 s
  ServingTrace t;
  for (int i = 0; i < 600; ++i) t.requests.push_back({.arrival_s = i * 1.0, .prompt_tokens = prompt});  // 1 per s
  for (int i = 0; i < 120; ++i) t.requests.push_back({.arrival_s = 300 + i * 0.5, .prompt_tokens = prompt});  // +2 per s for a minute
  std::sort(t.requests.begin(), t.requests.end(),
            [](const ServingRequest& a, const ServingRequest& b) { return a.arrival_s < b.arrival_s; });
  // Busiest minute: 60 + 120 replica-seconds = 3 replicas busy; at 70% -> ceil(4.29) = 5.
  EXPECT_EQ(PeakProvisionedReplicas(t, m, 60, 0.7), 5);
  EXPECT_EQ(PeakProvisionedReplicas(t, m, 60, 1.0), 3);
  EXPECT_EQ(PeakProvisionedReplicas(ServingTrace{}, m), 0);
}

TEST(ServingSimTest, SloTimescalePeakProvisioningSeesABurstTheMinuteDilutes) {
  ReplicaModel m;
  const fleet::ReplicaCapacity cap = m.Capacity();
  const int prompt = static_cast<int>(cap.prefill_tokens_per_s);  // a hair under 1 s of work
  ServingTrace t;
  t.name = "burst";
  for (int i = 0; i < 600; ++i) t.requests.push_back({.arrival_s = i * 1.0, .prompt_tokens = prompt, .output_tokens = 1});
  for (int i = 0; i < 100; ++i) {  // +10 per s for 10 s
    t.requests.push_back({.arrival_s = 300 + i * 0.1, .prompt_tokens = prompt, .output_tokens = 1});
  }
  std::sort(t.requests.begin(), t.requests.end(),
            [](const ServingRequest& a, const ServingRequest& b) { return a.arrival_s < b.arrival_s; });
  // Busiest minute: 60 + 100 replica-seconds -> 3 replicas at 100%. At the SLO's timescale: the
  // 110 requests of [300, 309.9] served within 9.9 + 5 s -> 7.4 -> 8 replicas; at 70%, 11.
  EXPECT_EQ(PeakProvisionedReplicas(t, m, 60, 1.0), 3);
  EXPECT_EQ(SloPeakProvisionedReplicas(t, m, 5, 1.0), 8);
  EXPECT_EQ(SloPeakProvisionedReplicas(t, m, 5, 0.7), 11);
  EXPECT_EQ(SloPeakProvisionedReplicas(ServingTrace{}, m, 5), 0);
  EXPECT_EQ(SloPeakProvisionedReplicas(t, m, 0), 0);
  // Replayed: the minute's count misses the burst's SLO, the SLO-timescale count meets it.
  ServingConfig c;
  c.policy = "static";
  c.slo.ttft_p99_ms = 5000;
  c.static_replicas = 3;
  StatusOr<ServingRun> minute = RunServing(t, c);
  c.static_replicas = SloPeakProvisionedReplicas(t, m, 5, 1.0);
  StatusOr<ServingRun> slo = RunServing(t, c);
  ASSERT_TRUE(minute.ok() && slo.ok());
  EXPECT_LT(minute->slo_attainment, 0.95);
  EXPECT_GE(slo->slo_attainment, 0.99);
}

TEST(ServingSimTest, ArrivalCurveSizingHoldsTheSloThroughBursts) {
  // Light load with a 10-second burst every 150 s (6 replicas of work while it lasts), far
  // shorter than a replica's lead time: the 30 s mean sees a third of it.
  ReplicaModel m;
  const int prompt = static_cast<int>(m.Capacity().prefill_tokens_per_s / 2);  // half a second
  std::vector<double> every_150_s;
  for (double b = 150; b < 1800; b += 150) every_150_s.push_back(b);
  const ServingTrace t = TrickleAndBursts(prompt, 1800, 1, every_150_s, 120, 1 / 12.0);
  ServingConfig c;
  c.policy = "ours";
  c.slo.ttft_p99_ms = 5000;
  StatusOr<ServingRun> with = RunServing(t, c);
  c.arrival_curve = false;
  StatusOr<ServingRun> without = RunServing(t, c);
  ASSERT_TRUE(with.ok() && without.ok());
  EXPECT_GT(with->slo_attainment, without->slo_attainment + 0.02)
      << with->slo_attainment << " vs " << without->slo_attainment;
  EXPECT_GE(with->slo_attainment, 0.9);
}

// An hour with three 10-second bursts (100 replica-seconds of prefill each) over a trickle (one
// request every 8 s, so each burst is a run of its own). A reacting fleet meets them with the one
// or two replicas the trickle needs. With three earlier days in which each burst came within 2
// minutes of its time, the forecaster has the fleet ready one provisioning lead ahead — for the
// burst at 150 s, before a new node could be up (190 s), by starting with it; with days that
// moved every request on its own, the history has no burst to learn.
TEST(ServingSimTest, BurstsLearnedFromHistoryAreMetByAFleetStartedBeforeThem) {
  ReplicaModel m;
  const int prompt = static_cast<int>(m.Capacity().prefill_tokens_per_s / 2);  // half a second
  ServingTrace t = TrickleAndBursts(prompt, 3600, 8, {150, 1800, 3000}, 200, 1 / 20.0);
  ServingConfig c;
  c.policy = "ours";
  c.slo.ttft_p99_ms = 5000;
  c.burst_hold_s = 0;  // no hold between bursts: each must be met on its own
  StatusOr<ServingRun> none = RunServing(t, c);
  c.history_days = 3;
  StatusOr<ServingRun> learned = RunServing(t, c);
  c.initial_replicas = 1;  // a count set by the caller stands: the first burst finds one replica
  StatusOr<ServingRun> one_at_start = RunServing(t, c);
  c.initial_replicas = 0;
  c.history_burst_gap_s = 0;
  StatusOr<ServingRun> smeared = RunServing(t, c);
  ASSERT_TRUE(none.ok() && learned.ok() && one_at_start.ok() && smeared.ok());
  EXPECT_GE(learned->slo_attainment, 0.99) << learned->slo_attainment;
  EXPECT_LT(none->slo_attainment, 0.9) << none->slo_attainment;
  EXPECT_LT(smeared->slo_attainment, 0.9) << smeared->slo_attainment;
  // The first burst's 200 requests of 708 are missed, the other two met.
  EXPECT_LT(one_at_start->slo_attainment, learned->slo_attainment - 0.1) << one_at_start->slo_attainment;
  EXPECT_GT(one_at_start->slo_attainment, none->slo_attainment) << one_at_start->slo_attainment;
  // Ready for the bursts, not for the hour: fewer GPU-hours than holding the burst fleet throughout.
  EXPECT_LT(learned->gpu_hours, 0.7 * learned->peak_gpus * t.span_s() / 3600)
      << learned->gpu_hours << " GPU-h, peak " << learned->peak_gpus;
  // History from another trace: the bursts it learned do not come to a day of trickle, and the
  // replicas pre-warmed for them cost GPU-hours for nothing.
  ServingTrace trickle;
  trickle.name = "trickle";
  for (const ServingRequest& r : t.requests) {
    if (std::fmod(r.arrival_s, 8) == 0) trickle.requests.push_back(r);
  }
  ServingConfig other = c;
  other.history_burst_gap_s = 5;
  other.history_trace = &t;
  StatusOr<ServingRun> misled = RunServing(trickle, other);
  other.history_days = 0;
  other.history_trace = nullptr;
  StatusOr<ServingRun> plain = RunServing(trickle, other);
  ASSERT_TRUE(misled.ok() && plain.ok());
  EXPECT_GT(misled->gpu_hours, 2 * plain->gpu_hours) << misled->gpu_hours << " vs " << plain->gpu_hours;
  EXPECT_GE(plain->slo_attainment, 0.99);
  // Arrivals before 0 s have no place in a day of history.
  ServingTrace early = t;
  early.requests.front().arrival_s = -5;
  const Status negative = RunServing(early, c).status();
  EXPECT_EQ(negative.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(negative.message().find("at 0 s or later"), std::string::npos) << negative.message();
  // A day of history longer than its period would fold onto itself.
  t.requests.push_back({.arrival_s = 3700, .prompt_tokens = prompt, .output_tokens = 1});
  const Status folded = RunServing(t, c).status();
  EXPECT_EQ(folded.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(folded.message().find("3600 s period"), std::string::npos) << folded.message();
}

// Each burst moves as one (its requests keep their spacing), bursts move independently, and what
// moves past either end of the period comes back at the other instead of piling up there.
TEST(ResampledDayTest, MovesBurstsWholeAndWrapsAroundThePeriod) {
  // Four bursts of 50 requests 0.1 s apart, told apart by their prompt length.
  const double starts[] = {5, 1000, 2000, 3590};
  ServingTrace t;
  for (int b = 0; b < 4; ++b) {
    for (int i = 0; i < 50; ++i) t.requests.push_back({.arrival_s = starts[b] + i * 0.1, .prompt_tokens = b, .output_tokens = 1});
  }
  int kept = 0, wrapped_forward = 0, wrapped_back = 0, independent = 0;
  std::vector<double> shifts_of_1000;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    Rng rng(seed);
    const ServingTrace day = ResampledDay(t, 3600, /*burst_gap_s=*/5, rng);
    kept += static_cast<int>(day.requests.size());
    ASSERT_TRUE(std::is_sorted(day.requests.begin(), day.requests.end(),
                               [](const ServingRequest& a, const ServingRequest& b) { return a.arrival_s < b.arrival_s; }));
    double shift[4];
    bool seen[4] = {false, false, false, false};
    for (const ServingRequest& r : day.requests) {
      ASSERT_GE(r.arrival_s, 0);
      ASSERT_LT(r.arrival_s, 3600);
      const int b = r.prompt_tokens;
      // This request's move plus its offset in the burst (i x 0.1 s), unwrapped.
      double d = r.arrival_s - starts[b];
      if (d >= 1800) d -= 3600;
      if (d < -1800) d += 3600;
      if (!seen[b]) {
        shift[b] = d;  // the first kept request's offset: shift + i0 * 0.1
        seen[b] = true;
      }
      // Every request of a burst: the same shift, so offsets differ by under 5 s.
      ASSERT_LT(std::abs(d - shift[b]), 5.0) << "seed " << seed << ", burst " << b << " was split";
      ASSERT_GE(d, -120 - 1e-9);
      ASSERT_LT(d, 120 + 5);
      if (b == 3 && r.arrival_s < 200) ++wrapped_forward;
      if (b == 0 && r.arrival_s > 3400) ++wrapped_back;
    }
    if (seen[1]) shifts_of_1000.push_back(shift[1]);
    if (seen[1] && seen[2] && std::abs(shift[1] - shift[2]) > 5) ++independent;
  }
  EXPECT_GT(independent, 30) << "bursts of one day move independently";
  EXPECT_NEAR(kept / (40.0 * 200), 0.9, 0.03);
  EXPECT_GT(wrapped_forward, 0) << "the burst moved past the end comes back at the start";
  EXPECT_GT(wrapped_back, 0) << "the burst moved before the start comes back at the end";
  std::sort(shifts_of_1000.begin(), shifts_of_1000.end());
  EXPECT_GT(shifts_of_1000.back() - shifts_of_1000.front(), 120) << "different days move a burst differently";
  // With burst_gap_s = 0 each request moves alone: the burst at 1000 s spreads over minutes.
  Rng rng(7);
  const ServingTrace alone = ResampledDay(t, 3600, 0, rng);
  double lo = 3600, hi = 0;
  for (const ServingRequest& r : alone.requests) {
    if (r.prompt_tokens == 1) lo = std::min(lo, r.arrival_s), hi = std::max(hi, r.arrival_s);
  }
  EXPECT_GT(hi - lo, 120);
}

TEST(ServingSimTest, BadConfig) {
  const ServingTrace t = Steady(1, 10, 10, 10);
  ServingConfig c;
  c.policy = "vpa";
  EXPECT_EQ(RunServing(t, c).status().code(), StatusCode::kInvalidArgument);
  c.policy = "static";
  c.router = "random";
  EXPECT_EQ(RunServing(t, c).status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(RunServing(ServingTrace{}, ServingConfig{}).ok());
  c = ServingConfig{};
  c.tick_s = 0;
  EXPECT_EQ(RunServing(t, c).status().code(), StatusCode::kInvalidArgument);
}

// "ours" decides every tick_s: with replicas that are ready the moment they are asked for, a
// shorter tick grows the fleet sooner after a step in load.
TEST(ServingSimTest, OursDecidesEveryTick) {
  ServingTrace t;
  t.name = "step";
  for (double s = 0; s < 1200; s += (s >= 600) ? 1.0 / 12 : 0.5) t.requests.push_back({s, 600, 60, {}});
  auto first_rise = [&](double tick_s) {
    ServingConfig c;
    c.policy = "ours";
    c.slo.ttft_p99_ms = 2000;
    c.tick_s = tick_s;
    c.provision_delay_s = 0;
    c.warm_pool = 0;
    c.model.cold_start_s = 0;
    c.sample_every_s = 1;
    StatusOr<ServingRun> run = RunServing(t, c);
    EXPECT_TRUE(run.ok()) << run.status();
    if (!run.ok()) return -1.0;
    int before = 0;
    for (const TimelinePoint& p : run->timeline) {
      if (p.t_s < 600) before = std::max(before, p.gpus);
      if (p.t_s >= 600 && p.gpus > before) return p.t_s;
    }
    return -1.0;
  };
  const double fast = first_rise(1), slow = first_rise(60);
  ASSERT_GT(fast, 0);
  ASSERT_GT(slow, 0);
  EXPECT_LT(fast, slow);
  EXPECT_LE(fast, 600 + 5);  // within a few of its 1 s ticks (the 30 s load window still sees it)
}

TEST(ServingSimTest, PrefixRoutingRaisesHitsOverRoundRobin) {
  // 7 conversations (so round-robin does not line them up with the 4 replicas by chance), each
  // re-sending its growing history; turns interleaved.
  ServingTrace t;
  t.block_tokens = 512;
  t.name = "chat";
  double now = 0;
  for (int turn = 1; turn <= 6; ++turn) {
    for (uint64_t conv = 0; conv < 7; ++conv) {
      ServingRequest r{now, 512 * (turn + 2), 20, {}};
      for (int b = 0; b < turn + 2; ++b) r.block_hashes.push_back(conv * 1000 + static_cast<uint64_t>(b));
      t.requests.push_back(r);
      now += 0.7;
    }
  }
  ServingConfig c;
  c.policy = "static";
  c.static_replicas = 4;
  c.router = "round-robin";
  StatusOr<ServingRun> rr = RunServing(t, c);
  c.router = "prefix";
  StatusOr<ServingRun> prefix = RunServing(t, c);
  ASSERT_TRUE(rr.ok() && prefix.ok());
  EXPECT_GT(prefix->prefix_hit_rate, rr->prefix_hit_rate + 0.2);
  EXPECT_LT(prefix->ttft_mean_ms, rr->ttft_mean_ms);
}

}  // namespace
}  // namespace aicloud::sim
