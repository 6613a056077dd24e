#include "sim/fgd_experiment.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/rng.h"
#include "sched/plugins/fgd/fgd.h"
#include "sched/registry.h"
#include "sched/scheduler.h"

namespace aicloud::sim {

FgdExperiment::FgdExperiment(const cluster::Cluster& cluster, std::vector<TracePod> pods,
                             std::string workload)
    : cluster_(cluster), workload_(std::move(workload)) {
  pods_.reserve(pods.size());
  for (TracePod& tp : pods) pods_.push_back(std::move(tp.pod));
  std::stable_sort(pods_.begin(), pods_.end(),
                   [](const sched::PodRequest& a, const sched::PodRequest& b) { return a.name < b.name; });
  target_ = sched::BuildTargetWorkload(pods_, 0.95);
}

std::vector<sched::PodRequest> FgdExperiment::Arrivals(uint64_t seed, double inflate) const {
  Rng rng(seed);
  std::vector<sched::PodRequest> list = pods_;
  for (size_t i = list.size(); i > 1; --i) std::swap(list[i - 1], list[rng.Uniform(i)]);
  const double target = inflate * static_cast<double>(cluster_.total_gpu_milli());
  double total = 0;
  for (const sched::PodRequest& p : list) total += static_cast<double>(p.total_gpu_milli());
  int64_t next_uid = 0;
  for (const sched::PodRequest& p : pods_) next_uid = std::max(next_uid, p.uid);
  bool any_gpu = false;
  for (const sched::PodRequest& p : pods_) any_gpu = any_gpu || p.wants_gpu();
  // Copies of CPU-only pods add no GPU demand: without any GPU pod the target is unreachable.
  if (total < target && any_gpu) {
    // Copies go after the shuffled originals. The stop test adds the per-GPU share of the
    // sampled pod (as the paper's artifact does), so a multi-GPU copy may overshoot slightly.
    for (int64_t i = 0;; ++i) {
      const sched::PodRequest& src = pods_[rng.Uniform(pods_.size())];
      const double step = src.wants_gpu() ? src.gpu_milli : 0;
      if (total + step > target) break;
      total += static_cast<double>(src.total_gpu_milli());
      sched::PodRequest copy = src;
      copy.uid = ++next_uid;
      copy.name = src.name + "-tuned-" + std::to_string(i);
      list.push_back(std::move(copy));
    }
  } else {
    while (total > target && !list.empty()) {
      size_t k = rng.Uniform(list.size());
      total -= static_cast<double>(list[k].total_gpu_milli());
      list.erase(list.begin() + static_cast<std::ptrdiff_t>(k));
    }
  }
  return list;
}

StatusOr<FgdRun> FgdExperiment::Run(const FgdConfig& config) const {
  if (!(config.inflate > 0) || config.inflate > 10) {
    return InvalidArgumentError("inflate must be in (0, 10], got " + std::to_string(config.inflate));
  }
  if (!(config.coverage > 0) || config.coverage > 1) {
    return InvalidArgumentError("coverage must be in (0, 1], got " + std::to_string(config.coverage));
  }
  if (config.gpu_weight < 0) return InvalidArgumentError("gpu_weight must not be negative");
  StatusOr<sched::Profile> resolved = sched::ProfileOrPolicy(config.profile, config.policy);
  if (!resolved.ok()) return resolved.status();
  const sched::Profile profile = std::move(*resolved);
  cluster::Cluster cluster;
  if (config.shuffle_nodes) {
    std::vector<int32_t> order(cluster_.nodes().size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
    Rng node_rng(config.seed ^ 0x6e6f646573ULL);
    for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[node_rng.Uniform(i)]);
    for (const std::string& m : cluster_.models()) cluster.InternModel(m);
    for (const cluster::Rack& r : cluster_.racks()) cluster.AddRack(r);
    for (int32_t id : order) cluster.AddNode(cluster_.node(id));
  } else {
    cluster = cluster_;
  }
  const double capacity = static_cast<double>(cluster.total_gpu_milli());
  if (capacity <= 0) return FailedPreconditionError("the cluster has no GPUs");
  sched::SchedulerOptions opts;
  opts.seed = config.seed;
  opts.workload = (config.coverage == 0.95 && config.gpu_weight == 0)
                      ? target_
                      : sched::BuildTargetWorkload(pods_, config.coverage, config.gpu_weight);
  opts.tie_break = config.tie_break;
  StatusOr<std::unique_ptr<sched::Scheduler>> sched =
      sched::Scheduler::Create(&cluster, profile, sched::Registry::BuiltIn(), opts);
  if (!sched.ok()) return sched.status();

  std::vector<sched::PodRequest> arrivals = Arrivals(config.seed, config.inflate);

  // Fragmentation is kept per node and updated only where a pod lands.
  std::vector<double> frag(cluster.nodes().size());
  std::vector<int32_t> free;
  const sched::FragmentationModel frag_model(target_);
  auto node_frag = [&](const cluster::Node& n) {
    free.clear();
    for (const cluster::Gpu& g : n.gpus) free.push_back(g.free_milli);
    return frag_model.Of(n.cpu_free_milli, free, n.model);
  };
  double frag_sum = 0;
  for (const cluster::Node& n : cluster.nodes()) frag_sum += frag[n.id] = node_frag(n);
  int64_t allocated = cluster.allocated_gpu_milli();

  const int x_max = static_cast<int>(std::lround(config.inflate * 100));
  std::vector<double> sum_alloc(x_max + 2, 0), sum_amount(x_max + 2, 0), sum_ratio(x_max + 2, 0);
  std::vector<int64_t> count(x_max + 2, 0);

  FgdRun run;
  run.policy = profile.name.empty() ? config.policy : profile.name;
  run.seed = config.seed;
  run.workload = workload_;
  run.pods = static_cast<int64_t>(arrivals.size());
  double arrived = 0;
  auto start = std::chrono::steady_clock::now();
  for (sched::PodRequest& pod : arrivals) {
    arrived += static_cast<double>(pod.total_gpu_milli());
    sched::ScheduleResult r = (*sched)->ScheduleOne(std::move(pod));
    if (r.placed) {
      ++run.placed;
      const cluster::Node& n = cluster.node(r.node);
      for (const cluster::GpuShare& s : r.alloc.gpus) allocated += s.milli;
      double f = node_frag(n);
      frag_sum += f - frag[n.id];
      frag[n.id] = f;
    } else {
      ++run.failed;
    }
    const int x = static_cast<int>(std::lround(arrived / capacity * 100));
    if (x < 0 || x > x_max + 1) continue;
    const double idle = capacity - static_cast<double>(allocated);
    sum_alloc[x] += static_cast<double>(allocated) / capacity * 100;
    sum_amount[x] += frag_sum / capacity * 100;
    sum_ratio[x] += idle > 0 ? frag_sum / idle * 100 : 0;
    ++count[x];
  }
  run.schedule_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  CurvePoint last;
  for (int x = 0; x <= x_max; ++x) {
    int src = x;
    if (count[src] == 0 && x > 0 && count[x - 1] > 0) src = x - 1;
    if (count[src] == 0 && count[x + 1] > 0) src = x + 1;
    CurvePoint p = last;
    p.arrived_pct = x;
    if (count[src] > 0) {
      const double c = static_cast<double>(count[src]);
      p.allocation_pct = sum_alloc[src] / c;
      p.frag_amount_pct = sum_amount[src] / c;
      p.frag_ratio_pct = sum_ratio[src] / c;
    }
    run.curve.push_back(p);
    last = p;
  }
  run.final_allocation_pct = run.curve.empty() ? 0 : run.curve.back().allocation_pct;
  return run;
}

FgdRun MeanRun(const std::vector<FgdRun>& runs) {
  FgdRun mean;
  if (runs.empty()) return mean;
  mean = runs[0];
  const double n = static_cast<double>(runs.size());
  mean.final_allocation_pct = 0;
  mean.pods = mean.placed = mean.failed = 0;
  mean.schedule_seconds = 0;
  for (CurvePoint& p : mean.curve) p.allocation_pct = p.frag_amount_pct = p.frag_ratio_pct = 0;
  for (const FgdRun& r : runs) {
    mean.final_allocation_pct += r.final_allocation_pct / n;
    mean.pods += r.pods;
    mean.placed += r.placed;
    mean.failed += r.failed;
    mean.schedule_seconds += r.schedule_seconds / n;
    for (size_t i = 0; i < mean.curve.size() && i < r.curve.size(); ++i) {
      mean.curve[i].allocation_pct += r.curve[i].allocation_pct / n;
      mean.curve[i].frag_amount_pct += r.curve[i].frag_amount_pct / n;
      mean.curve[i].frag_ratio_pct += r.curve[i].frag_ratio_pct / n;
    }
  }
  mean.pods /= static_cast<int64_t>(runs.size());
  mean.placed /= static_cast<int64_t>(runs.size());
  mean.failed /= static_cast<int64_t>(runs.size());
  return mean;
}

}  // namespace aicloud::sim
