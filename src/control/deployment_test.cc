#include "control/deployment.h"
#include "control/deployment_controller.h"
#include "control/job.h"
#include "control/manifest.h"
#include "control/gateway_feed.h"
#include "control/replica_secret.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <tuple>

#include "http/server.h"
#include "store/memory_store.h"

namespace aicloud::control {
namespace {

using nlohmann::json;

// The value after `flag` in a command line, "<missing>" when the flag is not there.
std::string FlagValue(const std::vector<std::string>& argv, const std::string& flag) {
  for (size_t i = 0; i + 1 < argv.size(); ++i) {
    if (argv[i] == flag) return argv[i + 1];
  }
  return "<missing>";
}

TEST(DeploymentSpec, ParsesDefaultsAndProfiles) {
  StatusOr<DeploymentSpec> d = ParseDeploymentSpec({{"model", "/m"}}, "chat");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->served_model_name, "chat");
  EXPECT_EQ(d->min_replicas, 1);
  EXPECT_EQ(d->max_replicas, 1);
  EXPECT_EQ(d->max_num_seqs, 32);  // balanced
  EXPECT_EQ(d->autoscaler, "ours");
  for (auto [profile, seqs, budget] : {std::tuple{"latency", 4, 256}, {"balanced", 32, 512}, {"throughput", 128, 2048}}) {
    d = ParseDeploymentSpec({{"model", "/m"}, {"profile", profile}}, "chat");
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(d->max_num_seqs, seqs) << profile;
    EXPECT_EQ(d->max_num_batched_tokens, budget) << profile;
  }
  d = ParseDeploymentSpec({{"model", "/m"}, {"profile", "latency"}, {"engine", {{"maxNumSeqs", 2}}}}, "chat");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->max_num_seqs, 2);  // explicit engine limits win over the profile
}

TEST(DeploymentSpec, RejectsBadSpecsNamingTheField) {
  const std::vector<std::pair<json, std::string>> cases = {
      {json::object(), "spec.model: required"},
      {{{"model", "/m"}, {"replicas", {{"min", 3}, {"max", 2}}}}, "spec.replicas.max: must be >= spec.replicas.min (3)"},
      {{{"model", "/m"}, {"replicas", {{"min", -1}}}}, "spec.replicas.min"},
      {{{"model", "/m"}, {"profile", "fast"}}, "spec.profile: \"fast\" is not latency, balanced or throughput"},
      {{{"model", "/m"}, {"autoscaler", {{"policy", "magic"}}}}, "spec.autoscaler.policy"},
      {{{"model", "/m"}, {"adapters", {{{"name", "a"}, {"path", "/a"}}, {{"name", "a"}, {"path", "/b"}}}}}, "spec.adapters[1].name: \"a\" is listed twice"},
      {{{"model", "/m"}, {"adapters", {{{"name", "a"}}}}}, "spec.adapters[0].path: required"},
      {{{"model", "/m"}, {"engine", {{"args", {"--port", "9"}}}}}, "spec.engine.args: \"--port\" is set by the platform"},
      {{{"model", "/m"}, {"engine", {{"args", {"--instance=x"}}}}}, "spec.engine.args: \"--instance=x\" is set by the platform"},
      {{{"model", "/m"}, {"engine", {{"args", {"--host=0.0.0.0"}}}}}, "spec.engine.args: \"--host=0.0.0.0\" is set by the platform"},
      {{{"model", "/m"}, {"engine", {{"args", {"--allow-runtime-lora-paths"}}}}},
       "spec.engine.args: \"--allow-runtime-lora-paths\" is set by the platform"},
      {{{"model", "/m"}, {"engine", {{"args", {"--lora", "x=/etc"}}}}}, "spec.engine.args: \"--lora\" is set by the platform"},
      {{{"model", "/m"}, {"engine", {{"dtype", "fp8"}}}}, "spec.engine.dtype"},
      {{{"model", "/m"}, {"engine", {{"prefillOrder", "sjf"}}}}, "spec.engine.prefillOrder: \"sjf\" is not fcfs or shortest-first"},
      {{{"model", "/m"}, {"engine", {{"prefillOrder", "shortest-first"}, {"maxOvertakeSeconds", 0}}}},
       "spec.engine.maxOvertakeSeconds: must be between 0.001 and 86400"},
      {{{"model", "/m"}, {"engine", {{"maxOvertakeSeconds", 30}}}},
       "spec.engine.maxOvertakeSeconds: only with prefillOrder shortest-first"},
      {{{"model", "/m"}, {"engine", {{"args", {"--prefill-order=shortest-first"}}}}}, "use spec.engine.prefillOrder"},
      {{{"model", "/m"}, {"engine", {{"prefillOrder", "shortest-first"}, {"args", {"--static-batch", "4"}}}}},
       "cannot be combined with prefillOrder shortest-first"},
      {{{"model", "/m"}, {"autoscaler", {{"capacity", {{"prefillTokensPerS", 8000}}}}}},
       "spec.autoscaler.capacity.decodeTokensPerS: required"},
      {{{"model", "/m"}, {"autoscaler", {{"capacity", {{"prefillTokensPerS", -1}, {"decodeTokensPerS", 10}}}}}},
       "spec.autoscaler.capacity.prefillTokensPerS"},
      {{{"model", "/m"}, {"autoscaler", {{"policy", "hpa"}, {"capacity", {{"prefillTokensPerS", 1}, {"decodeTokensPerS", 1}}}}}},
       "spec.autoscaler.capacity: only with policy ours"},
      {{{"model", "/m"}, {"strategy", {{"maxSurge", 0}, {"maxUnavailable", 0}}}}, "spec.strategy"},
      {{{"model", "/m"}, {"resources", {{"gpu", {{"count", 0}}}}}}, "spec.resources.gpu.count"},
      {{{"model", "/m"}, {"slo", {{"ttftP99Ms", -5}}}}, "spec.slo.ttftP99Ms"},
      {{{"model", "/m"}, {"scaleToZeroSeconds", 0}}, "spec.scaleToZeroSeconds"},
      {{{"model", "/m"}, {"strategy", {{"type", "BlueGreen"}}}}, "spec.strategy.type: \"BlueGreen\" is not RollingUpdate or Canary"},
      {{{"model", "/m"}, {"strategy", {{"canaryWeight", 10}}}}, "spec.strategy.canaryWeight: only with strategy.type Canary"},
      {{{"model", "/m"}, {"strategy", {{"type", "Canary"}, {"canaryWeight", 101}}}}, "spec.strategy.canaryWeight: must be a percentage"},
  };
  for (const auto& [spec, want] : cases) {
    StatusOr<DeploymentSpec> d = ParseDeploymentSpec(spec, "chat");
    ASSERT_FALSE(d.ok()) << spec.dump();
    EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(d.status().message()).find(want), std::string::npos)
        << spec.dump() << " -> " << d.status().message();
  }
}

TEST(DeploymentSpec, ReplicaJobRunsTheEngineAndRevisionTracksTheTemplate) {
  StatusOr<DeploymentSpec> d = ParseDeploymentSpec(
      {{"model", "/models/tiny"}, {"adapters", {{{"name", "sql"}, {"path", "/a/sql"}}}},
       {"resources", {{"cpu", "2"}}}, {"replicas", {{"min", 0}, {"max", 3}}}, {"lane", "interactive"}},
      "chat");
  ASSERT_TRUE(d.ok()) << d.status();
  const json job = ReplicaJob(*d, "acme", "chat", "chat-abc-21000", 21000, "/bin/aicloud");
  EXPECT_EQ(job["kind"], "Job");
  EXPECT_EQ(job["metadata"]["labels"][kDeploymentLabel], "chat");
  EXPECT_EQ(job["metadata"]["labels"][kPortLabel], "21000");
  EXPECT_EQ(job["metadata"]["labels"][kRevisionLabel], d->Revision());
  const auto argv = job["spec"]["command"].get<std::vector<std::string>>();
  ASSERT_GE(argv.size(), 4u);
  EXPECT_EQ(argv[0], "/bin/aicloud");
  EXPECT_EQ(argv[1], "engine");
  auto after = [&](const std::string& flag) { return FlagValue(argv, flag); };
  EXPECT_EQ(after("--model"), "/models/tiny");
  EXPECT_EQ(after("--port"), "21000");
  EXPECT_EQ(after("--lora"), "sql=/a/sql");
  EXPECT_EQ(after("--max-num-seqs"), "32");
  EXPECT_EQ(job["spec"]["restartPolicy"], "OnFailure");
  StatusOr<JobSpec> as_job = ParseJobSpec(job["spec"]);  // the job controller must accept it
  EXPECT_TRUE(as_job.ok()) << as_job.status();
  EXPECT_EQ(job["spec"]["pool"], "interactive");
  EXPECT_EQ(job["spec"]["resources"]["cpu"], "2");

  // Scaling fields do not change the revision; what a replica runs does.
  DeploymentSpec scaled = *d;
  scaled.max_replicas = 9;
  scaled.min_replicas = 2;
  EXPECT_EQ(scaled.Revision(), d->Revision());
  DeploymentSpec other = *d;
  other.threads = 4;
  EXPECT_NE(other.Revision(), d->Revision());
  EXPECT_EQ(after("--prefill-order"), "<missing>");  // the engine's default
  EXPECT_FALSE(d->Template().contains("prefillOrder")) << "an unset field must not change old revisions";

  // The prefill order reaches the engine's command line and is a new revision.
  StatusOr<DeploymentSpec> sf = ParseDeploymentSpec(
      {{"model", "/models/tiny"}, {"engine", {{"prefillOrder", "shortest-first"}, {"maxOvertakeSeconds", 20}}}}, "chat");
  ASSERT_TRUE(sf.ok()) << sf.status();
  const auto sf_argv = ReplicaJob(*sf, "acme", "chat", "chat-x", 21001, "/bin/aicloud")["spec"]["command"]
                           .get<std::vector<std::string>>();
  EXPECT_EQ(FlagValue(sf_argv, "--prefill-order"), "shortest-first");
  EXPECT_EQ(FlagValue(sf_argv, "--max-overtake"), "20");
  DeploymentSpec fcfs = *sf;
  fcfs.prefill_order = "fcfs";
  EXPECT_NE(fcfs.Revision(), sf->Revision());
}

