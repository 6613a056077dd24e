#include "control/control_plane.h"
#include "control/deployment.h"
#include "control/node_autoscaler.h"
#include "control/replica_ca.h"
#include "control/replica_secret.h"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include "store/memory_store.h"

namespace aicloud::control {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;

json GpuNodeSpec(int gpus) {
  json g = json::array();
  for (int i = 0; i < gpus; ++i) g.push_back({{"index", i}, {"model", "H100"}, {"nvlinkDomain", 0}});
  return {{"cpuMillis", 16000}, {"memoryBytes", int64_t{64} << 30}, {"gpus", g}};
}

json JobObject(const std::string& name, json spec, const std::string& tenant = "nlp") {
  return {{"apiVersion", "aicloud/v1"}, {"kind", "Job"},
          {"metadata", {{"name", name}, {"tenant", tenant}}}, {"spec", spec}};
}

class ControlPlaneTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("cp-test-" + std::to_string(::getpid()) + "-" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    Restart();
  }
  void TearDown() override {
    cp_.reset();
    std::filesystem::remove_all(dir_);
  }
  void Restart() {
    cp_.reset();
    cp_ = std::make_unique<ControlPlane>(&store_, &clock_, &metrics_,
                                         ControlOptions{.data_dir = dir_.string(),
                                                        .replica_secrets = &secrets_,
                                                        .replica_ca = ca_.get(),
                                                        .node_grace = std::chrono::seconds(40),
                                                        .policy = "bestfit",
                                                        .tick = milliseconds(10)});
    ASSERT_TRUE(cp_->Start().ok());
  }
  std::string Register(const std::string& node, int gpus) {
    StatusOr<json> r = cp_->RegisterNode(node, GpuNodeSpec(gpus));
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? (*r)["epoch"].get<std::string>() : "";
  }
  json Submit(const std::string& name, json spec) {
    StatusOr<json> j = store_.Create(JobObject(name, spec));
    EXPECT_TRUE(j.ok()) << j.status();
    cp_->Sync();
    return JobNow(name);
  }
  json JobNow(const std::string& name) {
    cp_->Sync();
    StatusOr<json> j = store_.Get({"Job", "nlp", name});
    return j.ok() ? *j : json();
  }
  json Assigned(const std::string& node, const std::string& epoch) {
    StatusOr<json> a = cp_->WaitAssignments(node, epoch, cp_->instance(), -1, milliseconds(0));
    EXPECT_TRUE(a.ok()) << a.status();
    return a.ok() ? (*a)["attempts"] : json::array();
  }
  json Report(const std::string& node, const std::string& epoch, const std::string& attempt,
              const std::string& state, int code = -1) {
    StatusOr<json> r = cp_->AgentReport(
        node, epoch, {{"attempts", {{{"attempt", attempt}, {"state", state}, {"exitCode", code}}}}});
    EXPECT_TRUE(r.ok()) << r.status();
    cp_->Sync();
    return r.ok() ? *r : json();
  }

  std::filesystem::path dir_;
  ReplicaSecrets secrets_{"a-cluster-key-for-tests-0123456789abcdef"};
  std::unique_ptr<ReplicaCa> ca_;  // set (then Restart): the cluster has TLS
  store::MemoryStore store_;
  FakeClock clock_{1'000'000};
  Metrics metrics_;
  std::unique_ptr<ControlPlane> cp_;
};

TEST_F(ControlPlaneTest, JobRunsToSuccessThroughAnAgent) {
  std::string e = Register("gpu-1", 2);
  json job = Submit("train", {{"command", "echo hi"}, {"resources", {{"gpu", {{"count", 1}}}}}});
  EXPECT_EQ(job["status"]["phase"], "Scheduled") << job.dump();
  json a = Assigned("gpu-1", e);
  ASSERT_EQ(a.size(), 1u);
  const std::string attempt = a[0]["attempt"];
  EXPECT_EQ(a[0]["argv"], json({"/bin/sh", "-c", "echo hi"}));
  EXPECT_EQ(a[0]["env"]["AICLOUD_JOB"], "train");
  EXPECT_EQ(a[0]["gpus"].size(), 1u);
  Report("gpu-1", e, attempt, "Running");
  EXPECT_EQ(JobNow("train")["status"]["phase"], "Running");
  clock_.Advance(10 * kMicrosPerSecond);
  Report("gpu-1", e, attempt, "Succeeded", 0);
  job = JobNow("train");
  EXPECT_EQ(job["status"]["phase"], "Succeeded") << job.dump();
  EXPECT_NEAR(job["status"]["usage"]["gpuSeconds"].get<double>(), 10.0, 1e-6);
  EXPECT_GT(job["status"]["usage"]["costUsd"].get<double>(), 0);
  EXPECT_TRUE(Assigned("gpu-1", e).empty());
  // Events were written for the lifecycle.
  StatusOr<store::ListResult> ev = store_.List({.kind = "Event", .tenant = "nlp"});
  ASSERT_TRUE(ev.ok());
  std::set<std::string> reasons;
  for (const json& o : ev->items) reasons.insert(o["spec"]["reason"]);
  EXPECT_TRUE(reasons.count("Scheduled") && reasons.count("Started") && reasons.count("Completed"));
}

