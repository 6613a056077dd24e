#include "fleet/autoscaler.h"

#include <algorithm>

#include "fleet/hpa.h"
#include "fleet/kpa.h"
#include "fleet/slo_autoscaler.h"

namespace aicloud::fleet {

double ConcurrencyTarget(double configured, const ReplicaCapacity& capacity) {
  if (configured > 0) return configured;
  return std::max(0.7 * capacity.max_concurrency, 1e-9);
}

void OscillationCounter::Observe(int desired) {
  if (last_ >= 0 && desired != last_) {
    const int direction = desired > last_ ? 1 : -1;
    if (last_direction_ != 0 && direction != last_direction_) ++direction_changes_;
    last_direction_ = direction;
    ++scale_events_;
  }
  last_ = desired;
}

std::vector<std::string> AutoscalerNames() { return {"hpa", "kpa", "aibrix", "ours"}; }

StatusOr<std::unique_ptr<Autoscaler>> MakeAutoscaler(std::string_view policy, const ScaleBounds& bounds) {
  if (bounds.min_replicas < 0 || bounds.max_replicas < std::max(bounds.min_replicas, 1)) {
    return InvalidArgumentError("replica bounds: need 0 <= min <= max and max >= 1");
  }
  if (policy == "hpa") {
    HpaConfig c;
    c.bounds = bounds;
    return std::unique_ptr<Autoscaler>(std::make_unique<HpaAutoscaler>(c));
  }
  if (policy == "kpa") {
    KpaConfig c = KpaConfig::Knative();
    c.bounds = bounds;
    return std::unique_ptr<Autoscaler>(std::make_unique<KpaAutoscaler>(c));
  }
  if (policy == "aibrix") {
    KpaConfig c = KpaConfig::Aibrix();
    c.bounds = bounds;
    return std::unique_ptr<Autoscaler>(std::make_unique<KpaAutoscaler>(c));
  }
  if (policy == "ours") {
    SloAutoscalerConfig c;
    c.bounds = bounds;
    return std::unique_ptr<Autoscaler>(std::make_unique<SloAutoscaler>(c));
  }
  return InvalidArgumentError("unknown autoscaling policy '" + std::string(policy) +
                              "' (known: hpa, kpa, aibrix, ours)");
}

}  // namespace aicloud::fleet