TEST(EngineMetrics, ParsesTheGaugesTheAutoscalerReads) {
  const std::string text =
      "# HELP vllm:num_requests_running Running\n"
      "vllm:num_requests_running{model_name=\"a\"} 3\n"
      "vllm:num_requests_running{model_name=\"b\"} 2\n"
      "vllm:num_requests_running_total 99\n"
      "vllm:num_requests_waiting{model_name=\"a\"} 7\n"
      "vllm:kv_cache_usage_perc{model_name=\"a\"} 0.25\n";
  ReplicaProbe p = ParseEngineMetrics(text);
  EXPECT_EQ(p.running, 5);
  EXPECT_EQ(p.waiting, 7);
  EXPECT_DOUBLE_EQ(p.kv_usage, 0.25);
  EXPECT_EQ(p.model, "a");
  EXPECT_EQ(ParseEngineMetrics("vllm:num_requests_running{engine=\"0\",model_name=\"q\\\"x\\\\y\"} 1\n").model, "q\"x\\y");
  EXPECT_EQ(ParseEngineMetrics("vllm:num_requests_running{xmodel_name=\"no\"} 1\n").model, "");
  EXPECT_EQ(ParseEngineMetrics("vllm:num_requests_running 1\n").model, "");
}

TEST(EngineMetrics, ParsesTheCountersAndHistogramsTheControllerTurnsIntoRates) {
  const std::string text =
      "vllm:prompt_tokens_total{model_name=\"a\"} 1200\n"
      "vllm:generation_tokens_total{model_name=\"a\"} 300\n"
      "vllm:time_to_first_token_seconds_bucket{model_name=\"a\",le=\"0.5\"} 4\n"
      "vllm:time_to_first_token_seconds_bucket{model_name=\"a\",le=\"+Inf\"} 5\n"
      "vllm:inter_token_latency_seconds_bucket{model_name=\"a\",le=\"0.05\"} 290\n"
      "vllm:inter_token_latency_seconds_bucket{model_name=\"a\",le=\"+Inf\"} 295\n";
  ReplicaProbe p = ParseEngineMetrics(text);
  EXPECT_TRUE(p.metrics);
  EXPECT_EQ(p.prompt_tokens, 1200);
  EXPECT_EQ(p.generation_tokens, 300);
  EXPECT_EQ(p.ttft.count, 5);
  EXPECT_EQ(p.ttft.cumulative, (std::vector<double>{4}));
  EXPECT_EQ(p.itl.count, 295);
  // A counter that is not a finite number: the page is not a sample.
  p = ParseEngineMetrics("vllm:prompt_tokens_total{model_name=\"a\"} NaN\n");
  EXPECT_FALSE(p.metrics);
  EXPECT_EQ(p.prompt_tokens, 0);
}

// status.observed from replicas' windows: null until one has a window; a replica whose GPU
// utilization is unknown (-1) is left out of the mean, and with none known there is no field.
TEST(ObservedStatus, NullWithoutAWindowAndGpuUtilizationOnlyWhenReported) {
  DeploymentSpec spec;
  Observed none, a, b;
  a.seconds = b.seconds = 10;
  a.generation_tokens = 100;
  b.generation_tokens = 300;
  a.gpu_utilization_pct = 50;
  EXPECT_TRUE(ObservedStatus({&none}, spec).is_null());
  EXPECT_TRUE(ObservedStatus({}, spec).is_null());
  json o = ObservedStatus({&a, &b}, spec);
  EXPECT_EQ(o["generationTokensPerS"], 40);
  EXPECT_EQ(o["gpuUtilizationPct"], 50) << "b reports none";
  EXPECT_FALSE(o.contains("ttftP99Ms")) << "no first token in the window";
  a.gpu_utilization_pct = -1;
  EXPECT_FALSE(ObservedStatus({&a, &b}, spec).contains("gpuUtilizationPct"));
}

TEST(DeploymentSpec, TheSchemaTakesTheEngineOrderAndTheAutoscalersCapacity) {
  json d = {{"apiVersion", "aicloud/v1"},
            {"kind", "Deployment"},
            {"metadata", {{"name", "chat"}, {"tenant", "acme"}}},
            {"spec",
             {{"model", "/m"},
              {"engine", {{"prefillOrder", "shortest-first"}, {"maxOvertakeSeconds", 30}}},
              {"autoscaler", {{"capacity", {{"prefillTokensPerS", 8000}, {"decodeTokensPerS", 1500.5}}}}}}}};
  EXPECT_TRUE(ValidateObject(d).ok()) << ValidateObject(d);
  StatusOr<DeploymentSpec> spec = ParseDeploymentSpec(d["spec"], "chat");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->prefill_tokens_per_s, 8000);
  EXPECT_EQ(spec->decode_tokens_per_s, 1500.5);
  EXPECT_EQ(spec->max_overtake_seconds, 30);
  d["spec"]["engine"]["prefillOrder"] = 1;
  Status bad = ValidateObject(d);
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.message()).find("spec.engine.prefillOrder"), std::string::npos) << bad;
  d["spec"]["engine"].erase("prefillOrder");
  d["spec"]["autoscaler"]["capacity"]["gpus"] = 1;
  bad = ValidateObject(d);
  EXPECT_NE(std::string(bad.message()).find("spec.autoscaler.capacity.gpus: unknown field"), std::string::npos) << bad;
}

// The controller against a store, a fake clock and a fake prober: replicas are Jobs; a test
// plays the job controller and the agents by writing job status.
class DeploymentControllerTest : public ::testing::Test {
 protected:
  void SetUp() override { Restart(); }

  // A new controller over the same store, as after a restart of the server. The autoscalers'
  // clock is the fake clock (offset 0) unless said otherwise, so forecast bins do not depend on
  // when the test runs.
  void Restart(std::optional<double> autoscaler_clock_offset_s = 0.0) {
    dc_.reset();
    dc_ = std::make_unique<DeploymentController>(
        &store_, &clock_, &metrics_,
        DeploymentControllerOptions{.engine_binary = "/bin/aicloud",
                                    .replica_secrets = &secrets_,
                                    .replica_ca_pem = ca_pem_,
                                    .node_metrics = [this](const std::string& node) { return node_metrics_.value(node, json()); },
                                    .autoscaler_clock_offset_s = autoscaler_clock_offset_s},
        [this](const std::string& url, const std::string& secret) {
          if (probe_hook_) return OwnEngine(url, probe_hook_(url));
          ReplicaProbe p;
          {
            std::lock_guard<std::mutex> l(fake_mu_);  // replicas are probed on several threads at once
            ++probes_[url];
            probe_secrets_[url] = secret;
            auto it = fake_.find(url);
            if (it != fake_.end()) p = it->second;
          }
          return OwnEngine(url, std::move(p));
        });
  }

  // A healthy probe that names no instance is answered by the engine started for the replica
  // on that port (as `aicloud engine --instance <job name>` does); "-" stands for an engine that
  // names none.
  ReplicaProbe OwnEngine(const std::string& url, ReplicaProbe p) {
    if (p.instance == "-") {
      p.instance.clear();
    } else if (p.healthy && p.instance.empty()) {
      const std::string port = url.substr(url.rfind(':') + 1);
      StatusOr<store::ListResult> jobs = store_.List({.kind = "Job"});
      for (const json& j : jobs.ok() ? jobs->items : std::vector<json>{}) {
        if (j["metadata"]["labels"].value(kPortLabel, "") == port) p.instance = j["metadata"]["name"];
      }
    }
    return p;
  }

  // Every probe waits (up to 10 s) until `n` probes are in flight at once, and reports healthy
  // only if they were: probes made one after another come back unhealthy. *most = the most seen.
  void ProbesMustOverlap(int n, int* most) {
    auto state = std::make_shared<std::tuple<std::mutex, std::condition_variable, int>>();
    *most = 0;
    probe_hook_ = [state, n, most](const std::string&) {
      auto& [mu, cv, in_flight] = *state;
      std::unique_lock<std::mutex> l(mu);
      *most = std::max(*most, ++in_flight);
      cv.notify_all();
      const bool all = cv.wait_for(l, std::chrono::seconds(10), [&] { return *most >= n; });
      --in_flight;
      return ReplicaProbe{.healthy = all};
    };
  }

  void Apply(const json& spec) {
    json d = {{"apiVersion", "aicloud/v1"}, {"kind", "Deployment"},
              {"metadata", {{"name", "chat"}, {"tenant", "acme"}}}, {"spec", spec}};
    StatusOr<json> cur = store_.Get({"Deployment", "acme", "chat"});
    StatusOr<json> w = cur.ok() ? store_.Update([&] { json u = *cur; u["spec"] = spec; return u; }(), 0)
                                : store_.Create(d);
    ASSERT_TRUE(w.ok()) << w.status();
  }

  std::vector<json> Replicas() {
    std::vector<json> out;
    StatusOr<store::ListResult> l = store_.List({.kind = "Job"});
    EXPECT_TRUE(l.ok());
    for (const json& j : l->items) {
      if (j["metadata"]["labels"].value(kDeploymentLabel, "") == "chat") out.push_back(j);
    }
    return out;
  }

  // The job controller and agent: every replica job runs on node n1 and its engine answers.
  void RunAll(ReplicaProbe probe = {.healthy = true}) {
    for (json j : Replicas()) {
      if (j.value("status", json::object()).value("phase", "") != "Running") {
        j["status"] = {{"phase", "Running"},
                       {"workers", {{{"node", "n1"}, {"attempt", j["metadata"]["uid"].get<std::string>() + "-a1-w0"}}}}};
        ASSERT_TRUE(store_.Update(j, 0).ok());
      }
      fake_["http://127.0.0.1:" + j["metadata"]["labels"][kPortLabel].get<std::string>()] = probe;
    }
  }

  json Status() { return store_.Get({"Deployment", "acme", "chat"})->value("status", json::object()); }

