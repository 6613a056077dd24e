// GpuIsolation against the fake NVML and CUDA libraries (testdata/): real dlopen, real helper
// process, device state in a file the test reads.
#include "agent/gpu_isolation.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "agent/testdata/fake_gpus.h"

namespace aicloud::agent {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using testing::FakeGpus;

// What the wipe can clear on GPU 1: its free memory, less the last MiB below the 2 MiB floor.
constexpr int64_t kWipeableOnGpu1 = FakeGpus::kMemory - FakeGpus::kUsedOnGpu1 - (int64_t{1} << 20);

class GpuIsolationTest : public ::testing::Test {
 protected:
  GpuIsolationTest() {
    std::string tmpl = (fs::temp_directory_path() / "gpu_isolation_test.XXXXXX").string();
    work_ = ::mkdtemp(tmpl.data());
  }
  ~GpuIsolationTest() override {
    std::error_code ec;
    fs::remove_all(work_, ec);
  }
  GpuIsolationOptions Options() {
    return {.work_dir = work_, .nvml_library = AICLOUD_FAKE_NVML, .cuda_library = AICLOUD_FAKE_CUDA,
            .wipe_command = {AICLOUD_GPU_WIPE_HELPER}, .wipe_timeout = std::chrono::seconds(30)};
  }
  std::unique_ptr<GpuIsolation> Started(GpuIsolationOptions o) {
    auto g = std::make_unique<GpuIsolation>(std::move(o));
    g->Start(&events_);
    return g;
  }
  std::unique_ptr<GpuIsolation> Started() { return Started(Options()); }
  // Events with `reason`, in order.
  std::vector<json> Events(const std::string& reason) const {
    std::vector<json> out;
    for (const json& e : events_) {
      if (e["reason"] == reason) out.push_back(e);
    }
    return out;
  }
  static json Mig(int index, int start, const std::string& profile) {
    return json::array({{{"index", index}, {"milli", 1000}, {"migStart", start}, {"migProfile", profile}}});
  }
  static json Whole(int index) { return json::array({{{"index", index}, {"milli", 1000}}}); }

