// LoadForecaster: predicts a deployment's load a lead time ahead, so replicas (and the nodes
// under them) can be asked for before a rise arrives instead of after it.
//
// Two parts, the larger forecast wins:
//   periodic  a profile of the load per time-of-period bin (a day by default), each bin an
//             exponentially smoothed mean over the periods seen so far (weight `smoothing` on
//             the newest). The forecast for t+h is the profile at t+h shifted by how far the
//             current load is from the profile now (a quiet day stays quiet). Only bins that
//             have closed are learned, so the forecast never uses the future.
//   bursts    a second profile, fed separately (ObservePeak): per bin the highest value seen in
//             it (a burst's need at the SLO's timescale, which a bin's mean dilutes), held
//             across periods with decay: max(newest, burst_decay x before). It is not shifted by
//             today's level: a burst a minute long says nothing about the minutes around it.
//             BurstAhead reads it, and with burst_min_periods = 2 trusts only what came on two
//             different periods (days) in the bins it reads: per bin the last two periods' bursts
//             are kept, and the size asked for is the second largest of the per-period maxima.
//             A one-off (a load test) alone is not pre-warmed for the next day.
//   trend     the slope between the older and newer halves of the last `trend_window_s` of
//             observations, rises only,
//             extrapolated at most `trend_horizon_s` ahead and capped at `max_trend_ratio` x
//             the current level; it needs no history.
//
//   LoadForecaster f({.period_s = 3600, .bin_s = 60});
//   every tick: f.Observe(now_s, replicas_of_load);
//   double ahead = f.PeakAhead(now_s, /*horizon_s=*/210);  // highest forecast over the lead
//
// Not thread-safe. Deterministic.
#pragma once

#include <array>
#include <limits>
#include <utility>
#include <vector>

#include "core/status.h"
#include "fleet/window.h"

namespace aicloud::fleet {

struct ForecasterConfig {
  double period_s = 86400;     // the repeating cycle; 3600 makes a 1-hour trace testable
  double bin_s = 300;
  double smoothing = 0.5;      // EWMA weight of the newest period in a bin
  double level_window_s = 60;  // "current load" = mean of this window
  double trend_window_s = 120; // 0 disables the trend part
  double trend_horizon_s = 60;
  double max_trend_ratio = 1.5;
  double burst_decay = 0.5;    // a burst bin's weight after a period without a larger burst
  int burst_min_periods = 2;   // BurstAhead: 1 = any burst, 2 = seen on two periods (0 acts as 1, >2 as 2)
};

class LoadForecaster {
 public:
  explicit LoadForecaster(ForecasterConfig config = {});

  // REQUIRES: t_s does not decrease between calls.
  void Observe(double t_s, double value);
  // Periodic and trend forecasts for t = now_s + horizon_s (max of the two; the level when
  // neither applies).
  double Forecast(double now_s, double horizon_s) const;
  // Highest Forecast over [now_s, now_s + horizon_s], sampled every bin and at the end.
  double PeakAhead(double now_s, double horizon_s) const;
  // The learned value of the bin holding time t (< 0 when not learned yet).
  double Profile(double t_s) const;
  // The whole learned profile, one value per bin of the period (< 0: not learned yet), to be
  // stored and given back to a forecaster of the same period and bin after a restart.
  const std::vector<double>& profile() const { return profile_; }
  int learned_bins() const;
  // INVALID_ARGUMENT (nothing changed) for a size other than period / bin or a value that is
  // not finite. Negative values mean "not learned".
  Status RestoreProfile(const std::vector<double>& profile);

  // The burst profile: `value` > 0 at a burst, 0 otherwise. REQUIRES: t_s does not decrease
  // between calls.
  void ObservePeak(double t_s, double value);
  // The burst to plan for over the bins of [now_s, now_s + horizon_s]: with burst_min_periods
  // = 1 the highest learned (decayed) one; with 2 the second largest of the per-period maxima
  // of the bursts those bins saw on their last two periods with one, capped by the highest
  // decayed one (so that bursts that stopped coming fade); 0 when nothing qualifies.
  double BurstAhead(double now_s, double horizon_s) const;
  double PeakProfile(double t_s) const { return peaks_[static_cast<size_t>(Slot(t_s))]; }
  const std::vector<double>& peaks() const { return peaks_; }
  int learned_peak_bins() const;
  // As RestoreProfile, for the burst profile.
  Status RestorePeaks(const std::vector<double>& peaks);
  // Per bin, the bursts of the last two periods (floor(t / period_s)) that had one there, newest
  // first, to be stored with peaks(). Restore: INVALID_ARGUMENT (nothing changed) for another
  // size or a need that is negative or not finite. A restore without them trusts no burst until
  // bursts have come there again on burst_min_periods more periods.
  static constexpr long long kNoPeriod = std::numeric_limits<long long>::min();
  struct BurstSighting {
    long long period = kNoPeriod;
    double need = 0;
  };
  using BurstSightings = std::array<BurstSighting, 2>;
  const std::vector<BurstSightings>& burst_sightings() const { return burst_sightings_; }
  Status RestoreBurstSightings(const std::vector<BurstSightings>& sightings);
  double Level(double now_s) const { return recent_.Mean(now_s, config_.level_window_s); }
  const ForecasterConfig& config() const { return config_; }

 private:
  int Slot(double t_s) const;
  double PeriodicForecast(double now_s, double horizon_s) const;  // < 0 when unknown
  double TrendForecast(double now_s, double horizon_s) const;

  // The bin being accumulated; its value enters `slots` when a later bin starts.
  struct OpenBin {
    bool open = false;
    long long bin = 0;  // absolute bin index (times may be negative)
    double sum = 0, max = 0;
    int count = 0;
  };
  void Accumulate(OpenBin& b, std::vector<double>& slots, bool peak, double t_s, double value);

  ForecasterConfig config_;
  std::vector<double> profile_;  // per slot; < 0 = not learned
  std::vector<double> peaks_;    // per slot; < 0 = not learned
  std::vector<BurstSightings> burst_sightings_;  // per slot
  mutable std::vector<std::pair<long long, double>> scratch_;  // BurstAhead's, kept for its capacity
  OpenBin open_, open_peak_;
  SampleWindow recent_;
};

}  // namespace aicloud::fleet
