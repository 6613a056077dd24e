// Host metrics for the agent's heartbeat: CPU utilisation, memory and load average read from
// /proc, plus the GPU samples from GpuDiscovery, named the way Prometheus exporters name them
// (node_exporter for the host, DCGM exporter for GPUs) so dashboards need no translation.
//
//   HostMetrics host;                              // reads /proc
//   StatusOr<HostSample> h = host.Sample();        // CPU % since the previous Sample()
//   std::vector<GpuSample> gpus = nvml ? nvml->Sample() : std::vector<GpuSample>{};
//   nlohmann::json payload = MetricsPayload(*h, gpus);
//   // {"host": {"node_cpu_utilization": 12.5, "node_memory_MemTotal_bytes": 6.7e10,
//   //           "node_memory_MemAvailable_bytes": 5.1e10, "node_load1": 0.42, ...},
//   //  "gpus": [{"index": 0, "DCGM_FI_DEV_GPU_UTIL": 97, "DCGM_FI_DEV_FB_USED": 40536,
//   //            "DCGM_FI_DEV_GPU_TEMP": 61, "DCGM_FI_DEV_POWER_USAGE": 612.3}]}
//
// The parsers are exposed so tests can feed them fixed /proc text. HostMetrics is
// thread-compatible (Sample keeps the previous CPU counters); the free functions are
// thread-safe.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "agent/gpu_discovery.h"
#include "core/status.h"

namespace aicloud::agent {

// The aggregate "cpu" line of /proc/stat, in clock ticks.
struct CpuTimes {
  uint64_t busy = 0;   // user + nice + system + irq + softirq + steal
  uint64_t total = 0;  // busy + idle + iowait
};

struct HostSample {
  double cpu_utilization_pct = 0;  // 0..100 over all CPUs, since the previous sample
  int64_t memory_total_bytes = 0;
  int64_t memory_available_bytes = 0;
  double load1 = 0, load5 = 0, load15 = 0;
};

// INVALID_ARGUMENT when the text has no well-formed "cpu " line.
StatusOr<CpuTimes> ParseProcStat(std::string_view text);
// Busy share of the ticks between two readings, in [0, 100]; 0 when no ticks passed.
double CpuUtilizationPct(const CpuTimes& before, const CpuTimes& after);
// MemTotal and MemAvailable (kB in the file) in bytes; INVALID_ARGUMENT when MemTotal is
// missing. MemAvailable falls back to MemFree + Buffers + Cached on kernels without it.
StatusOr<std::pair<int64_t, int64_t>> ParseMeminfo(std::string_view text);
// The three load averages of /proc/loadavg.
StatusOr<HostSample> ParseLoadavg(std::string_view text);

class HostMetrics {
 public:
  explicit HostMetrics(std::string proc_root = "/proc");
  // Reads /proc/stat, /proc/meminfo and /proc/loadavg. The CPU figure covers the time since
  // the previous call; on the first call, since the object was constructed (the constructor
  // takes a reading), or since boot if that reading failed.
  StatusOr<HostSample> Sample();

 private:
  std::string proc_root_;
  CpuTimes previous_{};
};

// The heartbeat payload: {"host": {...}, "gpus": [...]}. Host keys: node_cpu_utilization (%),
// node_memory_MemTotal_bytes, node_memory_MemAvailable_bytes, node_load1, node_load5,
// node_load15. GPU keys: index, DCGM_FI_DEV_GPU_UTIL (%), DCGM_FI_DEV_FB_USED (MiB),
// DCGM_FI_DEV_GPU_TEMP (C), DCGM_FI_DEV_POWER_USAGE (W); a value the device did not report
// (-1 in GpuSample) is left out.
nlohmann::json MetricsPayload(const HostSample& host, const std::vector<GpuSample>& gpus);

}  // namespace aicloud::agent
