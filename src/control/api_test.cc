// Tests of the REST API through a real in-process ApiServer (SQLite store in a temp dir, HTTP on
// an ephemeral port): the authorization matrix of built-in roles × endpoints × tenants with the
// audit trail each call leaves, malformed requests, optimistic concurrency, watches, and the
// manifest parser under seeded random mutation of the fuzz corpus.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <array>
#include <atomic>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "auth/audit.h"
#include "control/manifest.h"
#include "control/server.h"
#include "http/client.h"
#include "http/sse.h"

namespace aicloud::control {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// --- shared server ------------------------------------------------------------------------------

// The matrix users, in table column order.
enum Role { kAdmin, kTenantAdmin, kDeveloper, kViewer, kAgent, kNobody, kNumRoles };
constexpr std::array<const char*, kNumRoles> kUsers = {"admin", "ta",    "dev",
                                                        "viewer", "agentu", "nobody"};

class ApiTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    char tmpl[] = "/tmp/aicloud-api-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = new std::string(tmpl);
    auto s = ApiServer::Start({.data_dir = *dir_, .port = 0, .worker_threads = 4});
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = s->release();
    ASSERT_TRUE(server_->bootstrap_token().has_value());
    tokens_ = new std::array<std::string, kNumRoles>();
    (*tokens_)[kAdmin] = *server_->bootstrap_token();

    // Tenants, users, bindings, keys — all through the API as admin.
    for (const char* t : {"a", "b"}) {
      ASSERT_EQ(AdminSend("POST", "/api/v1/tenants", json{{"metadata", {{"name", t}}}}).status, 201);
    }
    for (int r = kTenantAdmin; r < kNumRoles; ++r) {
      ASSERT_EQ(AdminSend("POST", "/api/v1/users", json{{"metadata", {{"name", kUsers[r]}}}}).status, 201);
    }
    auto bind = [](const std::string& path, const std::string& name, const std::string& role,
                   const std::string& user) {
      json b = {{"metadata", {{"name", name}}}, {"spec", {{"role", role}, {"subjects", {user}}}}};
      ASSERT_EQ(AdminSend("POST", path, b).status, 201) << name;
    };
    bind("/api/v1/tenants/a/rolebindings", "ta-admin", "tenant-admin", "ta");
    bind("/api/v1/tenants/a/rolebindings", "dev-developer", "developer", "dev");
    bind("/api/v1/tenants/a/rolebindings", "viewer-viewer", "viewer", "viewer");
    bind("/api/v1/rolebindings", "agentu-agent", "agent", "agentu");
    for (int r = kTenantAdmin; r < kNumRoles; ++r) {
      http::ClientResponse k = AdminSend("POST", "/api/v1/apikeys", json{{"user", kUsers[r]}});
      ASSERT_EQ(k.status, 201) << k.body;
      (*tokens_)[r] = json::parse(k.body)["token"];
    }
    server_->auth()->Invalidate();
  }

  static void TearDownTestSuite() {
    if (server_ != nullptr) {
      server_->Stop();
      delete server_;
      server_ = nullptr;
    }
    if (dir_ != nullptr) {
      std::error_code ec;
      fs::remove_all(*dir_, ec);
      delete dir_;
      dir_ = nullptr;
    }
    delete tokens_;
    tokens_ = nullptr;
  }

  void SetUp() override {
    ASSERT_NE(server_, nullptr) << "server did not start";
  }

  static http::ClientResponse Send(const std::string& token, const std::string& method,
                                   const std::string& path, const std::string& body = "") {
    http::Client c(server_->url(), {.timeout = std::chrono::milliseconds(20000)});
    http::Headers h;
    if (!token.empty()) h.emplace_back("Authorization", "Bearer " + token);
    StatusOr<http::ClientResponse> r = c.Send(method, path, body, h);
    if (!r.ok()) {
      ADD_FAILURE() << method << " " << path << ": " << r.status().ToString();
      return {};
    }
    return *r;
  }
  static http::ClientResponse AdminSend(const std::string& method, const std::string& path,
                                        const json& body = nullptr) {
    return Send((*tokens_)[kAdmin], method, path, body.is_null() ? "" : body.dump());
  }

  static std::vector<json> AuditRecords() {
    StatusOr<store::ListResult> l = server_->store()->List({.kind = auth::kAuditRecordKind});
    EXPECT_TRUE(l.ok()) << l.status().ToString();
    return l.ok() ? l->items : std::vector<json>{};
  }

  static std::string Unique(const std::string& prefix) {
    static std::atomic<int> n{0};
    return prefix + "-" + std::to_string(++n);
  }

  static json JobBody(const std::string& name) {
    return {{"metadata", {{"name", name}}}, {"spec", {{"command", {"sleep", "100"}}}}};
  }

  static inline ApiServer* server_ = nullptr;
  static inline std::string* dir_ = nullptr;
  static inline std::array<std::string, kNumRoles>* tokens_ = nullptr;
};

// --- a. authorization matrix ------------------------------------------------------------------

// Expected outcomes: an HTTP status, or one of these.
constexpr int k2xx = 2;           // any 2xx
constexpr int k2xxOr404 = 24;     // allowed; the resource may not have what was asked for
constexpr int D = 403;            // denied

enum class Setup { kNone, kJob, kNode };

struct Row {
  const char* name;
  const char* method;
  const char* path;  // {t} tenant, {job}, {node}, {epoch}, {new} a fresh name
  const char* body;  // same placeholders; "" = no body
  const char* verb;  // the RBAC verb/resource a denial is audited with
  const char* resource;
  bool tenant_column;      // run once per tenant a and b; else once with "-"
  const char* allow_verb;  // non-null: mutating; an allowed call is audited with this verb
  Setup setup;
  std::array<int, kNumRoles> in_a;  // or the cluster-scoped expectation
  std::array<int, kNumRoles> in_b;
};

