// The node an agent registers with the server: its CPU, memory, GPUs and their topology, as the
// JSON of the server's Node spec. Two sources:
//
//   // A declared node (simulated hardware, or an operator who prefers the inventory file): the
//   // node named `node_name` of a cluster/inventory YAML file ("" = the file's only node).
//   StatusOr<nlohmann::json> spec = NodeSpecFromInventory("examples/inventory.yaml", "h100-0");
//
//   // The real host: hostname, CPUs and MemTotal, plus what NVML reports (nullptr = CPU-only).
//   StatusOr<std::unique_ptr<GpuDiscovery>> nvml = GpuDiscovery::Open();
//   StatusOr<nlohmann::json> spec = NodeSpecFromDiscovery(nvml.ok() ? nvml->get() : nullptr);
//
// Shape (fields with no value, e.g. a GPU's pcieSwitch or a node's rack, are left out):
//   {"name": "h100-0",                        // the node's name (metadata.name on the server)
//    "cpuMillis": 112000, "memoryBytes": 2199023255552,
//    "gpus": [{"index": 0, "model": "H100-SXM", "uuid": "GPU-sim-h100-0-0",
//              "memoryBytes": 85899345920, "numa": 0, "nvlinkDomain": 3, "pcieSwitch": 0,
//              "migEnabled": false}],
//    "labels": {"zone": "a"}, "taints": [{"key": "dedicated", "value": "training",
//                                         "effect": "NoSchedule"}],
//    "rack": "rack-a1", "pool": "training", "unschedulable": false}
// Declared GPUs get stable fake UUIDs "GPU-sim-<node>-<index>"; their nvlinkDomain is the
// inventory's cluster-wide id. Discovered GPUs carry their real UUID, "pciBusId", "nvmlName"
// (the product name) and a node-local nvlinkDomain (the lowest GPU index of each set of GPUs
// joined by NVLink; left out for a GPU with no NVLink peer); "model" is the catalog name
// (CatalogModelForNvmlName) or, when the product is not in the catalog, the NVML name itself.
//
// Thread-safe: no state is kept between calls.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "agent/gpu_discovery.h"
#include "core/status.h"

namespace aicloud::agent {

// NOT_FOUND when the file cannot be opened or has no node `node_name`; INVALID_ARGUMENT when it
// does not parse, or when node_name is "" and the file holds other than exactly one node.
StatusOr<nlohmann::json> NodeSpecFromInventory(const std::string& file,
                                               const std::string& node_name);

// INTERNAL when /proc/meminfo cannot be read.
StatusOr<nlohmann::json> NodeSpecFromDiscovery(GpuDiscovery* gpus /* may be null: CPU-only */);

// The part of NodeSpecFromDiscovery that turns NVML devices into the "gpus" array (exposed for
// tests, which have no GPU).
nlohmann::json GpusFromDevices(const std::vector<GpuInfo>& devices);

}  // namespace aicloud::agent
