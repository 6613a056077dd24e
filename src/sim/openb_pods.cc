#include "sim/openb_pods.h"

namespace aicloud::sim {

StatusOr<std::vector<TracePod>> LoadOpenbPods(const std::string& path, cluster::Cluster* cluster) {
  StatusOr<CsvTable> t = CsvTable::ReadFile(path);
  if (!t.ok()) return t.status();
  return ParseOpenbPods(*t, cluster);
}

StatusOr<std::vector<TracePod>> ParseOpenbPods(const CsvTable& table, cluster::Cluster* cluster) {
  AICLOUD_RETURN_IF_ERROR(
      table.RequireColumns({"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"}));
  std::vector<TracePod> out;
  out.reserve(table.rows().size());
  int64_t uid = 1;
  for (const CsvRow& row : table.rows()) {
    TracePod tp;
    sched::PodRequest& p = tp.pod;
    p.name = std::string(row.Get("name"));
    if (p.name.empty()) return row.Error("name", "empty pod name");
    p.uid = uid++;
    StatusOr<int64_t> cpu = row.GetInt("cpu_milli");
    if (!cpu.ok()) return cpu.status();
    if (*cpu < 0) return row.Error("cpu_milli", "must not be negative");
    StatusOr<int64_t> mem = row.GetInt("memory_mib");
    if (!mem.ok()) return mem.status();
    if (*mem < 0) return row.Error("memory_mib", "must not be negative");
    StatusOr<int64_t> num = row.GetInt("num_gpu");
    if (!num.ok()) return num.status();
    if (*num < 0 || *num > 64) return row.Error("num_gpu", "must be between 0 and 64");
    StatusOr<int64_t> milli = row.GetInt("gpu_milli");
    if (!milli.ok()) return milli.status();
    p.cpu_milli = *cpu;
    p.mem_mib = *mem;
    if (*num > 0) {
      if (*milli <= 0 || *milli > cluster::kMilliPerGpu) {
        return row.Error("gpu_milli", "must be between 1 and 1000 for a GPU pod");
      }
      if (*milli < cluster::kMilliPerGpu && *num > 1) {
        return row.Error("gpu_milli", "a fractional share (< 1000) is only valid with num_gpu 1");
      }
      p.gpu_count = static_cast<int>(*num);
      p.gpu_milli = static_cast<int32_t>(*milli);
      p.gpu_kind = *milli < cluster::kMilliPerGpu ? sched::GpuKind::kFraction : sched::GpuKind::kWhole;
      std::string_view spec = row.Get("gpu_spec");
      while (!spec.empty()) {
        size_t bar = spec.find('|');
        std::string_view m = spec.substr(0, bar);
        if (!m.empty()) {
          if (cluster->FindModel(m) == cluster::kNoModel && cluster->models().size() >= 4096) {
            return row.Error("gpu_spec", "more than 4096 distinct GPU model names");
          }
          cluster::ModelId id = cluster->InternModel(m);
          bool dup = false;
          for (cluster::ModelId x : p.gpu_models) dup = dup || x == id;
          if (!dup) p.gpu_models.push_back(id);
        }
        if (bar == std::string_view::npos) break;
        spec.remove_prefix(bar + 1);
      }
    }
    StatusOr<int64_t> created = row.GetIntOr("creation_time", -1);
    if (!created.ok()) return created.status();
    StatusOr<int64_t> deleted = row.GetIntOr("deletion_time", -1);
    if (!deleted.ok()) return deleted.status();
    if (*created >= 0 && *deleted >= 0 && *deleted < *created) {
      return row.Error("deletion_time", "earlier than creation_time");
    }
    tp.creation_time = *created;
    tp.deletion_time = *deleted;
    out.push_back(std::move(tp));
  }
  return out;
}

}  // namespace aicloud::sim
