#include "fleet/hpa.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace aicloud::fleet {

HpaAutoscaler::HpaAutoscaler(HpaConfig config)
    : config_(config), recommendations_(config.downscale_stabilization_s) {}

ScaleDecision HpaAutoscaler::Recommend(const DeploymentSnapshot& s) {
  const int current = s.current_replicas;
  if (s.now_s - last_sync_s_ < config_.sync_period_s && last_sync_s_ > -1e300) {
    // Between syncs the controller keeps what it last decided (the deployment may have moved
    // towards it since).
    return {std::clamp(last_.desired, config_.bounds.min_replicas, config_.bounds.max_replicas),
            "hpa: between syncs", false};
  }
  last_sync_s_ = s.now_s;
  const double target = ConcurrencyTarget(config_.target_per_replica, s.capacity);
  const double in_flight = s.InFlight();
  const int ready = s.ready();
  int rec = current;
  std::string why;
  if (ready == 0) {
    // No ready pod reports a metric: HPA keeps the count, but a deployment at zero with waiting
    // requests is woken to one (the activator's job; HPA alone cannot leave zero).
    rec = current == 0 && in_flight > 0 ? 1 : current;
    why = fmt::format("hpa: no ready replica, {} in flight", in_flight);
  } else {
    const double ratio = in_flight / (ready * target);
    if (std::abs(ratio - 1) <= config_.tolerance) {
      rec = current;
      why = fmt::format("hpa: ratio {:.2f} within tolerance {:.2f}", ratio, config_.tolerance);
    } else if (ratio > 1) {
      // Starting replicas count as 0 usage: scale up only if the ratio over all of them is
      // still out of the band.
      const double all_ratio = in_flight / ((ready + s.starting_replicas) * target);
      if (all_ratio <= 1 + config_.tolerance) {
        rec = current;
        why = fmt::format("hpa: ratio {:.2f}, {:.2f} counting {} starting replicas", ratio,
                          all_ratio, s.starting_replicas);
      } else {
        rec = static_cast<int>(std::ceil(in_flight / target));
        const int cap = std::max(current + config_.scale_up_pods,
                                 static_cast<int>(std::ceil(current * (1 + config_.scale_up_percent / 100))));
        rec = std::min(rec, std::max(cap, 1));
        why = fmt::format("hpa: ratio {:.2f} > {:.2f}, {} -> {}", ratio, 1 + config_.tolerance,
                          current, rec);
      }
    } else {
      // Starting replicas count as fully used on the way down.
      rec = static_cast<int>(std::ceil(in_flight / target)) + s.starting_replicas;
      why = fmt::format("hpa: ratio {:.2f} < {:.2f}", ratio, 1 - config_.tolerance);
    }
  }
  rec = std::clamp(rec, config_.bounds.min_replicas, config_.bounds.max_replicas);
  recommendations_.Add(s.now_s, rec);
  int desired = rec;
  if (rec < current) {
    const int stabilized = static_cast<int>(
        recommendations_.Max(s.now_s, config_.downscale_stabilization_s, rec));
    desired = std::min(current, stabilized);
    if (desired > rec) why += fmt::format("; held at {} by the {:.0f} s stabilization window",
                                          desired, config_.downscale_stabilization_s);
  }
  desired = std::clamp(desired, config_.bounds.min_replicas, config_.bounds.max_replicas);
  last_ = {desired, why, false};
  return last_;
}

}  // namespace aicloud::fleet
