// Tests of ControlLink against a fake server speaking the gateway protocol (the real server's side
// is tested in control/api_test.cc, both together in tests/e2e_gateway_link.sh): connecting, the
// serving state followed by long polls, keys checked by digest, malformed states refused, signals
// summed and sent at once for a held request, the objects store's errors, and stopping.
#include "gateway/control_link.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "auth/auth.h"
#include "http/router.h"
#include "http/server.h"

namespace aicloud::gateway {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

const std::string kGatewayToken = "aic_00000000000a_" + std::string(64, 'a');
const std::string kSecret1 = std::string(63, '1') + "f";
const std::string kToken1 = "aic_0000000000b1_" + kSecret1;   // tenant acme
const std::string kToken2 = "aic_0000000000b2_" + std::string(64, '2');  // every model
const std::string kToken3 = "aic_0000000000b3_" + std::string(64, '3');  // expired

class FakeServer {
 public:
  FakeServer() {
    router_.Add("GET", "/api/v1/gateway/config", [this](http::Request& r) {
      if (r.Header("authorization") != "Bearer " + kGatewayToken || refuse_gateway_) {
        return http::ErrorResponse(UnauthenticatedError("unknown key"));
      }
      std::unique_lock<std::mutex> l(mu_);
      ++polls_;
      const auto wait = std::chrono::milliseconds(std::stoll(r.Query("waitMs", "0")));
      cv_.wait_for(l, wait, [&] { return doc_.value("version", "") != r.Query("version") || stopping_; });
      return http::Response::Json(200, doc_);
    });
    router_.Add("POST", "/api/v1/gateway/signals", [this](http::Request& r) {
      std::lock_guard<std::mutex> l(mu_);
      signals_.push_back(json::parse(r.body));
      cv_.notify_all();
      return http::Response::Json(200, json::object());
    });
    router_.Add("POST", "/api/v1/gateway/objects", [](http::Request&) {
      return http::ErrorResponse(AbortedError("GatewayBudget lean/budget-1: resourceVersion conflict: expected 5, current 7"));
    });
    router_.Add("GET", "/api/v1/gateway/objects/{kind}/{name}", [this](http::Request& r) {
      std::this_thread::sleep_for(std::chrono::milliseconds(objects_delay_ms.load()));
      return http::ErrorResponse(NotFoundError(r.params["kind"] + " " + r.Query("tenant") + "/" + r.params["name"] + " not found"));
    });
    router_.Add("GET", "/api/v1/gateway/objects/{kind}", [](http::Request& r) {
      // The continue token comes back with "+next": it must travel intact, whatever it holds.
      return http::Response::Json(200, {{"items", json::array({{{"kind", "GatewayRate"}}})},
                                        {"continue", r.Query("continue") + "+next"},
                                        {"resourceVersion", "42"}});
    });
    doc_ = State(false, true);
    auto s = http::Server::Start({.worker_threads = 8}, [this](http::Request& r) { return router_.Dispatch(r); });
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(*s);
  }
  ~FakeServer() { Stop(); }
  void Stop() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (server_) server_->Stop();
  }

  std::string url() const { return "http://127.0.0.1:" + std::to_string(server_->port()); }

  // A serving state: acme's deployment "chat" (adapter "sql") with one replica, and three keys.
  static json State(bool ready, bool with_key1) {
    json keys = json::array();
    if (with_key1) keys.push_back({{"id", "0000000000b1"}, {"hash", auth::Sha256Hex(kSecret1)}, {"tenant", "acme"}});
    keys.push_back({{"id", "0000000000b2"}, {"hash", auth::Sha256Hex(std::string(64, '2'))}, {"allModels", true}});
    keys.push_back({{"id", "0000000000b3"}, {"hash", auth::Sha256Hex(std::string(64, '3'))}, {"expiresAt", 1000}});
    return {{"version", std::string(ready ? "r" : "n") + (with_key1 ? "1" : "0")},
            {"routes", json::array({{{"deployment", "acme/chat"}, {"tenant", "acme"}, {"model", "chat"},
                                     {"adapters", {"sql"}}, {"maxAdapters", 4}, {"canaryWeight", 0},
                                     {"replicas", json::array({{{"id", "chat-r1"}, {"url", "127.0.0.1:1"},
                                                                {"ready", ready}, {"canary", false}}})}}})},
            {"keys", keys},
            {"tenants", {{"acme", {{"rpm", 60}, {"budgetTokens", 1000}}}}}};
  }

