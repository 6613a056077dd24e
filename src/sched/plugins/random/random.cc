#include "sched/plugins/random/random.h"

#include "sched/placement.h"

namespace aicloud::sched {
namespace {

class RandomScore final : public ScorePlugin {
 public:
  explicit RandomScore(Handle* h) : handle_(h) {}
  std::string_view Name() const override { return "random"; }
  bool NodeLocal() const override { return false; }
  int64_t Score(CycleState& state, const PodRequest& pod, const cluster::Node& node,
                GpuPick* pick) override {
    if (pod.gpu_kind == GpuKind::kFraction && node.model >= 0) {
      uint64_t usable = UsableGpus(pod, node, handle_->model_facts()[node.model]);
      uint64_t seen = 0;
      for (int i = 0; i < node.gpu_count(); ++i) {
        if (!(usable >> i & 1)) continue;
        if (state.rng().Uniform(++seen) == 0) pick->mask = uint64_t{1} << i;
      }
    }
    // A random score per node: the best one is a uniform pick whatever the tie-break rule.
    return static_cast<int64_t>(state.rng().Uniform(uint64_t{1} << 40));
  }

 private:
  Handle* handle_;
};

}  // namespace

void RegisterRandom(Registry& r) {
  (void)r.Register("random", [](const PluginArgs& a) -> StatusOr<std::unique_ptr<Plugin>> {
    return std::unique_ptr<Plugin>(new RandomScore(a.handle));
  });
}

}  // namespace aicloud::sched