// Derived from BuiltinRoles() in auth.cc and the scoping rules in auth.h:
//   admin: cluster-admin cluster-wide; ta: tenant-admin in a; dev: developer in a;
//   viewer: viewer in a; agentu: agent cluster-wide; nobody: no bindings.
// Tenant bindings grant tenant-scoped resources only in their tenant, and cluster-scoped reads
// only of nodes and of their own tenant.
//                                                       admin  ta    dev   viewer agent nobody
const std::vector<Row>& Matrix() {
  static const std::vector<Row> rows = {
      {"list jobs", "GET", "/api/v1/tenants/{t}/jobs", "", "list", "jobs", true, nullptr,
       Setup::kNone, {k2xx, k2xx, k2xx, k2xx, D, D}, {k2xx, D, D, D, D, D}},
      {"get job", "GET", "/api/v1/tenants/{t}/jobs/{job}", "", "get", "jobs", true, nullptr,
       Setup::kJob, {k2xx, k2xx, k2xx, k2xx, D, D}, {k2xx, D, D, D, D, D}},
      {"create job", "POST", "/api/v1/tenants/{t}/jobs",
       R"({"metadata":{"name":"{new}"},"spec":{"command":["sleep","100"]}})", "create", "jobs",
       true, "create", Setup::kNone, {k2xx, k2xx, k2xx, D, D, D}, {k2xx, D, D, D, D, D}},
      {"delete job", "DELETE", "/api/v1/tenants/{t}/jobs/{job}", "", "delete", "jobs", true,
       "delete", Setup::kJob, {k2xx, k2xx, k2xx, D, D, D}, {k2xx, D, D, D, D, D}},
      {"cancel job", "POST", "/api/v1/tenants/{t}/jobs/{job}/cancel", "", "cancel", "jobs", true,
       "cancel", Setup::kJob, {k2xx, k2xx, k2xx, D, D, D}, {k2xx, D, D, D, D, D}},
      {"job logs", "GET", "/api/v1/tenants/{t}/jobs/{job}/logs", "", "get", "logs", true, nullptr,
       Setup::kJob, {k2xxOr404, k2xxOr404, k2xxOr404, k2xxOr404, D, D},
       {k2xxOr404, D, D, D, D, D}},
      {"list events", "GET", "/api/v1/tenants/{t}/events", "", "list", "events", true, nullptr,
       Setup::kNone, {k2xx, k2xx, k2xx, k2xx, D, D}, {k2xx, D, D, D, D, D}},
      {"list jobs of all tenants", "GET", "/api/v1/jobs", "", "list", "jobs", false, nullptr,
       Setup::kNone, {k2xx, k2xx, k2xx, k2xx, D, D}, {}},
      {"list nodes", "GET", "/api/v1/nodes", "", "list", "nodes", false, nullptr, Setup::kNone,
       {k2xx, k2xx, k2xx, k2xx, D, D}, {}},
      {"get node", "GET", "/api/v1/nodes/{node}", "", "get", "nodes", false, nullptr, Setup::kNode,
       {k2xx, k2xx, k2xx, k2xx, k2xx, D}, {}},
      {"cordon node", "POST", "/api/v1/nodes/{node}/cordon", "", "cordon", "nodes", false,
       "cordon", Setup::kNode, {k2xx, D, D, D, D, D}, {}},
      {"drain node", "POST", "/api/v1/nodes/{node}/drain", "", "drain", "nodes", false, "drain",
       Setup::kNode, {k2xx, D, D, D, D, D}, {}},
      // Listing tenants never denies: it filters to the tenants the caller may get (checked in
      // TenantListShowsOnlyVisibleTenants).
      {"list tenants", "GET", "/api/v1/tenants", "", "list", "tenants", false, nullptr,
       Setup::kNone, {k2xx, k2xx, k2xx, k2xx, k2xx, k2xx}, {}},
      {"get tenant", "GET", "/api/v1/tenants/{t}", "", "get", "tenants", true, nullptr,
       Setup::kNone, {k2xx, k2xx, D, D, D, D}, {k2xx, D, D, D, D, D}},
      {"create tenant", "POST", "/api/v1/tenants", R"({"metadata":{"name":"{new}"}})", "create",
       "tenants", false, "create", Setup::kNone, {k2xx, D, D, D, D, D}, {}},
      {"create user", "POST", "/api/v1/users", R"({"metadata":{"name":"{new}"}})", "create",
       "users", false, "create", Setup::kNone, {k2xx, D, D, D, D, D}, {}},
      {"create role", "POST", "/api/v1/roles",
       R"({"metadata":{"name":"{new}"},"spec":{"rules":[{"verbs":["get"],"resources":["jobs"]}]}})",
       "create", "roles", false, "create", Setup::kNone, {k2xx, D, D, D, D, D}, {}},
      {"create rolebinding in tenant", "POST", "/api/v1/tenants/{t}/rolebindings",
       R"({"metadata":{"name":"{new}"},"spec":{"role":"viewer","subjects":["ghost"]}})", "create",
       "rolebindings", true, "create", Setup::kNone, {k2xx, k2xx, D, D, D, D},
       {k2xx, D, D, D, D, D}},
      {"create cluster-wide rolebinding", "POST", "/api/v1/rolebindings",
       R"({"metadata":{"name":"{new}"},"spec":{"role":"viewer","subjects":["ghost"]}})", "create",
       "rolebindings", false, "create", Setup::kNone, {k2xx, D, D, D, D, D}, {}},
      {"create tenant apikey", "POST", "/api/v1/apikeys", R"({"tenant":"{t}"})", "create",
       "apikeys", true, "create", Setup::kNone, {k2xx, k2xx, k2xx, D, D, D},
       {k2xx, D, D, D, D, D}},
      {"create unrestricted apikey", "POST", "/api/v1/apikeys", "", "create", "apikeys", false,
       "create", Setup::kNone, {k2xx, D, D, D, D, D}, {}},
      {"usage of tenant", "GET", "/api/v1/usage?tenant={t}", "", "get", "usage", true, nullptr,
       Setup::kNone, {k2xx, k2xx, k2xx, k2xx, D, D}, {k2xx, D, D, D, D, D}},
      {"usage of all tenants", "GET", "/api/v1/usage", "", "get", "usage", false, nullptr,
       Setup::kNone, {k2xx, D, D, D, D, D}, {}},
      {"audit verify", "GET", "/api/v1/audit/verify", "", "verify", "auditrecords", false, nullptr,
       Setup::kNone, {k2xx, D, D, D, D, D}, {}},
      {"list auditrecords", "GET", "/api/v1/auditrecords", "", "list", "auditrecords", false,
       nullptr, Setup::kNone, {k2xx, D, D, D, D, D}, {}},
      {"agent register", "POST", "/api/v1/agent/nodes/{new}/register",
       R"({"spec":{"cpuMillis":1000,"memoryBytes":1073741824}})", "create", "agent", false,
       "register", Setup::kNone, {k2xx, D, D, D, k2xx, D}, {}},
      // Allowed reports are not audited (see the DISABLED_ test below), so allow_verb is null.
      {"agent report", "POST", "/api/v1/agent/nodes/{node}/report?epoch={epoch}", R"({"metrics":{}})", "update",
       "agent", false, nullptr, Setup::kNode, {k2xx, D, D, D, k2xx, D}, {}},
  };
  return rows;
}

std::string Replace(std::string s, const std::string& from, const std::string& to) {
  for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size())) {
    s.replace(p, from.size(), to);
  }
  return s;
}

bool Matches(int expected, int got) {
  if (expected == k2xx) return got >= 200 && got < 300;
  if (expected == k2xxOr404) return (got >= 200 && got < 300) || got == 404;
  return expected == got;
}

