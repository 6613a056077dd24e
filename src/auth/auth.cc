// AuthService: API keys, the RBAC snapshot cache and authorization (model in auth.h).
#include "core/thread_name.h"
#include "auth/auth.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "auth/util.h"

namespace aicloud::auth {

using json = nlohmann::json;
using std::chrono::system_clock;

namespace {

constexpr const char* kApiVersion = "aicloud/v1";
constexpr const char* kUserKind = "User";
constexpr const char* kRoleKind = "Role";
constexpr const char* kBindingKind = "RoleBinding";
constexpr const char* kKeyKind = "ApiKey";
constexpr std::array<const char*, 4> kPolicyKinds = {kUserKind, kRoleKind, kBindingKind, kKeyKind};
constexpr const char* kBuiltinLabel = "aicloud/builtin";
constexpr const char* kAdminUser = "admin";
constexpr const char* kAdminBinding = "admin-cluster-admin";
// How often the store's change log is polled for policy changes made by others.
constexpr auto kPollInterval = std::chrono::milliseconds(100);
constexpr size_t kKeyIdHexChars = 12;
constexpr size_t kSecretBytes = 32;
constexpr std::string_view kTokenPrefix = "aic_";

struct Rule {
  std::vector<std::string> verbs;
  std::vector<std::string> resources;
};

bool Matches(const std::vector<std::string>& list, std::string_view v) {
  for (const std::string& s : list) {
    if (s == "*" || s == v) return true;
  }
  return false;
}

// True when a rule grants (verb, resource). A "*" argument is granted only by a "*" rule entry,
// which makes this also the "is this rule covered" check for narrowing.
bool RulesGrant(const std::vector<Rule>& rules, std::string_view verb, std::string_view resource) {
  for (const Rule& r : rules) {
    if (Matches(r.verbs, verb) && Matches(r.resources, resource)) return true;
  }
  return false;
}

bool IsReadVerb(std::string_view verb) {
  return verb == "get" || verb == "list" || verb == "watch";
}

// What a binding (or key) restricted to `bound_tenant` may do on a cluster-scoped resource.
bool TenantReachesClusterScoped(std::string_view verb, std::string_view resource,
                                std::string_view tenant, std::string_view bound_tenant) {
  if (!IsReadVerb(verb)) return false;
  return resource == "nodes" || (resource == "tenants" && tenant == bound_tenant);
}

std::vector<Rule> ParseRules(const json& spec) {
  std::vector<Rule> out;
  if (!spec.is_object()) return out;
  auto it = spec.find("rules");
  if (it == spec.end() || !it->is_array()) return out;
  for (const json& r : *it) {
    if (!r.is_object()) continue;
    Rule rule;
    for (const char* field : {"verbs", "resources"}) {
      auto f = r.find(field);
      if (f == r.end() || !f->is_array()) continue;
      for (const json& s : *f) {
        if (s.is_string()) {
          (std::string_view(field) == "verbs" ? rule.verbs : rule.resources)
              .push_back(s.get<std::string>());
        }
      }
    }
    out.push_back(std::move(rule));
  }
  return out;
}

std::string StringField(const json& obj, const char* field) {
  if (!obj.is_object()) return "";
  auto it = obj.find(field);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : "";
}

json RuleJson(std::vector<std::string> verbs, std::vector<std::string> resources) {
  return {{"verbs", std::move(verbs)}, {"resources", std::move(resources)}};
}

// The built-in roles and their rules.
std::vector<std::pair<std::string, json>> BuiltinRoles() {
  const std::vector<std::string> read = {"get", "list", "watch"};
  return {
      {kClusterAdminRole, json::array({RuleJson({"*"}, {"*"})})},
      {kTenantAdminRole,
       json::array({RuleJson({"*"}, {"jobs", "queues", "apikeys", "rolebindings", "events", "usage",
                                     "logs", "deployments"}),
                    RuleJson({"get", "list"}, {"tenants", "nodes"})})},
      {kDeveloperRole,
       json::array({RuleJson({"create", "get", "list", "watch", "update", "delete", "cancel"},
                             {"jobs"}),
                    RuleJson({"get"}, {"logs"}),
                    RuleJson({"get", "list"}, {"queues", "events", "usage", "nodes"}),
                    RuleJson({"create", "list", "delete"}, {"apikeys"})})},
      {kViewerRole,
       json::array({RuleJson(read, {"jobs", "queues", "events", "usage", "nodes", "logs"})})},
      {kAgentRole, json::array({RuleJson({"*"}, {"agent"}), RuleJson({"get"}, {"nodes"})})},
      // A standalone `aicloud gateway`: the serving feed, its signals and the shared budget and
      // rate objects (api.cc, /api/v1/gateway/...).
      {kGatewayRole, json::array({RuleJson({"get", "update"}, {"gateway"})})},
  };
}

json Object(const char* kind, const std::string& name, const std::string& tenant, json spec) {
  json o = {{"apiVersion", kApiVersion},
            {"kind", kind},
            {"metadata", {{"name", name}}},
            {"spec", std::move(spec)}};
  if (!tenant.empty()) o["metadata"]["tenant"] = tenant;
  return o;
}

bool IsLowerHex(std::string_view s) {
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' ||
                        s.back() == '\n')) {
    s.remove_suffix(1);
  }
  return s;
}

