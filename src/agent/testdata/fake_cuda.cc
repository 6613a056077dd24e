// A fake libcuda for the agent tests: the driver API entry points gpu_wipe.cc uses, with cuda.h's
// signatures. Devices come from the shared fake state (fake_gpu_state.h) and are enumerated as the
// real driver does under CUDA_VISIBLE_DEVICES (GPU-/MIG- UUIDs or indices; unset: every GPU not
// in MIG mode). Memory is bookkeeping only: allocations fail with CUDA_ERROR_OUT_OF_MEMORY past
// the device's free bytes, and every byte set to 0 by cuMemsetD8_v2 is added to the device's
// "zeroedBytes" in the state file.
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "fake_gpu_state.h"

namespace {

using fakegpu::json;
using fakegpu::Log;
using fakegpu::State;

constexpr int CUDA_SUCCESS = 0;
constexpr int CUDA_ERROR_INVALID_VALUE = 1;
constexpr int CUDA_ERROR_OUT_OF_MEMORY = 2;
constexpr int CUDA_ERROR_NOT_INITIALIZED = 3;
constexpr int CUDA_ERROR_NO_DEVICE = 100;
constexpr int CUDA_ERROR_INVALID_DEVICE = 101;
constexpr int CUDA_ERROR_INVALID_CONTEXT = 201;

struct Dev {
  int gpu = 0;
  int gi = -1, ci = -1;  // a MIG device when gi >= 0
  std::string uuid;
};
struct Alloc {
  size_t size;
  int value;  // last byte memset over it, -1 none
};

bool g_init = false;
std::vector<Dev> g_devs;
int g_current = -1;
unsigned long long g_next = 0x7f0000000000ull;
std::map<unsigned long long, Alloc> g_allocs;

int Ret(const std::string& call, int rc) {
  Log(call + " -> " + std::to_string(rc));
  return rc;
}

// The device's JSON (whole GPU or compute instance) and its total bytes.
json* DevJson(State& s, const Dev& d, unsigned long long* total) {
  json& g = s.Gpu(d.gpu);
  const unsigned long long mem = g.value("memoryBytes", 0ull);
  if (d.gi < 0) {
    *total = mem;
    return &g;
  }
  for (json& i : g["instances"]) {
    if (i["gi"].get<int>() != d.gi) continue;
    for (json& c : i["ci"]) {
      if (c["id"].get<int>() == d.ci) {
        *total = mem / 8 * i["size"].get<unsigned long long>();
        return &c;
      }
    }
  }
  return nullptr;
}

size_t Allocated() {
  size_t n = 0;
  for (const auto& [p, a] : g_allocs) n += a.size;
  return n;
}

}  // namespace

