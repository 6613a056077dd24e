#include "agent/gpu_wipe.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cstring>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

extern char** environ;

namespace aicloud::agent {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// --- The subset of cuda.h used here (CUDA Driver API reference) ----------------------------
using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;  // CUdeviceptr_v2 on 64-bit hosts
struct CUctx_st;
using CUcontext = CUctx_st*;
struct CUuuid {
  char bytes[16];
};
constexpr CUresult CUDA_SUCCESS = 0;
constexpr CUresult CUDA_ERROR_OUT_OF_MEMORY = 2;

struct CudaApi {
  void* handle = nullptr;
  CUresult (*init)(unsigned) = nullptr;
  CUresult (*get_error_name)(CUresult, const char**) = nullptr;
  CUresult (*device_get)(CUdevice*, int) = nullptr;
  CUresult (*device_count)(int*) = nullptr;
  CUresult (*device_by_bus_id)(CUdevice*, const char*) = nullptr;
  CUresult (*device_uuid)(CUuuid*, CUdevice) = nullptr;
  CUresult (*ctx_retain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*ctx_release)(CUdevice) = nullptr;
  CUresult (*ctx_set_current)(CUcontext) = nullptr;
  CUresult (*ctx_synchronize)() = nullptr;
  CUresult (*mem_get_info)(size_t*, size_t*) = nullptr;
  CUresult (*mem_alloc)(CUdeviceptr*, size_t) = nullptr;
  CUresult (*mem_free)(CUdeviceptr) = nullptr;
  CUresult (*memset_d8)(CUdeviceptr, unsigned char, size_t) = nullptr;
  CUresult (*memcpy_dtoh)(void*, CUdeviceptr, size_t) = nullptr;
  ~CudaApi() {
    if (handle != nullptr) ::dlclose(handle);
  }
};

StatusOr<std::unique_ptr<CudaApi>> LoadCuda(const std::string& library) {
  ::dlerror();
  auto api = std::make_unique<CudaApi>();
  api->handle = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (api->handle == nullptr) {
    const char* err = ::dlerror();
    return UnavailableError("CUDA driver not found: " + library + ": " +
                            (err != nullptr ? err : "unknown dlopen error"));
  }
  const std::pair<const char*, void**> symbols[] = {
      {"cuInit", reinterpret_cast<void**>(&api->init)},
      {"cuGetErrorName", reinterpret_cast<void**>(&api->get_error_name)},
      {"cuDeviceGet", reinterpret_cast<void**>(&api->device_get)},
      {"cuDeviceGetCount", reinterpret_cast<void**>(&api->device_count)},
      {"cuDeviceGetByPCIBusId", reinterpret_cast<void**>(&api->device_by_bus_id)},
      {"cuDeviceGetUuid_v2", reinterpret_cast<void**>(&api->device_uuid)},
      {"cuDevicePrimaryCtxRetain", reinterpret_cast<void**>(&api->ctx_retain)},
      {"cuDevicePrimaryCtxRelease_v2", reinterpret_cast<void**>(&api->ctx_release)},
      {"cuCtxSetCurrent", reinterpret_cast<void**>(&api->ctx_set_current)},
      {"cuCtxSynchronize", reinterpret_cast<void**>(&api->ctx_synchronize)},
      {"cuMemGetInfo_v2", reinterpret_cast<void**>(&api->mem_get_info)},
      {"cuMemAlloc_v2", reinterpret_cast<void**>(&api->mem_alloc)},
      {"cuMemFree_v2", reinterpret_cast<void**>(&api->mem_free)},
      {"cuMemsetD8_v2", reinterpret_cast<void**>(&api->memset_d8)},
      {"cuMemcpyDtoH_v2", reinterpret_cast<void**>(&api->memcpy_dtoh)},
  };
  for (const auto& [symbol, slot] : symbols) {
    *slot = ::dlsym(api->handle, symbol);
    if (*slot == nullptr) {
      return UnavailableError(std::string("CUDA driver: ") + symbol + " missing in " + library);
    }
  }
  return api;
}

std::string ErrorName(const CudaApi& api, CUresult r) {
  const char* name = nullptr;
  if (api.get_error_name(r, &name) == CUDA_SUCCESS && name != nullptr) return name;
  return "CUDA error " + std::to_string(r);
}

// "GPU-8d4f1a2b-...-..." / "MIG-..." -> the 16 bytes cuDeviceGetUuid reports; false when the
// text after the prefix is not 32 hex digits (dashes ignored).
bool ParseUuid(const std::string& text, CUuuid* out) {
  if (text.size() < 4) return false;
  int n = 0;
  for (size_t i = 4; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '-') continue;
    if (!std::isxdigit(static_cast<unsigned char>(c)) || n >= 32) return false;
    const int v = std::isdigit(static_cast<unsigned char>(c)) ? c - '0' : (std::tolower(c) - 'a' + 10);
    if (n % 2 == 0) {
      out->bytes[n / 2] = static_cast<char>(v << 4);
    } else {
      out->bytes[n / 2] = static_cast<char>(out->bytes[n / 2] | v);
    }
    ++n;
  }
  return n == 32;
}

