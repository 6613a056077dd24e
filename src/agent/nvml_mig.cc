#include "agent/nvml_mig.h"


#include <utility>

#include "agent/nvml_library.h"

namespace aicloud::agent {
namespace {

// --- The subset of nvml.h used here (NVML API reference, "Multi Instance GPU Management") ---
using nvmlReturn_t = int;
constexpr nvmlReturn_t NVML_SUCCESS = 0;
constexpr nvmlReturn_t NVML_ERROR_NOT_SUPPORTED = 3;
constexpr nvmlReturn_t NVML_ERROR_NOT_FOUND = 6;
constexpr nvmlReturn_t NVML_ERROR_IN_USE = 19;
constexpr nvmlReturn_t NVML_ERROR_INSUFFICIENT_RESOURCES = 23;
struct nvmlDevice_st;
using nvmlDevice_t = nvmlDevice_st*;
struct nvmlGpuInstance_st;
using nvmlGpuInstance_t = nvmlGpuInstance_st*;
struct nvmlComputeInstance_st;
using nvmlComputeInstance_t = nvmlComputeInstance_st*;

struct nvmlGpuInstancePlacement_t {
  unsigned int start;
  unsigned int size;
};
// The v1 layout of nvmlDeviceGetGpuInstanceProfileInfo (no version field).
struct nvmlGpuInstanceProfileInfo_t {
  unsigned int id;
  unsigned int isP2pSupported;
  unsigned int sliceCount;
  unsigned int instanceCount;
  unsigned int multiprocessorCount;
  unsigned int copyEngineCount;
  unsigned int decoderCount;
  unsigned int encoderCount;
  unsigned int jpegCount;
  unsigned int ofaCount;
  unsigned long long memorySizeMB;
};
struct nvmlGpuInstanceInfo_t {
  nvmlDevice_t device;
  unsigned int id;
  unsigned int profileId;
  nvmlGpuInstancePlacement_t placement;
};
struct nvmlComputeInstanceProfileInfo_t {
  unsigned int id;
  unsigned int sliceCount;
  unsigned int instanceCount;
  unsigned int multiprocessorCount;
  unsigned int sharedCopyEngineCount;
  unsigned int sharedDecoderCount;
  unsigned int sharedEncoderCount;
  unsigned int sharedJpegCount;
  unsigned int sharedOfaCount;
};
struct nvmlComputeInstancePlacement_t {
  unsigned int start;
  unsigned int size;
};
struct nvmlComputeInstanceInfo_t {
  nvmlDevice_t device;
  nvmlGpuInstance_t gpuInstance;
  unsigned int id;
  unsigned int profileId;
  nvmlComputeInstancePlacement_t placement;
};

constexpr unsigned NVML_GPU_INSTANCE_PROFILE_1_SLICE = 0x0;
constexpr unsigned NVML_GPU_INSTANCE_PROFILE_2_SLICE = 0x1;
constexpr unsigned NVML_GPU_INSTANCE_PROFILE_3_SLICE = 0x2;
constexpr unsigned NVML_GPU_INSTANCE_PROFILE_4_SLICE = 0x3;
constexpr unsigned NVML_GPU_INSTANCE_PROFILE_7_SLICE = 0x4;
constexpr unsigned NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2 = 0x9;
// Listing walks every id a current driver may know (0x0 .. NVML_GPU_INSTANCE_PROFILE_COUNT in
// recent nvml.h, 0x11); ids a driver does not know answer INVALID_ARGUMENT / NOT_SUPPORTED.
constexpr unsigned kGpuInstanceProfileIds = 0x11;
constexpr unsigned NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE = 0x0;
constexpr unsigned NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE = 0x1;
constexpr unsigned NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE = 0x2;
constexpr unsigned NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE = 0x3;
constexpr unsigned NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE = 0x4;
constexpr unsigned NVML_COMPUTE_INSTANCE_PROFILE_COUNT = 0x8;
constexpr unsigned NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED = 0x0;
constexpr unsigned NVML_DEVICE_MIG_ENABLE = 1;
constexpr unsigned kUuidBuffer = 96;  // NVML_DEVICE_UUID_V2_BUFFER_SIZE

#define MIG_CONCAT_(a, b) a##b
#define MIG_CONCAT(a, b) MIG_CONCAT_(a, b)
#define MIG_ASSIGN_OR_RETURN(lhs, expr) MIG_ASSIGN_OR_RETURN_(MIG_CONCAT(mig_or_, __LINE__), lhs, expr)
#define MIG_ASSIGN_OR_RETURN_(tmp, lhs, expr) \
  auto tmp = (expr);                          \
  if (!tmp.ok()) return tmp.status();         \
  lhs = std::move(*tmp)

}  // namespace

struct NvmlMig::Api {
  nvmlReturn_t (*count)(unsigned*) = nullptr;
  nvmlReturn_t (*handle_by_index)(unsigned, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*name)(nvmlDevice_t, char*, unsigned) = nullptr;
  nvmlReturn_t (*uuid)(nvmlDevice_t, char*, unsigned) = nullptr;
  nvmlReturn_t (*mig_mode)(nvmlDevice_t, unsigned*, unsigned*) = nullptr;
  nvmlReturn_t (*gi_profile_info)(nvmlDevice_t, unsigned, nvmlGpuInstanceProfileInfo_t*) = nullptr;
  nvmlReturn_t (*create_gi)(nvmlDevice_t, unsigned, const nvmlGpuInstancePlacement_t*,
                            nvmlGpuInstance_t*) = nullptr;
  nvmlReturn_t (*get_gis)(nvmlDevice_t, unsigned, nvmlGpuInstance_t*, unsigned*) = nullptr;
  nvmlReturn_t (*gi_by_id)(nvmlDevice_t, unsigned, nvmlGpuInstance_t*) = nullptr;
  nvmlReturn_t (*gi_info)(nvmlGpuInstance_t, nvmlGpuInstanceInfo_t*) = nullptr;
  nvmlReturn_t (*destroy_gi)(nvmlGpuInstance_t) = nullptr;
  nvmlReturn_t (*ci_profile_info)(nvmlGpuInstance_t, unsigned, unsigned,
                                  nvmlComputeInstanceProfileInfo_t*) = nullptr;
  nvmlReturn_t (*create_ci)(nvmlGpuInstance_t, unsigned, nvmlComputeInstance_t*) = nullptr;
  nvmlReturn_t (*get_cis)(nvmlGpuInstance_t, unsigned, nvmlComputeInstance_t*, unsigned*) = nullptr;
  nvmlReturn_t (*ci_info)(nvmlComputeInstance_t, nvmlComputeInstanceInfo_t*) = nullptr;
  nvmlReturn_t (*destroy_ci)(nvmlComputeInstance_t) = nullptr;
  nvmlReturn_t (*max_mig)(nvmlDevice_t, unsigned*) = nullptr;
  nvmlReturn_t (*mig_by_index)(nvmlDevice_t, unsigned, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*mig_gi_id)(nvmlDevice_t, unsigned*) = nullptr;
  nvmlReturn_t (*mig_ci_id)(nvmlDevice_t, unsigned*) = nullptr;
};

StatusOr<MigProfileIds> MigProfileIdsFor(int compute, int memory) {
  MigProfileIds ids;
  ids.memory_slices = memory;
  if (compute == 1 && memory == 1) {
    ids.gpu_instance = NVML_GPU_INSTANCE_PROFILE_1_SLICE;
  } else if (compute == 1 && memory == 2) {
    ids.gpu_instance = NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2;
  } else if (compute == 2 && memory == 2) {
    ids.gpu_instance = NVML_GPU_INSTANCE_PROFILE_2_SLICE;
  } else if (compute == 3 && memory == 4) {
    ids.gpu_instance = NVML_GPU_INSTANCE_PROFILE_3_SLICE;
  } else if (compute == 4 && memory == 4) {
    ids.gpu_instance = NVML_GPU_INSTANCE_PROFILE_4_SLICE;
  } else if (compute == 7 && memory == 8) {
    ids.gpu_instance = NVML_GPU_INSTANCE_PROFILE_7_SLICE;
  } else {
    return InvalidArgumentError("no NVML MIG profile with " + std::to_string(compute) +
                                " compute and " + std::to_string(memory) + " memory slices");
  }
  switch (compute) {
    case 1: ids.compute_instance = NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE; break;
    case 2: ids.compute_instance = NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE; break;
    case 3: ids.compute_instance = NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE; break;
    case 4: ids.compute_instance = NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE; break;
    default: ids.compute_instance = NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE; break;
  }
  return ids;
}

StatusOr<std::unique_ptr<NvmlMig>> NvmlMig::Open(const std::string& library) {
  StatusOr<std::unique_ptr<NvmlLibrary>> lib = NvmlLibrary::Open(library);
  if (!lib.ok()) return lib.status();
  auto api = std::make_unique<Api>();
  const std::pair<const char*, void**> symbols[] = {
      {"nvmlDeviceGetCount_v2", reinterpret_cast<void**>(&api->count)},
      {"nvmlDeviceGetHandleByIndex_v2", reinterpret_cast<void**>(&api->handle_by_index)},
      {"nvmlDeviceGetName", reinterpret_cast<void**>(&api->name)},
      {"nvmlDeviceGetUUID", reinterpret_cast<void**>(&api->uuid)},
      {"nvmlDeviceGetMigMode", reinterpret_cast<void**>(&api->mig_mode)},
      {"nvmlDeviceGetGpuInstanceProfileInfo", reinterpret_cast<void**>(&api->gi_profile_info)},
      {"nvmlDeviceCreateGpuInstanceWithPlacement", reinterpret_cast<void**>(&api->create_gi)},
      {"nvmlDeviceGetGpuInstances", reinterpret_cast<void**>(&api->get_gis)},
      {"nvmlDeviceGetGpuInstanceById", reinterpret_cast<void**>(&api->gi_by_id)},
      {"nvmlGpuInstanceGetInfo", reinterpret_cast<void**>(&api->gi_info)},
      {"nvmlGpuInstanceDestroy", reinterpret_cast<void**>(&api->destroy_gi)},
      {"nvmlGpuInstanceGetComputeInstanceProfileInfo", reinterpret_cast<void**>(&api->ci_profile_info)},
      {"nvmlGpuInstanceCreateComputeInstance", reinterpret_cast<void**>(&api->create_ci)},
      {"nvmlGpuInstanceGetComputeInstances", reinterpret_cast<void**>(&api->get_cis)},
      {"nvmlComputeInstanceGetInfo_v2", reinterpret_cast<void**>(&api->ci_info)},
      {"nvmlComputeInstanceDestroy", reinterpret_cast<void**>(&api->destroy_ci)},
      {"nvmlDeviceGetMaxMigDeviceCount", reinterpret_cast<void**>(&api->max_mig)},
      {"nvmlDeviceGetMigDeviceHandleByIndex", reinterpret_cast<void**>(&api->mig_by_index)},
      {"nvmlDeviceGetGpuInstanceId", reinterpret_cast<void**>(&api->mig_gi_id)},
      {"nvmlDeviceGetComputeInstanceId", reinterpret_cast<void**>(&api->mig_ci_id)},
  };
  for (const auto& [symbol, slot] : symbols) {
    if (!(*lib)->Resolve(symbol, slot)) {
      return UnavailableError(std::string("NVML: ") + symbol + " missing in " + library +
                              " (a driver without MIG support?)");
    }
  }
  std::unique_ptr<NvmlMig> n(new NvmlMig());
  n->lib_ = std::move(*lib);
  n->api_ = std::move(api);
  return n;
}

NvmlMig::~NvmlMig() = default;

Status NvmlMig::Check(int rc, const std::string& call) {
  if (rc == NVML_SUCCESS) return OkStatus();
  const std::string msg = call + ": " + lib_->ErrorString(rc);
  switch (rc) {
    case NVML_ERROR_NOT_SUPPORTED:
    case NVML_ERROR_INSUFFICIENT_RESOURCES:
    case NVML_ERROR_IN_USE:
      return FailedPreconditionError(msg);
    case NVML_ERROR_NOT_FOUND:
      return NotFoundError(msg);
    default:
      return InternalError(msg);
  }
}

StatusOr<void*> NvmlMig::Device(int gpu) {
  nvmlDevice_t d = nullptr;
  AICLOUD_RETURN_IF_ERROR(Check(api_->handle_by_index(static_cast<unsigned>(gpu), &d),
                                "nvmlDeviceGetHandleByIndex_v2(GPU " + std::to_string(gpu) + ")"));
  return static_cast<void*>(d);
}

StatusOr<int> NvmlMig::DeviceCount() {
  unsigned n = 0;
  AICLOUD_RETURN_IF_ERROR(Check(api_->count(&n), "nvmlDeviceGetCount_v2"));
  return static_cast<int>(n);
}

StatusOr<std::string> NvmlMig::Uuid(int gpu) {
  MIG_ASSIGN_OR_RETURN(void* d, Device(gpu));
  char buf[kUuidBuffer] = {};
  AICLOUD_RETURN_IF_ERROR(Check(api_->uuid(static_cast<nvmlDevice_t>(d), buf, sizeof buf),
                                "nvmlDeviceGetUUID(GPU " + std::to_string(gpu) + ")"));
  buf[sizeof buf - 1] = '\0';
  return std::string(buf);
}

StatusOr<std::string> NvmlMig::Name(int gpu) {
  MIG_ASSIGN_OR_RETURN(void* d, Device(gpu));
  char buf[kUuidBuffer] = {};
  AICLOUD_RETURN_IF_ERROR(Check(api_->name(static_cast<nvmlDevice_t>(d), buf, sizeof buf),
                                "nvmlDeviceGetName(GPU " + std::to_string(gpu) + ")"));
  buf[sizeof buf - 1] = '\0';
  return std::string(buf);
}

StatusOr<bool> NvmlMig::MigEnabled(int gpu) {
  MIG_ASSIGN_OR_RETURN(void* d, Device(gpu));
  unsigned current = 0, pending = 0;
  const nvmlReturn_t rc = api_->mig_mode(static_cast<nvmlDevice_t>(d), &current, &pending);
  if (rc == NVML_ERROR_NOT_SUPPORTED) return false;  // a GPU without MIG
  AICLOUD_RETURN_IF_ERROR(Check(rc, "nvmlDeviceGetMigMode(GPU " + std::to_string(gpu) + ")"));
  return current == NVML_DEVICE_MIG_ENABLE;
}

StatusOr<std::string> NvmlMig::MigUuid(void* device, unsigned gi_id, unsigned ci_id) {
  auto* d = static_cast<nvmlDevice_t>(device);
  unsigned max = 0;
  AICLOUD_RETURN_IF_ERROR(Check(api_->max_mig(d, &max), "nvmlDeviceGetMaxMigDeviceCount"));
  for (unsigned i = 0; i < max; ++i) {
    nvmlDevice_t mig = nullptr;
    const nvmlReturn_t rc = api_->mig_by_index(d, i, &mig);
    if (rc == NVML_ERROR_NOT_FOUND) continue;  // no MIG device at this index
    AICLOUD_RETURN_IF_ERROR(Check(rc, "nvmlDeviceGetMigDeviceHandleByIndex(" + std::to_string(i) + ")"));
    unsigned g = 0, c = 0;
    AICLOUD_RETURN_IF_ERROR(Check(api_->mig_gi_id(mig, &g), "nvmlDeviceGetGpuInstanceId"));
    AICLOUD_RETURN_IF_ERROR(Check(api_->mig_ci_id(mig, &c), "nvmlDeviceGetComputeInstanceId"));
    if (g != gi_id || c != ci_id) continue;
    char buf[kUuidBuffer] = {};
    AICLOUD_RETURN_IF_ERROR(Check(api_->uuid(mig, buf, sizeof buf), "nvmlDeviceGetUUID(MIG device)"));
    buf[sizeof buf - 1] = '\0';
    return std::string(buf);
  }
  return NotFoundError("no MIG device for GPU instance " + std::to_string(gi_id) +
                       ", compute instance " + std::to_string(ci_id));
}

StatusOr<std::vector<unsigned>> NvmlMig::ComputeInstanceIds(void* gpu_instance) {
  auto* gi = static_cast<nvmlGpuInstance_t>(gpu_instance);
  std::vector<unsigned> out;
  for (unsigned p = 0; p < NVML_COMPUTE_INSTANCE_PROFILE_COUNT; ++p) {
    nvmlComputeInstanceProfileInfo_t info{};
    if (api_->ci_profile_info(gi, p, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &info) !=
        NVML_SUCCESS) {
      continue;  // a profile this GPU instance does not offer
    }
    std::vector<nvmlComputeInstance_t> cis(info.instanceCount + 1, nullptr);
    unsigned n = 0;
    AICLOUD_RETURN_IF_ERROR(
        Check(api_->get_cis(gi, info.id, cis.data(), &n), "nvmlGpuInstanceGetComputeInstances"));
    for (unsigned i = 0; i < n && i < cis.size(); ++i) {
      nvmlComputeInstanceInfo_t ci{};
      AICLOUD_RETURN_IF_ERROR(Check(api_->ci_info(cis[i], &ci), "nvmlComputeInstanceGetInfo_v2"));
      out.push_back(ci.id);
    }
  }
  return out;
}

StatusOr<MigInstance> NvmlMig::Create(int gpu, const MigProfileIds& ids, int start) {
  MIG_ASSIGN_OR_RETURN(void* dv, Device(gpu));
  auto* d = static_cast<nvmlDevice_t>(dv);
  const std::string where = "GPU " + std::to_string(gpu) + ", profile " +
                            std::to_string(ids.gpu_instance) + ", start " + std::to_string(start);
  nvmlGpuInstanceProfileInfo_t pinfo{};
  AICLOUD_RETURN_IF_ERROR(Check(api_->gi_profile_info(d, ids.gpu_instance, &pinfo),
                                "nvmlDeviceGetGpuInstanceProfileInfo(" + where + ")"));
  nvmlGpuInstancePlacement_t placement{static_cast<unsigned>(start),
                                       static_cast<unsigned>(ids.memory_slices)};
  nvmlGpuInstance_t gi = nullptr;
  AICLOUD_RETURN_IF_ERROR(Check(api_->create_gi(d, pinfo.id, &placement, &gi),
                                "nvmlDeviceCreateGpuInstanceWithPlacement(" + where + ")"));
  MigInstance m;
  m.gpu = gpu;
  m.profile_id = pinfo.id;
  auto undo = [&](Status s) {
    (void)api_->destroy_gi(gi);
    return s;
  };
  nvmlGpuInstanceInfo_t ginfo{};
  if (Status s = Check(api_->gi_info(gi, &ginfo), "nvmlGpuInstanceGetInfo(" + where + ")"); !s.ok()) {
    return undo(s);
  }
  m.gi_id = ginfo.id;
  m.start = static_cast<int>(ginfo.placement.start);
  m.size = static_cast<int>(ginfo.placement.size);
  nvmlComputeInstanceProfileInfo_t cinfo{};
  if (Status s = Check(api_->ci_profile_info(gi, ids.compute_instance,
                                             NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &cinfo),
                       "nvmlGpuInstanceGetComputeInstanceProfileInfo(" + where + ")");
      !s.ok()) {
    return undo(s);
  }
  nvmlComputeInstance_t ci = nullptr;
  if (Status s = Check(api_->create_ci(gi, cinfo.id, &ci),
                       "nvmlGpuInstanceCreateComputeInstance(" + where + ")");
      !s.ok()) {
    return undo(s);
  }
  nvmlComputeInstanceInfo_t ciinfo{};
  Status s = Check(api_->ci_info(ci, &ciinfo), "nvmlComputeInstanceGetInfo_v2(" + where + ")");
  StatusOr<std::string> uuid = s.ok() ? MigUuid(d, m.gi_id, ciinfo.id) : StatusOr<std::string>(s);
  StatusOr<std::string> parent = Uuid(gpu);
  if (!uuid.ok() || !parent.ok()) {
    (void)api_->destroy_ci(ci);
    return undo(!uuid.ok() ? uuid.status() : parent.status());
  }
  m.ci_ids = {ciinfo.id};
  m.uuid = *uuid;
  m.gpu_uuid = *parent;
  return m;
}

Status NvmlMig::Destroy(const MigInstance& m) {
  MIG_ASSIGN_OR_RETURN(void* dv, Device(m.gpu));
  auto* d = static_cast<nvmlDevice_t>(dv);
  const std::string where = "GPU " + std::to_string(m.gpu) + ", GPU instance " + std::to_string(m.gi_id);
  nvmlGpuInstance_t gi = nullptr;
  AICLOUD_RETURN_IF_ERROR(Check(api_->gi_by_id(d, m.gi_id, &gi), "nvmlDeviceGetGpuInstanceById(" + where + ")"));
  for (unsigned p = 0; p < NVML_COMPUTE_INSTANCE_PROFILE_COUNT; ++p) {
    nvmlComputeInstanceProfileInfo_t info{};
    if (api_->ci_profile_info(gi, p, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &info) != NVML_SUCCESS) {
      continue;
    }
    std::vector<nvmlComputeInstance_t> cis(info.instanceCount + 1, nullptr);
    unsigned n = 0;
    AICLOUD_RETURN_IF_ERROR(Check(api_->get_cis(gi, info.id, cis.data(), &n),
                                  "nvmlGpuInstanceGetComputeInstances(" + where + ")"));
    for (unsigned i = 0; i < n && i < cis.size(); ++i) {
      AICLOUD_RETURN_IF_ERROR(Check(api_->destroy_ci(cis[i]), "nvmlComputeInstanceDestroy(" + where + ")"));
    }
  }
  return Check(api_->destroy_gi(gi), "nvmlGpuInstanceDestroy(" + where + ")");
}

StatusOr<std::vector<MigInstance>> NvmlMig::List(int gpu) {
  MIG_ASSIGN_OR_RETURN(void* dv, Device(gpu));
  auto* d = static_cast<nvmlDevice_t>(dv);
  MIG_ASSIGN_OR_RETURN(std::string parent, Uuid(gpu));
  std::vector<MigInstance> out;
  for (unsigned p = 0; p < kGpuInstanceProfileIds; ++p) {
    nvmlGpuInstanceProfileInfo_t info{};
    const nvmlReturn_t rc = api_->gi_profile_info(d, p, &info);
    if (rc == NVML_ERROR_NOT_SUPPORTED && p == 0) {
      return FailedPreconditionError("GPU " + std::to_string(gpu) + ": MIG is not enabled");
    }
    if (rc != NVML_SUCCESS) continue;  // a profile this GPU does not offer
    std::vector<nvmlGpuInstance_t> gis(info.instanceCount + 1, nullptr);
    unsigned n = 0;
    AICLOUD_RETURN_IF_ERROR(Check(api_->get_gis(d, info.id, gis.data(), &n),
                                  "nvmlDeviceGetGpuInstances(GPU " + std::to_string(gpu) + ")"));
    for (unsigned i = 0; i < n && i < gis.size(); ++i) {
      nvmlGpuInstanceInfo_t gi{};
      AICLOUD_RETURN_IF_ERROR(Check(api_->gi_info(gis[i], &gi), "nvmlGpuInstanceGetInfo"));
      MigInstance m;
      m.gpu = gpu;
      m.gpu_uuid = parent;
      m.gi_id = gi.id;
      m.profile_id = gi.profileId;
      m.start = static_cast<int>(gi.placement.start);
      m.size = static_cast<int>(gi.placement.size);
      MIG_ASSIGN_OR_RETURN(m.ci_ids, ComputeInstanceIds(gis[i]));
      if (!m.ci_ids.empty()) {
        StatusOr<std::string> u = MigUuid(d, m.gi_id, m.ci_ids[0]);
        if (u.ok()) m.uuid = *u;
      }
      out.push_back(std::move(m));
    }
  }
  return out;
}

}  // namespace aicloud::agent
