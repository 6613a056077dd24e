#include "auth/auth.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <condition_variable>
#include <future>
#include <mutex>
#include <regex>
#include <thread>

#include "auth/util.h"
#include "core/clock.h"
#include "store/memory_store.h"

namespace aicloud::auth {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;

json Obj(const std::string& kind, const std::string& tenant, const std::string& name, json spec) {
  json o = {{"apiVersion", "aicloud/v1"},
            {"kind", kind},
            {"metadata", {{"name", name}}},
            {"spec", std::move(spec)}};
  if (!tenant.empty()) o["metadata"]["tenant"] = tenant;
  return o;
}

class AuthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    StatusOr<std::optional<std::string>> t = auth.Bootstrap();
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    ASSERT_TRUE(t->has_value());
    admin_token = **t;
  }
  void AddUser(const std::string& name) {
    ASSERT_TRUE(store.Create(Obj("User", "", name, json::object())).ok());
  }
  void Bind(const std::string& name, const std::string& tenant, const std::string& role,
            std::vector<std::string> subjects) {
    StatusOr<json> b =
        store.Create(Obj("RoleBinding", tenant, name, {{"role", role}, {"subjects", subjects}}));
    ASSERT_TRUE(b.ok()) << b.status().ToString();
  }
  Principal Admin() {
    StatusOr<Principal> p = auth.Authenticate(admin_token);
    EXPECT_TRUE(p.ok());
    return p.ok() ? *p : Principal{};
  }
  // The principal of a fresh key for `user` (created by the admin).
  Principal KeyFor(const std::string& user, std::optional<std::string> tenant,
                   std::vector<std::string> roles) {
    StatusOr<AuthService::CreatedKey> k =
        auth.CreateApiKey(Admin(), user, std::move(tenant), std::move(roles), std::nullopt);
    EXPECT_TRUE(k.ok()) << k.status().ToString();
    if (!k.ok()) return {};
    StatusOr<Principal> p = auth.Authenticate(k->token);
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    return p.ok() ? *p : Principal{};
  }

  store::MemoryStore store;
  FakeClock clock{1'000'000};
  AuthService auth{&store, &clock};
  std::string admin_token;
};

TEST(CryptoTest, Sha256AndRandom) {
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  std::optional<Sha256Digest> abc = Sha256("abc");  // the same digest as bytes, on a reused context
  ASSERT_TRUE(abc.has_value());
  EXPECT_EQ((*abc)[0], 0xba);
  EXPECT_EQ((*abc)[31], 0xad);
  EXPECT_EQ(Sha256("abc"), abc);
  EXPECT_NE(Sha256("abd"), abc);
  std::string a = RandomHex(32), b = RandomHex(32);
  EXPECT_EQ(a.size(), 64u);
  EXPECT_NE(a, b);
  EXPECT_TRUE(std::regex_match(a, std::regex("[0-9a-f]{64}")));
  EXPECT_EQ(RandomHex(0), "");
}