double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

}  // namespace

StatusOr<WipeResult> WipeDeviceMemory(const std::string& cuda_library, const std::string& device,
                                      const WipeOptions& options) {
  const auto t0 = Clock::now();
  StatusOr<std::unique_ptr<CudaApi>> loaded = LoadCuda(cuda_library);
  if (!loaded.ok()) return loaded.status();
  CudaApi& cu = **loaded;
  auto fail = [&](const std::string& call, CUresult r) {
    return InternalError(device + ": " + call + ": " + ErrorName(cu, r));
  };
  if (CUresult r = cu.init(0); r != CUDA_SUCCESS) return fail("cuInit", r);
  CUdevice dev = 0;
  const bool is_uuid = device.rfind("GPU-", 0) == 0 || device.rfind("MIG-", 0) == 0;
  if (device.find(':') != std::string::npos) {
    if (CUresult r = cu.device_by_bus_id(&dev, device.c_str()); r != CUDA_SUCCESS) {
      return fail("cuDeviceGetByPCIBusId", r);
    }
  } else {
    int count = 0;
    if (CUresult r = cu.device_count(&count); r != CUDA_SUCCESS) return fail("cuDeviceGetCount", r);
    if (count < 1) return InternalError(device + ": no CUDA device visible");
    if (CUresult r = cu.device_get(&dev, 0); r != CUDA_SUCCESS) return fail("cuDeviceGet", r);
    if (is_uuid) {
      CUuuid want{}, got{};
      if (!ParseUuid(device, &want)) return InvalidArgumentError("not a device UUID: " + device);
      if (CUresult r = cu.device_uuid(&got, dev); r != CUDA_SUCCESS) return fail("cuDeviceGetUuid_v2", r);
      if (std::memcmp(want.bytes, got.bytes, sizeof want.bytes) != 0) {
        return InternalError(device + ": CUDA device 0 is another device (CUDA_VISIBLE_DEVICES not honoured)");
      }
    }
  }
  CUcontext ctx = nullptr;
  if (CUresult r = cu.ctx_retain(&ctx, dev); r != CUDA_SUCCESS) return fail("cuDevicePrimaryCtxRetain", r);
  struct Release {
    CudaApi& cu;
    CUdevice dev;
    ~Release() { (void)cu.ctx_release(dev); }
  } release{cu, dev};
  if (CUresult r = cu.ctx_set_current(ctx); r != CUDA_SUCCESS) return fail("cuCtxSetCurrent", r);

  std::vector<std::pair<CUdeviceptr, size_t>> blocks;
  struct FreeAll {
    CudaApi& cu;
    std::vector<std::pair<CUdeviceptr, size_t>>& blocks;
    void operator()() {
      for (const auto& b : blocks) (void)cu.mem_free(b.first);
      blocks.clear();
    }
    ~FreeAll() { (*this)(); }
  } free_all{cu, blocks};

  // Takes all the memory it can, chunk by chunk, and sets each chunk to `value`.
  auto fill = [&](unsigned char value, int64_t* bytes) -> Status {
    size_t free_bytes = 0, total = 0;
    if (CUresult r = cu.mem_get_info(&free_bytes, &total); r != CUDA_SUCCESS) return fail("cuMemGetInfo_v2", r);
    int64_t chunk = std::min<int64_t>(options.first_chunk, static_cast<int64_t>(free_bytes));
    chunk -= chunk % options.floor;
    if (chunk < options.floor) chunk = options.floor;
    while (chunk >= options.floor) {
      CUdeviceptr p = 0;
      const CUresult r = cu.mem_alloc(&p, static_cast<size_t>(chunk));
      if (r == CUDA_ERROR_OUT_OF_MEMORY) {
        chunk /= 2;
        continue;
      }
      if (r != CUDA_SUCCESS) return fail("cuMemAlloc_v2", r);
      blocks.emplace_back(p, static_cast<size_t>(chunk));
      if (CUresult m = cu.memset_d8(p, value, static_cast<size_t>(chunk)); m != CUDA_SUCCESS) {
        return fail("cuMemsetD8_v2", m);
      }
      *bytes += chunk;
    }
    if (CUresult r = cu.ctx_synchronize(); r != CUDA_SUCCESS) return fail("cuCtxSynchronize", r);
    return OkStatus();
  };

  WipeResult out;
  out.device = device;
  if (options.check) {
    int64_t patterned = 0;
    AICLOUD_RETURN_IF_ERROR(fill(0xA5, &patterned));
    free_all();
  }
  const auto t_mem = Clock::now();
  AICLOUD_RETURN_IF_ERROR(fill(0, &out.bytes));
  out.memset_ms = MsSince(t_mem);
  out.chunks = static_cast<int64_t>(blocks.size());
  if (options.check) {
    std::vector<unsigned char> host(size_t{1} << 20);
    for (const auto& [p, size] : blocks) {
      const size_t n = std::min(host.size(), size);
      for (const CUdeviceptr at : {p, p + size - n}) {
        std::fill(host.begin(), host.end(), 0xFF);
        if (CUresult r = cu.memcpy_dtoh(host.data(), at, n); r != CUDA_SUCCESS) return fail("cuMemcpyDtoH_v2", r);
        for (size_t i = 0; i < n; ++i) {
          if (host[i] != 0) return InternalError(device + ": byte not zero after the wipe");
        }
        out.verified_bytes += static_cast<int64_t>(n);
      }
    }
  }
  free_all();
  out.ms = MsSince(t0);
  return out;
}

