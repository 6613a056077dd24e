// Test side of the fake NVML/CUDA libraries (fake_gpu_state.h): a temp dir holding their state
// and call log, named in the environment so the agent, its wipe helper and the test share them.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace aicloud::agent::testing {

class FakeGpus {
 public:
  static constexpr int64_t kMemory = int64_t{8} << 30;            // per GPU
  static constexpr int64_t kUsedOnGpu1 = (int64_t{1} << 30) + (int64_t{3} << 20);

  FakeGpus() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "fake_gpus.XXXXXX").string();
    dir_ = ::mkdtemp(tmpl.data());
    ::setenv("AICLOUD_FAKE_GPU_STATE", (dir_ + "/state.json").c_str(), 1);
    ::setenv("AICLOUD_FAKE_GPU_LOG", (dir_ + "/calls.log").c_str(), 1);
    // GPU 0 in MIG mode, GPU 1 whole with 1 GiB + 3 MiB held by another process.
    Write({{"gpus",
            {{{"name", "NVIDIA H100 80GB HBM3"}, {"uuid", "GPU-00000000-0000-4000-8000-000000000a00"},
              {"busId", "00000000:18:00.0"}, {"memoryBytes", kMemory}, {"migEnabled", true},
              {"instances", nlohmann::json::array()}},
             {{"name", "NVIDIA H100 80GB HBM3"}, {"uuid", "GPU-00000000-0000-4000-8000-000000000a01"},
              {"busId", "00000000:2a:00.0"}, {"memoryBytes", kMemory}, {"usedBytes", kUsedOnGpu1},
              {"migEnabled", false}, {"instances", nlohmann::json::array()}}}},
           {"fail", nlohmann::json::object()},
           {"counter", 0}});
  }
  ~FakeGpus() {
    ::unsetenv("AICLOUD_FAKE_GPU_STATE");
    ::unsetenv("AICLOUD_FAKE_GPU_LOG");
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  nlohmann::json State() const {
    std::ifstream in(dir_ + "/state.json");
    std::stringstream ss;
    ss << in.rdbuf();
    return nlohmann::json::parse(ss.str());
  }
  void Write(const nlohmann::json& j) const { std::ofstream(dir_ + "/state.json", std::ios::trunc) << j.dump(1); }
  void Fail(const std::string& symbol, int code) const {
    nlohmann::json j = State();
    j["fail"][symbol] = code;
    Write(j);
  }
  void ClearFailures() const {
    nlohmann::json j = State();
    j["fail"] = nlohmann::json::object();
    Write(j);
  }
  // Adds a GPU instance (with one compute instance) nobody in the test created through NVML.
  void AddInstance(int gpu, unsigned gi, unsigned profile, unsigned start, unsigned size, unsigned compute,
                   const std::string& uuid) const {
    nlohmann::json j = State();
    j["gpus"][gpu]["instances"].push_back(
        {{"gi", gi}, {"profile", profile}, {"start", start}, {"size", size}, {"compute", compute},
         {"ci", {{{"id", 0}, {"profile", 0}, {"slices", 1}, {"uuid", uuid}, {"zeroedBytes", 0}}}}});
    Write(j);
  }
  std::vector<std::string> Calls() const {
    std::ifstream in(dir_ + "/calls.log");
    std::vector<std::string> out;
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
  }
  // Calls whose line starts with `prefix`.
  std::vector<std::string> Calls(const std::string& prefix) const {
    std::vector<std::string> out;
    for (const std::string& l : Calls()) {
      if (l.rfind(prefix, 0) == 0) out.push_back(l);
    }
    return out;
  }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
};

}  // namespace aicloud::agent::testing
