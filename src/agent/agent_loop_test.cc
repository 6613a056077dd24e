// Agent against an in-memory fake of the control plane's four agent endpoints.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "agent/agent.h"
#include "agent/agent_test_util.h"
#include "agent/testdata/fake_gpus.h"
#include "http/router.h"
#include "http/server.h"

namespace aicloud::agent {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using std::chrono::milliseconds;
using SteadyClock = std::chrono::steady_clock;

// The agent's work dir: the sandbox uids must pass through it to their dirs (mkdtemp makes 0700).
class WorkDir : public testing::TempDir {
 public:
  WorkDir() : testing::TempDir("agent_loop_test", 0711) {}
};

using testing::Slurp;
using testing::WaitFor;

// The control plane's agent API, in memory.
class FakeControlPlane {
 public:
  static constexpr const char* kToken = "agent-key";

  FakeControlPlane() {
    auto guarded = [this](http::Handler h) {
      return [this, h](http::Request& r) {
        if (r.Header("authorization") != std::string("Bearer ") + kToken) {
          return http::Response::Error(401, "unauthenticated", "bad key");
        }
        return h(r);
      };
    };
    router_.Add("POST", "/api/v1/agent/nodes/{node}/register", guarded([this](http::Request& r) {
      json body = json::parse(r.body);
      std::lock_guard<std::mutex> l(mu);
      specs.push_back(body["spec"]);
      epoch = "e" + std::to_string(specs.size());
      ++version;
      cv.notify_all();
      return http::Response::Json(200, {{"epoch", epoch}, {"instance", "i1"}, {"node", r.params["node"]}});
    }));
    router_.Add("GET", "/api/v1/agent/nodes/{node}/assignments", guarded([this](http::Request& r) {
      std::unique_lock<std::mutex> l(mu);
      const std::string e = r.Query("epoch");
      const int64_t after = std::stoll(r.Query("after", "-1"));
      cv.wait_for(l, milliseconds(std::stoll(r.Query("waitMs", "0"))),
                  [&] { return stopping_ || epoch != e || version > after; });
      if (epoch != e) return Stale(e);
      ++polls;
      return http::Response::Json(200, {{"version", version}, {"instance", "i1"}, {"attempts", desired}});
    }));
    router_.Add("POST", "/api/v1/agent/nodes/{node}/report", guarded([this](http::Request& r) {
      json body = json::parse(r.body);
      std::lock_guard<std::mutex> l(mu);
      if (r.Query("epoch") != epoch) return Stale(r.Query("epoch"));
      json stop = json::array();
      for (const json& a : body["attempts"]) {
        std::string id = a["attempt"];
        if (stop_ids.count(id)) stop.push_back(id);
        if (a["state"] != "Running" && !logs_at_terminal.count(id)) logs_at_terminal[id] = logs[id];
      }
      reports.push_back(body);
      return http::Response::Json(200, {{"stop", stop}});
    }));
    router_.Add("POST", "/api/v1/agent/nodes/{node}/logs", guarded([this](http::Request& r) {
      std::lock_guard<std::mutex> l(mu);
      const std::string id = r.Query("attempt");
      if (refuse_logs.count(id)) {
        return http::Response::Error(400, "failed_precondition", "attempt " + id + " is not running");
      }
      std::string& log = logs[id];
      const int64_t offset = std::stoll(r.Query("offset"));
      const int64_t size = static_cast<int64_t>(log.size());
      if (offset > size) {
        return http::Response::Error(400, "out_of_range", "expected offset " + std::to_string(size));
      }
      if (size - offset < static_cast<int64_t>(r.body.size())) log += r.body.substr(size - offset);
      return http::Response::Json(200, {{"offset", log.size()}});
    }));
    StatusOr<std::unique_ptr<http::Server>> s = http::Server::Start(
        {.port = 0, .worker_threads = 8}, [this](http::Request& r) { return router_.Dispatch(r); });
    EXPECT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
  }
  ~FakeControlPlane() {
    {
      std::lock_guard<std::mutex> l(mu);
      stopping_ = true;
    }
    cv.notify_all();
    server_->Stop();
  }

  std::string url() const { return "http://127.0.0.1:" + std::to_string(server_->port()); }

