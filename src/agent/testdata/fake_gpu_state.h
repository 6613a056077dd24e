// Shared state of the fake NVML and CUDA libraries the agent tests load instead of the real ones.
//
// Both fakes keep the devices in one JSON file named by AICLOUD_FAKE_GPU_STATE, read and written
// under an exclusive flock on every call, so the agent, its wipe helper processes and the test
// see the same GPUs across dlopen/dlclose and across an agent restart. Every call is appended to
// the file named by AICLOUD_FAKE_GPU_LOG as one line "<symbol> <arguments> -> <return code>".
//
// State layout (the test writes the first version):
//   {"gpus": [{"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-...", "busId": "00000000:18:00.0",
//              "memoryBytes": 8589934592, "usedBytes": 0,      // held by other processes
//              "migEnabled": true, "zeroedBytes": 0,            // bytes memset to 0 through CUDA
//              "instances": [{"gi": 1, "profile": 9, "start": 6, "size": 2, "compute": 1,
//                             "ci": [{"id": 0, "profile": 0, "slices": 1, "uuid": "MIG-...",
//                                     "zeroedBytes": 0}]}]}],
//    "fail": {"nvmlGpuInstanceCreateComputeInstance": 23},      // symbol -> error code to return
//    "counter": 0}
#pragma once

#include <fcntl.h>
#include <stdlib.h>
#include <sys/file.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

namespace fakegpu {

using json = nlohmann::json;

inline std::string Env(const char* name) {
  const char* v = ::getenv(name);
  return v != nullptr ? v : "";
}

inline void Log(const std::string& line) {
  const std::string path = Env("AICLOUD_FAKE_GPU_LOG");
  if (path.empty()) return;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return;
  const std::string l = line + "\n";
  (void)!::write(fd, l.data(), l.size());
  ::close(fd);
}

// The state, locked for the lifetime of this object; Save() writes it back.
class State {
 public:
  State() {
    path_ = Env("AICLOUD_FAKE_GPU_STATE");
    if (path_.empty()) return;
    lock_ = ::open((path_ + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lock_ >= 0) ::flock(lock_, LOCK_EX);
    std::ifstream in(path_);
    std::stringstream ss;
    ss << in.rdbuf();
    try {
      j = json::parse(ss.str());
    } catch (const std::exception&) {
      j = json::object();
    }
    if (!j.contains("gpus")) j["gpus"] = json::array();
  }
  ~State() {
    if (lock_ >= 0) {
      ::flock(lock_, LOCK_UN);
      ::close(lock_);
    }
  }
  State(const State&) = delete;
  State& operator=(const State&) = delete;

  void Save() {
    if (path_.empty()) return;
    const std::string tmp = path_ + ".tmp";
    {
      std::ofstream out(tmp, std::ios::trunc);
      out << j.dump(1);
    }
    ::rename(tmp.c_str(), path_.c_str());
  }
  // The error code the test asked `symbol` to fail with, or 0.
  int Fail(const char* symbol) const {
    if (!j.contains("fail") || !j["fail"].contains(symbol)) return 0;
    return j["fail"][symbol].get<int>();
  }
  int Gpus() const { return static_cast<int>(j["gpus"].size()); }
  json& Gpu(int i) { return j["gpus"][static_cast<size_t>(i)]; }
  int64_t Next() {
    const int64_t n = j.value("counter", int64_t{0}) + 1;
    j["counter"] = n;
    return n;
  }

  json j;

 private:
  std::string path_;
  int lock_ = -1;
};

// The 16 bytes of "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (what cuDeviceGetUuid reports).
inline bool UuidBytes(const std::string& text, char out[16]) {
  int n = 0;
  for (size_t i = 4; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '-') continue;
    int v;
    if (c >= '0' && c <= '9') {
      v = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      v = c - 'a' + 10;
    } else if (c >= 'A' && c <= 'F') {
      v = c - 'A' + 10;
    } else {
      return false;
    }
    if (n >= 32) return false;
    if (n % 2 == 0) {
      out[n / 2] = static_cast<char>(v << 4);
    } else {
      out[n / 2] = static_cast<char>(out[n / 2] | v);
    }
    ++n;
  }
  return n == 32;
}

}  // namespace fakegpu