  void Set(json doc) {
    {
      std::lock_guard<std::mutex> l(mu_);
      doc_ = std::move(doc);
    }
    cv_.notify_all();
  }
  // Waits until a signal post satisfies `pred`; returns it (null after `timeout`).
  json WaitSignal(const std::function<bool(const json&)>& pred, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> l(mu_);
    json found;
    cv_.wait_for(l, timeout, [&] {
      for (const json& s : signals_) {
        if (pred(s)) {
          found = s;
          return true;
        }
      }
      return false;
    });
    return found;
  }
  void RefuseGateway() {
    refuse_gateway_ = true;
    Set(State(false, true));  // ends the poll in progress
  }
  int polls() {
    std::lock_guard<std::mutex> l(mu_);
    return polls_;
  }

 private:
  http::Router router_;
  std::mutex mu_;
  std::condition_variable cv_;
  json doc_;                  // GUARDED_BY(mu_)
  std::vector<json> signals_;  // GUARDED_BY(mu_)
  int polls_ = 0;             // GUARDED_BY(mu_)
  bool stopping_ = false;     // GUARDED_BY(mu_)
  std::atomic<bool> refuse_gateway_{false};

 public:
  std::atomic<int> objects_delay_ms{0};  // GET of one object answers this late
  std::unique_ptr<http::Server> server_;
};

ControlLinkOptions Options(const FakeServer& s) {
  ControlLinkOptions o{.server_url = s.url(), .token = kGatewayToken};
  o.retry = 100ms;
  o.log = [](const std::string&) {};
  return o;
}

bool Eventually(const std::function<bool()>& f, std::chrono::milliseconds within = 5s) {
  const auto end = std::chrono::steady_clock::now() + within;
  while (std::chrono::steady_clock::now() < end) {
    if (f()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return f();
}

// A replica's secret travels with its route; a secret that is not a string refuses the route.
TEST(ControlLink, RoutesCarryEachReplicasSecret) {
  json j = {{"deployment", "acme/chat"}, {"tenant", "acme"}, {"model", "chat"},
            {"replicas", {{{"id", "r1"}, {"url", "10.0.0.1:21000"}, {"ready", true}, {"secret", "s1"}},
                          {{"id", "r2"}, {"url", "10.0.0.2:21000"}, {"ready", true}}}}};
  StatusOr<Route> r = RouteFromJson(j);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->replicas.size(), 2u);
  EXPECT_EQ(r->replicas[0].secret, "s1");
  EXPECT_EQ(r->replicas[1].secret, "");
  j["replicas"][1]["secret"] = 7;
  r = RouteFromJson(j);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "replicas[1].secret: expected a string");
}

TEST(ControlLink, ConnectNamesTheServerAndWhyItRefused) {
  FakeServer server;
  ControlLinkOptions o = Options(server);
  o.token = kToken1;
  StatusOr<std::unique_ptr<ControlLink>> bad = ControlLink::Connect(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kUnauthenticated);
  EXPECT_NE(bad.status().message().find("server " + server.url()), std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find("unknown key"), std::string::npos) << bad.status().message();

  o.token = "";
  EXPECT_EQ(ControlLink::Connect(o).status().code(), StatusCode::kInvalidArgument);
  o = Options(server);
  o.server_url = "http://127.0.0.1:1";  // nothing listens there
  o.call_timeout = 2s;
  StatusOr<std::unique_ptr<ControlLink>> unreachable = ControlLink::Connect(o);
  ASSERT_FALSE(unreachable.ok());
  EXPECT_EQ(unreachable.status().code(), StatusCode::kUnavailable) << unreachable.status().ToString();
}

