#include "control/node_autoscaler.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <thread>
#include <utility>

#include <unistd.h>

#include "control/control_plane.h"
#include "control/deployment.h"
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
    if (!off_keeps_ready) SetPhase(n, "NotReady");
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
  // A node with `gpus` H100s, 64 CPUs and 512 GiB registered (its agent, or one not ours).
  void RegisterWithGpus(const std::string& n, int gpus) {
    Register(n);
    json o = *store_->Get({"Node", "", n});
    o["spec"]["gpus"] = json::array();
    for (int i = 0; i < gpus; ++i) o["spec"]["gpus"].push_back({{"model", "H100"}});
    o["spec"]["memoryBytes"] = int64_t{512} << 30;
    ASSERT_TRUE(store_->Update(o, 0).ok());
  }
  void SetPhase(const std::string& n, const std::string& phase) {
    StatusOr<json> cur = store_->Get({"Node", "", n});
    if (!cur.ok()) return;
    json o = *cur;
    o["status"]["phase"] = phase;
    (void)store_->Update(o, 0);
  }
  bool Busy(const std::string& n) const override { return busy.count(n) > 0; }
  std::vector<std::string> on, off;
  // A powered-off node's Node stays Ready until the server's heartbeat grace runs out.
  bool off_keeps_ready = false;
  std::set<std::string> busy;  // nodes whose hooks have not finished

 private:
  store::Store* store_;
};

// A store that runs `hook` once, just after a turn has read the Nodes (at its listing of the
// Jobs): an operator's write landing between what a turn read and what it writes.
class HookedStore final : public store::Store {
 public:
  explicit HookedStore(store::Store* inner) : inner_(inner) {}
  StatusOr<json> Get(const store::ObjectKey& key) override { return inner_->Get(key); }
  StatusOr<std::vector<json>> Commit(std::vector<store::WriteOp> ops) override { return inner_->Commit(std::move(ops)); }
  StatusOr<store::ListResult> List(const store::ListOptions& options) override {
    if (options.kind == "Job" && hook) std::exchange(hook, nullptr)();
    return inner_->List(options);
  }
  StatusOr<store::ChangesResult> Changes(const std::string& kind, int64_t after, int max) override {
    return inner_->Changes(kind, after, max);
  }
  int64_t Revision() override { return inner_->Revision(); }
  int64_t WaitForRevision(int64_t after, std::chrono::milliseconds timeout) override {
    return inner_->WaitForRevision(after, timeout);
  }
  std::function<void()> hook;

 private:
  store::Store* inner_;
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
  // 100 s of turns, and no move begins: `job` is not labelled for eviction.
  void ExpectNothingMoves(NodeAutoscaler& na, const std::string& job) {
    Turns(10, na, 10);
    EXPECT_EQ(Consolidations("started"), 0);
    EXPECT_EQ(LabelOf(job, kEvictLabel), "");
  }
  // `n` turns `seconds` apart.
  void Turns(int seconds, NodeAutoscaler& na, int n) {
    for (int i = 0; i < n; ++i) {
      clock_.Advance(int64_t{seconds} * 1'000'000);
      na.Turn();
    }
  }
  // Two turns 2 s apart: long enough for a job pending_for 1 s to count, and for its wave.
  void TwoTurns(NodeAutoscaler& na) {
    for (int i = 0; i < 2; ++i) {
      clock_.Advance(2'000'000);
      na.Turn();
    }
  }
  static json Gpus(int workers, int per_worker, std::string model = "") {
    json g = {{"count", per_worker}};
    if (!model.empty()) g["model"] = model;
    return {{"command", "x"}, {"workers", workers}, {"resources", {{"cpu", "1"}, {"memory", "1Gi"}, {"gpu", g}}}};
  }

  // A job running on `node` with `labels` (a Deployment replica: {{kDeploymentLabel, "chat"}}).
  void Labelled(const std::string& name, json spec, const std::string& node, json labels) {
    Job(name, std::move(spec), "Running", "", node);
    json j = *store_.Get({"Job", "t", name});
    j["metadata"]["labels"] = std::move(labels);
    ASSERT_TRUE(store_.Update(j, 0).ok());
  }
  std::string NodeLabel(const std::string& node, const char* key) {
    StatusOr<json> n = store_.Get({"Node", "", node});
    if (!n.ok()) return "(no node)";
    json l = n->at("metadata").value("labels", json::object());
    return l.is_object() ? l.value(key, "") : "";
  }
  // Sets label `key` to "true" on the object, or takes it off.
  void SetLabelOn(const store::ObjectKey& which, const char* key, bool on) {
    json o = *store_.Get(which);
    if (on) o["metadata"]["labels"][key] = "true";
    else if (o["metadata"].contains("labels")) o["metadata"]["labels"].erase(key);
    ASSERT_TRUE(store_.Update(o, 0).ok());
  }
  void SetNodeLabel(const std::string& node, const char* key, bool on) { SetLabelOn({"Node", "", node}, key, on); }
  std::string LabelOf(const std::string& job, const char* key, const std::string& tenant = "t") {
    StatusOr<json> j = store_.Get({"Job", tenant, job});
    if (!j.ok()) return "(no job)";
    json l = j->at("metadata").value("labels", json::object());
    return l.is_object() ? l.value(key, "") : "";
  }
  double Consolidations(const std::string& outcome) {
    const std::string text = metrics_.Render();
    const std::string key = "aicloud_node_autoscaler_consolidations_total{outcome=\"" + outcome + "\"} ";
    size_t at = text.find(key);
    return at == std::string::npos ? 0 : std::stod(text.substr(at + key.size()));
  }
  // sim-0 (not ours, 8 GPUs, 6 in use by a training job) and auto-0 (added for a job of 8 GPUs
  // that then ended), on which `what` now runs.
  void AddedNodeRunning(NodeAutoscaler& na, const std::string& what, json spec, json labels) {
    if (!store_.Get({"Deployment", "t", "chat"}).ok()) {  // the replicas' Deployment
      ASSERT_TRUE(store_.Create({{"apiVersion", "aicloud/v1"}, {"kind", "Deployment"},
                                 {"metadata", {{"name", "chat"}, {"tenant", "t"}}}, {"spec", {{"model", "/m"}}}}).ok());
    }
    prov_.RegisterWithGpus("sim-0", 8);
    Job("train", Gpus(1, 6), "Running", "", "sim-0");
    Job("big", Gpus(1, 8), "Pending", "Unschedulable");
    TwoTurns(na);
    ASSERT_EQ(prov_.on, std::vector<std::string>{"auto-0"});
    prov_.RegisterWithGpus("auto-0", 8);
    Job("big", Gpus(1, 8), "Running", "", "auto-0");
    na.Turn();
    Labelled(what, std::move(spec), "auto-0", std::move(labels));
    Job("big", Gpus(1, 8), "Succeeded");
    na.Turn();
  }

  // A move empties auto-0 (its replica chat-1 replaced elsewhere); `during` runs in the turn
  // that then powers it off, after that turn read the Nodes (an operator's write landing then).
  void EmptiedThenWrittenInThePowerOffTurn(HookedStore& hooked, NodeAutoscaler& na, std::function<void()> during) {
    AddedNodeRunning(na, "chat-1", Gpus(1, 1), json{{kDeploymentLabel, "chat"}});
    Turns(61, na, 1);
    ASSERT_EQ(Consolidations("started"), 1);
    ASSERT_TRUE(store_.Delete({"Job", "t", "chat-1"}, 0).ok());
    hooked.hook = std::move(during);
    Turns(2, na, 1);
  }