TEST(CryptoTest, HmacSha256) {
  // RFC 4231, test cases 1 and 2.
  EXPECT_EQ(HmacSha256Hex(std::string(20, '\x0b'), "Hi There"),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  EXPECT_EQ(HmacSha256Hex("Jefe", "what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  EXPECT_NE(HmacSha256Hex("Jefe", "what do ya want for nothing!"), HmacSha256Hex("Jefe", "what do ya want for nothing?"));
}

TEST(TimeTest, Rfc3339RoundTrip) {
  using namespace std::chrono;
  auto t = internal::ParseRfc3339("2024-05-01T12:34:56Z");
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(duration_cast<seconds>(t->time_since_epoch()).count(), 1714566896);
  EXPECT_EQ(internal::FormatRfc3339(*t, false), "2024-05-01T12:34:56Z");
  EXPECT_EQ(internal::FormatRfc3339(*t + milliseconds(7), true), "2024-05-01T12:34:56.007Z");
  auto off = internal::ParseRfc3339("2024-05-01T14:34:56.5+02:00");
  ASSERT_TRUE(off.has_value());
  EXPECT_EQ(*off - *t, milliseconds(500));
  for (const char* bad : {"", "2024-05-01", "2024-05-01T12:34:56", "2024-13-01T00:00:00Z",
                          "2024-05-01T12:34:56Zjunk", "2024-05-01T12:34:56+0200"}) {
    EXPECT_FALSE(internal::ParseRfc3339(bad).has_value()) << bad;
  }
}

TEST_F(AuthTest, TokenFormatAndOnlyTheHashIsStored) {
  std::smatch m;
  ASSERT_TRUE(std::regex_match(admin_token, m, std::regex("aic_([0-9a-f]{12})_([0-9a-f]{64})")))
      << admin_token;
  std::string id = m[1], secret = m[2];
  StatusOr<json> key = store.Get({"ApiKey", "", id});
  ASSERT_TRUE(key.ok());
  EXPECT_EQ((*key)["spec"]["hash"], Sha256Hex(secret));
  EXPECT_EQ((*key)["spec"]["user"], "admin");
  EXPECT_EQ((*key)["spec"]["revoked"], false);
  // Neither the secret nor the token appears anywhere in the store.
  StatusOr<store::ListResult> all = store.List({.kind = "ApiKey"});
  ASSERT_TRUE(all.ok());
  for (const json& o : all->items) {
    EXPECT_EQ(o.dump().find(secret), std::string::npos);
  }
  StatusOr<AuthService::CreatedKey> k = auth.CreateApiKey(Admin(), "admin", "a", {}, std::nullopt);
  ASSERT_TRUE(k.ok());
  EXPECT_EQ(k->token.substr(0, 17), "aic_" + k->id + "_");
  EXPECT_EQ(k->object.dump().find(k->token.substr(17)), std::string::npos);
  EXPECT_EQ(k->object["spec"]["hash"], Sha256Hex(k->token.substr(17)));
}

TEST_F(AuthTest, BootstrapOnlyOnce) {
  StatusOr<std::optional<std::string>> again = auth.Bootstrap();
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->has_value());
  AuthService other(&store, &clock);  // a later process start
  again = other.Bootstrap();
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->has_value());

  StatusOr<Principal> admin = other.Authenticate("Bearer " + admin_token);
  ASSERT_TRUE(admin.ok()) << admin.status().ToString();
  EXPECT_EQ(admin->user, "admin");
  EXPECT_FALSE(admin->key_tenant.has_value());
  EXPECT_TRUE(admin->key_roles.empty());
  for (const char* role : {"cluster-admin", "tenant-admin", "developer", "viewer", "agent", "gateway"}) {
    StatusOr<json> r = store.Get({"Role", "", role});
    ASSERT_TRUE(r.ok()) << role;
    EXPECT_EQ(r->at("metadata").at("labels").at("aicloud/builtin"), "true");
  }
  Decision d = other.Authorize(*admin, "cordon", "nodes", "");
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.reason, "allowed by RoleBinding admin-cluster-admin (role cluster-admin)");
  EXPECT_GT(d.policy_revision, 0);

  // Built-ins are upserted: a deleted or edited built-in role comes back as shipped.
  ASSERT_TRUE(store.Delete({"Role", "", "viewer"}, 0).ok());
  StatusOr<json> dev = store.Get({"Role", "", "developer"});
  (*dev)["spec"]["rules"] = json::array();
  ASSERT_TRUE(store.Update(*dev, 0).ok());
  ASSERT_TRUE(other.Bootstrap().ok());
  EXPECT_TRUE(store.Get({"Role", "", "viewer"}).ok());
  EXPECT_FALSE(store.Get({"Role", "", "developer"})->at("spec").at("rules").empty());

  // A role an operator made under a built-in's name before an upgrade brought that built-in
  // (no built-in label) is left as it is.
  ASSERT_TRUE(store.Delete({"Role", "", "gateway"}, 0).ok());
  ASSERT_TRUE(store.Create({{"apiVersion", "aicloud/v1"}, {"kind", "Role"}, {"metadata", {{"name", "gateway"}}},
                            {"spec", {{"rules", json::array({{{"verbs", {"get"}}, {"resources", {"nodes"}}}})}}}})
                  .ok());
  ASSERT_TRUE(other.Bootstrap().ok());
  StatusOr<json> mine = store.Get({"Role", "", "gateway"});
  ASSERT_TRUE(mine.ok());
  EXPECT_EQ(mine->at("spec").at("rules")[0].at("resources")[0], "nodes");
  EXPECT_FALSE(mine->at("metadata").contains("labels"));
  EXPECT_EQ(other.BuiltinRolesLeftAlone(), std::vector<std::string>{"gateway"});
}

