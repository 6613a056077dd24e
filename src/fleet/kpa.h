// KpaAutoscaler: Knative's pod autoscaler (KPA) on in-flight requests, and the AIBrix
// PodAutoscaler preset of it. Constants from knative/serving config/core/configmaps/
// autoscaler.yaml and pkg/autoscaler/scaling/autoscaler.go, and AIBrix's
// metric-based-autoscaling.rst (autoscaling-anchors.md D.1 and A.2).
//
// Each tick (2 s): the in-flight sample joins a window; the stable (60 s) and panic (6 s)
// averages give desired pods ceil(avg / target), both clamped to
// [floor(ready / max_scale_down_rate), ceil(ready x max_scale_up_rate)]. Panic starts when the
// panic-window desire is >= 200% of ready pods, is extended by every tick still over it, and ends
// one stable window after the last such tick; in panic the count never goes down. Scale to zero
// once nothing was in flight for a stable window plus the grace period. AIBrix adds a +-10%
// tolerance band around the current count and a 300 s scale-down cooldown (the highest
// recommendation of the window wins).
#pragma once

#include "fleet/autoscaler.h"
#include "fleet/window.h"

namespace aicloud::fleet {

struct KpaConfig {
  std::string name = "kpa";
  ScaleBounds bounds{0, 1000};
  double target_per_replica = 0;       // 0 = ConcurrencyTarget (70% of max_concurrency)
  double tick_s = 2;
  double stable_window_s = 60;
  double panic_window_s = 6;           // panic-window-percentage 10% of the stable window
  double panic_threshold = 2.0;        // panic-threshold-percentage 200
  double max_scale_up_rate = 1000;
  double max_scale_down_rate = 2;
  bool scale_to_zero = true;
  double scale_to_zero_grace_s = 30;
  // AIBrix's additions (0 = off in Knative).
  double scale_up_tolerance = 0;
  double scale_down_tolerance = 0;
  double scale_down_cooldown_s = 0;

  static KpaConfig Knative();
  // AIBrix PodAutoscaler defaults with its KPA strategy. Its tick is not in the note; Knative's
  // 2 s is kept.
  static KpaConfig Aibrix();
};

class KpaAutoscaler final : public Autoscaler {
 public:
  explicit KpaAutoscaler(KpaConfig config);
  std::string_view name() const override { return config_.name; }
  double tick_seconds() const override { return config_.tick_s; }
  ScaleDecision Recommend(const DeploymentSnapshot& s) override;
  bool in_panic() const { return panic_since_s_ >= 0; }

 private:
  KpaConfig config_;
  SampleWindow in_flight_;
  SampleWindow recommendations_;
  double panic_since_s_ = -1;     // < 0: not in panic
  double last_over_threshold_s_ = -1;
  int max_panic_pods_ = 0;
  double last_active_s_ = -1;     // last time anything was in flight
};

}  // namespace aicloud::fleet