TEST_F(ApiTest, AuthorizationMatrix) {
  int calls = 0;
  for (const Row& row : Matrix()) {
    for (const char* t : row.tenant_column ? std::vector<const char*>{"a", "b"}
                                           : std::vector<const char*>{"-"}) {
      for (int role = 0; role < kNumRoles; ++role) {
        const int expected = (std::string(t) == "b" ? row.in_b : row.in_a)[role];
        const std::string tenant = std::string(t) == "-" ? "a" : t;
        // Fresh objects per call, made by admin, so deletes and cordons do not interfere.
        std::string job, node, epoch;
        if (row.setup == Setup::kJob) {
          job = Unique("mj");
          http::ClientResponse r = AdminSend("POST", "/api/v1/tenants/" + tenant + "/jobs", JobBody(job));
          ASSERT_EQ(r.status, 201) << r.body;
        } else if (row.setup == Setup::kNode) {
          node = Unique("mn");
          http::ClientResponse r = AdminSend(
              "POST", "/api/v1/agent/nodes/" + node + "/register",
              json{{"spec", {{"cpuMillis", 1000}, {"memoryBytes", 1 << 30}}}});
          ASSERT_EQ(r.status, 200) << r.body;
          epoch = json::parse(r.body)["epoch"];
        }
        const std::string fresh = Unique("mx");
        auto fill = [&](std::string s) {
          s = Replace(s, "{t}", tenant);
          s = Replace(s, "{job}", job);
          s = Replace(s, "{node}", node);
          s = Replace(s, "{epoch}", epoch);
          return Replace(s, "{new}", fresh);
        };
        const std::string path = fill(row.path);
        const size_t before = AuditRecords().size();
        http::ClientResponse r = Send((*tokens_)[role], row.method, path, fill(row.body));
        ++calls;
        const std::string what = std::string(row.name) + " as " + kUsers[role] + " in tenant " + t +
                                 " (" + row.method + " " + path + ")";
        EXPECT_TRUE(Matches(expected, r.status))
            << what << ": expected " << expected << ", got " << r.status << " " << r.body;

        const std::vector<json> all = AuditRecords();
        std::vector<json> fresh_records(all.begin() + static_cast<std::ptrdiff_t>(std::min(before, all.size())),
                                        all.end());
        auto has = [&](const std::string& decision, const std::string& verb,
                       const std::string& resource) {
          for (const json& rec : fresh_records) {
            const json& s = rec["spec"];
            if (s.value("decision", "") == decision && s.value("user", "") == kUsers[role] &&
                s.value("verb", "") == verb && s.value("resource", "") == resource) {
              return true;
            }
          }
          return false;
        };
        if (r.status == 403) {
          EXPECT_TRUE(has("deny", row.verb, row.resource))
              << what << ": no deny audit record; new records: " << json(fresh_records).dump();
        } else if (r.status >= 200 && r.status < 300 && row.allow_verb != nullptr) {
          EXPECT_TRUE(has("allow", row.allow_verb, row.resource))
              << what << ": no allow audit record; new records: " << json(fresh_records).dump();
        }
      }
    }
  }
  EXPECT_GT(calls, 200);

  // Unauthenticated: no key, a malformed key, an unknown key.
  for (const std::string& token :
       {std::string(""), std::string("garbage"),
        std::string("aic_000000000000_") + std::string(64, '0')}) {
    for (const char* path : {"/api/v1/tenants/a/jobs", "/api/v1/nodes", "/api/v1/whoami"}) {
      const size_t before = AuditRecords().size();
      http::ClientResponse r = Send(token, "GET", path);
      EXPECT_EQ(r.status, 401) << path << " with token '" << token << "': " << r.body;
      const std::vector<json> all = AuditRecords();
      bool found = false;
      for (size_t i = before; i < all.size(); ++i) {
        const json& s = all[i]["spec"];
        found |= s.value("decision", "") == "deny" && s.value("httpStatus", 0) == 401;
      }
      EXPECT_TRUE(found) << "no 401 audit record for " << path;
    }
  }

  auth::VerifyResult v = server_->audit()->Verify();
  EXPECT_TRUE(v.ok) << v.problem;
  EXPECT_GT(v.records, calls / 2);
}

// The labels that make a Job a replica (and give it a replica's secret and certificate) are the
// deployment controller's: even a cluster admin cannot set or change them through the API.
TEST_F(ApiTest, ReplicaLabelsCannotBeSetThroughTheApi) {
  const std::string name = Unique("fake-replica");
  json job = JobBody(name);
  job["metadata"]["labels"] = {{"aicloud/deployment", "chat"}};
  http::ClientResponse r = AdminSend("POST", "/api/v1/tenants/a/jobs", job);
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.body.find("metadata.labels.aicloud/deployment"), std::string::npos) << r.body;
  job["metadata"]["labels"] = {{"team", "x"}};
  ASSERT_EQ(AdminSend("POST", "/api/v1/tenants/a/jobs", job).status, 201);
  json stored = json::parse(AdminSend("GET", "/api/v1/tenants/a/jobs/" + name).body);
  stored["metadata"]["labels"]["aicloud/port"] = "21000";
  r = AdminSend("PUT", "/api/v1/tenants/a/jobs/" + name, stored);
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.body.find("metadata.labels.aicloud/port"), std::string::npos) << r.body;
  // Other labels stay the caller's (read again: the job controller writes the Job's status).
  for (int tries = 0; tries < 20; ++tries) {  // compare-and-swap: again on a conflict
    stored = json::parse(AdminSend("GET", "/api/v1/tenants/a/jobs/" + name).body);
    stored["metadata"]["labels"]["team"] = "y";
    r = AdminSend("PUT", "/api/v1/tenants/a/jobs/" + name, stored);
    if (r.status != 409) break;
  }
  EXPECT_EQ(r.status, 200) << r.body;
}

TEST_F(ApiTest, CrossTenantJobListShowsOnlyVisibleTenants) {
  ASSERT_EQ(AdminSend("POST", "/api/v1/tenants/a/jobs", JobBody(Unique("va"))).status, 201);
  ASSERT_EQ(AdminSend("POST", "/api/v1/tenants/b/jobs", JobBody(Unique("vb"))).status, 201);
  for (int role : {kAdmin, kTenantAdmin, kDeveloper, kViewer}) {
    http::ClientResponse r = Send((*tokens_)[role], "GET", "/api/v1/jobs");
    ASSERT_EQ(r.status, 200) << kUsers[role] << ": " << r.body;
    std::set<std::string> tenants;
    const json list = json::parse(r.body);
    for (const json& j : list["items"]) tenants.insert(j["metadata"]["tenant"]);
    if (role == kAdmin) {
      EXPECT_EQ(tenants, (std::set<std::string>{"a", "b"})) << r.body.substr(0, 400);
    } else {
      EXPECT_EQ(tenants, (std::set<std::string>{"a"})) << kUsers[role];
    }
  }
}

TEST_F(ApiTest, TenantListShowsOnlyVisibleTenants) {
  auto names = [](const http::ClientResponse& r) {
    std::set<std::string> out;
    const json list = json::parse(r.body);
    for (const json& t : list["items"]) out.insert(t["metadata"]["name"]);
    return out;
  };
  http::ClientResponse all = Send((*tokens_)[kAdmin], "GET", "/api/v1/tenants");
  ASSERT_EQ(all.status, 200);
  EXPECT_TRUE(names(all).contains("a") && names(all).contains("b"));
  http::ClientResponse ta = Send((*tokens_)[kTenantAdmin], "GET", "/api/v1/tenants");
  ASSERT_EQ(ta.status, 200);
  EXPECT_EQ(names(ta), (std::set<std::string>{"a"}));
  for (int role : {kDeveloper, kViewer, kAgent, kNobody}) {
    http::ClientResponse r = Send((*tokens_)[role], "GET", "/api/v1/tenants");
    ASSERT_EQ(r.status, 200);
    EXPECT_TRUE(names(r).empty()) << kUsers[role] << ": " << r.body;
  }
}

