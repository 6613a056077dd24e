// Black-box tests of the gateway over loopback HTTP: fake engine replicas (http::Server answering
// like `aicloud engine`), a StaticDirectory, StaticKeys and a collecting usage sink.
#include "gateway/gateway.h"
#include "http/usage_header.h"

#include <gtest/gtest.h>
#include <cstdlib>
#include <fstream>
#include <filesystem>
#include <unistd.h>

#include <atomic>
#include <map>
#include <condition_variable>
#include <set>
#include <thread>

#include "gateway/control_link.h"
#include "gateway/errors.h"
#include "http/client.h"
#include "http/sse.h"
#include "http/test_socket.h"
#include "store/memory_store.h"
#include "store/store_test_util.h"

namespace aicloud::gateway {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;

// An engine stand-in: /v1/chat/completions (unary and SSE, usage honouring max_tokens), /metrics.
struct FakeEngineOptions {
  int prompt_tokens = 5;
  int completion_tokens = 50;  // capped by max_tokens
  int stream_chunks = 3;
  milliseconds chunk_gap{0};
  milliseconds unary_delay{0};  // before a unary answer
  milliseconds stream_delay{0};       // before a stream's head (a long prefill)
  milliseconds first_event_delay{0};  // after a stream's head, before its first event
  int unary_status = 200;       // else a unary answer is this error
  std::string usage_header;     // when set, a unary answer's x-aicloud-usage value
  std::string secret;           // when set, demanded as "authorization: Bearer <secret>" (else 401)
  std::string tls_cert_file, tls_key_file;  // when set, HTTPS only
};

class FakeEngine {
 public:
  using Options = FakeEngineOptions;
  explicit FakeEngine(Options o = {}) : o_(o) {
    router_.Add("POST", "/v1/chat/completions", [this](http::Request& r) { return Chat(r); });
    router_.Add("POST", "/v1/completions", [this](http::Request& r) { return Chat(r); });
    router_.Add("GET", "/metrics", [this](http::Request&) {
      ++scrapes;
      std::lock_guard<std::mutex> lock(mu_);
      return http::Response::Text(200, metrics_);
    });
    auto s = http::Server::Start({.worker_threads = 16, .tls_cert_file = o_.tls_cert_file, .tls_key_file = o_.tls_key_file},
                                 [this](http::Request& r) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        authorizations_.insert(std::string(r.HeaderView("authorization")));
      }
      if (!o_.secret.empty() && r.HeaderView("authorization") != "Bearer " + o_.secret) {
        ++refused;
        return http::Response::Json(401, {{"error", {{"message", "no key"}}}});
      }
      return router_.Dispatch(r);
    });
    EXPECT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
  }
  std::string url() const { return "127.0.0.1:" + std::to_string(server_->port()); }
  void SetMetrics(int running, int waiting, double kv) {
    std::lock_guard<std::mutex> lock(mu_);
    metrics_ = "vllm:num_requests_running{model_name=\"m\"} " + std::to_string(running) +
               "\nvllm:num_requests_waiting{model_name=\"m\"} " + std::to_string(waiting) +
               "\nvllm:kv_cache_usage_perc{model_name=\"m\"} " + std::to_string(kv) + "\n";
  }
  json last_body() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_body_;
  }
  std::string last_raw_body() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_raw_;
  }

  std::atomic<int> requests{0};
  std::atomic<int> scrapes{0};   // /metrics answered
  std::atomic<int> refused{0};   // requests without the secret
  std::set<std::string> authorizations() {
    std::lock_guard<std::mutex> lock(mu_);
    return authorizations_;
  }
  std::atomic<int> chunks_sent{0};
  std::atomic<bool> cancelled{false};
  std::atomic<bool> unary_cancelled{false};  // a unary call's client went away during unary_delay
  std::atomic<bool> head_cancelled{false};   // a stream's client went away during stream_delay
  std::atomic<bool> first_event_cancelled{false};  // ... or during first_event_delay
  std::atomic<bool> stream_done{false};
  std::atomic<int64_t> stream_done_us{0};

  // Distinct client connections seen on the chat routes.
  int connections() {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int>(remotes_.size());
  }

 private:
  http::Response Chat(http::Request& r) {
    ++requests;
    {
      std::lock_guard<std::mutex> lock(mu_);
      remotes_.insert(r.remote);
    }
    json b = json::parse(r.body);
    {
      std::lock_guard<std::mutex> lock(mu_);
      last_body_ = b;
      last_raw_ = r.body;
    }
    const int completion = std::min<int>(o_.completion_tokens, b.value("max_tokens", 1 << 30));
    json usage = {{"prompt_tokens", o_.prompt_tokens}, {"completion_tokens", completion},
                  {"total_tokens", o_.prompt_tokens + completion}};
    if (!b.value("stream", false)) {
      // Waits out the delay unless its client (the gateway) goes away first.
      const auto until = std::chrono::steady_clock::now() + o_.unary_delay;
      while (std::chrono::steady_clock::now() < until) {
        if (r.client_gone && r.client_gone->cancelled()) {
          unary_cancelled = true;
          return http::Response::Text(200, "unread");
        }
        std::this_thread::sleep_for(milliseconds(10));
      }
      if (o_.unary_status != 200) {
        return http::Response::Json(o_.unary_status, {{"error", {{"message", "engine refuses"}, {"type", "engine"}}}});
      }
      http::Response answer = http::Response::Json(
          200, {{"id", "x"}, {"object", "chat.completion"}, {"model", b["model"]},
                {"choices", {{{"index", 0}, {"message", {{"role", "assistant"}, {"content", "hi"}}}}}},
                {"usage", usage}});
      if (!o_.usage_header.empty()) answer.headers.emplace_back(http::kUsageHeader, o_.usage_header);
      return answer;
    }
    for (const auto until = std::chrono::steady_clock::now() + o_.stream_delay; std::chrono::steady_clock::now() < until;) {
      if (r.client_gone && r.client_gone->cancelled()) {
        head_cancelled = true;
        return http::Response::Text(200, "unread");
      }
      std::this_thread::sleep_for(milliseconds(10));
    }
    const bool include_usage = b.contains("stream_options") && b["stream_options"].value("include_usage", false);
    http::Response resp;
    resp.content_type = "text/event-stream";
    resp.stream = [this, include_usage, usage](http::StreamWriter& w) {
      for (const auto until = std::chrono::steady_clock::now() + o_.first_event_delay;
           std::chrono::steady_clock::now() < until;) {
        if (w.closed()) {
          first_event_cancelled = true;
          return;
        }
        std::this_thread::sleep_for(milliseconds(10));
      }
      for (int i = 0; i < o_.stream_chunks; ++i) {
        json c = {{"object", "chat.completion.chunk"}, {"choices", {{{"index", 0}, {"delta", {{"content", "t" + std::to_string(i)}}}}}}};
        if (!w.Write("data: " + c.dump() + "\n\n")) {
          cancelled = true;
          return;
        }
        ++chunks_sent;
        if (o_.chunk_gap.count() > 0) std::this_thread::sleep_for(o_.chunk_gap);
        if (w.closed()) {
          cancelled = true;
          return;
        }
      }
      if (include_usage) w.Write("data: " + json{{"object", "chat.completion.chunk"}, {"choices", json::array()}, {"usage", usage}}.dump() + "\n\n");
      w.Write("data: [DONE]\n\n");
      stream_done_us = std::chrono::duration_cast<std::chrono::microseconds>(
                           std::chrono::steady_clock::now().time_since_epoch()).count();
      stream_done = true;
    };
    return resp;
  }

  Options o_;
  http::Router router_;
  std::mutex mu_;
  std::string metrics_;
  json last_body_;
  std::string last_raw_;  // GUARDED_BY(mu_)
  std::set<std::string> remotes_;
  std::set<std::string> authorizations_;  // every Authorization value seen (GUARDED_BY(mu_))
  std::unique_ptr<http::Server> server_;
};

class CollectingSink : public UsageSink {
 public:
  void Record(UsageRecord r) override {
    std::lock_guard<std::mutex> lock(mu_);
    records_.push_back(std::move(r));
    cv_.notify_all();
  }
  std::vector<UsageRecord> records() {
    std::lock_guard<std::mutex> lock(mu_);
    return records_;
  }
  bool WaitFor(size_t n, milliseconds t) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, t, [&] { return records_.size() >= n; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<UsageRecord> records_;
};

// A port nothing listens on.
uint16_t DeadPort() {
  auto s = http::Server::Start({}, [](http::Request&) { return http::Response::Text(200, ""); });
  uint16_t p = (*s)->port();
  (*s)->Stop();
  return p;
}

struct Harness {
  explicit Harness(GatewayOptions o = {}, store::Store* store = nullptr, Authenticator authenticate = nullptr,
                   std::function<uint64_t()> auth_epoch = nullptr) {
    o.flush_period = milliseconds(50);
    if (!authenticate) authenticate = keys.AsAuthenticator();
    auto g = Gateway::Create({.directory = &dir, .authenticate = authenticate, .auth_epoch = auth_epoch,
                              .usage = &sink, .store = store, .clock = &clock},
                             o);
    EXPECT_TRUE(g.ok()) << g.status();
    gw = std::move(*g);
    auto s = GatewayServer::Start(gw.get(), {.worker_threads = 4}, 128);
    EXPECT_TRUE(s.ok()) << s.status();
    server = std::move(*s);
    base = "http://127.0.0.1:" + std::to_string(server->port());
  }
  ~Harness() {
    server->Stop();
    gw->Stop();
  }
  void AddKey(const std::string& token, Caller c) { ASSERT_TRUE(keys.Add(token, std::move(c)).ok()); }
  static json Chat(const std::string& model, const std::string& text = "hi", int max_tokens = 50, bool stream = false) {
    json b = {{"model", model}, {"messages", {{{"role", "user"}, {"content", text}}}}, {"max_tokens", max_tokens}};
    if (stream) b["stream"] = true;
    return b;
  }
  StatusOr<http::ClientResponse> Post(const std::string& key, const json& body, http::Client* c = nullptr) {
    http::Client local(base);
    return (c ? c : &local)->Send("POST", "/v1/chat/completions", body.dump(), {{"Authorization", "Bearer " + key}});
  }