  // A server that began moving replica chat-1 off auto-0 (labelled for eviction, node marked),
  // then stopped; the test goes on with a new NodeAutoscaler on the same store.
  void MoveBeganThenServerStopped(const NodeAutoscalerOptions& o) {
    NodeAutoscaler before(&store_, nullptr, &clock_, &metrics_, &prov_, o);
    AddedNodeRunning(before, "chat-1", Gpus(1, 1), json{{kDeploymentLabel, "chat"}});
    Turns(61, before, 1);
    ASSERT_EQ(LabelOf("chat-1", kEvictLabel), "true");
    ASSERT_EQ(NodeLabel("auto-0", kConsolidatingLabel), "true");
  }

  store::MemoryStore store_;
  FakeClock clock_{1'000'000'000};
  Metrics metrics_;
  FakeProvisioner prov_{&store_};
};

const json kReplica = {{kDeploymentLabel, "chat"}};
constexpr auto kOneMinute = std::chrono::seconds(60);
// A pool of two nodes, a job pending 1 s asks for one, a node unneeded (or underused) for 60 s.
const NodeAutoscalerOptions kPool2{.max_nodes = 2, .pending_for = std::chrono::seconds(1), .unneeded_for = kOneMinute};

TEST_F(NodeAutoscalerTest, AnUnderusedAddedNodeIsEmptiedAndPoweredOffWhenItsReplicasFitElsewhere) {
  NodeAutoscaler na(&store_, nullptr, &clock_, &metrics_, &prov_, kPool2);
  AddedNodeRunning(na, "chat-1", Gpus(1, 1), kReplica);  // 1 of 8 GPUs in use; sim-0 has 2 free
  Turns(10, na, 5);
  EXPECT_EQ(LabelOf("chat-1", kEvictLabel), "") << "underused for less than --node-unneeded";
  clock_.Advance(11'000'000);
  na.Turn();
  EXPECT_EQ(LabelOf("chat-1", kEvictLabel), "true");
  EXPECT_EQ(Consolidations("started"), 1);
  clock_.Advance(2'000'000);
  na.Turn();
  EXPECT_TRUE(prov_.off.empty()) << "the replica is still there";
  // Its controller starts the successor on sim-0, then deletes the evicted replica.
  Labelled("chat-2", Gpus(1, 1), "sim-0", kReplica);
  na.Turn();
  EXPECT_TRUE(prov_.off.empty());
  ASSERT_TRUE(store_.Delete({"Job", "t", "chat-1"}, 0).ok());
  clock_.Advance(2'000'000);
  na.Turn();
  EXPECT_EQ(prov_.off, std::vector<std::string>{"auto-0"});
  EXPECT_EQ(na.active(), 0);
  EXPECT_NE(metrics_.Render().find("aicloud_node_autoscaler_powered_off_total{reason=\"consolidated\"} 1"),
            std::string::npos);
  EXPECT_EQ(LabelOf("chat-2", kEvictLabel), "") << "sim-0 is not ours: never emptied";
}

TEST_F(NodeAutoscalerTest, AJobThatCannotMovePinsItsNodeUnlessLabelledSafeToEvict) {
  NodeAutoscaler na(&store_, nullptr, &clock_, &metrics_, &prov_, kPool2);
  AddedNodeRunning(na, "train-2", Gpus(1, 1), json::object());
  Turns(10, na, 20);
  EXPECT_EQ(Consolidations("started"), 0) << "a plain job is never stopped to save a node";
  EXPECT_TRUE(prov_.off.empty());
  // Labelled safe-to-evict: drained at once (no replica to wait for), powered off once empty.
  Labelled("train-2", Gpus(1, 1), "auto-0", {{kSafeToEvictLabel, "true"}});
  na.Turn();
  clock_.Advance(61'000'000);
  na.Turn();
  EXPECT_EQ(Consolidations("started"), 1);
  EXPECT_EQ(LabelOf("train-2", kEvictLabel), "") << "only replicas are labelled; a job is drained";
  Job("train-2", Gpus(1, 1), "Pending", "Drained");  // requeued by the drain
  clock_.Advance(2'000'000);
  na.Turn();
  EXPECT_EQ(prov_.off, std::vector<std::string>{"auto-0"});
}

TEST_F(NodeAutoscalerTest, AMoveWhoseWorkFindsNoRoomIsAbandonedAndNotRetriedForTheBackoff) {
  NodeAutoscaler na(&store_, nullptr, &clock_, &metrics_, &prov_,
                    {.max_nodes = 2, .pending_for = std::chrono::seconds(1), .unneeded_for = kOneMinute,
                     .backoff = std::chrono::seconds(300)});
  AddedNodeRunning(na, "chat-1", Gpus(1, 1), kReplica);
  clock_.Advance(61'000'000);
  na.Turn();
  clock_.Advance(1'000'000);
  na.Turn();
  ASSERT_EQ(LabelOf("chat-1", kEvictLabel), "true");
  EXPECT_EQ(NodeLabel("auto-0", kConsolidatingLabel), "true");
  // The successor cannot be placed after all (the scheduler sees what this pass does not). It
  // would need a new node, but none is added while the move is on.
  Job("chat-2", Gpus(1, 8), "Pending", "Unschedulable");
  na.Turn();
  clock_.Advance(2'000'000);
  na.Turn();
  EXPECT_EQ(LabelOf("chat-1", kEvictLabel), "") << "the label comes off: the replica stays";
  EXPECT_EQ(NodeLabel("auto-0", kConsolidatingLabel), "");
  EXPECT_EQ(Consolidations("abandoned"), 1);
  EXPECT_EQ(prov_.on.size(), 1u) << "no node is added for the successor in the turn the move is abandoned";
  ASSERT_TRUE(store_.Delete({"Job", "t", "chat-2"}, 0).ok());  // its controller drops the extra replica
  Turns(10, na, 25);  // 250 s: past --node-unneeded, not past the back-off
  EXPECT_EQ(Consolidations("started"), 1);
  EXPECT_EQ(LabelOf("chat-1", kEvictLabel), "");
  Turns(10, na, 12);
  EXPECT_EQ(Consolidations("started"), 2) << "tried again after the back-off";
  // Abandoned again: the wait doubles (600 s).
  Job("chat-2", Gpus(1, 8), "Pending", "Unschedulable");
  Turns(2, na, 2);
  ASSERT_EQ(Consolidations("abandoned"), 2);
  ASSERT_TRUE(store_.Delete({"Job", "t", "chat-2"}, 0).ok());
  Turns(10, na, 50);  // 500 s: past the first back-off, not the second
  EXPECT_EQ(Consolidations("started"), 2);
  Turns(10, na, 17);
  EXPECT_EQ(Consolidations("started"), 3);
}

TEST_F(NodeAutoscalerTest, AJobThatCannotMoveFoundDuringAMoveAbandonsIt) {
  NodeAutoscaler na(&store_, nullptr, &clock_, &metrics_, &prov_, kPool2);
  AddedNodeRunning(na, "chat-1", Gpus(1, 1), kReplica);
  Turns(61, na, 1);
  ASSERT_EQ(LabelOf("chat-1", kEvictLabel), "true");
  Job("late", Gpus(1, 1), "Running", "", "auto-0");  // bound there just before the cordon
  Turns(2, na, 1);
  EXPECT_EQ(Consolidations("abandoned"), 1);
  EXPECT_EQ(LabelOf("chat-1", kEvictLabel), "");
  EXPECT_TRUE(prov_.off.empty());
}

// An operator's cordon (uncordon, drain) drops the Node's mark: the move ends there, the
// replica keeps its place, and the node is not powered off as consolidated once empty.
TEST_F(NodeAutoscalerTest, AnOperatorActingOnTheNodeEndsTheMove) {
  NodeAutoscaler na(&store_, nullptr, &clock_, &metrics_, &prov_, kPool2);
  AddedNodeRunning(na, "chat-1", Gpus(1, 1), kReplica);
  Turns(61, na, 1);
  ASSERT_EQ(LabelOf("chat-1", kEvictLabel), "true");
  ASSERT_EQ(NodeLabel("auto-0", kConsolidatingLabel), "true");
  Turns(2, na, 2);
  EXPECT_EQ(Consolidations("taken_over"), 0) << "the move's own mark does not end it";
  json n = *store_.Get({"Node", "", "auto-0"});  // what ControlPlane::Cordon(CordonBy::kOperator) writes
  n["spec"]["unschedulable"] = true;
  n["metadata"]["labels"].erase(kConsolidatingLabel);
  ASSERT_TRUE(store_.Update(n, 0).ok());
  Turns(2, na, 1);
  EXPECT_EQ(Consolidations("taken_over"), 1);
  EXPECT_EQ(Consolidations("abandoned"), 0);
  EXPECT_EQ(LabelOf("chat-1", kEvictLabel), "") << "the replica is not replaced";
  ASSERT_TRUE(store_.Delete({"Job", "t", "chat-1"}, 0).ok());  // the operator drains it
  Turns(2, na, 5);
  EXPECT_TRUE(prov_.off.empty()) << "not powered off as consolidated";
  EXPECT_EQ(Consolidations("started"), 1);
  EXPECT_EQ(NodeLabel("auto-0", kConsolidatingLabel), "");
}

TEST_F(NodeAutoscalerTest, AMoveOnANodeLabelledDoNotDisruptIsAbandoned) {
  NodeAutoscaler na(&store_, nullptr, &clock_, &metrics_, &prov_, kPool2);
  AddedNodeRunning(na, "chat-1", Gpus(1, 1), kReplica);
  Turns(61, na, 1);
  ASSERT_EQ(LabelOf("chat-1", kEvictLabel), "true");
  SetNodeLabel("auto-0", kDoNotDisruptLabel, true);
  Turns(2, na, 1);
  EXPECT_EQ(Consolidations("abandoned"), 1);
  EXPECT_EQ(LabelOf("chat-1", kEvictLabel), "") << "the replica stays";
  EXPECT_EQ(NodeLabel("auto-0", kConsolidatingLabel), "");
  ASSERT_TRUE(store_.Delete({"Job", "t", "chat-1"}, 0).ok());  // empty now, but kept
  Turns(30, na, 6);
  EXPECT_TRUE(prov_.off.empty());
}

TEST_F(NodeAutoscalerTest, ANodeLabelledDoNotDisruptIsNotEmptied) {
  NodeAutoscaler na(&store_, nullptr, &clock_, &metrics_, &prov_, kPool2);
  AddedNodeRunning(na, "chat-1", Gpus(1, 1), kReplica);
  SetNodeLabel("auto-0", kDoNotDisruptLabel, true);
  ExpectNothingMoves(na, "chat-1");
  SetNodeLabel("auto-0", kDoNotDisruptLabel, false);
  Turns(10, na, 7);
  EXPECT_EQ(Consolidations("started"), 1) << "underused for 60 s once the label went";
}

// An operator keeps an empty node the autoscaler added: not scaled down while labelled, even
// when the label comes after the scale-down's cordon; once it goes, the node idles its 60 s
// again and goes.
TEST_F(NodeAutoscalerTest, AnEmptyNodeLabelledDoNotDisruptIsKeptUntilTheLabelGoes) {
  NodeAutoscaler na(&store_, nullptr, &clock_, &metrics_, &prov_, kPool2);
  Job("j", Gpus(1, 8), "Pending", "Unschedulable");
  TwoTurns(na);
  ASSERT_EQ(prov_.on, std::vector<std::string>{"auto-0"});
  prov_.RegisterWithGpus("auto-0", 8);
  Job("j", Gpus(1, 8), "Succeeded");
  na.Turn();  // registered, idle from now
  SetNodeLabel("auto-0", kDoNotDisruptLabel, true);
  Turns(30, na, 6);
  EXPECT_TRUE(prov_.off.empty());
  SetNodeLabel("auto-0", kDoNotDisruptLabel, false);
  Turns(31, na, 3);  // idle from the first of these turns: the third cordons it (unneeded after 60 s)
  ASSERT_TRUE(prov_.off.empty());
  SetNodeLabel("auto-0", kDoNotDisruptLabel, true);  // before the power-off's turn
  Turns(2, na, 1);
  EXPECT_TRUE(prov_.off.empty()) << "the label came after the cordon";
  Turns(30, na, 4);
  EXPECT_TRUE(prov_.off.empty());
  SetNodeLabel("auto-0", kDoNotDisruptLabel, false);
  Turns(30, na, 2);
  EXPECT_TRUE(prov_.off.empty()) << "idle for the full 60 s again first";
  Turns(30, na, 2);
  EXPECT_EQ(prov_.off, std::vector<std::string>{"auto-0"});
}

// The power-off's own write checks again: a label written after the turn read the Nodes keeps
// an unneeded node on, and an emptied one too (its move then abandoned).
TEST_F(NodeAutoscalerTest, ALabelWrittenWhileATurnRunsStillKeepsTheNode) {
  HookedStore hooked(&store_);
  NodeAutoscaler na(&hooked, nullptr, &clock_, &metrics_, &prov_, kPool2);
  ASSERT_NO_FATAL_FAILURE(
      EmptiedThenWrittenInThePowerOffTurn(hooked, na, [&] { SetNodeLabel("auto-0", kDoNotDisruptLabel, true); }));
  EXPECT_TRUE(prov_.off.empty());
  Turns(2, na, 1);
  EXPECT_EQ(Consolidations("abandoned"), 1);
  EXPECT_EQ(NodeLabel("auto-0", kConsolidatingLabel), "");
  // Unneeded: idle 60 s, cordoned; the label comes during the power-off's turn.
  SetNodeLabel("auto-0", kDoNotDisruptLabel, false);
  Turns(31, na, 3);  // idle from the first; the third cordons it
  ASSERT_TRUE(prov_.off.empty());
  hooked.hook = [&] { SetNodeLabel("auto-0", kDoNotDisruptLabel, true); };
  Turns(2, na, 1);
  EXPECT_TRUE(prov_.off.empty());
  Turns(30, na, 4);
  EXPECT_TRUE(prov_.off.empty());
  EXPECT_EQ(na.active(), 1);
}

// An operator's cordon (dropping the mark) lands between the turn's read of the Nodes and the
// power-off of the node it emptied: the node stays on.
TEST_F(NodeAutoscalerTest, AnOperatorsCordonWhileATurnRunsStopsThePowerOff) {
  HookedStore hooked(&store_);
  NodeAutoscaler na(&hooked, nullptr, &clock_, &metrics_, &prov_, kPool2);
  ASSERT_NO_FATAL_FAILURE(
      EmptiedThenWrittenInThePowerOffTurn(hooked, na, [&] { SetNodeLabel("auto-0", kConsolidatingLabel, false); }));
  EXPECT_TRUE(prov_.off.empty());
  EXPECT_EQ(Consolidations("taken_over"), 1);
}

TEST_F(NodeAutoscalerTest, ARestartedServerCarriesAMoveOn) {
  NodeAutoscalerOptions o{.max_nodes = 2, .pending_for = std::chrono::seconds(1), .unneeded_for = kOneMinute,
                          .provision_timeout = std::chrono::seconds(900)};
  ASSERT_NO_FATAL_FAILURE(MoveBeganThenServerStopped(o));
  // The server stops mid-move: the node stays cordoned with the replica labelled. The next one
  // carries the move on: the replica is replaced and the node powered off as consolidated.
  // Its label lost meanwhile (a write that failed): the resumed move labels it again.
  SetLabelOn({"Job", "t", "chat-1"}, kEvictLabel, false);
  NodeAutoscaler after(&store_, nullptr, &clock_, &metrics_, &prov_, o);
  after.Turn();
  EXPECT_EQ(LabelOf("chat-1", kEvictLabel), "true");
  ASSERT_TRUE(store_.Delete({"Job", "t", "chat-1"}, 0).ok());
  Labelled("chat-2", Gpus(1, 1), "sim-0", kReplica);
  clock_.Advance(2'000'000);
  after.Turn();
  EXPECT_EQ(prov_.off, std::vector<std::string>{"auto-0"});
  EXPECT_EQ(NodeLabel("auto-0", kConsolidatingLabel), "") << "cleared when powered off";
}

// The operator took the node over while no server ran: the next server finds replicas labelled
// for eviction on a node no longer being emptied, and takes the labels off.
TEST_F(NodeAutoscalerTest, ARestartedServerClearsEvictionLabelsNoMoveStandsBehind) {
  ASSERT_NO_FATAL_FAILURE(MoveBeganThenServerStopped(kPool2));
  SetNodeLabel("auto-0", kConsolidatingLabel, false);
  NodeAutoscaler after(&store_, nullptr, &clock_, &metrics_, &prov_, kPool2);
  after.Turn();
  EXPECT_EQ(LabelOf("chat-1", kEvictLabel), "");
  Turns(2, after, 3);
  EXPECT_TRUE(prov_.off.empty());
}

TEST_F(NodeAutoscalerTest, ANodeIsUnderusedAfreshOnceAJobStopsWaitingForRoom) {
  NodeAutoscaler na(&store_, nullptr, &clock_, &metrics_, &prov_, kPool2);
  AddedNodeRunning(na, "chat-1", Gpus(1, 1), kReplica);
  Turns(10, na, 5);  // underused for 50 s
  Job("huge", Gpus(1, 16), "Pending", "Unschedulable");  // no node helps; it still waits for room
  Turns(10, na, 3);
  ASSERT_TRUE(store_.Delete({"Job", "t", "huge"}, 0).ok());
  Turns(10, na, 5);
  EXPECT_EQ(Consolidations("started"), 0) << "the 60 s start again once nothing waits";
  Turns(10, na, 2);
  EXPECT_EQ(Consolidations("started"), 1);
}

TEST_F(NodeAutoscalerTest, ANameComingBackLosesTheOldMachinesMarks) {
  NodeAutoscaler na(&store_, nullptr, &clock_, &metrics_, &prov_, kPool2);
  Job("a", Gpus(1, 8), "Pending", "Unschedulable");
  TwoTurns(na);
  prov_.RegisterWithGpus("auto-0", 8);
  Job("a", Gpus(1, 8), "Succeeded");
  Turns(10, na, 8);  // idle, cordoned, powered off
  ASSERT_EQ(prov_.off, std::vector<std::string>{"auto-0"});
  SetNodeLabel("auto-0", kConsolidatingLabel, true);  // as a crash could have left it
  SetNodeLabel("auto-0", kDoNotDisruptLabel, true);   // the operator's, for the old machine
  Job("b", Gpus(1, 8), "Pending", "Unschedulable");
  TwoTurns(na);
  ASSERT_EQ(prov_.on.back(), "auto-0");
  EXPECT_EQ(NodeLabel("auto-0", kConsolidatingLabel), "");
  EXPECT_EQ(NodeLabel("auto-0", kDoNotDisruptLabel), "");
}

TEST_F(NodeAutoscalerTest, AResumedMoveOfAnEmptyNodeWaitsATurnForItsCordon) {
  ASSERT_NO_FATAL_FAILURE(MoveBeganThenServerStopped(kPool2));
  ASSERT_TRUE(store_.Delete({"Job", "t", "chat-1"}, 0).ok());  // moved while no server ran
  NodeAutoscaler after(&store_, nullptr, &clock_, &metrics_, &prov_, kPool2);
  after.Turn();
  EXPECT_TRUE(prov_.off.empty()) << "cordoned again first";
  Turns(2, after, 1);
  EXPECT_EQ(prov_.off, std::vector<std::string>{"auto-0"});
}

TEST_F(NodeAutoscalerTest, AResumedMoveIsAbandonedWhenConsolidationIsOff) {
  ASSERT_NO_FATAL_FAILURE(MoveBeganThenServerStopped(kPool2));
  NodeAutoscalerOptions off = kPool2;
  off.consolidate_below = 0;
  NodeAutoscaler after(&store_, nullptr, &clock_, &metrics_, &prov_, off);
  after.Turn();
  EXPECT_EQ(LabelOf("chat-1", kEvictLabel), "");
  EXPECT_EQ(NodeLabel("auto-0", kConsolidatingLabel), "");
}

TEST_F(NodeAutoscalerTest, AMoveARestartedServerCannotFinishIsAbandoned) {
  NodeAutoscalerOptions o{.max_nodes = 2, .pending_for = std::chrono::seconds(1), .unneeded_for = kOneMinute,
                          .provision_timeout = std::chrono::seconds(900)};
  ASSERT_NO_FATAL_FAILURE(MoveBeganThenServerStopped(o));
  NodeAutoscaler after(&store_, nullptr, &clock_, &metrics_, &prov_, o);
  Turns(10, after, 95);  // nothing moves for 950 s
  EXPECT_EQ(LabelOf("chat-1", kEvictLabel), "") << "abandoned after --node-provision-timeout";
  EXPECT_EQ(NodeLabel("auto-0", kConsolidatingLabel), "");
  EXPECT_TRUE(prov_.off.empty());
}

TEST_F(NodeAutoscalerTest, AMoveOfANodeThatDiesIsAbandonedAndTheNodeLosesItsMark) {
  NodeAutoscaler na(&store_, nullptr, &clock_, &metrics_, &prov_,
                    {.max_nodes = 2, .pending_for = std::chrono::seconds(1), .unneeded_for = kOneMinute,
                     .provision_timeout = std::chrono::seconds(120)});
  AddedNodeRunning(na, "chat-1", Gpus(1, 1), kReplica);
  clock_.Advance(61'000'000);
  na.Turn();
  ASSERT_EQ(NodeLabel("auto-0", kConsolidatingLabel), "true");
  prov_.SetPhase("auto-0", "NotReady");  // the machine dies
  Turns(10, na, 14);
  EXPECT_EQ(Consolidations("abandoned"), 1) << "the move times out before the node counts as lost";
  EXPECT_EQ(prov_.off, std::vector<std::string>{"auto-0"});
  EXPECT_EQ(NodeLabel("auto-0", kConsolidatingLabel), "") << "a later server must not resume a move on it";
}

TEST_F(NodeAutoscalerTest, AJobLabelledForADeploymentThatDoesNotExistIsNoReplica) {
  // Nobody would start its successor: it pins its node like any job that cannot move.
  NodeAutoscaler na(&store_, nullptr, &clock_, &metrics_, &prov_, kPool2);
  AddedNodeRunning(na, "ghost-1", Gpus(1, 1), {{kDeploymentLabel, "ghost"}});
  ExpectNothingMoves(na, "ghost-1");
}

TEST_F(NodeAutoscalerTest, JobsOfTwoTenantsWithOneNameAreTwoJobs) {
  // A replica of tenant t and a training job of tenant u, both named "chat-1", on auto-0: the
  // training job pins the node although the replica could move.
  NodeAutoscaler na(&store_, nullptr, &clock_, &metrics_, &prov_, kPool2);
  AddedNodeRunning(na, "chat-1", Gpus(1, 1), kReplica);
  json other = {{"apiVersion", "aicloud/v1"}, {"kind", "Job"}, {"metadata", {{"name", "chat-1"}, {"tenant", "u"}}},
                {"spec", Gpus(1, 1)}, {"status", {{"phase", "Running"}, {"workers", {{{"node", "auto-0"}}}}}}};
  ASSERT_TRUE(store_.Create(other).ok());
  ExpectNothingMoves(na, "chat-1");
}

TEST_F(NodeAutoscalerTest, WorkIsNotMovedIntoAnotherLaneOrOntoATaintedNode) {
  NodeAutoscaler na(&store_, nullptr, &clock_, &metrics_, &prov_, kPool2);
  AddedNodeRunning(na, "chat-1", Gpus(1, 1), kReplica);
  json n = *store_.Get({"Node", "", "sim-0"});
  n["spec"]["taints"] = {{{"key", "maintenance"}, {"effect", "NoSchedule"}}};
  ASSERT_TRUE(store_.Update(n, 0).ok());
  Turns(10, na, 10);
  EXPECT_EQ(Consolidations("started"), 0) << "sim-0, the only room, is tainted";
  n["spec"]["taints"] = {{{"key", "maintenance"}, {"effect", "PreferNoSchedule"}}};
  n["spec"]["pool"] = "batch";
  ASSERT_TRUE(store_.Update(n, 0).ok());
  json pooled = Gpus(1, 1);
  pooled["pool"] = "interactive";
  Labelled("chat-1", pooled, "auto-0", kReplica);
  Turns(10, na, 10);
  EXPECT_EQ(Consolidations("started"), 0) << "sim-0 is in lane batch, the replica in lane interactive";
  Labelled("chat-1", Gpus(1, 1), "auto-0", kReplica);  // no lane: it may go to sim-0
  Turns(10, na, 7);
  EXPECT_EQ(Consolidations("started"), 1) << "a PreferNoSchedule taint does not keep it off";
}

TEST_F(NodeAutoscalerTest, ANodeUsedAtTheThresholdIsKept) {
  NodeAutoscaler na(&store_, nullptr, &clock_, &metrics_, &prov_, kPool2);
  AddedNodeRunning(na, "chat-1", Gpus(1, 4), kReplica);  // 4 of 8: not below 0.5
  Job("train", Gpus(1, 6), "Succeeded");                 // sim-0 has room for it
  Turns(10, na, 20);
  EXPECT_EQ(Consolidations("started"), 0);
  EXPECT_EQ(LabelOf("chat-1", kEvictLabel), "");
}

// auto-0 runs a 1-GPU replica; auto-1 (added later for an 8-GPU job) a 6-GPU job that cannot move.
class PackingTest : public NodeAutoscalerTest {
 protected:
  void TwoAddedNodes(NodeAutoscaler& na) {
    AddedNodeRunning(na, "chat-1", Gpus(1, 1), kReplica);
    ASSERT_TRUE(store_.Delete({"Node", "", "sim-0"}, 0).ok());  // no room but on nodes of ours
    Job("train", Gpus(1, 6), "Succeeded");
    Job("more", Gpus(1, 8), "Pending", "Unschedulable");
    TwoTurns(na);
    ASSERT_EQ(prov_.on, (std::vector<std::string>{"auto-0", "auto-1"}));
    prov_.RegisterWithGpus("auto-1", 8);
    Job("more", Gpus(1, 6), "Running", "", "auto-1");
    na.Turn();
  }
};

TEST_F(PackingTest, AReplicaMovesOntoTheFreeRoomOfAnotherBusyAddedNode) {
  NodeAutoscaler na(&store_, nullptr, &clock_, &metrics_, &prov_, kPool2);
  TwoAddedNodes(na);
  Turns(10, na, 7);
  EXPECT_EQ(Consolidations("started"), 1);
  EXPECT_EQ(LabelOf("chat-1", kEvictLabel), "true") << "bin-packed onto auto-1's free GPU";
}

TEST_F(PackingTest, WorkIsNotMovedOntoAnAddedNodeThatWentEmpty) {
  NodeAutoscaler na(&store_, nullptr, &clock_, &metrics_, &prov_, kPool2);
  TwoAddedNodes(na);
  Turns(10, na, 3);  // auto-0 underused for 30 s, with room on auto-1
  Job("more", Gpus(1, 6), "Succeeded");  // auto-1 is empty now: moving there would only swap nodes
  ExpectNothingMoves(na, "chat-1");
  EXPECT_EQ(prov_.off, std::vector<std::string>{"auto-1"}) << "the empty one goes as unneeded";
}

TEST_F(NodeAutoscalerTest, ConsolidationIsOffAtAZeroThreshold) {
  NodeAutoscaler na(&store_, nullptr, &clock_, &metrics_, &prov_,
                    {.max_nodes = 2, .pending_for = std::chrono::seconds(1), .unneeded_for = kOneMinute,
                     .consolidate_below = 0});
  AddedNodeRunning(na, "chat-1", Gpus(1, 1), kReplica);
  Turns(10, na, 20);
  EXPECT_EQ(LabelOf("chat-1", kEvictLabel), "");
  EXPECT_TRUE(prov_.off.empty());
}

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
  // auto-1 idles; auto-0 runs the job. After 60 s idle auto-1 is cordoned, and powered off
  // the turn after; auto-0 kept.
  Turns(10, na, 6);
  EXPECT_TRUE(prov_.off.empty()) << "cordoned first";
  clock_.Advance(10'000'000);
  na.Turn();
  EXPECT_EQ(prov_.off, std::vector<std::string>{"auto-1"});
  EXPECT_EQ(na.active(), 1);
  // The job ends: auto-0 goes too, after its own 60 s and the cordon's turn.
  Job("big", Gpus(3, 4), "Succeeded");
  Turns(10, na, 8);
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
  TwoTurns(na);
  // (8 - 4) + 12 = 16 GPUs of new nodes: two, not three.
  EXPECT_EQ(prov_.on, (std::vector<std::string>{"auto-0", "auto-1"}));
}