TEST_F(AuthTest, Authenticate) {
  StatusOr<AuthService::CreatedKey> revoked =
      auth.CreateApiKey(Admin(), "admin", std::nullopt, {}, std::nullopt);
  StatusOr<AuthService::CreatedKey> expiring = auth.CreateApiKey(
      Admin(), "admin", std::nullopt, {}, std::chrono::system_clock::now() + std::chrono::hours(1));
  ASSERT_TRUE(revoked.ok() && expiring.ok());
  ASSERT_TRUE(auth.Authenticate(revoked->token).ok());  // warms the cache
  ASSERT_TRUE(auth.RevokeApiKey(revoked->id).ok());
  EXPECT_TRUE(auth.RevokeApiKey(revoked->id).ok());  // idempotent
  EXPECT_EQ(auth.RevokeApiKey("000000000000").code(), StatusCode::kNotFound);
  ASSERT_TRUE(auth.Authenticate(expiring->token).ok());
  clock.Advance(2 * 3600 * kMicrosPerSecond);

  std::string wrong_secret = admin_token.substr(0, 17) + std::string(64, 'a');
  std::string unknown_id = "aic_000000000000_" + admin_token.substr(17);
  struct Case {
    std::string header;
    std::string want;  // "" = authenticates as admin
  } cases[] = {
      {admin_token, ""},
      {"Bearer " + admin_token, ""},
      {"bearer   " + admin_token + " ", ""},
      {unknown_id, "unknown key"},
      {wrong_secret, "unknown key"},
      {revoked->token, "key revoked"},
      {expiring->token, "key expired"},
      {"", "malformed token"},
      {"Bearer", "malformed token"},
      {"Bearer ", "malformed token"},
      {"Basic " + admin_token, "malformed token"},
      {"aic_", "malformed token"},
      {admin_token.substr(0, admin_token.size() - 1), "malformed token"},
      {admin_token + "0", "malformed token"},
      {"sk_" + admin_token.substr(3), "malformed token"},
      {"aic_" + admin_token.substr(4, 12) + "-" + admin_token.substr(17), "malformed token"},
      {"aic_ABCDEF012345_" + admin_token.substr(17), "malformed token"},
  };
  for (const Case& c : cases) {
    StatusOr<Principal> p = auth.Authenticate(c.header);
    if (c.want.empty()) {
      ASSERT_TRUE(p.ok()) << c.header << ": " << p.status().ToString();
      EXPECT_EQ(p->user, "admin");
      EXPECT_EQ(p->key_id, admin_token.substr(4, 12));
    } else {
      ASSERT_FALSE(p.ok()) << c.header;
      EXPECT_EQ(p.status().code(), StatusCode::kUnauthenticated) << c.header;
      EXPECT_EQ(p.status().message(), c.want) << c.header;
    }
  }
  // A revoked key's principal is denied even if it was authenticated before the revocation.
  Principal stale{.user = "admin", .key_id = revoked->id};
  EXPECT_FALSE(auth.Authorize(stale, "get", "jobs", "a").allowed);
}

// The epoch holds while nothing a token authenticates to changes, and moves on every change.
TEST_F(AuthTest, EpochMovesWithEveryChangeToWhatKeysAuthenticateTo) {
  ASSERT_TRUE(auth.Authenticate(admin_token).ok());  // loads the snapshot
  EXPECT_NE(auth.Epoch(), auth.Epoch()) << "without the refresher, nothing remembered is reused";
  auth.RefreshInBackground();
  ASSERT_TRUE(auth.Authenticate(admin_token).ok());
  uint64_t e = auth.Epoch();
  ASSERT_TRUE(auth.Authenticate(admin_token).ok());
  clock.Advance(60 * kMicrosPerSecond);
  EXPECT_EQ(auth.Epoch(), e) << "checks and time alone do not move it";

  StatusOr<AuthService::CreatedKey> k = auth.CreateApiKey(Admin(), "admin", std::nullopt, {}, std::nullopt);
  ASSERT_TRUE(k.ok());
  ASSERT_TRUE(auth.Authenticate(k->token).ok());
  EXPECT_NE(auth.Epoch(), e) << "a new key";
  e = auth.Epoch();
  ASSERT_TRUE(auth.RevokeApiKey(k->id).ok());
  EXPECT_NE(auth.Epoch(), e) << "a revocation, before any check reloads the snapshot";
  EXPECT_EQ(auth.Authenticate(k->token).status().message(), "key revoked");
  e = auth.Epoch();
  EXPECT_EQ(auth.Epoch(), e);

  // A key's expiry passing moves it, with no edit: measured on the service's own clock.
  StatusOr<AuthService::CreatedKey> expiring = auth.CreateApiKey(
      Admin(), "admin", std::nullopt, {}, std::chrono::system_clock::now() + std::chrono::hours(3));
  ASSERT_TRUE(expiring.ok());
  ASSERT_TRUE(auth.Authenticate(expiring->token).ok());
  e = auth.Epoch();
  clock.Advance(3600 * kMicrosPerSecond);
  EXPECT_EQ(auth.Epoch(), e);
  ASSERT_TRUE(auth.Authenticate(expiring->token).ok());
  clock.Advance(3 * 3600 * kMicrosPerSecond);
  EXPECT_NE(auth.Epoch(), e) << "the expiry passed";
  EXPECT_EQ(auth.Authenticate(expiring->token).status().message(), "key expired");
  e = auth.Epoch();
  auth.Invalidate();
  EXPECT_NE(auth.Epoch(), e);
}