  store::MemoryStore store_;
  FakeClock clock_{1'000'000'000};
  Metrics metrics_;
  std::mutex fake_mu_;
  std::map<std::string, ReplicaProbe> fake_;  // written by the test between turns only
  std::function<ReplicaProbe(const std::string&)> probe_hook_;  // set: answers instead of fake_
  json node_metrics_ = json::object();  // node -> its agent's last report metrics
  std::map<std::string, int> probes_;
  std::map<std::string, std::string> probe_secrets_;  // url -> the secret its last probe presented
  ReplicaSecrets secrets_{"0123456789abcdef0123456789abcdef-test-key"};
  std::string ca_pem_;  // set (then Restart): the cluster has TLS
  std::unique_ptr<DeploymentController> dc_;
};

TEST_F(DeploymentControllerTest, TheDefaultAutoscalerLeavesAnUnusedDeploymentAtZero) {
  // A min-0 deployment at zero, no requests, turn after turn; then again after a restart of the
  // server (a new controller meets it at zero).
  Apply({{"model", "/m"}, {"replicas", {{"min", 0}, {"max", 3}}}, {"scaleToZeroSeconds", 10}});
  for (int i = 0; i < 3; ++i) {
    dc_->Turn();
    ASSERT_TRUE(Replicas().empty()) << "turn " << i << ": " << Status().dump();
    clock_.Advance(1'000'000);
  }
  Restart();
  for (int i = 0; i < 30; ++i) {
    dc_->Turn();
    ASSERT_TRUE(Replicas().empty()) << "turn " << i << ": " << Status().dump();
    clock_.Advance(1'000'000);
  }
  dc_->NoteRequests("acme", "chat", 2);
  dc_->Turn();
  EXPECT_EQ(Replicas().size(), 1u);
  EXPECT_EQ(Status()["lastScale"]["reason"], "2 request(s) held at the gateway with no ready replica") << Status().dump();
}

// With the cluster's TLS, replicas are probed at https:// URLs, and the routes (and their JSON for
// the gateways) mark them so and carry the replica CA once; without it, nothing of that.
TEST_F(DeploymentControllerTest, WithTlsReplicasAreReachedOverHttpsAndRoutesCarryTheCa) {
  Apply({{"model", "/m"}, {"replicas", {{"min", 1}, {"max", 1}}}});
  dc_->Turn();
  ASSERT_EQ(Replicas().size(), 1u);
  RunAll();
  dc_->Turn();
  const std::string port = Replicas()[0]["metadata"]["labels"][kPortLabel];
  EXPECT_GT(probes_["http://127.0.0.1:" + port], 0);
  json plain = ServingRouteJson(dc_->Routes().at(0));
  EXPECT_FALSE(plain.contains("replicaCa")) << plain.dump();
  EXPECT_FALSE(plain["replicas"][0].contains("tls")) << plain.dump();

  ca_pem_ = "-----BEGIN CERTIFICATE-----\nthe replica CA\n-----END CERTIFICATE-----\n";
  Restart();
  dc_->Turn();
  EXPECT_GT(probes_["https://127.0.0.1:" + port], 0);
  std::vector<ServingRoute> routes = dc_->Routes();
  ASSERT_EQ(routes.size(), 1u);
  EXPECT_EQ(routes[0].ca_pem, ca_pem_);
  ASSERT_EQ(routes[0].endpoints.size(), 1u);
  EXPECT_EQ(routes[0].endpoints[0].url, "https://127.0.0.1:" + port);
  json j = ServingRouteJson(routes[0]);
  EXPECT_EQ(j["replicaCa"], ca_pem_);
  EXPECT_EQ(j["replicas"][0]["url"], "127.0.0.1:" + port);
  EXPECT_EQ(j["replicas"][0]["tls"], true);
  EXPECT_EQ(Status().dump().find("the replica CA"), std::string::npos);
}

// Each replica's secret is derived from its Job's identity: the probes present it, the routes the
// gateways read carry it, and neither the Job nor the Deployment's status shows it. A replaced
// replica (a new Job) gets another one.
TEST_F(DeploymentControllerTest, ReplicaSecretsReachProbesAndRoutesButNotTheStatus) {
  Apply({{"model", "/m"}, {"replicas", {{"min", 2}, {"max", 2}}}});
  dc_->Turn();
  ASSERT_EQ(Replicas().size(), 2u);
  RunAll();
  dc_->Turn();
  std::set<std::string> seen;
  for (const json& j : Replicas()) {
    const std::string url = "http://127.0.0.1:" + j["metadata"]["labels"][kPortLabel].get<std::string>();
    const std::string want = secrets_.For("acme", j["metadata"]["name"].get<std::string>(),
                                          j["status"]["workers"][0]["attempt"].get<std::string>());
    ASSERT_EQ(want.size(), 64u);
    EXPECT_EQ(probe_secrets_[url], want) << url;
    seen.insert(want);
    EXPECT_EQ(j.dump().find(want), std::string::npos) << "the Job object shows its secret";
  }
  EXPECT_EQ(seen.size(), 2u) << "two replicas share a secret";
  std::vector<ServingRoute> routes = dc_->Routes();
  ASSERT_EQ(routes.size(), 1u);
  for (const ServingEndpoint& e : routes[0].endpoints) EXPECT_EQ(seen.count(e.secret), 1u) << e.replica;
  const std::string status = Status().dump();
  for (const std::string& secret : seen) EXPECT_EQ(status.find(secret), std::string::npos) << status;

  // Deleting a replica's Job replaces it: the new Job's secret is new.
  const json gone = Replicas()[0];
  ASSERT_TRUE(store_.Delete({"Job", "acme", gone["metadata"]["name"].get<std::string>()}, 0).ok());
  dc_->Turn();
  RunAll();
  dc_->Turn();
  ASSERT_EQ(Replicas().size(), 2u);
  std::set<std::string> now;
  routes = dc_->Routes();
  ASSERT_EQ(routes.size(), 1u);
  for (const ServingEndpoint& e : routes[0].endpoints) now.insert(e.secret);
  EXPECT_EQ(now.size(), 2u);
  size_t kept = 0;
  for (const std::string& s : now) kept += seen.count(s);
  EXPECT_EQ(kept, 1u) << "the replacement reused an old secret";

  // A replica's next attempt (a restart, a move) has a new secret too.
  json moved = Replicas()[0];
  const std::string before = secrets_.For("acme", moved["metadata"]["name"].get<std::string>(),
                                          moved["status"]["workers"][0]["attempt"].get<std::string>());
  moved["status"]["workers"][0]["attempt"] = moved["metadata"]["uid"].get<std::string>() + "-a2-w0";
  ASSERT_TRUE(store_.Update(moved, 0).ok());
  dc_->Turn();
  const std::string url = "http://127.0.0.1:" + moved["metadata"]["labels"][kPortLabel].get<std::string>();
  EXPECT_NE(probe_secrets_[url], before);
  EXPECT_EQ(probe_secrets_[url],
            secrets_.For("acme", moved["metadata"]["name"].get<std::string>(), moved["status"]["workers"][0]["attempt"].get<std::string>()));
}

// The real prober has the engine prove it holds the secret before sending it, then presents it on
// /health and /metrics. A process on the port that cannot prove it (a squatter, or an engine with
// another secret) never receives the secret, and the controller learns the port is not its
// replica's.
TEST(HttpProberTest, SendsTheSecretOnlyToAnEngineThatProvesItHoldsIt) {
  struct Engine {
    std::string key;  // what the process on the port holds ("" = nothing: a squatter)
    std::mutex mu;
    std::vector<std::string> authorizations;
    std::atomic<int> metrics_ok{0};
    std::unique_ptr<http::Server> server;
    std::string url;
  };
  auto start = [](Engine* e) {
    StatusOr<std::unique_ptr<http::Server>> s = http::Server::Start({.worker_threads = 2}, [e](http::Request& r) {
      {
        std::lock_guard<std::mutex> l(e->mu);
        e->authorizations.emplace_back(r.HeaderView("authorization"));
      }
      if (r.path == "/health" && r.query.count("nonce")) {
        // A squatter answers what it can: a made-up proof.
        return http::Response::Json(200, {{"proof", e->key.empty() ? std::string(64, 'a') : ReplicaProof(e->key, r.Query("nonce"))}});
      }
      if (e->key.empty() || r.HeaderView("authorization") != "Bearer " + e->key) return http::Response::Json(401, {{"error", "no"}});
      if (r.path == "/metrics") {
        ++e->metrics_ok;
        return http::Response::Text(200, "vllm:num_requests_running{model_name=\"m\"} 3\n");
      }
      return http::Response::Json(200, {{"instance", "chat-r1"}});
    });
    ASSERT_TRUE(s.ok()) << s.status();
    e->server = std::move(*s);
    e->url = "http://127.0.0.1:" + std::to_string(e->server->port());
  };
  Engine right, other, squatter;
  right.key = "right";
  other.key = "other";
  for (Engine* e : {&right, &other, &squatter}) start(e);
  const Prober probe = HttpProber(std::chrono::milliseconds(2000));
  ReplicaProbe p = probe(right.url, "right");
  EXPECT_TRUE(p.healthy);
  EXPECT_FALSE(p.secret_refused);
  EXPECT_EQ(p.instance, "chat-r1");
  EXPECT_EQ(p.running, 3);
  EXPECT_EQ(right.metrics_ok.load(), 1);
  for (Engine* e : {&other, &squatter}) {
    p = probe(e->url, "right");
    EXPECT_FALSE(p.healthy) << e->url;
    EXPECT_TRUE(p.secret_refused) << e->url;
    std::lock_guard<std::mutex> l(e->mu);
    for (const std::string& a : e->authorizations) EXPECT_EQ(a.find("right"), std::string::npos) << "the secret was sent";
  }
  for (Engine* e : {&right, &other, &squatter}) e->server->Stop();
}

TEST(ReplicaSecretsTest, TheClusterKeyIsMadeOnceAndSharedByEveryServer) {
  store::MemoryStore store;
  StatusOr<ReplicaSecrets> first = ReplicaSecrets::Load(&store);
  ASSERT_TRUE(first.ok()) << first.status();
  StatusOr<ReplicaSecrets> second = ReplicaSecrets::Load(&store);  // another server, or a restart
  ASSERT_TRUE(second.ok()) << second.status();
  const std::string a = first->For("acme", "chat-1", "uid-1");
  EXPECT_EQ(a.size(), 64u);
  EXPECT_EQ(second->For("acme", "chat-1", "uid-1"), a);
  EXPECT_NE(first->For("acme", "chat-1", "uid-2"), a);
  EXPECT_NE(first->For("other", "chat-1", "uid-1"), a);
  EXPECT_NE(ReplicaSecrets("a-different-key-of-some-length-0123456789").For("acme", "chat-1", "uid-1"), a);
  EXPECT_EQ(ReplicaSecrets("").For("acme", "chat-1", "uid-1"), "");

  // A damaged key is an error, not a silent new key (that would lock every running replica out).
  StatusOr<json> key = store.Get({"ClusterKey", "", "replica-secrets"});
  ASSERT_TRUE(key.ok());
  (*key)["spec"]["key"] = "short";
  ASSERT_TRUE(store.Update(*key, 0).ok());
  StatusOr<ReplicaSecrets> bad = ReplicaSecrets::Load(&store);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("ClusterKey/replica-secrets: spec.key"), std::string::npos) << bad.status();
}