TEST_F(NodeAutoscalerTest, IgnoresJobsANewNodeCouldNotHostAndRespectsMaxNodes) {
  NodeAutoscaler na(&store_, nullptr, &clock_, &metrics_, &prov_, {.max_nodes = 1, .pending_for = std::chrono::seconds(1)});
  Job("huge", Gpus(1, 16), "Pending", "Unschedulable");         // 16 GPUs per worker > 8
  Job("a100", Gpus(1, 1, "A100-80GB"), "Pending", "Unschedulable");  // another GPU model
  Job("pending", Gpus(1, 1), "Pending", "Queued");              // not unschedulable
  TwoTurns(na);
  EXPECT_TRUE(prov_.on.empty());
  Job("many", Gpus(4, 8), "Pending", "Unschedulable");  // needs 4 nodes, 1 allowed
  TwoTurns(na);
  EXPECT_EQ(prov_.on, std::vector<std::string>{"auto-0"});
}

TEST_F(NodeAutoscalerTest, ANodeThatNeverRegistersIsPoweredOffAfterTheTimeout) {
  NodeAutoscaler na(&store_, nullptr, &clock_, &metrics_, &prov_,
                    {.max_nodes = 2, .pending_for = std::chrono::seconds(1), .provision_timeout = std::chrono::seconds(300)});
  Job("j", Gpus(1, 8), "Pending", "Unschedulable");
  TwoTurns(na);
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
  TwoTurns(na);
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

TEST_F(NodeAutoscalerTest, AJobBoundWhileTheCordonIsWrittenKeepsItsNode) {
  NodeAutoscaler na(&store_, nullptr, &clock_, &metrics_, &prov_,
                    {.max_nodes = 1, .pending_for = std::chrono::seconds(1), .unneeded_for = std::chrono::seconds(30)});
  Job("j", Gpus(1, 8), "Pending", "Unschedulable");
  TwoTurns(na);
  ASSERT_EQ(prov_.on.size(), 1u);
  prov_.Register("auto-0");
  Job("j", Gpus(1, 8), "Succeeded");
  na.Turn();                  // registered, idle from now
  clock_.Advance(31'000'000);
  na.Turn();                  // unneeded: cordoned, not yet off
  EXPECT_TRUE(prov_.off.empty());
  Job("late", Gpus(1, 8), "Running", "", "auto-0");  // the scheduler bound it just before the cordon
  clock_.Advance(2'000'000);
  na.Turn();
  EXPECT_TRUE(prov_.off.empty()) << "a node with a job on it was powered off";
  EXPECT_EQ(na.active(), 1);
  // Once that job ends the node idles again for the full 30 s before going.
  Job("late", Gpus(1, 8), "Succeeded");
  na.Turn();
  clock_.Advance(20'000'000);
  na.Turn();
  na.Turn();
  EXPECT_TRUE(prov_.off.empty());
  clock_.Advance(11'000'000);
  na.Turn();
  na.Turn();
  EXPECT_EQ(prov_.off, std::vector<std::string>{"auto-0"});
}

TEST_F(NodeAutoscalerTest, ANameIsNotReusedWhileTheOldNodeStillLooksReady) {
  prov_.off_keeps_ready = true;
  NodeAutoscaler na(&store_, nullptr, &clock_, &metrics_, &prov_,
                    {.max_nodes = 2, .pending_for = std::chrono::seconds(1), .unneeded_for = std::chrono::seconds(10)});
  Job("a", Gpus(1, 8), "Pending", "Unschedulable");
  TwoTurns(na);
  ASSERT_EQ(prov_.on, std::vector<std::string>{"auto-0"});
  prov_.Register("auto-0");
  Job("a", Gpus(1, 8), "Succeeded");
  na.Turn();
  clock_.Advance(11'000'000);
  na.Turn();  // cordoned
  na.Turn();  // powered off; its Node still says Ready (heartbeat grace)
  ASSERT_EQ(prov_.off, std::vector<std::string>{"auto-0"});
  Job("b", Gpus(1, 8), "Pending", "Unschedulable");
  TwoTurns(na);
  ASSERT_EQ(prov_.on, (std::vector<std::string>{"auto-0", "auto-1"})) << "auto-0's stale Node would pass for the new machine";
  // auto-1 has not registered: it must not count as registered, so no second wave either.
  clock_.Advance(5'000'000);
  na.Turn();
  EXPECT_EQ(prov_.on.size(), 2u);
  EXPECT_EQ(na.active(), 1);
  // Once auto-0's heartbeat ages out its name is free again.
  prov_.SetPhase("auto-0", "NotReady");
  prov_.Register("auto-1");
  Job("b", Gpus(1, 8), "Running", "", "auto-1");
  Job("c", Gpus(1, 8), "Pending", "Unschedulable");
  na.Turn();
  clock_.Advance(2'000'000);
  na.Turn();
  EXPECT_EQ(prov_.on, (std::vector<std::string>{"auto-0", "auto-1", "auto-0"}));
}

TEST_F(NodeAutoscalerTest, ANodeWhoseHooksAreStillRunningKeepsItsName) {
  NodeAutoscaler na(&store_, nullptr, &clock_, &metrics_, &prov_,
                    {.max_nodes = 2, .pending_for = std::chrono::seconds(1), .provision_timeout = std::chrono::seconds(60)});
  Job("j", Gpus(1, 8), "Pending", "Unschedulable");
  TwoTurns(na);
  ASSERT_EQ(prov_.on, std::vector<std::string>{"auto-0"});
  prov_.busy.insert("auto-0");  // its `up` hangs (say, on IPMI); the `down` queues behind it
  clock_.Advance(61'000'000);
  na.Turn();
  ASSERT_EQ(prov_.off, std::vector<std::string>{"auto-0"});
  na.Turn();
  EXPECT_EQ(prov_.on, (std::vector<std::string>{"auto-0", "auto-1"})) << "a new up for auto-0 would wait behind the hung one";
  prov_.busy.clear();
  clock_.Advance(61'000'000);  // auto-1 never registers either
  na.Turn();
  na.Turn();
  EXPECT_EQ(prov_.on.back(), "auto-0") << "free again once its hooks are done";
}

TEST_F(NodeAutoscalerTest, AJobNewNodesDoNotHelpBacksOffExponentially) {
  // The scheduler never places "stuck" (a reason the sizing pass cannot see): each wave's node
  // idles out, and the job's next wave comes only after 60 s, then 120 s, then 240 s (the cap).
  NodeAutoscaler na(&store_, nullptr, &clock_, &metrics_, &prov_,
                    {.max_nodes = 1, .pending_for = std::chrono::seconds(1), .unneeded_for = std::chrono::seconds(10),
                     .backoff = std::chrono::seconds(60), .max_backoff = std::chrono::seconds(240)});
  Job("stuck", Gpus(1, 8), "Pending", "Unschedulable");
  clock_.Advance(2'000'000);
  na.Turn();
  std::vector<int64_t> wave_at_s;
  for (int s = 0; s < 1200; ++s) {  // 20 minutes, a turn a second
    const size_t before = prov_.on.size();
    clock_.Advance(1'000'000);
    na.Turn();
    if (prov_.on.size() > before) {
      wave_at_s.push_back(s);
      prov_.Register(prov_.on.back());  // the node comes up at once and idles
    }
  }
  ASSERT_GE(wave_at_s.size(), 4u);
  EXPECT_EQ(wave_at_s[1] - wave_at_s[0], 60);
  EXPECT_EQ(wave_at_s[2] - wave_at_s[1], 120);
  EXPECT_EQ(wave_at_s[3] - wave_at_s[2], 240);
  for (size_t i = 4; i < wave_at_s.size(); ++i) EXPECT_EQ(wave_at_s[i] - wave_at_s[i - 1], 240);
  EXPECT_LE(wave_at_s.size(), 8u);  // without the back-off: a wave every ~13 s, 90 of them
  // Placed at last, then unschedulable again later: it starts afresh, no back-off.
  Job("stuck", Gpus(1, 8), "Running", "", prov_.on.back());
  na.Turn();
  Job("stuck", Gpus(1, 8), "Pending", "Unschedulable");
  na.Turn();
  const size_t waves = prov_.on.size();
  for (int s = 0; s < 30 && prov_.on.size() == waves; ++s) {
    clock_.Advance(1'000'000);
    na.Turn();
  }
  EXPECT_GT(prov_.on.size(), waves) << "a job that was placed kept its back-off";
}

// With the real control plane and scheduler: a safe-to-evict job on an underused added node is
// requeued a turn after the node is cordoned, lands on sim-0, and the node is powered off.
// The autoscaler with a real control plane: nodes register and report through it, and its
// scheduler places the jobs.
class NodeAutoscalerWithControlPlane : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(cp_.Start().ok()); }
  void TearDown() override {
    cp_.Stop();
    std::filesystem::remove_all(dir_);
  }
  void Node(const std::string& n, int gpus, const std::string& model = "H100") {
    json g = json::array();
    for (int i = 0; i < gpus; ++i) g.push_back({{"index", i}, {"model", model}, {"nvlinkDomain", 0}});
    StatusOr<json> r = cp_.RegisterNode(n, {{"cpuMillis", 16000}, {"memoryBytes", int64_t{64} << 30}, {"gpus", g}});
    ASSERT_TRUE(r.ok()) << r.status();
    epoch_[n] = (*r)["epoch"];
  }
  void Heartbeat() {
    for (const auto& [n, e] : epoch_) (void)cp_.AgentReport(n, e, json::object());
    cp_.Sync();
  }
  void Report(const std::string& n, const std::string& state) {  // every attempt on n
    json a = (*cp_.WaitAssignments(n, epoch_[n], cp_.instance(), -1, std::chrono::milliseconds(0)))["attempts"];
    for (const json& x : a) {
      (void)cp_.AgentReport(n, epoch_[n], {{"attempts", {{{"attempt", x["attempt"]}, {"state", state}, {"exitCode", 0}}}}});
    }
  }
  void Submit(const std::string& name, json gpu, json labels) {
    ASSERT_TRUE(store_.Create({{"apiVersion", "aicloud/v1"}, {"kind", "Job"},
                               {"metadata", {{"name", name}, {"tenant", "nlp"}, {"labels", labels}}},
                               {"spec", {{"command", "x"}, {"resources", {{"gpu", gpu}}}}}})
                    .ok());
    cp_.Sync();
  }
  std::string Where(const std::string& job) {
    json st = store_.Get({"Job", "nlp", job})->value("status", json::object());
    json w = st.value("workers", json::array());
    return st.value("phase", std::string()) + "@" + (w.empty() ? std::string() : w[0].value("node", std::string()));
  }
  bool Cordoned(const std::string& n) { return store_.Get({"Node", "", n})->at("spec").value("unschedulable", false); }
  // sim-0 (2 GPUs of `model`) full with job fill; job `name` (its GPU request `gpu`, safe to
  // evict) waits, auto-0 (8 H100s) is added for it and runs it; then fill ends.
  void MovableJobOnAnAddedNode(const std::string& name, json gpu, const std::string& model = "H100") {
    Node("sim-0", 2, model);
    Submit("fill", {{"count", 2}}, json::object());
    Submit(name, std::move(gpu), {{kSafeToEvictLabel, "true"}});
    for (int i = 0; i < 3; ++i) {
      clock_.Advance(2'000'000);
      Heartbeat();
      na_.Turn();
    }
    ASSERT_EQ(prov_.on, std::vector<std::string>{"auto-0"});
    Node("auto-0", 8);
    Heartbeat();
    Report("auto-0", "Running");
    Heartbeat();
    ASSERT_EQ(Where(name), "Running@auto-0");
    Report("sim-0", "Succeeded");  // fill ends: sim-0 has room
    Heartbeat();
  }

  // An operator labels the node do-not-disrupt.
  void Keep(const std::string& node) {
    json n = *store_.Get({"Node", "", node});
    n["metadata"]["labels"][kDoNotDisruptLabel] = "true";
    ASSERT_TRUE(store_.Update(n, 0).ok());
  }
  // `turns` turns of `na`, 10 s apart.
  void Turns(NodeAutoscaler& na, int turns) {
    for (int t = 0; t < turns; ++t) {
      clock_.Advance(10'000'000);
      Heartbeat();
      na.Turn();
    }
  }

  // auto-0 was added for a job that has finished; turns run until the autoscaler cordons it to
  // scale it down (it is then powered off the turn after, unless kept).
  void EmptyAddedNodeUntilCordoned() {
    ASSERT_NO_FATAL_FAILURE(MovableJobOnAnAddedNode("j", {{"count", 1}}));
    Report("auto-0", "Succeeded");
    Heartbeat();
    for (int t = 0; t < 20 && !Cordoned("auto-0"); ++t) Turns(na_, 1);
    ASSERT_TRUE(Cordoned("auto-0"));
    ASSERT_TRUE(prov_.off.empty());
  }

  store::MemoryStore store_;
  FakeClock clock_{1'000'000'000};
  Metrics metrics_;
  const std::filesystem::path dir_ =
      std::filesystem::temp_directory_path() / ("aicloud-na-cp-" + std::to_string(::getpid()));
  ControlPlane cp_{&store_, &clock_, &metrics_, ControlOptions{.data_dir = dir_.string(), .tick = std::chrono::milliseconds(10)}};
  FakeProvisioner prov_{&store_};
  NodeAutoscaler na_{&store_, &cp_, &clock_, &metrics_, &prov_,
                     {.max_nodes = 1, .pending_for = std::chrono::seconds(1), .unneeded_for = std::chrono::seconds(60)}};
  std::map<std::string, std::string> epoch_;
};

