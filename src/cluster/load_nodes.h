// LoadNodes: one entry point for every node-list format the project reads — an operator
// inventory in YAML (`.yaml`/`.yml`, see docs/inventory.md) or an openb node-list CSV (anything
// else). Errors name the file and line.
#pragma once

#include <string>

#include "cluster/cluster.h"

namespace aicloud::cluster {

StatusOr<Cluster> LoadNodes(const std::string& path);

}  // namespace aicloud::cluster
