// Registry: plugin names to factories. Every built-in plugin is registered in registry.cc, the
// one place that lists them; profiles refer to plugins by these names.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "sched/framework.h"
#include "sched/workload.h"

namespace aicloud::sched {

class QuotaManager;

// What a factory may use to build a plugin.
struct PluginArgs {
  Handle* handle = nullptr;                    // outlives the plugin
  const TargetWorkload* workload = nullptr;    // expected task shapes; may be null
  uint64_t seed = 0;
  std::map<std::string, double> params;        // plugin-specific knobs from the profile
  QuotaManager* quotas = nullptr;              // tenant queues; may be null; outlives the plugin
};

using PluginFactory = std::function<StatusOr<std::unique_ptr<Plugin>>(const PluginArgs&)>;

class Registry {
 public:
  // The registry with every built-in plugin.
  static const Registry& BuiltIn();

  Status Register(const std::string& name, PluginFactory factory);
  StatusOr<std::unique_ptr<Plugin>> Create(const std::string& name, const PluginArgs& args) const;
  std::vector<std::string> Names() const;

 private:
  std::map<std::string, PluginFactory> factories_;
};

}  // namespace aicloud::sched