// A node being scaled down is labelled do-not-disrupt: the autoscaler takes its cordon back (when
// an operator cordoned it since, it stays cordoned: the next test; one cordoned by an operator
// before is never marked as the autoscaler's: ControlPlaneTest).
TEST_F(NodeAutoscalerWithControlPlane, AKeptNodeIsUncordonedUnlessAnOperatorCordonedIt) {
  ASSERT_NO_FATAL_FAILURE(EmptyAddedNodeUntilCordoned());
  ASSERT_NO_FATAL_FAILURE(Keep("auto-0"));
  Turns(na_, 1);
  EXPECT_FALSE(Cordoned("auto-0")) << "the autoscaler's own cordon is undone";
  EXPECT_TRUE(prov_.off.empty());
}

// A restarted server finds its predecessor's scale-down cordon by the mark, and undoes it when
// the node is kept.
TEST_F(NodeAutoscalerWithControlPlane, ARestartedServerUndoesItsPredecessorsScaleDownCordon) {
  ASSERT_NO_FATAL_FAILURE(EmptyAddedNodeUntilCordoned());
  Metrics metrics;
  NodeAutoscaler restarted{&store_, &cp_, &clock_, &metrics, &prov_,
                           {.max_nodes = 1, .pending_for = std::chrono::seconds(1), .unneeded_for = std::chrono::seconds(60)}};
  ASSERT_NO_FATAL_FAILURE(Keep("auto-0"));
  Turns(restarted, 3);
  EXPECT_FALSE(Cordoned("auto-0"));
  EXPECT_TRUE(prov_.off.empty());
}