TEST(ControlLink, AuthenticatesByDigestAndFollowsTheServersState) {
  FakeServer server;
  StatusOr<std::unique_ptr<ControlLink>> link = ControlLink::Connect(Options(server));
  ASSERT_TRUE(link.ok()) << link.status().ToString();
  Directory* dir = (*link)->directory();
  std::shared_ptr<const Route> chat = dir->Lookup("chat");
  ASSERT_NE(chat, nullptr);
  EXPECT_EQ(chat->deployment, "acme/chat");
  EXPECT_EQ(chat->tenant, "acme");
  EXPECT_EQ(chat->ReadyCount(), 0);
  EXPECT_EQ(dir->Lookup("sql"), chat);  // an adapter routes to its base's deployment
  EXPECT_EQ(dir->Lookup("nope"), nullptr);
  EXPECT_EQ(dir->List().size(), 1u);

  Authenticator authenticate = (*link)->authenticator();
  StatusOr<CallerRef> one = authenticate("Bearer " + kToken1);
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  EXPECT_EQ((*one)->key_id, "0000000000b1");
  EXPECT_EQ((*one)->tenant, "acme");
  EXPECT_EQ((*one)->tenant_limits.rpm, 60);
  EXPECT_EQ((*one)->tenant_limits.budget_tokens, 1000);
  EXPECT_TRUE((*one)->models.empty());
  StatusOr<CallerRef> two = authenticate("Bearer " + kToken2);
  ASSERT_TRUE(two.ok());
  EXPECT_EQ((*two)->models, std::vector<std::string>{"*"});
  EXPECT_EQ(authenticate("Bearer " + kToken3).status().message(), "key expired");
  std::string wrong = kToken1;
  wrong.back() = 'e';  // the right id, a wrong secret
  EXPECT_EQ(authenticate("Bearer " + wrong).status().message(), "unknown key");
  EXPECT_EQ(authenticate("Bearer sk-123").status().message(), "malformed token");
  EXPECT_EQ(authenticate("").status().code(), StatusCode::kUnauthenticated);

  // The server's replica becomes ready and key 1 goes: the link follows within its long poll.
  std::function<uint64_t()> epoch = (*link)->auth_epoch();
  const uint64_t e0 = epoch();
  const uint64_t v0 = dir->Version();
  server.Set(FakeServer::State(true, false));
  EXPECT_NE(dir->WaitForChange(v0, 5s), v0);
  ASSERT_TRUE(Eventually([&] { return dir->Lookup("chat")->ReadyCount() == 1; }));
  EXPECT_EQ(authenticate("Bearer " + kToken1).status().message(), "unknown key");
  EXPECT_NE(epoch(), e0);
  EXPECT_TRUE(Eventually([&] { return (*link)->stats().version == "r0"; })) << (*link)->stats().version;
  EXPECT_GE((*link)->stats().applied, 2u);
  (*link)->Stop();
}

