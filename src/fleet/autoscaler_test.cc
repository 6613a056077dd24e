#include "fleet/autoscaler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "fleet/hpa.h"
#include "fleet/kpa.h"
#include "fleet/slo_autoscaler.h"

namespace aicloud::fleet {
namespace {

// `ready` replicas sharing `in_flight` requests evenly (running), capacity 10 per replica, so the
// concurrency target is 7 per replica.
DeploymentSnapshot Snap(double now, int ready, double in_flight, int starting = 0, int current = -1) {
  DeploymentSnapshot s;
  s.now_s = now;
  s.capacity.max_concurrency = 10;
  s.starting_replicas = starting;
  s.current_replicas = current >= 0 ? current : ready + starting;
  int left = static_cast<int>(std::lround(in_flight));
  for (int i = 0; i < ready; ++i) {
    ReplicaMetrics m;
    m.id = "r" + std::to_string(i);
    m.running = left / (ready - i);
    left -= m.running;
    s.replicas.push_back(m);
  }
  if (ready == 0) s.pending_requests = left;
  return s;
}

TEST(HpaTest, ToleranceBandHoldsAndOutsideScales) {
  struct Case {
    const char* name;
    double in_flight;  // over 10 ready replicas, target 7 each (70 total)
    int want;
  };
  const Case cases[] = {
      {"ratio 1.00", 70, 10},
      {"ratio 1.09 inside +10%", 76, 10},
      {"ratio 0.91 inside -10%", 64, 10},
      {"ratio 1.20 scales up", 84, 12},
      {"ratio 2.00 doubles", 140, 20},
      {"ratio 3.00 capped at +100% per sync", 210, 20},
  };
  for (const Case& c : cases) {
    HpaAutoscaler hpa({});
    ScaleDecision d = hpa.Recommend(Snap(0, 10, c.in_flight));
    EXPECT_EQ(d.desired, c.want) << c.name << ": " << d.reason;
  }
}

TEST(HpaTest, StartingReplicasCountAsIdleOnTheWayUp) {
  HpaAutoscaler hpa({});
  // 2 ready at ratio 1.5, but 2 more are starting: over all 4 the ratio is 0.75.
  ScaleDecision d = hpa.Recommend(Snap(0, 2, 21, /*starting=*/2));
  EXPECT_EQ(d.desired, 4) << d.reason;
}

TEST(HpaTest, StabilizationWindowPreventsFlapping) {
  HpaAutoscaler hpa({});
  OscillationCounter osc;
  int replicas = 10;
  // Load alternates between high and low every sync for 10 minutes.
  for (int k = 0; k < 40; ++k) {
    const double t = 15.0 * k;
    const double in_flight = (k % 2 == 0) ? 70 : 20;
    ScaleDecision d = hpa.Recommend(Snap(t, replicas, in_flight));
    replicas = d.desired;
    osc.Observe(d.desired);
    EXPECT_EQ(d.desired, 10) << "t=" << t << ": " << d.reason;
  }
  EXPECT_EQ(osc.direction_changes(), 0);
  // Once the load stays low for the whole window, it scales down.
  int last = replicas;
  for (int k = 40; k < 70; ++k) {
    ScaleDecision d = hpa.Recommend(Snap(15.0 * k, replicas, 14));
    replicas = d.desired;
    // The last high recommendation was at t = 570; it leaves the 300 s window at 870.
    if (15.0 * k < 870) {
      EXPECT_EQ(d.desired, 10) << "t=" << 15.0 * k << ": " << d.reason;
    }
    last = d.desired;
  }
  EXPECT_EQ(last, 2);
}

TEST(HpaTest, KeepsDecisionBetweenSyncs) {
  HpaAutoscaler hpa({});
  EXPECT_EQ(hpa.Recommend(Snap(0, 4, 28)).desired, 4);
  // 5 s later the load doubled, but the next sync is at 15 s.
  EXPECT_EQ(hpa.Recommend(Snap(5, 4, 56)).desired, 4);
  EXPECT_EQ(hpa.Recommend(Snap(15, 4, 56)).desired, 8);
}

TEST(KpaTest, EntersPanicOnBurstAndLeavesAfterStableWindow) {
  KpaAutoscaler kpa(KpaConfig::Knative());
  int replicas = 5;
  double t = 0;
  for (; t < 60; t += 2) replicas = kpa.Recommend(Snap(t, replicas, 35)).desired;
  EXPECT_EQ(replicas, 5);
  EXPECT_FALSE(kpa.in_panic());
  // A burst: 4x the target over the panic window.
  ScaleDecision d;
  for (int i = 0; i < 4; ++i, t += 2) d = kpa.Recommend(Snap(t, 5, 140));
  EXPECT_TRUE(d.panic) << d.reason;
  EXPECT_GE(d.desired, 10) << d.reason;
  const int panic_max = d.desired;
  const double last_over = t - 2;
  // The burst ends; in panic the count does not go down.
  for (; t < last_over + 58; t += 2) {
    d = kpa.Recommend(Snap(t, panic_max, 7));
    EXPECT_TRUE(d.panic) << "t=" << t;
    EXPECT_EQ(d.desired, panic_max) << "t=" << t << ": " << d.reason;
  }
  // One stable window after the last tick over the threshold, panic ends and it scales down.
  for (; t < last_over + 64; t += 2) d = kpa.Recommend(Snap(t, panic_max, 7));
  EXPECT_FALSE(d.panic) << d.reason;
  EXPECT_LT(d.desired, panic_max);
}

TEST(KpaTest, ScalesToZeroAfterIdleAndBackOnARequest) {
  KpaAutoscaler kpa(KpaConfig::Knative());
  ScaleDecision d = kpa.Recommend(Snap(0, 1, 3));
  EXPECT_EQ(d.desired, 1);
  // Idle: stays at one until the stable window (60 s) plus the grace (30 s) have passed.
  for (double t = 2; t < 90; t += 2) {
    d = kpa.Recommend(Snap(t, 1, 0));
    EXPECT_EQ(d.desired, 1) << "t=" << t;
  }
  d = kpa.Recommend(Snap(92, 1, 0));
  EXPECT_EQ(d.desired, 0) << d.reason;
  // At zero, a request held at the gateway wakes it.
  d = kpa.Recommend(Snap(200, 0, 0, 0, 0));
  EXPECT_EQ(d.desired, 0);
  d = kpa.Recommend(Snap(202, 0, 1, 0, 0));
  EXPECT_EQ(d.desired, 1) << d.reason;
}

TEST(KpaTest, AibrixToleranceAndRateLimits) {
  struct Case {
    const char* name;
    int ready;
    double in_flight;
    int want;
  };
  const Case cases[] = {
      {"inside +10% band", 10, 75, 10},
      {"above band", 10, 84, 12},
      {"burst capped at 2x", 2, 200, 4},
  };
  for (const Case& c : cases) {
    KpaAutoscaler kpa(KpaConfig::Aibrix());
    ScaleDecision d = kpa.Recommend(Snap(0, c.ready, c.in_flight));
    EXPECT_EQ(d.desired, c.want) << c.name << ": " << d.reason;
  }
  // Scale-down cooldown: a drop is held for 300 s.
  KpaAutoscaler kpa(KpaConfig::Aibrix());
  int replicas = kpa.Recommend(Snap(0, 10, 70)).desired;
  for (double t = 2; t < 290; t += 2) {
    replicas = kpa.Recommend(Snap(t, replicas, 7)).desired;
    ASSERT_EQ(replicas, 10) << "t=" << t;
  }
  for (double t = 290; t < 400; t += 2) replicas = kpa.Recommend(Snap(t, replicas, 7)).desired;
  EXPECT_LT(replicas, 10);
  // AIBrix does not scale to zero by default.
  EXPECT_GE(replicas, 1);
}

SloAutoscalerConfig OursConfig() {
  SloAutoscalerConfig c;
  c.bounds = {0, 50};
  c.forecast.trend_window_s = 0;
  return c;
}

TEST(SloAutoscalerTest, ScalesToZeroAfterIdleAndWakesOnARequest) {
  SloAutoscaler ours(OursConfig());
  int replicas = ours.Recommend(Snap(0, 2, 4)).desired;
  EXPECT_GE(replicas, 1);
  for (double t = 5; t < 300; t += 5) {
    replicas = ours.Recommend(Snap(t, replicas, 0)).desired;
    ASSERT_GE(replicas, 1) << "t=" << t;
  }
  replicas = ours.Recommend(Snap(305, replicas, 0)).desired;
  EXPECT_EQ(replicas, 0);
  EXPECT_EQ(ours.Recommend(Snap(310, 0, 0, 0, 0)).desired, 0);
  ScaleDecision d = ours.Recommend(Snap(315, 0, 2, 0, 0));
  EXPECT_EQ(d.desired, 1) << d.reason;
}

TEST(SloAutoscalerTest, ADeploymentFoundAtZeroStaysThereUntilARequest) {
  // A controller (re)started beside a scale-to-zero deployment with no replicas and no requests.
  SloAutoscaler ours(OursConfig());
  for (double t = 0; t < 60; t += 5) {
    ScaleDecision d = ours.Recommend(Snap(t, 0, 0, 0, 0));
    ASSERT_EQ(d.desired, 0) << "t=" << t << ": " << d.reason;
  }
  ScaleDecision d = ours.Recommend(Snap(60, 0, 1, 0, 0));  // a request held at the gateway
  EXPECT_EQ(d.desired, 1) << d.reason;
  // Found running instead: it counts as just active and keeps a replica through the idle period.
  SloAutoscaler warm(OursConfig());
  EXPECT_EQ(warm.Recommend(Snap(0, 1, 0)).desired, 1);
  EXPECT_EQ(warm.Recommend(Snap(250, 1, 0)).desired, 1);
}

TEST(SloAutoscalerTest, SaturationSignalsScaleUp) {
  struct Case {
    const char* name;
    int waiting_per_replica;
    double kv;
    double ttft_ms;
    int want_at_least;
  };
  const Case cases[] = {
      {"calm", 0, 0.3, 500, 0},
      {"queue over 5 per replica", 8, 0.3, 500, 6},
      {"KV over 0.8", 0, 0.9, 500, 6},
      {"TTFT p99 over 80% of the SLO with a queue", 1, 0.3, 1700, 6},
      {"a long prompt's TTFT without a queue", 0, 0.3, 1700, 0},
  };
  for (const Case& c : cases) {
    SloAutoscaler ours(OursConfig());
    DeploymentSnapshot s = Snap(0, 4, 8);
    s.slo.ttft_p99_ms = 2000;
    for (ReplicaMetrics& r : s.replicas) {
      r.waiting = c.waiting_per_replica;
      r.kv_usage = c.kv;
      r.ttft_p99_ms = c.ttft_ms;
    }
    ScaleDecision d = ours.Recommend(s);
    if (c.want_at_least == 0) {
      EXPECT_LE(d.desired, 4) << c.name << ": " << d.reason;
    } else {
      EXPECT_GE(d.desired, c.want_at_least) << c.name << ": " << d.reason;
    }
  }
}

TEST(SloAutoscalerTest, PressureDoesNotCompoundWhileReplicasStart) {
  SloAutoscaler ours(OursConfig());
  DeploymentSnapshot s = Snap(0, 4, 8, /*starting=*/1);
  s.capacity = {10, 1000, 1000};
  for (ReplicaMetrics& r : s.replicas) r.waiting = 10;
  // Without the replica still starting, the queue would ask for 4 + 2 = 6.
  EXPECT_LE(ours.Recommend(s).desired, 5);
  SloAutoscaler fresh(OursConfig());
  s.starting_replicas = 0;
  s.current_replicas = 4;
  EXPECT_EQ(fresh.Recommend(s).desired, 6);
}

TEST(SloAutoscalerTest, CapacityModelSizesFromTokenRates) {
  SloAutoscaler ours(OursConfig());
  DeploymentSnapshot s = Snap(0, 2, 4);
  s.capacity = {32, 1000, 500};
  s.prompt_tokens_per_s = 3500;  // 3.5 replicas of prefill
  s.replicas[0].tokens_per_s = 350;  // 0.7 replicas of decode together
  s.replicas[1].tokens_per_s = 0;
  // (3.5 + 0.7) / 0.7 = 6.
  EXPECT_EQ(ours.Recommend(s).desired, 6);
}

TEST(SloAutoscalerTest, ArrivalCurveSizesABurstAtTheSloTimescale) {
  // Quiet, then 10 s carrying 30 replicas of prefill (30,000 prompt tokens/s over (55, 65]);
  // the snapshots' 10 s counters read 15,000 at 60 and 30,000 at 65. The 30 s mean at 65 is 7.5
  // replicas (-> 11 at 70%); served within 10 s + the 5 s SLO the burst needs 300 / 15 = 20
  // replicas (-> 29 at 70%).
  for (bool curve : {true, false}) {
    SloAutoscalerConfig c = OursConfig();
    c.predictive = false;
    c.arrival_curve = curve;
    SloAutoscaler ours(c);
    auto at = [&](double t, double prompt_tps) {
      DeploymentSnapshot s = Snap(t, 4, 0);
      s.capacity = {32, 1000, 1000};
      s.slo.ttft_p99_ms = 5000;
      s.prompt_tokens_per_s = prompt_tps;
      return ours.Recommend(s);
    };
    for (double t = 0; t < 60; t += 5) at(t, 0);
    at(60, 15000);
    ScaleDecision d = at(65, 30000);
    if (curve) {
      EXPECT_EQ(d.desired, 29) << d.reason;
      EXPECT_NE(d.reason.find("arrivals"), std::string::npos) << d.reason;
    } else {
      EXPECT_EQ(d.desired, 11) << d.reason;
    }
  }
  // Without a TTFT SLO there is no timescale: the mean decides.
  SloAutoscalerConfig c = OursConfig();
  c.predictive = false;
  SloAutoscaler ours(c);
  DeploymentSnapshot s = Snap(0, 4, 0);
  s.capacity = {32, 1000, 1000};
  s.prompt_tokens_per_s = 3500;
  EXPECT_EQ(ours.Recommend(s).desired, 5);
}

// The burst of the test above (need 20 replicas against a 160 s mean of ~3.2: above 2x) keeps its
// 29 replicas for burst_hold_s while a trickle goes on, though the 180 s stabilization window
// alone would let them go; a burst that needs under 2x the mean is not held; and once the
// deployment has been idle for idle_to_zero_s the burst is forgotten.
TEST(SloAutoscalerTest, ABurstsSizeIsHeldForTheNextOne) {
  enum Case { kHeld, kOff, kIdle };
  for (Case k : {kHeld, kOff, kIdle}) {
    SCOPED_TRACE(k == kHeld ? "held" : k == kOff ? "burst hold off" : "idle");
    SloAutoscalerConfig c = OursConfig();
    c.predictive = false;
    if (k == kOff) c.burst_ratio = 0;
    SloAutoscaler ours(c);
    auto at = [&](double t, double prompt_tps, int current) {
      DeploymentSnapshot s = Snap(t, current, 0);
      s.capacity = {32, 1000, 1000};
      s.slo.ttft_p99_ms = 5000;
      s.prompt_tokens_per_s = prompt_tps;
      s.arrival_rps = prompt_tps > 0 ? 1 : 0;
      return ours.Recommend(s);
    };
    for (double t = 0; t < 60; t += 5) at(t, 0, 4);
    at(60, 15000, 4);
    ScaleDecision d = at(65, 30000, 4);
    ASSERT_EQ(d.desired, 29) << d.reason;
    // A trickle (0.5 replicas) after the burst, on the 29 replicas it got.
    const double trickle = k == kIdle ? 0 : 500;
    for (double t = 70; t < 480; t += 5) d = at(t, trickle, 29);
    if (k == kHeld) {
      EXPECT_EQ(d.desired, 29) << d.reason;
      EXPECT_NE(d.reason.find("burst"), std::string::npos) << d.reason;
    } else {
      EXPECT_LT(d.desired, 29) << d.reason;
    }
    // After burst_hold_s (and the stabilization window after it) the held size goes too.
    for (double t = 480; t < 900; t += 5) d = at(t, trickle, 29);
    EXPECT_LT(d.desired, 29) << d.reason;
  }
  // A rise to twice the quiet load is no burst: 1,500 tokens/s for a minute, 3,000 for a minute
  // (at the SLO's timescale at most 3 x 10 / 15 = 2 replicas, under 2x the 160 s mean of >= 1.5),
  // then a trickle. Every tick decides as with the burst hold off, so the scale-down after the
  // rise is not held.
  SloAutoscalerConfig with_hold = OursConfig(), without = OursConfig();
  with_hold.predictive = without.predictive = false;
  without.burst_ratio = 0;
  SloAutoscaler a(with_hold), b(without);
  int current = 6;
  for (double t = 0; t < 600; t += 5) {
    DeploymentSnapshot s = Snap(t, current, 0);
    s.capacity = {32, 1000, 1000};
    s.slo.ttft_p99_ms = 5000;
    s.prompt_tokens_per_s = t < 60 ? 1500 : t < 120 ? 3000 : 200;
    s.arrival_rps = 1;
    const ScaleDecision da = a.Recommend(s), db = b.Recommend(s);
    ASSERT_EQ(da.desired, db.desired) << "t=" << t << ": " << da.reason;
    current = da.desired;
  }
  EXPECT_LT(current, 6) << "the trickle scales down";
}

TEST(SloAutoscalerTest, PredictivePreWarmFiresOneLeadBeforeALearnedRise) {
  SloAutoscalerConfig c = OursConfig();
  c.forecast.period_s = 3600;
  c.forecast.bin_s = 60;
  c.lead_s = 180;
  SloAutoscaler ours(c);
  // Two past hours: 1 replica of load for 30 minutes, then 7.
  for (double t = 0; t < 7200; t += 5) ours.ObserveHistory(t, std::fmod(t, 3600) < 1800 ? 1.0 : 7.0, 10, /*ttft_slo_ms=*/0);
  const double rise = 7200 + 1800;
  // Today the load is still at 1 when the autoscaler runs.
  auto at = [&](double t) {
    DeploymentSnapshot s = Snap(t, 2, 0);
    s.capacity = {32, 1000, 1000};
    s.prompt_tokens_per_s = 1000;  // load 1.0
    return ours.Recommend(s);
  };
  for (double t = 7200; t < rise - 240; t += 5) at(t);
  ScaleDecision before = at(rise - 240);
  EXPECT_EQ(before.desired, 2) << before.reason;  // ceil(1 / 0.7)
  for (double t = rise - 235; t < rise - 180; t += 5) {
    ScaleDecision d = at(t);
    ASSERT_EQ(d.desired, 2) << "t=" << t - rise << ": " << d.reason;
  }
  ScaleDecision fired = at(rise - 180);
  EXPECT_EQ(fired.desired, 10) << fired.reason;  // ceil(7 / 0.7)
  EXPECT_NE(fired.reason.find("forecast"), std::string::npos);
}

// Two past hours, quiet (0.2 replicas of load) but for 10 s at minute 30 carrying 30 replicas of
// prefill, as the 10 s counters read it (15 at +5 s, 30 at +10 s, 15 at +15 s): step 1b's need is
// 300 / (10 + 5) = 20 replicas. Today, one lead (180 s) + burst_early_s (120 s) before minute 30,
// the burst's replicas are asked for at burst_utilization (0.6): ceil(20 / 0.6) = 34. A burst
// seen in one hour only, or a smooth hour with the same work, asks for nothing.
TEST(SloAutoscalerTest, ABurstLearnedFromHistoryIsReadyBeforeItComesAgain) {
  const auto history_load = [](double t) {
    const double in_hour = std::fmod(t, 3600);
    if (in_hour == 1805 || in_hour == 1815) return 15.0;
    return in_hour == 1810 ? 30.0 : 0.2;
  };
  enum Past { kTwoBurstyHours, kOneBurstyHour, kSmooth };
  for (Past past : {kTwoBurstyHours, kOneBurstyHour, kSmooth}) {
    SCOPED_TRACE(past);
    SloAutoscalerConfig c = OursConfig();
    c.forecast.period_s = 3600;
    c.forecast.bin_s = 60;
    c.lead_s = 180;
    SloAutoscaler ours(c);
    for (double t = 0; t < 7200; t += 5) {
      const bool bursty = past == kTwoBurstyHours || (past == kOneBurstyHour && t >= 3600);
      // The smooth hour carries the same work spread over the hour.
      ours.ObserveHistory(t, bursty ? history_load(t) : 0.2 + 60.0 * 5 / 3600, 10, 5000);
    }
    EXPECT_NEAR(ours.forecaster().PeakProfile(1800), past == kSmooth ? 0 : 20, 1e-9);
    auto at = [&](double t) {
      DeploymentSnapshot s = Snap(t, 1, 0);
      s.capacity = {32, 1000, 1000};
      s.slo.ttft_p99_ms = 5000;
      s.prompt_tokens_per_s = 200;  // load 0.2
      return ours.Recommend(s);
    };
    const double burst = 7200 + 1800;
    for (double t = 7200; t < burst - 300; t += 5) {
      ScaleDecision d = at(t);
      ASSERT_EQ(d.desired, 1) << "t=" << t - burst << ": " << d.reason;
    }
    ScaleDecision d = at(burst - 300);
    if (past == kTwoBurstyHours) {
      EXPECT_EQ(d.desired, 34) << d.reason;
      EXPECT_TRUE(d.forecast);
      EXPECT_NE(d.reason.find("burst learned"), std::string::npos) << d.reason;
      EXPECT_EQ(ours.Predicted(burst - 300, /*with_bursts=*/true), 34);
      EXPECT_EQ(ours.Predicted(burst - 300, /*with_bursts=*/false), 1);
    } else {
      EXPECT_EQ(d.desired, 1) << d.reason;
    }
  }
  // Without an SLO the history has no timescale and no burst is learned.
  SloAutoscaler ours(OursConfig());
  for (double t = 0; t < 7200; t += 5) ours.ObserveHistory(t, history_load(t), 10, 0);
  EXPECT_EQ(ours.forecaster().learned_peak_bins(), 0);
}

// A deployment whose SLO was removed sees no bursts: what it learned fades by burst_decay a day
// instead of being kept, and is not asked for.
TEST(SloAutoscalerTest, LearnedBurstsFadeWithoutAnSlo) {
  SloAutoscalerConfig c = OursConfig();
  c.forecast.period_s = 3600;
  c.forecast.bin_s = 60;
  SloAutoscaler ours(c);
  for (double t = 0; t < 7200; t += 5) {
    const double in_hour = std::fmod(t, 3600);
    ours.ObserveHistory(t, in_hour == 1810 ? 30.0 : (in_hour == 1805 || in_hour == 1815 ? 15.0 : 0.2), 10, 5000);
  }
  ASSERT_NEAR(ours.forecaster().PeakProfile(1800), 20, 1e-9);
  for (double t = 7200; t < 7200 + 1900; t += 5) {
    DeploymentSnapshot s = Snap(t, 1, 0);
    s.capacity = {32, 1000, 1000};
    s.prompt_tokens_per_s = 200;  // no SLO
    ScaleDecision d = ours.Recommend(s);
    // The mean profile still forecasts the minute's mean (5.15 replicas -> 8), not the burst (34).
    ASSERT_LE(d.desired, 8) << "t=" << t - 7200 << ": " << d.reason;
    ASSERT_EQ(d.reason.find("burst learned"), std::string::npos) << "t=" << t - 7200 << ": " << d.reason;
  }
  EXPECT_NEAR(ours.forecaster().PeakProfile(1800), 10, 1e-9);
}

TEST(SloAutoscalerTest, NoHistoryNoPreWarm) {
  SloAutoscaler ours(OursConfig());
  for (double t = 0; t < 1800; t += 5) {
    DeploymentSnapshot s = Snap(t, 2, 0);
    s.capacity = {32, 1000, 1000};
    s.prompt_tokens_per_s = 1000;
    ASSERT_EQ(ours.Recommend(s).desired, 2) << "t=" << t;
  }
}

TEST(OscillationCounterTest, CountsDirectionChanges) {
  OscillationCounter osc;
  for (int d : {1, 2, 3, 3, 2, 3, 1, 1}) osc.Observe(d);
  EXPECT_EQ(osc.direction_changes(), 3);
  EXPECT_EQ(osc.scale_events(), 5);
}

TEST(AutoscalerFactoryTest, NamesAndErrors) {
  for (const std::string& name : AutoscalerNames()) {
    StatusOr<std::unique_ptr<Autoscaler>> a = MakeAutoscaler(name, {0, 10});
    ASSERT_TRUE(a.ok()) << name;
    EXPECT_EQ((*a)->name(), name);
    EXPECT_GT((*a)->tick_seconds(), 0);
  }
  StatusOr<std::unique_ptr<Autoscaler>> bad = MakeAutoscaler("vpa", {0, 10});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("hpa, kpa, aibrix, ours"), std::string::npos);
  EXPECT_FALSE(MakeAutoscaler("hpa", {5, 2}).ok());
  EXPECT_FALSE(MakeAutoscaler("hpa", {-1, 2}).ok());
}

TEST(AutoscalerFactoryTest, DesiredAlwaysWithinBounds) {
  for (const std::string& name : AutoscalerNames()) {
    StatusOr<std::unique_ptr<Autoscaler>> a = MakeAutoscaler(name, {2, 6});
    ASSERT_TRUE(a.ok());
    for (double t = 0; t < 600; t += 2) {
      const double load = (static_cast<int>(t) / 60) % 2 == 0 ? 500 : 0;
      ScaleDecision d = (*a)->Recommend(Snap(t, 4, load));
      ASSERT_GE(d.desired, 2) << name << " t=" << t;
      ASSERT_LE(d.desired, 6) << name << " t=" << t;
    }
  }
}

}  // namespace
}  // namespace aicloud::fleet
