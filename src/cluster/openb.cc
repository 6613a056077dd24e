#include "cluster/openb.h"

#include "cluster/catalog.h"

namespace aicloud::cluster {

StatusOr<Cluster> LoadOpenbNodes(const std::string& path) {
  StatusOr<CsvTable> t = CsvTable::ReadFile(path);
  if (!t.ok()) return t.status();
  return ParseOpenbNodes(*t);
}

StatusOr<Cluster> ParseOpenbNodes(const CsvTable& table) {
  AICLOUD_RETURN_IF_ERROR(table.RequireColumns({"sn", "cpu_milli", "memory_mib", "gpu", "model"}));
  Cluster c;
  for (const CsvRow& row : table.rows()) {
    Node n;
    n.name = std::string(row.Get("sn"));
    if (n.name.empty()) return row.Error("sn", "empty node name");
    if (c.FindNode(n.name) >= 0) return row.Error("sn", "node '" + n.name + "' listed twice");
    StatusOr<int64_t> cpu = row.GetInt("cpu_milli");
    if (!cpu.ok()) return cpu.status();
    if (*cpu <= 0) return row.Error("cpu_milli", "must be positive");
    StatusOr<int64_t> mem = row.GetInt("memory_mib");
    if (!mem.ok()) return mem.status();
    if (*mem <= 0) return row.Error("memory_mib", "must be positive");
    StatusOr<int64_t> gpus = row.GetInt("gpu");
    if (!gpus.ok()) return gpus.status();
    if (*gpus < 0 || *gpus > 64) return row.Error("gpu", "must be between 0 and 64");
    std::string_view model = row.Get("model");
    if (*gpus > 0 && model.empty()) return row.Error("model", "GPU node without a model");
    if (*gpus == 0 && !model.empty()) return row.Error("model", "model given for a node without GPUs");
    n.cpu_milli = *cpu;
    n.mem_mib = *mem;
    if (*gpus > 0) {
      n.model = c.InternModel(model);
      const GpuModelSpec* spec = FindGpuModel(model);
      const int64_t gpu_mem = spec ? static_cast<int64_t>(spec->memory_gib * 1024) : 0;
      for (int64_t i = 0; i < *gpus; ++i) {
        Gpu g;
        g.mem_mib = gpu_mem;
        g.mem_free_mib = gpu_mem;
        g.numa = static_cast<int16_t>(i < *gpus / 2 ? 0 : 1);
        n.gpus.push_back(g);
      }
    }
    c.AddNode(std::move(n));
  }
  return c;
}

}  // namespace aicloud::cluster
