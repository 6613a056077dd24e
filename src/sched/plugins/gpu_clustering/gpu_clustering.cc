#include "sched/plugins/gpu_clustering/gpu_clustering.h"

namespace aicloud::sched {
namespace {

// 0 = no GPU; -1 = fractional share; n = n whole GPUs.
int Tag(const PodRequest& p) {
  if (!p.wants_gpu()) return 0;
  if (p.gpu_kind == GpuKind::kFraction) return -1;
  return p.gpu_count;
}

class GpuClustering final : public ScorePlugin {
 public:
  GpuClustering(Handle* h, double max_gpu) : handle_(h), max_gpu_(max_gpu) {}
  std::string_view Name() const override { return "clustering"; }
  // Reads the other pods on a node, which a gang's members change between reserve and bind.
  bool NodeLocal() const override { return false; }
  int64_t Score(CycleState&, const PodRequest& pod, const cluster::Node& node, GpuPick*) override {
    if (!pod.wants_gpu()) return 0;
    // The paper's baseline measures every node against one cluster-wide maximum (8 GPUs);
    // without that parameter a node is measured against its own capacity.
    const int64_t cap = max_gpu_ > 0 ? static_cast<int64_t>(max_gpu_)
                                     : static_cast<int64_t>(node.gpu_count()) * cluster::kMilliPerGpu;
    if (cap <= 0) return 0;
    const int64_t used = cap - node.gpu_free_milli_total();
    const int64_t base = 25 * used / cap;
    const int tag = Tag(pod);
    bool has_same = false, has_other = false;
    for (int64_t uid : handle_->pods_on_node(node.id)) {
      const Placed* p = handle_->placed(uid);
      if (p == nullptr) continue;
      int t = Tag(p->pod);
      if (t == 0) continue;
      (t == tag ? has_same : has_other) = true;
    }
    if (has_same && !has_other) return base + 75;
    if (has_same) return base + 50;
    if (!has_other) return base + 25;
    return base;
  }

 private:
  Handle* handle_;
  double max_gpu_;
};

}  // namespace

void RegisterGpuClustering(Registry& r) {
  (void)r.Register("clustering", [](const PluginArgs& a) -> StatusOr<std::unique_ptr<Plugin>> {
    double gpu = 0;
    if (auto it = a.params.find("max_gpu_milli"); it != a.params.end()) gpu = it->second;
    if (gpu < 0) return InvalidArgumentError("clustering: max_gpu_milli must not be negative");
    return std::unique_ptr<Plugin>(new GpuClustering(a.handle, gpu));
  });
}

}  // namespace aicloud::sched
