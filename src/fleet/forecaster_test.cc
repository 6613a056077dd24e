#include "fleet/forecaster.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace aicloud::fleet {
namespace {

ForecasterConfig Hourly() {
  ForecasterConfig c;
  c.period_s = 3600;
  c.bin_s = 60;
  c.trend_window_s = 0;
  return c;
}

TEST(LoadForecasterTest, LearnsNothingBeforeABinCloses) {
  LoadForecaster f(Hourly());
  for (double t = 0; t < 59; t += 1) f.Observe(t, 5);
  EXPECT_LT(f.Profile(0), 0);
  f.Observe(60, 5);
  EXPECT_DOUBLE_EQ(f.Profile(0), 5);
  EXPECT_DOUBLE_EQ(f.Profile(3600), 5);  // same slot next period
  EXPECT_LT(f.Profile(60), 0);           // the open bin is not learned yet
}

TEST(LoadForecasterTest, SmoothsAcrossPeriods) {
  LoadForecaster f(Hourly());
  f.Observe(0, 10);
  f.Observe(60, 0);
  f.Observe(3600, 20);
  f.Observe(3660, 0);
  // 0.5 * 20 + 0.5 * 10.
  EXPECT_DOUBLE_EQ(f.Profile(0), 15);
}

TEST(LoadForecasterTest, ForecastShiftsTheShapeByTodaysLevel) {
  LoadForecaster f(Hourly());
  for (double t = 0; t < 3600; t += 5) f.Observe(t, t < 1800 ? 2 : 6);
  // Next period runs one unit hotter than the profile.
  for (double t = 3600; t < 3600 + 1200; t += 5) f.Observe(t, 3);
  const double now = 3600 + 1195;
  EXPECT_NEAR(f.Forecast(now, 0), 3, 1e-9);
  EXPECT_NEAR(f.Forecast(now, 1800 - 1195 + 10), 7, 1e-9);
  EXPECT_NEAR(f.PeakAhead(now, 700), 7, 1e-9);
  EXPECT_NEAR(f.PeakAhead(now, 500), 3, 1e-9);
}

TEST(LoadForecasterTest, ARestoredProfileForecastsAsTheOneItCameFrom) {
  LoadForecaster learned(Hourly());
  for (double t = 0; t < 3600; t += 5) learned.Observe(t, t < 1800 ? 2 : 6);
  ASSERT_EQ(learned.learned_bins(), 59);  // the last bin is still open

  LoadForecaster restored(Hourly());
  ASSERT_TRUE(restored.RestoreProfile(learned.profile()).ok());
  EXPECT_EQ(restored.learned_bins(), 59);
  EXPECT_EQ(restored.profile(), learned.profile());
  // The next period, one unit hotter: both shift the same shape by the same level.
  for (double t = 3600; t < 3600 + 1200; t += 5) {
    learned.Observe(t, 3);
    restored.Observe(t, 3);
  }
  EXPECT_NEAR(restored.PeakAhead(3600 + 1195, 700), 7, 1e-9);
  EXPECT_DOUBLE_EQ(restored.PeakAhead(3600 + 1195, 700), learned.PeakAhead(3600 + 1195, 700));

  // A profile of another shape or with a value that is not finite changes nothing.
  LoadForecaster f(Hourly());
  EXPECT_EQ(f.RestoreProfile(std::vector<double>(59, 1.0)).code(), StatusCode::kInvalidArgument);
  std::vector<double> nan(60, 1.0);
  nan[7] = std::nan("");
  const Status st = f.RestoreProfile(nan);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("bin 7"), std::string::npos) << st.message();
  EXPECT_EQ(f.learned_bins(), 0);
  // Negative values are "not learned".
  std::vector<double> some(60, -1.0);
  some[3] = 4;
  some[4] = -7;
  ASSERT_TRUE(f.RestoreProfile(some).ok());
  EXPECT_EQ(f.learned_bins(), 1);
  EXPECT_DOUBLE_EQ(f.Profile(180), 4);
  EXPECT_LT(f.Profile(240), 0);
}

TEST(LoadForecasterTest, ABurstBinKeepsItsHighestValueAndDecaysAcrossPeriods) {
  LoadForecaster f(Hourly());
  for (double t = 0; t < 60; t += 5) f.ObservePeak(t, t == 20 ? 8 : 1);
  EXPECT_LT(f.PeakProfile(0), 0);  // still open
  f.ObservePeak(60, 0);
  EXPECT_DOUBLE_EQ(f.PeakProfile(0), 8);  // the most of the bin, not its mean (1.6)
  EXPECT_LT(f.Profile(0), 0);             // the load profile is fed apart
  // A day without the burst in this bin halves it; a day with a larger one replaces it.
  f.ObservePeak(3600, 2);
  f.ObservePeak(3660, 0);
  EXPECT_DOUBLE_EQ(f.PeakProfile(0), 4);
  f.ObservePeak(7200, 6);
  f.ObservePeak(7260, 0);
  EXPECT_DOUBLE_EQ(f.PeakProfile(0), 6);
  EXPECT_EQ(f.learned_peak_bins(), 2);  // bin 1 learned 0 twice
  EXPECT_DOUBLE_EQ(f.PeakProfile(60), 0);
}