std::string JoinNames(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return "[" + out + "]";
}

Status Unauthenticated(std::string m) { return {StatusCode::kUnauthenticated, std::move(m)}; }
Status PermissionDenied(std::string m) { return {StatusCode::kPermissionDenied, std::move(m)}; }

}  // namespace

bool IsTenantScopedResource(std::string_view resource) {
  static const std::unordered_set<std::string_view> kTenantScoped = {
      "jobs", "queues", "events", "usage", "logs", "deployments", "rolebindings", "apikeys"};
  return kTenantScoped.contains(resource);
}

struct KeyInfo {
  std::string user;
  std::optional<std::string> tenant;
  std::vector<std::string> roles;
  std::optional<system_clock::time_point> expires;
  bool revoked = false;
  std::string hash;
};

struct BindingInfo {
  std::string tenant;  // "" = cluster-wide
  std::string name;
  std::string role;
};

struct AuthService::Snapshot {
  int64_t revision = 0;   // the store revision the lists were read at (the newest of the four)
  int64_t generation = 0;  // Cache::generation when loading started
  std::unordered_set<std::string> users;
  std::unordered_map<std::string, std::vector<Rule>> roles;
  std::unordered_map<std::string, std::vector<BindingInfo>> bindings_by_user;
  std::unordered_map<std::string, KeyInfo> keys;
  std::vector<system_clock::time_point> expiries;  // of the keys that expire, sorted (Epoch)
};

struct AuthService::Cache {
  std::atomic<int64_t> generation{1};  // bumped by Invalidate (local writes)
  std::mutex load_mu;                  // one loader/poller at a time
  std::mutex mu;
  std::shared_ptr<const Snapshot> snap;       // GUARDED_BY(mu)
  int64_t checked_rev = 0;                    // GUARDED_BY(mu): policy kinds unchanged through it
  std::chrono::steady_clock::time_point last_poll;  // GUARDED_BY(mu)
  uint64_t installs = 0;  // GUARDED_BY(mu): snapshots installed, plus Invalidate calls (Epoch)

  // The background refresher (RefreshInBackground).
  std::atomic<bool> background{false};
  std::mutex refresher_mu;
  std::condition_variable refresher_cv;
  bool stopping = false;  // GUARDED_BY(refresher_mu)
  std::thread refresher;  // GUARDED_BY(refresher_mu)
};

AuthService::AuthService(store::Store* store, Clock* clock)
    : store_(store),
      clock_(clock),
      wall_anchor_(system_clock::now()),
      clock_anchor_(clock->NowMicros()),
      cache_(std::make_unique<Cache>()) {}

AuthService::~AuthService() {
  std::thread t;
  {
    std::lock_guard<std::mutex> lock(cache_->refresher_mu);
    cache_->stopping = true;
    t = std::move(cache_->refresher);
  }
  cache_->refresher_cv.notify_all();
  if (t.joinable()) t.join();
}