TEST_F(AuthTest, KeyWithoutOwnerDoesNotAuthenticate) {
  AddUser("carol");
  StatusOr<AuthService::CreatedKey> k =
      auth.CreateApiKey(Admin(), "carol", std::nullopt, {}, std::nullopt);
  ASSERT_TRUE(k.ok());
  ASSERT_TRUE(auth.Authenticate(k->token).ok());
  ASSERT_TRUE(store.Delete({"User", "", "carol"}, 0).ok());
  auth.Invalidate();
  EXPECT_EQ(auth.Authenticate(k->token).status().message(), "unknown key");
  EXPECT_EQ(auth.CreateApiKey(Admin(), "nobody", std::nullopt, {}, std::nullopt).status().code(),
            StatusCode::kNotFound);
}

TEST_F(AuthTest, ChangesMadeDirectlyInTheStoreAreSeenWithinThePollInterval) {
  StatusOr<AuthService::CreatedKey> k =
      auth.CreateApiKey(Admin(), "admin", std::nullopt, {}, std::nullopt);
  ASSERT_TRUE(k.ok());
  ASSERT_TRUE(auth.Authenticate(k->token).ok());
  json obj = k->object;
  obj["spec"]["revoked"] = true;
  ASSERT_TRUE(store.Update(obj, 0).ok());  // behind the service's back
  // Unrelated writes move the revision without touching the policy kinds.
  ASSERT_TRUE(store.Create(Obj("Job", "a", "j1", json::object())).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  StatusOr<Principal> p = auth.Authenticate(k->token);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().message(), "key revoked");
}

// A store whose reads can be held up, as a busy or remote store would: while closed, every read
// waits until Open() (writes go through, so a test can still change the policy).
class GatedStore : public store::Store {
 public:
  explicit GatedStore(store::Store* inner) : inner_(inner) {}
  void Close() {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
  }
  void Open() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      closed_ = false;
    }
    cv_.notify_all();
  }
  StatusOr<json> Get(const store::ObjectKey& key) override { return inner_->Get(key); }
  StatusOr<std::vector<json>> Commit(std::vector<store::WriteOp> ops) override {
    return inner_->Commit(std::move(ops));
  }
  StatusOr<store::ListResult> List(const store::ListOptions& options) override {
    Wait();
    return inner_->List(options);
  }
  StatusOr<store::ChangesResult> Changes(const std::string& kind, int64_t after, int max) override {
    Wait();
    return inner_->Changes(kind, after, max);
  }
  int64_t Revision() override {
    Wait();
    return inner_->Revision();
  }
  int64_t WaitForRevision(int64_t after, std::chrono::milliseconds timeout) override {
    return inner_->WaitForRevision(after, timeout);
  }

 private:
  void Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !closed_; });
  }
  store::Store* inner_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool closed_ = false;
};

// With the background refresher (as the API server runs it), key checks read only memory: a
// store that stops answering reads does not hold them up, and changes made elsewhere still
// arrive within about one poll interval, with no caller driving them.
TEST(AuthBackgroundTest, KeyChecksNeverWaitOnTheStore) {
  store::MemoryStore mem;
  GatedStore gated(&mem);
  FakeClock clock{1'000'000};
  AuthService auth(&gated, &clock);
  StatusOr<std::optional<std::string>> t = auth.Bootstrap();
  ASSERT_TRUE(t.ok() && t->has_value());
  const std::string admin = **t;
  auth.RefreshInBackground();
  auth.RefreshInBackground();  // idempotent
  StatusOr<Principal> who = auth.Authenticate(admin);
  ASSERT_TRUE(who.ok());
  StatusOr<AuthService::CreatedKey> k = auth.CreateApiKey(*who, "admin", std::nullopt, {}, std::nullopt);
  ASSERT_TRUE(k.ok());
  ASSERT_TRUE(auth.Authenticate(k->token).ok());

  // Policy changes behind the service's back, then the store's reads stall.
  ASSERT_TRUE(mem.Create(Obj("Job", "a", "j1", json::object())).ok());
  gated.Close();
  auto checks = std::async(std::launch::async, [&] {
    for (int i = 0; i < 100; ++i) {
      if (!auth.Authenticate(k->token).ok()) return false;
      if (!auth.Authorize(*who, "create", "jobs", "a").allowed) return false;
    }
    return true;
  });
  const bool finished = checks.wait_for(std::chrono::seconds(2)) == std::future_status::ready;
  gated.Open();  // let a stuck check (the failure) finish before asserting
  EXPECT_TRUE(finished) << "a key check waited on the store";
  EXPECT_TRUE(checks.get());

  // A revocation written straight to the store is picked up by the refresher alone.
  json revoked = k->object;
  revoked["spec"]["revoked"] = true;
  ASSERT_TRUE(mem.Update(revoked, 0).ok());
  bool seen = false;
  for (int i = 0; i < 200 && !seen; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    StatusOr<Principal> p = auth.Authenticate(k->token);
    seen = !p.ok() && p.status().message() == "key revoked";
  }
  EXPECT_TRUE(seen) << "the refresher never reloaded the snapshot";
}

