#include "cluster/load_nodes.h"

#include <algorithm>
#include <cctype>

#include "cluster/inventory.h"
#include "cluster/openb.h"

namespace aicloud::cluster {

StatusOr<Cluster> LoadNodes(const std::string& path) {
  std::string lower = path;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  auto ends_with = [&](const std::string& suffix) {
    return lower.size() >= suffix.size() &&
           lower.compare(lower.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  if (ends_with(".yaml") || ends_with(".yml")) return LoadInventoryFile(path);
  return LoadOpenbNodes(path);
}

}  // namespace aicloud::cluster