TEST(LoadForecasterTest, BurstAheadReadsTheBinsOfTheHorizonOnly) {
  ForecasterConfig once = Hourly();
  once.burst_min_periods = 1;
  LoadForecaster f(once);
  f.ObservePeak(300, 10);  // bin 5: [300, 360)
  f.ObservePeak(360, 0);
  EXPECT_DOUBLE_EQ(f.BurstAhead(0, 240), 0);  // unlearned bins read as none
  EXPECT_DOUBLE_EQ(f.BurstAhead(0, 299), 0);
  EXPECT_DOUBLE_EQ(f.BurstAhead(0, 300), 10);
  EXPECT_DOUBLE_EQ(f.BurstAhead(61, 240), 10);
  EXPECT_DOUBLE_EQ(f.BurstAhead(330, 0), 10);
  EXPECT_DOUBLE_EQ(f.BurstAhead(360, 600), 0);   // passed
  EXPECT_DOUBLE_EQ(f.BurstAhead(3600 + 100, 240), 10);  // the same bin next period

  LoadForecaster restored(once);
  ASSERT_TRUE(restored.RestorePeaks(f.peaks()).ok());
  EXPECT_DOUBLE_EQ(restored.BurstAhead(0, 300), 10);  // burst_min_periods 1: the profile alone
  EXPECT_EQ(restored.RestoreBurstSightings({}).code(), StatusCode::kInvalidArgument);
  std::vector<LoadForecaster::BurstSightings> bad(60);
  bad[3][0] = {.period = 1, .need = std::nan("")};
  EXPECT_EQ(restored.RestoreBurstSightings(bad).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(restored.learned_bins(), 0);
  EXPECT_EQ(restored.RestorePeaks(std::vector<double>(61, 1.0)).code(), StatusCode::kInvalidArgument);
  std::vector<double> inf(60, 0.0);
  inf[9] = std::numeric_limits<double>::infinity();
  const Status st = restored.RestorePeaks(inf);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("peaks bin 9"), std::string::npos) << st.message();
  EXPECT_DOUBLE_EQ(restored.BurstAhead(0, 300), 10);  // unchanged
}

// By default a burst is trusted once bursts came in the bins read on two different periods
// (days): at about the same time, not necessarily in the same bin; and its size is what came on
// two periods, not the largest one-off among them.
TEST(LoadForecasterTest, ABurstIsTrustedOnceItCameOnTwoPeriods) {
  LoadForecaster f(Hourly());
  f.ObservePeak(600, 9);  // period 0, bin 10
  f.ObservePeak(660, 0);
  f.ObservePeak(720, 5);  // the same period, bin 12: still one period
  f.ObservePeak(780, 0);
  EXPECT_DOUBLE_EQ(f.BurstAhead(540, 300), 0);
  EXPECT_DOUBLE_EQ(f.PeakProfile(600), 9);  // learned, just not trusted
  f.ObservePeak(3600 + 660, 7);  // period 1, bin 11
  EXPECT_DOUBLE_EQ(f.BurstAhead(3600 + 540, 300), 0) << "bin 11 of period 1 is still open";
  f.ObservePeak(3600 + 720, 0);
  // Period 0's most (9) and period 1's (7): what came on two periods is 7.
  EXPECT_DOUBLE_EQ(f.BurstAhead(3600 + 540, 300), 7);
  EXPECT_DOUBLE_EQ(f.BurstAhead(3600 + 660, 0), 0) << "bin 11 alone: one period";
  EXPECT_EQ(f.burst_sightings()[11][0].period, 1);
  EXPECT_DOUBLE_EQ(f.burst_sightings()[11][0].need, 7);
  EXPECT_EQ(f.burst_sightings()[11][1].period, LoadForecaster::kNoPeriod);
  // Restored: the profile alone is not trusted; with the sightings, as before.
  LoadForecaster restored(Hourly());
  ASSERT_TRUE(restored.RestorePeaks(f.peaks()).ok());
  EXPECT_DOUBLE_EQ(restored.BurstAhead(3600 + 540, 300), 0);
  ASSERT_TRUE(restored.RestoreBurstSightings(f.burst_sightings()).ok());
  EXPECT_DOUBLE_EQ(restored.BurstAhead(3600 + 540, 300), 7);

  // A burst of 3 on periods 2 and 3 next to a one-off of 50 on period 3: 3 is what recurred.
  LoadForecaster g(Hourly());
  for (int p = 2; p <= 3; ++p) {
    g.ObservePeak(p * 3600 + 600, 3);  // bin 10
    g.ObservePeak(p * 3600 + 660, p == 3 ? 50 : 0);  // bin 11
    g.ObservePeak(p * 3600 + 720, 0);
  }
  EXPECT_DOUBLE_EQ(g.BurstAhead(4 * 3600 + 540, 300), 3);
  // The same with burst_min_periods = 1: the largest learned, one-off or not.
  ForecasterConfig any = Hourly();
  any.burst_min_periods = 1;
  LoadForecaster h(any);
  for (int p = 2; p <= 3; ++p) {
    h.ObservePeak(p * 3600 + 600, 3);
    h.ObservePeak(p * 3600 + 660, p == 3 ? 50 : 0);
    h.ObservePeak(p * 3600 + 720, 0);
  }
  EXPECT_DOUBLE_EQ(h.BurstAhead(4 * 3600 + 540, 300), 50);
}

