#include "agent/gpu_discovery.h"


#include <algorithm>
#include <cctype>
#include <fstream>
#include <set>

#include "agent/nvml_library.h"

namespace aicloud::agent {
namespace {

// --- The subset of nvml.h used here ---------------------------------------------------------
using nvmlReturn_t = int;
constexpr nvmlReturn_t NVML_SUCCESS = 0;
struct nvmlDevice_st;
using nvmlDevice_t = nvmlDevice_st*;

struct nvmlMemory_t {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
struct nvmlPciInfo_t {
  char busIdLegacy[16];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;
  unsigned int pciSubSystemId;
  char busId[32];
};
struct nvmlUtilization_t {
  unsigned int gpu;
  unsigned int memory;
};
constexpr int NVML_TEMPERATURE_GPU = 0;
constexpr int NVML_P2P_CAPS_INDEX_NVLINK = 2;
constexpr int NVML_P2P_STATUS_OK = 0;
constexpr unsigned NVML_DEVICE_MIG_ENABLE = 1;
constexpr unsigned kNameBuffer = 96;  // NVML_DEVICE_NAME_V2_BUFFER_SIZE, UUID_V2 is 96 too

}  // namespace

struct GpuDiscovery::Api {
  nvmlReturn_t (*count)(unsigned*) = nullptr;
  nvmlReturn_t (*handle_by_index)(unsigned, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*name)(nvmlDevice_t, char*, unsigned) = nullptr;
  nvmlReturn_t (*uuid)(nvmlDevice_t, char*, unsigned) = nullptr;
  nvmlReturn_t (*memory)(nvmlDevice_t, nvmlMemory_t*) = nullptr;
  nvmlReturn_t (*mig_mode)(nvmlDevice_t, unsigned*, unsigned*) = nullptr;
  nvmlReturn_t (*pci_info)(nvmlDevice_t, nvmlPciInfo_t*) = nullptr;
  nvmlReturn_t (*utilization)(nvmlDevice_t, nvmlUtilization_t*) = nullptr;
  nvmlReturn_t (*temperature)(nvmlDevice_t, int, unsigned*) = nullptr;
  nvmlReturn_t (*power)(nvmlDevice_t, unsigned*) = nullptr;
  nvmlReturn_t (*p2p_status)(nvmlDevice_t, nvmlDevice_t, int, int*) = nullptr;
  nvmlReturn_t (*numa_node)(nvmlDevice_t, unsigned*) = nullptr;
};

namespace {

// "00000000:18:00.0" -> "0000:18:00.0" (sysfs spelling: 4-digit domain, lower case).
std::string SysfsBusId(const std::string& nvml_bus_id) {
  const size_t colon = nvml_bus_id.find(':');
  if (colon == std::string::npos) return "";
  std::string domain = nvml_bus_id.substr(0, colon);
  if (domain.size() > 4) domain = domain.substr(domain.size() - 4);
  std::string out = domain + nvml_bus_id.substr(colon);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

int SysfsNumaNode(const std::string& nvml_bus_id) {
  const std::string id = SysfsBusId(nvml_bus_id);
  if (id.empty()) return -1;
  std::ifstream in("/sys/bus/pci/devices/" + id + "/numa_node");
  int node = -1;
  if (!(in >> node)) return -1;
  return node;
}

}  // namespace

StatusOr<std::unique_ptr<GpuDiscovery>> GpuDiscovery::Open(const std::string& library) {
  StatusOr<std::unique_ptr<NvmlLibrary>> lib = NvmlLibrary::Open(library);
  if (!lib.ok()) return lib.status();
  const NvmlLibrary& nvml = **lib;
  auto api = std::make_unique<Api>();
  // Optional ones stay nullptr on an old driver: their fields are then "not reported".
  nvml.Resolve("nvmlDeviceGetName", &api->name);
  nvml.Resolve("nvmlDeviceGetUUID", &api->uuid);
  nvml.Resolve("nvmlDeviceGetMemoryInfo", &api->memory);
  nvml.Resolve("nvmlDeviceGetMigMode", &api->mig_mode);
  nvml.Resolve("nvmlDeviceGetPciInfo_v3", &api->pci_info);
  nvml.Resolve("nvmlDeviceGetUtilizationRates", &api->utilization);
  nvml.Resolve("nvmlDeviceGetTemperature", &api->temperature);
  nvml.Resolve("nvmlDeviceGetPowerUsage", &api->power);
  nvml.Resolve("nvmlDeviceGetP2PStatus", &api->p2p_status);
  nvml.Resolve("nvmlDeviceGetNumaNodeId", &api->numa_node);
  for (const auto& [symbol, found] :
       {std::pair{"nvmlDeviceGetCount_v2", nvml.Resolve("nvmlDeviceGetCount_v2", &api->count)},
        std::pair{"nvmlDeviceGetHandleByIndex_v2", nvml.Resolve("nvmlDeviceGetHandleByIndex_v2", &api->handle_by_index)}}) {
    if (!found) return UnavailableError(std::string("NVML: ") + symbol + " missing in " + library);
  }
  std::unique_ptr<GpuDiscovery> d(new GpuDiscovery());
  d->lib_ = std::move(*lib);
  d->api_ = std::move(api);
  return d;
}

GpuDiscovery::~GpuDiscovery() = default;

std::vector<GpuInfo> GpuDiscovery::Devices() {
  std::vector<GpuInfo> out;
  unsigned count = 0;
  if (api_->count(&count) != NVML_SUCCESS) return out;
  std::vector<nvmlDevice_t> handles(count, nullptr);
  for (unsigned i = 0; i < count; ++i) {
    GpuInfo g;
    g.index = static_cast<int>(i);
    if (api_->handle_by_index(i, &handles[i]) != NVML_SUCCESS) {
      handles[i] = nullptr;
      out.push_back(g);
      continue;
    }
    nvmlDevice_t h = handles[i];
    char buf[kNameBuffer] = {};
    if (api_->name != nullptr && api_->name(h, buf, sizeof buf) == NVML_SUCCESS) g.name = buf;
    char ubuf[kNameBuffer] = {};
    if (api_->uuid != nullptr && api_->uuid(h, ubuf, sizeof ubuf) == NVML_SUCCESS) g.uuid = ubuf;
    nvmlMemory_t mem{};
    if (api_->memory != nullptr && api_->memory(h, &mem) == NVML_SUCCESS) {
      g.memory_bytes = static_cast<int64_t>(mem.total);
    }
    unsigned current = 0, pending = 0;
    if (api_->mig_mode != nullptr && api_->mig_mode(h, &current, &pending) == NVML_SUCCESS) {
      g.mig_enabled = current == NVML_DEVICE_MIG_ENABLE;
    }
    nvmlPciInfo_t pci{};
    if (api_->pci_info != nullptr && api_->pci_info(h, &pci) == NVML_SUCCESS) {
      pci.busId[sizeof pci.busId - 1] = '\0';
      g.pci_bus_id = pci.busId;
    }
    unsigned numa = 0;
    if (api_->numa_node != nullptr && api_->numa_node(h, &numa) == NVML_SUCCESS) {
      g.numa_node = static_cast<int>(numa);
    } else if (!g.pci_bus_id.empty()) {
      g.numa_node = SysfsNumaNode(g.pci_bus_id);
    }
    out.push_back(g);
  }
  if (api_->p2p_status != nullptr) {
    for (unsigned i = 0; i < count; ++i) {
      for (unsigned j = 0; j < count; ++j) {
        if (i == j || handles[i] == nullptr || handles[j] == nullptr) continue;
        int status = -1;
        if (api_->p2p_status(handles[i], handles[j], NVML_P2P_CAPS_INDEX_NVLINK, &status) ==
                NVML_SUCCESS &&
            status == NVML_P2P_STATUS_OK) {
          out[i].nvlink_peers.push_back(static_cast<int>(j));
        }
      }
    }
  }
  return out;
}

std::vector<GpuSample> GpuDiscovery::Sample() {
  std::vector<GpuSample> out;
  unsigned count = 0;
  if (api_->count(&count) != NVML_SUCCESS) return out;
  for (unsigned i = 0; i < count; ++i) {
    GpuSample s;
    s.index = static_cast<int>(i);
    nvmlDevice_t h = nullptr;
    if (api_->handle_by_index(i, &h) == NVML_SUCCESS) {
      nvmlUtilization_t u{};
      if (api_->utilization != nullptr && api_->utilization(h, &u) == NVML_SUCCESS) {
        s.utilization_pct = u.gpu;
      }
      nvmlMemory_t mem{};
      if (api_->memory != nullptr && api_->memory(h, &mem) == NVML_SUCCESS) {
        s.memory_used_bytes = static_cast<double>(mem.used);
      }
      unsigned temp = 0;
      if (api_->temperature != nullptr &&
          api_->temperature(h, NVML_TEMPERATURE_GPU, &temp) == NVML_SUCCESS) {
        s.temperature_c = temp;
      }
      unsigned milliwatts = 0;
      if (api_->power != nullptr && api_->power(h, &milliwatts) == NVML_SUCCESS) {
        s.power_w = milliwatts / 1000.0;
      }
    }
    out.push_back(s);
  }
  return out;
}

std::string CatalogModelForNvmlName(std::string_view nvml_name) {
  std::set<std::string> t;
  std::string cur;
  auto flush = [&] {
    if (!cur.empty() && cur != "NVIDIA" && cur != "TESLA" && cur != "GEFORCE") t.insert(cur);
    cur.clear();
  };
  for (char c : nvml_name) {
    if (c == ' ' || c == '-' || c == '_' || c == '\t') {
      flush();
    } else {
      cur += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    }
  }
  flush();
  auto has = [&](const char* token) { return t.count(token) != 0; };

  if (has("GB200")) return "GB200";
  if (has("B200")) return "B200";
  if (has("H200")) return has("NVL") ? "" : "H200";
  if (has("H100")) {
    if (has("NVL")) return "";
    return has("PCIE") ? "H100-PCIE" : "H100-SXM";
  }
  if (has("A100")) {
    if (has("80GB")) return "A100-80GB";
    if (has("40GB")) return "A100-40GB";
    return "";
  }
  if (has("A10")) return "A10";
  if (has("L40S")) return "L40S";
  if (has("RTX4090") || (has("RTX") && has("4090"))) return "RTX4090";
  if (has("T4")) return "T4";
  if (has("V100")) {
    if (has("32GB")) return "V100-32GB";
    if (has("16GB")) return "V100-16GB";
    return "";
  }
  if (has("P100")) return has("16GB") ? "P100" : "";
  return "";
}

}  // namespace aicloud::agent
