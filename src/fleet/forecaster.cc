#include "fleet/forecaster.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

namespace aicloud::fleet {

LoadForecaster::LoadForecaster(ForecasterConfig config)
    : config_(config),
      recent_(std::max({config.level_window_s, config.trend_window_s, 1.0})) {
  const int slots = std::max(1, static_cast<int>(std::lround(config_.period_s / config_.bin_s)));
  profile_.assign(static_cast<size_t>(slots), -1.0);
  peaks_.assign(static_cast<size_t>(slots), -1.0);
  burst_sightings_.assign(static_cast<size_t>(slots), BurstSightings{});
}

int LoadForecaster::Slot(double t_s) const {
  const long long bin = static_cast<long long>(std::floor(t_s / config_.bin_s));
  const long long n = static_cast<long long>(profile_.size());
  return static_cast<int>(((bin % n) + n) % n);
}

void LoadForecaster::Accumulate(OpenBin& b, std::vector<double>& slots, bool peak, double t_s, double value) {
  const long long bin = static_cast<long long>(std::floor(t_s / config_.bin_s));
  if (!b.open || bin != b.bin) {
    if (b.open && b.count > 0) {
      const double v = peak ? b.max : b.sum / b.count;
      const double start = static_cast<double>(b.bin) * config_.bin_s;
      const size_t at = static_cast<size_t>(Slot(start));
      double& slot = slots[at];
      // The mean is smoothed; a burst is held with decay: it comes at about the same time of
      // day, not in the same bin each day, and a day without it in this bin is no evidence
      // that it stopped.
      if (slot < 0) slot = v;
      else slot = peak ? std::max(v, config_.burst_decay * slot) : config_.smoothing * v + (1 - config_.smoothing) * slot;
      if (peak && v > 0) {
        BurstSightings& seen = burst_sightings_[at];
        const long long period = static_cast<long long>(std::floor(start / config_.period_s));
        if (seen[0].period == period) seen[0].need = std::max(seen[0].need, v);
        else seen = {BurstSighting{period, v}, seen[0]};
      }
    }
    b = {.open = true, .bin = bin, .sum = 0, .max = 0, .count = 0};
  }
  b.sum += value;
  b.max = b.count == 0 ? value : std::max(b.max, value);
  ++b.count;
}

void LoadForecaster::Observe(double t_s, double value) {
  Accumulate(open_, profile_, /*peak=*/false, t_s, value);
  recent_.Add(t_s, value);
}

void LoadForecaster::ObservePeak(double t_s, double value) { Accumulate(open_peak_, peaks_, /*peak=*/true, t_s, value); }

double LoadForecaster::BurstAhead(double now_s, double horizon_s) const {
  double held = 0;  // the highest decayed burst
  std::vector<std::pair<long long, double>>& by_period = scratch_;  // (lag, the most its bursts needed)
  by_period.clear();
  // Sightings are told apart by how many periods before the time read they came (their lag),
  // not by their period: one burst across a period's end (midnight) is one day's, not two. A
  // sighting counts fully while it is one of the last two periods' (lag 1 or 2), then loses
  // burst_decay a period, as the profile does: old sightings in one bin and a recent one-off in
  // another do not make a large burst trusted.
  const auto read = [&](double t) {
    const size_t at = static_cast<size_t>(Slot(t));
    held = std::max(held, peaks_[at]);
    const long long here = static_cast<long long>(std::floor(t / config_.period_s));
    for (const BurstSighting& b : burst_sightings_[at]) {
      if (b.period == kNoPeriod) continue;
      const long long lag = here - b.period;
      double need = b.need;
      for (long long age = std::clamp<long long>(lag - 2, 0, 64); age > 0; --age) need *= config_.burst_decay;
      auto it = std::find_if(by_period.begin(), by_period.end(), [&](const auto& p) { return p.first == lag; });
      if (it == by_period.end()) by_period.emplace_back(lag, need);
      else it->second = std::max(it->second, need);
    }
  };
  for (double h = 0; h < horizon_s; h += config_.bin_s) read(now_s + h);
  read(now_s + horizon_s);
  if (config_.burst_min_periods <= 1) return held;
  if (by_period.size() < 2) return 0;
  // The second largest: what came on two periods at least.
  std::partial_sort(by_period.begin(), by_period.begin() + 2, by_period.end(),
                    [](const auto& a, const auto& b) { return a.second > b.second; });
  return std::min(held, by_period[1].second);
}

Status LoadForecaster::RestoreBurstSightings(const std::vector<BurstSightings>& sightings) {
  if (sightings.size() != burst_sightings_.size()) {
    return InvalidArgumentError("burst sightings have " + std::to_string(sightings.size()) + " bins, want " +
                                std::to_string(burst_sightings_.size()) + " (period / bin)");
  }
  for (size_t i = 0; i < sightings.size(); ++i) {
    for (const BurstSighting& b : sightings[i]) {
      if (!std::isfinite(b.need) || b.need < 0) {
        return InvalidArgumentError("burst sightings bin " + std::to_string(i) + ": need is not a finite number >= 0");
      }
    }
    const BurstSighting& newer = sightings[i][0];
    const BurstSighting& older = sightings[i][1];
    if (older.period != kNoPeriod && (newer.period == kNoPeriod || newer.period <= older.period)) {
      return InvalidArgumentError("burst sightings bin " + std::to_string(i) + ": not two different periods, newest first");
    }
  }
  burst_sightings_ = sightings;
  return OkStatus();
}

int LoadForecaster::learned_peak_bins() const {
  return static_cast<int>(std::count_if(peaks_.begin(), peaks_.end(), [](double v) { return v >= 0; }));
}

double LoadForecaster::Profile(double t_s) const { return profile_[static_cast<size_t>(Slot(t_s))]; }

int LoadForecaster::learned_bins() const {
  return static_cast<int>(std::count_if(profile_.begin(), profile_.end(), [](double v) { return v >= 0; }));
}

namespace {

Status RestoreSlots(const std::vector<double>& from, std::vector<double>& to, const char* what) {
  if (from.size() != to.size()) {
    return InvalidArgumentError(std::string(what) + " has " + std::to_string(from.size()) + " bins, want " +
                                std::to_string(to.size()) + " (period / bin)");
  }
  for (size_t i = 0; i < from.size(); ++i) {
    if (!std::isfinite(from[i])) return InvalidArgumentError(std::string(what) + " bin " + std::to_string(i) + " is not finite");
  }
  for (size_t i = 0; i < from.size(); ++i) to[i] = from[i] < 0 ? -1.0 : from[i];
  return OkStatus();
}

}  // namespace

Status LoadForecaster::RestoreProfile(const std::vector<double>& profile) { return RestoreSlots(profile, profile_, "profile"); }

Status LoadForecaster::RestorePeaks(const std::vector<double>& peaks) { return RestoreSlots(peaks, peaks_, "peaks"); }

double LoadForecaster::PeriodicForecast(double now_s, double horizon_s) const {
  const double ahead = Profile(now_s + horizon_s);
  const double here = Profile(now_s);
  if (ahead < 0 || here < 0) return -1;
  // Shift the learned shape by today's distance from it.
  return std::max(0.0, ahead + (Level(now_s) - here));
}

double LoadForecaster::TrendForecast(double now_s, double horizon_s) const {
  const double level = Level(now_s);
  if (config_.trend_window_s <= 0) return level;
  // Slope between the means of the window's older and newer halves: a two-point fit that
  // single noisy samples do not swing.
  const double half = config_.trend_window_s / 2;
  const double older = recent_.Mean(now_s - half, half, -1);
  const double newer = recent_.Mean(now_s, half, -1);
  if (older < 0 || newer < 0 || recent_.OldestTime() > now_s - config_.trend_window_s + half / 2) {
    return level;
  }
  const double slope = std::max(0.0, (newer - older) / half);
  const double h = std::min(horizon_s, config_.trend_horizon_s);
  return std::min(level + slope * h, std::max(level, newer) * config_.max_trend_ratio);
}

double LoadForecaster::Forecast(double now_s, double horizon_s) const {
  const double trend = TrendForecast(now_s, horizon_s);
  const double periodic = PeriodicForecast(now_s, horizon_s);
  return std::max(trend, periodic);
}

double LoadForecaster::PeakAhead(double now_s, double horizon_s) const {
  double best = Forecast(now_s, 0);
  for (double h = config_.bin_s; h < horizon_s; h += config_.bin_s) best = std::max(best, Forecast(now_s, h));
  return std::max(best, Forecast(now_s, horizon_s));
}

}  // namespace aicloud::fleet