  void SetDesired(json attempts) {
    std::lock_guard<std::mutex> l(mu);
    desired = std::move(attempts);
    ++version;
    cv.notify_all();
  }
  // Every call with the current epoch is answered "stale" from now on.
  void Invalidate() {
    std::lock_guard<std::mutex> l(mu);
    epoch = "revoked";
    cv.notify_all();
  }
  int registrations() {
    std::lock_guard<std::mutex> l(mu);
    return static_cast<int>(specs.size());
  }
  std::string Log(const std::string& id) {
    std::lock_guard<std::mutex> l(mu);
    return logs[id];
  }
  // The latest reported entry of attempt `id` (null if never reported).
  json LastReport(const std::string& id) {
    std::lock_guard<std::mutex> l(mu);
    for (auto it = reports.rbegin(); it != reports.rend(); ++it) {
      for (const json& a : (*it)["attempts"]) {
        if (a["attempt"] == id) return a;
      }
    }
    return nullptr;
  }
  std::vector<std::string> States(const std::string& id) {
    std::lock_guard<std::mutex> l(mu);
    std::vector<std::string> out;
    for (const json& r : reports) {
      for (const json& a : r["attempts"]) {
        if (a["attempt"] == id && (out.empty() || out.back() != a["state"])) out.push_back(a["state"]);
      }
    }
    return out;
  }
  bool InLatestReport(const std::string& id) {
    std::lock_guard<std::mutex> l(mu);
    if (reports.empty()) return false;
    for (const json& a : reports.back()["attempts"]) {
      if (a["attempt"] == id) return true;
    }
    return false;
  }
  size_t ReportCount() {
    std::lock_guard<std::mutex> l(mu);
    return reports.size();
  }

  std::mutex mu;
  std::condition_variable cv;
  std::vector<json> specs;
  std::string epoch;
  int64_t version = 0;
  int polls = 0;
  json desired = json::array();
  std::vector<json> reports;
  std::map<std::string, std::string> logs;
  std::map<std::string, std::string> logs_at_terminal;
  std::set<std::string> stop_ids, refuse_logs;

 private:
  static http::Response Stale(const std::string& e) {
    return http::Response::Error(400, "failed_precondition",
                                 "stale agent epoch " + e + " for node n1; register again");
  }
  bool stopping_ = false;
  http::Router router_;
  std::unique_ptr<http::Server> server_;
};

int64_t FakeGpusWipeable() {
  return testing::FakeGpus::kMemory - testing::FakeGpus::kUsedOnGpu1 - (int64_t{1} << 20);
}

json Attempt(const std::string& id, const std::string& cmd, json gpus = json::array(),
             const std::string& tenant = "t", const std::string& job = "j") {
  return {{"attempt", id}, {"tenant", tenant}, {"job", job}, {"worker", 0},
          {"argv", {"/bin/sh", "-c", cmd}}, {"env", {{"AICLOUD_JOB", job}}},
          {"workingDir", ""}, {"cpuMillis", 0}, {"memoryBytes", 0}, {"gpus", gpus},
          {"graceSeconds", 2}};
}

class AgentLoopTest : public ::testing::Test {
 protected:
  AgentOptions Options() {
    AgentOptions o;
    o.server_url = cp.url();
    o.token = FakeControlPlane::kToken;
    o.node_name = "n1";
    o.node_spec = {{"name", "n1"}, {"cpuMillis", 8000}, {"memoryBytes", 1 << 30},
                   {"gpus", json::array({{{"index", 0}, {"model", "H100-SXM"}}})}};
    o.work_dir = dir.path();
    o.heartbeat = milliseconds(200);
    o.poll_wait = milliseconds(300);
    o.register_deadline = milliseconds(2000);
    o.gpu_metrics = false;
    o.nvml_library = dir.path() + "/no-libnvidia-ml.so.1";  // hermetic, even on a GPU host
    o.cuda_library = dir.path() + "/no-libcuda.so.1";
    return o;
  }
  // Against the fake NVML/CUDA (testdata/fake_gpus.h).
  AgentOptions GpuOptions() {
    AgentOptions o = Options();
    o.nvml_library = AICLOUD_FAKE_NVML;
    o.cuda_library = AICLOUD_FAKE_CUDA;
    o.gpu_wipe_command = {AICLOUD_GPU_WIPE_HELPER};
    return o;
  }
  void StartAgent() { StartAgent(Options()); }
  void StartAgent(AgentOptions o) {
    agent = std::make_unique<Agent>(std::move(o));
    ASSERT_TRUE(agent->Start().ok());
  }
  json EventsWith(const std::string& reason) {
    std::lock_guard<std::mutex> l(cp.mu);
    json out = json::array();
    for (const json& r : cp.reports) {
      for (const json& e : r["events"]) {
        if (e["reason"] == reason) out.push_back(e);
      }
    }
    return out;
  }
  void TearDown() override { agent.reset(); }

