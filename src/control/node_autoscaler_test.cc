#include "control/node_autoscaler.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "store/memory_store.h"

namespace aicloud::control {
namespace {

using nlohmann::json;

// Powers nodes on and off by writing Node objects, as agents registering and dying would.
class FakeProvisioner : public NodeProvisioner {
 public:
  explicit FakeProvisioner(store::Store* s) : store_(s) {}
  Status PowerOn(const std::string& n) override {
    on.push_back(n);
    return OkStatus();
  }
  Status PowerOff(const std::string& n) override {
    off.push_back(n);
    SetPhase(n, "NotReady");
    return OkStatus();
  }
  NodeShape Shape() const override { return {.gpus = 8, .gpu_model = "H100", .cpu_millis = 64000, .memory_mib = 512 << 10}; }
  // The node's agent registered.
  void Register(const std::string& n) {
    StatusOr<json> cur = store_->Get({"Node", "", n});
    json o = cur.ok() ? *cur : json{{"apiVersion", "aicloud/v1"}, {"kind", "Node"}, {"metadata", {{"name", n}}}};
    o["spec"] = {{"cpuMillis", 64000}};
    o["status"] = {{"phase", "Ready"}};
    ASSERT_TRUE((cur.ok() ? store_->Update(o, 0) : store_->Create(o)).ok());
  }
  void SetPhase(const std::string& n, const std::string& phase) {
    StatusOr<json> cur = store_->Get({"Node", "", n});
    if (!cur.ok()) return;
    json o = *cur;
    o["status"]["phase"] = phase;
    (void)store_->Update(o, 0);
  }
  std::vector<std::string> on, off;

 private:
  store::Store* store_;
};

class NodeAutoscalerTest : public ::testing::Test {
 protected:
  void Job(const std::string& name, json spec, const std::string& phase, const std::string& reason = "",
           const std::string& node = "") {
    json j = {{"apiVersion", "aicloud/v1"}, {"kind", "Job"}, {"metadata", {{"name", name}, {"tenant", "t"}}},
              {"spec", spec}, {"status", {{"phase", phase}, {"reason", reason}}}};
    if (!node.empty()) j["status"]["workers"] = {{{"node", node}}};
    StatusOr<json> cur = store_.Get({"Job", "t", name});
    ASSERT_TRUE((cur.ok() ? store_.Update(j, 0) : store_.Create(j)).ok());
  }
  static json Gpus(int workers, int per_worker, std::string model = "") {
    json g = {{"count", per_worker}};
    if (!model.empty()) g["model"] = model;
    return {{"command", "x"}, {"workers", workers}, {"resources", {{"cpu", "1"}, {"memory", "1Gi"}, {"gpu", g}}}};
  }

