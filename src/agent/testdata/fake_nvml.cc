// A fake libnvidia-ml for the agent tests: the MIG entry points nvml_mig.cc uses (and the basic
// ones gpu_discovery.cc uses), with nvml.h's signatures, answering as the real library does for
// an H100-like GPU (profiles, placements, error codes). State and call log: fake_gpu_state.h.
#include <cstdio>
#include <cstring>
#include <map>
#include <string>

#include "fake_gpu_state.h"

namespace {

using fakegpu::json;
using fakegpu::Log;
using fakegpu::State;

constexpr int NVML_SUCCESS = 0;
constexpr int NVML_ERROR_INVALID_ARGUMENT = 2;
constexpr int NVML_ERROR_NOT_SUPPORTED = 3;
constexpr int NVML_ERROR_NOT_FOUND = 6;
constexpr int NVML_ERROR_INSUFFICIENT_SIZE = 7;
constexpr int NVML_ERROR_IN_USE = 19;
constexpr int NVML_ERROR_INSUFFICIENT_RESOURCES = 23;

struct Placement {
  unsigned start, size;
};
struct GiProfileInfo {
  unsigned id, isP2pSupported, sliceCount, instanceCount, multiprocessorCount, copyEngineCount,
      decoderCount, encoderCount, jpegCount, ofaCount;
  unsigned long long memorySizeMB;
};
struct GiInfo {
  void* device;
  unsigned id, profileId;
  Placement placement;
};
struct CiProfileInfo {
  unsigned id, sliceCount, instanceCount, multiprocessorCount, sharedCopyEngineCount,
      sharedDecoderCount, sharedEncoderCount, sharedJpegCount, sharedOfaCount;
};
struct CiInfo {
  void* device;
  void* gpuInstance;
  unsigned id, profileId;
  Placement placement;
};

// GPU instance profiles of an H100 80GB (nvidia-smi mig -lgip / -lgipp).
struct Profile {
  unsigned compute, memory, max;
  std::vector<unsigned> starts;
};
const std::map<unsigned, Profile>& Profiles() {
  static const std::map<unsigned, Profile> p = {
      {0x0, {1, 1, 7, {0, 1, 2, 3, 4, 5, 6}}}, {0x9, {1, 2, 4, {0, 2, 4, 6}}},
      {0x1, {2, 2, 3, {0, 2, 4}}},             {0x2, {3, 4, 2, {0, 4}}},
      {0x3, {4, 4, 1, {0}}},                   {0x4, {7, 8, 1, {0}}}};
  return p;
}
const unsigned kCiSlices[] = {1, 2, 3, 4, 7};  // CI profile 0..4

// Opaque handles: kind in the top bits, GPU / GI / CI ids below.
enum Kind : uintptr_t { kDevice = 1, kMig = 2, kGi = 3, kCi = 4 };
void* Handle(Kind k, int gpu, unsigned gi = 0, unsigned ci = 0) {
  return reinterpret_cast<void*>((uintptr_t{k} << 40) | (uintptr_t(gpu) << 24) | (uintptr_t(gi) << 12) | ci);
}
bool Decode(const void* h, Kind k, int* gpu, unsigned* gi = nullptr, unsigned* ci = nullptr) {
  const auto v = reinterpret_cast<uintptr_t>(h);
  if ((v >> 40) != k) return false;
  *gpu = static_cast<int>((v >> 24) & 0xffff);
  if (gi) *gi = static_cast<unsigned>((v >> 12) & 0xfff);
  if (ci) *ci = static_cast<unsigned>(v & 0xfff);
  return true;
}

json* FindGi(State& s, int gpu, unsigned gi) {
  if (gpu < 0 || gpu >= s.Gpus()) return nullptr;
  for (json& i : s.Gpu(gpu)["instances"]) {
    if (i["gi"].get<unsigned>() == gi) return &i;
  }
  return nullptr;
}

int Ret(const std::string& call, int rc) {
  Log(call + " -> " + std::to_string(rc));
  return rc;
}

std::string MigUuid(int64_t n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "MIG-%08llx-0000-4000-8000-%012llx", static_cast<unsigned long long>(n),
                static_cast<unsigned long long>(n));
  return buf;
}

}  // namespace