  WorkDir dir;
  FakeControlPlane cp;
  std::unique_ptr<Agent> agent;
};

TEST_F(AgentLoopTest, RegistersWithNodeSpecAndReportsMetrics) {
  StartAgent();
  EXPECT_EQ(agent->epoch(), "e1");
  ASSERT_EQ(cp.registrations(), 1);
  json want = Options().node_spec;
  want["address"] = "127.0.0.1";  // added: where the server reaches this node (loopback here)
  want["sandbox"] = agent->sandbox_status();  // what isolates tenants here, for the operator
  want["cgroups"] = cp.specs[0]["cgroups"];
  EXPECT_EQ(cp.specs[0], want);
  EXPECT_EQ(agent->sandbox_status().rfind(::geteuid() == 0 ? "on: " : "off: ", 0), 0u)
      << agent->sandbox_status();
  const std::string cgroups = cp.specs[0]["cgroups"].get<std::string>();
  EXPECT_TRUE(cgroups.rfind("cgroup v", 0) == 0 || cgroups.rfind("no cgroup limits: ", 0) == 0)
      << cgroups;
  ASSERT_TRUE(WaitFor([&] { return cp.ReportCount() >= 2; }));  // heartbeat repeats
  std::lock_guard<std::mutex> l(cp.mu);
  EXPECT_TRUE(cp.reports[0]["metrics"]["host"].contains("node_memory_MemTotal_bytes"))
      << cp.reports[0].dump();
}

TEST_F(AgentLoopTest, RunsAttemptShipsLogsThenReportsExit) {
  StartAgent();
  cp.SetDesired({Attempt("a1", "echo hello-from-a1; sleep 0.3; echo bye"),
                 Attempt("a2", "echo failing; exit 3")});
  ASSERT_TRUE(WaitFor([&] { return cp.LastReport("a1")["state"] == "Succeeded"; }));
  ASSERT_TRUE(WaitFor([&] { return cp.LastReport("a2")["state"] == "Failed"; }));
  EXPECT_EQ(cp.States("a1"), (std::vector<std::string>{"Running", "Succeeded"}));
  EXPECT_EQ(cp.LastReport("a1")["exitCode"], 0);
  EXPECT_EQ(cp.LastReport("a2")["exitCode"], 3);
  EXPECT_EQ(cp.Log("a1"), "hello-from-a1\nbye\n");
  EXPECT_EQ(cp.Log("a2"), "failing\n");
  std::lock_guard<std::mutex> l(cp.mu);
  // The whole output had arrived before the server saw the attempt finish.
  EXPECT_EQ(cp.logs_at_terminal["a1"], "hello-from-a1\nbye\n");
  EXPECT_EQ(cp.logs_at_terminal["a2"], "failing\n");
}

TEST_F(AgentLoopTest, AttemptRemovedFromDesiredSetIsKilled) {
  StartAgent();
  cp.SetDesired({Attempt("a1", "sleep 30")});
  ASSERT_TRUE(WaitFor([&] { return cp.LastReport("a1")["state"] == "Running"; }));
  EXPECT_EQ(agent->running(), 1);
  const auto t0 = SteadyClock::now();
  cp.SetDesired(json::array());
  ASSERT_TRUE(WaitFor([&] { return cp.LastReport("a1")["state"] == "Killed"; }));
  EXPECT_LT(SteadyClock::now() - t0, milliseconds(1000));
  EXPECT_EQ(agent->running(), 0);
  // Once its end has been reported and it is no longer desired, it is forgotten.
  EXPECT_TRUE(WaitFor([&] { return !cp.InLatestReport("a1"); }));
}

TEST_F(AgentLoopTest, StopListKillsAttempt) {
  StartAgent();
  cp.SetDesired({Attempt("a1", "sleep 30")});
  ASSERT_TRUE(WaitFor([&] { return agent->running() == 1; }));
  {
    std::lock_guard<std::mutex> l(cp.mu);
    cp.stop_ids.insert("a1");
  }
  ASSERT_TRUE(WaitFor([&] { return agent->running() == 0; }, milliseconds(2000)));
  EXPECT_TRUE(WaitFor([&] { return !cp.InLatestReport("a1"); }));
  // Still desired, but never started again.
  std::this_thread::sleep_for(milliseconds(300));
  EXPECT_EQ(agent->running(), 0);
}

TEST_F(AgentLoopTest, AttemptIsNeverStartedTwice) {
  StartAgent();
  const std::string marker = dir.path() + "/checkpoints/t/j/marker";
  const json a = Attempt("a1", "echo run >> \"$AICLOUD_CHECKPOINT_DIR/marker\"");
  cp.SetDesired({a});
  ASSERT_TRUE(WaitFor([&] { return cp.LastReport("a1")["state"] == "Succeeded"; }));
  // Still desired: reported again, not re-run.
  const size_t n = cp.ReportCount();
  ASSERT_TRUE(WaitFor([&] { return cp.ReportCount() >= n + 2; }));
  EXPECT_TRUE(cp.InLatestReport("a1"));
  cp.SetDesired(json::array());
  ASSERT_TRUE(WaitFor([&] { return !cp.InLatestReport("a1"); }));  // forgotten
  cp.SetDesired({a});  // handed out again
  std::this_thread::sleep_for(milliseconds(500));
  EXPECT_EQ(Slurp(marker), "run\n");
  EXPECT_EQ(agent->running(), 0);
}

TEST_F(AgentLoopTest, StaleEpochReregistersAndKillsLocalAttempts) {
  StartAgent();
  cp.SetDesired({Attempt("a1", "sleep 30")});
  ASSERT_TRUE(WaitFor([&] { return agent->running() == 1; }));
  cp.Invalidate();
  ASSERT_TRUE(WaitFor([&] { return cp.registrations() == 2; }));
  ASSERT_TRUE(WaitFor([&] { return agent->running() == 0; }, milliseconds(2000)));
  EXPECT_EQ(agent->epoch(), "e2");
  EXPECT_EQ(agent->registrations(), 2);
  // The attempt is still in the desired set; the agent does not start it again, keeps polling
  // and reporting with the new epoch.
  const size_t n = cp.ReportCount();
  ASSERT_TRUE(WaitFor([&] { return cp.ReportCount() >= n + 2; }));
  EXPECT_EQ(agent->running(), 0);
  EXPECT_EQ(cp.registrations(), 2);
}

TEST_F(AgentLoopTest, ChildEnvironmentHasGpusAndCheckpointDir) {
  StartAgent();
  const std::string cmd =
      "echo \"CVD=[${CUDA_VISIBLE_DEVICES-unset}]\"; echo \"CKPT=$AICLOUD_CHECKPOINT_DIR\"; "
      "echo \"MILLI=${AICLOUD_GPU_MILLI-unset} MEM=${AICLOUD_GPU_MEMORY_MIB-unset}\"; "
      "echo \"JOB=$AICLOUD_JOB\"";
  cp.SetDesired({Attempt("g1", cmd, json::array({{{"index", 1}, {"milli", 1000}},
                                                 {{"index", 3}, {"milli", 1000}}}),
                         "t1", "train"),
                 Attempt("c1", cmd, json::array(), "t1", "cpu"),
                 Attempt("f1", cmd, json::array({{{"index", 2}, {"milli", 500}, {"memMiB", 1024}}}),
                         "t1", "frac")});
  for (const char* id : {"g1", "c1", "f1"}) {
    ASSERT_TRUE(WaitFor([&] { return cp.LastReport(id)["state"] == "Succeeded"; })) << id;
  }
  const std::string ckpt = dir.path() + "/checkpoints/t1/train";
  EXPECT_EQ(cp.Log("g1"), "CVD=[1,3]\nCKPT=" + ckpt + "\nMILLI=unset MEM=unset\nJOB=train\n");
  EXPECT_TRUE(fs::is_directory(ckpt));
  EXPECT_EQ(cp.Log("c1"), "CVD=[]\nCKPT=" + dir.path() + "/checkpoints/t1/cpu\n"
                          "MILLI=unset MEM=unset\nJOB=cpu\n");
  EXPECT_NE(cp.Log("f1").find("MILLI=500 MEM=1024"), std::string::npos) << cp.Log("f1");
}

TEST_F(AgentLoopTest, GpuHandedToAnotherTenantIsWipedBeforeItStartsAlsoAcrossARestart) {
  testing::FakeGpus fake;
  StartAgent(GpuOptions());
  const json gpu1 = json::array({{{"index", 1}, {"milli", 1000}}});
  cp.SetDesired({Attempt("a1", "true", gpu1, "alice")});
  ASSERT_TRUE(WaitFor([&] { return cp.LastReport("a1")["state"] == "Succeeded"; }));
  // The agent restarts in between: the last tenant was persisted.
  agent.reset();
  StartAgent(GpuOptions());
  // bob's process (running as bob's sandbox uid) prints the fake device's state as it starts.
  fs::permissions(fake.dir(), fs::perms::others_read | fs::perms::others_exec, fs::perm_options::add);
  fs::permissions(fake.dir() + "/state.json", fs::perms::others_read, fs::perm_options::add);
  cp.SetDesired({Attempt("b1", "cat " + fake.dir() + "/state.json", gpu1, "bob", "jb")});
  ASSERT_TRUE(WaitFor([&] { return cp.LastReport("b1")["state"] == "Succeeded"; })) << cp.LastReport("b1").dump();
  ASSERT_TRUE(WaitFor([&] { return EventsWith("GpuMemoryWiped").size() == 1; })) << EventsWith("GpuMemoryWiped").dump();
  const json e = EventsWith("GpuMemoryWiped")[0];
  EXPECT_EQ(e["tenant"], "bob");
  EXPECT_EQ(e["job"], "jb");
  EXPECT_NE(e["message"].get<std::string>().find("before tenant bob (last used by alice)"), std::string::npos) << e.dump();
  // The memory was zeroed before bob's process started (its copy of the device state shows it).
  const int64_t wiped = FakeGpusWipeable();
  EXPECT_EQ(json::parse(cp.Log("b1"))["gpus"][1]["zeroedBytes"], wiped);
  EXPECT_NE(e["message"].get<std::string>().find("[" + std::to_string(wiped) + " bytes]"), std::string::npos);
  // bob again: no second wipe.
  cp.SetDesired({Attempt("b2", "true", gpu1, "bob", "jb")});
  ASSERT_TRUE(WaitFor([&] { return cp.LastReport("b2")["state"] == "Succeeded"; }));
  EXPECT_EQ(EventsWith("GpuMemoryWiped").size(), 1u);
}

TEST_F(AgentLoopTest, MigJobRunsOnTheInstanceTheSchedulerPlacedWhichGoesWithIt) {
  testing::FakeGpus fake;
  StartAgent(GpuOptions());
  cp.SetDesired({Attempt("m1", "echo \"CVD=$CUDA_VISIBLE_DEVICES\"; sleep 0.3",
                         json::array({{{"index", 0}, {"milli", 1000}, {"migStart", 4}, {"migProfile", "3g.40gb"}}}),
                         "alice")});
  ASSERT_TRUE(WaitFor([&] { return cp.LastReport("m1")["state"] == "Running"; }));
  json inst = fake.State()["gpus"][0]["instances"];
  ASSERT_EQ(inst.size(), 1u);
  EXPECT_EQ(inst[0]["start"], 4);
  EXPECT_EQ(inst[0]["profile"], 2);
  const std::string uuid = inst[0]["ci"][0]["uuid"];
  ASSERT_TRUE(WaitFor([&] { return cp.LastReport("m1")["state"] == "Succeeded"; }));
  EXPECT_EQ(cp.Log("m1"), "CVD=" + uuid + "\n");
  ASSERT_TRUE(WaitFor([&] { return fake.State()["gpus"][0]["instances"].empty(); }));
  ASSERT_TRUE(WaitFor([&] { return EventsWith("MigInstanceDestroyed").size() == 1; }));
  EXPECT_EQ(EventsWith("MigInstanceCreated").size(), 1u);
}

TEST_F(AgentLoopTest, GpuSetupFailureIsReportedForARequeueAndNothingRuns) {
  testing::FakeGpus fake;
  fake.Fail("nvmlDeviceCreateGpuInstanceWithPlacement", 23);  // NVML_ERROR_INSUFFICIENT_RESOURCES
  StartAgent(GpuOptions());
  const std::string marker = dir.path() + "/ran";
  cp.SetDesired({Attempt("m1", "touch " + marker,
                         json::array({{{"index", 0}, {"milli", 1000}, {"migStart", 0}, {"migProfile", "1g.10gb"}}}),
                         "alice", "jm")});
  ASSERT_TRUE(WaitFor([&] { return cp.LastReport("m1")["state"] == "Failed"; }));
  const json r = cp.LastReport("m1");
  EXPECT_EQ(r["reason"], "GpuSetupFailed") << r.dump();
  EXPECT_NE(r["message"].get<std::string>().find("Insufficient Resources"), std::string::npos) << r.dump();
  ASSERT_TRUE(WaitFor([&] { return EventsWith("GpuSetupFailed").size() == 1; }));
  EXPECT_EQ(EventsWith("GpuSetupFailed")[0]["type"], "Warning");
  EXPECT_EQ(EventsWith("GpuSetupFailed")[0]["job"], "jm");
  EXPECT_FALSE(fs::exists(marker));
}

TEST_F(AgentLoopTest, ForeignMigInstancesAreNamedAtRegistration) {
  testing::FakeGpus fake;
  fake.AddInstance(0, 5, 0, 3, 1, 1, "MIG-00000000-0000-4000-8000-0000000000f5");
  StartAgent(GpuOptions());
  std::lock_guard<std::mutex> l(cp.mu);
  ASSERT_EQ(cp.specs.size(), 1u);
  ASSERT_TRUE(cp.specs[0].contains("foreignMigInstances")) << cp.specs[0].dump();
  EXPECT_EQ(cp.specs[0]["foreignMigInstances"][0]["gpuInstance"], 5);
  EXPECT_EQ(fake.State()["gpus"][0]["instances"].size(), 1u);  // left alone
}

TEST_F(AgentLoopTest, LogResentFromServerOffsetAfterOutOfRange) {
  StartAgent();
  cp.SetDesired({Attempt("a1", "echo part1; sleep 0.6; echo part2")});
  ASSERT_TRUE(WaitFor([&] { return cp.Log("a1") == "part1\n"; }));
  {
    std::lock_guard<std::mutex> l(cp.mu);
    cp.logs["a1"].clear();  // the server lost what it had: the agent's offset is now too far
  }
  ASSERT_TRUE(WaitFor([&] { return cp.LastReport("a1")["state"] == "Succeeded"; }));
  EXPECT_EQ(cp.Log("a1"), "part1\npart2\n");
}

TEST_F(AgentLoopTest, RefusedLogIsNoLongerShipped) {
  {
    std::lock_guard<std::mutex> l(cp.mu);
    cp.refuse_logs.insert("a1");
  }
  StartAgent();
  cp.SetDesired({Attempt("a1", "echo x")});
  ASSERT_TRUE(WaitFor([&] { return cp.LastReport("a1")["state"] == "Succeeded"; }));
  EXPECT_EQ(cp.Log("a1"), "");
}

TEST(AgentAddress, IsTheSourceAddressTowardsTheServer) {
  EXPECT_EQ(AddressToReach("http://127.0.0.1:8080"), "127.0.0.1");
  EXPECT_EQ(AddressToReach("https://127.0.0.1/api"), "127.0.0.1");
  EXPECT_EQ(AddressToReach("http://localhost:8080"), "127.0.0.1") << "IPv4 first: engines listen on 0.0.0.0";
  EXPECT_EQ(AddressToReach("http://no-such-host.invalid:80"), "");
}

TEST(AgentStartTest, ServerDownFailsWithUnavailableAfterDeadline) {
  WorkDir dir;
  AgentOptions o;
  o.server_url = "http://127.0.0.1:1";  // nothing listens there
  o.token = "k";
  o.node_name = "n1";
  o.work_dir = dir.path();
  o.register_deadline = milliseconds(600);
  o.gpu_metrics = false;
  Agent agent(o);
  const auto t0 = SteadyClock::now();
  Status s = agent.Start();
  const auto took = SteadyClock::now() - t0;
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s;
  EXPECT_GE(took, milliseconds(550));
  EXPECT_LT(took, milliseconds(3000));
  EXPECT_EQ(agent.running(), 0);
}

TEST(AgentStartTest, RefusedRegistrationFailsAtOnce) {
  WorkDir dir;
  FakeControlPlane cp;
  AgentOptions o;
  o.server_url = cp.url();
  o.token = "wrong";
  o.node_name = "n1";
  o.work_dir = dir.path();
  o.gpu_metrics = false;
  Agent agent(o);
  const auto t0 = SteadyClock::now();
  Status s = agent.Start();
  EXPECT_EQ(s.code(), StatusCode::kUnauthenticated) << s;
  EXPECT_LT(SteadyClock::now() - t0, milliseconds(1000));
}

// ---- the tenant sandbox, through the agent (root: these machines run agents as root) ----------

int ExitCode(const json& report) { return report.is_null() ? -1 : report.value("exitCode", -1); }

TEST_F(AgentLoopTest, TenantsRunUnderTheirOwnUidsAndCannotReadEachOther) {
  ASSERT_EQ(::geteuid(), 0u) << "the sandbox needs a root agent";
  StartAgent();
  // Tenant A writes a checkpoint and waits; tenant B, running meanwhile, tries to read it.
  json a = Attempt("a1",
                   "id -u; echo secret > \"$AICLOUD_CHECKPOINT_DIR/model.bin\" && "
                   "echo saved; while [ ! -e \"$HOME/done\" ]; do sleep 0.02; done",
                   json::array(), "tenant-a", "train");
  cp.SetDesired({a});
  ASSERT_TRUE(WaitFor([&] { return cp.Log("a1").find("saved\n") != std::string::npos; }))
      << cp.Log("a1");
  const std::string a_ckpt = dir.path() + "/checkpoints/tenant-a/train";
  const std::string a_work = dir.path() + "/attempts/a1";
  json b = Attempt("b1",
                   "id -u; ls " + a_ckpt + " 2>&1; cat " + a_ckpt + "/model.bin 2>&1; ls " +
                       a_work + " 2>&1; ls " + dir.path() + "/logs 2>&1; echo end",
                   json::array(), "tenant-b", "steal");
  cp.SetDesired({a, b});
  ASSERT_TRUE(WaitFor([&] { return cp.LastReport("b1")["state"] == "Succeeded"; }))
      << cp.LastReport("b1");
  const std::string a_uid = cp.Log("a1").substr(0, cp.Log("a1").find('\n'));
  const std::string b_log = cp.Log("b1");
  const std::string b_uid = b_log.substr(0, b_log.find('\n'));
  EXPECT_NE(a_uid, "0");
  EXPECT_NE(b_uid, "0");
  EXPECT_NE(a_uid, b_uid);
  EXPECT_GE(std::stoul(a_uid), 200000u);
  EXPECT_GE(std::stoul(b_uid), 200000u);
  EXPECT_EQ(b_log.find("secret"), std::string::npos) << b_log;
  EXPECT_EQ(b_log, b_uid + "\nls: cannot access '" + a_ckpt + "': Permission denied\n" +
                       "cat: " + a_ckpt + "/model.bin: Permission denied\n" +
                       "ls: cannot open directory '" + a_work + "': Permission denied\n" +
                       "ls: cannot open directory '" + dir.path() + "/logs': Permission denied\n" +
                       "end\n");
  // The dirs are the tenant's, private.
  struct stat st {};
  ASSERT_EQ(::stat(a_ckpt.c_str(), &st), 0);
  EXPECT_EQ(std::to_string(st.st_uid), a_uid);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  ASSERT_EQ(::stat((dir.path() + "/checkpoints/tenant-a").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  ASSERT_EQ(::stat(a_work.c_str(), &st), 0);
  EXPECT_EQ(std::to_string(st.st_uid), a_uid);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  ASSERT_EQ(::stat((dir.path() + "/logs").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  std::ofstream(a_work + "/done") << "";
  ASSERT_TRUE(WaitFor([&] { return cp.LastReport("a1")["state"] == "Succeeded"; }));

  // A Deployment replica of tenant A runs as the uid after A's: A's own jobs cannot read its
  // environment (where its secret is) nor its working dir.
  json replica = Attempt("r1", "id -u; echo up; while [ ! -e \"$HOME/done\" ]; do sleep 0.02; done", json::array(),
                         "tenant-a", "chat-r");
  replica["env"]["AICLOUD_REPLICA_SECRET"] = "s3cret";
  cp.SetDesired({replica});
  ASSERT_TRUE(WaitFor([&] { return cp.Log("r1").find("up\n") != std::string::npos; })) << cp.Log("r1");
  const std::string r_uid = cp.Log("r1").substr(0, cp.Log("r1").find('\n'));
  EXPECT_EQ(std::stoul(r_uid), std::stoul(a_uid) + 1);
  const std::string r_work = dir.path() + "/attempts/r1";
  json peek = Attempt("a2",
                      "for p in $(pgrep -u " + r_uid + "); do echo pid; cat /proc/$p/environ 2>&1 | tr '\\0' '\\n'; done; "
                      "ls " + r_work + " 2>&1; echo end",
                      json::array(), "tenant-a", "peek");
  cp.SetDesired({replica, peek});
  ASSERT_TRUE(WaitFor([&] { return cp.LastReport("a2")["state"] == "Succeeded"; })) << cp.LastReport("a2");
  const std::string peek_log = cp.Log("a2");
  EXPECT_NE(peek_log.find("pid\n"), std::string::npos) << "no replica process seen: " << peek_log;
  EXPECT_EQ(peek_log.find("s3cret"), std::string::npos) << peek_log;
  EXPECT_NE(peek_log.find("/environ: Permission denied"), std::string::npos) << peek_log;
  EXPECT_NE(peek_log.find("ls: cannot open directory '" + r_work + "': Permission denied"), std::string::npos) << peek_log;
  std::ofstream(r_work + "/done") << "";
  ASSERT_TRUE(WaitFor([&] { return cp.LastReport("r1")["state"] == "Succeeded"; }));
}

TEST_F(AgentLoopTest, NetworkIsolationIsPerJob) {
  ASSERT_EQ(::geteuid(), 0u);
  // The host's 127.0.0.1: the fake control plane itself listens there.
  const std::string port = cp.url().substr(cp.url().rfind(':') + 1);
  const std::string cmd = "bash -c 'exec 3<>/dev/tcp/127.0.0.1/" + port + "' && echo connected";
  json open = Attempt("open", cmd);
  json isolated = Attempt("isolated", cmd);
  isolated["isolation"] = "network";
  json unknown = Attempt("unknown", cmd);
  unknown["isolation"] = "host";
  StartAgent();
  cp.SetDesired({open, isolated, unknown});
  ASSERT_TRUE(WaitFor([&] {
    return !cp.LastReport("open").is_null() && cp.LastReport("open")["state"] != "Running" &&
           !cp.LastReport("isolated").is_null() && cp.LastReport("isolated")["state"] != "Running" &&
           !cp.LastReport("unknown").is_null();
  }));
  EXPECT_EQ(ExitCode(cp.LastReport("open")), 0) << cp.Log("open");
  EXPECT_EQ(cp.Log("open"), "connected\n");
  EXPECT_EQ(ExitCode(cp.LastReport("isolated")), 1) << cp.Log("isolated");
  EXPECT_NE(cp.Log("isolated").find("Connection refused"), std::string::npos) << cp.Log("isolated");
  EXPECT_EQ(cp.LastReport("unknown")["state"], "Failed");
  EXPECT_NE(cp.LastReport("unknown")["message"].get<std::string>().find("unknown isolation \"host\""),
            std::string::npos)
      << cp.LastReport("unknown");
}

TEST_F(AgentLoopTest, AgentSecretsDoNotReachJobs) {
  ::setenv("AICLOUD_AGENT_TEST_SECRET", "s3cr3t", 1);
  StartAgent();
  cp.SetDesired({Attempt("env", "env | sort")});
  ASSERT_TRUE(WaitFor([&] { return cp.LastReport("env")["state"] == "Succeeded"; }));
  ::unsetenv("AICLOUD_AGENT_TEST_SECRET");
  const std::string log = cp.Log("env");
  EXPECT_EQ(log.find("s3cr3t"), std::string::npos) << log;
  EXPECT_NE(log.find("HOME=" + dir.path() + "/attempts/env\n"), std::string::npos) << log;
  EXPECT_NE(log.find("AICLOUD_JOB=j\n"), std::string::npos) << log;
}

TEST_F(AgentLoopTest, TheUidMapSurvivesARestart) {
  ASSERT_EQ(::geteuid(), 0u);
  StartAgent();
  cp.SetDesired({Attempt("x1", "id -u", json::array(), "zeta"),
                 Attempt("y1", "id -u", json::array(), "alpha")});
  ASSERT_TRUE(WaitFor([&] {
    return cp.LastReport("x1")["state"] == "Succeeded" && cp.LastReport("y1")["state"] == "Succeeded";
  }));
  const std::string zeta = cp.Log("x1"), alpha = cp.Log("y1");
  EXPECT_NE(zeta, alpha);
  agent.reset();
  // A new agent on the same work dir: tenants keep their uids, whatever order they come in.
  cp.SetDesired(json::array());
  StartAgent();
  cp.SetDesired({Attempt("y2", "id -u", json::array(), "alpha"),
                 Attempt("x2", "id -u", json::array(), "zeta")});
  ASSERT_TRUE(WaitFor([&] {
    return cp.LastReport("x2")["state"] == "Succeeded" && cp.LastReport("y2")["state"] == "Succeeded";
  }));
  EXPECT_EQ(cp.Log("x2"), zeta);
  EXPECT_EQ(cp.Log("y2"), alpha);
}

TEST_F(AgentLoopTest, ACorruptUidMapFailsStart) {
  ASSERT_EQ(::geteuid(), 0u);
  std::ofstream(dir.path() + "/sandbox-uids.json") << "{\"range\": \"200000-29";
  Agent a(Options());
  Status s = a.Start();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(std::string(s.message()).find("sandbox uid map " + dir.path() + "/sandbox-uids.json is corrupt"),
            std::string::npos)
      << s;
  EXPECT_EQ(cp.registrations(), 0);
}

TEST_F(AgentLoopTest, AWorkDirTheSandboxCannotReachFailsStartNamingTheDirectory) {
  ASSERT_EQ(::geteuid(), 0u);
  ::chmod(dir.path().c_str(), 0700);
  AgentOptions o = Options();
  o.work_dir = dir.path() + "/agents/n1";
  Agent a(o);
  Status s = a.Start();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(std::string(s.message()).find("sandbox: uid 200000 cannot reach " + o.work_dir +
                                          "/attempts: " + dir.path() + " is mode 0700"),
            std::string::npos)
      << s;
  // The operator's opt-out runs attempts unisolated, and says so.
  o.sandbox = false;
  Agent unisolated(o);
  ASSERT_TRUE(unisolated.Start().ok());
  EXPECT_EQ(unisolated.sandbox_status().rfind("off: disabled by the operator", 0), 0u)
      << unisolated.sandbox_status();
  EXPECT_EQ(cp.specs.back()["sandbox"], unisolated.sandbox_status());
}

TEST_F(AgentLoopTest, AUidRangeWithAnAccountInItFailsStart) {
  ASSERT_EQ(::geteuid(), 0u);
  AgentOptions o = Options();
  o.sandbox_uids = "0-99999";
  Agent a(o);
  Status s = a.Start();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_NE(std::string(s.message()).find("uid 0 (root)"), std::string::npos) << s;
}

}  // namespace
}  // namespace aicloud::agent