void AuthService::RefreshInBackground() {
  std::lock_guard<std::mutex> lock(cache_->refresher_mu);
  if (cache_->refresher.joinable() || cache_->stopping) return;
  cache_->background.store(true);
  cache_->refresher = std::thread([this] {
    SetThreadName("auth-refresh");
    RefreshLoop();
  });
}

void AuthService::RefreshLoop() {
  Cache& c = *cache_;
  std::unique_lock<std::mutex> lock(c.refresher_mu);
  while (!c.stopping) {
    lock.unlock();
    (void)Refresh();  // a failed read keeps the last snapshot; the next tick tries again
    lock.lock();
    c.refresher_cv.wait_for(lock, kPollInterval, [&] { return c.stopping; });
  }
}

system_clock::time_point AuthService::WallNow() const {
  return wall_anchor_ + std::chrono::duration_cast<system_clock::duration>(
                            std::chrono::microseconds(clock_->NowMicros() - clock_anchor_));
}

uint64_t AuthService::Epoch() {
  Cache& c = *cache_;
  std::shared_ptr<const Snapshot> snap;
  uint64_t installs;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    // A value never seen before, so nothing remembered is reused: without the refresher (only a
    // check would notice an edit made elsewhere), with no snapshot (a reload failed), or with one
    // older than an edit of this service's (Invalidate, reload pending).
    if (!c.background.load() || !c.snap || c.snap->generation != c.generation.load()) return ++c.installs << 32;
    snap = c.snap;
    installs = c.installs;
  }
  uint64_t expired = 0;  // keys whose expiry has passed, as Authenticate judges it
  if (snap && !snap->expiries.empty()) {
    expired = static_cast<uint64_t>(
        std::upper_bound(snap->expiries.begin(), snap->expiries.end(), WallNow()) - snap->expiries.begin());
  }
  return (installs << 32) + expired;
}

void AuthService::Invalidate() {
  Cache& c = *cache_;
  c.generation.fetch_add(1);
  {
    // Changes the epoch even before a snapshot is reloaded (without the refresher, only the next
    // check reloads it): a remembered authentication must be checked again.
    std::lock_guard<std::mutex> lock(c.mu);
    ++c.installs;
  }
  if (!c.background.load()) return;
  if (!Refresh().ok()) {
    // Never serve the pre-edit snapshot: without one, the next caller loads it itself.
    std::lock_guard<std::mutex> lock(c.mu);
    c.snap.reset();
    ++c.installs;
  }
}