  FakeClock clock{1'000'000};
  StaticDirectory dir;
  StaticKeys keys;
  CollectingSink sink;
  std::unique_ptr<Gateway> gw;
  std::unique_ptr<GatewayServer> server;
  std::string base;
};

TEST(Gateway, OptionsThatCannotWorkAreRefused) {
  StaticDirectory dir;
  StaticKeys keys;
  GatewayOptions o;
  o.flush_period = milliseconds(0);  // the store exchanges would spin
  auto g = Gateway::Create({.directory = &dir, .authenticate = keys.AsAuthenticator()}, o);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(g.status().message().find("flush_period must be > 0"), std::string::npos) << g.status();
  o = {};
  o.max_attempts = 0;
  g = Gateway::Create({.directory = &dir, .authenticate = keys.AsAuthenticator()}, o);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("max_attempts must be >= 1"), std::string::npos) << g.status();
}

Route OneModel(std::string name, std::string tenant, std::vector<ReplicaInfo> replicas, std::vector<std::string> adapters = {}) {
  Route r;
  r.deployment = name;
  r.model = r.base_model = std::move(name);
  r.tenant = std::move(tenant);
  r.replicas = std::move(replicas);
  r.adapters = std::move(adapters);
  return r;
}

// A replica that demands its secret gets it on every call the gateway makes: unary (the fast
// path), streamed, and the /metrics scrapes; the caller's own key never reaches it. Another
// replica's secret opens nothing: each replica gets its own.
TEST(Gateway, ReplicasGetTheirSecretAndNeverTheCallersKey) {
  FakeEngine a({.secret = "secret-of-a"}), b({.secret = "secret-of-b"});
  a.SetMetrics(0, 0, 0);
  b.SetMetrics(0, 0, 0);
  GatewayOptions o;
  o.scrape_period = milliseconds(10);
  Harness h(o);
  ReplicaInfo ra{"a", a.url(), true}, rb{"b", b.url(), true};
  ra.secret = "secret-of-a";
  rb.secret = "secret-of-b";
  ASSERT_TRUE(h.dir.Upsert(OneModel("m", "t", {ra, rb})).ok());
  h.AddKey("caller-key", {.key_id = "k", .tenant = "t"});
  for (int i = 0; i < 6; ++i) {
    StatusOr<http::ClientResponse> r = h.Post("caller-key", Harness::Chat("m", "hi", 5, /*stream=*/i % 2 == 1));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->status, 200) << r->body;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while ((a.scrapes.load() == 0 || b.scrapes.load() == 0) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(5));
  }
  EXPECT_GT(a.scrapes.load(), 0);
  EXPECT_GT(b.scrapes.load(), 0);
  EXPECT_EQ(a.requests.load() + b.requests.load(), 6);
  EXPECT_EQ(a.refused.load() + b.refused.load(), 0);
  EXPECT_EQ(a.authorizations(), std::set<std::string>{"Bearer secret-of-a"});
  EXPECT_EQ(b.authorizations(), std::set<std::string>{"Bearer secret-of-b"});

  // A replica that refuses the gateway's credentials (the route has no secret for it): the
  // caller's key was fine, so the caller gets a 502 naming the replica, never a 401, unary or
  // streamed; a replica that takes them is tried next.
  FakeEngine locked({.secret = "s"});
  ASSERT_TRUE(h.dir.Upsert(OneModel("m", "t", {{"locked", locked.url(), true}})).ok());
  for (bool stream : {false, true}) {
    StatusOr<http::ClientResponse> r = h.Post("caller-key", Harness::Chat("m", "hi", 5, stream));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->status, 502) << r->body;
    EXPECT_NE(r->body.find("replica locked refused the gateway's credentials"), std::string::npos) << r->body;
  }
  // Both requests reached it and were refused (the scraper, every 10 ms, may have been refused
  // too: it also presents no secret for this replica).
  EXPECT_GE(locked.refused.load(), 2);
  EXPECT_EQ(locked.authorizations().count("Bearer caller-key"), 0u);
  ASSERT_TRUE(h.dir.Upsert(OneModel("m", "t", {{"locked", locked.url(), true}, ra})).ok());
  for (bool stream : {false, true}) {
    StatusOr<http::ClientResponse> r = h.Post("caller-key", Harness::Chat("m", "hi", 5, stream));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->status, 200) << r->body;
  }
}

// Two replica CAs, each with a leaf for 127.0.0.1, made with the openssl CLI; "" when it is missing.
std::string MakeReplicaCerts() {
  if (std::system("command -v openssl >/dev/null 2>&1") != 0) return "";
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("gw-tls-" + std::to_string(::getpid()))).string();
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/ext") << "subjectAltName=IP:127.0.0.1\n";
  const std::string ec = " -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes";
  for (const std::string ca : {"ca1", "ca2"}) {
    const std::string d = dir + "/" + ca;
    const std::string cmd = "openssl req -x509" + ec + " -keyout " + d + "-key.pem -out " + d + ".pem -days 1 -subj /CN=" + ca +
                            " && openssl req" + ec + " -keyout " + d + "-leaf-key.pem -out " + d + ".csr -subj /CN=replica" +
                            " && openssl x509 -req -in " + d + ".csr -CA " + d + ".pem -CAkey " + d + "-key.pem -CAcreateserial" +
                            " -days 1 -extfile " + dir + "/ext -out " + d + "-leaf.pem >/dev/null 2>&1";
    if (std::system(("(" + cmd + ") >/dev/null 2>&1").c_str()) != 0) return "";
  }
  return dir;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// With the cluster's TLS, replicas are called over HTTPS, verified against the replica CA: unary
// (the fast path) and streamed calls and the /metrics scrapes get through; a replica whose
// certificate another CA signed gets nothing (502, no fall back to plain HTTP).
TEST(Gateway, ForwardsToTlsReplicasAndRefusesAnotherCasCertificate) {
  const std::string dir = MakeReplicaCerts();
  ASSERT_FALSE(dir.empty()) << "the openssl CLI (scripts/setup installs it) makes the test's certificates";
  FakeEngine good({.secret = "s", .tls_cert_file = dir + "/ca1-leaf.pem", .tls_key_file = dir + "/ca1-leaf-key.pem"});
  FakeEngine foreign({.secret = "s", .tls_cert_file = dir + "/ca2-leaf.pem", .tls_key_file = dir + "/ca2-leaf-key.pem"});
  good.SetMetrics(0, 0, 0);
  StatusOr<std::shared_ptr<const http::TlsTrust>> trust = http::TlsTrust::ForCaPem(ReadFile(dir + "/ca1.pem"));
  ASSERT_TRUE(trust.ok()) << trust.status();
  GatewayOptions o;
  o.scrape_period = milliseconds(10);
  Harness h(o);
  ReplicaInfo r{"good", good.url(), true};
  r.secret = "s";
  r.tls = *trust;
  ASSERT_TRUE(h.dir.Upsert(OneModel("m", "t", {r})).ok());
  h.AddKey("caller-key", {.key_id = "k", .tenant = "t"});
  for (int i = 0; i < 4; ++i) {
    StatusOr<http::ClientResponse> res = h.Post("caller-key", Harness::Chat("m", "hi", 5, /*stream=*/i % 2 == 1));
    ASSERT_TRUE(res.ok()) << res.status();
    EXPECT_EQ(res->status, 200) << res->body;
    if (i % 2 == 1) {
      EXPECT_NE(res->body.find("data: [DONE]"), std::string::npos) << res->body;
    }
  }
  EXPECT_EQ(good.requests.load(), 4);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (good.scrapes.load() == 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(milliseconds(5));
  EXPECT_GT(good.scrapes.load(), 0);

  ReplicaInfo f{"foreign", foreign.url(), true};
  f.secret = "s";
  f.tls = *trust;
  ASSERT_TRUE(h.dir.Upsert(OneModel("m", "t", {f})).ok());
  for (bool stream : {false, true}) {
    StatusOr<http::ClientResponse> res = h.Post("caller-key", Harness::Chat("m", "hi", 5, stream));
    ASSERT_TRUE(res.ok()) << res.status();
    EXPECT_EQ(res->status, 502) << res->body;
  }
  EXPECT_EQ(foreign.requests.load(), 0);
  EXPECT_EQ(foreign.scrapes.load(), 0);

  // The serving state carries the CA once per route; its https replicas share one trust, the
  // one an equal PEM gives (so the connection pools survive a rebuilt route).
  const json route = {{"deployment", "t/m"}, {"tenant", "t"}, {"model", "m"}, {"replicaCa", ReadFile(dir + "/ca1.pem")},
                      {"replicas", {{{"id", "a"}, {"url", good.url()}, {"ready", true}, {"tls", true}},
                                    {{"id", "b"}, {"url", "127.0.0.1:1"}, {"ready", true}}}}};
  StatusOr<Route> parsed = RouteFromJson(route);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->replicas[0].tls, *trust);
  EXPECT_EQ(parsed->replicas[1].tls, nullptr);
  json no_ca = route;
  no_ca.erase("replicaCa");
  EXPECT_EQ(RouteFromJson(no_ca).status().code(), StatusCode::kInvalidArgument);
  json bad_ca = route;
  bad_ca["replicaCa"] = "not a certificate";
  EXPECT_EQ(RouteFromJson(bad_ca).status().code(), StatusCode::kInvalidArgument);
  std::filesystem::remove_all(dir);
}

