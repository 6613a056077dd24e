#include "fleet/kpa.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace aicloud::fleet {

KpaConfig KpaConfig::Knative() { return KpaConfig{}; }

KpaConfig KpaConfig::Aibrix() {
  KpaConfig c;
  c.name = "aibrix";
  c.bounds = {1, 1000};
  c.stable_window_s = 180;    // observeWindowSeconds
  c.panic_window_s = 60;      // panicWindowSeconds
  c.panic_threshold = 2.0;
  c.max_scale_up_rate = 2;
  c.max_scale_down_rate = 2;
  c.scale_up_tolerance = 0.1;
  c.scale_down_tolerance = 0.1;
  c.scale_down_cooldown_s = 300;
  c.scale_to_zero = false;
  return c;
}

KpaAutoscaler::KpaAutoscaler(KpaConfig config)
    : config_(std::move(config)),
      in_flight_(std::max(config_.stable_window_s, config_.panic_window_s)),
      recommendations_(std::max(config_.scale_down_cooldown_s, 1.0)) {}

ScaleDecision KpaAutoscaler::Recommend(const DeploymentSnapshot& s) {
  const double now = s.now_s;
  const double target = ConcurrencyTarget(config_.target_per_replica, s.capacity);
  const double observed = s.InFlight();
  in_flight_.Add(now, observed);
  if (observed > 0 || last_active_s_ < 0) last_active_s_ = now;
  const double stable_avg = in_flight_.Mean(now, config_.stable_window_s);
  const double panic_avg = in_flight_.Mean(now, config_.panic_window_s);
  const int ready = s.ready();
  const int current = s.current_replicas;
  const ScaleBounds& b = config_.bounds;
  auto clamp_bounds = [&](int n) { return std::clamp(n, b.min_replicas, b.max_replicas); };

  if (ready == 0) {
    // From zero (or while the first replicas start): the activator holds requests and pokes
    // the autoscaler; ask for what the in-flight count needs, at least one.
    if (observed > 0) {
      const int want = std::max({1, current, static_cast<int>(std::ceil(observed / target))});
      return {clamp_bounds(want), fmt::format("{}: {} in flight, no ready replica", name(), observed), false};
    }
    return {clamp_bounds(current), fmt::format("{}: idle, no ready replica", name()), false};
  }

  int dspc = static_cast<int>(std::ceil(stable_avg / target));
  int dppc = static_cast<int>(std::ceil(panic_avg / target));
  // AIBrix's fluctuation band: inside it the stable desire stays at the ready count.
  const double ratio = stable_avg / (target * ready);
  if (ratio > 1 && ratio - 1 <= config_.scale_up_tolerance) dspc = ready;
  if (ratio < 1 && 1 - ratio <= config_.scale_down_tolerance) dspc = ready;
  const int max_up = static_cast<int>(std::ceil(ready * config_.max_scale_up_rate));
  // At least N -> N-1 is always allowed.
  const int max_down = std::min(ready - 1, static_cast<int>(std::floor(ready / config_.max_scale_down_rate)));
  dspc = std::clamp(dspc, std::max(max_down, 0), max_up);
  dppc = std::clamp(dppc, std::max(max_down, 0), max_up);

  const bool over = static_cast<double>(dppc) / ready >= config_.panic_threshold;
  if (over) {
    if (panic_since_s_ < 0) panic_since_s_ = now;
    last_over_threshold_s_ = now;
  } else if (panic_since_s_ >= 0 && now - last_over_threshold_s_ >= config_.stable_window_s) {
    panic_since_s_ = -1;
    max_panic_pods_ = 0;
  }

  int desired;
  std::string why;
  if (panic_since_s_ >= 0) {
    // In panic the count never goes down.
    max_panic_pods_ = std::max({max_panic_pods_, dppc, current});
    desired = max_panic_pods_;
    why = fmt::format("{}: panic, {:.1f} in flight over {:.0f} s (x{:.2f} of ready {})", name(),
                      panic_avg, config_.panic_window_s, static_cast<double>(dppc) / ready, ready);
  } else {
    desired = dspc;
    why = fmt::format("{}: stable avg {:.1f} in flight / target {:.1f}", name(), stable_avg, target);
  }

  recommendations_.Add(now, desired);
  if (config_.scale_down_cooldown_s > 0 && desired < current) {
    const int held = std::min(current, static_cast<int>(recommendations_.Max(
                                           now, config_.scale_down_cooldown_s, desired)));
    if (held > desired) {
      why += fmt::format("; held at {} by the {:.0f} s scale-down cooldown", held,
                         config_.scale_down_cooldown_s);
      desired = held;
    }
  }

  if (desired == 0) {
    const bool may_zero = config_.scale_to_zero && b.min_replicas == 0 &&
                          now - last_active_s_ >= config_.stable_window_s + config_.scale_to_zero_grace_s;
    if (may_zero) {
      why = fmt::format("{}: idle for {:.0f} s, scale to zero", name(), now - last_active_s_);
    } else {
      desired = 1;
    }
  }
  return {clamp_bounds(desired), why, panic_since_s_ >= 0};
}

}  // namespace aicloud::fleet