StatusOr<std::shared_ptr<const AuthService::Snapshot>> AuthService::Load() {
  auto snap = std::make_shared<Snapshot>();
  snap->generation = cache_->generation.load();
  int64_t start_rev = store_->Revision();
  for (const char* kind : kPolicyKinds) {
    store::ListOptions opts{.kind = kind, .tenant = std::nullopt, .limit = 1000};
    do {
      StatusOr<store::ListResult> page = store_->List(opts);
      if (!page.ok()) {
        return Status(page.status().code(),
                      std::string("loading ") + kind + " objects: " + page.status().message());
      }
      snap->revision = std::max(snap->revision, page->resource_version);
      for (const json& o : page->items) {
        if (!o.is_object()) continue;
        auto meta = o.find("metadata");
        if (meta == o.end()) continue;
        std::string name = StringField(*meta, "name");
        std::string tenant = StringField(*meta, "tenant");
        auto spec_it = o.find("spec");
        const json spec = spec_it != o.end() && spec_it->is_object() ? *spec_it : json::object();
        if (std::string_view(kind) == kUserKind) {
          snap->users.insert(name);
        } else if (std::string_view(kind) == kRoleKind) {
          snap->roles[name] = ParseRules(spec);
        } else if (std::string_view(kind) == kBindingKind) {
          std::string role = StringField(spec, "role");
          auto subjects = spec.is_object() ? spec.find("subjects") : spec.end();
          if (role.empty() || subjects == spec.end() || !subjects->is_array()) continue;
          std::set<std::string> seen;
          for (const json& s : *subjects) {
            if (s.is_string() && seen.insert(s.get<std::string>()).second) {
              snap->bindings_by_user[s.get<std::string>()].push_back({tenant, name, role});
            }
          }
        } else {
          KeyInfo k;
          k.user = StringField(spec, "user");
          k.hash = StringField(spec, "hash");
          if (k.user.empty() || k.hash.empty()) continue;
          if (std::string t = StringField(spec, "tenant"); !t.empty()) k.tenant = t;
          if (auto r = spec.find("roles"); r != spec.end() && r->is_array()) {
            for (const json& s : *r) {
              if (s.is_string()) k.roles.push_back(s.get<std::string>());
            }
            // A key whose roles are all malformed must not fall back to full rights.
            if (k.roles.empty() && !r->empty()) k.roles.push_back("");
          }
          if (std::string e = StringField(spec, "expiresAt"); !e.empty()) {
            k.expires = internal::ParseRfc3339(e);
            // An unparsable expiry counts as already expired.
            if (!k.expires) k.expires = system_clock::time_point::min();
          }
          auto rv = spec.find("revoked");
          k.revoked = rv != spec.end() && !(rv->is_boolean() && !rv->get<bool>());
          if (k.expires) snap->expiries.push_back(*k.expires);
          snap->keys[name] = std::move(k);
        }
      }
      opts.continue_token = page->continue_token;
    } while (!opts.continue_token.empty());
  }
  std::sort(snap->expiries.begin(), snap->expiries.end());
  {
    std::lock_guard<std::mutex> lock(cache_->mu);
    cache_->snap = snap;
    cache_->checked_rev = start_rev;
    cache_->last_poll = std::chrono::steady_clock::now();
    ++cache_->installs;
  }
  return std::shared_ptr<const Snapshot>(snap);
}

std::shared_ptr<const AuthService::Snapshot> AuthService::Current() {
  Cache& c = *cache_;
  if (c.background.load()) {
    std::lock_guard<std::mutex> lock(c.mu);
    if (c.snap) return c.snap;  // kept fresh by RefreshLoop and Invalidate
  }
  StatusOr<std::shared_ptr<const Snapshot>> s = Refresh();
  return s.ok() ? *s : nullptr;
}

// The snapshot, after polling the change log (at most once per kPollInterval) and reloading
// when a policy kind changed or Invalidate was called. Reads the store on the caller's thread.
StatusOr<std::shared_ptr<const AuthService::Snapshot>> AuthService::Refresh() {
  Cache& c = *cache_;
  auto fresh_enough = [&](std::shared_ptr<const Snapshot>* out) {
    const int64_t revision = store_->Revision();  // not under mu: Current() must never wait on the store
    std::lock_guard<std::mutex> lock(c.mu);
    if (!c.snap || c.snap->generation != c.generation.load()) return false;
    *out = c.snap;
    if (revision == c.checked_rev) return true;
    return std::chrono::steady_clock::now() - c.last_poll < kPollInterval;
  };
  std::shared_ptr<const Snapshot> snap;
  if (fresh_enough(&snap)) return snap;
  std::lock_guard<std::mutex> load_lock(c.load_mu);
  if (fresh_enough(&snap)) return snap;  // another thread refreshed meanwhile
  if (snap) {
    // Same generation: poll the change log for the four policy kinds.
    int64_t after;
    {
      std::lock_guard<std::mutex> lock(c.mu);
      after = c.checked_rev;
      c.last_poll = std::chrono::steady_clock::now();
    }
    int64_t through = INT64_MAX;
    bool changed = false;
    for (const char* kind : kPolicyKinds) {
      StatusOr<store::ChangesResult> ch = store_->Changes(kind, after, 1);
      if (!ch.ok() || !ch->events.empty()) {
        changed = true;
        break;
      }
      through = std::min(through, ch->resource_version);
    }
    if (!changed) {
      std::lock_guard<std::mutex> lock(c.mu);
      c.checked_rev = std::max(c.checked_rev, through);
      return snap;
    }
  }
  return Load();
}