// A service with its refresher running, bootstrapped, and the admin's principal.
struct RefreshedAuth {
  RefreshedAuth() {
    StatusOr<std::optional<std::string>> t = auth.Bootstrap();
    EXPECT_TRUE(t.ok() && t->has_value());
    auth.RefreshInBackground();
    StatusOr<Principal> p = auth.Authenticate(t.ok() && t->has_value() ? **t : "");
    EXPECT_TRUE(p.ok());
    if (p.ok()) admin = *p;
  }
  store::MemoryStore mem;
  FakeClock clock{1'000'000};
  AuthService auth{&mem, &clock};
  Principal admin;
};

// With the refresher, a change made behind the service's back moves the epoch within a poll
// interval, with no key check to reload the snapshot.
TEST(AuthBackgroundTest, EpochFollowsChangesMadeElsewhere) {
  RefreshedAuth r;
  AuthService& auth = r.auth;
  StatusOr<AuthService::CreatedKey> k = auth.CreateApiKey(r.admin, "admin", std::nullopt, {}, std::nullopt);
  ASSERT_TRUE(k.ok());
  const uint64_t e = auth.Epoch();
  json obj = k->object;
  obj["spec"]["revoked"] = true;
  ASSERT_TRUE(r.mem.Update(obj, 0).ok());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (auth.Epoch() == e && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_NE(auth.Epoch(), e);
  EXPECT_EQ(auth.Authenticate(k->token).status().message(), "key revoked");
}

// Edits made through the service take effect before they return, refresher or not: the
// refresher must never let a revoked key through in the window before its next poll.
TEST(AuthBackgroundTest, OwnEditsTakeEffectAtOnce) {
  RefreshedAuth r;
  AuthService& auth = r.auth;
  for (int i = 0; i < 20; ++i) {
    StatusOr<AuthService::CreatedKey> k = auth.CreateApiKey(r.admin, "admin", std::nullopt, {}, std::nullopt);
    ASSERT_TRUE(k.ok());
    ASSERT_TRUE(auth.Authenticate(k->token).ok()) << "new key " << i << " not yet known";
    ASSERT_TRUE(auth.RevokeApiKey(k->id).ok());
    StatusOr<Principal> p = auth.Authenticate(k->token);
    ASSERT_FALSE(p.ok()) << "revoked key " << i << " still authenticates";
    EXPECT_EQ(p.status().message(), "key revoked");
  }
}

class AuthorizeTest : public AuthTest {
 protected:
  void SetUp() override {
    AuthTest::SetUp();
    for (const char* u : {"ca", "ta", "dev", "view", "agent1", "nobody", "cwdev", "multi"}) AddUser(u);
    Bind("cas", "", "cluster-admin", {"ca"});
    Bind("admins", "a", "tenant-admin", {"ta"});
    Bind("devs", "a", "developer", {"dev", "multi"});
    Bind("viewers", "a", "viewer", {"view"});
    Bind("viewers", "b", "viewer", {"multi"});
    Bind("agents", "", "agent", {"agent1"});
    Bind("all-devs", "", "developer", {"cwdev"});
    Bind("broken", "a", "no-such-role", {"nobody"});
  }
};

TEST_F(AuthorizeTest, BuiltinRoleMatrix) {
  struct Case {
    const char* user;
    const char* verb;
    const char* resource;
    const char* tenant;
    bool allowed;
  } cases[] = {
      // cluster-admin: everything, everywhere.
      {"ca", "create", "jobs", "a", true},
      {"ca", "delete", "jobs", "b", true},
      {"ca", "cordon", "nodes", "", true},
      {"ca", "drain", "nodes", "", true},
      {"ca", "create", "users", "", true},
      {"ca", "verify", "auditrecords", "", true},
      {"ca", "list", "jobs", "", true},
      {"ca", "create", "tenants", "", true},
      // tenant-admin of a: all tenant-scoped resources in a, reads of nodes and its tenant.
      {"ta", "create", "jobs", "a", true},
      {"ta", "delete", "queues", "a", true},
      {"ta", "create", "rolebindings", "a", true},
      {"ta", "create", "apikeys", "a", true},
      {"ta", "update", "deployments", "a", true},
      {"ta", "cancel", "jobs", "a", true},
      {"ta", "create", "jobs", "b", false},
      {"ta", "get", "jobs", "b", false},
      {"ta", "list", "jobs", "", false},
      {"ta", "create", "rolebindings", "", false},
      {"ta", "create", "apikeys", "", false},
      {"ta", "get", "nodes", "", true},
      {"ta", "list", "nodes", "", true},
      {"ta", "cordon", "nodes", "", false},
      {"ta", "update", "nodes", "", false},
      {"ta", "cordon", "nodes", "a", false},  // naming a tenant does not help
      {"ta", "get", "tenants", "a", true},
      {"ta", "get", "tenants", "b", false},
      {"ta", "list", "tenants", "", false},
      {"ta", "update", "tenants", "a", false},
      {"ta", "get", "users", "", false},
      {"ta", "create", "roles", "", false},
      {"ta", "list", "auditrecords", "", false},
      {"ta", "get", "agent", "", false},
      // developer in a.
      {"dev", "create", "jobs", "a", true},
      {"dev", "get", "jobs", "a", true},
      {"dev", "watch", "jobs", "a", true},
      {"dev", "update", "jobs", "a", true},
      {"dev", "delete", "jobs", "a", true},
      {"dev", "create", "jobs", "b", false},
      {"dev", "get", "jobs", "b", false},
      {"dev", "get", "logs", "a", true},
      {"dev", "delete", "logs", "a", false},
      {"dev", "list", "queues", "a", true},
      {"dev", "create", "queues", "a", false},
      {"dev", "list", "events", "a", true},
      {"dev", "get", "usage", "a", true},
      {"dev", "get", "nodes", "", true},
      {"dev", "cordon", "nodes", "", false},
      {"dev", "create", "apikeys", "a", true},
      {"dev", "create", "apikeys", "", false},
      {"dev", "create", "rolebindings", "a", false},
      {"dev", "get", "tenants", "a", false},  // developer's role has no tenants rule
      // viewer in a: read only.
      {"view", "get", "jobs", "a", true},
      {"view", "list", "jobs", "a", true},
      {"view", "watch", "events", "a", true},
      {"view", "get", "logs", "a", true},
      {"view", "create", "jobs", "a", false},
      {"view", "delete", "jobs", "a", false},
      {"view", "update", "queues", "a", false},
      {"view", "cancel", "jobs", "a", false},
      {"view", "get", "jobs", "b", false},
      {"view", "list", "nodes", "", true},
      {"view", "create", "apikeys", "a", false},
      // agent: only the agent resource (and reading nodes).
      {"agent1", "create", "agent", "", true},
      {"agent1", "update", "agent", "", true},
      {"agent1", "get", "nodes", "", true},
      {"agent1", "update", "nodes", "", false},
      {"agent1", "get", "jobs", "a", false},
      {"agent1", "create", "jobs", "a", false},
      {"agent1", "list", "tenants", "", false},
      // A cluster-wide developer binding: every tenant.
      {"cwdev", "create", "jobs", "a", true},
      {"cwdev", "create", "jobs", "zzz", true},
      {"cwdev", "list", "jobs", "", true},
      {"cwdev", "cordon", "nodes", "", false},
      // Deny by default: no bindings, or a binding to a missing role.
      {"nobody", "get", "jobs", "a", false},
      {"nobody", "get", "nodes", "", false},
      {"stranger", "get", "jobs", "a", false},
      {"", "get", "jobs", "a", false},
      // Unknown resources are cluster-scoped: only cluster-wide grants reach them.
      {"ta", "get", "widgets", "a", false},
      {"ca", "get", "widgets", "", true},
  };
  for (const Case& c : cases) {
    Principal p{.user = c.user, .key_id = "test"};
    Decision d = auth.Authorize(p, c.verb, c.resource, c.tenant);
    EXPECT_EQ(d.allowed, c.allowed) << c.user << " " << c.verb << " " << c.resource << " in '"
                                    << c.tenant << "': " << d.reason;
    EXPECT_FALSE(d.reason.empty());
  }
}

TEST_F(AuthorizeTest, Reasons) {
  Decision d = auth.Authorize({.user = "dev"}, "create", "jobs", "a");
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.reason, "allowed by RoleBinding a/devs (role developer)");
  d = auth.Authorize({.user = "dev"}, "create", "jobs", "b");
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.reason, "user dev has no role granting create on jobs in tenant b");
  d = auth.Authorize({.user = "nobody"}, "cordon", "nodes", "");
  EXPECT_EQ(d.reason, "user nobody has no role granting cordon on nodes");
}