// BUG: GET /api/v1/apikeys authorizes list on apikeys with tenant "" (ApiKey is a cluster-scoped
// kind), which a tenant binding never grants, so a developer or tenant-admin — whose roles grant
// list on apikeys so that they can see their own keys (auth.h: "Whether a developer lists/deletes
// only its *own* keys is for the API layer to filter by spec.user") — gets 403. The own-keys
// filter in Api::List is unreachable: it runs only after the same cluster-wide check passed.
// Expected: 200 with only the caller's own keys.
TEST_F(ApiTest, DeveloperListsOwnApiKeys) {
  for (int role : {kTenantAdmin, kDeveloper}) {
    http::ClientResponse r = Send((*tokens_)[role], "GET", "/api/v1/apikeys");
    ASSERT_EQ(r.status, 200) << kUsers[role] << ": " << r.body;
    json items = json::parse(r.body)["items"];
    EXPECT_FALSE(items.empty());
    for (const json& k : items) EXPECT_EQ(k["spec"]["user"], kUsers[role]);
  }
}

// api.h: agent heartbeat traffic (report) is not audited when allowed; registration is.
TEST_F(ApiTest, AgentRegistrationIsAuditedButHeartbeatsAreNot) {
  const std::string node = Unique("rep");
  http::ClientResponse reg = AdminSend("POST", "/api/v1/agent/nodes/" + node + "/register",
                                       json{{"spec", {{"cpuMillis", 1000}, {"memoryBytes", 1 << 30}}}});
  ASSERT_EQ(reg.status, 200);
  const std::string epoch = json::parse(reg.body)["epoch"];
  {
    std::vector<json> recs = AuditRecords();
    bool registered = false;
    for (const json& rec : recs) {
      registered |= rec["spec"].value("verb", "") == "register" && rec["spec"].value("name", "") == node;
    }
    EXPECT_TRUE(registered) << "registration must be audited";
  }
  const size_t before = AuditRecords().size();
  http::ClientResponse r = Send((*tokens_)[kAgent], "POST",
                                "/api/v1/agent/nodes/" + node + "/report?epoch=" + epoch,
                                R"({"metrics":{}})");
  ASSERT_EQ(r.status, 200) << r.body;
  std::vector<json> all = AuditRecords();
  bool found = false;
  for (size_t i = before; i < all.size(); ++i) {
    found |= all[i]["spec"].value("decision", "") == "allow" && all[i]["spec"].value("user", "") == "agentu";
  }
  EXPECT_FALSE(found) << "heartbeats are exempt from the audit log (api.h)";
}

// --- b. malformed requests --------------------------------------------------------------------