bool SplitToken(std::string_view authorization, std::string_view* id, std::string_view* secret) {
  std::string_view t = Trim(authorization);
  if (t.size() > 7) {
    std::string scheme(t.substr(0, 7));
    std::transform(scheme.begin(), scheme.end(), scheme.begin(),
                   [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
    if (scheme == "bearer ") t = Trim(t.substr(7));
  }
  const size_t id_pos = kTokenPrefix.size();
  const size_t secret_pos = id_pos + kKeyIdHexChars + 1;
  if (t.size() != secret_pos + 2 * kSecretBytes || t.substr(0, id_pos) != kTokenPrefix ||
      t[secret_pos - 1] != '_' || !IsLowerHex(t.substr(id_pos, kKeyIdHexChars)) ||
      !IsLowerHex(t.substr(secret_pos))) {
    return false;
  }
  *id = t.substr(id_pos, kKeyIdHexChars);
  *secret = t.substr(secret_pos);
  return true;
}

StatusOr<Principal> AuthService::Authenticate(std::string_view authorization) {
  std::string_view id_view, secret;
  if (!SplitToken(authorization, &id_view, &secret)) return Unauthenticated("malformed token");
  std::string id(id_view);
  std::string hash = Sha256Hex(secret);
  std::shared_ptr<const Snapshot> snap = Current();
  if (!snap) return UnavailableError("authentication state unavailable");
  auto it = snap->keys.find(id);
  if (it == snap->keys.end()) return Unauthenticated("unknown key");
  const KeyInfo& k = it->second;
  if (!ConstantTimeEquals(hash, k.hash)) return Unauthenticated("unknown key");
  if (k.revoked) return Unauthenticated("key revoked");
  if (k.expires && *k.expires <= WallNow()) return Unauthenticated("key expired");
  if (!snap->users.contains(k.user)) return Unauthenticated("unknown key");
  return Principal{.user = k.user, .key_id = id, .key_tenant = k.tenant, .key_roles = k.roles};
}

StatusOr<std::vector<ServingKey>> AuthService::ServingKeys() {
  std::shared_ptr<const Snapshot> snap = Current();
  if (!snap) return UnavailableError("authentication state unavailable");
  const system_clock::time_point now = WallNow();
  std::vector<ServingKey> out;
  for (const auto& [id, k] : snap->keys) {
    if (k.revoked || (k.expires && *k.expires <= now) || !snap->users.contains(k.user)) continue;
    ServingKey sk{.id = id, .hash = k.hash, .tenant = k.tenant, .expires = k.expires};
    if (!k.tenant) {
      const Principal who{.user = k.user, .key_id = id, .key_tenant = std::nullopt, .key_roles = k.roles};
      sk.all_models = AuthorizeIn(*snap, who, "get", "deployments", "").allowed;
    }
    out.push_back(std::move(sk));
  }
  std::sort(out.begin(), out.end(), [](const ServingKey& a, const ServingKey& b) { return a.id < b.id; });
  return out;
}

Decision AuthService::AuthorizeIn(const Snapshot& s, const Principal& who, std::string_view verb,
                                  std::string_view resource, std::string_view tenant) const {
  Decision d;
  d.policy_revision = s.revision;
  auto deny = [&](std::string reason) {
    d.allowed = false;
    d.reason = std::move(reason);
    return d;
  };
  if (who.user.empty()) return deny("unauthenticated request");
  const bool tenant_scoped = IsTenantScopedResource(resource);
  if (!tenant_scoped && resource != "tenants") tenant = "";
  std::string what = std::string(verb) + " on " + std::string(resource);
  if (tenant_scoped) {
    what += tenant.empty() ? " across all tenants" : " in tenant " + std::string(tenant);
  } else if (!tenant.empty()) {
    what += " " + std::string(tenant);
  }

  if (auto k = s.keys.find(who.key_id); k != s.keys.end()) {
    if (k->second.revoked) return deny("key " + who.key_id + " revoked");
    if (k->second.expires && *k->second.expires <= WallNow()) {
      return deny("key " + who.key_id + " expired");
    }
  }
  if (who.key_tenant) {
    bool reaches = tenant_scoped
                       ? tenant == *who.key_tenant
                       : TenantReachesClusterScoped(verb, resource, tenant, *who.key_tenant);
    if (!reaches) {
      return deny("key " + who.key_id + " is restricted to tenant " + *who.key_tenant +
                  " and cannot " + what);
    }
  }

  const BindingInfo* granted = nullptr;
  if (auto bs = s.bindings_by_user.find(who.user); bs != s.bindings_by_user.end()) {
    for (const BindingInfo& b : bs->second) {
      auto role = s.roles.find(b.role);
      if (role == s.roles.end() || !RulesGrant(role->second, verb, resource)) continue;
      bool reaches = b.tenant.empty() ||
                     (tenant_scoped ? tenant == b.tenant
                                    : TenantReachesClusterScoped(verb, resource, tenant, b.tenant));
      if (reaches) {
        granted = &b;
        break;
      }
    }
  }
  if (!granted) return deny("user " + who.user + " has no role granting " + what);

  if (!who.key_roles.empty()) {
    bool any = false;
    for (const std::string& r : who.key_roles) {
      auto role = s.roles.find(r);
      if (role != s.roles.end() && RulesGrant(role->second, verb, resource)) {
        any = true;
        break;
      }
    }
    if (!any) {
      return deny("key " + who.key_id + " is narrowed to roles " + JoinNames(who.key_roles) +
                  ", which do not grant " + std::string(verb) + " on " + std::string(resource));
    }
  }
  d.allowed = true;
  d.reason = "allowed by RoleBinding " +
             (granted->tenant.empty() ? granted->name : granted->tenant + "/" + granted->name) +
             " (role " + granted->role + ")";
  return d;
}

Decision AuthService::Authorize(const Principal& who, std::string_view verb,
                                std::string_view resource, std::string_view tenant) {
  std::shared_ptr<const Snapshot> snap = Current();
  if (!snap) return Decision{false, "authorization state unavailable (store error)", 0};
  return AuthorizeIn(*snap, who, verb, resource, tenant);
}

std::optional<std::vector<std::string>> AuthService::VisibleTenants(const Principal& who,
                                                                    std::string_view verb,
                                                                    std::string_view resource) {
  std::shared_ptr<const Snapshot> snap = Current();
  if (!snap) return std::vector<std::string>{};
  if (AuthorizeIn(*snap, who, verb, resource, "").allowed) return std::nullopt;
  std::set<std::string> candidates;
  if (auto bs = snap->bindings_by_user.find(who.user); bs != snap->bindings_by_user.end()) {
    for (const BindingInfo& b : bs->second) {
      if (!b.tenant.empty()) candidates.insert(b.tenant);
    }
  }
  if (who.key_tenant) candidates.insert(*who.key_tenant);
  std::vector<std::string> out;
  for (const std::string& t : candidates) {
    if (AuthorizeIn(*snap, who, verb, resource, t).allowed) out.push_back(t);
  }
  return out;
}

namespace {

struct NewKey {
  std::string id;
  std::string token;
  json object;
};

StatusOr<NewKey> MakeKey(const std::string& owner, const std::optional<std::string>& tenant,
                         const std::vector<std::string>& roles,
                         std::optional<system_clock::time_point> expires,
                         system_clock::time_point now) {
  std::string id = RandomHex(kKeyIdHexChars / 2);
  std::string secret = RandomHex(kSecretBytes);
  if (id.empty() || secret.empty()) return UnavailableError("random number generator failed");
  json spec = {{"user", owner}, {"revoked", false}, {"hash", Sha256Hex(secret)},
               {"createdAt", internal::FormatRfc3339(now, false)}};
  if (tenant) spec["tenant"] = *tenant;
  if (!roles.empty()) spec["roles"] = roles;
  if (expires) spec["expiresAt"] = internal::FormatRfc3339(*expires, false);
  return NewKey{id, std::string(kTokenPrefix) + id + "_" + secret,
                Object(kKeyKind, id, "", std::move(spec))};
}

}  // namespace

StatusOr<std::optional<std::string>> AuthService::Bootstrap() {
  left_alone_.clear();
  // Upsert the built-in roles.
  for (auto& [name, rules] : BuiltinRoles()) {
    json want = Object(kRoleKind, name, "", {{"rules", rules}});
    want["metadata"]["labels"] = {{kBuiltinLabel, "true"}};
    Status last;
    for (int attempt = 0; attempt < 5; ++attempt) {
      StatusOr<json> cur = store_->Get({kRoleKind, "", name});
      if (!cur.ok() && cur.status().code() != StatusCode::kNotFound) return cur.status();
      if (!cur.ok()) {
        StatusOr<json> made = store_->Create(want);
        last = made.status();
        if (made.ok() || made.status().code() != StatusCode::kAlreadyExists) break;
        continue;
      }
      const json& meta = (*cur)["metadata"];
      const json& spec = (*cur)["spec"];
      // A role of this name without the built-in label was made by an operator before this
      // built-in existed (one added by an upgrade, as gateway was): it stays theirs.
      if (!(meta.contains("labels") && meta["labels"].is_object() && meta["labels"].contains(kBuiltinLabel))) {
        left_alone_.push_back(name);
        last = OkStatus();
        break;
      }
      bool same = spec.is_object() && spec.contains("rules") && spec["rules"] == rules &&
                  meta.contains("labels") && meta["labels"].is_object() &&
                  meta["labels"].contains(kBuiltinLabel) &&
                  meta["labels"][kBuiltinLabel] == "true";
      if (same) {
        last = OkStatus();
        break;
      }
      json updated = *cur;
      if (!updated["spec"].is_object()) updated["spec"] = json::object();
      updated["spec"]["rules"] = rules;
      updated["metadata"]["labels"][kBuiltinLabel] = "true";
      StatusOr<json> u = store_->Update(updated, store::ResourceVersionOf(*cur));
      last = u.status();
      if (u.ok() || u.status().code() != StatusCode::kAborted) break;
    }
    if (!last.ok()) {
      Invalidate();
      return Status(last.code(), "bootstrap: role " + name + ": " + last.message());
    }
  }
  Invalidate();

  StatusOr<json> admin = store_->Get({kUserKind, "", kAdminUser});
  if (admin.ok()) return std::optional<std::string>();
  if (admin.status().code() != StatusCode::kNotFound) return admin.status();

  StatusOr<NewKey> key = MakeKey(kAdminUser, std::nullopt, {}, std::nullopt, WallNow());
  if (!key.ok()) return key.status();
  std::vector<store::WriteOp> ops;
  ops.push_back(store::WriteOp::Create(
      Object(kUserKind, kAdminUser, "", {{"displayName", "Cluster administrator"}})));
  ops.push_back(store::WriteOp::Create(Object(
      kBindingKind, kAdminBinding, "",
      {{"role", kClusterAdminRole}, {"subjects", json::array({kAdminUser})}})));
  ops.push_back(store::WriteOp::Create(key->object));
  StatusOr<std::vector<json>> done = store_->Commit(std::move(ops));
  Invalidate();
  if (!done.ok()) {
    // Another process bootstrapped at the same time: not our first start.
    if (done.status().code() == StatusCode::kAlreadyExists) return std::optional<std::string>();
    return Status(done.status().code(), "bootstrap: " + done.status().message());
  }
  return std::optional<std::string>(key->token);
}

StatusOr<AuthService::CreatedKey> AuthService::CreateApiKey(
    const Principal& creator, std::string_view owner_user, std::optional<std::string> tenant,
    std::vector<std::string> roles, std::optional<system_clock::time_point> expires) {
  if (creator.user.empty()) return Unauthenticated("unauthenticated request");
  if (owner_user.empty()) return InvalidArgumentError("apikey: owner user must not be empty");
  if (tenant && tenant->empty()) tenant.reset();
  const std::string owner(owner_user);
  const std::string scope = tenant.value_or("");

  Decision d = Authorize(creator, "create", "apikeys", scope);
  if (!d.allowed) return PermissionDenied(d.reason);
  if (owner != creator.user) {
    Decision any = Authorize(creator, "create", "apikeys", "");
    if (!any.allowed) {
      return PermissionDenied("creating a key for another user (" + owner +
                              ") needs a cluster-wide grant: " + any.reason);
    }
  }
  if (creator.key_tenant && tenant != creator.key_tenant) {
    return PermissionDenied("key " + creator.key_id + " is restricted to tenant " +
                            *creator.key_tenant + ": the new key must be restricted to it too");
  }
  if (expires && *expires <= WallNow()) {
    return InvalidArgumentError("apikey: expiresAt " + internal::FormatRfc3339(*expires, false) +
                                " is in the past");
  }

  StatusOr<json> user = store_->Get({kUserKind, "", owner});
  if (!user.ok()) {
    if (user.status().code() == StatusCode::kNotFound) return NotFoundError("user " + owner + " not found");
    return user.status();
  }

  std::sort(roles.begin(), roles.end());
  roles.erase(std::unique(roles.begin(), roles.end()), roles.end());
  if (roles.empty() && !creator.key_roles.empty()) roles = creator.key_roles;  // inherit narrowing
  std::vector<Rule> creator_key_rules;
  for (const std::string& r : creator.key_roles) {
    StatusOr<json> role = store_->Get({kRoleKind, "", r});
    if (role.ok()) {
      for (Rule& rule : ParseRules(role->value("spec", json::object()))) {
        creator_key_rules.push_back(std::move(rule));
      }
    }
  }
  for (const std::string& r : roles) {
    StatusOr<json> role = store_->Get({kRoleKind, "", r});
    if (!role.ok()) {
      if (role.status().code() == StatusCode::kNotFound) return NotFoundError("role " + r + " not found");
      return role.status();
    }
    if (creator.key_roles.empty()) continue;
    // The creator's key is narrowed: the new key may only narrow further.
    for (const Rule& rule : ParseRules(role->value("spec", json::object()))) {
      for (const std::string& v : rule.verbs) {
        for (const std::string& res : rule.resources) {
          if (!RulesGrant(creator_key_rules, v, res)) {
            return PermissionDenied("role " + r + " grants " + v + " on " + res + ", beyond key " +
                                    creator.key_id + "'s roles " + JoinNames(creator.key_roles));
          }
        }
      }
    }
  }

  for (int attempt = 0;; ++attempt) {
    StatusOr<NewKey> key = MakeKey(owner, tenant, roles, expires, WallNow());
    if (!key.ok()) return key.status();
    StatusOr<json> stored = store_->Create(key->object);
    if (stored.ok()) {
      Invalidate();
      return CreatedKey{key->id, key->token, *stored};
    }
    // A 48-bit id collision is unlikely; try a fresh id a couple of times.
    if (stored.status().code() != StatusCode::kAlreadyExists || attempt >= 3) {
      return stored.status();
    }
  }
}

Status AuthService::RevokeApiKey(std::string_view key_id) {
  const std::string id(key_id);
  if (id.empty()) return InvalidArgumentError("apikey: key id must not be empty");
  for (int attempt = 0;; ++attempt) {
    StatusOr<json> cur = store_->Get({kKeyKind, "", id});
    if (!cur.ok()) {
      if (cur.status().code() == StatusCode::kNotFound) return NotFoundError("apikey " + id + " not found");
      return cur.status();
    }
    json& spec = (*cur)["spec"];
    if (spec.is_object() && spec.value("revoked", false) == true) {
      Invalidate();
      return OkStatus();
    }
    if (!spec.is_object()) spec = json::object();
    spec["revoked"] = true;
    spec["revokedAt"] = internal::FormatRfc3339(WallNow(), false);
    StatusOr<json> u = store_->Update(*cur, store::ResourceVersionOf(*cur));
    if (u.ok()) {
      Invalidate();
      return OkStatus();
    }
    if (u.status().code() != StatusCode::kAborted || attempt >= 5) return u.status();
  }
}

}  // namespace aicloud::auth
