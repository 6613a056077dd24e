#include "fleet/snapshot.h"

#include <algorithm>

namespace aicloud::fleet {

double DeploymentSnapshot::InFlight() const {
  double total = pending_requests;
  for (const ReplicaMetrics& r : replicas) total += r.running + r.waiting;
  return total;
}

double DeploymentSnapshot::WorstTtftMs() const {
  double worst = 0;
  for (const ReplicaMetrics& r : replicas) worst = std::max(worst, r.ttft_p99_ms);
  return worst;
}

double DeploymentSnapshot::MeanKvUsage() const {
  if (replicas.empty()) return 0;
  double sum = 0;
  for (const ReplicaMetrics& r : replicas) sum += r.kv_usage;
  return sum / static_cast<double>(replicas.size());
}

int DeploymentSnapshot::TotalWaiting() const {
  int total = pending_requests;
  for (const ReplicaMetrics& r : replicas) total += r.waiting;
  return total;
}

}  // namespace aicloud::fleet