// An operator uncordons the node the autoscaler cordoned to scale down (kubectl uncordon): they
// want it, so it is not powered off, and it counts as unneeded afresh (60 s) before the autoscaler
// cordons it again.
TEST_F(NodeAutoscalerWithControlPlane, AnOperatorsUncordonStopsTheScaleDown) {
  ASSERT_NO_FATAL_FAILURE(EmptyAddedNodeUntilCordoned());
  ASSERT_TRUE(cp_.Cordon("auto-0", false, ControlPlane::CordonBy::kOperator).ok());
  Turns(na_, 1);
  EXPECT_TRUE(prov_.off.empty()) << "powered off after an operator's uncordon";
  EXPECT_FALSE(Cordoned("auto-0"));
  Turns(na_, 5);  // 50 s more: not unneeded for 60 s yet
  EXPECT_FALSE(Cordoned("auto-0"));
  EXPECT_TRUE(prov_.off.empty());
  for (int t = 0; t < 3 && prov_.off.empty(); ++t) Turns(na_, 1);
  EXPECT_EQ(prov_.off, std::vector<std::string>{"auto-0"}) << "unneeded again, then scaled down as before";
}

// The same uncordon landing between the power-off turn's read of the Nodes and its power-off:
// the power-off's own cordon (kPowerOff) finds the node uncordoned and refuses; the next
// turns find it uncordoned and count it as unneeded afresh.
TEST_F(NodeAutoscalerWithControlPlane, AnOperatorsUncordonWhileThePowerOffTurnRunsStopsIt) {
  ASSERT_NO_FATAL_FAILURE(EmptyAddedNodeUntilCordoned());
  HookedStore hooked(&store_);
  Metrics metrics;
  NodeAutoscaler na{&hooked, &cp_, &clock_, &metrics, &prov_,
                    {.max_nodes = 1, .pending_for = std::chrono::seconds(1), .unneeded_for = std::chrono::seconds(60)}};
  hooked.hook = [&] { ASSERT_TRUE(cp_.Cordon("auto-0", false, ControlPlane::CordonBy::kOperator).ok()); };
  Turns(na, 1);  // finds the scale-down cordon (by its mark) and goes to power the node off
  EXPECT_TRUE(prov_.off.empty()) << "powered off after an operator's uncordon";
  EXPECT_FALSE(Cordoned("auto-0"));
  Turns(na, 5);
  EXPECT_FALSE(Cordoned("auto-0")) << "not unneeded for 60 s yet";
  for (int t = 0; t < 3 && prov_.off.empty(); ++t) Turns(na, 1);
  EXPECT_EQ(prov_.off, std::vector<std::string>{"auto-0"});
}