// What came on two periods and then stopped fades: the profile loses half a period, and so do
// the sightings once they are older than the last two periods.
TEST(LoadForecasterTest, ATrustedBurstThatStopsComingFades) {
  LoadForecaster f(Hourly());
  for (int p = 0; p < 6; ++p) {
    for (double t = 0; t < 3600; t += 60) f.ObservePeak(p * 3600 + t, p < 2 && t == 600 ? 8 : 0);
  }
  f.ObservePeak(6 * 3600, 0);
  EXPECT_DOUBLE_EQ(f.PeakProfile(600), 0.5);  // 8 x 0.5^4: periods 2..5 without it
  // In period 6 the sightings of periods 1 and 0 count 8 x 0.5^3 and 8 x 0.5^4: the second, 0.5.
  EXPECT_DOUBLE_EQ(f.BurstAhead(6 * 3600 + 540, 120), 0.5);
  // The day after the second sighting both count fully.
  LoadForecaster g(Hourly());
  for (int p = 0; p < 2; ++p) {
    for (double t = 0; t < 3600; t += 60) g.ObservePeak(p * 3600 + t, t == 600 ? 8 : 0);
  }
  g.ObservePeak(2 * 3600, 0);
  EXPECT_DOUBLE_EQ(g.BurstAhead(2 * 3600 + 540, 120), 8);
}

// One burst across the end of a period (midnight) came on one day, not two.
TEST(LoadForecasterTest, ABurstAcrossThePeriodsEndIsOneDays) {
  LoadForecaster f(Hourly());
  f.ObservePeak(3590, 20);  // period 0, bin 59
  f.ObservePeak(3600, 20);  // period 1, bin 0: the same burst
  f.ObservePeak(3660, 0);
  EXPECT_DOUBLE_EQ(f.BurstAhead(3600 + 3540, 120), 0);
  // The next day it comes again: now it came on two.
  f.ObservePeak(2 * 3600 - 10, 18);
  f.ObservePeak(2 * 3600, 18);
  f.ObservePeak(2 * 3600 + 60, 0);
  EXPECT_DOUBLE_EQ(f.BurstAhead(2 * 3600 + 3540, 120), 18);
  // Sightings restored out of order are refused.
  std::vector<LoadForecaster::BurstSightings> swapped = f.burst_sightings();
  std::swap(swapped[0][0], swapped[0][1]);
  EXPECT_EQ(f.RestoreBurstSightings(swapped).code(), StatusCode::kInvalidArgument);
}

// Old sightings in one bin and a recent one-off in the next do not make a large burst trusted.
TEST(LoadForecasterTest, OldSightingsAndARecentOneOffAreNotABurst) {
  LoadForecaster f(Hourly());
  for (int p = 0; p < 10; ++p) {
    for (double t = 0; t < 3600; t += 60) {
      const double need = (p < 2 && t == 600) ? 40 : (p == 9 && t == 660) ? 30 : 0;
      f.ObservePeak(p * 3600 + t, need);
    }
  }
  f.ObservePeak(10 * 3600, 0);
  // Bin 10: 40 on periods 0 and 1 (counting 40 x 0.5^7 and 0.5^8 by period 10); bin 11: 30 once.
  EXPECT_LT(f.BurstAhead(10 * 3600 + 540, 180), 0.5);
}

TEST(LoadForecasterTest, TrendCatchesARiseButNotAFall) {
  ForecasterConfig c = Hourly();
  c.trend_window_s = 120;
  c.trend_horizon_s = 60;
  c.max_trend_ratio = 10;
  {
    LoadForecaster f(c);
    for (double t = 0; t <= 120; t += 1) f.Observe(t, t / 10);  // +0.1 per second
    EXPECT_GT(f.Forecast(120, 60), f.Level(120) + 5);
  }
  {
    LoadForecaster f(c);
    for (double t = 0; t <= 120; t += 1) f.Observe(t, 12 - t / 10);
    EXPECT_NEAR(f.Forecast(120, 60), f.Level(120), 1e-9);
  }
}

}  // namespace
}  // namespace aicloud::fleet