// A Deployment replica's attempt carries its secret, any other job's does not (a job cannot set
// AICLOUD_* variables itself: ParseJobSpec refuses them), and the Job object never holds it.
TEST_F(ControlPlaneTest, OnlyReplicaAttemptsGetTheirSecret) {
  std::string e = Register("gpu-1", 2);
  const json small = {{"cpu", "100m"}, {"memory", "64Mi"}};
  json replica = JobObject("chat-r1", {{"command", "sleep 60"}, {"resources", small}});
  replica["metadata"]["labels"] = {{kDeploymentLabel, "chat"}};
  ASSERT_TRUE(store_.Create(replica).ok());
  Submit("plain", {{"command", "sleep 60"}, {"resources", small}});
  json attempts = Assigned("gpu-1", e);
  ASSERT_EQ(attempts.size(), 2u) << attempts.dump();
  for (const json& a : attempts) {
    const json stored = JobNow(a["job"].get<std::string>());
    if (a["job"] == "chat-r1") {
      const std::string want = secrets_.For("nlp", "chat-r1", a["attempt"].get<std::string>());
      ASSERT_EQ(want.size(), 64u);
      EXPECT_EQ(a["env"].value(kReplicaSecretEnv, ""), want);
      EXPECT_EQ(stored.dump().find(want), std::string::npos);
    } else {
      EXPECT_FALSE(a["env"].contains(kReplicaSecretEnv)) << a["env"].dump();
    }
  }
}

TEST_F(ControlPlaneTest, IsolationTravelsToTheAgentAndOomKillsAreNamed) {
  std::string e = Register("a", 1);
  Submit("iso", {{"command", "x"}, {"isolation", "network"}});
  json a = Assigned("a", e);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0]["isolation"], "network");
  const std::string attempt = a[0]["attempt"];
  Report("a", e, attempt, "Running");
  StatusOr<json> r = cp_->AgentReport(
      "a", e,
      {{"attempts",
        {{{"attempt", attempt}, {"state", "Failed"}, {"exitCode", -1}, {"oomKilled", true},
          {"message", "killed by signal 9 (SIGKILL): out of memory (limit 1024 MiB)"}}}}});
  ASSERT_TRUE(r.ok()) << r.status();
  json job = JobNow("iso");
  EXPECT_EQ(job["status"]["phase"], "Failed") << job.dump();
  EXPECT_EQ(job["status"]["reason"], "OOMKilled") << job.dump();
  EXPECT_NE(job["status"]["message"].get<std::string>().find("out of memory (limit 1024 MiB)"),
            std::string::npos)
      << job.dump();
  StatusOr<store::ListResult> ev = store_.List({.kind = "Event", .tenant = "nlp"});
  ASSERT_TRUE(ev.ok());
  int oom_events = 0;
  for (const json& o : ev->items) oom_events += o["spec"]["reason"] == "OOMKilled";
  EXPECT_GE(oom_events, 1);

  // Without the agent's flag a failure stays a WorkerFailed; without the field, no isolation.
  Submit("plain", {{"command", "x"}});
  a = Assigned("a", e);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0]["isolation"], "none");
  Report("a", e, a[0]["attempt"], "Failed", 1);
  EXPECT_EQ(JobNow("plain")["status"]["reason"], "WorkerFailed");
}

// With TLS, a replica's assignment (never its Job) carries a certificate for its node's address
// and its key; other jobs' do not, and without TLS none does (see the test above: no "tls").
TEST_F(ControlPlaneTest, ReplicaAttemptsGetACertificateOnlyWhenTheClusterHasTls) {
  const json small = {{"cpu", "100m"}, {"memory", "64Mi"}};
  json spec = GpuNodeSpec(2);
  spec["address"] = "10.0.0.7";
  StatusOr<json> reg = cp_->RegisterNode("gpu-1", spec);
  ASSERT_TRUE(reg.ok());
  json replica = JobObject("chat-r1", {{"command", "sleep 60"}, {"resources", small}});
  replica["metadata"]["labels"] = {{kDeploymentLabel, "chat"}};
  ASSERT_TRUE(store_.Create(replica).ok());
  cp_->Sync();
  json attempts = Assigned("gpu-1", (*reg)["epoch"]);
  ASSERT_EQ(attempts.size(), 1u);
  EXPECT_FALSE(attempts[0].contains("tls")) << "no TLS configured: no certificate";

  StatusOr<ReplicaCa> ca = ReplicaCa::Generate();
  ASSERT_TRUE(ca.ok());
  ca_ = std::make_unique<ReplicaCa>(*ca);
  Restart();
  reg = cp_->RegisterNode("gpu-1", spec);
  ASSERT_TRUE(reg.ok());
  Submit("plain", {{"command", "sleep 60"}, {"resources", small}});
  json replica2 = JobObject("chat-r2", {{"command", "sleep 60"}, {"resources", small}});
  replica2["metadata"]["labels"] = {{kDeploymentLabel, "chat"}};
  ASSERT_TRUE(store_.Create(replica2).ok());
  cp_->Sync();
  attempts = Assigned("gpu-1", (*reg)["epoch"]);
  bool chat_r2 = false;  // (chat-r1 may have been requeued by the restart)
  for (const json& a : attempts) {
    if (a["job"] == "plain") {
      EXPECT_FALSE(a.contains("tls")) << a.dump();
      continue;
    }
    ASSERT_TRUE(a.contains("tls")) << a.dump();
    chat_r2 |= a["job"] == "chat-r2";
    const std::string cert = a["tls"]["cert"], key = a["tls"]["key"];
    EXPECT_NE(cert.find("BEGIN CERTIFICATE"), std::string::npos);
    EXPECT_NE(key.find("PRIVATE KEY"), std::string::npos);
    EXPECT_TRUE(cert.ends_with(ca_->ca_pem())) << "the chain ends with the CA";
    EXPECT_FALSE(a["env"].dump().find("PRIVATE KEY") != std::string::npos);
    // Asked again, the same attempt gets the same certificate (issued once).
    json again = Assigned("gpu-1", (*reg)["epoch"]);
    for (const json& b : again) {
      if (b["attempt"] == a["attempt"]) {
        EXPECT_EQ(b["tls"]["cert"], cert);
      }
    }
    const json stored = JobNow(a["job"].get<std::string>());
    EXPECT_EQ(stored.dump().find("PRIVATE KEY"), std::string::npos);
    EXPECT_EQ(stored.dump().find(key.substr(40, 40)), std::string::npos);
  }
  EXPECT_TRUE(chat_r2) << attempts.dump();
}