extern "C" {

int cuInit(unsigned flags) {
  State s;
  if (flags != 0) return Ret("cuInit", CUDA_ERROR_INVALID_VALUE);
  if (int f = s.Fail("cuInit")) return Ret("cuInit", f);
  g_devs.clear();
  const char* cvd = ::getenv("CUDA_VISIBLE_DEVICES");
  if (cvd == nullptr) {
    for (int i = 0; i < s.Gpus(); ++i) {
      if (!s.Gpu(i).value("migEnabled", false)) g_devs.push_back({i, -1, -1, s.Gpu(i)["uuid"]});
    }
  } else {
    std::string list = cvd;
    size_t at = 0;
    while (at <= list.size()) {
      const size_t comma = list.find(',', at);
      const std::string e = list.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
      at = comma == std::string::npos ? list.size() + 1 : comma + 1;
      bool found = false;
      for (int i = 0; i < s.Gpus() && !found; ++i) {
        json& g = s.Gpu(i);
        if (e == g["uuid"].get<std::string>() || e == std::to_string(i)) {
          if (!g.value("migEnabled", false)) g_devs.push_back({i, -1, -1, g["uuid"]});
          found = true;
        }
        for (const json& inst : g["instances"]) {
          for (const json& c : inst["ci"]) {
            if (c["uuid"] == e) {
              g_devs.push_back({i, inst["gi"].get<int>(), c["id"].get<int>(), e});
              found = true;
            }
          }
        }
      }
      if (!found) break;  // the driver stops at the first entry it cannot resolve
    }
  }
  Log("cuInit visible=" + std::string(cvd ? cvd : "(unset)") + " devices=" + std::to_string(g_devs.size()));
  if (g_devs.empty()) return Ret("cuInit", CUDA_ERROR_NO_DEVICE);
  g_init = true;
  return CUDA_SUCCESS;
}

int cuGetErrorName(int rc, const char** name) {
  switch (rc) {
    case CUDA_SUCCESS: *name = "CUDA_SUCCESS"; break;
    case CUDA_ERROR_INVALID_VALUE: *name = "CUDA_ERROR_INVALID_VALUE"; break;
    case CUDA_ERROR_OUT_OF_MEMORY: *name = "CUDA_ERROR_OUT_OF_MEMORY"; break;
    case CUDA_ERROR_NOT_INITIALIZED: *name = "CUDA_ERROR_NOT_INITIALIZED"; break;
    case CUDA_ERROR_NO_DEVICE: *name = "CUDA_ERROR_NO_DEVICE"; break;
    case CUDA_ERROR_INVALID_DEVICE: *name = "CUDA_ERROR_INVALID_DEVICE"; break;
    case CUDA_ERROR_INVALID_CONTEXT: *name = "CUDA_ERROR_INVALID_CONTEXT"; break;
    case 700: *name = "CUDA_ERROR_ILLEGAL_ADDRESS"; break;
    case 999: *name = "CUDA_ERROR_UNKNOWN"; break;
    default: *name = nullptr; return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

int cuDeviceGetCount(int* count) {
  if (!g_init) return CUDA_ERROR_NOT_INITIALIZED;
  *count = static_cast<int>(g_devs.size());
  return CUDA_SUCCESS;
}

int cuDeviceGet(int* device, int ordinal) {
  if (!g_init) return CUDA_ERROR_NOT_INITIALIZED;
  if (ordinal < 0 || ordinal >= static_cast<int>(g_devs.size())) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

int cuDeviceGetByPCIBusId(int* device, const char* bus) {
  if (!g_init) return CUDA_ERROR_NOT_INITIALIZED;
  State s;
  for (size_t i = 0; i < g_devs.size(); ++i) {
    if (g_devs[i].gi < 0 && s.Gpu(g_devs[i].gpu).value("busId", "") == bus) {
      *device = static_cast<int>(i);
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_INVALID_DEVICE;
}

int cuDeviceGetUuid_v2(char* uuid16, int device) {
  if (!g_init) return CUDA_ERROR_NOT_INITIALIZED;
  if (device < 0 || device >= static_cast<int>(g_devs.size())) return CUDA_ERROR_INVALID_DEVICE;
  if (!fakegpu::UuidBytes(g_devs[device].uuid, uuid16)) std::memset(uuid16, 0, 16);
  return CUDA_SUCCESS;
}

int cuDevicePrimaryCtxRetain(void** ctx, int device) {
  if (!g_init) return CUDA_ERROR_NOT_INITIALIZED;
  if (device < 0 || device >= static_cast<int>(g_devs.size())) return CUDA_ERROR_INVALID_DEVICE;
  State s;
  if (int f = s.Fail("cuDevicePrimaryCtxRetain")) return Ret("cuDevicePrimaryCtxRetain", f);
  *ctx = reinterpret_cast<void*>(static_cast<uintptr_t>(0x1000 + device));
  return Ret("cuDevicePrimaryCtxRetain device=" + g_devs[device].uuid, CUDA_SUCCESS);
}

int cuDevicePrimaryCtxRelease_v2(int device) {
  if (device < 0 || device >= static_cast<int>(g_devs.size())) return CUDA_ERROR_INVALID_DEVICE;
  if (g_current == device) g_current = -1;
  return Ret("cuDevicePrimaryCtxRelease_v2", CUDA_SUCCESS);
}

int cuCtxSetCurrent(void* ctx) {
  const auto v = reinterpret_cast<uintptr_t>(ctx);
  if (v < 0x1000 || v - 0x1000 >= g_devs.size()) return CUDA_ERROR_INVALID_CONTEXT;
  g_current = static_cast<int>(v - 0x1000);
  return CUDA_SUCCESS;
}

int cuCtxSynchronize() {
  if (g_current < 0) return CUDA_ERROR_INVALID_CONTEXT;
  State s;
  if (int f = s.Fail("cuCtxSynchronize")) return Ret("cuCtxSynchronize", f);
  return Ret("cuCtxSynchronize", CUDA_SUCCESS);
}

int cuMemGetInfo_v2(size_t* free_bytes, size_t* total) {
  if (g_current < 0) return CUDA_ERROR_INVALID_CONTEXT;
  State s;
  unsigned long long t = 0;
  json* d = DevJson(s, g_devs[g_current], &t);
  if (d == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  const unsigned long long used = d->value("usedBytes", 0ull) + Allocated();
  *total = t;
  *free_bytes = used >= t ? 0 : t - used;
  return Ret("cuMemGetInfo_v2 free=" + std::to_string(*free_bytes) + " total=" + std::to_string(t), CUDA_SUCCESS);
}

int cuMemAlloc_v2(unsigned long long* ptr, size_t size) {
  if (g_current < 0) return CUDA_ERROR_INVALID_CONTEXT;
  const std::string call = "cuMemAlloc_v2 size=" + std::to_string(size);
  if (size == 0) return Ret(call, CUDA_ERROR_INVALID_VALUE);
  State s;
  if (int f = s.Fail("cuMemAlloc_v2")) return Ret(call, f);
  unsigned long long t = 0;
  json* d = DevJson(s, g_devs[g_current], &t);
  if (d == nullptr) return Ret(call, CUDA_ERROR_INVALID_DEVICE);
  if (d->value("usedBytes", 0ull) + Allocated() + size > t) return Ret(call, CUDA_ERROR_OUT_OF_MEMORY);
  *ptr = g_next;
  g_next += (size + 0xfffff) & ~0xfffffull;
  g_allocs[*ptr] = {size, -1};
  return Ret(call, CUDA_SUCCESS);
}

int cuMemFree_v2(unsigned long long ptr) {
  if (g_allocs.erase(ptr) == 0) return Ret("cuMemFree_v2", CUDA_ERROR_INVALID_VALUE);
  return CUDA_SUCCESS;
}

int cuMemsetD8_v2(unsigned long long ptr, unsigned char value, size_t n) {
  const std::string call = "cuMemsetD8_v2 value=" + std::to_string(value) + " bytes=" + std::to_string(n);
  auto it = g_allocs.find(ptr);
  if (g_current < 0) return Ret(call, CUDA_ERROR_INVALID_CONTEXT);
  if (it == g_allocs.end() || n > it->second.size) return Ret(call, CUDA_ERROR_INVALID_VALUE);
  State s;
  if (int f = s.Fail("cuMemsetD8_v2")) return Ret(call, f);
  it->second.value = value;
  if (value == 0) {
    unsigned long long t = 0;
    json* d = DevJson(s, g_devs[g_current], &t);
    (*d)["zeroedBytes"] = d->value("zeroedBytes", 0ull) + n;
    s.Save();
  }
  return Ret(call, CUDA_SUCCESS);
}

int cuMemcpyDtoH_v2(void* host, unsigned long long src, size_t n) {
  for (const auto& [p, a] : g_allocs) {
    if (src >= p && src + n <= p + a.size) {
      std::memset(host, a.value < 0 ? 0xEE : a.value, n);
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_INVALID_VALUE;
}

}  // extern "C"
