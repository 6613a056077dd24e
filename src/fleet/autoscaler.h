// Replica autoscalers: given a DeploymentSnapshot (snapshot.h) every tick, each answers the
// replica count the deployment should converge to. Four policies share one interface:
//
//   hpa     Kubernetes HPA (autoscaling/v2): ceil(current x metric/target), +-10% tolerance,
//           15 s sync, 300 s scale-down stabilization, scale-up max(4 pods, 100%) per sync.
//   kpa     Knative KPA: 60 s stable / 6 s panic windows, panic at 200%, 2 s tick, up 1000x,
//           down 2x per tick, scale to zero after the stable window + 30 s grace.
//   aibrix  AIBrix PodAutoscaler's KPA defaults: 180 s / 60 s windows, panic 2.0, +-10%
//           tolerance, 2x up / 2x down per decision, 300 s scale-down cooldown, no scale to zero.
//   ours    SLO- and capacity-driven with a load forecaster (slo_autoscaler.h).
// Constants are the ones in ../shared/research/autoscaling-anchors.md (sections A.2, D.1, D.4).
//
//   StatusOr<std::unique_ptr<Autoscaler>> a = MakeAutoscaler("kpa", {.min_replicas = 0});
//   every (*a)->tick_seconds(): ScaleDecision d = (*a)->Recommend(snapshot);
//
// Autoscalers are deterministic functions of the snapshots they were given (no clock, no I/O,
// no threads). Not thread-safe: one instance per deployment, called from one controller thread.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "fleet/forecaster.h"
#include "fleet/snapshot.h"

namespace aicloud::fleet {

class Autoscaler {
 public:
  virtual ~Autoscaler() = default;
  virtual std::string_view name() const = 0;
  // How often the controller should call Recommend (a policy may answer "no change" between).
  virtual double tick_seconds() const = 0;
  // REQUIRES: snapshot.now_s does not decrease between calls.
  virtual ScaleDecision Recommend(const DeploymentSnapshot& snapshot) = 0;
  // The load profile a predictive policy learns (nullptr for the others). A controller stores
  // it with the deployment and restores it into the autoscaler that replaces this one after a
  // restart; its bins are periods of now_s, so a controller that wants them to be times of day
  // passes wall-clock-aligned seconds.
  virtual LoadForecaster* learned() { return nullptr; }
};

// "hpa", "kpa", "aibrix", "ours"; InvalidArgument listing them for anything else. `bounds`
// replaces the policy's default bounds.
StatusOr<std::unique_ptr<Autoscaler>> MakeAutoscaler(std::string_view policy, const ScaleBounds& bounds);
std::vector<std::string> AutoscalerNames();

// The per-replica in-flight target the concurrency-driven policies (HPA, KPA, AIBrix) aim at:
// `configured` when > 0, else Knative's container-concurrency-target-percentage (70%) of
// capacity.max_concurrency.
double ConcurrencyTarget(double configured, const ReplicaCapacity& capacity);

// Counts direction changes of the desired replica count (up then down, or down then up), the
// oscillation metric AIBrix reports against HPA. Equal consecutive values are not changes.
class OscillationCounter {
 public:
  void Observe(int desired);
  int direction_changes() const { return direction_changes_; }
  int scale_events() const { return scale_events_; }  // any change of the desired count

 private:
  int last_ = -1;
  int last_direction_ = 0;
  int direction_changes_ = 0;
  int scale_events_ = 0;
};

}  // namespace aicloud::fleet