TEST_F(ApiTest, BadInputGetsJsonErrors) {
  const std::string job = Unique("bad");
  http::ClientResponse made = AdminSend("POST", "/api/v1/tenants/a/jobs", JobBody(job));
  ASSERT_EQ(made.status, 201) << made.body;
  const json made_job = json::parse(made.body);
  const std::string job_path = "/api/v1/tenants/a/jobs/" + job;

  auto job_with = [](const std::string& name, const json& spec) {
    return json{{"metadata", {{"name", name}}}, {"spec", spec}}.dump();
  };
  auto gpu_job = [&](const json& gpu) {
    return job_with(Unique("g"), {{"command", "x"}, {"resources", {{"gpu", gpu}}}});
  };
  json changed = made_job;
  changed["spec"]["command"] = json::array({"echo", "changed"});
  const std::string stale_rv = made_job["metadata"]["resourceVersion"].get<std::string>();
  // Move the job's resourceVersion on with an update that keeps the spec.
  json relabeled = made_job;
  relabeled["metadata"]["labels"] = {{"x", "y"}};
  relabeled["metadata"].erase("resourceVersion");  // unconditional: the scheduler may write too
  ASSERT_EQ(Send((*tokens_)[kAdmin], "PUT", job_path, relabeled.dump()).status, 200);

  // Logs are served once the control plane has picked the job up.
  for (int i = 0; i < 100 && AdminSend("GET", job_path + "/logs").status == 404; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }

  struct Case {
    std::string name, method, path, body;
    int status;
    std::string field;  // "" = not checked
  };
  const std::string jobs = "/api/v1/tenants/a/jobs";
  const std::vector<Case> cases = {
      {"invalid JSON", "POST", jobs, R"({"metadata": {"name": "x",)", 400, ""},
      {"JSON array of scalars", "POST", jobs, "[1, 2, 3]", 400, ""},
      {"two objects", "POST", jobs, "[" + JobBody("x1").dump() + "," + JobBody("x2").dump() + "]", 400, ""},
      {"empty body", "POST", jobs, "", 400, ""},
      {"YAML syntax error", "POST", jobs, "metadata:\n  name: x\n bad: [1, 2\nspec: {", 400, ""},
      {"workers wrong type", "POST", jobs, job_with("w1", {{"command", "x"}, {"workers", "two"}}), 400, "spec.workers"},
      {"command wrong type", "POST", jobs, job_with("c1", {{"command", 5}}), 400, "spec.command"},
      {"command missing", "POST", jobs, job_with("c2", json::object()), 400, "spec.command"},
      {"unknown top-level field", "POST", jobs,
       R"({"metadata":{"name":"u1"},"spec":{"command":"x"},"extra":1})", 400, "extra"},
      {"unknown spec field", "POST", jobs, job_with("u2", {{"command", "x"}, {"bogus", 1}}), 400, "spec.bogus"},
      {"wrong apiVersion", "POST", jobs,
       R"({"apiVersion":"v2","metadata":{"name":"u3"},"spec":{"command":"x"}})", 400, "apiVersion"},
      {"kind does not match URL", "POST", jobs,
       R"({"kind":"Tenant","metadata":{"name":"k1"},"spec":{"command":"x"}})", 400, "kind"},
      {"unknown kind in body", "POST", jobs,
       R"({"kind":"Widget","metadata":{"name":"k2"},"spec":{"command":"x"}})", 400, "kind"},
      {"metadata.tenant mismatch", "POST", jobs,
       R"({"metadata":{"name":"t1","tenant":"b"},"spec":{"command":"x"}})", 400, "metadata.tenant"},
      {"missing metadata.name", "POST", jobs, R"({"metadata":{},"spec":{"command":"x"}})", 400, "metadata.name"},
      {"missing metadata", "POST", jobs, R"({"spec":{"command":"x"}})", 400, "metadata"},
      {"invalid name", "POST", jobs, job_with("Bad_Name!", {{"command", "x"}}), 400, "metadata.name"},
      {"tenant does not exist", "POST", "/api/v1/tenants/nosuch/jobs", job_with("n1", {{"command", "x"}}), 404, "metadata.tenant"},
      {"gpu count 0", "POST", jobs, gpu_job({{"count", 0}}), 400, "spec.resources.gpu.count"},
      {"unknown MIG profile", "POST", jobs, gpu_job({{"profile", "9g.99gb"}}), 400, "spec.resources.gpu.profile"},
      {"fraction 1.5", "POST", jobs, gpu_job({{"fraction", 1.5}}), 400, "spec.resources.gpu.fraction"},
      {"count and fraction", "POST", jobs, gpu_job({{"count", 1}, {"fraction", 0.5}}), 400, "spec.resources.gpu"},
      {"body over 8 MiB", "POST", jobs, std::string((8 << 20) + 1024, ' '), 413, ""},
      {"limit=abc", "GET", jobs + "?limit=abc", "", 400, "limit"},
      {"logs worker=-1", "GET", job_path + "/logs?worker=-1", "", 400, "worker"},
      {"logs worker=abc", "GET", job_path + "/logs?worker=abc", "", 400, "worker"},
      {"PUT changes an immutable Job spec", "PUT", job_path, changed.dump(), 422, "spec"},
      {"PUT name mismatch", "PUT", job_path,
       R"({"metadata":{"name":"other"},"spec":{"command":"x"}})", 400, "metadata.name"},
      {"DELETE with stale resourceVersion", "DELETE", job_path + "?resourceVersion=" + stale_rv, "", 409, ""},
      {"DELETE with resourceVersion=abc", "DELETE", job_path + "?resourceVersion=abc", "", 400, "resourceVersion"},
      {"unknown route", "GET", "/api/v1/tenants/a/jobs/x/y/z", "", 404, ""},
      {"unknown resource", "GET", "/api/v1/widgets", "", 404, ""},
      {"cluster-scoped kind under a tenant", "GET", "/api/v1/tenants/a/nodes", "", 404, ""},
      {"wrong method", "PATCH", "/api/v1/tenants/a/jobs", "{}", 405, ""},
      {"wrong method on a collection", "DELETE", "/api/v1/tenants/a/jobs", "", 405, ""},
      {"server-written kind", "POST", "/api/v1/tenants/a/events",
       R"({"metadata":{"name":"e1"},"spec":{}})", 405, ""},
      {"usage since=abc", "GET", "/api/v1/usage?since=abc", "", 400, ""},
      {"apikey unknown field", "POST", "/api/v1/apikeys", R"({"color":"red"})", 400, "color"},
      {"apikey negative expiry", "POST", "/api/v1/apikeys", R"({"expiresInSeconds":-5})", 400, "expiresInSeconds"},
      {"apikey wrong type", "POST", "/api/v1/apikeys", R"({"roles":"viewer"})", 400, ""},
  };
  for (const Case& c : cases) {
    http::ClientResponse r = Send((*tokens_)[kAdmin], c.method, c.path, c.body);
    EXPECT_EQ(r.status, c.status) << c.name << ": " << r.body.substr(0, 500);
    json body = json::parse(r.body, nullptr, /*allow_exceptions=*/false);
    ASSERT_TRUE(body.is_object()) << c.name << ": body is not JSON: " << r.body.substr(0, 200);
    ASSERT_TRUE(body.contains("error") && body["error"].is_object()) << c.name << ": " << r.body;
    EXPECT_TRUE(body["error"]["code"].is_string()) << c.name << ": " << r.body;
    EXPECT_TRUE(body["error"]["message"].is_string()) << c.name << ": " << r.body;
    if (!c.field.empty()) {
      EXPECT_EQ(body["error"].value("field", ""), c.field) << c.name << ": " << r.body;
    }
    http::ClientResponse health = Send("", "GET", "/healthz");
    ASSERT_EQ(health.status, 200) << "after " << c.name;
  }
  // The job is untouched by all of the above.
  http::ClientResponse after = AdminSend("GET", job_path);
  ASSERT_EQ(after.status, 200);
  EXPECT_EQ(json::parse(after.body)["spec"], made_job["spec"]);
}

// --- c. optimistic concurrency ----------------------------------------------------------------

TEST_F(ApiTest, ConcurrentTenantUpdateConflicts) {
  const std::string name = Unique("occ");
  ASSERT_EQ(AdminSend("POST", "/api/v1/tenants", json{{"metadata", {{"name", name}}}}).status, 201);
  http::ClientResponse got = AdminSend("GET", "/api/v1/tenants/" + name);
  ASSERT_EQ(got.status, 200);
  json t = json::parse(got.body);
  ASSERT_TRUE(t["metadata"].contains("resourceVersion"));
  json first = t, second = t;
  first["spec"]["displayName"] = "first";
  second["spec"]["displayName"] = "second";
  http::ClientResponse w1 = AdminSend("PUT", "/api/v1/tenants/" + name, first);
  EXPECT_EQ(w1.status, 200) << w1.body;
  http::ClientResponse w2 = AdminSend("PUT", "/api/v1/tenants/" + name, second);
  EXPECT_EQ(w2.status, 409) << w2.body;
  EXPECT_EQ(json::parse(w2.body)["error"]["code"], "aborted");
  http::ClientResponse now = AdminSend("GET", "/api/v1/tenants/" + name);
  EXPECT_EQ(json::parse(now.body)["spec"]["displayName"], "first");
  // Delete with the stale version conflicts too; with the current one it goes through.
  EXPECT_EQ(AdminSend("DELETE", "/api/v1/tenants/" + name + "?resourceVersion=" +
                                    t["metadata"]["resourceVersion"].get<std::string>()).status, 409);
  EXPECT_EQ(AdminSend("DELETE", "/api/v1/tenants/" + name + "?resourceVersion=" +
                                    json::parse(now.body)["metadata"]["resourceVersion"].get<std::string>())
                .status,
            200);
}

// --- d. watch ---------------------------------------------------------------------------------

