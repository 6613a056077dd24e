#include "sched/plugins/fgd/fgd.h"

#include <algorithm>
#include <array>
#include <cmath>

namespace aicloud::sched {

FragmentationModel::FragmentationModel(const TargetWorkload& w) {
  for (const TaskShape& m : w.shapes) {
    Shape s;
    s.cpu_milli = m.cpu_milli;
    s.gpu_count = m.gpu_count;
    s.weight = m.weight;
    s.level = -1;
    if (m.gpu_milli > 0) {
      auto it = std::find(levels_.begin(), levels_.end(), m.gpu_milli);
      s.level = static_cast<int>(it - levels_.begin());
      if (it == levels_.end()) levels_.push_back(m.gpu_milli);
    }
    s.models = ~uint64_t{0};
    if (!m.models.empty()) {
      s.models = 0;
      for (cluster::ModelId id : m.models) {
        if (id >= 0 && id < 64) s.models |= uint64_t{1} << id;
      }
    }
    shapes_.push_back(s);
  }
}

double FragmentationModel::Of(int64_t cpu_free, std::span<const int32_t> gpu_free,
                              cluster::ModelId model) const {
  int64_t total = 0;
  for (int32_t f : gpu_free) total += f;
  if (total == 0) return 0;
  // Per distinct demand: how many GPUs could serve it, and the slivers too small for it.
  std::array<int32_t, 64> fitting{};
  std::array<int64_t, 64> slivers{};
  const size_t levels = std::min<size_t>(levels_.size(), 64);
  for (size_t l = 0; l < levels; ++l) {
    for (int32_t g : gpu_free) {
      if (g >= levels_[l]) {
        ++fitting[l];
      } else {
        slivers[l] += g;
      }
    }
  }
  const uint64_t model_bit = model >= 0 && model < 64 ? uint64_t{1} << model : 0;
  double frag = 0;
  for (const Shape& m : shapes_) {
    int64_t f = total;
    if (m.level >= 0 && static_cast<size_t>(m.level) < levels && (m.models == ~uint64_t{0} || (m.models & model_bit)) &&
        cpu_free >= m.cpu_milli && fitting[m.level] >= m.gpu_count) {
      f = slivers[m.level];
    }
    frag += m.weight * static_cast<double>(f);
  }
  return frag;
}

double NodeFragmentation(const TargetWorkload& w, int64_t cpu_free,
                         std::span<const int32_t> gpu_free, cluster::ModelId model) {
  int64_t total = 0;
  for (int32_t f : gpu_free) total += f;
  if (total == 0) return 0;
  double frag = 0;
  for (const TaskShape& m : w.shapes) {
    int64_t f = total;  // unless m fits: everything free is a fragment for m
    if (m.gpu_milli > 0 && m.AllowsModel(model) && cpu_free >= m.cpu_milli) {
      int fitting = 0;
      int64_t slivers = 0;
      for (int32_t g : gpu_free) {
        if (g >= m.gpu_milli) {
          ++fitting;
        } else {
          slivers += g;
        }
      }
      if (fitting >= m.gpu_count) f = slivers;
    }
    frag += m.weight * static_cast<double>(f);
  }
  return frag;
}

double ClusterFragmentation(const TargetWorkload& w, const cluster::Cluster& c) {
  const FragmentationModel model(w);
  double sum = 0;
  std::vector<int32_t> free;
  for (const cluster::Node& n : c.nodes()) {
    free.clear();
    for (const cluster::Gpu& g : n.gpus) free.push_back(g.free_milli);
    sum += model.Of(n.cpu_free_milli, free, n.model);
  }
  return sum;
}

namespace {

constexpr int kMaxGpus = 64;

class Fgd final : public ScorePlugin {
 public:
  Fgd(const TargetWorkload* w, double resolution, bool tiered)
      : model_(*w), resolution_(resolution), tiered_(tiered) {}
  std::string_view Name() const override { return "fgd"; }

  int64_t Score(CycleState& state, const PodRequest& pod, const cluster::Node& node,
                GpuPick* pick) override {
    const int64_t s = FgdScore(state, pod, node, pick);
    if (!tiered_) return s;
    return s * 512 + TieTier(pod, node);
  }

