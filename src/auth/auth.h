// Auth: who is calling (API keys), what they may do (RBAC), and what they did (audit.h).
//
//   AuthService auth(store, clock);
//   StatusOr<std::optional<std::string>> first = auth.Bootstrap();   // once per process start
//   if (first.ok() && *first) std::cout << "admin token: " << **first << "\n";  // printed once
//
//   StatusOr<Principal> who = auth.Authenticate(request.header("Authorization"));
//   if (!who.ok()) return Reply(401, who.status().message());   // UNAUTHENTICATED
//   Decision d = auth.Authorize(*who, "create", "jobs", "nlp");
//   if (!d.allowed) return Reply(403, d.reason);
//   audit.Append({.user = who->user, .key_id = who->key_id, .verb = "create", ...});
//
//   // Listing a tenant-scoped resource: nullopt = every tenant, else only these.
//   std::optional<std::vector<std::string>> tenants = auth.VisibleTenants(*who, "list", "jobs");
//
// The model. Everything is a store object (apiVersion "aicloud/v1"), so it is durable, watchable
// and editable through the ordinary API:
// - User (cluster-scoped): spec {displayName?}. A key whose owner has no User object does not
//   authenticate.
// - Role (cluster-scoped): spec.rules = [{verbs: [...], resources: [...]}]; "*" matches any verb
//   or resource. Roles only add permissions; anything no rule grants is denied.
// - RoleBinding: spec {role, subjects: [user names]}. metadata.tenant "" = cluster-wide binding;
//   otherwise it grants its role only inside that tenant (see scoping below).
// - ApiKey (cluster-scoped, named by its 12-hex-char key id): spec {user, tenant?, roles?,
//   expiresAt? (RFC 3339), revoked, hash}. The token is "aic_<id>_<64 hex chars of 32 random
//   bytes>"; only sha256(secret) is stored, compared in constant time. `tenant` restricts the key
//   to one tenant; `roles` narrows it: the key may do what its owner may do AND what one of
//   these roles grants (so a key can never do more than its owner). Absent = owner's full rights.
// - Built-in roles, upserted by Bootstrap (label aicloud/builtin=true; edits to them are
//   overwritten at the next start): cluster-admin (* on *), tenant-admin, developer, viewer,
//   agent, gateway — see BuiltinRoles() in auth.cc for the exact rules. A Role that has a
//   built-in's name but not the label (an operator's, made before an upgrade brought the
//   built-in) is left as it is.
//
// Resources are lowercase plurals (tenants, queues, users, roles, rolebindings, apikeys, nodes,
// racks, jobs, events, auditrecords, usage, logs, agent, deployments, gateway); verbs are get, list,
// watch, create, update, delete and the special cordon, drain, cancel, verify.
//
// Scoping — what the `tenant` argument of Authorize means:
// - Tenant-scoped resources: jobs, queues, events, usage, logs, deployments, rolebindings,
//   apikeys. `tenant` is the tenant the object lives in (for an ApiKey: the tenant the key is
//   restricted to). tenant "" means "cluster-wide / across all tenants" (a cluster-wide
//   RoleBinding, an unrestricted ApiKey, a list over every tenant) and needs a cluster-wide grant.
// - Cluster-scoped resources: everything else, including unknown resource names. `tenant` is
//   ignored, except for `tenants`, where it is the name of the tenant being read ("" for all).
// - A cluster-wide binding grants its rules everywhere. A binding in tenant T grants its rules on
//   tenant-scoped resources in T only, and on cluster-scoped resources only these reads
//   (get/list/watch): `nodes`, and `tenants` with tenant == T. Nothing else cluster-scoped
//   (no cordon, no users, no roles) ever comes from a tenant binding.
// - A tenant-restricted key (Principal::key_tenant) is held to the same limits as a tenant
//   binding for its tenant, whatever its owner's bindings say.
// - So a tenant-admin of T, who may create RoleBindings in T, cannot escalate: even a binding of
//   cluster-admin made in T grants only what a tenant-admin of T already has there.
//
// ApiKey management: a principal may create a key for itself when Authorize(create, apikeys,
// <the new key's tenant or "">) allows it (so a developer bound in tenant a creates keys
// restricted to a); a key for another user needs a cluster-wide create on apikeys. Whether a
// developer lists/deletes only its *own* keys is for the API layer to filter by spec.user:
// Authorize cannot see owners.
//
// Caching: Authenticate and Authorize answer from an in-memory snapshot of the User, Role,
// RoleBinding and ApiKey objects. A write through this service invalidates it at once (a key
// revoked by RevokeApiKey is rejected by the very next Authenticate); writes made by others
// directly to the store are noticed within ~100 ms (the store's Changes for those four kinds
// are polled at most that often, only when Revision() moved).
//
// Time: Clock may be a steady (non-wall) clock, so wall time is anchored at construction:
// wall_now = system_clock at construction + (clock->NowMicros() - clock at construction).
// With a FakeClock, advancing it moves key expiry forward.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "auth/audit.h"
#include "core/clock.h"
#include "core/status.h"
#include "store/store.h"