TEST(ControlLink, AMalformedStateIsRefusedAndMalformedEntriesAreLeftOut) {
  FakeServer server;
  StatusOr<std::unique_ptr<ControlLink>> link = ControlLink::Connect(Options(server));
  ASSERT_TRUE(link.ok()) << link.status().ToString();
  // A document of the wrong shape is refused whole; the state in force stays.
  json bad = FakeServer::State(true, true);
  bad.erase("keys");
  Status st = (*link)->Apply(bad);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("keys: expected an array"), std::string::npos) << st.message();
  EXPECT_NE((*link)->Apply(json::array()).message().find("expected an object"), std::string::npos);
  bad = FakeServer::State(true, true);
  bad["version"] = 7;
  EXPECT_NE((*link)->Apply(bad).message().find("version"), std::string::npos);
  ASSERT_NE((*link)->directory()->Lookup("chat"), nullptr);
  EXPECT_EQ((*link)->directory()->Lookup("chat")->ReadyCount(), 0);
  EXPECT_EQ((*link)->stats().applied, 1u);

  // A malformed route or key is left out and the rest applied: here key 1 is malformed, and the
  // new route "mini" and the replica that became ready come through.
  json partly = FakeServer::State(true, true);
  partly["keys"][0]["expiresAt"] = "tomorrow";
  json second = partly["routes"][0];
  second["deployment"] = "acme/mini";
  second["model"] = "mini";
  second["adapters"] = json::array();
  partly["routes"].push_back(second);
  json broken = partly["routes"][0];
  broken.erase("model");
  broken["deployment"] = "acme/broken";
  partly["routes"].push_back(broken);
  partly["routes"][0]["replicas"].push_back({{"id", "chat-r2"}, {"url", "127.0.0.1:2"}, {"ready", "yes"}});
  ASSERT_TRUE((*link)->Apply(partly).ok());
  EXPECT_NE((*link)->directory()->Lookup("mini"), nullptr);
  EXPECT_EQ((*link)->directory()->Lookup("chat"), nullptr);  // its replica entry was malformed
  EXPECT_EQ((*link)->directory()->List().size(), 1u);
  EXPECT_EQ((*link)->authenticator()("Bearer " + kToken1).status().message(), "unknown key");
  EXPECT_TRUE((*link)->authenticator()("Bearer " + kToken2).ok());
  const ControlLink::Stats stats = (*link)->stats();
  EXPECT_EQ(stats.skipped, 3u);
  EXPECT_NE(stats.skipped_first.find("routes[0].replicas[1].ready"), std::string::npos) << stats.skipped_first;
}

TEST(ControlLink, LimitsAreReadAsTheManifestCheckAcceptsThem) {
  Limits l = LimitsFromServing(json{{"rpm", 60.0}, {"tpm", 1e3}, {"budgetTokens", 400}, {"budgetCost", 2.5},
                                    {"budgetPeriodSeconds", 86400.0}});
  EXPECT_EQ(l.rpm, 60);
  EXPECT_EQ(l.tpm, 1000);
  EXPECT_EQ(l.budget_tokens, 400);
  EXPECT_DOUBLE_EQ(l.budget_cost, 2.5);
  EXPECT_EQ(l.budget_period_s, 86400);
  // Not integers: no limit, never a throw.
  Limits odd = LimitsFromServing(json{{"rpm", 1.5}, {"tpm", "many"}, {"budgetTokens", nullptr}});
  EXPECT_EQ(odd.rpm, 0);
  EXPECT_EQ(odd.tpm, 0);
  EXPECT_EQ(odd.budget_tokens, 0);
  EXPECT_FALSE(LimitsFromServing(json::array()).HasRate());
}

TEST(ControlLink, RefusesEveryKeyWhenTheServerRefusesItsOwnOrTheStateIsTooOld) {
  FakeServer server;
  ControlLinkOptions o = Options(server);
  o.max_stale = 400ms;
  o.poll_wait = 200ms;
  StatusOr<std::unique_ptr<ControlLink>> link = ControlLink::Connect(o);
  ASSERT_TRUE(link.ok()) << link.status().ToString();
  Authenticator authenticate = (*link)->authenticator();
  ASSERT_TRUE(authenticate("Bearer " + kToken1).ok());
  // The server goes away: the last state serves until it is max_stale old, then nothing does.
  server.Stop();
  ASSERT_TRUE(Eventually([&] { return !(*link)->stats().connected; }));
  ASSERT_TRUE(Eventually([&] { return !authenticate("Bearer " + kToken1).ok(); }, 3s));
  StatusOr<CallerRef> stale = authenticate("Bearer " + kToken1);
  EXPECT_EQ(stale.status().code(), StatusCode::kUnavailable);  // 503, not 401: the key may be fine
  EXPECT_NE(stale.status().message().find("has not reached the server"), std::string::npos) << stale.status().message();
}

