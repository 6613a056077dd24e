#include "sched/profile.h"

namespace aicloud::sched {

std::vector<PluginConfig> DefaultFilters() {
  return {{"node_unschedulable"}, {"lane_taints"},   {"resource_fit"},    {"gpu_model"},
          {"gpu_share"},          {"mig_placement"}, {"nvlink_topology"}, {"rack_power"}};
}

namespace {
struct PolicyDef {
  const char* policy;
  std::vector<PluginConfig> scores;
};

const std::vector<PolicyDef>& Policies() {
  static const auto* defs = new std::vector<PolicyDef>{
      {"fgd", {{"fgd", 1}}},
      {"fgd_tiered", {{"fgd", 1, {{"tiered", 1}}}}},
      {"bestfit", {{"bestfit", 1}}},
      {"packing", {{"packing", 1}}},
      {"clustering", {{"clustering", 1, {{"max_gpu_milli", 8000}}}}},
      {"dotprod", {{"dotprod", 1}}},
      {"random", {{"random", 1}}},
      {"spread", {{"spread", 1}}},
  };
  return *defs;
}
}  // namespace

std::vector<std::string> PolicyNames() {
  std::vector<std::string> out;
  for (const PolicyDef& d : Policies()) out.push_back(d.policy);
  return out;
}

StatusOr<Profile> ProfileOrPolicy(const Profile* profile, std::string_view policy) {
  if (profile != nullptr) return *profile;
  return PolicyProfile(policy);
}

StatusOr<Profile> PolicyProfile(std::string_view policy) {
  for (const PolicyDef& d : Policies()) {
    if (policy != d.policy) continue;
    Profile p;
    p.name = d.policy;
    p.plugins = DefaultFilters();
    p.plugins.insert(p.plugins.end(), d.scores.begin(), d.scores.end());
    return p;
  }
  std::string known;
  for (const PolicyDef& d : Policies()) known += (known.empty() ? "" : ", ") + std::string(d.policy);
  return InvalidArgumentError("unknown policy '" + std::string(policy) + "' (known: " + known + ")");
}

}  // namespace aicloud::sched
