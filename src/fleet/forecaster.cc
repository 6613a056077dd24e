#include "fleet/forecaster.h"

#include <algorithm>
#include <cmath>

namespace aicloud::fleet {

LoadForecaster::LoadForecaster(ForecasterConfig config)
    : config_(config),
      recent_(std::max({config.level_window_s, config.trend_window_s, 1.0})) {
  const int slots = std::max(1, static_cast<int>(std::lround(config_.period_s / config_.bin_s)));
  profile_.assign(static_cast<size_t>(slots), -1.0);
}

int LoadForecaster::Slot(double t_s) const {
  const long long bin = static_cast<long long>(std::floor(t_s / config_.bin_s));
  const long long n = static_cast<long long>(profile_.size());
  return static_cast<int>(((bin % n) + n) % n);
}

void LoadForecaster::Observe(double t_s, double value) {
  const long long bin = static_cast<long long>(std::floor(t_s / config_.bin_s));
  if (!has_open_ || bin != open_bin_) {
    if (has_open_ && open_count_ > 0) {
      const double mean = open_sum_ / open_count_;
      double& slot = profile_[static_cast<size_t>(Slot(static_cast<double>(open_bin_) * config_.bin_s))];
      slot = slot < 0 ? mean : config_.smoothing * mean + (1 - config_.smoothing) * slot;
    }
    has_open_ = true;
    open_bin_ = bin;
    open_sum_ = 0;
    open_count_ = 0;
  }
  open_sum_ += value;
  ++open_count_;
  recent_.Add(t_s, value);
}

double LoadForecaster::Profile(double t_s) const { return profile_[static_cast<size_t>(Slot(t_s))]; }

int LoadForecaster::learned_bins() const {
  return static_cast<int>(std::count_if(profile_.begin(), profile_.end(), [](double v) { return v >= 0; }));
}

Status LoadForecaster::RestoreProfile(const std::vector<double>& profile) {
  if (profile.size() != profile_.size()) {
    return InvalidArgumentError("profile has " + std::to_string(profile.size()) + " bins, want " +
                                std::to_string(profile_.size()) + " (period / bin)");
  }
  for (size_t i = 0; i < profile.size(); ++i) {
    if (!std::isfinite(profile[i])) return InvalidArgumentError("profile bin " + std::to_string(i) + " is not finite");
  }
  for (size_t i = 0; i < profile.size(); ++i) profile_[i] = profile[i] < 0 ? -1.0 : profile[i];
  return OkStatus();
}

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