int GpuWipeMain(int argc, char** argv) {
  std::string library = "libcuda.so.1", device;
  WipeOptions options;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--cuda-library" && i + 1 < argc) {
      library = argv[++i];
    } else if (a == "--device" && i + 1 < argc) {
      device = argv[++i];
    } else if (a == "--check") {
      options.check = true;
    } else {
      std::cout << json{{"ok", false}, {"error", "unknown argument: " + a}}.dump() << std::endl;
      return 2;
    }
  }
  if (device.empty()) {
    std::cout << json{{"ok", false}, {"error", "--device is required"}}.dump() << std::endl;
    return 2;
  }
  // Before cuInit: this process sees the named device (and only it) as CUDA device 0.
  if (device.find(':') == std::string::npos) ::setenv("CUDA_VISIBLE_DEVICES", device.c_str(), 1);
  StatusOr<WipeResult> r = WipeDeviceMemory(library, device, options);
  if (!r.ok()) {
    const bool unavailable = r.status().code() == StatusCode::kUnavailable;
    std::cout << json{{"ok", false}, {"unavailable", unavailable}, {"error", r.status().message()}}.dump()
              << std::endl;
    return unavailable ? 3 : 1;
  }
  std::cout << json{{"ok", true},          {"device", r->device}, {"bytes", r->bytes},
                    {"ms", r->ms},         {"memsetMs", r->memset_ms}, {"chunks", r->chunks},
                    {"verifiedBytes", r->verified_bytes}}
                   .dump()
            << std::endl;
  return 0;
}

StatusOr<WipeResult> RunWipeHelper(const std::vector<std::string>& command,
                                   const std::string& cuda_library, const std::string& device,
                                   std::chrono::milliseconds timeout) {
  if (command.empty()) return InvalidArgumentError("no GPU wipe helper configured");
  std::vector<std::string> args = command;
  for (const char* a : {"--cuda-library"}) args.push_back(a);
  args.push_back(cuda_library);
  args.push_back("--device");
  args.push_back(device);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return InternalError(std::string("pipe: ") + std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    return InternalError("cannot run GPU wipe helper " + args[0] + ": " + std::strerror(rc));
  }
  std::string out;
  const auto deadline = Clock::now() + timeout;
  bool timed_out = false;
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    const int n = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) continue;
    char buf[4096];
    const ssize_t got = ::read(fds[0], buf, sizeof buf);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    if (out.size() < (1 << 16)) out.append(buf, static_cast<size_t>(got));
  }
  ::close(fds[0]);
  if (timed_out) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    return InternalError("GPU wipe of " + device + " did not finish in " +
                         std::to_string(timeout.count()) + " ms (helper killed)");
  }
  json answer;
  try {
    answer = json::parse(out.substr(0, out.find('\n')));
  } catch (const std::exception&) {
    std::string how = WIFSIGNALED(status) ? "killed by signal " + std::to_string(WTERMSIG(status))
                                          : "exit " + std::to_string(WEXITSTATUS(status));
    return InternalError("GPU wipe helper for " + device + " gave no answer (" + how + ")");
  }
  if (!answer.value("ok", false)) {
    const std::string error = answer.value("error", std::string("unknown error"));
    if (answer.value("unavailable", false)) return UnavailableError(error);
    return InternalError(error);
  }
  WipeResult r;
  r.device = device;
  r.bytes = answer.value("bytes", int64_t{0});
  r.ms = answer.value("ms", 0.0);
  r.memset_ms = answer.value("memsetMs", 0.0);
  r.chunks = answer.value("chunks", int64_t{0});
  r.verified_bytes = answer.value("verifiedBytes", int64_t{0});
  return r;
}

}  // namespace aicloud::agent