// One replica's engine serves 5,000 prompt and 100 generated tokens a second, 10 requests a
// second: 9 get their first token within 0.1 s, 1 within (0.1, 1] s. The autoscaler sizes from
// those rates and the Deployment's capacity (5.1 replicas of work at 70% -> 8), and
// status.observed reports the rates, the percentiles, the shares within the SLO and the
// utilization its node's agent reports for the replica's GPU.
TEST_F(DeploymentControllerTest, TheEnginesRatesAndLatenciesReachTheAutoscalerAndTheStatus) {
  Apply({{"model", "/m"}, {"replicas", {{"min", 1}, {"max", 10}}},
         {"slo", {{"ttftP99Ms", 500}, {"tpotP99Ms", 100}}},
         {"autoscaler", {{"capacity", {{"prefillTokensPerS", 1000}, {"decodeTokensPerS", 1000}}}}}});
  dc_->Turn();
  ASSERT_EQ(Replicas().size(), 1u);
  RunAll();
  const std::string url = fake_.begin()->first;  // only this replica runs: the others stay pending
  // It holds GPU 1 of n1, whose agent reports 80% there (and 10% on GPU 0).
  json job = Replicas().at(0);
  job["status"]["workers"][0]["allocation"] = {{"gpus", {{{"index", 1}, {"milli", 1000}}}}};
  ASSERT_TRUE(store_.Update(job, 0).ok());
  node_metrics_["n1"] = {{"gpus", {{{"index", 0}, {"DCGM_FI_DEV_GPU_UTIL", 10}}, {{"index", 1}, {"DCGM_FI_DEV_GPU_UTIL", 80}}}}};
  auto engine_at = [](int t) {
    ReplicaProbe p{.healthy = true, .metrics = true};
    p.prompt_tokens = 5000.0 * t;
    p.generation_tokens = 100.0 * t;
    p.ttft = {{0.1, 1}, {9.0 * t, 10.0 * t}, 10.0 * t};
    p.itl = {{0.01, 0.1}, {100.0 * t, 100.0 * t}, 100.0 * t};
    return p;
  };
  for (int t = 0; t <= 20; ++t) {
    fake_[url] = engine_at(t);
    dc_->Turn();
    clock_.Advance(1'000'000);
  }
  json st = Status();
  EXPECT_EQ(st["desiredReplicas"], 8) << st["lastScale"].dump();
  ASSERT_TRUE(st.contains("observed")) << st.dump();
  const json& o = st["observed"];
  EXPECT_EQ(o["windowS"], 15) << o.dump();  // recomputed every 15 s: the turn at t = 15
  EXPECT_EQ(o["requests"], 150);
  EXPECT_EQ(o["promptTokensPerS"], 5000);
  EXPECT_EQ(o["generationTokensPerS"], 100);
  EXPECT_NEAR(o["ttftP99Ms"].get<double>(), 910, 0.05);  // 0.1 + 0.9 x 0.9 s
  EXPECT_NEAR(o["ttftWithinSlo"].get<double>(), 0.9444, 1e-4);  // 0.9 + 0.1 x 0.4 / 0.9
  EXPECT_NEAR(o["tpotP99Ms"].get<double>(), 9.9, 0.05);
  EXPECT_EQ(o["tpotWithinSlo"], 1);
  EXPECT_EQ(o["gpuUtilizationPct"], 80);

  // A probe whose /metrics failed (healthy, nothing read) is no sample: the next good one is
  // measured against the last good one, not against zero (which read as a burst of everything
  // the engine ever served).
  fake_[url] = ReplicaProbe{.healthy = true};
  dc_->Turn();
  clock_.Advance(1'000'000);
  fake_[url] = engine_at(22);
  dc_->Turn();
  clock_.Advance(1'000'000);
  st = Status();
  EXPECT_EQ(st["desiredReplicas"], 8) << st["lastScale"].dump();

  // 200 requests arrive at the gateway within a second, before the engine has got to them (its
  // counters do not move): the autoscaler counts them as they arrive (20 a second over its 10 s
  // window), each as the 500 prompt tokens a request has taken on the engine, and scales up.
  for (int i = 0; i < 200; ++i) dc_->NoteArrival("acme", "chat");
  fake_[url] = engine_at(22);
  dc_->Turn();
  st = Status();
  EXPECT_GT(st["desiredReplicas"].get<int>(), 8) << st["lastScale"].dump();
  EXPECT_NE(st["lastScale"]["reason"].get<std::string>().find("arrivals"), std::string::npos) << st["lastScale"].dump();
  EXPECT_FALSE(st["forecast"].contains("peaks")) << "no bin has closed on a burst yet";

  // That was under twice the load of the last 160 s. 1,000 more in the next second are a burst
  // (step 1c), which enters the stored burst profile once its five-minute bin has closed.
  clock_.Advance(1'000'000);
  for (int i = 0; i < 1000; ++i) dc_->NoteArrival("acme", "chat");
  dc_->Turn();
  EXPECT_FALSE(Status()["forecast"].contains("peaks"));
  clock_.Advance(300'000'000);
  dc_->Turn();
  st = Status();
  ASSERT_TRUE(st["forecast"].contains("peaks")) << st["forecast"].dump();
  ASSERT_EQ(st["forecast"]["peaks"].size(), 288u);
  int bursts = 0;
  for (const json& v : st["forecast"]["peaks"]) bursts += v.is_number() && v.get<double>() > 1 ? 1 : 0;
  EXPECT_EQ(bursts, 1) << st["forecast"]["peaks"].dump();
}

// A replica whose workers run on two nodes: the GPU utilization is the mean over every worker's
// GPUs, each read from its own node's report; a GPU two workers share counts once, and a node
// that sent no report adds nothing.
TEST_F(DeploymentControllerTest, GpuUtilizationCoversEveryWorkersGpus) {
  Apply({{"model", "/m"}, {"replicas", {{"min", 1}, {"max", 1}}}});
  dc_->Turn();
  ASSERT_EQ(Replicas().size(), 1u);
  RunAll();
  json job = Replicas().at(0);
  job["status"]["workers"][0]["allocation"] = {{"gpus", {{{"index", 1}, {"milli", 1000}}}}};
  json second = job["status"]["workers"][0];
  second["node"] = "n2";
  second["allocation"] = {{"gpus", {{{"index", 0}, {"milli", 1000}}, {{"index", 3}, {"milli", 1000}}}}};
  job["status"]["workers"].push_back(second);
  json sharing = second;  // a fraction of n2's GPU 0, which the second worker also uses
  sharing["allocation"] = {{"gpus", {{{"index", 0}, {"milli", 500}}}}};
  job["status"]["workers"].push_back(sharing);
  json silent = second;  // on a node without a report
  silent["node"] = "n9";
  job["status"]["workers"].push_back(silent);
  ASSERT_TRUE(store_.Update(job, 0).ok());
  node_metrics_["n1"] = {{"gpus", {{{"index", 0}, {"DCGM_FI_DEV_GPU_UTIL", 10}}, {{"index", 1}, {"DCGM_FI_DEV_GPU_UTIL", 90}}}}};
  node_metrics_["n2"] = {{"gpus", {{{"index", 0}, {"DCGM_FI_DEV_GPU_UTIL", 30}}, {{"index", 3}, {"DCGM_FI_DEV_GPU_UTIL", 60}}}}};
  for (int t = 0; t <= 16; ++t) {
    RunAll({.healthy = true, .metrics = true});
    dc_->Turn();
    clock_.Advance(1'000'000);
  }
  const json st = Status();
  ASSERT_TRUE(st.contains("observed")) << st.dump();
  EXPECT_EQ(st["observed"]["gpuUtilizationPct"], 60) << st["observed"].dump();  // (90 + 30 + 60) / 3, not 53
}

TEST_F(DeploymentControllerTest, ScalesFromZeroOnARequestAndBackToZeroWhenIdle) {
  Apply({{"model", "/m"}, {"replicas", {{"min", 0}, {"max", 3}}}, {"scaleToZeroSeconds", 60},
         {"autoscaler", {{"policy", "kpa"}}}});
  dc_->Turn();
  EXPECT_TRUE(Replicas().empty()) << "min 0 starts with no replica";
  ASSERT_EQ(dc_->Routes().size(), 1u);
  EXPECT_EQ(dc_->Routes()[0].model, "chat");
  EXPECT_TRUE(dc_->Routes()[0].endpoints.empty());

  // A request is held at the gateway: one replica is created.
  dc_->NoteRequests("acme", "chat", 1);
  dc_->Turn();
  ASSERT_EQ(Replicas().size(), 1u);
  EXPECT_EQ(Status()["desiredReplicas"], 1);
  EXPECT_EQ(Status()["readyReplicas"], 0);
  EXPECT_TRUE(dc_->Routes()[0].endpoints.empty()) << "a pending replica has no endpoint";

  // It starts and answers /health: the route has a ready endpoint.
  RunAll();
  dc_->NoteRequests("acme", "chat", 0);
  clock_.Advance(2'000'000);
  dc_->Turn();
  ASSERT_EQ(dc_->Routes()[0].endpoints.size(), 1u);
  EXPECT_TRUE(dc_->Routes()[0].endpoints[0].ready);
  EXPECT_EQ(dc_->Routes()[0].endpoints[0].url, "http://127.0.0.1:21000");
  EXPECT_EQ(Status()["readyReplicas"], 1);

  // Idle less than scaleToZeroSeconds: stays.
  clock_.Advance(30'000'000);
  dc_->Turn();
  EXPECT_EQ(Replicas().size(), 1u);
  // Idle longer: scaled to zero.
  for (int i = 0; i < 20 && !Replicas().empty(); ++i) {
    clock_.Advance(5'000'000);
    dc_->Turn();
  }
  EXPECT_TRUE(Replicas().empty());
  EXPECT_EQ(Status()["desiredReplicas"], 0);
  EXPECT_NE(Status()["lastScale"]["reason"].get<std::string>().find("no requests"), std::string::npos)
      << Status().dump();
}

TEST_F(DeploymentControllerTest, GatewayActivityKeepsADeploymentFromScalingToZero) {
  Apply({{"model", "/m"}, {"replicas", {{"min", 0}, {"max", 1}}}, {"scaleToZeroSeconds", 10},
         {"autoscaler", {{"policy", "kpa"}}}});
  dc_->NoteRequests("acme", "chat", 1);
  dc_->Turn();
  RunAll();  // ready, but its metrics show nothing in flight (long requests between scrapes)
  for (int i = 0; i < 10; ++i) {
    clock_.Advance(3'000'000);
    dc_->NoteActivity("acme", "chat");  // requests keep arriving and finishing at the gateway
    dc_->Turn();
  }
  EXPECT_EQ(Replicas().size(), 1u) << Status().dump();
  for (int i = 0; i < 6; ++i) {
    clock_.Advance(3'000'000);
    dc_->Turn();
  }
  EXPECT_TRUE(Replicas().empty()) << "idle 18 s > 10 s";
}