TEST_F(ApiTest, WatchSeesJobCreatedLater) {
  http::ClientResponse list = AdminSend("GET", "/api/v1/tenants/a/jobs");
  ASSERT_EQ(list.status, 200);
  const std::string rv = json::parse(list.body)["metadata"]["resourceVersion"];
  const std::string name = Unique("watched");
  // A job in tenant b must not show up in a watch of tenant a.
  const std::string other = Unique("unwatched");

  std::atomic<bool> started{false};
  std::thread creator([&] {
    for (int i = 0; i < 200 && !started; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_EQ(AdminSend("POST", "/api/v1/tenants/b/jobs", JobBody(other)).status, 201);
    EXPECT_EQ(AdminSend("POST", "/api/v1/tenants/a/jobs", JobBody(name)).status, 201);
  });

  http::Client c(server_->url(), {.timeout = std::chrono::milliseconds(5000)});
  http::SseParser sse;
  bool seen = false, saw_other = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  http::ClientResponse head;
  Status st = c.Stream(
      "GET", "/api/v1/tenants/a/jobs?watch=true&resourceVersion=" + rv, "",
      {{"Authorization", "Bearer " + (*tokens_)[kDeveloper]}},
      [&](std::string_view bytes) {
        started = true;
        for (const http::SseEvent& e : sse.Feed(bytes)) {
          json d = json::parse(e.data, nullptr, false);
          if (!d.is_object() || !d.contains("object")) continue;
          const std::string n = d["object"]["metadata"].value("name", "");
          if (n == other) saw_other = true;
          if (e.event == "ADDED" && d["type"] == "ADDED" && n == name) seen = true;
        }
        return !seen && std::chrono::steady_clock::now() < deadline;
      },
      &head);
  started = true;
  creator.join();
  EXPECT_EQ(head.status, 200);
  EXPECT_TRUE(seen) << "no ADDED event within 2 s: " << st.ToString();
  EXPECT_FALSE(saw_other);
}

// --- e. the gateway protocol -------------------------------------------------------------------

class GatewayProtocolTest : public ApiTest {
 protected:
  static std::string NewGatewayToken() {
    const std::string user = Unique("edge");
    EXPECT_EQ(AdminSend("POST", "/api/v1/users", json{{"metadata", {{"name", user}}}}).status, 201);
    EXPECT_EQ(AdminSend("POST", "/api/v1/rolebindings",
                        json{{"metadata", {{"name", user + "-gw"}}}, {"spec", {{"role", "gateway"}, {"subjects", {user}}}}})
                  .status,
              201);
    http::ClientResponse k = AdminSend("POST", "/api/v1/apikeys", json{{"user", user}});
    EXPECT_EQ(k.status, 201) << k.body;
    return json::parse(k.body).value("token", "");
  }
  static std::string IdOf(const std::string& token) { return token.substr(4, 12); }
  static const json* KeyIn(const json& doc, const std::string& id) {
    for (const json& k : doc["keys"]) {
      if (k["id"] == id) return &k;
    }
    return nullptr;
  }
};

TEST_F(GatewayProtocolTest, ConfigCarriesKeysByDigestAndTenantsAndOnlyTheGatewayRoleReadsIt) {
  const std::string gw = NewGatewayToken();
  http::ClientResponse r = Send(gw, "GET", "/api/v1/gateway/config");
  ASSERT_EQ(r.status, 200) << r.body;
  json doc = json::parse(r.body);
  EXPECT_EQ(doc["version"].get<std::string>().size(), 16u);
  EXPECT_TRUE(doc["routes"].is_array());
  // The admin key may call every model; ta's key is unrestricted but ta reads deployments in
  // tenant a only, so it calls no model through a gateway (as at the server's front door).
  const json* admin = KeyIn(doc, IdOf((*tokens_)[kAdmin]));
  const json* ta = KeyIn(doc, IdOf((*tokens_)[kTenantAdmin]));
  ASSERT_NE(admin, nullptr);
  ASSERT_NE(ta, nullptr);
  EXPECT_TRUE((*admin)["allModels"].get<bool>());
  EXPECT_FALSE((*ta)["allModels"].get<bool>());
  EXPECT_FALSE(ta->contains("tenant"));
  // Digests only: the hash is sha256 hex of the secret, and no secret is in the answer.
  EXPECT_EQ((*admin)["hash"], auth::Sha256Hex((*tokens_)[kAdmin].substr(17)));
  for (const std::string& t : *tokens_) EXPECT_EQ(r.body.find(t.substr(17)), std::string::npos);
  EXPECT_TRUE(doc["tenants"].contains("a"));
  EXPECT_TRUE(doc["tenants"].contains("b"));

  // A tenant-restricted key carries its tenant; a revoked key leaves the list.
  http::ClientResponse k = AdminSend("POST", "/api/v1/apikeys", json{{"user", "dev"}, {"tenant", "a"}});
  ASSERT_EQ(k.status, 201);
  const std::string dev_a = json::parse(k.body)["token"];
  doc = json::parse(Send(gw, "GET", "/api/v1/gateway/config").body);
  ASSERT_NE(KeyIn(doc, IdOf(dev_a)), nullptr);
  EXPECT_EQ((*KeyIn(doc, IdOf(dev_a)))["tenant"], "a");
  ASSERT_EQ(AdminSend("DELETE", "/api/v1/apikeys/" + IdOf(dev_a)).status, 200);
  doc = json::parse(Send(gw, "GET", "/api/v1/gateway/config").body);
  EXPECT_EQ(KeyIn(doc, IdOf(dev_a)), nullptr);

  // Nobody else: not a tenant admin, a developer, a viewer or an agent.
  for (int role : {kTenantAdmin, kDeveloper, kViewer, kAgent, kNobody}) {
    EXPECT_EQ(Send((*tokens_)[role], "GET", "/api/v1/gateway/config").status, 403) << kUsers[role];
    EXPECT_EQ(Send((*tokens_)[role], "POST", "/api/v1/gateway/signals", R"({"deployments": []})").status, 403);
    EXPECT_EQ(Send((*tokens_)[role], "GET", "/api/v1/gateway/objects/GatewayRate").status, 403);
  }
  EXPECT_EQ(Send("", "GET", "/api/v1/gateway/config").status, 401);
}

TEST_F(GatewayProtocolTest, ConfigLongPollsUntilTheStateChanges) {
  const std::string gw = NewGatewayToken();
  const std::string v = json::parse(Send(gw, "GET", "/api/v1/gateway/config").body)["version"];
  // Unchanged: the answer comes after the wait, with the same version.
  auto t0 = std::chrono::steady_clock::now();
  http::ClientResponse same = Send(gw, "GET", "/api/v1/gateway/config?version=" + v + "&waitMs=300");
  ASSERT_EQ(same.status, 200);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(290));
  // Other tests of the suite may change the state meanwhile; this one's change must show.
  const std::string tenant = Unique("limited");
  std::thread changer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    EXPECT_EQ(AdminSend("POST", "/api/v1/tenants",
                        json{{"metadata", {{"name", tenant}}}, {"spec", {{"serving", {{"rpm", 7}}}}}})
                  .status,
              201);
  });
  t0 = std::chrono::steady_clock::now();
  std::string seen = v;
  json doc;
  for (int i = 0; i < 20; ++i) {  // until the answer has the new tenant (each answer is a change)
    http::ClientResponse r = Send(gw, "GET", "/api/v1/gateway/config?version=" + seen + "&waitMs=10000");
    ASSERT_EQ(r.status, 200);
    doc = json::parse(r.body);
    if (doc["tenants"].contains(tenant)) break;
    ASSERT_NE(doc["version"], seen) << "an answer before the wait ended must carry a new version";
    seen = doc["version"];
  }
  changer.join();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  ASSERT_TRUE(doc["tenants"].contains(tenant));
  EXPECT_EQ(doc["tenants"][tenant]["rpm"], 7);
  EXPECT_EQ(Send(gw, "GET", "/api/v1/gateway/config?waitMs=soon").status, 400);
}