TEST_F(ControlPlaneTest, NodeAddressFromTheAgentOrKeptFromTheOperator) {
  json spec = GpuNodeSpec(1);
  spec["address"] = "10.0.0.7";
  ASSERT_TRUE(cp_->RegisterNode("a", spec).ok());
  EXPECT_EQ(store_.Get({"Node", "", "a"})->at("spec").value("address", ""), "10.0.0.7");
  // An agent that reports none keeps the operator's (or the last agent's) address.
  ASSERT_TRUE(cp_->RegisterNode("a", GpuNodeSpec(1)).ok());
  EXPECT_EQ(store_.Get({"Node", "", "a"})->at("spec").value("address", ""), "10.0.0.7");
  spec["address"] = "10.0.0.8";
  ASSERT_TRUE(cp_->RegisterNode("a", spec).ok());
  EXPECT_EQ(store_.Get({"Node", "", "a"})->at("spec").value("address", ""), "10.0.0.8");
}

TEST_F(ControlPlaneTest, GangStartsOnlyWhenEveryWorkerIsPlaced) {
  std::string e1 = Register("a", 1);
  json job = Submit("big", {{"command", "x"}, {"workers", 2}, {"resources", {{"gpu", {{"count", 1}}}}}});
  EXPECT_EQ(job["status"]["phase"], "Pending");
  EXPECT_EQ(job["status"]["reason"], "Unschedulable");
  EXPECT_TRUE(Assigned("a", e1).empty()) << "half a gang must not start";
  std::string e2 = Register("b", 1);
  job = JobNow("big");
  EXPECT_EQ(job["status"]["phase"], "Scheduled") << job.dump();
  EXPECT_EQ(Assigned("a", e1).size(), 1u);
  EXPECT_EQ(Assigned("b", e2).size(), 1u);
}

TEST_F(ControlPlaneTest, UnschedulableJobSaysWhy) {
  Register("a", 2);
  json job = Submit("huge", {{"command", "x"}, {"resources", {{"gpu", {{"count", 8}}}}}});
  EXPECT_EQ(job["status"]["phase"], "Pending");
  EXPECT_NE(job["status"]["message"].get<std::string>().find("0/1 nodes available"), std::string::npos)
      << job.dump();
}

TEST_F(ControlPlaneTest, RestartPolicyRetriesThenFails) {
  std::string e = Register("a", 1);
  Submit("flaky", {{"command", "x"}, {"restartPolicy", "OnFailure"}, {"maxRetries", 1}});
  std::string a1 = Assigned("a", e)[0]["attempt"];
  Report("a", e, a1, "Failed", 3);
  json job = JobNow("flaky");
  EXPECT_EQ(job["status"]["attempt"], 2) << job.dump();
  json as = Assigned("a", e);
  ASSERT_EQ(as.size(), 1u);
  std::string a2 = as[0]["attempt"];
  EXPECT_NE(a1, a2);
  // A report about the old attempt is fenced off: the agent is told to stop it.
  json r = Report("a", e, a1, "Running");
  EXPECT_EQ(r["stop"], json({a1}));
  Report("a", e, a2, "Failed", 1);
  job = JobNow("flaky");
  EXPECT_EQ(job["status"]["phase"], "Failed");
  EXPECT_EQ(job["status"]["failures"], 2);
}

TEST_F(ControlPlaneTest, LostNodeRequeuesItsWorkElsewhere) {
  std::string e1 = Register("a", 1);
  Submit("j", {{"command", "x"}, {"restartPolicy", "OnFailure"}, {"maxRetries", 3}, {"resources", {{"gpu", {{"count", 1}}}}}});
  json on_a = Assigned("a", e1);
  ASSERT_EQ(on_a.size(), 1u);
  std::string e2 = Register("b", 1);
  // b keeps heartbeating, a goes silent past the grace.
  clock_.Advance(30 * kMicrosPerSecond);
  Report("b", e2, "none", "Running");
  clock_.Advance(15 * kMicrosPerSecond);
  cp_->Sync();
  json job = JobNow("j");
  EXPECT_EQ(job["status"]["phase"], "Scheduled") << job.dump();
  json on_b = Assigned("b", e2);
  ASSERT_EQ(on_b.size(), 1u);
  EXPECT_NE(on_b[0]["attempt"], on_a[0]["attempt"]);
  StatusOr<json> node = store_.Get({"Node", "", "a"});
  EXPECT_EQ((*node)["status"]["phase"], "NotReady");
  // a comes back: the old attempt is fenced.
  json r = Report("a", e1, on_a[0]["attempt"], "Running");
  EXPECT_EQ(r["stop"].size(), 1u);
}