  FakeGpus fake_;
  std::string work_;
  json events_ = json::array();
};

TEST_F(GpuIsolationTest, MigSliceIsCreatedAtThePlacedSlotAndDestroyedWhenReleased) {
  auto gpus = Started();
  StatusOr<std::map<std::string, std::string>> env = gpus->Prepare("a1", "alice", "train", Mig(0, 4, "3g.40gb"), &events_);
  ASSERT_TRUE(env.ok()) << env.status();
  json inst = fake_.State()["gpus"][0]["instances"];
  ASSERT_EQ(inst.size(), 1u) << inst.dump();
  EXPECT_EQ(inst[0]["profile"], 2);  // NVML_GPU_INSTANCE_PROFILE_3_SLICE
  EXPECT_EQ(inst[0]["start"], 4);
  EXPECT_EQ(inst[0]["size"], 4);
  ASSERT_EQ(inst[0]["ci"].size(), 1u);
  EXPECT_EQ(inst[0]["ci"][0]["profile"], 2);  // NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE: all of it
  const std::string uuid = inst[0]["ci"][0]["uuid"];
  EXPECT_EQ(uuid.rfind("MIG-", 0), 0u);
  EXPECT_EQ(env->at("CUDA_VISIBLE_DEVICES"), uuid);
  EXPECT_EQ(fake_.Calls("nvmlDeviceCreateGpuInstanceWithPlacement").size(), 1u);
  EXPECT_EQ(fake_.Calls("nvmlDeviceCreateGpuInstanceWithPlacement")[0].find("gpu=0 profile=2 start=4 size=4"),
            std::string("nvmlDeviceCreateGpuInstanceWithPlacement ").size());
  ASSERT_EQ(Events("MigInstanceCreated").size(), 1u);
  EXPECT_EQ(Events("MigInstanceCreated")[0]["tenant"], "alice");
  EXPECT_EQ(gpus->Holders(), std::vector<std::string>{"a1"});

  gpus->Release("a1", &events_);
  EXPECT_TRUE(fake_.State()["gpus"][0]["instances"].empty());
  // Compute instance first, then the GPU instance.
  std::vector<std::string> calls = fake_.Calls();
  auto at = [&](const std::string& p) {
    for (size_t i = 0; i < calls.size(); ++i) {
      if (calls[i].rfind(p, 0) == 0) return static_cast<int>(i);
    }
    return -1;
  };
  ASSERT_GE(at("nvmlComputeInstanceDestroy"), 0);
  EXPECT_LT(at("nvmlComputeInstanceDestroy"), at("nvmlGpuInstanceDestroy"));
  EXPECT_EQ(Events("MigInstanceDestroyed").size(), 1u);
  EXPECT_TRUE(gpus->Holders().empty());
  gpus->Release("a1", &events_);  // idempotent
  EXPECT_EQ(Events("MigInstanceDestroyed").size(), 1u);
}

// Another attempt of the same tenant may join a MIG instance the agent made; another tenant's
// never does, and the instance stays its holder's.
TEST_F(GpuIsolationTest, AMigInstanceIsNeverSharedAcrossTenants) {
  auto gpus = Started();
  ASSERT_TRUE(gpus->Prepare("a1", "alice", "j", Mig(0, 4, "3g.40gb"), &events_).ok());
  ASSERT_TRUE(gpus->Prepare("a2", "alice", "j", Mig(0, 4, "3g.40gb"), &events_).ok());
  StatusOr<std::map<std::string, std::string>> env = gpus->Prepare("b1", "bob", "jb", Mig(0, 4, "3g.40gb"), &events_);
  ASSERT_FALSE(env.ok());
  EXPECT_NE(env.status().message().find("in use by tenant alice"), std::string::npos) << env.status();
  EXPECT_EQ(fake_.State()["gpus"][0]["instances"].size(), 1u);
  std::vector<std::string> holders = gpus->Holders();
  std::sort(holders.begin(), holders.end());
  EXPECT_EQ(holders, (std::vector<std::string>{"a1", "a2"}));
  EXPECT_TRUE(Events("GpuMemoryWiped").empty()) << "nothing of alice's was wiped for bob";
}

TEST(GpuDeviceDenials, EveryGpuOfTheNodeButTheAttemptsOwn) {
  const json node = json::array({{{"index", 0}}, {{"index", 1}}, {{"index", 2}}, {{"index", 3}}});
  EXPECT_EQ(GpuDeviceDenials(node, json::array({{{"index", 1}, {"milli", 1000}}, {{"index", 3}, {"milli", 500}}})),
            (std::vector<std::string>{"c 195:0 rwm", "c 195:2 rwm"}));
  EXPECT_EQ(GpuDeviceDenials(node, json::array()),
            (std::vector<std::string>{"c 195:0 rwm", "c 195:1 rwm", "c 195:2 rwm", "c 195:3 rwm"}));
  EXPECT_TRUE(GpuDeviceDenials(json::array(), json::array()).empty());  // a CPU node
  EXPECT_TRUE(GpuDeviceDenials(json("x"), json::array()).empty());
}

TEST_F(GpuIsolationTest, AnOccupiedSlotIsAnErrorEventAndNothingIsLeftBehind) {
  fake_.AddInstance(0, 7, 2, 4, 4, 3, "MIG-00000000-0000-4000-8000-0000000000f7");
  auto gpus = Started();
  StatusOr<std::map<std::string, std::string>> env = gpus->Prepare("a1", "alice", "j", Mig(0, 4, "3g.40gb"), &events_);
  ASSERT_FALSE(env.ok());
  EXPECT_EQ(env.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(env.status().message().find("Insufficient Resources"), std::string::npos) << env.status();
  ASSERT_EQ(Events("GpuSetupFailed").size(), 1u);
  EXPECT_EQ(Events("GpuSetupFailed")[0]["type"], "Warning");
  EXPECT_EQ(fake_.State()["gpus"][0]["instances"].size(), 1u);  // the foreign one, untouched

  // A compute instance NVML refuses: the GPU instance made for it is destroyed again.
  fake_.Fail("nvmlGpuInstanceCreateComputeInstance", 999);
  env = gpus->Prepare("a2", "alice", "j", Mig(0, 0, "3g.40gb"), &events_);
  ASSERT_FALSE(env.ok());
  EXPECT_NE(env.status().message().find("nvmlGpuInstanceCreateComputeInstance"), std::string::npos) << env.status();
  EXPECT_NE(env.status().message().find("Unknown Error"), std::string::npos) << env.status();
  EXPECT_EQ(fake_.State()["gpus"][0]["instances"].size(), 1u);
  EXPECT_TRUE(gpus->Holders().empty());

  // MIG off on GPU 1: NOT_SUPPORTED, named.
  fake_.ClearFailures();
  env = gpus->Prepare("a3", "alice", "j", Mig(1, 0, "1g.10gb"), &events_);
  ASSERT_FALSE(env.ok());
  EXPECT_NE(env.status().message().find("Not Supported"), std::string::npos) << env.status();
}

TEST_F(GpuIsolationTest, GpuHandedToAnotherTenantIsWipedEvenAfterARestart) {
  {
    auto gpus = Started();
    ASSERT_TRUE(gpus->Prepare("a1", "alice", "j", Whole(1), &events_).ok());
    gpus->Release("a1", &events_);
  }
  EXPECT_TRUE(fake_.Calls("cuMemsetD8_v2").empty()) << "first use: nothing to wipe";
  // The agent restarts: the last tenant comes from the state file.
  auto gpus = Started();
  StatusOr<std::map<std::string, std::string>> env = gpus->Prepare("b1", "bob", "jb", Whole(1), &events_);
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->at("CUDA_VISIBLE_DEVICES"), "1");
  EXPECT_EQ(env->at("CUDA_DEVICE_ORDER"), "PCI_BUS_ID");
  ASSERT_EQ(Events("GpuMemoryWiped").size(), 1u);
  const json e = Events("GpuMemoryWiped")[0];
  EXPECT_EQ(e["tenant"], "bob");
  EXPECT_EQ(e["gpu"], 1);
  const std::string msg = e["message"];
  EXPECT_EQ(msg.rfind("GPU 1: wiped 7.0 GiB in ", 0), 0u) << msg;
  EXPECT_NE(msg.find(" ms before tenant bob (last used by alice) [" + std::to_string(kWipeableOnGpu1) + " bytes]"),
            std::string::npos) << msg;
  // The device saw exactly those bytes set to zero, in chunks that halved near the end.
  EXPECT_EQ(fake_.State()["gpus"][1]["zeroedBytes"], kWipeableOnGpu1);
  EXPECT_EQ(fake_.Calls("cuMemsetD8_v2 value=0").size(), 14u);
  EXPECT_FALSE(fake_.Calls("cuMemAlloc_v2 size=2097152 -> 2").empty()) << "halved down to the floor";
  // Same tenant again: no second wipe.
  ASSERT_TRUE(gpus->Prepare("b2", "bob", "jb", Whole(1), &events_).ok());
  EXPECT_EQ(Events("GpuMemoryWiped").size(), 1u);
  EXPECT_EQ(fake_.State()["gpus"][1]["zeroedBytes"], kWipeableOnGpu1);
}

TEST_F(GpuIsolationTest, AMigSliceOverAnotherTenantsSlotsIsWipedThroughItsMigDevice) {
  auto gpus = Started();
  ASSERT_TRUE(gpus->Prepare("a1", "alice", "j", Mig(0, 4, "3g.40gb"), &events_).ok());
  gpus->Release("a1", &events_);
  // Slot 0 was never used: no wipe for bob there.
  ASSERT_TRUE(gpus->Prepare("b1", "bob", "j", Mig(0, 0, "1g.10gb"), &events_).ok());
  EXPECT_TRUE(Events("GpuMemoryWiped").empty());
  // Slot 6 was alice's (3g at 4 covers 4..7).
  StatusOr<std::map<std::string, std::string>> env = gpus->Prepare("b2", "bob", "j", Mig(0, 6, "1g.10gb"), &events_);
  ASSERT_TRUE(env.ok()) << env.status();
  ASSERT_EQ(Events("GpuMemoryWiped").size(), 1u);
  EXPECT_EQ(fake_.Calls("cuInit visible=" + env->at("CUDA_VISIBLE_DEVICES") + " devices=1").size(), 1u);
  // The MIG instance is 1/8 of the GPU: 1 GiB, all of it free.
  EXPECT_NE(Events("GpuMemoryWiped")[0]["message"].get<std::string>().find("[1073741824 bytes]"), std::string::npos)
      << Events("GpuMemoryWiped")[0].dump();
}

TEST_F(GpuIsolationTest, AFailedWipeKeepsTheOtherTenantOff) {
  auto gpus = Started();
  ASSERT_TRUE(gpus->Prepare("a1", "alice", "j", Whole(1), &events_).ok());
  fake_.Fail("cuMemsetD8_v2", 700);
  StatusOr<std::map<std::string, std::string>> env = gpus->Prepare("b1", "bob", "jb", Whole(1), &events_);
  ASSERT_FALSE(env.ok());
  EXPECT_NE(env.status().message().find("CUDA_ERROR_ILLEGAL_ADDRESS"), std::string::npos) << env.status();
  EXPECT_NE(env.status().message().find("not handed over"), std::string::npos) << env.status();
  ASSERT_EQ(Events("GpuSetupFailed").size(), 1u);
  EXPECT_EQ(Events("GpuSetupFailed")[0]["tenant"], "bob");
  EXPECT_TRUE(Events("GpuMemoryWiped").empty());
  // Still alice's on record: the next try wipes again, and works once the device does.
  fake_.ClearFailures();
  ASSERT_TRUE(gpus->Prepare("b2", "bob", "jb", Whole(1), &events_).ok());
  EXPECT_EQ(Events("GpuMemoryWiped").size(), 1u);
}

TEST_F(GpuIsolationTest, WithoutACudaDriverTheGpuIsRefusedUnlessAllowed) {
  GpuIsolationOptions o = Options();
  o.cuda_library = fake_.dir() + "/no-such-libcuda.so.1";
  auto gpus = Started(o);
  ASSERT_TRUE(gpus->Prepare("a1", "alice", "j", Whole(1), &events_).ok());
  StatusOr<std::map<std::string, std::string>> env = gpus->Prepare("b1", "bob", "j", Whole(1), &events_);
  ASSERT_FALSE(env.ok());
  EXPECT_EQ(env.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(env.status().message().find("CUDA driver not found"), std::string::npos) << env.status();

  o.allow_unwiped_handover = true;
  gpus = Started(o);
  ASSERT_TRUE(gpus->Prepare("b2", "bob", "j", Whole(1), &events_).ok());
  ASSERT_EQ(Events("GpuNotWiped").size(), 1u);
  EXPECT_EQ(Events("GpuNotWiped")[0]["type"], "Warning");
}

TEST_F(GpuIsolationTest, FractionalSharesGetMpsLimits) {
  auto gpus = Started();
  StatusOr<std::map<std::string, std::string>> env = gpus->Prepare(
      "a1", "alice", "j", json::array({{{"index", 1}, {"milli", 250}, {"memMiB", 2048}}}), &events_);
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->at("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), "25");
  EXPECT_EQ(env->at("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"), "0=2048M");
  EXPECT_EQ(env->at("AICLOUD_GPU_MILLI"), "250");
  EXPECT_EQ(env->at("AICLOUD_GPU_MEMORY_MIB"), "2048");
  env = gpus->Prepare("a2", "alice", "j", json::array({{{"index", 1}, {"milli", 5}}}), &events_);
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->at("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), "1");
  EXPECT_EQ(env->count("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"), 0u);
  env = gpus->Prepare("a3", "alice", "j", Whole(1), &events_);
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->count("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), 0u);
}

TEST_F(GpuIsolationTest, StartDestroysLeftoversItCreatedAndLeavesForeignInstances) {
  {
    auto gpus = Started();
    ASSERT_TRUE(gpus->Prepare("a1", "alice", "j", Mig(0, 0, "1g.10gb"), &events_).ok());
    // The agent dies here: no Release.
  }
  fake_.AddInstance(0, 9, 0, 6, 1, 1, "MIG-00000000-0000-4000-8000-0000000000f9");
  ASSERT_EQ(fake_.State()["gpus"][0]["instances"].size(), 2u);
  events_ = json::array();
  auto gpus = Started();
  json inst = fake_.State()["gpus"][0]["instances"];
  ASSERT_EQ(inst.size(), 1u) << inst.dump();
  EXPECT_EQ(inst[0]["gi"], 9);
  ASSERT_EQ(Events("MigInstanceDestroyed").size(), 1u);
  EXPECT_NE(Events("MigInstanceDestroyed")[0]["message"].get<std::string>().find("left over"), std::string::npos);
  json foreign = gpus->ForeignInstances();
  ASSERT_EQ(foreign.size(), 1u);
  EXPECT_EQ(foreign[0]["gpuInstance"], 9);
  EXPECT_EQ(foreign[0]["start"], 6);
  EXPECT_EQ(foreign[0]["uuid"], "MIG-00000000-0000-4000-8000-0000000000f9");
}

TEST_F(GpuIsolationTest, BadAssignmentsAndABadStateFileAreClearErrors) {
  auto gpus = Started();
  StatusOr<std::map<std::string, std::string>> env =
      gpus->Prepare("a1", "alice", "j", json::array({{{"index", "zero"}}}), &events_);
  ASSERT_FALSE(env.ok());
  EXPECT_NE(env.status().message().find("gpus[0].index is not an integer"), std::string::npos) << env.status();
  env = gpus->Prepare("a2", "alice", "j", json::array({{{"index", 0}, {"migStart", 4}}}), &events_);
  ASSERT_FALSE(env.ok());
  EXPECT_NE(env.status().message().find("gpus[0].migProfile is missing"), std::string::npos) << env.status();
  env = gpus->Prepare("a3", "alice", "j", Mig(0, 1, "3g.40gb"), &events_);
  ASSERT_FALSE(env.ok());
  EXPECT_NE(env.status().message().find("start slot 1 is not valid for 3g.40gb"), std::string::npos) << env.status();
  EXPECT_TRUE(fake_.State()["gpus"][0]["instances"].empty());

  // A corrupt state file: every GPU counts as dirty, so even a first use is wiped.
  gpus.reset();
  std::ofstream(work_ + "/gpu-state.json", std::ios::trunc) << "{not json";
  gpus = Started();
  EXPECT_TRUE(fs::exists(work_ + "/gpu-state.json.corrupt"));
  ASSERT_TRUE(gpus->Prepare("a4", "alice", "j", Whole(1), &events_).ok());
  ASSERT_EQ(Events("GpuMemoryWiped").size(), 1u);
  EXPECT_NE(Events("GpuMemoryWiped")[0]["message"].get<std::string>().find("GPU state was lost"), std::string::npos);
}

}  // namespace
}  // namespace aicloud::agent