TEST_F(DeploymentControllerTest, AReadyReplicaSurvivesTwoMissedProbes) {
  Apply({{"model", "/m"}, {"replicas", {{"min", 1}, {"max", 1}}}});
  dc_->Turn();
  RunAll({.healthy = true, .running = 3});
  dc_->Turn();
  ASSERT_TRUE(dc_->Routes()[0].endpoints.at(0).ready);
  RunAll({.healthy = false});  // a busy engine does not answer in time
  for (int i = 1; i < kProbeFailures; ++i) {
    dc_->Turn();
    EXPECT_TRUE(dc_->Routes()[0].endpoints.at(0).ready) << "missed probe " << i;
    EXPECT_EQ(Status()["readyReplicas"], 1);
  }
  dc_->Turn();
  EXPECT_FALSE(dc_->Routes()[0].endpoints.at(0).ready) << "after " << kProbeFailures << " misses";
  RunAll({.healthy = true});
  dc_->Turn();
  EXPECT_TRUE(dc_->Routes()[0].endpoints.at(0).ready);
}

TEST_F(DeploymentControllerTest, ReplicasAreProbedTogether) {
  // Each probe waits until all four are in flight at once (or gives up after 10 s and fails):
  // probed one after another, the first would give up and its replica would not be ready.
  Apply({{"model", "/m"}, {"replicas", {{"min", 4}, {"max", 4}}}});
  dc_->Turn();
  RunAll();
  int most = 0;
  ProbesMustOverlap(4, &most);
  dc_->Turn();
  EXPECT_EQ(most, 4);
  EXPECT_EQ(Status()["readyReplicas"], 4) << Status().dump();
  for (const ServingEndpoint& e : dc_->Routes().at(0).endpoints) EXPECT_TRUE(e.ready) << e.replica;
  probe_hook_ = nullptr;
}

TEST_F(DeploymentControllerTest, DeploymentsAreProbedTogether) {
  // Three deployments of one replica each: their probes must overlap too (probed deployment by
  // deployment, each would give up waiting for the others).
  for (const char* name : {"a", "b", "c"}) {
    json d = {{"apiVersion", "aicloud/v1"}, {"kind", "Deployment"},
              {"metadata", {{"name", name}, {"tenant", "acme"}}},
              {"spec", {{"model", "/m"}, {"replicas", {{"min", 1}, {"max", 1}}}}}};
    ASSERT_TRUE(store_.Create(d).ok());
  }
  dc_->Turn();
  StatusOr<store::ListResult> jobs = store_.List({.kind = "Job"});
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ(jobs->items.size(), 3u);
  for (json j : jobs->items) {  // all three run
    j["status"] = {{"phase", "Running"}, {"workers", {{{"node", "n1"}}}}};
    ASSERT_TRUE(store_.Update(j, 0).ok());
  }
  int most = 0;
  ProbesMustOverlap(3, &most);
  dc_->Turn();
  probe_hook_ = nullptr;
  EXPECT_EQ(most, 3);
  ASSERT_EQ(dc_->Routes().size(), 3u);
  for (const ServingRoute& r : dc_->Routes()) {
    ASSERT_EQ(r.endpoints.size(), 1u) << r.deployment;
    EXPECT_TRUE(r.endpoints[0].ready) << r.deployment;
  }
}

TEST_F(DeploymentControllerTest, ReplicasPassAdmissionAndARefusalIsShownAndRetried) {
  // A quota of 2 GPUs, none in use as far as the control plane knows: replicas admitted earlier
  // in the same turn must count, or all 3 would pass.
  double quota = 2;
  std::vector<double> seen_unseen;
  dc_ = std::make_unique<DeploymentController>(
      &store_, &clock_, &metrics_,
      DeploymentControllerOptions{.engine_binary = "/bin/aicloud",
                                  .admit = [&](const json& job, double unseen, std::string*) {
                                    EXPECT_EQ(job["metadata"]["tenant"], "acme");
                                    seen_unseen.push_back(unseen);
                                    return unseen + 1 <= quota
                                               ? OkStatus()
                                               : PermissionDeniedError("admission rule hard-quota of tenant acme: full");
                                  }},
      [this](const std::string& url, const std::string&) { return OwnEngine(url, fake_[url]); });
  Apply({{"model", "/m"}, {"replicas", {{"min", 3}, {"max", 3}}}, {"resources", {{"gpu", {{"count", 1}}}}}});
  dc_->Turn();
  EXPECT_EQ(Replicas().size(), 2u) << "the third would exceed the quota";
  EXPECT_EQ(seen_unseen, (std::vector<double>{0, 1, 2}));
  EXPECT_NE(Status().value("error", "").find("replica refused by admission: admission rule hard-quota"), std::string::npos)
      << Status().dump();
  quota = 100;  // freed up (the next turn starts the tally again)
  seen_unseen.clear();
  dc_->Turn();
  EXPECT_EQ(Replicas().size(), 3u);
  EXPECT_EQ(seen_unseen, std::vector<double>{0});
  EXPECT_FALSE(Status().contains("error"));
  std::set<std::string> ports;
  for (const json& j : Replicas()) ports.insert(j["metadata"]["labels"][kPortLabel].get<std::string>());
  EXPECT_EQ(ports, (std::set<std::string>{"21000", "21001", "21002"}));
}