TEST_F(GatewayProtocolTest, LongPollsHoldAFewWorkersAtMostAndLeaveWithTheirClient) {
  // This server has 4 workers, so one poll at a time may wait; the API stays served.
  const std::string gw = NewGatewayToken();
  const std::string v = json::parse(Send(gw, "GET", "/api/v1/gateway/config").body)["version"];
  const std::string target = "/api/v1/gateway/config?version=" + v + "&waitMs=";
  http::CancelSignal leave;
  std::atomic<bool> a_done{false};
  std::thread a([&] {
    http::Client c(server_->url(), {.timeout = std::chrono::milliseconds(20000)});
    (void)c.Send("GET", target + "8000", "", {{"Authorization", "Bearer " + gw}}, &leave);
    a_done = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  // Over the limit: answered at once, with the state as it is.
  auto t0 = std::chrono::steady_clock::now();
  http::ClientResponse b = Send(gw, "GET", target + "5000");
  EXPECT_EQ(b.status, 200);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(1500));
  EXPECT_EQ(AdminSend("GET", "/api/v1/tenants").status, 200);
  // The first poll's client leaves: its worker is free again within the server's check of
  // departed clients, long before its 8 s were up, and a new poll waits again.
  leave.Cancel();
  bool waited = false;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!waited && std::chrono::steady_clock::now() < until) {
    t0 = std::chrono::steady_clock::now();
    ASSERT_EQ(Send(gw, "GET", target + "700").status, 200);
    waited = std::chrono::steady_clock::now() - t0 >= std::chrono::milliseconds(600);
  }
  EXPECT_TRUE(waited) << "the departed poll kept its waiting slot";
  a.join();
  EXPECT_TRUE(a_done);
}

TEST_F(GatewayProtocolTest, SignalsAndObjectsRefuseBadInputNamingTheField) {
  const std::string gw = NewGatewayToken();
  auto error_of = [&](const std::string& method, const std::string& path, const std::string& body) {
    http::ClientResponse r = Send(gw, method, path, body);
    EXPECT_EQ(r.status, 400) << path << " " << body << ": " << r.body;
    json j = json::parse(r.body, nullptr, false);
    return j.is_object() ? j["error"].value("message", "") : r.body;
  };
  EXPECT_NE(error_of("POST", "/api/v1/gateway/signals", R"({"deployments": 3})").find("deployments"), std::string::npos);
  EXPECT_NE(error_of("POST", "/api/v1/gateway/signals", R"({"deployments": [{"name": "solo"}]})").find("deployments[0].name"),
            std::string::npos);
  EXPECT_NE(error_of("POST", "/api/v1/gateway/signals", R"({"deployments": [{"name": "a/x", "arrivals": -1}]})")
                .find("deployments[0].arrivals"),
            std::string::npos);
  EXPECT_NE(error_of("POST", "/api/v1/gateway/signals", R"({"deployments": [{"name": "a/x", "heldd": 1}]})")
                .find("unknown field"),
            std::string::npos);
  // Well formed, for a deployment nobody serves: accepted and skipped.
  EXPECT_EQ(Send(gw, "POST", "/api/v1/gateway/signals", R"({"deployments": [{"name": "a/none", "arrivals": 2, "active": true, "held": 1}]})")
                .status,
            200);

  // Only the gateways' own kinds are reachable.
  EXPECT_NE(error_of("GET", "/api/v1/gateway/objects/Job", "").find("only GatewayBudget, GatewayRate and ServingUsage"), std::string::npos);
  EXPECT_NE(error_of("POST", "/api/v1/gateway/objects",
                     R"({"ops": [{"op": "create", "object": {"apiVersion": "aicloud/v1", "kind": "Tenant", "metadata": {"name": "sneaky"}}}]})")
                .find("only GatewayBudget"),
            std::string::npos);
  EXPECT_EQ(AdminSend("GET", "/api/v1/tenants/sneaky").status, 404);
  EXPECT_NE(error_of("POST", "/api/v1/gateway/objects", R"({"ops": [{"op": "upsert"}]})").find("ops[0].op"), std::string::npos);
  EXPECT_NE(error_of("POST", "/api/v1/gateway/objects", R"({"ops": []})").find("ops"), std::string::npos);
}

TEST_F(GatewayProtocolTest, ObjectsCommitWithOptimisticConcurrency) {
  const std::string gw = NewGatewayToken();
  const std::string name = Unique("rate");
  json obj = {{"apiVersion", "aicloud/v1"}, {"kind", "GatewayRate"}, {"metadata", {{"name", name}}},
              {"spec", {{"n", 1}}}};
  http::ClientResponse c = Send(gw, "POST", "/api/v1/gateway/objects", json{{"ops", {{{"op", "create"}, {"object", obj}}}}}.dump());
  ASSERT_EQ(c.status, 200) << c.body;
  json created = json::parse(c.body)["objects"][0];
  const int64_t rv = std::stoll(created["metadata"]["resourceVersion"].get<std::string>());
  // Creating it again: 409 already_exists.
  http::ClientResponse again = Send(gw, "POST", "/api/v1/gateway/objects", json{{"ops", {{{"op", "create"}, {"object", obj}}}}}.dump());
  EXPECT_EQ(http::StatusOfResponse(again).code(), StatusCode::kAlreadyExists) << again.body;
  // An update at the current version goes through; at the old one it is ABORTED.
  created["spec"]["n"] = 2;
  auto update = [&](int64_t expected) {
    return Send(gw, "POST", "/api/v1/gateway/objects",
                json{{"ops", {{{"op", "update"}, {"object", created}, {"expectedResourceVersion", expected}}}}}.dump());
  };
  ASSERT_EQ(update(rv).status, 200);
  http::ClientResponse stale = update(rv);
  EXPECT_EQ(stale.status, 409);
  EXPECT_EQ(http::StatusOfResponse(stale).code(), StatusCode::kAborted) << stale.body;
  // Read back one and as a list.
  http::ClientResponse got = Send(gw, "GET", "/api/v1/gateway/objects/GatewayRate/" + name + "?tenant=");
  ASSERT_EQ(got.status, 200) << got.body;
  EXPECT_EQ(json::parse(got.body)["spec"]["n"], 2);
  http::ClientResponse list = Send(gw, "GET", "/api/v1/gateway/objects/GatewayRate?limit=500");
  ASSERT_EQ(list.status, 200);
  bool found = false;
  const json page = json::parse(list.body);
  for (const json& o : page["items"]) found = found || o["metadata"]["name"] == name;
  EXPECT_TRUE(found) << list.body;
  EXPECT_EQ(http::StatusOfResponse(Send(gw, "GET", "/api/v1/gateway/objects/GatewayRate/nope-" + name)).code(),
            StatusCode::kNotFound);
  // Deleted.
  EXPECT_EQ(Send(gw, "POST", "/api/v1/gateway/objects",
                 json{{"ops", {{{"op", "delete"}, {"key", {{"kind", "GatewayRate"}, {"tenant", ""}, {"name", name}}}}}}}.dump())
                .status,
            200);
  EXPECT_EQ(Send(gw, "GET", "/api/v1/gateway/objects/GatewayRate/" + name).status, 404);
}

