// Loader for the node list of the Alibaba GPU cluster trace v2023 ("openb", used by the FGD
// paper): columns sn, cpu_milli, memory_mib, gpu, model. Each row becomes one Node; GPU memory
// comes from the catalog when the model is known there, else 0 (G2/G3 are undisclosed models).
//
//   StatusOr<Cluster> c = LoadOpenbNodes("data/traces/alibaba-gpu-v2023/openb_node_list_gpu_node.csv");
#pragma once

#include <string>
#include <string_view>

#include "cluster/cluster.h"
#include "core/csv.h"

namespace aicloud::cluster {

StatusOr<Cluster> LoadOpenbNodes(const std::string& path);
StatusOr<Cluster> ParseOpenbNodes(const CsvTable& table);

}  // namespace aicloud::cluster
