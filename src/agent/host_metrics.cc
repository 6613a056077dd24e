#include "agent/host_metrics.h"

#include <fstream>
#include <sstream>

namespace aicloud::agent {
namespace {

StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFoundError("cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

StatusOr<CpuTimes> ParseProcStat(std::string_view text) {
  std::istringstream in{std::string(text)};
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("cpu ", 0) != 0) continue;
    std::istringstream fields(line.substr(4));
    // user nice system idle iowait irq softirq steal (guest time is already in user).
    uint64_t v[8] = {};
    int n = 0;
    while (n < 8 && fields >> v[n]) ++n;
    if (n < 4) return InvalidArgumentError("/proc/stat: malformed cpu line: " + line);
    CpuTimes t;
    t.busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
    t.total = t.busy + v[3] + v[4];
    return t;
  }
  return InvalidArgumentError("/proc/stat: no aggregate cpu line");
}

double CpuUtilizationPct(const CpuTimes& before, const CpuTimes& after) {
  if (after.total <= before.total || after.busy < before.busy) return 0;
  const double pct = 100.0 * static_cast<double>(after.busy - before.busy) /
                     static_cast<double>(after.total - before.total);
  return pct < 0 ? 0 : (pct > 100 ? 100 : pct);
}

StatusOr<std::pair<int64_t, int64_t>> ParseMeminfo(std::string_view text) {
  std::istringstream in{std::string(text)};
  std::string key;
  int64_t value = 0;
  int64_t total = -1, available = -1, free_kb = 0, buffers = 0, cached = 0;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    if (!(fields >> key >> value)) continue;
    if (key == "MemTotal:") total = value;
    if (key == "MemAvailable:") available = value;
    if (key == "MemFree:") free_kb = value;
    if (key == "Buffers:") buffers = value;
    if (key == "Cached:") cached = value;
  }
  if (total < 0) return InvalidArgumentError("/proc/meminfo: no MemTotal");
  if (available < 0) available = free_kb + buffers + cached;
  return std::make_pair(total * 1024, available * 1024);
}

StatusOr<HostSample> ParseLoadavg(std::string_view text) {
  std::istringstream in{std::string(text)};
  HostSample s;
  if (!(in >> s.load1 >> s.load5 >> s.load15)) {
    return InvalidArgumentError("/proc/loadavg: malformed: " + std::string(text));
  }
  return s;
}

HostMetrics::HostMetrics(std::string proc_root) : proc_root_(std::move(proc_root)) {
  if (StatusOr<std::string> stat = ReadFile(proc_root_ + "/stat"); stat.ok()) {
    if (StatusOr<CpuTimes> t = ParseProcStat(*stat); t.ok()) previous_ = *t;
  }
}

StatusOr<HostSample> HostMetrics::Sample() {
  StatusOr<std::string> stat = ReadFile(proc_root_ + "/stat");
  if (!stat.ok()) return stat.status();
  StatusOr<CpuTimes> cpu = ParseProcStat(*stat);
  if (!cpu.ok()) return cpu.status();
  StatusOr<std::string> meminfo = ReadFile(proc_root_ + "/meminfo");
  if (!meminfo.ok()) return meminfo.status();
  StatusOr<std::pair<int64_t, int64_t>> mem = ParseMeminfo(*meminfo);
  if (!mem.ok()) return mem.status();
  StatusOr<std::string> loadavg = ReadFile(proc_root_ + "/loadavg");
  if (!loadavg.ok()) return loadavg.status();
  StatusOr<HostSample> s = ParseLoadavg(*loadavg);
  if (!s.ok()) return s.status();
  s->cpu_utilization_pct = CpuUtilizationPct(previous_, *cpu);
  previous_ = *cpu;
  s->memory_total_bytes = mem->first;
  s->memory_available_bytes = mem->second;
  return s;
}

nlohmann::json MetricsPayload(const HostSample& host, const std::vector<GpuSample>& gpus) {
  nlohmann::json out;
  out["host"] = {
      {"node_cpu_utilization", host.cpu_utilization_pct},
      {"node_memory_MemTotal_bytes", host.memory_total_bytes},
      {"node_memory_MemAvailable_bytes", host.memory_available_bytes},
      {"node_load1", host.load1},
      {"node_load5", host.load5},
      {"node_load15", host.load15},
  };
  out["gpus"] = nlohmann::json::array();
  for (const GpuSample& g : gpus) {
    nlohmann::json j = {{"index", g.index}};
    if (g.utilization_pct >= 0) j["DCGM_FI_DEV_GPU_UTIL"] = g.utilization_pct;
    if (g.memory_used_bytes >= 0) j["DCGM_FI_DEV_FB_USED"] = g.memory_used_bytes / (1024.0 * 1024.0);
    if (g.temperature_c >= 0) j["DCGM_FI_DEV_GPU_TEMP"] = g.temperature_c;
    if (g.power_w >= 0) j["DCGM_FI_DEV_POWER_USAGE"] = g.power_w;
    out["gpus"].push_back(std::move(j));
  }
  return out;
}

}  // namespace aicloud::agent