// A node is powered off only while it is cordoned and no running work is bound to it: work the
// scheduler placed while an operator had it uncordoned stops the power-off even if the operator
// cordoned it again.
TEST_F(NodeAutoscalerWithControlPlane, APowerOffIsRefusedWhileWorkIsBoundToTheNode) {
  ASSERT_NO_FATAL_FAILURE(MovableJobOnAnAddedNode("j", {{"count", 1}}));
  ASSERT_TRUE(cp_.Cordon("auto-0", true, ControlPlane::CordonBy::kOperator).ok());
  const Status busy = cp_.Cordon("auto-0", true, ControlPlane::CordonBy::kPowerOff);
  EXPECT_EQ(busy.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(busy.message().find("has work bound to it"), std::string::npos) << busy.message();
  Report("auto-0", "Succeeded");
  Heartbeat();
  EXPECT_EQ(cp_.Cordon("auto-0", true, ControlPlane::CordonBy::kPowerOff).code(), StatusCode::kOk);
  ASSERT_TRUE(cp_.Cordon("auto-0", false, ControlPlane::CordonBy::kOperator).ok());
  const Status uncordoned = cp_.Cordon("auto-0", true, ControlPlane::CordonBy::kPowerOff);
  EXPECT_EQ(uncordoned.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(uncordoned.message().find("uncordoned since the scale-down began"), std::string::npos) << uncordoned.message();
  EXPECT_FALSE(Cordoned("auto-0")) << "a refused power-off cordon writes nothing";
}

TEST_F(NodeAutoscalerWithControlPlane, AnOperatorsCordonSinceTheScaleDownStays) {
  ASSERT_NO_FATAL_FAILURE(EmptyAddedNodeUntilCordoned());
  ASSERT_TRUE(cp_.Cordon("auto-0", true, ControlPlane::CordonBy::kOperator).ok());  // kubectl cordon again
  ASSERT_NO_FATAL_FAILURE(Keep("auto-0"));
  for (int t = 0; t < 3; ++t) {
    Turns(na_, 1);
    EXPECT_TRUE(Cordoned("auto-0")) << "turn " << t << ": the operator's cordon";
  }
  EXPECT_TRUE(prov_.off.empty());
}

TEST_F(NodeAutoscalerWithControlPlane, ASafeToEvictJobIsMovedAfterTheCordonAndTheNodeGoes) {
  ASSERT_NO_FATAL_FAILURE(MovableJobOnAnAddedNode("ckpt", {{"count", 1}}));
  int cordoned_at = -1, moved_at = -1, off_at = -1;
  for (int t = 0; t < 12 && off_at < 0; ++t) {
    clock_.Advance(10'000'000);
    Heartbeat();
    na_.Turn();
    Heartbeat();
    if (Cordoned("auto-0") && cordoned_at < 0) {
      cordoned_at = t;
      EXPECT_EQ(Where("ckpt"), "Running@auto-0") << "not requeued in the turn of the cordon";
    }
    if (moved_at < 0 && Where("ckpt") == "Scheduled@sim-0") moved_at = t;
    if (!prov_.off.empty()) off_at = t;
  }
  EXPECT_GE(cordoned_at, 5) << "after --node-unneeded";
  EXPECT_EQ(moved_at, cordoned_at + 1);
  EXPECT_EQ(off_at, moved_at + 1);
  EXPECT_EQ(prov_.off, std::vector<std::string>{"auto-0"});
  EXPECT_EQ(store_.Get({"Job", "nlp", "ckpt"})->at("status").value("failures", -1), 0);
}

// A MIG slice runs on the added H100 node; sim-0's free L40S GPUs count as room for one GPU, but
// they have no MIG: the scheduler's what-if says no, so the job is not moved for nothing.
TEST_F(NodeAutoscalerWithControlPlane, WorkTheSchedulerCouldNotPlaceElsewhereIsNotMoved) {
  ASSERT_NO_FATAL_FAILURE(MovableJobOnAnAddedNode("slice", {{"profile", "1g.10gb"}}, "L40S"));
  for (int t = 0; t < 12; ++t) {
    clock_.Advance(10'000'000);
    Heartbeat();
    na_.Turn();
    Heartbeat();
    ASSERT_FALSE(Cordoned("auto-0")) << "turn " << t;
  }
  EXPECT_EQ(Where("slice"), "Running@auto-0");
  EXPECT_TRUE(prov_.off.empty());
  EXPECT_EQ(metrics_.Render().find("consolidations_total{outcome=\"started\"}"), std::string::npos);
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

TEST(ScriptProvisioner, HooksOfOneNodeRunInOrderOneAtATime) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("hook-order-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string script = (dir / "hook.sh").string();
  const std::string log = (dir / "log").string();
  {
    // Node a's first hook waits (up to 10 s) until node b's hook has started: they must overlap.
    std::ofstream f(script);
    f << "#!/bin/sh\n"
      << "echo \"start $1 $2\" >> " << log << "\n"
      << "if [ \"$2\" = b ]; then touch " << (dir / "b-started").string() << "; fi\n"
      << "if [ \"$2\" = a ] && [ ! -e " << (dir / "a-once").string() << " ]; then\n"
      << "  touch " << (dir / "a-once").string() << "\n"
      << "  i=0; while [ ! -e " << (dir / "b-started").string() << " ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done\n"
      << "fi\n"
      << "sleep 0.05\n"
      << "echo \"end $1 $2\" >> " << log << "\n";
  }
  std::filesystem::permissions(script, std::filesystem::perms::owner_all);
  {
    ScriptProvisioner p(script, {});
    ASSERT_TRUE(p.PowerOn("a").ok());
    ASSERT_TRUE(p.PowerOff("a").ok());
    ASSERT_TRUE(p.PowerOn("a").ok());
    ASSERT_TRUE(p.PowerOn("b").ok());
  }
  std::ifstream in(log);
  std::vector<std::string> a_lines;
  std::string line;
  int b_start = -1, a_first_end = -1, n = 0;
  while (std::getline(in, line)) {
    if (line.ends_with(" a")) {
      if (a_first_end < 0 && line == "end up a") a_first_end = n;
      a_lines.push_back(line);
    }
    if (line == "start up b") b_start = n;
    ++n;
  }
  EXPECT_EQ(a_lines, (std::vector<std::string>{"start up a", "end up a", "start down a", "end down a", "start up a",
                                               "end up a"}));
  ASSERT_GE(b_start, 0);
  EXPECT_LT(b_start, a_first_end) << "node b's hook waited for node a's";
  std::filesystem::remove_all(dir);
}

TEST(ScriptProvisioner, AHungHookIsStoppedAndTheNodesNextHookRuns) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("hook-hang-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string script = (dir / "hook.sh").string();
  {
    std::ofstream f(script);
    f << "#!/bin/sh\nif [ \"$1\" = up ]; then exec sleep 60; fi\necho down >> " << (dir / "log").string() << "\n";
  }
  std::filesystem::permissions(script, std::filesystem::perms::owner_all);
  const auto t0 = std::chrono::steady_clock::now();
  {
    ScriptProvisioner p(script, {}, std::chrono::seconds(1));
    ASSERT_TRUE(p.PowerOn("n").ok());
    ASSERT_TRUE(p.PowerOff("n").ok());
    EXPECT_TRUE(p.Busy("n"));
    EXPECT_FALSE(p.Busy("other"));
    for (int i = 0; i < 1000 && p.Busy("n"); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_FALSE(p.Busy("n"));
    EXPECT_EQ(p.failed(), 1);     // the up, stopped
    EXPECT_EQ(p.succeeded(), 1);  // the down, after it
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));
  std::ifstream in(dir / "log");
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(all, "down\n");
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
