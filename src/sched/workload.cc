#include "sched/workload.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace aicloud::sched {

bool TaskShape::AllowsModel(cluster::ModelId m) const {
  return models.empty() || std::find(models.begin(), models.end(), m) != models.end();
}

TargetWorkload BuildTargetWorkload(std::span<const PodRequest> pods, double coverage,
                                   double gpu_weight) {
  using Key = std::tuple<int64_t, int32_t, int, std::vector<cluster::ModelId>>;
  std::map<Key, double> counts;
  for (const PodRequest& p : pods) {
    std::vector<cluster::ModelId> models = p.gpu_models;
    std::sort(models.begin(), models.end());
    Key k{p.cpu_milli, p.wants_gpu() ? p.gpu_milli : 0, p.wants_gpu() ? p.gpu_count : 0,
          std::move(models)};
    double w = 1;
    if (gpu_weight > 0 && p.gpu_kind == GpuKind::kWhole) w += p.gpu_count * gpu_weight;
    counts[k] += w;
  }
  std::vector<std::pair<Key, double>> sorted(counts.begin(), counts.end());
  // Most popular first; among equals the larger shape first, so the cut is deterministic.
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
    if (a.second != b.second) return a.second > b.second;
    return a.first > b.first;
  });
  TargetWorkload w;
  double total = 0;
  for (const auto& [k, n] : counts) total += n;
  double covered = 0;
  for (const auto& [key, n] : sorted) {
    if (total > 0 && covered >= coverage * total) break;
    TaskShape s;
    s.cpu_milli = std::get<0>(key);
    s.gpu_milli = std::get<1>(key);
    s.gpu_count = std::get<2>(key);
    s.models = std::get<3>(key);
    s.weight = n;
    covered += n;
    w.shapes.push_back(std::move(s));
  }
  for (TaskShape& s : w.shapes) s.weight /= covered;
  return w;
}

}  // namespace aicloud::sched