extern "C" {

int nvmlInit_v2() {
  State s;
  if (int f = s.Fail("nvmlInit_v2")) return Ret("nvmlInit_v2", f);
  return Ret("nvmlInit_v2", NVML_SUCCESS);
}
int nvmlShutdown() { return NVML_SUCCESS; }

const char* nvmlErrorString(int rc) {
  switch (rc) {
    case 0: return "Success";
    case 2: return "Invalid Argument";
    case 3: return "Not Supported";
    case 6: return "Not Found";
    case 7: return "Insufficient Size";
    case 19: return "In use by another client";
    case 23: return "Insufficient Resources";
    case 999: return "Unknown Error";
    default: return "Unknown Error";
  }
}

int nvmlDeviceGetCount_v2(unsigned* count) {
  State s;
  *count = static_cast<unsigned>(s.Gpus());
  return NVML_SUCCESS;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned index, void** device) {
  State s;
  if (static_cast<int>(index) >= s.Gpus()) return NVML_ERROR_INVALID_ARGUMENT;
  *device = Handle(kDevice, static_cast<int>(index));
  return NVML_SUCCESS;
}

int nvmlDeviceGetName(void* device, char* name, unsigned length) {
  State s;
  int gpu;
  if (!Decode(device, kDevice, &gpu) || gpu >= s.Gpus()) return NVML_ERROR_INVALID_ARGUMENT;
  std::snprintf(name, length, "%s", s.Gpu(gpu).value("name", "NVIDIA H100 80GB HBM3").c_str());
  return NVML_SUCCESS;
}

int nvmlDeviceGetUUID(void* device, char* uuid, unsigned length) {
  State s;
  int gpu;
  unsigned gi, ci;
  if (Decode(device, kDevice, &gpu) && gpu < s.Gpus()) {
    std::snprintf(uuid, length, "%s", s.Gpu(gpu)["uuid"].get<std::string>().c_str());
    return NVML_SUCCESS;
  }
  if (Decode(device, kMig, &gpu, &gi, &ci)) {
    json* g = FindGi(s, gpu, gi);
    if (g == nullptr) return NVML_ERROR_NOT_FOUND;
    for (const json& c : (*g)["ci"]) {
      if (c["id"].get<unsigned>() == ci) {
        std::snprintf(uuid, length, "%s", c["uuid"].get<std::string>().c_str());
        return NVML_SUCCESS;
      }
    }
    return NVML_ERROR_NOT_FOUND;
  }
  return NVML_ERROR_INVALID_ARGUMENT;
}

int nvmlDeviceGetMigMode(void* device, unsigned* current, unsigned* pending) {
  State s;
  int gpu;
  if (!Decode(device, kDevice, &gpu) || gpu >= s.Gpus()) return NVML_ERROR_INVALID_ARGUMENT;
  *current = *pending = s.Gpu(gpu).value("migEnabled", false) ? 1 : 0;
  return NVML_SUCCESS;
}

int nvmlDeviceGetGpuInstanceProfileInfo(void* device, unsigned profile, GiProfileInfo* info) {
  State s;
  const std::string call = "nvmlDeviceGetGpuInstanceProfileInfo profile=" + std::to_string(profile);
  int gpu;
  if (!Decode(device, kDevice, &gpu) || gpu >= s.Gpus() || info == nullptr) return Ret(call, NVML_ERROR_INVALID_ARGUMENT);
  if (int f = s.Fail("nvmlDeviceGetGpuInstanceProfileInfo")) return Ret(call, f);
  if (!s.Gpu(gpu).value("migEnabled", false)) return Ret(call, NVML_ERROR_NOT_SUPPORTED);
  auto it = Profiles().find(profile);
  if (it == Profiles().end()) return Ret(call, profile < 0x11 ? NVML_ERROR_NOT_SUPPORTED : NVML_ERROR_INVALID_ARGUMENT);
  std::memset(info, 0, sizeof *info);
  info->id = profile;
  info->sliceCount = it->second.compute;
  info->instanceCount = it->second.max;
  info->memorySizeMB = s.Gpu(gpu).value("memoryBytes", 0ull) / 8 * it->second.memory >> 20;
  return Ret(call, NVML_SUCCESS);
}

int nvmlDeviceCreateGpuInstanceWithPlacement(void* device, unsigned profile, const Placement* placement,
                                             void** instance) {
  State s;
  int gpu = -1;
  Decode(device, kDevice, &gpu);
  const std::string call = "nvmlDeviceCreateGpuInstanceWithPlacement gpu=" + std::to_string(gpu) +
                           " profile=" + std::to_string(profile) + " start=" +
                           std::to_string(placement ? placement->start : 99) + " size=" +
                           std::to_string(placement ? placement->size : 99);
  if (gpu < 0 || gpu >= s.Gpus() || placement == nullptr) return Ret(call, NVML_ERROR_INVALID_ARGUMENT);
  if (int f = s.Fail("nvmlDeviceCreateGpuInstanceWithPlacement")) return Ret(call, f);
  json& g = s.Gpu(gpu);
  if (!g.value("migEnabled", false)) return Ret(call, NVML_ERROR_NOT_SUPPORTED);
  auto it = Profiles().find(profile);
  if (it == Profiles().end()) return Ret(call, NVML_ERROR_INVALID_ARGUMENT);
  const Profile& p = it->second;
  bool valid_start = false;
  for (unsigned st : p.starts) valid_start |= st == placement->start;
  if (!valid_start || placement->size != p.memory) return Ret(call, NVML_ERROR_INVALID_ARGUMENT);
  unsigned same = 0, compute = 0, next_id = 1;
  for (const json& i : g["instances"]) {
    const unsigned st = i["start"], sz = i["size"];
    if (placement->start < st + sz && st < placement->start + placement->size) {
      return Ret(call, NVML_ERROR_INSUFFICIENT_RESOURCES);  // an occupied slot
    }
    same += i["profile"].get<unsigned>() == profile;
    compute += i["compute"].get<unsigned>();
    next_id = std::max(next_id, i["gi"].get<unsigned>() + 1);
  }
  if (same >= p.max || compute + p.compute > 7) return Ret(call, NVML_ERROR_INSUFFICIENT_RESOURCES);
  g["instances"].push_back({{"gi", next_id}, {"profile", profile}, {"start", placement->start},
                            {"size", placement->size}, {"compute", p.compute}, {"ci", json::array()}});
  s.Save();
  *instance = Handle(kGi, gpu, next_id);
  return Ret(call + " gi=" + std::to_string(next_id), NVML_SUCCESS);
}

int nvmlDeviceGetGpuInstances(void* device, unsigned profile, void** instances, unsigned* count) {
  State s;
  int gpu;
  if (!Decode(device, kDevice, &gpu) || gpu >= s.Gpus() || count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (!s.Gpu(gpu).value("migEnabled", false)) return NVML_ERROR_NOT_SUPPORTED;
  unsigned n = 0;
  for (const json& i : s.Gpu(gpu)["instances"]) {
    if (i["profile"].get<unsigned>() == profile) instances[n++] = Handle(kGi, gpu, i["gi"].get<unsigned>());
  }
  *count = n;
  return NVML_SUCCESS;
}

int nvmlDeviceGetGpuInstanceById(void* device, unsigned id, void** instance) {
  State s;
  int gpu;
  if (!Decode(device, kDevice, &gpu)) return NVML_ERROR_INVALID_ARGUMENT;
  if (FindGi(s, gpu, id) == nullptr) return Ret("nvmlDeviceGetGpuInstanceById gi=" + std::to_string(id), NVML_ERROR_NOT_FOUND);
  *instance = Handle(kGi, gpu, id);
  return NVML_SUCCESS;
}

int nvmlGpuInstanceGetInfo(void* instance, GiInfo* info) {
  State s;
  int gpu;
  unsigned gi;
  if (!Decode(instance, kGi, &gpu, &gi)) return NVML_ERROR_INVALID_ARGUMENT;
  json* g = FindGi(s, gpu, gi);
  if (g == nullptr) return NVML_ERROR_NOT_FOUND;
  info->device = Handle(kDevice, gpu);
  info->id = gi;
  info->profileId = (*g)["profile"];
  info->placement = {(*g)["start"].get<unsigned>(), (*g)["size"].get<unsigned>()};
  return NVML_SUCCESS;
}

int nvmlGpuInstanceDestroy(void* instance) {
  State s;
  int gpu;
  unsigned gi;
  if (!Decode(instance, kGi, &gpu, &gi)) return NVML_ERROR_INVALID_ARGUMENT;
  const std::string call = "nvmlGpuInstanceDestroy gpu=" + std::to_string(gpu) + " gi=" + std::to_string(gi);
  if (int f = s.Fail("nvmlGpuInstanceDestroy")) return Ret(call, f);
  json& list = s.Gpu(gpu)["instances"];
  for (size_t i = 0; i < list.size(); ++i) {
    if (list[i]["gi"].get<unsigned>() != gi) continue;
    if (!list[i]["ci"].empty()) return Ret(call, NVML_ERROR_IN_USE);
    list.erase(i);
    s.Save();
    return Ret(call, NVML_SUCCESS);
  }
  return Ret(call, NVML_ERROR_NOT_FOUND);
}

int nvmlGpuInstanceGetComputeInstanceProfileInfo(void* instance, unsigned profile, unsigned eng,
                                                 CiProfileInfo* info) {
  State s;
  int gpu;
  unsigned gi;
  if (!Decode(instance, kGi, &gpu, &gi) || eng != 0 || info == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  json* g = FindGi(s, gpu, gi);
  if (g == nullptr) return NVML_ERROR_NOT_FOUND;
  if (profile >= 5) return NVML_ERROR_NOT_SUPPORTED;
  const unsigned compute = (*g)["compute"];
  if (kCiSlices[profile] > compute) return NVML_ERROR_NOT_SUPPORTED;
  std::memset(info, 0, sizeof *info);
  info->id = profile;
  info->sliceCount = kCiSlices[profile];
  info->instanceCount = compute / kCiSlices[profile];
  return NVML_SUCCESS;
}

int nvmlGpuInstanceCreateComputeInstance(void* instance, unsigned profile, void** ci) {
  State s;
  int gpu;
  unsigned gi;
  if (!Decode(instance, kGi, &gpu, &gi)) return NVML_ERROR_INVALID_ARGUMENT;
  const std::string call = "nvmlGpuInstanceCreateComputeInstance gpu=" + std::to_string(gpu) +
                           " gi=" + std::to_string(gi) + " profile=" + std::to_string(profile);
  if (int f = s.Fail("nvmlGpuInstanceCreateComputeInstance")) return Ret(call, f);
  json* g = FindGi(s, gpu, gi);
  if (g == nullptr) return Ret(call, NVML_ERROR_NOT_FOUND);
  if (profile >= 5) return Ret(call, NVML_ERROR_INVALID_ARGUMENT);
  unsigned used = 0, next = 0;
  for (const json& c : (*g)["ci"]) {
    used += c["slices"].get<unsigned>();
    next = std::max(next, c["id"].get<unsigned>() + 1);
  }
  if (used + kCiSlices[profile] > (*g)["compute"].get<unsigned>()) return Ret(call, NVML_ERROR_INSUFFICIENT_RESOURCES);
  const std::string uuid = MigUuid(s.Next());
  (*g)["ci"].push_back({{"id", next}, {"profile", profile}, {"slices", kCiSlices[profile]}, {"uuid", uuid},
                        {"zeroedBytes", 0}});
  s.Save();
  *ci = Handle(kCi, gpu, gi, next);
  return Ret(call + " ci=" + std::to_string(next) + " " + uuid, NVML_SUCCESS);
}

int nvmlGpuInstanceGetComputeInstances(void* instance, unsigned profile, void** cis, unsigned* count) {
  State s;
  int gpu;
  unsigned gi;
  if (!Decode(instance, kGi, &gpu, &gi) || count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  json* g = FindGi(s, gpu, gi);
  if (g == nullptr) return NVML_ERROR_NOT_FOUND;
  unsigned n = 0;
  for (const json& c : (*g)["ci"]) {
    if (c["profile"].get<unsigned>() == profile) cis[n++] = Handle(kCi, gpu, gi, c["id"].get<unsigned>());
  }
  *count = n;
  return NVML_SUCCESS;
}

int nvmlComputeInstanceGetInfo_v2(void* ci, CiInfo* info) {
  State s;
  int gpu;
  unsigned gi, id;
  if (!Decode(ci, kCi, &gpu, &gi, &id)) return NVML_ERROR_INVALID_ARGUMENT;
  json* g = FindGi(s, gpu, gi);
  if (g == nullptr) return NVML_ERROR_NOT_FOUND;
  for (const json& c : (*g)["ci"]) {
    if (c["id"].get<unsigned>() != id) continue;
    info->device = Handle(kDevice, gpu);
    info->gpuInstance = Handle(kGi, gpu, gi);
    info->id = id;
    info->profileId = c["profile"];
    info->placement = {0, c["slices"].get<unsigned>()};
    return NVML_SUCCESS;
  }
  return NVML_ERROR_NOT_FOUND;
}

int nvmlComputeInstanceDestroy(void* ci) {
  State s;
  int gpu;
  unsigned gi, id;
  if (!Decode(ci, kCi, &gpu, &gi, &id)) return NVML_ERROR_INVALID_ARGUMENT;
  const std::string call = "nvmlComputeInstanceDestroy gpu=" + std::to_string(gpu) + " gi=" +
                           std::to_string(gi) + " ci=" + std::to_string(id);
  if (int f = s.Fail("nvmlComputeInstanceDestroy")) return Ret(call, f);
  json* g = FindGi(s, gpu, gi);
  if (g == nullptr) return Ret(call, NVML_ERROR_NOT_FOUND);
  json& list = (*g)["ci"];
  for (size_t i = 0; i < list.size(); ++i) {
    if (list[i]["id"].get<unsigned>() != id) continue;
    list.erase(i);
    s.Save();
    return Ret(call, NVML_SUCCESS);
  }
  return Ret(call, NVML_ERROR_NOT_FOUND);
}

int nvmlDeviceGetMaxMigDeviceCount(void* device, unsigned* count) {
  State s;
  int gpu;
  if (!Decode(device, kDevice, &gpu) || gpu >= s.Gpus()) return NVML_ERROR_INVALID_ARGUMENT;
  *count = s.Gpu(gpu).value("migEnabled", false) ? 7 : 0;
  return NVML_SUCCESS;
}

int nvmlDeviceGetMigDeviceHandleByIndex(void* device, unsigned index, void** mig) {
  State s;
  int gpu;
  if (!Decode(device, kDevice, &gpu) || gpu >= s.Gpus()) return NVML_ERROR_INVALID_ARGUMENT;
  if (index >= 7) return NVML_ERROR_INVALID_ARGUMENT;
  unsigned n = 0;
  for (const json& g : s.Gpu(gpu)["instances"]) {
    for (const json& c : g["ci"]) {
      if (n++ == index) {
        *mig = Handle(kMig, gpu, g["gi"].get<unsigned>(), c["id"].get<unsigned>());
        return NVML_SUCCESS;
      }
    }
  }
  return NVML_ERROR_NOT_FOUND;
}

int nvmlDeviceGetGpuInstanceId(void* device, unsigned* id) {
  int gpu;
  unsigned gi, ci;
  if (!Decode(device, kMig, &gpu, &gi, &ci)) return NVML_ERROR_NOT_SUPPORTED;
  *id = gi;
  return NVML_SUCCESS;
}

int nvmlDeviceGetComputeInstanceId(void* device, unsigned* id) {
  int gpu;
  unsigned gi, ci;
  if (!Decode(device, kMig, &gpu, &gi, &ci)) return NVML_ERROR_NOT_SUPPORTED;
  *id = ci;
  return NVML_SUCCESS;
}

}  // extern "C"

static_assert(sizeof(GiProfileInfo) == 48, "nvmlGpuInstanceProfileInfo_t layout");
static_assert(NVML_ERROR_INSUFFICIENT_SIZE == 7, "");