TEST_F(AuthorizeTest, PolicyRevisionFollowsChanges) {
  Decision before = auth.Authorize({.user = "nobody"}, "get", "jobs", "a");
  EXPECT_FALSE(before.allowed);
  Bind("late", "a", "viewer", {"nobody"});
  auth.Invalidate();
  Decision after = auth.Authorize({.user = "nobody"}, "get", "jobs", "a");
  EXPECT_TRUE(after.allowed);
  EXPECT_GT(after.policy_revision, before.policy_revision);
}

TEST_F(AuthorizeTest, KeyNarrowing) {
  // A cluster-admin's key narrowed to viewer cannot create.
  Principal ca_viewer = KeyFor("ca", std::nullopt, {"viewer"});
  EXPECT_EQ(ca_viewer.key_roles, std::vector<std::string>{"viewer"});
  EXPECT_TRUE(auth.Authorize(ca_viewer, "get", "jobs", "b").allowed);
  Decision d = auth.Authorize(ca_viewer, "create", "jobs", "b");
  EXPECT_FALSE(d.allowed);
  EXPECT_THAT(d.reason, HasSubstr("narrowed to roles [viewer]"));
  EXPECT_FALSE(auth.Authorize(ca_viewer, "cordon", "nodes", "").allowed);

  // A tenant-restricted key of a cluster-admin cannot leave its tenant.
  Principal ca_a = KeyFor("ca", "a", {});
  ASSERT_EQ(ca_a.key_tenant, std::optional<std::string>("a"));
  struct Case {
    const char* verb;
    const char* resource;
    const char* tenant;
    bool allowed;
  } restricted[] = {
      {"create", "jobs", "a", true},   {"get", "jobs", "b", false},
      {"list", "jobs", "", false},     {"get", "nodes", "", true},
      {"cordon", "nodes", "", false},  {"get", "tenants", "a", true},
      {"get", "tenants", "b", false},  {"create", "users", "", false},
      {"create", "rolebindings", "a", true},
  };
  for (const Case& c : restricted) {
    EXPECT_EQ(auth.Authorize(ca_a, c.verb, c.resource, c.tenant).allowed, c.allowed)
        << c.verb << " " << c.resource << " " << c.tenant;
  }
  EXPECT_THAT(auth.Authorize(ca_a, "get", "jobs", "b").reason,
              HasSubstr("restricted to tenant a"));

  // Narrowing never widens: a developer's key "narrowed" to cluster-admin is still a developer.
  Principal dev_wide = KeyFor("dev", std::nullopt, {"cluster-admin", "developer"});
  EXPECT_TRUE(auth.Authorize(dev_wide, "create", "jobs", "a").allowed);
  EXPECT_FALSE(auth.Authorize(dev_wide, "create", "jobs", "b").allowed);
  EXPECT_FALSE(auth.Authorize(dev_wide, "cordon", "nodes", "").allowed);
  EXPECT_FALSE(auth.Authorize(dev_wide, "create", "rolebindings", "a").allowed);

  // A key narrowed to a role that disappears grants nothing (never falls back to full rights).
  ASSERT_TRUE(store.Create(Obj("Role", "", "temp", {{"rules", json::array({{{"verbs", {"get"}},
                                                                             {"resources", {"jobs"}}}})}})).ok());
  auth.Invalidate();
  Principal ca_temp = KeyFor("ca", std::nullopt, {"temp"});
  EXPECT_TRUE(auth.Authorize(ca_temp, "get", "jobs", "a").allowed);
  ASSERT_TRUE(store.Delete({"Role", "", "temp"}, 0).ok());
  auth.Invalidate();
  EXPECT_FALSE(auth.Authorize(ca_temp, "get", "jobs", "a").allowed);
}