namespace aicloud::auth {

// SHA-256 of `data`: the 32 bytes (nullopt if OpenSSL fails, which the default provider does
// not), and as lowercase hex ("" on that failure).
using Sha256Digest = std::array<unsigned char, 32>;
std::optional<Sha256Digest> Sha256(std::string_view data);
std::string Sha256Hex(std::string_view data);
// Equality of two secrets in time that depends only on their lengths (CRYPTO_memcmp); different
// lengths compare unequal.
bool ConstantTimeEquals(std::string_view a, std::string_view b);
// HMAC-SHA256 of `data` under `key`, as 64 lowercase hex chars ("" if OpenSSL fails).
std::string HmacSha256Hex(std::string_view key, std::string_view data);
// 2*bytes lowercase hex chars from OpenSSL RAND_bytes; "" if the CSPRNG fails.
std::string RandomHex(size_t bytes);

// The authenticated caller.
struct Principal {
  std::string user;                        // "" never authenticates or is allowed anything
  std::string key_id;                      // the ApiKey used (or "bootstrap" for internal use)
  std::optional<std::string> key_tenant;   // the key is restricted to this tenant
  std::vector<std::string> key_roles;      // non-empty: the key is narrowed to these roles
};

struct Decision {
  bool allowed = false;
  // "allowed by RoleBinding nlp/devs (role developer)" or
  // "user bob has no role granting create on jobs in tenant nlp".
  std::string reason;
  int64_t policy_revision = 0;  // store revision of the RBAC snapshot the decision used
};

// Names of the built-in roles.
inline constexpr const char* kClusterAdminRole = "cluster-admin";
inline constexpr const char* kTenantAdminRole = "tenant-admin";
inline constexpr const char* kDeveloperRole = "developer";
inline constexpr const char* kViewerRole = "viewer";
inline constexpr const char* kAgentRole = "agent";
inline constexpr const char* kGatewayRole = "gateway";

// Splits a "Bearer aic_<id>_<secret>" header value (or the raw token) into the key id and the
// secret's hex; false when it is not shaped like an aicloud token.
bool SplitToken(std::string_view authorization, std::string_view* id, std::string_view* secret);

// A live API key as a standalone gateway authenticates it (AuthService::ServingKeys).
struct ServingKey {
  std::string id;
  std::string hash;                                          // sha256 hex of the secret
  std::optional<std::string> tenant;                         // the key is restricted to it
  std::optional<std::chrono::system_clock::time_point> expires;
  bool all_models = false;  // unrestricted and may read deployments everywhere: calls any model
};

// True for the resources whose requests name a tenant (jobs, queues, ..., apikeys).
bool IsTenantScopedResource(std::string_view resource);

// Thread-safe.
class AuthService {
 public:
  AuthService(store::Store* store, Clock* clock);  // both outlive it
  ~AuthService();
  AuthService(const AuthService&) = delete;
  AuthService& operator=(const AuthService&) = delete;

  // First start (no User "admin"): creates the built-in roles, user "admin" with a cluster-wide
  // cluster-admin RoleBinding ("admin-cluster-admin") and an unrestricted ApiKey for admin, in
  // one commit, and returns that key's token (print it once: it is not stored). Later starts
  // upsert the built-in roles (so new built-ins appear) and return std::nullopt.
  StatusOr<std::optional<std::string>> Bootstrap();
  // The built-in roles the last Bootstrap left as an operator made them (a Role of that name
  // without the built-in label): their shipped rules are not in force. The caller warns.
  const std::vector<std::string>& BuiltinRolesLeftAlone() const { return left_alone_; }