// An authenticator that says OK but names no caller is a fault of the authenticator: 503, and
// nothing reaches the upstream.
TEST(Gateway, AnAuthenticatorThatNamesNoCallerGets503) {
  FakeEngine e;
  Harness h({}, nullptr, [](std::string_view) -> StatusOr<CallerRef> { return CallerRef(); });
  ASSERT_TRUE(h.dir.Upsert(OneModel("m", "t", {{"r", e.url(), true}})).ok());
  StatusOr<http::ClientResponse> r = h.Post("k", Harness::Chat("m"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 503) << r->body;
  EXPECT_NE(r->body.find("auth_unavailable"), std::string::npos) << r->body;
  StatusOr<http::ClientResponse> models =
      http::Client(h.base).Send("GET", "/v1/models", "", {{"Authorization", "Bearer k"}});
  ASSERT_TRUE(models.ok()) << models.status();
  EXPECT_EQ(models->status, 503) << models->body;
  EXPECT_EQ(e.requests.load(), 0);
}

// A model's per-request series appear once a request of it is admitted: a refusal counts under
// its own code and creates no 200 series.
TEST(Gateway, RefusalsCountUnderTheirCodeAndMakeNoSuccessSeries) {
  FakeEngine e;
  Harness h;
  ASSERT_TRUE(h.dir.Upsert(OneModel("m", "t", {{"r", e.url(), true}})).ok());
  h.AddKey("other", {.key_id = "other", .tenant = "u"});
  h.AddKey("k", {.key_id = "k", .tenant = "t"});
  ASSERT_EQ(h.Post("other", Harness::Chat("m"))->status, 403);
  ASSERT_EQ(h.Post("nobody", Harness::Chat("m"))->status, 401);
  std::string text = h.gw->metrics().Render();
  EXPECT_NE(text.find("aicloud_gateway_requests_total{model=\"m\",code=\"403\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("aicloud_gateway_requests_total{model=\"unknown\",code=\"401\"} 1\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("code=\"200\""), std::string::npos) << text;
  EXPECT_EQ(text.find("aicloud_gateway_tokens_total{"), std::string::npos) << text;
  ASSERT_EQ(h.Post("k", Harness::Chat("m"))->status, 200);
  ASSERT_EQ(h.Post("k", Harness::Chat("m"))->status, 200);
  ASSERT_TRUE(h.sink.WaitFor(4, milliseconds(2000)));  // answers go before their metrics and record
  text = h.gw->metrics().Render();
  EXPECT_NE(text.find("aicloud_gateway_requests_total{model=\"m\",code=\"200\"} 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("aicloud_gateway_request_duration_seconds_count{model=\"m\"} 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("aicloud_gateway_tokens_total{model=\"m\",type=\"prompt\"}"), std::string::npos) << text;
}

void ExpectOpenAiError(const StatusOr<http::ClientResponse>& r, int status, const std::string& type,
                       const std::string& message_part) {
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, status) << r->body;
  json j = json::parse(r->body, nullptr, false);
  ASSERT_TRUE(j.is_object() && j.contains("error")) << r->body;
  EXPECT_EQ(j["error"]["type"], type) << r->body;
  EXPECT_TRUE(j["error"].contains("param") && j["error"].contains("code")) << r->body;
  EXPECT_NE(j["error"]["message"].get<std::string>().find(message_part), std::string::npos) << r->body;
}

// ---- routing -------------------------------------------------------------------------------

struct RoutingCase {
  std::string policy;
  // per replica: running, waiting, kv
  std::vector<std::tuple<int, int, double>> metrics;
  std::string prompt;
  int requests;
  std::vector<std::string> want;  // replica ids in order
};

class RoutingTest : public ::testing::TestWithParam<RoutingCase> {};

TEST_P(RoutingTest, PicksPerPolicy) {
  const RoutingCase& c = GetParam();
  std::vector<std::unique_ptr<FakeEngine>> engines;
  std::vector<ReplicaInfo> reps;
  for (size_t i = 0; i < c.metrics.size(); ++i) {
    engines.push_back(std::make_unique<FakeEngine>());
    auto [run, wait, kv] = c.metrics[i];
    engines.back()->SetMetrics(run, wait, kv);
    reps.push_back({"r" + std::to_string(i), engines.back()->url(), true});
  }
  GatewayOptions o;
  o.policy = c.policy;
  o.scrape_period = milliseconds(20);
  Harness h(o);
  ASSERT_TRUE(h.dir.Upsert(OneModel("m", "t", reps)).ok());
  h.AddKey("k", {.key_id = "k", .tenant = "t"});
  std::this_thread::sleep_for(milliseconds(150));  // a few scrapes
  std::vector<std::string> got;
  for (int i = 0; i < c.requests; ++i) {
    auto r = h.Post("k", Harness::Chat("m", c.prompt));
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->status, 200) << r->body;
    got.push_back(r->headers["x-aicloud-replica"]);
  }
  EXPECT_EQ(got, c.want);
}

const std::string kLongPrompt(1200, 'p');

INSTANTIATE_TEST_SUITE_P(
    Policies, RoutingTest,
    ::testing::Values(
        RoutingCase{"round-robin", {{0, 0, 0}, {0, 0, 0}, {0, 0, 0}}, "hi", 6, {"r0", "r1", "r2", "r0", "r1", "r2"}},
        // least-request: fewest running + waiting from the scraped metrics.
        RoutingCase{"least-request", {{10, 2, 0.1}, {1, 0, 0.1}, {5, 0, 0.1}}, "hi", 3, {"r1", "r1", "r1"}},
        // score: r0 is saturated (KV >= 0.8), r1 has a queue; r2 wins on queue and KV.
        RoutingCase{"score", {{1, 0, 0.9}, {1, 3, 0.5}, {1, 0, 0.1}}, "hi", 3, {"r2", "r2", "r2"}},
        // score with equal load: the prompt's prefix sticks to the replica that served it first.
        RoutingCase{"score", {{0, 0, 0}, {0, 0, 0}, {0, 0, 0}}, kLongPrompt, 4, {"r0", "r0", "r0", "r0"}},
        RoutingCase{"prefix", {{0, 0, 0}, {0, 0, 0}, {0, 0, 0}}, kLongPrompt, 3, {"r0", "r0", "r0"}}),
    [](const auto& p) {
      std::string n = p.param.policy + "_" + std::to_string(p.index);
      for (char& ch : n) if (ch == '-') ch = '_';
      return n;
    });

TEST(Gateway, ScoreSpreadsTiesWithoutMetrics) {
  FakeEngine a, b;
  GatewayOptions o;
  o.scrape_period = milliseconds(0);
  Harness h(o);
  ASSERT_TRUE(h.dir.Upsert(OneModel("m", "t", {{"a", a.url(), true}, {"b", b.url(), true}})).ok());
  h.AddKey("k", {.key_id = "k", .tenant = "t"});
  for (int i = 0; i < 6; ++i) ASSERT_EQ(h.Post("k", Harness::Chat("m"))->status, 200);
  EXPECT_EQ(a.requests.load(), 3);
  EXPECT_EQ(b.requests.load(), 3);
}

TEST(Gateway, CanaryWeightSplitsRequestsExactly) {
  FakeEngine s1, s2, c1;
  Harness h;
  Route r = OneModel("m", "t", {{"s1", s1.url(), true}, {"s2", s2.url(), true}, {"c1", c1.url(), true, /*canary=*/true}});
  r.canary_weight = 25;
  ASSERT_TRUE(h.dir.Upsert(r).ok());
  h.AddKey("k", {.key_id = "k", .tenant = "t"});
  http::Client client(h.base);
  std::map<std::string, int> got;
  for (int i = 0; i < 40; ++i) {
    auto resp = h.Post("k", Harness::Chat("m"), &client);
    ASSERT_TRUE(resp.ok()) << resp.status();
    ASSERT_EQ(resp->status, 200) << resp->body;
    ++got[resp->headers["x-aicloud-replica"]];
  }
  EXPECT_EQ(h.dir.Activity(), 80) << "each request notes activity when admitted and when settled";
  EXPECT_EQ(got["c1"], 10) << "25% of 40 to the canary";
  EXPECT_EQ(got["s1"] + got["s2"], 30);
  EXPECT_GT(got["s1"], 0);
  EXPECT_GT(got["s2"], 0);

  // Weight 0: none to the canary; the canary not ready: its share goes to the stable side.
  r.canary_weight = 0;
  ASSERT_TRUE(h.dir.Upsert(r).ok());
  for (int i = 0; i < 8; ++i) ASSERT_EQ(h.Post("k", Harness::Chat("m"), &client)->headers["x-aicloud-replica"].substr(0, 1), "s");
  r.canary_weight = 100;
  r.replicas[2].ready = false;
  ASSERT_TRUE(h.dir.Upsert(r).ok());
  for (int i = 0; i < 4; ++i) {
    auto resp = h.Post("k", Harness::Chat("m"), &client);
    ASSERT_TRUE(resp.ok());
    EXPECT_EQ(resp->status, 200);
    EXPECT_EQ(resp->headers["x-aicloud-replica"].substr(0, 1), "s");
  }
}

TEST(Gateway, RetriesAnotherReplicaWhenOneIsDead) {
  FakeEngine live;
  GatewayOptions o;
  o.policy = "round-robin";
  o.scrape_period = milliseconds(0);
  Harness h(o);
  const std::string dead = "127.0.0.1:" + std::to_string(DeadPort());
  ASSERT_TRUE(h.dir.Upsert(OneModel("m", "t", {{"dead", dead, true}, {"live", live.url(), true}})).ok());
  h.AddKey("k", {.key_id = "k", .tenant = "t"});
  for (int i = 0; i < 4; ++i) {
    auto r = h.Post("k", Harness::Chat("m"));
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(r->headers["x-aicloud-replica"], "live");
    if (i == 0) {
      EXPECT_EQ(live.last_raw_body(), Harness::Chat("m").dump());  // the retry carried the whole body
    }
  }
  EXPECT_EQ(live.requests.load(), 4);
  ASSERT_TRUE(h.sink.WaitFor(4, milliseconds(2000)));  // records follow the answers
  std::vector<UsageRecord> recs = h.sink.records();
  ASSERT_EQ(recs.size(), 4u);
  EXPECT_EQ(recs[0].attempts, 2);  // tried the dead one first, then ejected it
  EXPECT_EQ(recs[1].attempts, 1);
  EXPECT_GE(h.gw->metrics().Render().find("aicloud_gateway_upstream_retries_total{deployment=\"m\"} 1"), 0u);

  // Every replica dead: 502 in OpenAI's shape, naming the failure.
  ASSERT_TRUE(h.dir.Upsert(OneModel("m", "t", {{"dead", dead, true}})).ok());
  ExpectOpenAiError(h.Post("k", Harness::Chat("m")), 502, "api_error", "deployment m");
}

// ---- keys and RBAC --------------------------------------------------------------------------

TEST(Gateway, AuthenticationAndModelRbac) {
  FakeEngine a, b;
  Harness h;
  ASSERT_TRUE(h.dir.Upsert(OneModel("model-a", "ta", {{"r", a.url(), true}}, {"lora-a1", "lora-a2"})).ok());
  ASSERT_TRUE(h.dir.Upsert(OneModel("model-b", "tb", {{"r", b.url(), true}})).ok());
  h.AddKey("key-a", {.key_id = "ka", .tenant = "ta"});
  h.AddKey("key-b", {.key_id = "kb", .tenant = "tb"});
  h.AddKey("key-b-granted", {.key_id = "kbg", .tenant = "tb", .models = {"model-a"}});
  h.AddKey("key-b-adapter", {.key_id = "kba", .tenant = "tb", .models = {"lora-a2"}});

  ExpectOpenAiError(h.Post("nope", Harness::Chat("model-a")), 401, "authentication_error", "invalid API key");
  http::Client c(h.base);
  ExpectOpenAiError(c.Send("POST", "/v1/chat/completions", Harness::Chat("model-a").dump()), 401,
                    "authentication_error", "missing API key");
  ExpectOpenAiError(h.Post("key-b", Harness::Chat("model-a")), 403, "permission_denied_error", "may not use model `model-a`");
  ExpectOpenAiError(h.Post("key-b", Harness::Chat("lora-a1")), 403, "permission_denied_error", "lora-a1");
  ExpectOpenAiError(h.Post("key-a", Harness::Chat("no-such-model")), 404, "not_found_error", "`no-such-model` does not exist");
  ExpectOpenAiError(h.Post("key-a", json{{"model", "model-a"}}), 400, "invalid_request_error", "messages");
  EXPECT_EQ(a.requests.load(), 0);

  EXPECT_EQ(h.Post("key-a", Harness::Chat("model-a"))->status, 200);
  EXPECT_EQ(h.Post("key-a", Harness::Chat("lora-a1"))->status, 200);   // own tenant's adapter
  EXPECT_EQ(a.last_body()["model"], "lora-a1");                         // adapters go upstream by name
  EXPECT_EQ(h.Post("key-b-granted", Harness::Chat("lora-a2"))->status, 200);  // inherits the base's grant
  EXPECT_EQ(h.Post("key-b-adapter", Harness::Chat("lora-a2"))->status, 200);
  ExpectOpenAiError(h.Post("key-b-adapter", Harness::Chat("model-a")), 403, "permission_denied_error", "model-a");

  auto models = [&](const std::string& key) {
    std::vector<std::string> ids;
    auto r = c.Send("GET", "/v1/models", "", {{"Authorization", "Bearer " + key}});
    EXPECT_EQ(r->status, 200) << r->body;
    const json list = json::parse(r->body);
    for (const json& m : list["data"]) ids.push_back(m["id"]);
    if (ids.empty()) ADD_FAILURE() << r->body;
    return ids;
  };
  EXPECT_EQ(models("key-a"), (std::vector<std::string>{"model-a", "lora-a1", "lora-a2"}));
  EXPECT_EQ(models("key-b"), (std::vector<std::string>{"model-b"}));
  EXPECT_EQ(models("key-b-granted"), (std::vector<std::string>{"model-a", "lora-a1", "lora-a2", "model-b"}));
  EXPECT_EQ(models("key-b-adapter"), (std::vector<std::string>{"lora-a2", "model-b"}));
  EXPECT_EQ(c.Send("GET", "/v1/models", "", {{"Authorization", "Bearer bad"}})->status, 401);
}

// StaticKeys whose checks are counted: how often the gateway authenticated.
struct CountedKeys {
  CountedKeys() { EXPECT_TRUE(keys.Add("key-a", {.key_id = "ka", .tenant = "ta"}).ok()); }
  Authenticator Counted() {
    return [this](std::string_view authorization) {
      ++checks;
      return keys.Authenticate(authorization);
    };
  }
  StaticKeys keys;
  std::atomic<int> checks{0};
};

TEST(Gateway, AKeptAliveConnectionReusesItsCallerForTheSameKeyWhileTheEpochHolds) {
  FakeEngine a;
  CountedKeys counted;
  StaticKeys& keys = counted.keys;
  std::atomic<int>& checks = counted.checks;
  ASSERT_TRUE(keys.Add("key-b", {.key_id = "kb", .tenant = "tb"}).ok());
  Harness h({}, nullptr, counted.Counted(), keys.AsEpoch());
  ASSERT_TRUE(h.dir.Upsert(OneModel("model-a", "ta", {{"r", a.url(), true}})).ok());

  http::Client c(h.base);  // one kept-alive connection
  EXPECT_EQ(h.Post("key-a", Harness::Chat("model-a"), &c)->status, 200);
  EXPECT_EQ(checks.load(), 1);
  EXPECT_EQ(h.Post("key-a", Harness::Chat("model-a"), &c)->status, 200);
  EXPECT_EQ(checks.load(), 1) << "the connection's caller is used again for the same key";
  auto list = c.Send("GET", "/v1/models", "", {{"Authorization", "Bearer key-a"}});
  EXPECT_EQ(list->status, 200);
  EXPECT_EQ(checks.load(), 1);
  // Another key on the same connection is checked, and its own grants apply.
  ExpectOpenAiError(h.Post("key-b", Harness::Chat("model-a"), &c), 403, "permission_denied_error", "model-a");
  EXPECT_EQ(checks.load(), 2);
  EXPECT_EQ(h.Post("key-a", Harness::Chat("model-a"), &c)->status, 200);
  EXPECT_EQ(checks.load(), 3);
  ExpectOpenAiError(h.Post("key-b", Harness::Chat("model-a"), &c), 403, "permission_denied_error", "model-a");
  // Keys that differ from the remembered one in their last byte or length are not let through.
  ExpectOpenAiError(h.Post("key-x", Harness::Chat("model-a"), &c), 401, "authentication_error", "invalid API key");
  ExpectOpenAiError(h.Post("key-", Harness::Chat("model-a"), &c), 401, "authentication_error", "invalid API key");
  EXPECT_EQ(checks.load(), 6);
  EXPECT_EQ(h.Post("key-a", Harness::Chat("model-a"), &c)->status, 200);
  EXPECT_EQ(h.Post("key-a", Harness::Chat("model-a"), &c)->status, 200);
  EXPECT_EQ(checks.load(), 7);
  // A new key moves the epoch: the connection's caller is checked again.
  ASSERT_TRUE(keys.Add("key-c", {.key_id = "kc", .tenant = "ta"}).ok());
  EXPECT_EQ(h.Post("key-a", Harness::Chat("model-a"), &c)->status, 200);
  EXPECT_EQ(checks.load(), 8);
  // The memory is the connection's: another connection is checked on its own.
  http::Client other(h.base);
  EXPECT_EQ(h.Post("key-a", Harness::Chat("model-a"), &other)->status, 200);
  EXPECT_EQ(checks.load(), 9);
  EXPECT_EQ(h.Post("key-a", Harness::Chat("model-a"), &c)->status, 200);
  EXPECT_EQ(checks.load(), 9);
  EXPECT_EQ(a.requests.load(), 8);
}

// A request the server hands to a worker (here: every one, fast path off) carries the
// connection's slot with it: the connection still remembers its caller.
TEST(Gateway, AConnectionRemembersItsCallerAcrossRequestsHandedToWorkers) {
  FakeEngine a;
  CountedKeys counted;
  StaticKeys& keys = counted.keys;
  std::atomic<int>& checks = counted.checks;
  GatewayOptions o;
  o.fast_path = false;
  Harness h(o, nullptr, counted.Counted(), keys.AsEpoch());
  ASSERT_TRUE(h.dir.Upsert(OneModel("model-a", "ta", {{"r", a.url(), true}})).ok());
  http::Client c(h.base);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(h.Post("key-a", Harness::Chat("model-a"), &c)->status, 200);
  EXPECT_EQ(checks.load(), 1);
  const std::string metrics = h.gw->metrics().Render();
  EXPECT_NE(metrics.find("aicloud_gateway_handled_total{path=\"worker\"} 3"), std::string::npos) << metrics;
}

TEST(Gateway, WithoutAnEpochEveryRequestIsAuthenticated) {
  FakeEngine a;
  CountedKeys counted;
  std::atomic<int>& checks = counted.checks;
  Harness h({}, nullptr, counted.Counted());
  ASSERT_TRUE(h.dir.Upsert(OneModel("model-a", "ta", {{"r", a.url(), true}})).ok());
  http::Client c(h.base);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(h.Post("key-a", Harness::Chat("model-a"), &c)->status, 200);
  EXPECT_EQ(checks.load(), 3);
}

// ---- rate limits ---------------------------------------------------------------------------

TEST(Gateway, RpmAndTpmAnswer429WithRetryAfter) {
  FakeEngine e({.prompt_tokens = 10, .completion_tokens = 300});
  Harness h;
  ASSERT_TRUE(h.dir.Upsert(OneModel("m", "t", {{"r", e.url(), true}})).ok());
  h.AddKey("rpm", {.key_id = "krpm", .tenant = "t", .key_limits = {.rpm = 2}});
  h.AddKey("tpm", {.key_id = "ktpm", .tenant = "t", .tenant_limits = {.tpm = 1000}});
  EXPECT_EQ(h.Post("rpm", Harness::Chat("m"))->status, 200);
  EXPECT_EQ(h.Post("rpm", Harness::Chat("m"))->status, 200);
  auto r = h.Post("rpm", Harness::Chat("m"));
  ExpectOpenAiError(r, 429, "rate_limit_error", "key krpm allows 2 requests per minute");
  EXPECT_EQ(r->headers["retry-after"], "30");
  h.clock.Advance(30 * kMicrosPerSecond);  // one request's worth refilled
  EXPECT_EQ(h.Post("rpm", Harness::Chat("m"))->status, 200);

  // tpm: each request reserves ~340 tokens and is settled at its usage of 310.
  for (int i = 0; i < 3; ++i) EXPECT_EQ(h.Post("tpm", Harness::Chat("m", "hi", 300))->status, 200) << i;
  auto t = h.Post("tpm", Harness::Chat("m", "hi", 300));
  ExpectOpenAiError(t, 429, "rate_limit_error", "tenant t allows 1000 tokens per minute");
  EXPECT_GE(std::stoi(t->headers["retry-after"]), 1);
  EXPECT_EQ(e.requests.load(), 6);
}

// ---- budgets -------------------------------------------------------------------------------

TEST(Gateway, BudgetReservationHoldsUnder1000ConcurrentRequests) {
  FakeEngine e({.prompt_tokens = 5, .completion_tokens = 50});
  store::MemoryStore store;
  GatewayOptions o;
  o.scrape_period = milliseconds(0);
  Harness h(o, &store);
  ASSERT_TRUE(h.dir.Upsert(OneModel("m", "t", {{"r", e.url(), true}})).ok());
  const int64_t kBudget = 20'000;
  Limits tenant{.budget_tokens = kBudget};
  h.AddKey("k1", {.key_id = "k1", .tenant = "t", .tenant_limits = tenant});
  h.AddKey("k2", {.key_id = "k2", .tenant = "t", .key_limits = {.budget_tokens = 15'000}, .tenant_limits = tenant});
  std::atomic<int> ok{0}, over{0}, other{0}, next{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 50; ++t) {
    threads.emplace_back([&, t] {
      http::Client c(h.base);
      while (next.fetch_add(1) < 1000) {
        auto r = h.Post(t % 2 ? "k1" : "k2", Harness::Chat("m", "hi", 50), &c);
        if (r.ok() && r->status == 200) ++ok;
        else if (r.ok() && r->status == 429 && r->body.find("insufficient_quota") != std::string::npos) ++over;
        else ++other;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(other.load(), 0);
  EXPECT_EQ(ok.load() + over.load(), 1000);
  EXPECT_GT(over.load(), 0);
  const BudgetUsage u = h.gw->ledger().Usage("tenant t");
  EXPECT_LE(u.spent_tokens, kBudget);
  EXPECT_EQ(u.spent_tokens, 55 * ok.load());       // settled at the real usage
  EXPECT_EQ(u.reserved_tokens, 0);
  EXPECT_LE(h.gw->ledger().Usage("key k2").spent_tokens, 15'000);
  EXPECT_EQ(e.requests.load(), ok.load());          // refused requests never reached the engine
  EXPECT_GT(ok.load(), kBudget / 83 - 1);           // at most one reservation's worth unused
  ASSERT_TRUE(h.gw->ledger().Flush().ok());
  BudgetLedger reloaded(&store, [] { return int64_t{0}; });
  ASSERT_TRUE(reloaded.Load().ok());
  EXPECT_EQ(reloaded.Usage("tenant t").spent_tokens, u.spent_tokens);
}

// Two gateways on one store (as `aicloud gateway` runs, several behind a load balancer) share a
// tenant's budget: 1,000 concurrent requests spread over both never spend more than it, and the
// store's total is every answered request's usage.
TEST(Gateway, TwoGatewaysShareOneBudgetThroughTheStore) {
  FakeEngine e({.prompt_tokens = 5, .completion_tokens = 50});
  store::MemoryStore store;
  const int64_t kBudget = 20'000;
  std::atomic<int> ok{0}, over{0}, other{0}, next{0};
  {
    GatewayOptions o;
    o.scrape_period = milliseconds(0);
    Harness h1(o, &store), h2(o, &store);
    for (Harness* h : {&h1, &h2}) {
      ASSERT_TRUE(h->dir.Upsert(OneModel("m", "t", {{"r", e.url(), true}})).ok());
      h->AddKey("k", {.key_id = "k", .tenant = "t", .tenant_limits = {.budget_tokens = kBudget}});
    }
    std::vector<std::thread> threads;
    for (int t = 0; t < 50; ++t) {
      threads.emplace_back([&, t] {
        Harness& h = t % 2 ? h1 : h2;
        http::Client c(h.base);
        while (next.fetch_add(1) < 1000) {
          auto r = h.Post("k", Harness::Chat("m", "hi", 50), &c);
          if (r.ok() && r->status == 200) ++ok;
          else if (r.ok() && r->status == 429 && r->body.find("insufficient_quota") != std::string::npos) ++over;
          else ++other;
        }
      });
    }
    for (auto& t : threads) t.join();
  }  // both stop: they settle and hand their grants back
  EXPECT_EQ(other.load(), 0);
  EXPECT_EQ(ok.load() + over.load(), 1000);
  EXPECT_GT(over.load(), 0);
  EXPECT_LE(55 * ok.load(), kBudget) << "the two gateways together let through more than the budget";
  EXPECT_EQ(e.requests.load(), ok.load());
  BudgetLedger reader(&store, [] { return int64_t{0}; });
  ASSERT_TRUE(reader.Load().ok());
  EXPECT_EQ(reader.Usage("tenant t").spent_tokens, 55 * ok.load()) << "spending of one gateway was lost";
  EXPECT_GT(55 * ok.load(), kBudget - 2 * 83 - kBudget / 8);  // little of the budget left unused
}

// A store that refuses every write until a given time (a store that is briefly away).
class StoreAwayUntil : public store::testing::ForwardingStore {
 public:
  using ForwardingStore::ForwardingStore;
  void AwayFor(std::chrono::milliseconds d) { until_.store(std::chrono::steady_clock::now() + d); }
  StatusOr<std::vector<store::json>> Commit(std::vector<store::WriteOp> ops) override {
    if (std::chrono::steady_clock::now() < until_.load()) return UnavailableError("store away");
    return inner()->Commit(std::move(ops));
  }

 private:
  std::atomic<std::chrono::steady_clock::time_point> until_{};
};

// A gateway that stops while the store is briefly away still settles its last spending: the
// final flush is tried again a little later (it was tried once, and the spending died with it).
TEST(Gateway, StopSettlesTheLastSpendingWhenTheStoreIsBrieflyAway) {
  FakeEngine e({.prompt_tokens = 5, .completion_tokens = 50});
  store::MemoryStore mem;
  StoreAwayUntil away(&mem);
  {
    GatewayOptions o;
    o.scrape_period = milliseconds(0);
    Harness h(o, &away);
    ASSERT_TRUE(h.dir.Upsert(OneModel("m", "t", {{"r", e.url(), true}})).ok());
    h.AddKey("k", {.key_id = "k", .tenant = "t", .tenant_limits = {.budget_tokens = 20'000}});
    for (int i = 0; i < 3; ++i) {
      auto r = h.Post("k", Harness::Chat("m", "hi", 50));
      ASSERT_TRUE(r.ok() && r->status == 200) << (r.ok() ? r->body : r.status().ToString());
    }
    away.AwayFor(milliseconds(600));  // the periodic flushes and the stop's first one fail
  }
  BudgetLedger reader(&mem, [] { return int64_t{0}; });
  ASSERT_TRUE(reader.Load().ok());
  EXPECT_EQ(reader.Usage("tenant t").spent_tokens, 3 * 55) << "the last settlements were lost at stop";
}

// A key's rpm holds across gateways: what one gateway admitted counts on the other once they have
// exchanged totals (every flush period).
// The Syncer forgets keys idle for 10 minutes: their rate buckets, what the rate exchange
// published for them, their budget entries (the spending stays in the store).
TEST(Gateway, IdleKeysAreForgottenAndTheirSpendingIsNot) {
  FakeEngine e;
  store::MemoryStore store;
  GatewayOptions o;
  o.scrape_period = milliseconds(0);
  Harness h(o, &store);
  ASSERT_TRUE(h.dir.Upsert(OneModel("m", "t", {{"r", e.url(), true}})).ok());
  h.AddKey("k", {.key_id = "k", .tenant = "t", .key_limits = {.rpm = 10, .budget_tokens = 100000, .budget_period_s = 0}});
  auto tracked = [&](const std::string& kind) {
    const std::string text = h.gw->MetricsResponse().body;
    const std::string label = "aicloud_gateway_tracked_scopes{kind=\"" + kind + "\"} ";
    const size_t at = text.find(label);
    return at == std::string::npos ? -1.0 : std::stod(text.substr(at + label.size()));
  };
  ASSERT_EQ(h.Post("k", Harness::Chat("m"))->status, 200);
  EXPECT_EQ(tracked("rate"), 1);
  EXPECT_EQ(tracked("budget"), 1);
  const int64_t spent = h.gw->ledger().Usage("key k").spent_tokens;
  ASSERT_GT(spent, 0);
  std::this_thread::sleep_for(milliseconds(300));  // flushes settle the spending and hand the grant back
  h.clock.Advance(10 * 60 * kMicrosPerSecond);
  for (int i = 0; i < 200 && (tracked("rate") != 0 || tracked("budget") != 0); ++i) {
    h.clock.Advance(61 * kMicrosPerSecond);  // a prune each minute, however the flushes fall
    std::this_thread::sleep_for(milliseconds(20));
  }
  EXPECT_EQ(tracked("rate"), 0);
  EXPECT_EQ(tracked("budget"), 0);
  StatusOr<store::ListResult> rates = store.List({.kind = "GatewayRate"});
  ASSERT_TRUE(rates.ok());
  for (const store::json& obj : rates->items) EXPECT_FALSE(obj["status"]["scopes"].contains("key k")) << obj.dump();
  ASSERT_EQ(h.Post("k", Harness::Chat("m"))->status, 200);  // back: the spending is read from the store
  EXPECT_GE(h.gw->ledger().Usage("key k").spent_tokens, 2 * spent);  // both requests, none lost
}

// A body with a UTF-8 byte order mark is read past it and forwarded without it, whether or not
// the gateway rewrites it (strict JSON parsers refuse one).
TEST(Gateway, AByteOrderMarkIsNotForwarded) {
  FakeEngine e;
  Harness h;
  ASSERT_TRUE(h.dir.Upsert(OneModel("m", "t", {{"r", e.url(), true}})).ok());
  h.AddKey("k", {.key_id = "k", .tenant = "t"});
  const std::string plain = Harness::Chat("m").dump();
  for (bool stream : {false, true}) {  // a stream's body is rewritten (include_usage)
    json body = Harness::Chat("m", "hi", 50, stream);
    http::Client c(h.base);
    StatusOr<http::ClientResponse> r =
        c.Send("POST", "/v1/chat/completions", "\xEF\xBB\xBF" + body.dump(), {{"Authorization", "Bearer k"}});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->status, 200) << r->body;
    const std::string raw = e.last_raw_body();
    EXPECT_FALSE(raw.starts_with("\xEF\xBB\xBF")) << stream;
    if (!stream) {
      EXPECT_EQ(raw, plain);
    }
  }
}

TEST(Gateway, TwoGatewaysShareOneRpmLimitThroughTheStore) {
  FakeEngine e;
  store::MemoryStore store;
  GatewayOptions o;
  o.scrape_period = milliseconds(0);
  o.flush_period = milliseconds(50);
  Harness h1(o, &store), h2(o, &store);
  for (Harness* h : {&h1, &h2}) {
    ASSERT_TRUE(h->dir.Upsert(OneModel("m", "t", {{"r", e.url(), true}})).ok());
    h->AddKey("k", {.key_id = "k", .tenant = "t", .key_limits = {.rpm = 10}});
  }
  // Until both gateways have published (and so looked at the others), then until the first has
  // published its 10 requests; then a few more periods for the second to read them.
  auto wait_for = [&](const std::function<bool(const std::vector<store::json>&)>& done) {
    for (int i = 0; i < 500; ++i) {
      StatusOr<store::ListResult> l = store.List({.kind = "GatewayRate"});
      if (l.ok() && done(l->items)) return true;
      std::this_thread::sleep_for(milliseconds(10));
    }
    return false;
  };
  ASSERT_TRUE(wait_for([](const auto& items) { return items.size() == 2; }));
  std::this_thread::sleep_for(milliseconds(150));
  http::Client c1(h1.base), c2(h2.base);
  int ok1 = 0;
  for (int i = 0; i < 10; ++i) ok1 += h1.Post("k", Harness::Chat("m"), &c1)->status == 200 ? 1 : 0;
  EXPECT_EQ(ok1, 10);
  ASSERT_TRUE(wait_for([](const auto& items) {
    for (const store::json& obj : items) {
      if (obj["status"]["scopes"].value("key k", store::json::object()).value("requests", 0.0) == 10) return true;
    }
    return false;
  }));
  // The second gateway's exchanges after that point read those totals: wait for two of them.
  auto versions = [&] {
    std::map<int64_t, int64_t> rv;  // rv by published requests (0 = the second gateway's)
    StatusOr<store::ListResult> l = store.List({.kind = "GatewayRate"});
    for (const store::json& obj : l.ok() ? l->items : std::vector<store::json>()) {
      const double n = obj["status"]["scopes"].value("key k", store::json::object()).value("requests", 0.0);
      rv[static_cast<int64_t>(n)] = store::ResourceVersionOf(obj);
    }
    return rv;
  };
  const int64_t before = versions()[0];
  ASSERT_TRUE(wait_for([&](const auto&) { return versions()[0] >= before + 2; }));
  auto r = h2.Post("k", Harness::Chat("m"), &c2);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 429) << "the second gateway let the key past its rpm: " << r->body;
  EXPECT_NE(r->body.find("key k allows 10 requests per minute"), std::string::npos) << r->body;
  EXPECT_EQ(e.requests.load(), 10);
}

TEST(Gateway, BudgetedCallerWithoutMaxTokensGetsTheDefaultSentUpstream) {
  FakeEngine e;
  GatewayOptions o;
  o.default_max_tokens = 64;
  Harness h(o);
  ASSERT_TRUE(h.dir.Upsert(OneModel("m", "t", {{"r", e.url(), true}})).ok());
  h.AddKey("k", {.key_id = "k", .tenant = "t", .key_limits = {.budget_cost = 1}});
  json body = Harness::Chat("m");
  body.erase("max_tokens");
  EXPECT_EQ(h.Post("k", body)->status, 200);
  EXPECT_EQ(e.last_body()["max_tokens"], 64);
}

// ---- scale from zero -----------------------------------------------------------------------

TEST(Gateway, HoldsUntilAReplicaIsReadyThenForwards) {
  FakeEngine e;
  GatewayOptions o;
  o.hold_timeout = milliseconds(5000);
  Harness h(o);
  ASSERT_TRUE(h.dir.Upsert(OneModel("m", "t", {})).ok());
  h.AddKey("k", {.key_id = "k", .tenant = "t"});
  std::thread starter;
  h.dir.OnWant([&](const std::string& d, int) {
    if (starter.joinable()) return;
    starter = std::thread([&, d] {
      std::this_thread::sleep_for(milliseconds(300));  // "weights loading"
      ASSERT_TRUE(h.dir.SetReplicas(d, {{"r0", e.url(), true}}).ok());
    });
  });
  const auto t0 = std::chrono::steady_clock::now();
  auto r = h.Post("k", Harness::Chat("m"));
  const auto waited = std::chrono::steady_clock::now() - t0;
  starter.join();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_GE(waited, milliseconds(300));
  EXPECT_LT(waited, milliseconds(3000));
  EXPECT_EQ(h.dir.Wanted("m"), 1);
  EXPECT_GE(h.sink.records().back().held_s, 0.29);
}

TEST(Gateway, HoldTimesOutWith503AndAFullQueueGets429) {
  FakeEngine e;
  GatewayOptions o;
  o.hold_timeout = milliseconds(300);
  o.hold_queue_size = 2;
  Harness h(o);
  ASSERT_TRUE(h.dir.Upsert(OneModel("m", "t", {{"r0", e.url(), false}})).ok());
  h.AddKey("k", {.key_id = "k", .tenant = "t", .key_limits = {.budget_tokens = 1'000'000}});
  auto r = h.Post("k", Harness::Chat("m"));
  ExpectOpenAiError(r, 503, "api_error", "no replica of deployment m became ready within");
  EXPECT_FALSE(r->headers["retry-after"].empty());
  EXPECT_EQ(h.gw->ledger().Usage("key k").reserved_tokens, 0);  // the reservation was released
  EXPECT_EQ(h.gw->ledger().Usage("key k").spent_tokens, 0);

  // Two requests wait, the third is refused at once, then a replica comes and both are served.
  Harness h2([] {
    GatewayOptions o2;
    o2.hold_timeout = milliseconds(10000);
    o2.hold_queue_size = 2;
    return o2;
  }());
  ASSERT_TRUE(h2.dir.Upsert(OneModel("m", "t", {{"r0", e.url(), false}})).ok());
  h2.AddKey("k", {.key_id = "k", .tenant = "t"});
  std::vector<std::thread> held;
  std::atomic<int> served{0};
  for (int i = 0; i < 2; ++i) {
    held.emplace_back([&] {
      auto x = h2.Post("k", Harness::Chat("m"));
      if (x.ok() && x->status == 200) ++served;
    });
  }
  for (int i = 0; i < 200 && h2.gw->Held("m") < 2; ++i) std::this_thread::sleep_for(milliseconds(10));
  ASSERT_EQ(h2.gw->Held("m"), 2);
  ExpectOpenAiError(h2.Post("k", Harness::Chat("m")), 429, "rate_limit_error", "hold queue is full");
  ASSERT_TRUE(h2.dir.SetReady("m", "r0", true).ok());
  for (auto& t : held) t.join();
  EXPECT_EQ(served.load(), 2);
  EXPECT_EQ(h2.gw->Held("m"), 0);
}

// An aicloud engine's x-aicloud-usage header is what a unary call is charged (the body is not
// read for it); a header that does not read exactly as the engine writes it sends the gateway
// back to the body's usage. On the fast path and on the worker path alike.
TEST(Gateway, UnaryCallsAreChargedTheEnginesUsageHeader) {
  // The header says 7 + 3; the body says 5 + 20 (the fake engine's prompt, max_tokens 20).
  for (const bool fast_path : {true, false}) {
    for (const std::string header : {"prompt_tokens=7, completion_tokens=3", "prompt_tokens=7"}) {
      SCOPED_TRACE(std::string(fast_path ? "fast path, " : "worker, ") + header);
      FakeEngine e({.prompt_tokens = 5, .completion_tokens = 50, .usage_header = header});
      GatewayOptions o;
      o.fast_path = fast_path;
      Harness h(o);
      ASSERT_TRUE(h.dir.Upsert(OneModel("m", "t", {{"r", e.url(), true}})).ok());
      h.AddKey("k", {.key_id = "k", .tenant = "t", .key_limits = {.budget_tokens = 1000}});
      StatusOr<http::ClientResponse> r = h.Post("k", Harness::Chat("m", "hi", 20));
      ASSERT_TRUE(r.ok()) << r.status();
      ASSERT_EQ(r->status, 200) << r->body;
      EXPECT_FALSE(r->headers.contains(http::kUsageHeader));  // not passed on to the client
      EXPECT_EQ(json::parse(r->body)["usage"]["prompt_tokens"], 5);  // the body as the engine sent it
      ASSERT_TRUE(h.sink.WaitFor(1, milliseconds(2000)));
      const UsageRecord rec = h.sink.records()[0];
      const bool well_formed = header.find("completion") != std::string::npos;
      EXPECT_TRUE(rec.usage_reported);
      EXPECT_EQ(rec.prompt_tokens, well_formed ? 7 : 5);
      EXPECT_EQ(rec.completion_tokens, well_formed ? 3 : 20);
      EXPECT_EQ(h.gw->ledger().Usage("key k").spent_tokens, well_formed ? 10 : 25);
    }
  }
}

// ---- streaming -----------------------------------------------------------------------------

int64_t NowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

TEST(Gateway, StreamsChunksBeforeTheUpstreamFinishes) {
  FakeEngine e({.prompt_tokens = 7, .completion_tokens = 50, .stream_chunks = 5, .chunk_gap = milliseconds(150)});
  Harness h;
  ASSERT_TRUE(h.dir.Upsert(OneModel("m", "t", {{"r", e.url(), true}})).ok());
  h.AddKey("k", {.key_id = "k", .tenant = "t"});
  http::Client c(h.base);
  http::SseParser parser;
  std::vector<std::string> data;
  int64_t first_us = 0;
  http::ClientResponse head;
  Status st = c.Stream("POST", "/v1/chat/completions", Harness::Chat("m", "hi", 50, true).dump(),
                       {{"Authorization", "Bearer k"}},
                       [&](std::string_view bytes) {
                         if (first_us == 0) first_us = NowUs();
                         for (http::SseEvent& ev : parser.Feed(bytes)) data.push_back(ev.data);
                         return true;
                       },
                       &head);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(head.status, 200);
  EXPECT_EQ(head.headers["content-type"], "text/event-stream");
  ASSERT_TRUE(e.stream_done.load());
  EXPECT_LT(first_us, e.stream_done_us.load() - 400'000);  // the first chunk came >= 0.4 s early
  ASSERT_EQ(data.size(), 6u);  // 5 chunks + [DONE]; the usage chunk the gateway asked for is not passed on
  EXPECT_EQ(data.back(), "[DONE]");
  EXPECT_EQ(json::parse(data[0])["choices"][0]["delta"]["content"], "t0");
  EXPECT_TRUE(e.last_body()["stream_options"]["include_usage"]);
  ASSERT_TRUE(h.sink.WaitFor(1, milliseconds(2000)));
  UsageRecord rec = h.sink.records()[0];
  EXPECT_TRUE(rec.usage_reported);
  EXPECT_EQ(rec.prompt_tokens, 7);
  EXPECT_EQ(rec.completion_tokens, 50);
  EXPECT_TRUE(rec.stream);
  EXPECT_GT(rec.ttft_s, 0);
}

TEST(Gateway, StreamPassesUsageThroughWhenTheClientAsks) {
  FakeEngine e;
  Harness h;
  ASSERT_TRUE(h.dir.Upsert(OneModel("m", "t", {{"r", e.url(), true}})).ok());
  h.AddKey("k", {.key_id = "k", .tenant = "t"});
  json body = Harness::Chat("m", "hi", 20, true);
  body["stream_options"] = {{"include_usage", true}};
  auto r = h.Post("k", body);
  ASSERT_TRUE(r.ok());
  EXPECT_NE(r->body.find("\"usage\""), std::string::npos) << r->body;
}

TEST(Gateway, ClientDisconnectCancelsTheUpstream) {
  FakeEngine e({.stream_chunks = 200, .chunk_gap = milliseconds(20)});
  Harness h;
  ASSERT_TRUE(h.dir.Upsert(OneModel("m", "t", {{"r", e.url(), true}})).ok());
  h.AddKey("k", {.key_id = "k", .tenant = "t"});
  {
    http::Client c(h.base);
    int seen = 0;
    Status st = c.Stream("POST", "/v1/chat/completions", Harness::Chat("m", "hi", 500, true).dump(),
                         {{"Authorization", "Bearer k"}}, [&](std::string_view) { return ++seen < 3; });
    ASSERT_TRUE(st.ok()) << st;
  }  // the client hangs up after 3 reads
  for (int i = 0; i < 300 && !e.cancelled.load(); ++i) std::this_thread::sleep_for(milliseconds(10));
  EXPECT_TRUE(e.cancelled.load());
  EXPECT_LT(e.chunks_sent.load(), 100);
  EXPECT_FALSE(e.stream_done.load());
  ASSERT_TRUE(h.sink.WaitFor(1, milliseconds(2000)));
  EXPECT_EQ(h.sink.records()[0].error, "client disconnected");
}

// Sends a chat call for model "m" with key "k" on a raw connection to the gateway and waits (3 s
// at most) until the engine has it. The connection's descriptor, or -1 (closed) if the call did
// not arrive.
int ChatReachingTheEngine(const Harness& h, const FakeEngine& e, bool stream) {
  const int fd = http::testing::ConnectLoopback(h.server->port());
  if (fd < 0) return -1;
  const std::string chat = Harness::Chat("m", "hi", 50, stream).dump();
  if (!http::testing::WriteAll(fd, http::testing::PostText("/v1/chat/completions", chat, "Authorization: Bearer k\r\n"))) {
    ::close(fd);
    return -1;
  }
  for (int i = 0; i < 300 && e.requests.load() == 0; ++i) std::this_thread::sleep_for(milliseconds(10));
  if (e.requests.load() != 1) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// A unary call whose client leaves while the replica works on it: the gateway closes its
// upstream call (the engine sees its client go and stops), charges the prompt, releases the rest
// of the budget reservation and records a 499 "client disconnected". Default check intervals (1 s)
// on both servers. On the fast path (an async upstream call) and on a worker (a blocking one).
TEST(Gateway, UnaryClientDisconnectCancelsTheUpstream) {
  for (const bool fast_path : {true, false}) {
    SCOPED_TRACE(fast_path ? "fast path" : "worker");
    FakeEngine e({.unary_delay = milliseconds(8000)});
    GatewayOptions o;
    o.scrape_period = milliseconds(0);
    o.fast_path = fast_path;
    Harness h(o);
    ASSERT_TRUE(h.dir.Upsert(OneModel("m", "t", {{"r", e.url(), true}})).ok());
    h.AddKey("k", {.key_id = "k", .tenant = "t", .tenant_limits = {.budget_tokens = 10'000}});
    const auto start = std::chrono::steady_clock::now();
    const int fd = ChatReachingTheEngine(h, e, /*stream=*/false);
    ASSERT_GE(fd, 0);
    EXPECT_GT(h.gw->ledger().Usage("tenant t").reserved_tokens, 0);  // held while the replica works
    ::close(fd);
    for (int i = 0; i < 600 && !e.unary_cancelled.load(); ++i) std::this_thread::sleep_for(milliseconds(10));
    EXPECT_TRUE(e.unary_cancelled.load());
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));  // not the 8 s answer
    ASSERT_TRUE(h.sink.WaitFor(1, milliseconds(2000)));
    const UsageRecord rec = h.sink.records()[0];
    EXPECT_EQ(rec.status, 499);
    EXPECT_EQ(rec.error, "client disconnected");
    EXPECT_EQ(rec.replica, "r");
    const BudgetUsage u = h.gw->ledger().Usage("tenant t");
    EXPECT_EQ(u.reserved_tokens, 0);
    EXPECT_GT(u.spent_tokens, 0);  // the prompt the replica read is charged, not the 50 tokens asked for
    EXPECT_EQ(u.spent_tokens, rec.prompt_tokens);
    EXPECT_EQ(rec.completion_tokens, 0);
    StatusOr<http::ClientResponse> m = http::Client(h.base).Send("GET", "/metrics");
    ASSERT_TRUE(m.ok());
    EXPECT_NE(m->body.find("aicloud_gateway_client_gone_total{deployment=\"m\"} 1"), std::string::npos) << m->body;
  }
}

// A streamed call whose client leaves before the first event (the engine still prefilling, its
// answer's head not sent yet or sent already): the client's signal ends the pump's upstream call,
// the engine sees it, and the record is a 499.
TEST(Gateway, StreamClientThatLeavesBeforeTheFirstEventCancelsTheUpstream) {
  for (const bool head_sent : {false, true}) {
    SCOPED_TRACE(head_sent ? "head sent" : "no head yet");
    FakeEngine e(head_sent ? FakeEngineOptions{.first_event_delay = milliseconds(8000)}
                           : FakeEngineOptions{.stream_delay = milliseconds(8000)});
    const std::atomic<bool>& engine_saw_it = head_sent ? e.first_event_cancelled : e.head_cancelled;
    GatewayOptions o;
    o.scrape_period = milliseconds(0);
    Harness h(o);
    ASSERT_TRUE(h.dir.Upsert(OneModel("m", "t", {{"r", e.url(), true}})).ok());
    h.AddKey("k", {.key_id = "k", .tenant = "t", .tenant_limits = {.budget_tokens = 10'000}});
    const auto start = std::chrono::steady_clock::now();
    const int fd = ChatReachingTheEngine(h, e, /*stream=*/true);
    ASSERT_GE(fd, 0);
    ::close(fd);
    for (int i = 0; i < 600 && !engine_saw_it.load(); ++i) std::this_thread::sleep_for(milliseconds(10));
    EXPECT_TRUE(engine_saw_it.load());
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));  // not the 8 s prefill
    ASSERT_TRUE(h.sink.WaitFor(1, milliseconds(2000)));
    const UsageRecord rec = h.sink.records()[0];
    EXPECT_EQ(rec.status, 499);
    EXPECT_EQ(rec.error, "client disconnected");
    EXPECT_EQ(h.gw->ledger().Usage("tenant t").reserved_tokens, 0);
    StatusOr<http::ClientResponse> m = http::Client(h.base).Send("GET", "/metrics");
    ASSERT_TRUE(m.ok());
    EXPECT_NE(m->body.find("aicloud_gateway_client_gone_total{deployment=\"m\"} 1"), std::string::npos) << m->body;
  }
}

// A request held for a replica (scale from zero) whose client leaves stops holding: its slot in
// the bounded hold queue goes to a client still waiting, nothing is charged, and the record says
// 499 "client disconnected while held".
TEST(Gateway, AHeldRequestWhoseClientLeavesFreesItsSlot) {
  FakeEngine e;
  GatewayOptions o;
  o.scrape_period = milliseconds(0);
  o.hold_queue_size = 1;
  o.hold_timeout = milliseconds(20000);
  Harness h(o);
  ASSERT_TRUE(h.dir.Upsert(OneModel("cold", "t", {{"r", e.url(), false}})).ok());
  h.AddKey("k", {.key_id = "k", .tenant = "t", .tenant_limits = {.budget_tokens = 10'000}});
  int fd = http::testing::ConnectLoopback(h.server->port());
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(http::testing::WriteAll(fd, http::testing::PostText("/v1/chat/completions", Harness::Chat("cold").dump(),
                                                                  "Authorization: Bearer k\r\n")));
  auto held = [&] {
    const std::string text = h.gw->metrics().Render();
    return text.find("aicloud_gateway_held_requests{deployment=\"cold\"} 1") != std::string::npos;
  };
  for (int i = 0; i < 300 && !held(); ++i) std::this_thread::sleep_for(milliseconds(10));
  ASSERT_TRUE(held());
  ASSERT_EQ(h.Post("k", Harness::Chat("cold"))->status, 429);  // the one slot is taken
  ::close(fd);  // the held client leaves; the server notices within its 1 s check
  ASSERT_TRUE(h.sink.WaitFor(2, milliseconds(3000)));
  const UsageRecord gone = h.sink.records()[1];
  EXPECT_EQ(gone.status, 499);
  EXPECT_EQ(gone.error, "client disconnected while held");
  EXPECT_EQ(gone.prompt_tokens + gone.completion_tokens, 0);  // it never reached a replica
  EXPECT_EQ(h.gw->ledger().Usage("tenant t").reserved_tokens, 0);
  EXPECT_EQ(h.gw->ledger().Usage("tenant t").spent_tokens, 0);
  EXPECT_EQ(e.requests.load(), 0);
  // The slot is free again: the next request is held, and answered once a replica is ready.
  std::thread ready([&] {
    std::this_thread::sleep_for(milliseconds(300));
    EXPECT_TRUE(h.dir.Upsert(OneModel("cold", "t", {{"r", e.url(), true}})).ok());
  });
  StatusOr<http::ClientResponse> next = h.Post("k", Harness::Chat("cold"));
  ready.join();
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(next->status, 200) << next->body;
  EXPECT_NE(h.gw->metrics().Render().find("aicloud_gateway_client_gone_total{deployment=\"cold\"} 1"), std::string::npos);
}

TEST(Gateway, UpstreamErrorsPassThroughAndMetricsAreServed) {
  FakeEngine e;
  Harness h;
  ASSERT_TRUE(h.dir.Upsert(OneModel("m", "t", {{"r", e.url(), true}})).ok());
  h.AddKey("k", {.key_id = "k", .tenant = "t"});
  EXPECT_EQ(h.Post("k", Harness::Chat("m"))->status, 200);
  http::Client c(h.base);
  auto m = c.Send("GET", "/metrics");
  ASSERT_TRUE(m.ok());
  EXPECT_NE(m->body.find("aicloud_gateway_requests_total{model=\"m\",code=\"200\"} 1"), std::string::npos) << m->body;
  EXPECT_NE(m->body.find("aicloud_gateway_tokens_total{model=\"m\",type=\"completion\"} 50"), std::string::npos);
  EXPECT_NE(m->body.find("aicloud_gateway_request_duration_seconds_bucket"), std::string::npos);
  // The usage record names everything the server's accounting needs.
  UsageRecord r = h.sink.records().back();
  EXPECT_EQ(r.key_id, "k");
  EXPECT_EQ(r.tenant, "t");
  EXPECT_EQ(r.replica, "r");
  EXPECT_EQ(r.deployment, "m");
  EXPECT_EQ(r.status, 200);
  EXPECT_GT(r.latency_s, 0);
}

// ---- the fast path (unary requests on the server's I/O thread) ------------------------------

// What a client and the usage log see of one request, minus what differs from run to run (request
// ids, times).
json Observe(const StatusOr<http::ClientResponse>& r) {
  if (!r.ok()) return {{"client_error", r.status().ToString()}};
  auto header = [&](const char* name) {
    auto it = r->headers.find(name);
    return it == r->headers.end() ? std::string("-") : it->second;
  };
  return {{"status", r->status},
          {"body", r->body},
          {"content-type", header("content-type")},
          {"x-aicloud-replica", header("x-aicloud-replica")},
          {"retry-after", header("retry-after")},
          {"has-request-id", header("x-request-id") != "-"}};
}

json Observe(const UsageRecord& u) {
  json j = u.ToJson();
  for (const char* varies : {"request_id", "unix_ms", "latency_s", "ttft_s", "held_s"}) j.erase(varies);
  return j;
}

// Runs the same requests through a gateway with the fast path on or off: every answer and usage
// record, then /metrics.
struct Script {
  json answers = json::array();
  json records = json::array();
  std::string metrics;
};

Script RunScript(bool fast_path, FakeEngine& live, FakeEngine& slow, FakeEngine& refuses, const std::string& dead) {
  GatewayOptions o;
  o.fast_path = fast_path;
  o.policy = "round-robin";
  o.scrape_period = milliseconds(0);
  o.upstream_timeout = milliseconds(300);
  o.default_max_tokens = 64;
  Harness h(o);
  Route m = OneModel("m", "t", {{"dead", dead, true}, {"live", live.url(), true}});
  m.prompt_price_per_m = 1;
  m.completion_price_per_m = 2;
  EXPECT_TRUE(h.dir.Upsert(m).ok());
  EXPECT_TRUE(h.dir.Upsert(OneModel("slow", "t", {{"s", slow.url(), true}})).ok());
  EXPECT_TRUE(h.dir.Upsert(OneModel("down", "t", {{"d", dead, true}})).ok());
  EXPECT_TRUE(h.dir.Upsert(OneModel("refuses", "t", {{"e", refuses.url(), true}})).ok());
  EXPECT_TRUE(h.dir.Upsert(OneModel("other", "t2", {{"o", live.url(), true}})).ok());
  Route alias = OneModel("alias", "t", {{"a", live.url(), true}});
  alias.base_model = "served-name";
  EXPECT_TRUE(h.dir.Upsert(alias).ok());
  h.AddKey("k", {.key_id = "k", .tenant = "t"});
  h.AddKey("rpm1", {.key_id = "rpm1", .tenant = "t", .key_limits = {.rpm = 1}});
  h.AddKey("budget", {.key_id = "budget", .tenant = "t", .key_limits = {.budget_cost = 1}});
  json no_max = Harness::Chat("m");
  no_max.erase("max_tokens");

  Script out;
  auto add = [&](const StatusOr<http::ClientResponse>& r) { out.answers.push_back(Observe(r)); };
  add(h.Post("k", Harness::Chat("m")));         // the dead replica first: retried on the live one
  add(h.Post("k", Harness::Chat("m")));         // the dead one is ejected now
  add(h.Post("nope", Harness::Chat("m")));      // 401
  add(h.Post("k", json{{"model", "m"}}));       // 400
  add(h.Post("k", Harness::Chat("no-such")));   // 404
  add(h.Post("k", Harness::Chat("other")));     // 403
  add(h.Post("rpm1", Harness::Chat("m")));
  add(h.Post("rpm1", Harness::Chat("m")));      // 429 with Retry-After
  add(h.Post("budget", no_max));                // max_tokens injected, cost charged
  add(h.Post("k", Harness::Chat("slow")));      // 504: upstream timeout, no retry
  add(h.Post("k", Harness::Chat("down")));      // 502: every replica refused
  add(h.Post("k", Harness::Chat("refuses")));   // the engine's 422 passes through
  add(h.Post("k", Harness::Chat("alias")));     // the engine's own name goes upstream
  {
    http::Client c(h.base);
    add(c.Send("POST", "/v1/completions", json{{"model", "m"}, {"prompt", "hi"}, {"max_tokens", 5}}.dump(),
               {{"Authorization", "Bearer k"}}));
    add(c.Send("POST", "/v1/embeddings", json{{"model", "m"}, {"input", "hi"}}.dump(),  // the engine's 404
               {{"Authorization", "Bearer k"}}));
  }
  add(h.Post("k", Harness::Chat("m", "hi", 20, /*stream=*/true)));  // streams always take a worker
  EXPECT_TRUE(h.sink.WaitFor(out.answers.size(), milliseconds(2000)));
  for (const UsageRecord& u : h.sink.records()) out.records.push_back(Observe(u));
  out.metrics = h.gw->metrics().Render();
  return out;
}

TEST(Gateway, FastPathAnswersAndRecordsExactlyAsTheWorkerPath) {
  FakeEngine live, slow({.unary_delay = milliseconds(1000)}), refuses({.unary_status = 422});
  const std::string dead = "127.0.0.1:" + std::to_string(DeadPort());
  const Script fast = RunScript(true, live, slow, refuses, dead);
  const Script worker = RunScript(false, live, slow, refuses, dead);
  ASSERT_EQ(fast.answers.size(), 16u);
  ASSERT_EQ(fast.answers.size(), worker.answers.size());
  for (size_t i = 0; i < fast.answers.size(); ++i) EXPECT_EQ(fast.answers[i], worker.answers[i]) << "request " << i;
  ASSERT_EQ(fast.records.size(), worker.records.size());
  for (size_t i = 0; i < fast.records.size(); ++i) EXPECT_EQ(fast.records[i], worker.records[i]) << "record " << i;

  // Spot checks that the script saw what it meant to.
  const std::vector<int> want = {200, 200, 401, 400, 404, 403, 200, 429, 200, 504, 502, 422, 200, 200, 404, 200};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(fast.answers[i]["status"], want[i]) << fast.answers[i];
  EXPECT_EQ(fast.records[0]["attempts"], 2);
  EXPECT_NE(fast.records[9]["error"].get<std::string>().find("timed out after 300 ms"), std::string::npos)
      << fast.records[9];
  EXPECT_GT(fast.records[8]["cost"].get<double>(), 0);

  // Where the requests ran: all but the stream on the I/O thread, or all on workers.
  EXPECT_NE(fast.metrics.find("aicloud_gateway_handled_total{path=\"fast\"} 15"), std::string::npos) << fast.metrics;
  EXPECT_NE(fast.metrics.find("aicloud_gateway_handled_total{path=\"worker\"} 1"), std::string::npos) << fast.metrics;
  // (Series every request may touch exist from the start, at zero, as Prometheus advises.)
  EXPECT_NE(worker.metrics.find("aicloud_gateway_handled_total{path=\"fast\"} 0\n"), std::string::npos) << worker.metrics;
  EXPECT_NE(worker.metrics.find("aicloud_gateway_handled_total{path=\"worker\"} 16"), std::string::npos) << worker.metrics;
}

TEST(Gateway, FastPathSendsTheEngineNameAndReusesUpstreamConnections) {
  FakeEngine e;
  GatewayOptions o;
  o.scrape_period = milliseconds(0);
  Harness h(o);
  Route alias = OneModel("public-name", "t", {{"r", e.url(), true}});
  alias.base_model = "engine-name";
  ASSERT_TRUE(h.dir.Upsert(alias).ok());
  h.AddKey("k", {.key_id = "k", .tenant = "t"});
  http::Client c(h.base);
  for (int i = 0; i < 20; ++i) ASSERT_EQ(h.Post("k", Harness::Chat("public-name"), &c)->status, 200);
  EXPECT_EQ(e.last_body()["model"], "engine-name");
  EXPECT_EQ(e.requests.load(), 20);
  EXPECT_NE(h.gw->metrics().Render().find("aicloud_gateway_handled_total{path=\"fast\"} 20"), std::string::npos);
  EXPECT_EQ(e.connections(), 1);  // one kept-alive upstream connection for all of them
}

TEST(Gateway, LargeBodiesAreParsedOnAWorker) {
  FakeEngine e;
  GatewayOptions o;
  o.scrape_period = milliseconds(0);
  o.inline_body_bytes = 4096;
  Harness h(o);
  ASSERT_TRUE(h.dir.Upsert(OneModel("m", "t", {{"r", e.url(), true}})).ok());
  h.AddKey("k", {.key_id = "k", .tenant = "t"});
  http::Client c(h.base);
  ASSERT_EQ(h.Post("k", Harness::Chat("m"), &c)->status, 200);
  const std::string long_prompt(8192, 'x');
  StatusOr<http::ClientResponse> big = h.Post("k", Harness::Chat("m", long_prompt), &c);
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(big->status, 200) << big->body;
  EXPECT_EQ(e.last_body()["messages"][0]["content"], long_prompt);  // forwarded whole
  StatusOr<http::ClientResponse> bad = h.Post("k", json{{"model", "m"}, {"pad", long_prompt}}, &c);
  ASSERT_TRUE(bad.ok());
  EXPECT_EQ(bad->status, 400) << bad->body;  // the same checks on the worker
  const std::string m = h.gw->metrics().Render();
  EXPECT_NE(m.find("aicloud_gateway_handled_total{path=\"fast\"} 1\n"), std::string::npos) << m;
  EXPECT_NE(m.find("aicloud_gateway_handled_total{path=\"worker\"} 2\n"), std::string::npos) << m;
  EXPECT_EQ(e.requests.load(), 2);
}

}  // namespace
}  // namespace aicloud::gateway