TEST(ControlLink, AServerThatRefusesTheGatewaysKeyStopsItServing) {
  FakeServer server;
  ControlLinkOptions o = Options(server);
  o.poll_wait = 200ms;
  StatusOr<std::unique_ptr<ControlLink>> link = ControlLink::Connect(o);
  ASSERT_TRUE(link.ok()) << link.status().ToString();
  ASSERT_TRUE((*link)->authenticator()("Bearer " + kToken1).ok());
  std::function<uint64_t()> epoch = (*link)->auth_epoch();
  EXPECT_EQ(epoch(), epoch());  // steady while the state is good: connections reuse their callers
  server.RefuseGateway();
  ASSERT_TRUE(Eventually([&] { return !(*link)->authenticator()("Bearer " + kToken1).ok(); }));
  EXPECT_NE(epoch(), epoch());  // and never once it is not: every request is checked (and refused)
  StatusOr<CallerRef> r = (*link)->authenticator()("Bearer " + kToken1);
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("refuses this gateway's key"), std::string::npos);
  // Losing the server afterwards does not undo it: two more polls that cannot reach it at all.
  const uint64_t failures = (*link)->stats().poll_failures;
  server.Stop();
  ASSERT_TRUE(Eventually([&] { return (*link)->stats().poll_failures >= failures + 2; }));
  EXPECT_NE((*link)->authenticator()("Bearer " + kToken1).status().message().find("refuses this gateway's key"),
            std::string::npos);
}

TEST(ControlLink, AHealthyLongPollKeepsTheStateFreshWhateverMaxStale) {
  FakeServer server;
  ControlLinkOptions o = Options(server);
  o.poll_wait = 2s;        // each poll waits 2 s for a change that does not come
  o.max_stale = 300ms;     // shorter than a poll
  StatusOr<std::unique_ptr<ControlLink>> link = ControlLink::Connect(o);
  ASSERT_TRUE(link.ok()) << link.status().ToString();
  int refused = 0;
  for (int i = 0; i < 50; ++i) {  // 2.5 s: across at least one poll's end
    if (!(*link)->authenticator()("Bearer " + kToken1).ok()) ++refused;
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_EQ(refused, 0);
}

TEST(ControlLink, TheObjectsStoreFailsFastWhileTheServerIsUnreachable) {
  FakeServer server;
  ControlLinkOptions o = Options(server);
  o.retry = 5s;
  o.call_timeout = 300ms;
  StatusOr<std::unique_ptr<ControlLink>> link = ControlLink::Connect(o);
  ASSERT_TRUE(link.ok()) << link.status().ToString();
  server.objects_delay_ms = 2000;  // no answer within the call's timeout
  store::Store* s = (*link)->store();
  StatusOr<store::json> first = s->Get({"GatewayBudget", "lean", "budget-1"});
  EXPECT_EQ(first.status().code(), StatusCode::kDeadlineExceeded) << first.status().ToString();
  const auto t0 = std::chrono::steady_clock::now();
  StatusOr<store::json> second = s->Get({"GatewayBudget", "lean", "budget-1"});
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 50ms);
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(second.status().message().find("not tried again"), std::string::npos) << second.status().message();
}

TEST(ControlLink, SignalsAreSummedAndAHeldRequestGoesAtOnce) {
  FakeServer server;
  ControlLinkOptions o = Options(server);
  o.signal_period = 30s;  // only an urgent signal (or Stop) sends within this test
  StatusOr<std::unique_ptr<ControlLink>> link = ControlLink::Connect(o);
  ASSERT_TRUE(link.ok()) << link.status().ToString();
  Directory* dir = (*link)->directory();
  for (int i = 0; i < 3; ++i) dir->NoteArrival("acme/chat");
  dir->NoteActivity("acme/other");
  const auto t0 = std::chrono::steady_clock::now();
  dir->WantReplicas("acme/chat", 1);
  json sent = server.WaitSignal([](const json& s) { return s.dump().find("acme/chat") != std::string::npos; }, 5s);
  ASSERT_FALSE(sent.is_null()) << "no signal within 5 s of a held request";
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
  bool chat = false, other = false;
  for (const json& d : sent["deployments"]) {
    if (d["name"] == "acme/chat") {
      chat = true;
      EXPECT_EQ(d["arrivals"], 3);
      EXPECT_EQ(d["held"], 1);
      EXPECT_EQ(d["active"], true);
    } else if (d["name"] == "acme/other") {
      other = true;
      EXPECT_EQ(d["arrivals"], 0);
      EXPECT_EQ(d["active"], true);
      EXPECT_FALSE(d.contains("held"));
    }
  }
  EXPECT_TRUE(chat && other) << sent.dump();

  // What comes later goes when the link stops, which does not wait out the long poll.
  dir->NoteArrival("acme/late");
  ASSERT_TRUE(Eventually([&] { return server.polls() >= 2; }));  // the feed thread is in a long poll
  const auto s0 = std::chrono::steady_clock::now();
  (*link)->Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - s0, 3s);
  EXPECT_FALSE(server.WaitSignal([](const json& s) { return s.dump().find("acme/late") != std::string::npos; }, 1s).is_null());
  EXPECT_GE((*link)->stats().signals_sent, 2);
}