  // `authorization` is a "Bearer aic_..." header value or the raw token. UNAUTHENTICATED with
  // "malformed token", "unknown key" (also for a wrong secret or a missing owner), "key revoked"
  // or "key expired".
  StatusOr<Principal> Authenticate(std::string_view authorization);

  // tenant: see "Scoping" above; "" for cluster-scoped requests.
  Decision Authorize(const Principal& who, std::string_view verb, std::string_view resource,
                     std::string_view tenant);

  struct CreatedKey {
    std::string id;
    std::string token;      // returned once, never stored
    nlohmann::json object;  // the stored ApiKey
  };
  // Creates a key owned by `owner_user` (which must exist). PERMISSION_DENIED unless `creator`
  // may create apikeys in the key's scope (cluster-wide for another user's key); a key minted
  // with a tenant-restricted key must be restricted to the same tenant; with a narrowed key, the
  // new key's roles must be covered by the creator's key roles (and default to them). NOT_FOUND
  // for an unknown role or user; INVALID_ARGUMENT for an expiry in the past.
  StatusOr<CreatedKey> CreateApiKey(const Principal& creator, std::string_view owner_user,
                                    std::optional<std::string> tenant,
                                    std::vector<std::string> roles,
                                    std::optional<std::chrono::system_clock::time_point> expires);

  // Marks the key revoked (NOT_FOUND when absent). The caller authorizes. Takes effect for this
  // service before it returns.
  Status RevokeApiKey(std::string_view key_id);

  // For list filtering of a tenant-scoped resource (or `tenants`): nullopt = every tenant;
  // otherwise the sorted tenants where Authorize(who, verb, resource, t) allows (maybe empty).
  std::optional<std::vector<std::string>> VisibleTenants(const Principal& who,
                                                         std::string_view verb,
                                                         std::string_view resource);

  // A number that changes whenever what a token authenticates to may have changed: a new RBAC
  // snapshot (an edit through this service or Invalidate at once; any other change to the policy
  // kinds within one poll interval) or a key's expiry passing. For callers that remember an
  // authentication instead of repeating it (the gateway's kept-alive connections). Without
  // RefreshInBackground, and while no current snapshot is loaded, every call returns a new
  // number (nothing remembered is reused). Reads only memory.
  uint64_t Epoch();

  // The keys that authenticate now (not revoked, not expired, owner present), for the gateways
  // that run apart from the server (GET /api/v1/gateway/config): what the server's own front door
  // derives per request, derived once per key. UNAVAILABLE while no snapshot can be loaded.
  StatusOr<std::vector<ServingKey>> ServingKeys();

  // Forces the next call to reload the RBAC snapshot (tests; after bulk edits). With a
  // background refresher, reloads now instead, so the edit is in force for every thread when
  // this returns.
  void Invalidate();

  // Keeps the RBAC snapshot fresh on a thread of its own: the change log is polled every 100 ms
  // and the snapshot reloaded after a policy change, so Authenticate, Authorize and
  // VisibleTenants read only memory once a snapshot exists — for callers on an event loop, which
  // must not wait on the store. Edits made through this service (CreateApiKey, RevokeApiKey,
  // Bootstrap, Invalidate) still take effect before they return; edits made elsewhere within
  // about one poll interval, as without the refresher. (If the reload after an edit through this
  // service fails, the snapshot is dropped rather than served stale, and the next check loads it
  // on its own thread.) Idempotent; the destructor stops it.
  void RefreshInBackground();

 private:
  struct Snapshot;
  std::shared_ptr<const Snapshot> Current();
  StatusOr<std::shared_ptr<const Snapshot>> Refresh();
  void RefreshLoop();
  StatusOr<std::shared_ptr<const Snapshot>> Load();
  Decision AuthorizeIn(const Snapshot& s, const Principal& who, std::string_view verb,
                       std::string_view resource, std::string_view tenant) const;
  std::chrono::system_clock::time_point WallNow() const;

  store::Store* const store_;
  Clock* const clock_;
  const std::chrono::system_clock::time_point wall_anchor_;
  const int64_t clock_anchor_;
  struct Cache;
  std::unique_ptr<Cache> cache_;
  std::vector<std::string> left_alone_;  // by Bootstrap (called once, before serving)
};

}  // namespace aicloud::auth