TEST_F(DeploymentControllerTest, TheLearnedDailyProfileOutlivesARestartAndPreWarms) {
  // The fake clock's 1000 s is 07:55 UTC (bin 95 of the day's 288 five-minute bins).
  const double offset = 7 * 3600 + 55 * 60 - 1000;
  Restart(offset);
  Apply({{"model", "/m"}, {"replicas", {{"min", 1}, {"max", 1}}}, {"profile", "latency"}});  // 4 sequences a step
  // A day's 07:55-08:00 is quiet, 08:00-08:05 busy: 12 requests in flight, 3 replicas of work.
  dc_->Turn();  // the replica
  for (int t = 0; t <= 600; t += 5) {
    RunAll({.healthy = true, .running = t < 300 ? 0 : 12});
    dc_->Turn();
    clock_.Advance(5'000'000);
  }
  const json learned = Status()["forecast"];
  ASSERT_EQ(learned["learnedBins"], 2) << Status().dump();
  EXPECT_EQ(learned["periodS"], 86400);
  EXPECT_EQ(learned["binS"], 300);
  ASSERT_EQ(learned["profile"].size(), 288u);
  EXPECT_EQ(learned["profile"][95], 0);
  EXPECT_EQ(learned["profile"][96], 3) << "bins are UTC times of day";
  EXPECT_TRUE(learned["profile"][97].is_null());

  // The next day at 07:58, quiet, after a restart that allows 10 replicas: the rise two minutes
  // ahead is known only from the stored profile. Without it, one replica stays.
  Apply({{"model", "/m"}, {"replicas", {{"min", 1}, {"max", 10}}}, {"profile", "latency"}});
  clock_.Advance(86'400'000'000 - 605'000'000 + 180'000'000);
  {
    json d = *store_.Get({"Deployment", "acme", "chat"});
    d["status"].erase("forecast");
    ASSERT_TRUE(store_.Update(d, 0).ok());
  }
  Restart(offset);
  RunAll({.healthy = true, .running = 0});
  dc_->Turn();
  EXPECT_EQ(Status()["desiredReplicas"], 1) << Status()["lastScale"].dump();

  {
    json d = *store_.Get({"Deployment", "acme", "chat"});
    d["status"]["forecast"] = learned;
    ASSERT_TRUE(store_.Update(d, 0).ok());
  }
  Restart(offset);
  dc_->Turn();
  EXPECT_EQ(Status()["desiredReplicas"], 5) << Status()["lastScale"].dump();  // ceil(3 / 0.7)
  EXPECT_NE(Status()["lastScale"]["reason"].get<std::string>().find("forecast"), std::string::npos)
      << Status()["lastScale"].dump();
  EXPECT_EQ(Status()["forecast"]["profile"], learned["profile"]) << "kept through the restart";
}

TEST_F(DeploymentControllerTest, AScaleToZeroDeploymentIsPreWarmedForARiseButNotForATrickle) {
  // 07:58 UTC; the stored profile knows 08:00-08:05 (bin 96) and the quiet bin before it.
  const double offset = 7 * 3600 + 58 * 60 - 1000;
  auto with_rise = [&](double load) {
    json profile(288, nullptr);
    profile[95] = 0;
    profile[96] = load;
    json d = *store_.Get({"Deployment", "acme", "chat"});
    d["status"]["forecast"] = {{"periodS", 86400}, {"binS", 300}, {"learnedBins", 2}, {"profile", profile}};
    ASSERT_TRUE(store_.Update(d, 0).ok());
    Restart(offset);
  };
  Apply({{"model", "/m"}, {"replicas", {{"min", 0}, {"max", 10}}}, {"profile", "latency"}, {"scaleToZeroSeconds", 60}});
  // A trickle (0.05 replicas of load) learned once: the deployment stays at zero.
  with_rise(0.05);
  for (int i = 0; i < 3; ++i) {
    dc_->Turn();
    clock_.Advance(5'000'000);
  }
  EXPECT_TRUE(Replicas().empty()) << Status()["lastScale"].dump();
  // A real rise (3 replicas of load): pre-warmed from zero, and kept past scaleToZeroSeconds
  // without a request while the rise is still ahead.
  with_rise(3);
  dc_->Turn();
  EXPECT_EQ(Status()["desiredReplicas"], 5) << Status()["lastScale"].dump();  // ceil(3 / 0.7)
  EXPECT_NE(Status()["lastScale"]["reason"].get<std::string>().find("forecast"), std::string::npos);
  for (int t = 0; t < 90; t += 5) {
    RunAll({.healthy = true, .running = 0});
    clock_.Advance(5'000'000);
    dc_->Turn();
  }
  EXPECT_EQ(Status()["desiredReplicas"], 5) << "idle 90 s > scaleToZeroSeconds, but the rise is 30 s ahead: "
                                            << Status()["lastScale"].dump();
}

// 07:58 UTC; the stored burst profile has a burst of 3 replicas' need at 08:00-08:05 (bin 96),
// seen on two days (needs 3 and 3.5). With a TTFT SLO it is pre-warmed at 60%: ceil(3 / 0.6) = 5.
// Stored without the days it came on, it is not trusted; and an edit that makes a new autoscaler
// keeps it. A status the controller wrote itself comes back whole (JSON round trip).
TEST_F(DeploymentControllerTest, AStoredBurstIsPreWarmedOnceItCameOnTwoDays) {
  const double offset = 7 * 3600 + 58 * 60 - 1000;
  auto store = [&](bool with_days) {
    json profile(288, nullptr), peaks(288, nullptr), days(288, nullptr);
    profile[95] = profile[96] = 0;
    peaks[95] = 0;
    peaks[96] = 3;
    days[96] = json::array({json::array({-1, 3}), json::array({-2, 3.5})});
    json d = *store_.Get({"Deployment", "acme", "chat"});
    d["status"]["forecast"] = {{"periodS", 86400}, {"binS", 300}, {"learnedBins", 2}, {"profile", profile}, {"peaks", peaks}};
    if (with_days) d["status"]["forecast"]["burstDays"] = days;
    ASSERT_TRUE(store_.Update(d, 0).ok());
    Restart(offset);
  };
  Apply({{"model", "/m"}, {"replicas", {{"min", 1}, {"max", 10}}}, {"slo", {{"ttftP99Ms", 500}}}});
  store(/*with_days=*/false);
  dc_->Turn();
  EXPECT_EQ(Status()["desiredReplicas"], 1) << Status()["lastScale"].dump();
  store(/*with_days=*/true);
  dc_->Turn();
  EXPECT_EQ(Status()["desiredReplicas"], 5) << Status()["lastScale"].dump();
  EXPECT_NE(Status()["lastScale"]["reason"].get<std::string>().find("burst learned"), std::string::npos)
      << Status()["lastScale"].dump();
  EXPECT_EQ(Status()["forecast"]["burstDays"][96], json::parse("[[-1, 3], [-2, 3.5]]")) << "kept through the restart";

  // The stored copy lost, an edit that makes a new autoscaler keeps the bursts it had in memory.
  json d = *store_.Get({"Deployment", "acme", "chat"});
  d["status"].erase("forecast");
  ASSERT_TRUE(store_.Update(d, 0).ok());
  Apply({{"model", "/m"}, {"replicas", {{"min", 1}, {"max", 8}}}, {"slo", {{"ttftP99Ms", 500}}}});
  dc_->Turn();
  EXPECT_EQ(Status()["desiredReplicas"], 5) << Status()["lastScale"].dump();
  EXPECT_EQ(Status()["forecast"]["peaks"][96], 3) << Status()["forecast"].dump();
  EXPECT_EQ(Status()["forecast"]["burstDays"][96], json::parse("[[-1, 3], [-2, 3.5]]"));
  const json written = Status()["forecast"];
  fleet::LoadForecaster back({.period_s = 86400, .bin_s = 300});
  ASSERT_TRUE(RestoreForecast(written, &back).ok()) << written.dump();
  EXPECT_DOUBLE_EQ(back.BurstAhead(96 * 300, 0), 3);
}

TEST_F(DeploymentControllerTest, ASpecEditKeepsWhatTheAutoscalerLearnedInMemory) {
  Apply({{"model", "/m"}, {"replicas", {{"min", 1}, {"max", 1}}}, {"profile", "latency"}});
  dc_->Turn();
  for (int t = 0; t <= 600; t += 5) {
    RunAll({.healthy = true, .running = t < 300 ? 0 : 12});
    dc_->Turn();
    clock_.Advance(5'000'000);
  }
  ASSERT_EQ(Status()["forecast"]["learnedBins"], 2) << Status().dump();
  // The stored copy lags (here: lost); an edit that makes a new autoscaler takes the old one's.
  json d = *store_.Get({"Deployment", "acme", "chat"});
  d["status"].erase("forecast");
  ASSERT_TRUE(store_.Update(d, 0).ok());
  const size_t open_bin = static_cast<size_t>(clock_.NowMicros() / 1'000'000 / 300 % 288);
  Apply({{"model", "/m"}, {"replicas", {{"min", 1}, {"max", 4}}}, {"profile", "latency"}});
  dc_->Turn();
  EXPECT_EQ(Status()["forecast"]["learnedBins"], 2) << Status()["forecast"].dump();
  // The bin open at the edit keeps what it had seen before it (busy), though idle since.
  for (int t = 0; t <= 300; t += 5) {
    RunAll({.healthy = true, .running = 0});
    dc_->Turn();
    clock_.Advance(5'000'000);
  }
  const json profile = Status()["forecast"]["profile"];
  ASSERT_TRUE(profile[open_bin].is_number()) << Status()["forecast"].dump();
  // 21 busy samples (3 replicas of load) of the bin's 60 came before the edit: ~1.08. Only the
  // samples since the edit would give ~0.08.
  EXPECT_GT(profile[open_bin].get<double>(), 0.5) << "bin " << open_bin;
}

TEST(RestoreForecast, NamesTheFieldThatDoesNotFit) {
  json good = {{"periodS", 86400}, {"binS", 300}, {"learnedBins", 1}, {"profile", json(288, nullptr)}};
  good["profile"][7] = 2.5;
  fleet::LoadForecaster f({.period_s = 86400, .bin_s = 300});
  ASSERT_TRUE(RestoreForecast(good, &f).ok());
  EXPECT_DOUBLE_EQ(f.Profile(7 * 300), 2.5);
  EXPECT_EQ(f.learned_bins(), 1);
  // The burst profile comes back with it.
  json with_peaks = good;
  with_peaks["peaks"] = json(288, nullptr);
  with_peaks["peaks"][9] = 14;
  fleet::LoadForecaster p({.period_s = 86400, .bin_s = 300});
  ASSERT_TRUE(RestoreForecast(with_peaks, &p).ok());
  EXPECT_DOUBLE_EQ(p.PeakProfile(9 * 300), 14);
  EXPECT_EQ(p.learned_peak_bins(), 1);
  EXPECT_DOUBLE_EQ(p.Profile(7 * 300), 2.5);
  json odd = good;
  odd["profile"][5] = "x";
  json odd_peaks = with_peaks;
  odd_peaks["peaks"][3] = "x";
  json short_peaks = good;
  short_peaks["peaks"] = json::array({1});
  json odd_days = with_peaks;
  odd_days["burstDays"] = json(288, nullptr);
  odd_days["burstDays"][4] = json::parse("[[1, 2], [2, 3], [3, 4]]");
  json fractional_day = with_peaks;
  fractional_day["burstDays"] = json(288, nullptr);
  fractional_day["burstDays"][6] = json::parse("[[1.5, 2]]");
  json negative_need = with_peaks;
  negative_need["burstDays"] = json(288, nullptr);
  negative_need["burstDays"][7] = json::parse("[[20000, -1]]");
  json short_days = with_peaks;
  short_days["burstDays"] = json::array();
  json object_peaks = good;
  object_peaks["peaks"] = json::object();
  const std::pair<json, std::string> cases[] = {
      {odd_peaks, "status.forecast.peaks[3] is \"x\", not a number or null"},
      {short_peaks, "status.forecast.peaks has 1 values, want 288 (periodS / binS)"},
      {object_peaks, "status.forecast.peaks is {}, not an array"},
      {odd_days, "status.forecast.burstDays[4] is [[1,2],[2,3],[3,4]], not null or up to two [day, need] pairs"},
      {fractional_day, "status.forecast.burstDays[6] is [[1.5,2]], not null or up to two [day, need] pairs"},
      {negative_need, "status.forecast.burstDays[7] is [[20000,-1]], not null or up to two [day, need] pairs"},
      {short_days, "status.forecast.burstDays is an array of 0, not an array of 288 values"},
      {json("x"), "status.forecast is \"x\", not an object"},
      {{{"binS", 300}, {"profile", good["profile"]}}, "status.forecast.periodS is missing"},
      {{{"periodS", "86400"}, {"binS", 300}, {"profile", good["profile"]}}, "status.forecast.periodS is \"86400\", not a number"},
      {{{"periodS", 3600}, {"binS", 300}, {"profile", good["profile"]}},
       "status.forecast.periodS is 3600, but the autoscaler learns with 86400 (a profile of another shape)"},
      {{{"periodS", 86400}, {"binS", 60}, {"profile", good["profile"]}}, "status.forecast.binS is 60, but the autoscaler learns with 300"},
      {{{"periodS", 86400}, {"binS", 300}}, "status.forecast.profile is missing, not an array"},
      {{{"periodS", 86400}, {"binS", 300}, {"profile", json::array({1, 2})}},
       "status.forecast.profile has 2 values, want 288 (periodS / binS)"},
      {odd, "status.forecast.profile[5] is \"x\", not a number or null"},
  };
  for (const auto& [forecast, message] : cases) {
    fleet::LoadForecaster g({.period_s = 86400, .bin_s = 300});
    Status s = RestoreForecast(forecast, &g);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << forecast.dump();
    EXPECT_NE(std::string(s.message()).find(message), std::string::npos) << s.message();
    EXPECT_EQ(g.learned_bins(), 0) << "nothing restored from " << forecast.dump();
    EXPECT_EQ(g.learned_peak_bins(), 0) << "nothing restored from " << forecast.dump();
  }
}

TEST(DescribeForecast, SummarizesTheLearnedBinsAndBursts) {
  json forecast = {{"periodS", 86400}, {"binS", 300}, {"learnedBins", 3}, {"profile", json(288, nullptr)}};
  forecast["profile"][95] = 0;
  forecast["profile"][96] = 3;
  forecast["profile"][100] = 1.25;
  EXPECT_EQ(DescribeForecast(forecast),
            "Forecast: 3 of 288 bins of 300 s learned (UTC times of day)\n"
            "  busiest: 08:00 3.00, 08:20 1.25 replicas of load\n"
            "  bursts: none learned\n");
  forecast["peaks"] = json(288, nullptr);
  forecast["peaks"][96] = 4.5;
  forecast["peaks"][120] = 2;
  forecast["burstDays"] = json(288, nullptr);
  forecast["burstDays"][96] = json::parse("[[20420, 4.5], [20419, 3]]");  // 2025-11-28, 2025-11-27
  EXPECT_EQ(DescribeForecast(forecast),
            "Forecast: 3 of 288 bins of 300 s learned (UTC times of day)\n"
            "  busiest: 08:00 3.00, 08:20 1.25 replicas of load\n"
            "  burst: 08:00 4.50 replicas of need; 2025-11-28: 4.50; 2025-11-27: 3.00\n"
            "  burst: 10:00 2.00 replicas of need; days not known (trusted once it has come on two more days)\n");
  EXPECT_EQ(DescribeForecast(json::object()), "");
  EXPECT_EQ(DescribeForecast({{"periodS", 0}, {"binS", 300}, {"profile", json::array()}}), "");
  // What a hand-edited status may hold does not throw.
  EXPECT_EQ(DescribeForecast({{"periodS", "day"}, {"binS", 300}, {"profile", json::array()}}), "");
  json odd = forecast;
  odd["peaks"] = "x";
  odd["burstDays"] = json(288, json::parse("[[1e300, 1]]"));
  EXPECT_EQ(DescribeForecast(odd),
            "Forecast: 3 of 288 bins of 300 s learned (UTC times of day)\n"
            "  busiest: 08:00 3.00, 08:20 1.25 replicas of load\n"
            "  bursts: none learned\n");
  // Another period: offsets and period numbers.
  json hourly = {{"periodS", 3600}, {"binS", 60}, {"profile", json(60, nullptr)}, {"peaks", json(60, nullptr)},
                 {"burstDays", json(60, nullptr)}};
  hourly["profile"][3] = 2;
  hourly["peaks"][3] = 9;
  hourly["burstDays"][3] = json::parse("[[-1, 9]]");
  EXPECT_EQ(DescribeForecast(hourly),
            "Forecast: 1 of 60 bins of 60 s learned\n"
            "  busiest: +180s 2.00 replicas of load\n"
            "  burst: +180s 9.00 replicas of need; period -1: 9.00\n");
}

TEST_F(DeploymentControllerTest, AStoredProfileThatDoesNotFitIsIgnored) {
  Restart(0);
  Apply({{"model", "/m"}, {"replicas", {{"min", 1}, {"max", 3}}}});
  json odd(288, 0.5);
  odd[5] = "x";
  const json bad[] = {
      json("not an object"),
      {{"periodS", 3600}, {"binS", 300}, {"profile", json::array()}},
      {{"periodS", 3600}, {"binS", 300}, {"profile", json(288, 1.0)}},  // the size fits, the period not
      {{"periodS", 86400}, {"binS", 300}, {"profile", json::array({1, 2})}},
      {{"periodS", 86400}, {"binS", 300}, {"profile", "x"}},
      {{"periodS", 86400}, {"binS", 300}, {"profile", odd}},
  };
  for (const json& f : bad) {
    dc_->Turn();
    json d = *store_.Get({"Deployment", "acme", "chat"});
    d["status"]["forecast"] = f;
    ASSERT_TRUE(store_.Update(d, 0).ok());
    Restart(0);
    dc_->Turn();  // warns and learns afresh; the deployment is still served
    EXPECT_EQ(Status()["desiredReplicas"], 1) << f.dump();
    EXPECT_EQ(Status()["forecast"], f) << "kept as it was until something is learned";
    EXPECT_EQ(Replicas().size(), 1u);
  }
}

TEST_F(DeploymentControllerTest, APortAnsweredByAnotherEngineIsNotRoutedToAndNotReused) {
  Apply({{"model", "/m"}, {"replicas", {{"min", 1}, {"max", 1}}}});
  dc_->Turn();
  ASSERT_EQ(Replicas().size(), 1u);
  const std::string first = Replicas()[0]["metadata"]["name"];
  ASSERT_EQ(Replicas()[0]["metadata"]["labels"][kPortLabel], "21000");
  EXPECT_NE(Replicas()[0]["spec"]["command"].dump().find("\"--instance\",\"" + first + "\""), std::string::npos)
      << "the engine is told whose it is";
  // Another server's replica of the same model (or a process left from before) answers on 21000.
  RunAll({.healthy = true, .model = "chat", .instance = "chat-other-server-21000-0001"});
  dc_->Turn();
  ASSERT_EQ(Replicas().size(), 1u);
  const std::string second = Replicas()[0]["metadata"]["name"];
  EXPECT_NE(second, first) << "replaced";
  EXPECT_EQ(Replicas()[0]["metadata"]["labels"][kPortLabel], "21001");
  EXPECT_EQ(Status()["readyReplicas"], 0);
  const std::vector<ServingRoute> routes = dc_->Routes();
  for (const ServingEndpoint& e : routes[0].endpoints) EXPECT_FALSE(e.ready) << e.url;
  // So is a port answered by something that names no instance.
  RunAll({.healthy = true, .instance = "-"});
  dc_->Turn();
  ASSERT_EQ(Replicas().size(), 1u);
  const std::string third = Replicas()[0]["metadata"]["name"];
  EXPECT_NE(third, second);
  EXPECT_EQ(Replicas()[0]["metadata"]["labels"][kPortLabel], "21002");
  // And one whose engine refuses the replica's secret (401: an engine started with another).
  RunAll({.secret_refused = true});
  dc_->Turn();
  ASSERT_EQ(Replicas().size(), 1u);
  EXPECT_NE(Replicas()[0]["metadata"]["name"], third);
  EXPECT_EQ(Replicas()[0]["metadata"]["labels"][kPortLabel], "21003");

  // The new replica's own engine answers: ready and routed. 21000-21002 stay skipped.
  RunAll({.healthy = true, .model = "chat"});
  dc_->Turn();
  EXPECT_EQ(Status()["readyReplicas"], 1);
  ASSERT_EQ(dc_->Routes()[0].endpoints.size(), 1u);
  EXPECT_EQ(dc_->Routes()[0].endpoints[0].url, "http://127.0.0.1:21003");
  Apply({{"model", "/m"}, {"replicas", {{"min", 2}, {"max", 2}}}});
  dc_->Turn();
  std::set<std::string> ports;
  for (const json& j : Replicas()) ports.insert(j["metadata"]["labels"][kPortLabel].get<std::string>());
  EXPECT_EQ(ports, (std::set<std::string>{"21003", "21004"}));
  // Ten minutes on, the held ports are handed out again.
  RunAll({.healthy = true, .model = "chat"});
  clock_.Advance(601'000'000);
  Apply({{"model", "/m"}, {"replicas", {{"min", 3}, {"max", 3}}}});
  dc_->Turn();
  ports.clear();
  for (const json& j : Replicas()) ports.insert(j["metadata"]["labels"][kPortLabel].get<std::string>());
  EXPECT_EQ(ports, (std::set<std::string>{"21000", "21003", "21004"}));
}

TEST_F(DeploymentControllerTest, AReplicaMadeBeforeEnginesNamedTheirInstanceIsCheckedByModel) {
  // A server upgraded under running replicas: their commands have no --instance and their
  // engines answer /health with {}. They stay while their engine serves their model.
  Apply({{"model", "/m"}, {"replicas", {{"min", 1}, {"max", 1}}}});
  dc_->Turn();
  json old = Replicas().at(0);
  json command = json::array();
  for (size_t i = 0; i < old["spec"]["command"].size(); ++i) {
    if (old["spec"]["command"][i] == "--instance") ++i;  // and its value
    else command.push_back(old["spec"]["command"][i]);
  }
  old["spec"]["command"] = command;
  ASSERT_TRUE(store_.Update(old, 0).ok());
  const std::string name = old["metadata"]["name"];
  RunAll({.healthy = true, .model = "chat", .instance = "-"});
  dc_->Turn();
  ASSERT_EQ(Replicas().size(), 1u);
  EXPECT_EQ(Replicas()[0]["metadata"]["name"], name) << "kept across the upgrade";
  EXPECT_EQ(Status()["readyReplicas"], 1);
  RunAll({.healthy = true, .model = "someone-else", .instance = "-"});
  dc_->Turn();
  ASSERT_EQ(Replicas().size(), 1u);
  EXPECT_NE(Replicas()[0]["metadata"]["name"], name) << "another model's engine on its port: replaced";
}

TEST_F(DeploymentControllerTest, ABurstScalesUpWithinMax) {
  Apply({{"model", "/m"}, {"replicas", {{"min", 1}, {"max", 3}}}, {"autoscaler", {{"policy", "kpa"}}}});
  dc_->Turn();
  ASSERT_EQ(Replicas().size(), 1u);
  RunAll({.healthy = true, .running = 32, .waiting = 60});
  for (int i = 0; i < 5; ++i) {
    dc_->NoteRequests("acme", "chat", 0);
    clock_.Advance(2'000'000);
    dc_->Turn();
  }
  EXPECT_EQ(Replicas().size(), 3u) << Status().dump();
  EXPECT_EQ(Status()["desiredReplicas"], 3);
}

TEST_F(DeploymentControllerTest, RollingUpdateKeepsReadyReplicasAndReplacesOldOnes) {
  Apply({{"model", "/m"}, {"replicas", {{"min", 2}, {"max", 2}}}, {"autoscaler", {{"policy", "hpa"}}}});
  dc_->Turn();
  ASSERT_EQ(Replicas().size(), 2u);
  RunAll();
  dc_->Turn();
  const std::string old_rev = Status()["revision"];
  ASSERT_EQ(Status()["readyReplicas"], 2);

  Apply({{"model", "/m"}, {"replicas", {{"min", 2}, {"max", 2}}}, {"autoscaler", {{"policy", "hpa"}}},
         {"engine", {{"threads", 4}}}});
  dc_->Turn();
  // maxSurge 1, maxUnavailable 0: one new replica, both old ones kept (still the only ready ones).
  std::vector<json> r = Replicas();
  ASSERT_EQ(r.size(), 3u);
  int old_n = 0;
  for (const json& j : r) old_n += j["metadata"]["labels"][kRevisionLabel] == old_rev ? 1 : 0;
  EXPECT_EQ(old_n, 2);
  for (int i = 0; i < 6; ++i) {  // new replicas become ready, old ones go one at a time
    RunAll();
    clock_.Advance(1'000'000);
    dc_->Turn();
    int ready = 0;
    for (const ServingEndpoint& e : dc_->Routes()[0].endpoints) ready += e.ready ? 1 : 0;
    EXPECT_GE(ready, 2) << "a rolling update with maxUnavailable 0 never drops below 2 ready";
  }
  r = Replicas();
  ASSERT_EQ(r.size(), 2u);
  for (const json& j : r) EXPECT_NE(j["metadata"]["labels"][kRevisionLabel], old_rev);
}

TEST_F(DeploymentControllerTest, AReplicaLabelledForEvictionIsReplacedBeforeItGoes) {
  // The node autoscaler empties a node: the replica there gets a successor first (maxSurge 1,
  // maxUnavailable 0), and goes once the successor is ready; the others are left alone.
  Apply({{"model", "/m"}, {"replicas", {{"min", 2}, {"max", 2}}}, {"autoscaler", {{"policy", "hpa"}}}});
  dc_->Turn();
  RunAll();
  dc_->Turn();
  std::vector<json> r = Replicas();
  ASSERT_EQ(r.size(), 2u);
  const std::string evicted = r[0]["metadata"]["name"], kept = r[1]["metadata"]["name"];
  json marked = r[0];
  marked["metadata"]["labels"][kEvictLabel] = "true";
  ASSERT_TRUE(store_.Update(marked, 0).ok());
  dc_->Turn();
  std::set<std::string> names;
  for (const json& j : Replicas()) names.insert(j["metadata"]["name"]);
  ASSERT_EQ(names.size(), 3u) << "a successor is started, the evicted replica kept while it is not ready";
  EXPECT_TRUE(names.count(evicted) && names.count(kept));
  dc_->Turn();  // the successor is not ready yet: nothing goes
  EXPECT_EQ(Replicas().size(), 3u);
  RunAll();
  dc_->Turn();
  names.clear();
  for (const json& j : Replicas()) names.insert(j["metadata"]["name"]);
  EXPECT_EQ(names.size(), 2u);
  EXPECT_FALSE(names.count(evicted)) << "the evicted replica goes once its successor is ready";
  EXPECT_TRUE(names.count(kept));
  EXPECT_EQ(Status()["readyReplicas"], 2);

  // A move called off before the successor is ready (the label taken off): the replica stays
  // and the successor, now one too many, goes.
  r = Replicas();
  marked = r[0];
  const std::string stays = marked["metadata"]["name"];
  marked["metadata"]["labels"][kEvictLabel] = "true";
  ASSERT_TRUE(store_.Update(marked, 0).ok());
  dc_->Turn();
  ASSERT_EQ(Replicas().size(), 3u);
  marked = *store_.Get({"Job", "acme", stays});
  marked["metadata"]["labels"].erase(kEvictLabel);
  ASSERT_TRUE(store_.Update(marked, 0).ok());
  dc_->Turn();
  names.clear();
  for (const json& j : Replicas()) names.insert(j["metadata"]["name"]);
  EXPECT_EQ(names.size(), 2u);
  EXPECT_TRUE(names.count(stays)) << "the replica whose move was called off is kept";
}

TEST_F(DeploymentControllerTest, FailedReplicasAreReplacedAndDeletedDeploymentsCleanedUp) {
  Apply({{"model", "/m"}, {"replicas", {{"min", 1}, {"max", 1}}}});
  dc_->Turn();
  std::vector<json> r = Replicas();
  ASSERT_EQ(r.size(), 1u);
  json failed = r[0];
  failed["status"] = {{"phase", "Failed"}, {"reason", "BackoffLimitExceeded"}};
  ASSERT_TRUE(store_.Update(failed, 0).ok());
  dc_->Turn();
  r = Replicas();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_NE(r[0]["metadata"]["name"], failed["metadata"]["name"]);

  ASSERT_TRUE(store_.Delete({"Deployment", "acme", "chat"}, 0).ok());
  dc_->Turn();
  EXPECT_TRUE(Replicas().empty());
  EXPECT_TRUE(dc_->Routes().empty());
}

json CanarySpec(int threads, int weight, int replicas = 4) {
  return {{"model", "/m"},
          {"replicas", {{"min", replicas}, {"max", replicas}}},
          {"autoscaler", {{"policy", "hpa"}}},
          {"engine", {{"threads", threads}}},
          {"strategy", {{"type", "Canary"}, {"canaryWeight", weight}}}};
}

std::map<std::string, int> CountByRevision(const std::vector<json>& replicas) {
  std::map<std::string, int> n;
  for (const json& j : replicas) ++n[j["metadata"]["labels"][kRevisionLabel].get<std::string>()];
  return n;
}

TEST_F(DeploymentControllerTest, CanaryRunsBothRevisionsByWeightAndIsPromotedAt100) {
  Apply(CanarySpec(2, 25));
  dc_->Turn();
  RunAll();
  dc_->Turn();
  const std::string stable = Status()["revision"];
  EXPECT_EQ(Status()["stableRevision"], stable) << "the first revision is stable at once";
  EXPECT_FALSE(Status().contains("canary"));
  ASSERT_EQ(Replicas().size(), 4u);

  // A new template: 25% of 4 -> one canary replica; three stable ones stay.
  Apply(CanarySpec(4, 25));
  for (int i = 0; i < 3; ++i) {
    RunAll();
    clock_.Advance(1'000'000);
    dc_->Turn();
  }
  const std::string canary = Status()["revision"];
  ASSERT_NE(canary, stable);
  std::map<std::string, int> n = CountByRevision(Replicas());
  EXPECT_EQ(n[canary], 1);
  EXPECT_EQ(n[stable], 3);
  EXPECT_EQ(Status()["stableRevision"], stable);
  EXPECT_EQ(Status()["canary"]["weight"], 25);
  EXPECT_EQ(Status()["canary"]["readyReplicas"], 1);
  // The route tells the gateway which endpoints are the canary and its share.
  ServingRoute route = dc_->Routes()[0];
  EXPECT_EQ(route.canary_revision, canary);
  EXPECT_EQ(route.canary_weight, 25);
  int canary_endpoints = 0;
  for (const ServingEndpoint& e : route.endpoints) canary_endpoints += e.revision == canary ? 1 : 0;
  EXPECT_EQ(canary_endpoints, 1);
  // The stable revision's spec is in history (a rollback or a replacement needs it).
  ASSERT_EQ(Status()["history"].size(), 2u);
  EXPECT_EQ(Status()["history"][0]["revision"], stable);
  EXPECT_EQ(Status()["history"][0]["spec"]["engine"]["threads"], 2);

  // A stable replica fails: it is replaced by a stable one (made from the history's spec).
  std::vector<json> r = Replicas();
  for (json& j : r) {
    if (j["metadata"]["labels"][kRevisionLabel] == stable) {
      j["status"] = {{"phase", "Failed"}};
      ASSERT_TRUE(store_.Update(j, 0).ok());
      break;
    }
  }
  dc_->Turn();
  n = CountByRevision(Replicas());
  EXPECT_EQ(n[stable], 3);
  EXPECT_EQ(n[canary], 1);
  for (const json& j : Replicas()) {
    if (j["metadata"]["labels"][kRevisionLabel] != stable) continue;
    const json argv = j["spec"]["command"];
    auto it = std::find(argv.begin(), argv.end(), json("--threads"));
    ASSERT_NE(it, argv.end());
    EXPECT_EQ(*(it + 1), "2") << "stable replicas run the stable template";
  }

  // Weight 50: two and two.
  Apply(CanarySpec(4, 50));
  for (int i = 0; i < 4; ++i) {
    RunAll();
    clock_.Advance(1'000'000);
    dc_->Turn();
  }
  n = CountByRevision(Replicas());
  EXPECT_EQ(n[canary], 2);
  EXPECT_EQ(n[stable], 2);

  // Back to 25: one canary replica goes, but only once its stable replacement is ready.
  Apply(CanarySpec(4, 25));
  dc_->Turn();
  n = CountByRevision(Replicas());
  EXPECT_EQ(n[canary], 2) << "the new stable replica is not ready yet";
  EXPECT_EQ(n[stable], 3);
  RunAll();
  dc_->Turn();
  n = CountByRevision(Replicas());
  EXPECT_EQ(n[canary], 1);
  EXPECT_EQ(n[stable], 3);
  Apply(CanarySpec(4, 50));
  for (int i = 0; i < 4; ++i) {
    RunAll();
    clock_.Advance(1'000'000);
    dc_->Turn();
  }
  n = CountByRevision(Replicas());
  ASSERT_EQ(n[canary], 2);
  ASSERT_EQ(n[stable], 2);

  // Promote: weight 100 retires the stable replicas as a rolling update does (never below 4
  // ready with maxUnavailable 0), then the canary is the stable revision.
  Apply(CanarySpec(4, 100));
  for (int i = 0; i < 8; ++i) {
    RunAll();
    clock_.Advance(1'000'000);
    dc_->Turn();
    int ready = 0;
    for (const ServingEndpoint& e : dc_->Routes()[0].endpoints) ready += e.ready ? 1 : 0;
    EXPECT_GE(ready, 4);
  }
  n = CountByRevision(Replicas());
  EXPECT_EQ(n[canary], 4);
  EXPECT_EQ(n.count(stable), 0u);
  EXPECT_EQ(Status()["stableRevision"], canary);
  EXPECT_FALSE(Status().contains("canary"));
  EXPECT_TRUE(dc_->Routes()[0].canary_revision.empty());
}

TEST_F(DeploymentControllerTest, RollingBackACanaryRetiresItsReplicas) {
  Apply(CanarySpec(2, 25));
  dc_->Turn();
  RunAll();
  dc_->Turn();
  const std::string stable = Status()["revision"];
  Apply(CanarySpec(4, 25));
  for (int i = 0; i < 3; ++i) {
    RunAll();
    clock_.Advance(1'000'000);
    dc_->Turn();
  }
  const std::string canary = Status()["revision"];
  ASSERT_EQ(CountByRevision(Replicas())[canary], 1) << Status().dump();

  // What `aicloud rollout undo` writes: the stable revision's spec from history.
  Apply(Status()["history"][0]["spec"]);
  for (int i = 0; i < 4; ++i) {
    RunAll();
    clock_.Advance(1'000'000);
    dc_->Turn();
    int ready = 0;
    for (const ServingEndpoint& e : dc_->Routes()[0].endpoints) ready += e.ready ? 1 : 0;
    EXPECT_GE(ready, 4);
  }
  std::map<std::string, int> n = CountByRevision(Replicas());
  EXPECT_EQ(n[stable], 4);
  EXPECT_EQ(n.count(canary), 0u);
  EXPECT_EQ(Status()["revision"], stable);
  EXPECT_EQ(Status()["stableRevision"], stable);
  EXPECT_FALSE(Status().contains("canary"));
  // The history keeps both, the restored one last.
  ASSERT_EQ(Status()["history"].size(), 2u);
  EXPECT_EQ(Status()["history"][1]["revision"], stable);
}

TEST_F(DeploymentControllerTest, ACanaryThatRenamesTheModelRollsInstead) {
  Apply(CanarySpec(2, 25, 2));
  dc_->Turn();
  RunAll();
  dc_->Turn();
  json renamed = CanarySpec(2, 25, 2);
  renamed["servedModelName"] = "chat-v2";
  Apply(renamed);
  for (int i = 0; i < 6; ++i) {
    RunAll();
    clock_.Advance(1'000'000);
    dc_->Turn();
  }
  EXPECT_EQ(Replicas().size(), 2u);
  EXPECT_EQ(Status()["stableRevision"], Status()["revision"]);
  EXPECT_EQ(dc_->Routes()[0].model, "chat-v2");
}

TEST_F(DeploymentControllerTest, HistoryKeepsTheLastRevisionsAndTheStableOne) {
  Apply(CanarySpec(1, 0, 1));
  dc_->Turn();
  RunAll();
  dc_->Turn();
  const std::string first = Status()["revision"];
  // Weight 0: new revisions are created in history but never run; the first stays stable.
  for (int t = 2; t <= kHistoryLimit + 3; ++t) {
    Apply(CanarySpec(t, 0, 1));
    dc_->Turn();
  }
  const json h = Status()["history"];
  ASSERT_EQ(h.size(), static_cast<size_t>(kHistoryLimit));
  EXPECT_EQ(h[0]["revision"], first) << "the stable revision is never dropped";
  EXPECT_EQ(h[kHistoryLimit - 1]["spec"]["engine"]["threads"], kHistoryLimit + 3);
  EXPECT_EQ(Status()["stableRevision"], first);
  std::map<std::string, int> n = CountByRevision(Replicas());
  EXPECT_EQ(n[first], 1);
  EXPECT_EQ(Replicas().size(), 1u);
}

}  // namespace
}  // namespace aicloud::control
