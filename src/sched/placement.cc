#include "sched/placement.h"

#include <bit>
#include <map>

namespace aicloud::sched {
namespace {

int MigProfileIndex(const PodRequest& pod, const ModelFacts& facts) {
  if (facts.mig == nullptr) return -1;
  return cluster::FindMigProfile(*facts.mig, pod.mig_profile);
}

}  // namespace

uint64_t UsableGpus(const PodRequest& pod, const cluster::Node& node, const ModelFacts& facts) {
  uint64_t mask = 0;
  const int n = node.gpu_count();
  switch (pod.gpu_kind) {
    case GpuKind::kNone:
      return 0;
    case GpuKind::kWhole:
      for (int i = 0; i < n; ++i) {
        if (node.gpus[i].whole_free()) mask |= uint64_t{1} << i;
      }
      return mask;
    case GpuKind::kFraction:
      for (int i = 0; i < n; ++i) {
        const cluster::Gpu& g = node.gpus[i];
        if (!g.mig_active() && g.free_milli >= pod.gpu_milli && g.mem_free_mib >= pod.gpu_mem_mib) {
          mask |= uint64_t{1} << i;
        }
      }
      return mask;
    case GpuKind::kMig: {
      int profile = MigProfileIndex(pod, facts);
      if (profile < 0) return 0;
      for (int i = 0; i < n; ++i) {
        const cluster::Gpu& g = node.gpus[i];
        // A GPU shared by time-sliced work cannot be partitioned until it drains.
        if (!g.mig_active() && g.free_milli != cluster::kMilliPerGpu) continue;
        if (cluster::FindMigStart(*facts.mig, profile, g.mig_used_mask, g.mig_compute_used) >= 0) {
          mask |= uint64_t{1} << i;
        }
      }
      return mask;
    }
  }
  return 0;
}

bool GpusFit(const PodRequest& pod, const cluster::Node& node, const ModelFacts& facts) {
  if (!pod.wants_gpu()) return true;
  uint64_t usable = UsableGpus(pod, node, facts);
  if (std::popcount(usable) < pod.gpu_count) return false;
  if (pod.topology != Topology::kNvlink || pod.gpu_count <= 1) return true;
  // All GPUs in one NVLink domain of this node.
  std::map<int32_t, int> per_domain;
  for (int i = 0; i < node.gpu_count(); ++i) {
    if ((usable >> i & 1) && node.gpus[i].nvlink_domain >= 0) {
      if (++per_domain[node.gpus[i].nvlink_domain] >= pod.gpu_count) return true;
    }
  }
  return false;
}

GpuPick DefaultPick(const PodRequest& pod, const cluster::Node& node, const ModelFacts& facts) {
  GpuPick pick;
  uint64_t usable = UsableGpus(pod, node, facts);
  switch (pod.gpu_kind) {
    case GpuKind::kNone:
      return pick;
    case GpuKind::kFraction: {
      int best = -1;
      for (int i = 0; i < node.gpu_count(); ++i) {
        if (!(usable >> i & 1)) continue;
        if (best < 0 || node.gpus[i].free_milli < node.gpus[best].free_milli) best = i;
      }
      if (best >= 0) pick.mask = uint64_t{1} << best;
      return pick;
    }
    case GpuKind::kWhole: {
      if (pod.topology == Topology::kNvlink && pod.gpu_count > 1) {
        // The domain with the fewest usable GPUs that still holds the request keeps larger
        // domains whole for larger requests.
        std::map<int32_t, uint64_t> by_domain;
        for (int i = 0; i < node.gpu_count(); ++i) {
          if ((usable >> i & 1) && node.gpus[i].nvlink_domain >= 0) {
            by_domain[node.gpus[i].nvlink_domain] |= uint64_t{1} << i;
          }
        }
        uint64_t best = 0;
        for (const auto& [domain, m] : by_domain) {
          if (std::popcount(m) >= pod.gpu_count &&
              (best == 0 || std::popcount(m) < std::popcount(best))) {
            best = m;
          }
        }
        usable = best;
      }
      for (int i = 0, taken = 0; i < node.gpu_count() && taken < pod.gpu_count; ++i) {
        if (usable >> i & 1) {
          pick.mask |= uint64_t{1} << i;
          ++taken;
        }
      }
      return pick;
    }
    case GpuKind::kMig: {
      int profile = MigProfileIndex(pod, facts);
      int best = -1;
      for (int i = 0; i < node.gpu_count(); ++i) {
        if (!(usable >> i & 1)) continue;
        // Prefer a GPU that is already partitioned, and among those the fullest.
        if (best < 0 ||
            std::popcount(node.gpus[i].mig_used_mask) > std::popcount(node.gpus[best].mig_used_mask)) {
          best = i;
        }
      }
      if (best >= 0) {
        const cluster::Gpu& g = node.gpus[best];
        pick.mask = uint64_t{1} << best;
        pick.mig_start = static_cast<int8_t>(
            cluster::FindMigStart(*facts.mig, profile, g.mig_used_mask, g.mig_compute_used));
      }
      return pick;
    }
  }
  return pick;
}

double PlacementPowerKw(const PodRequest& pod, const ModelFacts& facts) {
  if (!pod.wants_gpu() || facts.spec == nullptr) return 0;
  double share = pod.gpu_kind == GpuKind::kFraction
                     ? static_cast<double>(pod.gpu_milli) / cluster::kMilliPerGpu
                     : static_cast<double>(pod.gpu_count);
  if (pod.gpu_kind == GpuKind::kMig && facts.mig != nullptr) {
    int p = cluster::FindMigProfile(*facts.mig, pod.mig_profile);
    if (p >= 0) share = facts.mig->profiles[p].compute_slices / 7.0;
  }
  return share * facts.spec->tdp_w / 1000.0;
}

cluster::Allocation MakeAllocation(const PodRequest& pod, const cluster::Node& node,
                                   const GpuPick& pick, const ModelFacts& facts) {
  cluster::Allocation a;
  a.node = node.id;
  a.cpu_milli = pod.cpu_milli;
  a.mem_mib = pod.mem_mib;
  a.power_kw = PlacementPowerKw(pod, facts);
  for (int i = 0; i < node.gpu_count(); ++i) {
    if (!(pick.mask >> i & 1)) continue;
    cluster::GpuShare s;
    s.gpu = static_cast<int16_t>(i);
    if (pod.gpu_kind == GpuKind::kMig) {
      int p = MigProfileIndex(pod, facts);
      const cluster::MigProfile& prof = facts.mig->profiles[p];
      s.mig_profile = static_cast<int8_t>(p);
      s.mig_start = pick.mig_start;
      s.mig_slices = static_cast<int8_t>(prof.memory_slices);
      s.mig_compute = static_cast<int8_t>(prof.compute_slices);
      s.milli = cluster::kMilliPerGpu * prof.compute_slices / 7;
    } else {
      s.milli = pod.gpu_milli;
      s.mem_mib = pod.gpu_kind == GpuKind::kFraction ? pod.gpu_mem_mib : 0;
    }
    a.gpus.push_back(s);
  }
  return a;
}

}  // namespace aicloud::sched
