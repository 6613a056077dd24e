// Profile: which plugins a scheduler runs, in which order, with which score weights.
//
//   Profile p = PolicyProfile("fgd").value();   // default filters + the FGD score
//   p.plugins.push_back({"rack_power", 1});
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace aicloud::sched {

struct PluginConfig {
  std::string name;
  int64_t weight = 1;                    // used by score plugins
  std::map<std::string, double> params;  // plugin-specific knobs
};

struct Profile {
  std::string name;
  std::vector<PluginConfig> plugins;  // order is the order at each extension point
};

// The filters every profile starts with: node_unschedulable, lane_taints, resource_fit,
// gpu_model, gpu_share, mig_placement, nvlink_topology, rack_power.
std::vector<PluginConfig> DefaultFilters();

// Default filters + one placement policy's score plugin. Policies: fgd, bestfit, packing,
// clustering, dotprod, random, spread, and the project's own (see docs/scheduler.md).
StatusOr<Profile> PolicyProfile(std::string_view policy);
// `*profile` when given, else PolicyProfile(policy): how a caller that accepts either resolves it.
StatusOr<Profile> ProfileOrPolicy(const Profile* profile, std::string_view policy);
// Names accepted by PolicyProfile.
std::vector<std::string> PolicyNames();

}  // namespace aicloud::sched