TEST_F(AuthorizeTest, CreateApiKeyRules) {
  Principal dev{.user = "dev", .key_id = "k"};
  // For itself, inside its tenant: yes. Unrestricted, or for someone else: no.
  StatusOr<AuthService::CreatedKey> own = auth.CreateApiKey(dev, "dev", "a", {}, std::nullopt);
  ASSERT_TRUE(own.ok()) << own.status().ToString();
  EXPECT_EQ(own->object["spec"]["tenant"], "a");
  EXPECT_EQ(auth.CreateApiKey(dev, "dev", std::nullopt, {}, std::nullopt).status().code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(auth.CreateApiKey(dev, "dev", "b", {}, std::nullopt).status().code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(auth.CreateApiKey(dev, "view", "a", {}, std::nullopt).status().code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(auth.CreateApiKey({.user = "view"}, "view", "a", {}, std::nullopt).status().code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(auth.CreateApiKey({}, "dev", "a", {}, std::nullopt).status().code(),
            StatusCode::kUnauthenticated);
  // Admin may create keys for others; roles must exist; expiry must be in the future.
  EXPECT_TRUE(auth.CreateApiKey(Admin(), "view", "a", {"viewer"}, std::nullopt).ok());
  EXPECT_EQ(auth.CreateApiKey(Admin(), "view", "a", {"nope"}, std::nullopt).status().code(),
            StatusCode::kNotFound);
  EXPECT_EQ(auth.CreateApiKey(Admin(), "view", "a", {},
                              std::chrono::system_clock::now() - std::chrono::minutes(1))
                .status()
                .code(),
            StatusCode::kInvalidArgument);

  // A tenant-restricted key mints only keys restricted to the same tenant.
  Principal ca_a = KeyFor("ca", "a", {});
  EXPECT_TRUE(auth.CreateApiKey(ca_a, "ca", "a", {}, std::nullopt).ok());
  EXPECT_EQ(auth.CreateApiKey(ca_a, "ca", std::nullopt, {}, std::nullopt).status().code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(auth.CreateApiKey(ca_a, "ca", "b", {}, std::nullopt).status().code(),
            StatusCode::kPermissionDenied);

  // A narrowed key mints only narrower keys; without roles the new key inherits the narrowing.
  Principal ca_dev = KeyFor("ca", std::nullopt, {"developer"});
  EXPECT_EQ(auth.CreateApiKey(ca_dev, "ca", "a", {"tenant-admin"}, std::nullopt).status().code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(auth.CreateApiKey(ca_dev, "ca", "a", {"cluster-admin"}, std::nullopt).status().code(),
            StatusCode::kPermissionDenied);
  StatusOr<AuthService::CreatedKey> inherited =
      auth.CreateApiKey(ca_dev, "ca", "a", {}, std::nullopt);
  ASSERT_TRUE(inherited.ok()) << inherited.status().ToString();
  EXPECT_EQ(inherited->object["spec"]["roles"], json::array({"developer"}));
  ASSERT_TRUE(store.Create(Obj("Role", "", "job-reader", {{"rules", json::array({{{"verbs", {"get"}},
                                                                                  {"resources", {"jobs"}}}})}})).ok());
  EXPECT_TRUE(auth.CreateApiKey(ca_dev, "ca", "a", {"job-reader"}, std::nullopt).ok());
}

TEST_F(AuthorizeTest, VisibleTenants) {
  using V = std::optional<std::vector<std::string>>;
  EXPECT_EQ(auth.VisibleTenants({.user = "ca"}, "list", "jobs"), V());
  EXPECT_EQ(auth.VisibleTenants({.user = "cwdev"}, "list", "jobs"), V());
  EXPECT_EQ(auth.VisibleTenants({.user = "multi"}, "list", "jobs"),
            V(std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(auth.VisibleTenants({.user = "multi"}, "create", "jobs"),
            V(std::vector<std::string>{"a"}));
  EXPECT_EQ(auth.VisibleTenants({.user = "ta"}, "list", "tenants"),
            V(std::vector<std::string>{"a"}));
  EXPECT_EQ(auth.VisibleTenants({.user = "nobody"}, "list", "jobs"), V(std::vector<std::string>{}));
  EXPECT_EQ(auth.VisibleTenants({}, "list", "jobs"), V(std::vector<std::string>{}));
  Principal ca_b = KeyFor("ca", "b", {});
  EXPECT_EQ(auth.VisibleTenants(ca_b, "list", "jobs"), V(std::vector<std::string>{"b"}));
  Principal multi_a = KeyFor("multi", "a", {});
  EXPECT_EQ(auth.VisibleTenants(multi_a, "list", "jobs"), V(std::vector<std::string>{"a"}));
}

TEST_F(AuthorizeTest, ConcurrentAuthorizeWhileKeysChange) {
  std::atomic<bool> stop{false};
  std::atomic<int> wrong{0};
  std::vector<std::thread> readers;
  for (int i = 0; i < 4; ++i) {
    readers.emplace_back([&] {
      while (!stop) {
        if (!auth.Authorize({.user = "dev"}, "create", "jobs", "a").allowed) ++wrong;
        if (auth.Authorize({.user = "dev"}, "create", "jobs", "b").allowed) ++wrong;
        if (!auth.Authenticate(admin_token).ok()) ++wrong;
      }
    });
  }
  for (int i = 0; i < 20; ++i) {
    StatusOr<AuthService::CreatedKey> k =
        auth.CreateApiKey(Admin(), "dev", "a", {}, std::nullopt);
    ASSERT_TRUE(k.ok());
    ASSERT_TRUE(auth.Authenticate(k->token).ok());
    ASSERT_TRUE(auth.RevokeApiKey(k->id).ok());
    EXPECT_EQ(auth.Authenticate(k->token).status().message(), "key revoked");
  }
  stop = true;
  for (std::thread& t : readers) t.join();
  EXPECT_EQ(wrong.load(), 0);
}

}  // namespace
}  // namespace aicloud::auth
