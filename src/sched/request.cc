#include "sched/request.h"

namespace aicloud::sched {

PodRequest WholeGpus(int count, int64_t cpu_milli, int64_t mem_mib) {
  PodRequest p;
  p.gpu_kind = GpuKind::kWhole;
  p.gpu_count = count;
  p.gpu_milli = cluster::kMilliPerGpu;
  p.cpu_milli = cpu_milli;
  p.mem_mib = mem_mib;
  return p;
}

PodRequest FractionalGpu(int32_t milli, int64_t gpu_mem_mib, int64_t cpu_milli, int64_t mem_mib) {
  PodRequest p;
  p.gpu_kind = GpuKind::kFraction;
  p.gpu_count = 1;
  p.gpu_milli = milli;
  p.gpu_mem_mib = gpu_mem_mib;
  p.cpu_milli = cpu_milli;
  p.mem_mib = mem_mib;
  return p;
}

PodRequest MigInstance(std::string profile, int64_t cpu_milli, int64_t mem_mib) {
  PodRequest p;
  p.gpu_kind = GpuKind::kMig;
  p.gpu_count = 1;
  p.gpu_milli = cluster::kMilliPerGpu;
  p.mig_profile = std::move(profile);
  p.cpu_milli = cpu_milli;
  p.mem_mib = mem_mib;
  return p;
}

PodRequest CpuOnly(int64_t cpu_milli, int64_t mem_mib) {
  PodRequest p;
  p.cpu_milli = cpu_milli;
  p.mem_mib = mem_mib;
  return p;
}

}  // namespace aicloud::sched