  store::MemoryStore store_;
  FakeClock clock_{1'000'000'000};
  Metrics metrics_;
  FakeProvisioner prov_{&store_};
};

TEST_F(NodeAutoscalerTest, PowersOnEnoughNodesForUnschedulableJobsThenReleasesIdleOnes) {
  NodeAutoscaler na(&store_, nullptr, &clock_, &metrics_, &prov_,
                    {.max_nodes = 3, .pending_for = std::chrono::seconds(10), .unneeded_for = std::chrono::seconds(60)});
  Job("big", Gpus(3, 4), "Pending", "Unschedulable");  // 12 GPUs: two 8-GPU nodes
  na.Turn();
  EXPECT_TRUE(prov_.on.empty()) << "pending less than 10 s";
  clock_.Advance(11'000'000);
  na.Turn();
  ASSERT_EQ(prov_.on, (std::vector<std::string>{"auto-0", "auto-1"}));
  // Nothing more while they have not registered (one wave at a time).
  clock_.Advance(5'000'000);
  na.Turn();
  EXPECT_EQ(prov_.on.size(), 2u);
  prov_.Register("auto-0");
  prov_.Register("auto-1");
  Job("big", Gpus(3, 4), "Running", "", "auto-0");  // placed (the fake puts it on auto-0)
  na.Turn();
  EXPECT_EQ(store_.Get({"Node", "", "auto-0"})->at("metadata")["labels"][kAutoscaledLabel], "true");
  // auto-1 idles; auto-0 runs the job. After 60 s idle auto-1 is powered off, auto-0 kept.
  for (int i = 0; i < 7; ++i) {
    clock_.Advance(10'000'000);
    na.Turn();
  }
  EXPECT_EQ(prov_.off, std::vector<std::string>{"auto-1"});
  EXPECT_EQ(na.active(), 1);
  // The job ends: auto-0 goes too, after its own 60 s.
  Job("big", Gpus(3, 4), "Succeeded");
  for (int i = 0; i < 7; ++i) {
    clock_.Advance(10'000'000);
    na.Turn();
  }
  EXPECT_EQ(prov_.off, (std::vector<std::string>{"auto-1", "auto-0"}));
  EXPECT_EQ(na.active(), 0);
  // New work reuses the released names.
  Job("again", Gpus(1, 1), "Pending", "Unschedulable");
  clock_.Advance(11'000'000);
  na.Turn();
  clock_.Advance(11'000'000);
  na.Turn();
  EXPECT_EQ(prov_.on.back(), "auto-0");
  EXPECT_EQ(prov_.on.size(), 3u);
}

TEST_F(NodeAutoscalerTest, RoomLeftOnReadyNodesIsUsedBeforeAddingNodes) {
  NodeAutoscaler na(&store_, nullptr, &clock_, &metrics_, &prov_, {.max_nodes = 4, .pending_for = std::chrono::seconds(1)});
  json gpus = json::array();
  for (int i = 0; i < 8; ++i) gpus.push_back({{"index", i}, {"model", "H100"}});
  ASSERT_TRUE(store_.Create({{"apiVersion", "aicloud/v1"}, {"kind", "Node"}, {"metadata", {{"name", "n1"}}},
                             {"spec", {{"gpus", gpus}, {"cpuMillis", 64000}, {"memoryBytes", int64_t{512} << 30}}},
                             {"status", {{"phase", "Ready"}}}})
                  .ok());
  Job("running", Gpus(1, 4), "Running", "", "n1");           // n1: 4 of 8 GPUs left
  Job("gang", Gpus(4, 2), "Pending", "Unschedulable");       // 8 GPUs: 2 workers fit on n1
  Job("wide", Gpus(3, 4), "Pending", "Unschedulable");       // 12 GPUs, none fit any more
  clock_.Advance(2'000'000);
  na.Turn();
  clock_.Advance(2'000'000);
  na.Turn();
  // (8 - 4) + 12 = 16 GPUs of new nodes: two, not three.
  EXPECT_EQ(prov_.on, (std::vector<std::string>{"auto-0", "auto-1"}));
}

TEST_F(NodeAutoscalerTest, IgnoresJobsANewNodeCouldNotHostAndRespectsMaxNodes) {
  NodeAutoscaler na(&store_, nullptr, &clock_, &metrics_, &prov_, {.max_nodes = 1, .pending_for = std::chrono::seconds(1)});
  Job("huge", Gpus(1, 16), "Pending", "Unschedulable");         // 16 GPUs per worker > 8
  Job("a100", Gpus(1, 1, "A100-80GB"), "Pending", "Unschedulable");  // another GPU model
  Job("pending", Gpus(1, 1), "Pending", "Queued");              // not unschedulable
  clock_.Advance(2'000'000);
  na.Turn();
  clock_.Advance(2'000'000);
  na.Turn();
  EXPECT_TRUE(prov_.on.empty());
  Job("many", Gpus(4, 8), "Pending", "Unschedulable");  // needs 4 nodes, 1 allowed
  clock_.Advance(2'000'000);
  na.Turn();
  clock_.Advance(2'000'000);
  na.Turn();
  EXPECT_EQ(prov_.on, std::vector<std::string>{"auto-0"});
}

TEST_F(NodeAutoscalerTest, ANodeThatNeverRegistersIsPoweredOffAfterTheTimeout) {
  NodeAutoscaler na(&store_, nullptr, &clock_, &metrics_, &prov_,
                    {.max_nodes = 2, .pending_for = std::chrono::seconds(1), .provision_timeout = std::chrono::seconds(300)});
  Job("j", Gpus(1, 8), "Pending", "Unschedulable");
  clock_.Advance(2'000'000);
  na.Turn();
  clock_.Advance(2'000'000);
  na.Turn();
  ASSERT_EQ(prov_.on.size(), 1u);
  clock_.Advance(301'000'000);
  na.Turn();
  EXPECT_EQ(prov_.off, std::vector<std::string>{"auto-0"});
  // The job still waits: the next turn tries again.
  na.Turn();
  EXPECT_EQ(prov_.on.size(), 2u);
}

TEST_F(NodeAutoscalerTest, AnAddedNodeThatDiesIsPoweredOffAndItsSlotFreed) {
  NodeAutoscaler na(&store_, nullptr, &clock_, &metrics_, &prov_,
                    {.max_nodes = 1, .pending_for = std::chrono::seconds(1), .provision_timeout = std::chrono::seconds(60)});
  Job("j", Gpus(1, 8), "Pending", "Unschedulable");
  clock_.Advance(2'000'000);
  na.Turn();
  clock_.Advance(2'000'000);
  na.Turn();
  ASSERT_EQ(prov_.on.size(), 1u);
  prov_.Register("auto-0");
  Job("j", Gpus(1, 8), "Running", "", "auto-0");
  na.Turn();
  prov_.SetPhase("auto-0", "NotReady");  // the machine died; its job goes back to the queue
  Job("j", Gpus(1, 8), "Pending", "Unschedulable");
  clock_.Advance(30'000'000);
  na.Turn();
  EXPECT_TRUE(prov_.off.empty()) << "not yet: it may come back";
  EXPECT_EQ(prov_.on.size(), 1u) << "the pool of 1 is used up";
  clock_.Advance(31'000'000);  // 31 s since it was first seen NotReady
  na.Turn();
  EXPECT_TRUE(prov_.off.empty());
  clock_.Advance(30'000'000);  // 61 s
  na.Turn();
  EXPECT_EQ(prov_.off, std::vector<std::string>{"auto-0"});
  na.Turn();
  EXPECT_EQ(prov_.on.size(), 2u) << "the slot is free again for the waiting job";
}

TEST(ScriptProvisioner, RunsTheHookWithVerbAndNode) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("hook-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string script = (dir / "hook.sh").string();
  {
    std::ofstream f(script);
    f << "#!/bin/sh\necho \"$1 $2 $AICLOUD_NODE\" >> " << (dir / "calls").string() << "\n[ \"$1\" = up ] || exit 3\n";
  }
  std::filesystem::permissions(script, std::filesystem::perms::owner_all);
  {
    ScriptProvisioner p(script, {});
    ASSERT_TRUE(p.PowerOn("gpu-7").ok());
    ASSERT_TRUE(p.PowerOff("gpu-7").ok());
  }  // the destructor waits for both hooks
  std::ifstream in(dir / "calls");
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(all.find("up gpu-7 gpu-7"), std::string::npos) << all;
  EXPECT_NE(all.find("down gpu-7 gpu-7"), std::string::npos) << all;
  ScriptProvisioner missing("", {});
  EXPECT_EQ(missing.PowerOn("x").code(), StatusCode::kFailedPrecondition);
  std::filesystem::remove_all(dir);
}

TEST(ScriptProvisioner, CountsFailedHooks) {
  ScriptProvisioner p("/bin/false", {});
  ASSERT_TRUE(p.PowerOn("n").ok());
  for (int i = 0; i < 200 && p.failed() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(p.failed(), 1);
  EXPECT_EQ(p.succeeded(), 0);
}

}  // namespace
}  // namespace aicloud::control