TEST_F(ControlPlaneTest, ReRegisteredAgentLosesItsAttempts) {
  std::string e1 = Register("a", 1);
  Submit("j", {{"command", "x"}, {"restartPolicy", "OnFailure"}, {"maxRetries", 1}});
  std::string old = Assigned("a", e1)[0]["attempt"];
  std::string e2 = Register("a", 1);
  EXPECT_NE(e1, e2);
  StatusOr<json> stale = cp_->AgentReport("a", e1, json::object());
  EXPECT_EQ(stale.status().code(), StatusCode::kFailedPrecondition);
  cp_->Sync();
  json as = Assigned("a", e2);
  ASSERT_EQ(as.size(), 1u);
  EXPECT_NE(as[0]["attempt"], old);
}

TEST_F(ControlPlaneTest, CancelEndsTheJobAndFreesTheNode) {
  std::string e = Register("a", 1);
  Submit("j", {{"command", "x"}, {"resources", {{"gpu", {{"count", 1}}}}}});
  EXPECT_EQ(Assigned("a", e).size(), 1u);
  ASSERT_TRUE(cp_->CancelJob("nlp", "j").ok());
  json job = JobNow("j");
  EXPECT_EQ(job["status"]["phase"], "Failed");
  EXPECT_EQ(job["status"]["reason"], "Cancelled");
  EXPECT_TRUE(Assigned("a", e).empty());
  EXPECT_EQ(cp_->CancelJob("nlp", "j").code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(cp_->CancelJob("nlp", "nope").code(), StatusCode::kNotFound);
  json next = Submit("k", {{"command", "x"}, {"resources", {{"gpu", {{"count", 1}}}}}});
  EXPECT_EQ(next["status"]["phase"], "Scheduled");
}

// A pending job that did not fit is not retried every turn, only when capacity may have grown:
// freed resources, an uncordoned node. Each of those must place it.
TEST_F(ControlPlaneTest, PendingJobIsPlacedWhenCapacityComesBack) {
  std::string e = Register("a", 1);
  Submit("first", {{"command", "x"}, {"resources", {{"gpu", {{"count", 1}}}}}});
  json waiting = Submit("second", {{"command", "x"}, {"resources", {{"gpu", {{"count", 1}}}}}});
  EXPECT_EQ(waiting["status"]["phase"], "Pending");
  ASSERT_TRUE(cp_->CancelJob("nlp", "first").ok());
  cp_->Sync();
  EXPECT_EQ(JobNow("second")["status"]["phase"], "Scheduled") << JobNow("second").dump();

  ASSERT_TRUE(cp_->Cordon("a", true).ok());
  ASSERT_TRUE(cp_->CancelJob("nlp", "second").ok());
  json third = Submit("third", {{"command", "x"}, {"resources", {{"gpu", {{"count", 1}}}}}});
  EXPECT_EQ(third["status"]["phase"], "Pending");
  ASSERT_TRUE(cp_->Cordon("a", false).ok());
  cp_->Sync();
  cp_->Sync();
  EXPECT_EQ(JobNow("third")["status"]["phase"], "Scheduled") << JobNow("third").dump();
}

// An operator's cordon, uncordon or drain takes the node out of a consolidation (its mark goes
// in the same write); the cluster autoscaler's own cordon keeps the mark.
TEST_F(ControlPlaneTest, AnOperatorsCordonDropsTheConsolidationMark) {
  Register("a", 1);
  auto mark = [&](bool on) {
    json n = *store_.Get({"Node", "", "a"});
    if (on) n["metadata"]["labels"][kConsolidatingLabel] = "true";
    ASSERT_TRUE(store_.Update(n, 0).ok());
  };
  auto marked = [&] {
    json l = (*store_.Get({"Node", "", "a"}))["metadata"].value("labels", json::object());
    return l.is_object() && l.value(kConsolidatingLabel, "") == "true";
  };
  mark(true);
  ASSERT_TRUE(cp_->Cordon("a", true).ok());
  EXPECT_TRUE(marked()) << "the autoscaler's own cordon";
  ASSERT_TRUE(cp_->Cordon("a", true, ControlPlane::CordonBy::kOperator).ok());
  EXPECT_FALSE(marked());
  EXPECT_TRUE((*store_.Get({"Node", "", "a"}))["spec"]["unschedulable"].get<bool>());
  mark(true);
  ASSERT_TRUE(cp_->Cordon("a", false, ControlPlane::CordonBy::kOperator).ok());
  EXPECT_FALSE(marked());
  mark(true);
  ASSERT_TRUE(cp_->Drain("a", ControlPlane::CordonBy::kOperator).ok());
  EXPECT_FALSE(marked());
  // The autoscaler's writes: a move marks as it cordons; carrying on or giving up needs the mark.
  EXPECT_EQ(cp_->Cordon("a", true, ControlPlane::CordonBy::kMarked).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(cp_->Cordon("a", false, ControlPlane::CordonBy::kMarked).code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE((*store_.Get({"Node", "", "a"}))["spec"]["unschedulable"].get<bool>()) << "the operator's cordon stays";
  ASSERT_TRUE(cp_->Cordon("a", false).ok());
  ASSERT_TRUE(cp_->Cordon("a", true, ControlPlane::CordonBy::kMove).ok());
  EXPECT_TRUE(marked());
  ASSERT_TRUE(cp_->Cordon("a", true, ControlPlane::CordonBy::kMarked).ok());
  EXPECT_TRUE(marked());
  ASSERT_TRUE(cp_->Cordon("a", false, ControlPlane::CordonBy::kMarked).ok());
  EXPECT_FALSE(marked());
  EXPECT_FALSE((*store_.Get({"Node", "", "a"}))["spec"]["unschedulable"].get<bool>());
}

// The scale-down cordon (CordonBy::kUnneeded) marks the node as the autoscaler's; it can take
// the cordon back only while that mark is there: not after an operator cordoned the node too,
// and never for a cordon an operator made before.
TEST_F(ControlPlaneTest, TheScaleDownCordonIsUndoneOnlyWhileItIsTheAutoscalers) {
  Register("a", 1);
  auto cordoned = [&] { return (*store_.Get({"Node", "", "a"}))["spec"].value("unschedulable", false); };
  auto marked = [&] {
    json l = (*store_.Get({"Node", "", "a"}))["metadata"].value("labels", json::object());
    return l.is_object() && l.value(kScaleDownLabel, "") == "true";
  };
  using By = ControlPlane::CordonBy;
  ASSERT_TRUE(cp_->Cordon("a", true, By::kUnneeded).ok());
  EXPECT_TRUE(cordoned());
  EXPECT_TRUE(marked());
  ASSERT_TRUE(cp_->Cordon("a", false, By::kUnneeded).ok());
  EXPECT_FALSE(cordoned());
  EXPECT_FALSE(marked());
  // An operator cordons it again after the autoscaler did: the undo is refused, the cordon stays.
  ASSERT_TRUE(cp_->Cordon("a", true, By::kUnneeded).ok());
  ASSERT_TRUE(cp_->Cordon("a", true, By::kOperator).ok());
  EXPECT_FALSE(marked());
  EXPECT_EQ(cp_->Cordon("a", false, By::kUnneeded).code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(cordoned());
  // A cordon an operator made before the scale-down is not marked as the autoscaler's.
  ASSERT_TRUE(cp_->Cordon("a", false, By::kOperator).ok());
  ASSERT_TRUE(cp_->Cordon("a", true, By::kOperator).ok());
  ASSERT_TRUE(cp_->Cordon("a", true, By::kUnneeded).ok());
  EXPECT_FALSE(marked());
  EXPECT_EQ(cp_->Cordon("a", false, By::kUnneeded).code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(cordoned());
}

TEST_F(ControlPlaneTest, TheAutoscalersCordonsAreRefusedOnANodeLabelledDoNotDisrupt) {
  Register("a", 1);
  auto label = [&](const char* key, bool on) {
    json n = *store_.Get({"Node", "", "a"});
    if (on) n["metadata"]["labels"][key] = "true";
    else if (n["metadata"].contains("labels")) n["metadata"]["labels"].erase(key);
    ASSERT_TRUE(store_.Update(n, 0).ok());
  };
  auto cordoned = [&] { return (*store_.Get({"Node", "", "a"}))["spec"].value("unschedulable", false); };
  label(kDoNotDisruptLabel, true);
  Status s = cp_->Cordon("a", true, ControlPlane::CordonBy::kUnneeded);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("aicloud/do-not-disrupt=true"), std::string::npos) << s.message();
  EXPECT_EQ(cp_->Cordon("a", true, ControlPlane::CordonBy::kMove).code(), StatusCode::kFailedPrecondition);
  EXPECT_FALSE(cordoned());
  label(kConsolidatingLabel, true);  // a move that began before the label
  EXPECT_EQ(cp_->Cordon("a", true, ControlPlane::CordonBy::kMarked).code(), StatusCode::kFailedPrecondition);
  EXPECT_FALSE(cordoned());
  // Giving the move up, and the operator's own cordon, still work.
  ASSERT_TRUE(cp_->Cordon("a", false, ControlPlane::CordonBy::kMarked).ok());
  ASSERT_TRUE(cp_->Cordon("a", true, ControlPlane::CordonBy::kOperator).ok());
  EXPECT_TRUE(cordoned());
  ASSERT_TRUE(cp_->Cordon("a", false, ControlPlane::CordonBy::kOperator).ok());
  label(kDoNotDisruptLabel, false);
  ASSERT_TRUE(cp_->Cordon("a", true, ControlPlane::CordonBy::kUnneeded).ok());
  EXPECT_TRUE(cordoned());
}

TEST_F(ControlPlaneTest, WhatIfEmptiedPlacesTheJobsOnTheOtherNodes) {
  Register("a", 2);
  Submit("j", {{"command", "x"}, {"resources", {{"gpu", {{"count", 2}}}}}});
  ASSERT_EQ(JobNow("j")["status"]["workers"][0]["node"], "a");
  EXPECT_NE(cp_->WhatIfEmptied("a", {}, {{"nlp", "j"}}).find("job nlp/j would not fit elsewhere"), std::string::npos)
      << "no other node";
  Register("b", 1);
  EXPECT_NE(cp_->WhatIfEmptied("a", {}, {{"nlp", "j"}}), "") << "b has one GPU, j needs two";
  Register("c", 2);
  EXPECT_EQ(cp_->WhatIfEmptied("a", {}, {{"nlp", "j"}}), "");
  EXPECT_EQ(cp_->WhatIfEmptied("a", {}, {{"nlp", "j"}, {"nlp", "j"}}), "") << "a job named twice moves once";
  EXPECT_NE(cp_->WhatIfEmptied("a", {"c"}, {{"nlp", "j"}}), "") << "c excluded";
  EXPECT_NE(cp_->WhatIfEmptied("a", {}, {{"nlp", "nope"}}).find("not known"), std::string::npos);
  // Two jobs must fit together: each alone fits on c, both do not.
  Submit("k", {{"command", "x"}, {"resources", {{"gpu", {{"count", 1}}}}}});
  ASSERT_EQ(JobNow("k")["status"]["workers"][0]["node"], "b");
  EXPECT_EQ(cp_->WhatIfEmptied("b", {}, {{"nlp", "k"}}), "");
  EXPECT_NE(cp_->WhatIfEmptied("a", {"b"}, {{"nlp", "j"}, {"nlp", "k"}}), "");
  // The live cluster is untouched: j still runs on a, and c still has room for a new job.
  EXPECT_EQ(JobNow("j")["status"]["workers"][0]["node"], "a");
  Submit("l", {{"command", "x"}, {"resources", {{"gpu", {{"count", 2}}}}}});
  EXPECT_EQ(JobNow("l")["status"]["workers"][0]["node"], "c");
}

// After a restart a finished worker keeps its uid but holds nothing: the what-if must not free
// its old allocation, where another job runs now.
TEST_F(ControlPlaneTest, WhatIfEmptiedFreesOnlyWhatIsAllocatedAfterARestart) {
  std::string ea = Register("a", 1), eb = Register("b", 1);
  Submit("j", {{"command", "x"}, {"workers", 2}, {"resources", {{"gpu", {{"count", 1}}}}}});
  json on_a = Assigned("a", ea), on_b = Assigned("b", eb);
  ASSERT_EQ(on_a.size(), 1u);
  ASSERT_EQ(on_b.size(), 1u);
  Report("a", ea, on_a[0]["attempt"], "Running");
  Report("b", eb, on_b[0]["attempt"], "Succeeded", 0);  // b is free again
  Restart();
  Register("b", 1);  // b's agent is back (a's not yet: j's worker there is still adopted)
  Submit("k", {{"command", "x"}, {"resources", {{"gpu", {{"count", 1}}}}}});
  ASSERT_EQ(JobNow("k")["status"]["workers"][0]["node"], "b");
  Register("c", 1);
  ASSERT_EQ(JobNow("j")["status"]["phase"], "Running");
  // j's two workers need two GPUs; only c's is free.
  EXPECT_NE(cp_->WhatIfEmptied("a", {}, {{"nlp", "j"}, {"nlp", "j"}}), "");
}

TEST_F(ControlPlaneTest, DrainRequeuesWithoutUsingARetry) {
  std::string e1 = Register("a", 1);
  Submit("j", {{"command", "x"}});
  ASSERT_EQ(Assigned("a", e1).size(), 1u);
  std::string e2 = Register("b", 1);
  ASSERT_TRUE(cp_->Drain("a").ok());
  json job = JobNow("j");
  EXPECT_EQ(job["status"]["failures"], 0);
  EXPECT_TRUE(Assigned("a", e1).empty());
  EXPECT_EQ(Assigned("b", e2).size(), 1u) << job.dump();
  EXPECT_TRUE((*store_.Get({"Node", "", "a"}))["spec"]["unschedulable"].get<bool>());
}

TEST_F(ControlPlaneTest, GpuSetupFailureRequeuesWithoutUsingARetryWhateverThePolicy) {
  std::string e = Register("a", 1);
  // restartPolicy Never: a worker failure would fail the job; a node that could not set up its
  // GPU must not.
  Submit("j", {{"command", "x"}, {"restartPolicy", "Never"}, {"resources", {{"gpu", {{"count", 1}}}}}});
  json as = Assigned("a", e);
  ASSERT_EQ(as.size(), 1u);
  const std::string a1 = as[0]["attempt"];
  StatusOr<json> r = cp_->AgentReport(
      "a", e,
      {{"attempts", {{{"attempt", a1}, {"state", "Failed"}, {"exitCode", 127}, {"reason", "GpuSetupFailed"},
                      {"message", "could not start: GPU 0: wipe failed: CUDA_ERROR_UNKNOWN"}}}},
       {"events", {{{"type", "Warning"}, {"reason", "GpuSetupFailed"}, {"tenant", "nlp"}, {"job", "j"},
                    {"message", "GPU 0: wipe failed"}}}}});
  ASSERT_TRUE(r.ok()) << r.status();
  json job = JobNow("j");
  EXPECT_NE(job["status"]["phase"], "Failed") << job.dump();
  EXPECT_EQ(job["status"]["failures"], 0) << job.dump();
  EXPECT_EQ(job["status"]["attempt"], 2) << job.dump();
  // Placed again (the only node): a new attempt.
  as = Assigned("a", e);
  ASSERT_EQ(as.size(), 1u) << job.dump();
  EXPECT_NE(as[0]["attempt"], a1);
  // The agent's event is recorded as the Warning it is.
  StatusOr<store::ListResult> ev = store_.List({.kind = "Event", .tenant = "nlp"});
  ASSERT_TRUE(ev.ok());
  bool warned = false, requeued = false;
  for (const json& o : ev->items) {
    requeued |= o["spec"]["reason"] == "Requeued" &&
                o["spec"]["message"].get<std::string>().find("wipe failed") != std::string::npos;
    warned |= o["spec"]["reason"] == "GpuSetupFailed" && o["spec"]["type"] == "Warning" &&
              o["spec"]["message"].get<std::string>().find("node a: GPU 0: wipe failed") == 0;
  }
  EXPECT_TRUE(warned);
  EXPECT_TRUE(requeued);
  // The same report without the reason is an ordinary worker failure: the job fails.
  r = cp_->AgentReport("a", e, {{"attempts", {{{"attempt", as[0]["attempt"]}, {"state", "Failed"}, {"exitCode", 1}}}}});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(JobNow("j")["status"]["phase"], "Failed");
}

TEST_F(ControlPlaneTest, MigAssignmentNamesTheProfileAndStartSlot) {
  std::string e = Register("a", 1);
  Submit("m", {{"command", "x"}, {"resources", {{"gpu", {{"profile", "3g.40gb"}}}}}});
  json as = Assigned("a", e);
  ASSERT_EQ(as.size(), 1u) << JobNow("m").dump();
  ASSERT_EQ(as[0]["gpus"].size(), 1u);
  EXPECT_EQ(as[0]["gpus"][0]["migProfile"], "3g.40gb");
  const int start = as[0]["gpus"][0]["migStart"];
  EXPECT_TRUE(start == 0 || start == 4) << as.dump();
}

TEST_F(ControlPlaneTest, EvictJobRequeuesThatJobAloneWithoutUsingARetry) {
  std::string e1 = Register("a", 2);
  Submit("move", {{"command", "x"}, {"resources", {{"gpu", {{"count", 1}}}}}});
  Submit("stay", {{"command", "x"}, {"resources", {{"gpu", {{"count", 1}}}}}});
  ASSERT_EQ(Assigned("a", e1).size(), 2u);
  std::string e2 = Register("b", 1);
  ASSERT_TRUE(cp_->Cordon("a", true).ok());
  EXPECT_EQ(cp_->EvictJob("nlp", "move", "b").code(), StatusCode::kFailedPrecondition) << "not on b";
  EXPECT_EQ(cp_->EvictJob("nlp", "nope", "a").code(), StatusCode::kNotFound);
  ASSERT_TRUE(cp_->EvictJob("nlp", "move", "a").ok());
  cp_->Sync();
  EXPECT_EQ(JobNow("move")["status"]["failures"], 0);
  ASSERT_EQ(Assigned("a", e1).size(), 1u) << "the other job on the node is untouched";
  EXPECT_EQ(Assigned("a", e1)[0]["job"], "stay");
  ASSERT_EQ(Assigned("b", e2).size(), 1u) << JobNow("move").dump();
  EXPECT_EQ(Assigned("b", e2)[0]["job"], "move");
}

// A store that, once armed, lets another writer change Node `node` just before the control
// plane's next write of it, so that write loses its compare-and-swap.
class InterferingStore final : public store::Store {
 public:
  StatusOr<json> Get(const store::ObjectKey& key) override { return inner_.Get(key); }
  StatusOr<std::vector<json>> Commit(std::vector<store::WriteOp> ops) override {
    for (const store::WriteOp& op : ops) {
      if (armed_.load() && op.type == store::WriteOp::Type::kUpdate && op.object.value("kind", "") == "Node" &&
          op.object["metadata"].value("name", "") == node_) {
        armed_ = false;
        json other = *inner_.Get({"Node", "", node_});
        other["metadata"]["labels"]["touched"] = "yes";  // e.g. the cluster autoscaler's label
        EXPECT_TRUE(inner_.Update(other, 0).ok());
      }
    }
    return inner_.Commit(std::move(ops));
  }
  StatusOr<store::ListResult> List(const store::ListOptions& o) override { return inner_.List(o); }
  StatusOr<store::ChangesResult> Changes(const std::string& kind, int64_t after, int max) override {
    return inner_.Changes(kind, after, max);
  }
  int64_t Revision() override { return inner_.Revision(); }
  int64_t WaitForRevision(int64_t after, std::chrono::milliseconds timeout) override {
    return inner_.WaitForRevision(after, timeout);
  }
  void Arm(const std::string& node) {
    node_ = node;
    armed_ = true;
  }
  bool armed() const { return armed_.load(); }

 private:
  store::MemoryStore inner_;
  std::string node_;
  std::atomic<bool> armed_{false};
};

TEST(ControlPlaneNodeWrites, ANodeStatusWriteThatLosesARaceIsMadeAgain) {
  InterferingStore store;
  FakeClock clock{1'000'000'000};
  Metrics metrics;
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("cp-race-" + std::to_string(::getpid()));
  ControlPlane cp(&store, &clock, &metrics, ControlOptions{.data_dir = dir.string(), .tick = milliseconds(10)});
  ASSERT_TRUE(cp.Start().ok());
  ASSERT_TRUE(cp.RegisterNode("a", GpuNodeSpec(1)).ok());
  cp.Sync();
  ASSERT_EQ(store.Get({"Node", "", "a"})->at("status")["phase"], "Ready");
  store.Arm("a");
  clock.Advance(41'000'000);  // no heartbeat for the grace: NotReady, and that write will lose
  for (int i = 0; i < 50 && store.Get({"Node", "", "a"})->at("status")["phase"] != "NotReady"; ++i) {
    cp.Sync();
    std::this_thread::sleep_for(milliseconds(10));
  }
  EXPECT_FALSE(store.armed()) << "the write was interfered with";
  json node = *store.Get({"Node", "", "a"});
  EXPECT_EQ(node["status"]["phase"], "NotReady") << "written again after the lost race";
  EXPECT_EQ(node["metadata"]["labels"]["touched"], "yes") << "the other writer's change is kept";
  cp.Stop();
  std::filesystem::remove_all(dir);
}

TEST_F(ControlPlaneTest, RestartReadoptsPlacementsWithoutDoubleBooking) {
  std::string e = Register("a", 1);
  Submit("j", {{"command", "x"}, {"resources", {{"gpu", {{"count", 1}}}}}});
  std::string attempt = Assigned("a", e)[0]["attempt"];
  Report("a", e, attempt, "Running");
  Restart();
  json job = JobNow("j");
  EXPECT_EQ(job["status"]["phase"], "Running");
  std::string e2 = Register("a", 1);  // the agent re-registers with the new server
  (void)e2;
  // Re-registration ends the old incarnation's attempt; with restartPolicy Never it fails.
  job = JobNow("j");
  EXPECT_EQ(job["status"]["phase"], "Failed");
  EXPECT_EQ(job["status"]["reason"], "AgentRestarted");
}

TEST_F(ControlPlaneTest, RestartKeepsCapacityAccounted) {
  std::string e = Register("a", 1);
  Submit("j", {{"command", "x"}, {"resources", {{"gpu", {{"count", 1}}}}}});
  ASSERT_EQ(Assigned("a", e).size(), 1u);
  Restart();
  // Before the agent is back the node is not schedulable; the GPU stays held by j.
  json k = Submit("k", {{"command", "x"}, {"resources", {{"gpu", {{"count", 1}}}}}});
  EXPECT_EQ(k["status"]["phase"], "Pending");
  EXPECT_EQ(JobNow("j")["status"]["phase"], "Scheduled");
}

TEST_F(ControlPlaneTest, LogsAppendIdempotentlyAndRefuseStrangers) {
  std::string e = Register("a", 1);
  Submit("j", {{"command", "x"}});
  std::string attempt = Assigned("a", e)[0]["attempt"];
  EXPECT_EQ(*cp_->AppendLog("a", attempt, 0, "hello "), 6);
  EXPECT_EQ(*cp_->AppendLog("a", attempt, 0, "hello "), 6);  // retried push: no duplicate
  EXPECT_EQ(*cp_->AppendLog("a", attempt, 3, "lo world"), 11);
  EXPECT_EQ(cp_->AppendLog("a", attempt, 20, "x").status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(cp_->AppendLog("b", attempt, 0, "x").status().code(), StatusCode::kFailedPrecondition);
  StatusOr<LogChunk> c = cp_->ReadLog("nlp", "j", 0, -1, 0, 1 << 20);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->data, "hello world");
  EXPECT_FALSE(c->done);
  Report("a", e, attempt, "Succeeded", 0);
  c = cp_->ReadLog("nlp", "j", 0, -1, 6, 1 << 20);
  EXPECT_EQ(c->data, "world");
  EXPECT_TRUE(c->done);
  EXPECT_EQ(cp_->ReadLog("nlp", "j", 5, -1, 0, 10).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(ControlPlaneTest, SleepingTenantIsNotScheduled) {
  Register("a", 1);
  ASSERT_TRUE(store_.Create({{"apiVersion", "aicloud/v1"}, {"kind", "Tenant"},
                             {"metadata", {{"name", "nlp"}}}, {"spec", {{"sleeping", true}}}}).ok());
  json job = Submit("j", {{"command", "x"}});
  EXPECT_EQ(job["status"]["phase"], "Pending");
  StatusOr<json> t = store_.Get({"Tenant", "", "nlp"});
  (*t)["spec"]["sleeping"] = false;
  ASSERT_TRUE(store_.Update(*t, 0).ok());
  EXPECT_EQ(JobNow("j")["status"]["phase"], "Scheduled");
}

TEST_F(ControlPlaneTest, InvalidSpecFailsTheJobWithTheReason) {
  json job = Submit("bad", {{"command", "x"}, {"restartPolicy", "Always"}});
  EXPECT_EQ(job["status"]["phase"], "Failed");
  EXPECT_EQ(job["status"]["reason"], "InvalidSpec");
}

TEST_F(ControlPlaneTest, MetricsReportQueueAndAllocation) {
  Register("a", 1);
  Submit("j", {{"command", "x"}, {"resources", {{"gpu", {{"count", 1}}}}}});
  Submit("k", {{"command", "x"}, {"resources", {{"gpu", {{"count", 1}}}}}});
  std::string text = metrics_.Render();
  EXPECT_NE(text.find("aicloud_queue_depth{tenant=\"nlp\"} 1"), std::string::npos) << text;
  EXPECT_NE(text.find("aicloud_gpu_allocated{model=\"H100-SXM\",tenant=\"nlp\"} 1"), std::string::npos) << text;
}

}  // namespace
}  // namespace aicloud::control
