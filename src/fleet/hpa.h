// HpaAutoscaler: the Kubernetes Horizontal Pod Autoscaler (autoscaling/v2) algorithm on one
// metric, in-flight requests per ready replica (running + waiting, plus requests held at the
// gateway). Constants from kubernetes/kubernetes pkg/apis/autoscaling/v2/defaults.go and the
// controller flags (autoscaling-anchors.md D.4):
//   desired = ceil(ready x metric/target), no change while |metric/target - 1| <= 0.1;
//   evaluated every 15 s (sync period);
//   scale-up: replicas still starting count as 0 usage (HPA's conservative readiness rule), at
//     most max(+4 pods, +100%) per sync;
//   scale-down: the highest recommendation of the last 300 s (stabilization window), replicas
//     still starting count as fully used.
#pragma once

#include "fleet/autoscaler.h"
#include "fleet/window.h"

namespace aicloud::fleet {

struct HpaConfig {
  ScaleBounds bounds{1, 100};        // minReplicas defaults to 1 (0 needs HPAScaleToZero)
  double target_per_replica = 0;     // in-flight requests per replica; 0 = ConcurrencyTarget
  double tolerance = 0.1;
  double sync_period_s = 15;
  double downscale_stabilization_s = 300;
  int scale_up_pods = 4;             // per sync period; the larger of the two policies applies
  double scale_up_percent = 100;
};

class HpaAutoscaler final : public Autoscaler {
 public:
  explicit HpaAutoscaler(HpaConfig config);
  std::string_view name() const override { return "hpa"; }
  double tick_seconds() const override { return config_.sync_period_s; }
  ScaleDecision Recommend(const DeploymentSnapshot& s) override;

 private:
  HpaConfig config_;
  SampleWindow recommendations_;
  double last_sync_s_ = -1e300;
  ScaleDecision last_;
};

}  // namespace aicloud::fleet