  // Orders placements FGD rates equal (0..400): a fractional request first goes where GPUs are
  // already shared; a whole-GPU request that takes exactly the node's idle GPUs strands none;
  // then every request prefers a node already in use with the fewest whole idle GPUs, so idle
  // GPUs stay together on few nodes and idle nodes stay whole.
  static int64_t TieTier(const PodRequest& pod, const cluster::Node& node) {
    int idle = 0;
    bool shared = false;
    for (const cluster::Gpu& g : node.gpus) {
      idle += g.whole_free() ? 1 : 0;
      shared = shared || (!g.mig_active() && g.free_milli > 0 && g.free_milli < cluster::kMilliPerGpu);
    }
    int64_t tier = (pod.gpu_kind == GpuKind::kFraction && shared) ? 200 : 0;
    if (pod.gpu_kind == GpuKind::kWhole && idle == pod.gpu_count) tier += 100;
    if (node.pods > 0) tier += 100 - std::min(idle, 99);
    return tier;
  }

  int64_t FgdScore(CycleState&, const PodRequest& pod, const cluster::Node& node, GpuPick* pick) {
    if (pod.cpu_milli == 0 && !pod.wants_gpu()) return Scale(0, /*maximal=*/true);
    const int n = node.gpu_count();
    std::array<int32_t, kMaxGpus> free{};
    for (int i = 0; i < n; ++i) free[i] = node.gpus[i].free_milli;
    std::span<int32_t> view(free.data(), n);
    const double before = Before(node, view);
    const int64_t cpu_after = node.cpu_free_milli - pod.cpu_milli;

    if (pod.gpu_kind == GpuKind::kFraction) {
      int64_t best = -1;
      int best_gpu = -1;
      uint64_t tried = 0;  // GPUs with equal free share give equal scores: try each value once
      for (int i = 0; i < n; ++i) {
        const cluster::Gpu& g = node.gpus[i];
        if (g.mig_active() || g.free_milli < pod.gpu_milli || g.mem_free_mib < pod.gpu_mem_mib) continue;
        bool seen = false;
        for (int j = 0; j < i && !seen; ++j) {
          seen = (tried >> j & 1) && node.gpus[j].free_milli == g.free_milli &&
                 node.gpus[j].mem_free_mib == g.mem_free_mib;
        }
        if (seen) continue;
        tried |= uint64_t{1} << i;
        free[i] -= pod.gpu_milli;
        double after = model_.Of(cpu_after, view, node.model);
        free[i] += pod.gpu_milli;
        int64_t s = Scale(before - after, false);
        if (s > best) {
          best = s;
          best_gpu = i;
        }
      }
      if (best_gpu >= 0) pick->mask = uint64_t{1} << best_gpu;
      return best < 0 ? 0 : best;
    }
    // Whole GPUs (and CPU-only work): take the request from the GPUs with the least free that
    // still fit, as the placement itself will (lowest index among equals).
    if (pod.wants_gpu() && pod.gpu_kind == GpuKind::kWhole) {
      int taken = 0;
      for (int i = 0; i < n && taken < pod.gpu_count; ++i) {
        if (node.gpus[i].whole_free()) {
          free[i] -= cluster::kMilliPerGpu;
          ++taken;
        }
      }
    }
    double after = model_.Of(cpu_after, view, node.model);
    return Scale(before - after, false);
  }

 private:
  int64_t Scale(double delta_milli, bool maximal) const {
    if (maximal) return static_cast<int64_t>(resolution_);
    double s = 1.0 / (1.0 + std::exp(-delta_milli / 1000.0));
    return static_cast<int64_t>(s * resolution_);
  }

  // F before the placement, cached per node version: every request shape reuses it.
  double Before(const cluster::Node& node, std::span<const int32_t> free) {
    if (cache_.size() <= static_cast<size_t>(node.id)) cache_.resize(node.id + 1, {0, 0});
    auto& [version_plus_one, value] = cache_[node.id];
    if (version_plus_one != node.version + 1) {
      value = model_.Of(node.cpu_free_milli, free, node.model);
      version_plus_one = node.version + 1;
    }
    return value;
  }

  FragmentationModel model_;
  double resolution_;
  bool tiered_;
  std::vector<std::pair<uint64_t, double>> cache_;
};

}  // namespace

void RegisterFgd(Registry& r) {
  (void)r.Register("fgd", [](const PluginArgs& a) -> StatusOr<std::unique_ptr<Plugin>> {
    if (a.workload == nullptr || a.workload->shapes.empty()) {
      return FailedPreconditionError("fgd: needs a target workload (typical task shapes)");
    }
    double resolution = 100;
    if (auto it = a.params.find("resolution"); it != a.params.end()) resolution = it->second;
    if (resolution < 1 || resolution > 1e9) {
      return InvalidArgumentError("fgd: resolution must be in [1, 1e9]");
    }
    bool tiered = false;
    if (auto it = a.params.find("tiered"); it != a.params.end()) tiered = it->second != 0;
    return std::unique_ptr<Plugin>(new Fgd(a.workload, resolution, tiered));
  });
}

}  // namespace aicloud::sched
