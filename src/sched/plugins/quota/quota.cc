#include "sched/plugins/quota/quota.h"

#include <string>
#include <vector>

#include "sched/quota/quota.h"

namespace aicloud::sched {
namespace {

class Quota final : public PreFilterPlugin, public FilterPlugin, public ReservePlugin {
 public:
  Quota(Handle* h, QuotaManager* q) : handle_(h), quotas_(q) {}
  std::string_view Name() const override { return "quota"; }
  // Answers depend on queue usage, which changes without any node changing.
  bool NodeLocal() const override { return false; }

  PluginStatus PreFilter(CycleState&, const PodRequest& pod) override {
    if (!Accounted(pod)) return PluginStatus::Ok();
    std::string why;
    if (!quotas_->HasQueue(pod.queue)) {
      PluginStatus st = PluginStatus::Unresolvable("unknown queue");
      st.detail = "queue " + pod.queue + " is not defined";
      return st;
    }
    if (!pod.wants_gpu()) {
      if (quotas_->FitsPod(pod, "", &why)) return PluginStatus::Ok();
      return Insufficient(std::move(why));
    }
    // Any allowed GPU model the queue has room for will do; Filter then keeps only those nodes.
    std::vector<std::string> allowed;
    const cluster::Cluster& c = handle_->cluster();
    if (pod.gpu_models.empty()) {
      allowed = c.models();
    } else {
      for (cluster::ModelId m : pod.gpu_models) {
        if (m >= 0 && static_cast<size_t>(m) < c.models().size()) allowed.push_back(c.model_name(m));
      }
    }
    std::string reasons;
    bool declared = false;
    for (const std::string& flavor : allowed) {
      if (!quotas_->Declares(pod.queue, flavor)) continue;
      declared = true;
      if (quotas_->FitsPod(pod, flavor, &why)) return PluginStatus::Ok();
      reasons += (reasons.empty() ? "" : "; ") + why;
    }
    if (!declared) {
      // No eviction can create quota the queue was never given.
      PluginStatus st = PluginStatus::Unresolvable("no quota for the allowed GPU models");
      st.detail = "queue " + pod.queue + " declares none of";
      for (size_t i = 0; i < allowed.size(); ++i) st.detail += (i ? ", " : " ") + allowed[i];
      if (allowed.empty()) st.detail += " (the cluster has no GPU models)";
      return st;
    }
    return Insufficient(std::move(reasons));
  }

  PluginStatus Filter(CycleState&, const PodRequest& pod, const cluster::Node& node) const override {
    if (!Accounted(pod)) return PluginStatus::Ok();
    if (!quotas_->HasQueue(pod.queue)) return PluginStatus::Unresolvable("unknown queue");
    std::string_view flavor;
    if (pod.wants_gpu()) {
      if (node.model == cluster::kNoModel) return PluginStatus::Ok();  // gpu filters reject it
      flavor = handle_->cluster().model_name(node.model);
      if (!quotas_->Declares(pod.queue, flavor)) {
        return PluginStatus::Unresolvable("queue has no quota for this GPU model");
      }
    }
    if (quotas_->FitsPod(pod, flavor, nullptr)) return PluginStatus::Ok();
    return PluginStatus::Unschedulable("queue quota exhausted for this GPU model");
  }

  PluginStatus Reserve(CycleState&, const PodRequest& pod,
                       const cluster::Allocation& alloc) override {
    if (!Accounted(pod)) return PluginStatus::Ok();
    const std::string flavor = FlavorOf(pod, alloc);
    std::string why;
    // Re-checked here because gang members reserve one after another in one cycle.
    if (!quotas_->FitsPod(pod, flavor, &why)) return Insufficient(std::move(why));
    Status st = quotas_->ChargePod(pod, flavor);
    if (!st.ok()) return PluginStatus::Error(st.message());
    return PluginStatus::Ok();
  }

  void Unreserve(CycleState&, const PodRequest& pod, const cluster::Allocation& alloc) override {
    if (!Accounted(pod)) return;
    (void)quotas_->UnchargePod(pod, FlavorOf(pod, alloc));
  }

 private:
  bool Accounted(const PodRequest& pod) const { return quotas_ != nullptr && !pod.queue.empty(); }

  std::string FlavorOf(const PodRequest& pod, const cluster::Allocation& alloc) const {
    return pod.wants_gpu() ? NodeFlavor(handle_->cluster(), alloc.node) : std::string();
  }

  static PluginStatus Insufficient(std::string why) {
    PluginStatus st = PluginStatus::Unschedulable("insufficient quota");
    st.detail = std::move(why);
    return st;
  }

  Handle* handle_;
  QuotaManager* quotas_;
};

}  // namespace

void RegisterQuota(Registry& r) {
  (void)r.Register("quota", [](const PluginArgs& a) -> StatusOr<std::unique_ptr<Plugin>> {
    return std::unique_ptr<Plugin>(new Quota(a.handle, a.quotas));
  });
}

}  // namespace aicloud::sched
