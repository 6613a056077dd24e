#include "agent/node_info.h"

#include <sched.h>
#include <unistd.h>

#include <fstream>
#include <functional>
#include <sstream>

#include "agent/host_metrics.h"
#include "cluster/inventory.h"

namespace aicloud::agent {
namespace {

constexpr int64_t kMib = 1024 * 1024;

int CpuCount() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  const long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

}  // namespace

StatusOr<nlohmann::json> NodeSpecFromInventory(const std::string& file,
                                               const std::string& node_name) {
  StatusOr<cluster::Cluster> loaded = cluster::LoadInventoryFile(file);
  if (!loaded.ok()) return loaded.status();
  const cluster::Cluster& c = *loaded;
  int32_t id = -1;
  if (node_name.empty()) {
    if (c.nodes().size() != 1) {
      return InvalidArgumentError(file + ": holds " + std::to_string(c.nodes().size()) +
                                  " nodes; name the one this agent runs");
    }
    id = 0;
  } else {
    id = c.FindNode(node_name);
    if (id < 0) return NotFoundError(file + ": no node named '" + node_name + "'");
  }
  const cluster::Node& n = c.node(id);
  nlohmann::json spec;
  spec["name"] = n.name;
  spec["cpuMillis"] = n.cpu_milli;
  spec["memoryBytes"] = n.mem_mib * kMib;
  spec["gpus"] = nlohmann::json::array();
  const std::string model = n.model == cluster::kNoModel ? "" : c.model_name(n.model);
  for (size_t i = 0; i < n.gpus.size(); ++i) {
    const cluster::Gpu& g = n.gpus[i];
    nlohmann::json j = {{"index", i},
                        {"model", model},
                        {"uuid", "GPU-sim-" + n.name + "-" + std::to_string(i)},
                        {"memoryBytes", g.mem_mib * kMib},
                        {"numa", g.numa},
                        {"migEnabled", false}};
    if (g.nvlink_domain >= 0) j["nvlinkDomain"] = g.nvlink_domain;
    if (g.pcie_switch >= 0) j["pcieSwitch"] = g.pcie_switch;
    spec["gpus"].push_back(std::move(j));
  }
  spec["labels"] = n.labels;
  spec["taints"] = nlohmann::json::array();
  for (const cluster::Taint& t : n.taints) {
    nlohmann::json tj = {{"key", t.key}, {"effect", t.effect}};
    if (!t.value.empty()) tj["value"] = t.value;
    spec["taints"].push_back(std::move(tj));
  }
  if (n.rack >= 0 && static_cast<size_t>(n.rack) < c.racks().size()) {
    spec["rack"] = c.racks()[static_cast<size_t>(n.rack)].name;
  }
  if (!n.pool.empty()) spec["pool"] = n.pool;
  spec["unschedulable"] = n.unschedulable;
  return spec;
}

nlohmann::json GpusFromDevices(const std::vector<GpuInfo>& devices) {
  // NVLink domains: connected components of the peer graph, named by their lowest index.
  std::vector<int> domain(devices.size(), -1);
  std::vector<int> index_to_pos(1, -1);
  for (size_t p = 0; p < devices.size(); ++p) {
    const int idx = devices[p].index;
    if (idx >= 0) {
      if (static_cast<size_t>(idx) >= index_to_pos.size()) index_to_pos.resize(idx + 1, -1);
      index_to_pos[static_cast<size_t>(idx)] = static_cast<int>(p);
    }
  }
  for (size_t p = 0; p < devices.size(); ++p) {
    if (domain[p] >= 0 || devices[p].nvlink_peers.empty()) continue;
    std::vector<size_t> stack = {p}, members;
    domain[p] = 0;  // visited marker; fixed below
    while (!stack.empty()) {
      const size_t cur = stack.back();
      stack.pop_back();
      members.push_back(cur);
      for (int peer : devices[cur].nvlink_peers) {
        if (peer < 0 || static_cast<size_t>(peer) >= index_to_pos.size()) continue;
        const int q = index_to_pos[static_cast<size_t>(peer)];
        if (q < 0 || domain[static_cast<size_t>(q)] >= 0) continue;
        domain[static_cast<size_t>(q)] = 0;
        stack.push_back(static_cast<size_t>(q));
      }
    }
    int lowest = devices[members[0]].index;
    for (size_t m : members) lowest = std::min(lowest, devices[m].index);
    for (size_t m : members) domain[m] = lowest;
  }
  nlohmann::json out = nlohmann::json::array();
  for (size_t p = 0; p < devices.size(); ++p) {
    const GpuInfo& g = devices[p];
    const std::string mapped = CatalogModelForNvmlName(g.name);
    nlohmann::json j = {{"index", g.index},
                        {"model", mapped.empty() ? g.name : mapped},
                        {"nvmlName", g.name},
                        {"uuid", g.uuid},
                        {"memoryBytes", g.memory_bytes},
                        {"migEnabled", g.mig_enabled}};
    if (g.numa_node >= 0) j["numa"] = g.numa_node;
    if (domain[p] >= 0) j["nvlinkDomain"] = domain[p];
    if (!g.pci_bus_id.empty()) j["pciBusId"] = g.pci_bus_id;
    out.push_back(std::move(j));
  }
  return out;
}

StatusOr<nlohmann::json> NodeSpecFromDiscovery(GpuDiscovery* gpus) {
  std::ifstream in("/proc/meminfo");
  if (!in) return InternalError("cannot read /proc/meminfo");
  std::stringstream ss;
  ss << in.rdbuf();
  StatusOr<std::pair<int64_t, int64_t>> mem = ParseMeminfo(ss.str());
  if (!mem.ok()) return InternalError(mem.status().message());
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  nlohmann::json spec;
  spec["name"] = std::string(host);
  spec["cpuMillis"] = static_cast<int64_t>(CpuCount()) * 1000;
  spec["memoryBytes"] = mem->first;
  spec["gpus"] = gpus != nullptr ? GpusFromDevices(gpus->Devices()) : nlohmann::json::array();
  spec["labels"] = nlohmann::json::object();
  spec["taints"] = nlohmann::json::array();
  spec["unschedulable"] = false;
  return spec;
}

}  // namespace aicloud::agent
