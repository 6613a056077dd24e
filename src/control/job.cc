#include "control/job.h"

#include <filesystem>

#include <cmath>

#include "cluster/catalog.h"
#include "cluster/inventory.h"

namespace aicloud::control {
namespace {

using nlohmann::json;

Status FieldError(const std::string& field, const std::string& message) {
  return InvalidArgumentError(field + ": " + message);
}

std::string QuantityText(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
  if (v.is_number()) {
    std::string s = std::to_string(v.get<double>());
    while (!s.empty() && s.back() == '0') s.pop_back();
    if (!s.empty() && s.back() == '.') s.pop_back();
    return s;
  }
  return "";
}

int MigComputeSlices(std::string_view profile) {
  int n = 0;
  size_t i = 0;
  while (i < profile.size() && profile[i] >= '0' && profile[i] <= '9') n = n * 10 + (profile[i++] - '0');
  return (i < profile.size() && profile[i] == 'g') ? n : 0;
}

}  // namespace

double JobSpec::GpusPerWorker() const {
  switch (gpu_kind) {
    case sched::GpuKind::kNone: return 0;
    case sched::GpuKind::kWhole: return gpu_count;
    case sched::GpuKind::kFraction: return gpu_milli / 1000.0;
    case sched::GpuKind::kMig: return MigComputeSlices(mig_profile) / 7.0;
  }
  return 0;
}

StatusOr<JobSpec> ParseJobSpec(const json& spec) {
  JobSpec j;
  if (!spec.is_object()) return FieldError("spec", "must be an object");
  if (spec.contains("workers")) {
    int64_t w = spec["workers"].get<int64_t>();
    if (w < 1 || w > 1024) return FieldError("spec.workers", "must be between 1 and 1024");
    j.workers = static_cast<int>(w);
  }
  if (spec.contains("minAvailable")) {
    int64_t m = spec["minAvailable"].get<int64_t>();
    if (m < 1 || m > j.workers) {
      return FieldError("spec.minAvailable", "must be between 1 and spec.workers (" +
                                                 std::to_string(j.workers) + ")");
    }
    j.min_available = static_cast<int>(m);
  }
  if (!spec.contains("command")) return FieldError("spec.command", "required");
  const json& cmd = spec["command"];
  if (cmd.is_string()) {
    if (cmd.get<std::string>().empty()) return FieldError("spec.command", "must not be empty");
    j.argv = {"/bin/sh", "-c", cmd.get<std::string>()};
  } else {
    for (const json& a : cmd) j.argv.push_back(a.get<std::string>());
    if (j.argv.empty() || j.argv[0].empty()) {
      return FieldError("spec.command", "must name a program");
    }
  }
  if (spec.contains("env")) {
    for (const auto& [k, v] : spec["env"].items()) {
      if (k.empty() || k.find('=') != std::string::npos) {
        return FieldError("spec.env." + k, "is not a valid variable name");
      }
      if (k.rfind("AICLOUD_", 0) == 0) {
        return FieldError("spec.env." + k, "AICLOUD_* variables are set by the platform");
      }
      j.env[k] = v.get<std::string>();
    }
  }
  if (spec.contains("workingDir")) {
    j.working_dir = spec["workingDir"].get<std::string>();
    // A plain absolute path: the agent must never be led, by "." or "..", to a directory other
    // than the one named (its own work dir included).
    const std::filesystem::path wd(j.working_dir);
    bool dots = false;
    for (const std::filesystem::path& part : wd) dots |= part == "." || part == "..";
    if (!j.working_dir.empty() &&
        (!wd.is_absolute() || dots || wd.lexically_normal() != wd || j.working_dir.find('\0') != std::string::npos)) {
      return FieldError("spec.workingDir", "\"" + j.working_dir + "\" is not an absolute path without . or .. parts");
    }
  }
  bool cpu_given = false, mem_given = false;
  if (spec.contains("resources") && spec["resources"].is_object()) {
    const json& r = spec["resources"];
    if (r.contains("cpu") && !r["cpu"].is_null()) {
      StatusOr<int64_t> c = cluster::ParseCpuMilli(QuantityText(r["cpu"]));
      if (!c.ok()) return FieldError("spec.resources.cpu", c.status().message());
      j.cpu_milli = *c;
      cpu_given = true;
    }
    if (r.contains("memory") && !r["memory"].is_null()) {
      StatusOr<int64_t> m = cluster::ParseMemoryMib(QuantityText(r["memory"]));
      if (!m.ok()) return FieldError("spec.resources.memory", m.status().message());
      j.mem_mib = *m;
      mem_given = true;
    }
    if (r.contains("gpu") && r["gpu"].is_object()) {
      const json& g = r["gpu"];
      const bool has_count = g.contains("count"), has_profile = g.contains("profile"),
                 has_fraction = g.contains("fraction");
      if (has_count + has_profile + has_fraction != 1) {
        return FieldError("spec.resources.gpu",
                          "give exactly one of count (whole GPUs), profile (a MIG instance) or "
                          "fraction (a time-sliced share)");
      }
      if (g.contains("model")) {
        std::vector<std::string> names;
        if (g["model"].is_string()) {
          names.push_back(g["model"].get<std::string>());
        } else {
          for (const json& m : g["model"]) names.push_back(m.get<std::string>());
        }
        for (const std::string& n : names) {
          const cluster::GpuModelSpec* m = cluster::FindGpuModel(n);
          if (m == nullptr) {
            return FieldError("spec.resources.gpu.model",
                              "\"" + n + "\" is not a GPU model in the catalog (see docs/hardware-catalog.md)");
          }
          j.gpu_models.push_back(m->name);
        }
      }
      if (has_count) {
        int64_t c = g["count"].get<int64_t>();
        if (c < 1 || c > 72) return FieldError("spec.resources.gpu.count", "must be between 1 and 72");
        j.gpu_kind = sched::GpuKind::kWhole;
        j.gpu_count = static_cast<int>(c);
        j.gpu_milli = 1000;
        if (g.contains("topology")) {
          std::string t = g["topology"].get<std::string>();
          if (t == "none") j.topology = sched::Topology::kNone;
          else if (t == "node") j.topology = sched::Topology::kNode;
          else if (t == "nvlink") j.topology = sched::Topology::kNvlink;
          else if (t == "rack") j.topology = sched::Topology::kRack;
          else return FieldError("spec.resources.gpu.topology", "must be none, node, nvlink or rack");
        }
      } else if (has_profile) {
        std::string p = g["profile"].get<std::string>();
        bool known = false;
        for (const cluster::GpuModelSpec& m : cluster::GpuCatalog()) {
          const cluster::MigGeometry* geo = cluster::FindMigGeometry(m.name);
          if (geo != nullptr && cluster::FindMigProfile(*geo, p) >= 0) known = true;
        }
        if (!known) {
          return FieldError("spec.resources.gpu.profile",
                            "\"" + p + "\" is not a MIG profile of any GPU in the catalog");
        }
        j.gpu_kind = sched::GpuKind::kMig;
        j.gpu_count = 1;
        j.gpu_milli = 1000;
        j.mig_profile = p;
      } else {
        double f = g["fraction"].get<double>();
        if (!(f > 0 && f < 1)) {
          return FieldError("spec.resources.gpu.fraction",
                            "must be between 0 and 1 exclusive (use count for whole GPUs)");
        }
        j.gpu_kind = sched::GpuKind::kFraction;
        j.gpu_count = 1;
        j.gpu_milli = std::max<int32_t>(1, static_cast<int32_t>(std::lround(f * 1000)));
        if (g.contains("memoryGiB")) {
          double gib = g["memoryGiB"].get<double>();
          if (!(gib > 0 && gib <= 1024)) {
            return FieldError("spec.resources.gpu.memoryGiB", "must be between 0 and 1024");
          }
          j.gpu_mem_mib = static_cast<int64_t>(gib * 1024);
        }
      }
      if (!has_count && g.contains("topology")) {
        return FieldError("spec.resources.gpu.topology", "applies to whole GPUs (count) only");
      }
      if (!has_fraction && g.contains("memoryGiB")) {
        return FieldError("spec.resources.gpu.memoryGiB", "applies to a fraction only");
      }
    }
  }
  j.limits_given = cpu_given && mem_given;
  if (spec.contains("restartPolicy")) {
    j.restart_policy = spec["restartPolicy"].get<std::string>();
    if (j.restart_policy != "Never" && j.restart_policy != "OnFailure") {
      return FieldError("spec.restartPolicy", "must be Never or OnFailure");
    }
  }
  if (spec.contains("maxRetries")) {
    int64_t r = spec["maxRetries"].get<int64_t>();
    if (r < 0 || r > 100) return FieldError("spec.maxRetries", "must be between 0 and 100");
    j.max_retries = static_cast<int>(r);
  }
  if (spec.contains("priority")) {
    int64_t p = spec["priority"].get<int64_t>();
    if (p < -1000000 || p > 1000000) return FieldError("spec.priority", "must be within ±1000000");
    j.priority = static_cast<int>(p);
  }
  if (spec.contains("queue")) j.queue = spec["queue"].get<std::string>();
  if (spec.contains("preemptible")) j.preemptible = spec["preemptible"].get<bool>();
  if (spec.contains("terminationGraceSeconds")) {
    int64_t g = spec["terminationGraceSeconds"].get<int64_t>();
    if (g < 0 || g > 3600) {
      return FieldError("spec.terminationGraceSeconds", "must be between 0 and 3600");
    }
    j.grace_seconds = static_cast<int>(g);
  }
  if (spec.contains("pool")) j.pool = spec["pool"].get<std::string>();
  if (spec.contains("isolation") && !spec["isolation"].is_null()) {
    j.isolation = spec["isolation"].get<std::string>();
    if (j.isolation != "none" && j.isolation != "network") {
      return FieldError("spec.isolation", "\"" + j.isolation + "\" is not none or network");
    }
  }
  if (spec.contains("tolerations")) {
    for (const json& t : spec["tolerations"]) {
      sched::Toleration tol;
      tol.key = t["key"].get<std::string>();
      tol.value = t.value("value", "");
      tol.op_exists = t.value("operator", "Equal") == "Exists";
      tol.effect = t.value("effect", "");
      j.tolerations.push_back(tol);
    }
  }
  return j;
}

sched::PodRequest WorkerRequest(const JobSpec& spec, const std::string& tenant,
                                const std::string& job, int worker) {
  sched::PodRequest p;
  switch (spec.gpu_kind) {
    case sched::GpuKind::kNone: p = sched::CpuOnly(spec.cpu_milli, spec.mem_mib); break;
    case sched::GpuKind::kWhole: p = sched::WholeGpus(spec.gpu_count, spec.cpu_milli, spec.mem_mib); break;
    case sched::GpuKind::kFraction:
      p = sched::FractionalGpu(spec.gpu_milli, spec.gpu_mem_mib, spec.cpu_milli, spec.mem_mib);
      break;
    case sched::GpuKind::kMig: p = sched::MigInstance(spec.mig_profile, spec.cpu_milli, spec.mem_mib); break;
  }
  p.name = tenant + "/" + job + "/" + std::to_string(worker);
  p.topology = spec.topology;
  p.tolerations = spec.tolerations;
  p.pool = spec.pool;
  p.priority = spec.priority;
  p.preemptible = spec.preemptible;
  if (spec.workers > 1) {
    p.gang.name = tenant + "/" + job;
    p.gang.size = spec.workers;
    p.gang.min_available = spec.min_available > 0 ? spec.min_available : spec.workers;
  }
  return p;
}

}  // namespace aicloud::control