TEST(ControlLink, TheObjectsStoreCarriesTheServersErrors) {
  FakeServer server;
  StatusOr<std::unique_ptr<ControlLink>> link = ControlLink::Connect(Options(server));
  ASSERT_TRUE(link.ok()) << link.status().ToString();
  store::Store* s = (*link)->store();
  StatusOr<store::json> u = s->Update({{"kind", "GatewayBudget"}, {"metadata", {{"name", "budget-1"}, {"tenant", "lean"}}}}, 5);
  ASSERT_FALSE(u.ok());
  EXPECT_EQ(u.status().code(), StatusCode::kAborted);  // the budget ledger re-reads and retries on it
  EXPECT_NE(u.status().message().find("resourceVersion conflict"), std::string::npos);
  StatusOr<store::json> g = s->Get({"GatewayBudget", "lean", "budget-2"});
  EXPECT_EQ(g.status().code(), StatusCode::kNotFound);
  EXPECT_NE(g.status().message().find("GatewayBudget lean/budget-2"), std::string::npos) << g.status().message();
  StatusOr<store::ListResult> l = s->List({.kind = "GatewayRate", .limit = 500});
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->items.size(), 1u);
  EXPECT_EQ(l->continue_token, "+next");
  StatusOr<store::ListResult> page2 = s->List({.kind = "GatewayRate", .limit = 500, .continue_token = "a&b=c/d e%f"});
  ASSERT_TRUE(page2.ok()) << page2.status().ToString();
  EXPECT_EQ(page2->continue_token, "a&b=c/d e%f+next");
  EXPECT_EQ(l->resource_version, 42);
  EXPECT_EQ(s->List({.kind = "GatewayRate", .label_selector = "a=b"}).status().code(), StatusCode::kUnimplemented);
}

TEST(ControlLink, KeepsServingTheLastStateWhileTheServerIsAway) {
  auto server = std::make_unique<FakeServer>();
  ControlLinkOptions o = Options(*server);
  std::mutex log_mu;
  std::vector<std::string> logged;
  o.log = [&](const std::string& line) {
    std::lock_guard<std::mutex> l(log_mu);
    logged.push_back(line);
  };
  o.poll_wait = 200ms;
  StatusOr<std::unique_ptr<ControlLink>> link = ControlLink::Connect(o);
  ASSERT_TRUE(link.ok()) << link.status().ToString();
  Metrics metrics;
  (*link)->ExportMetrics(&metrics);
  EXPECT_NE(metrics.Render().find("aicloud_gateway_link_connected 1"), std::string::npos) << metrics.Render();
  EXPECT_NE(metrics.Render().find("aicloud_gateway_link_states_applied 1"), std::string::npos);
  server->Stop();
  ASSERT_TRUE(Eventually([&] { return !(*link)->stats().connected; }));
  EXPECT_NE(metrics.Render().find("aicloud_gateway_link_connected 0"), std::string::npos) << metrics.Render();
  EXPECT_NE((*link)->directory()->Lookup("chat"), nullptr);
  EXPECT_TRUE((*link)->authenticator()("Bearer " + kToken1).ok());
  std::lock_guard<std::mutex> l(log_mu);
  ASSERT_EQ(logged.size(), 1u);  // said once, not on every retry
  EXPECT_NE(logged[0].find("serving the last state, retrying"), std::string::npos) << logged[0];
}

}  // namespace
}  // namespace aicloud::gateway