TEST_F(ApiTest, UsageAddsTheGatewaysServingUsageWithinTheWindow) {
  auto day = [](int days_ago) {
    const std::time_t t = std::time(nullptr) - days_ago * 86400;
    std::tm tm{};
    gmtime_r(&t, &tm);
    char b[16];
    std::strftime(b, sizeof b, "%Y-%m-%d", &tm);
    return std::string(b);
  };
  auto put = [&](const std::string& tenant, const std::string& d, int64_t requests, int64_t prompt) {
    json o = {{"apiVersion", "aicloud/v1"},
              {"kind", "ServingUsage"},
              {"metadata", {{"tenant", tenant}, {"name", d}}},
              {"spec", {{"day", d}}},
              {"status", {{"models", {{"chat", {{"requests", requests}, {"errors", 1}, {"promptTokens", prompt},
                                                {"completionTokens", 5}, {"cost", 0.25}}},
                                      {"odd", "not an object"}}}}}};
    ASSERT_TRUE(server_->store()->Create(o).ok());
  };
  put("a", day(0), 7, 100);
  put("a", day(30), 1000, 1000);  // outside a 7-day window
  put("b", day(1), 3, 30);
  // Objects edited by hand: a null status, counts of the wrong type or size. The report stays.
  ASSERT_TRUE(server_->store()
                  ->Create({{"apiVersion", "aicloud/v1"}, {"kind", "ServingUsage"},
                            {"metadata", {{"tenant", "a"}, {"name", day(2)}}}, {"status", nullptr}})
                  .ok());
  json odd = json::parse(R"({"apiVersion": "aicloud/v1", "kind": "ServingUsage", "metadata": {"tenant": "b"},
      "status": {"models": {"chat": {"requests": "many", "promptTokens": 2.0, "completionTokens": -4}}}})");
  odd["metadata"]["name"] = day(3);
  ASSERT_TRUE(server_->store()->Create(odd).ok());
  http::ClientResponse r = AdminSend("GET", "/api/v1/usage?tenant=a&since=7d");
  ASSERT_EQ(r.status, 200) << r.body;
  const json a = json::parse(r.body)["tenants"]["a"]["serving"];
  EXPECT_EQ(a["requests"], 7);
  EXPECT_EQ(a["errors"], 1);
  EXPECT_EQ(a["promptTokens"], 100);
  EXPECT_EQ(a["completionTokens"], 5);
  EXPECT_DOUBLE_EQ(a["cost"].get<double>(), 0.25);
  EXPECT_EQ(a["models"]["chat"]["requests"], 7);
  EXPECT_FALSE(a["models"].contains("odd"));
  EXPECT_FALSE(json::parse(r.body)["tenants"].contains("b"));
  // Every tenant, a longer window.
  const json all = json::parse(AdminSend("GET", "/api/v1/usage?since=60d").body)["tenants"];
  EXPECT_EQ(all["a"]["serving"]["requests"], 1007);
  EXPECT_EQ(all["b"]["serving"]["promptTokens"], 32);   // 30, and the integral float 2.0
  EXPECT_EQ(all["b"]["serving"]["requests"], 3);        // "many" counts as nothing
  EXPECT_EQ(all["b"]["serving"]["completionTokens"], 5);  // a negative count as nothing
  EXPECT_EQ(json::parse(r.body)["servingSince"], day(7));  // whole days from the window's first
  // A developer of tenant a reads a's usage, not b's.
  EXPECT_EQ(Send((*tokens_)[kDeveloper], "GET", "/api/v1/usage?tenant=a").status, 200);
  EXPECT_EQ(Send((*tokens_)[kDeveloper], "GET", "/api/v1/usage?tenant=b").status, 403);
}

TEST_F(ApiTest, AKeyForATenantThatDoesNotExistIsRefused) {
  http::ClientResponse r = AdminSend("POST", "/api/v1/apikeys", json{{"user", "dev"}, {"tenant", "nosuch"}});
  EXPECT_EQ(r.status, 404) << r.body;
  EXPECT_EQ(json::parse(r.body)["error"]["message"], "tenant \"nosuch\" not found") << r.body;
  EXPECT_EQ(AdminSend("POST", "/api/v1/apikeys", json{{"user", "dev"}, {"tenant", "Not.Valid"}}).status / 100, 4);
}

// --- manifest parser under random mutation (the fuzz target's path, without clang) ------------

TEST(ManifestMutationTest, CorpusAndMutationsNeverCrash) {
  std::vector<std::string> seeds;
  const fs::path corpus = fs::path(AICLOUD_SOURCE_DIR) / "fuzz" / "corpus";
  ASSERT_TRUE(fs::is_directory(corpus)) << corpus;
  for (const auto& e : fs::directory_iterator(corpus)) {
    std::ifstream in(e.path(), std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    seeds.push_back(ss.str());
  }
  ASSERT_GE(seeds.size(), 8u);
  auto feed = [](const std::string& text) {
    StatusOr<std::vector<Manifest>> docs = ParseManifests(text, "fuzz");
    if (!docs.ok()) {
      EXPECT_FALSE(docs.status().message().empty());
      return 0;
    }
    int valid = 0;
    for (const Manifest& m : *docs) {
      Status st = ValidateObject(m.object);
      if (st.ok()) ++valid;
      (void)ValidationFieldOf(st);
    }
    return valid;
  };
  int valid_seeds = 0;
  for (const std::string& s : seeds) valid_seeds += feed(s) > 0;
  EXPECT_GT(valid_seeds, 0);

  std::mt19937 rng(20261122);
  const std::string tokens[] = {":",  "- ", "{",  "}",  "[", "]",  "\"", "'", "&a ", "*a",
                                "\n", "  ", "---\n", "!!str ", "~", "null", "-1", "1e308", "#", ","};
  int valid = 0;
  for (int i = 0; i < 4000; ++i) {
    std::string s = seeds[rng() % seeds.size()];
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const size_t pos = s.empty() ? 0 : rng() % (s.size() + 1);
      switch (rng() % 5) {
        case 0: if (!s.empty() && pos < s.size()) s[pos] = static_cast<char>(rng() % 256); break;
        case 1: s.insert(pos, tokens[rng() % std::size(tokens)]); break;
        case 2: if (pos < s.size()) s.erase(pos, 1 + rng() % 8); break;
        case 3: {
          const std::string& o = seeds[rng() % seeds.size()];
          const size_t from = o.empty() ? 0 : rng() % o.size();
          s.insert(pos, o.substr(from, rng() % 40));
          break;
        }
        default: if (!s.empty()) s.resize(rng() % s.size()); break;
      }
    }
    valid += feed(s) > 0;
  }
  // Some mutations leave valid documents; most do not.
  EXPECT_GT(valid, 0);
  EXPECT_LT(valid, 4000);
}

}  // namespace
}  // namespace aicloud::control
