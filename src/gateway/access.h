// Who is calling the gateway and which models they may use.
//
// The gateway authenticates `Authorization: Bearer <key>` through an injected Authenticator, so
// the server can plug its AuthService (API keys, tenants) and `aicloud gateway` can take keys from
// the upstreams file (StaticKeys). Authorization is model- and adapter-level RBAC:
//
//   - a key may see (in /v1/models) and call the models of its own tenant;
//   - and any model explicitly granted to it (Caller::models; "*" grants every model);
//   - an adapter inherits its base model's grant (Zanzibar-style "X from parent"): whoever may
//     use the base may use every adapter of it; granting an adapter by name grants that adapter
//     alone, not its base or siblings.
//
//   StatusOr<CallerRef> who = authenticate(req.Header("authorization"));   // 401 when not ok
//   if (!MayUse(**who, *route, adapter)) 403;
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "gateway/directory.h"

namespace aicloud::gateway {

// Limits of one key or one tenant. 0 = no limit.
struct Limits {
  int64_t rpm = 0;              // requests per minute (token bucket, see limits.h)
  int64_t tpm = 0;              // tokens (prompt + completion) per minute
  int64_t budget_tokens = 0;    // tokens per budget period
  double budget_cost = 0;       // cost units (Route prices) per budget period
  int64_t budget_period_s = 0;  // 0 = the budget never resets (a lifetime allowance)

  bool HasRate() const { return rpm > 0 || tpm > 0; }
  bool HasBudget() const { return budget_tokens > 0 || budget_cost > 0; }
  bool operator==(const Limits&) const = default;
};

// The authenticated caller of one request.
struct Caller {
  std::string key_id;               // a stable, non-secret id of the key (limits, records)
  std::string tenant;               // the tenant the key belongs to
  std::string team;                 // optional, recorded in usage
  std::vector<std::string> models;  // models granted beyond the tenant's own; "*" = every model
  Limits key_limits;                // this key's own limits
  Limits tenant_limits;             // the tenant's limits, shared by all its keys
};

// A caller as authenticators hand it out: shared and immutable, so a request holds its caller
// without copying it (an authenticator may hand out the same one for every request of a key).
using CallerRef = std::shared_ptr<const Caller>;

// Maps the Authorization header value ("Bearer sk-...", possibly empty) to a caller (never null).
// UNAUTHENTICATED (-> 401) for a missing, malformed, unknown, revoked or expired key; any other
// error is answered 503. Called on every request from many threads: must be thread-safe and fast
// (in-memory lookups).
using Authenticator = std::function<StatusOr<CallerRef>(std::string_view authorization)>;

// True when `who` may call `route` (adapter == "" for the base model) under the rules above.
bool MayUse(const Caller& who, const Route& route, std::string_view adapter);

// "Bearer abc" -> "abc" (scheme case-insensitive, surrounding spaces dropped); "" otherwise.
std::string_view BearerToken(std::string_view authorization);

// Keys held in memory (standalone gateway, tests). Only SHA-256 digests of the tokens are kept;
// lookups hash the presented token, so timing does not depend on how much of it matches.
// Thread-safe.
class StaticKeys {
 public:
  // INVALID_ARGUMENT for an empty token or one added twice.
  Status Add(std::string_view token, Caller caller);
  StatusOr<CallerRef> Authenticate(std::string_view authorization) const;
  // An Authenticator calling this object (which must outlive it).
  Authenticator AsAuthenticator() const;
  // Changes whenever a key is added: a GatewayDeps::auth_epoch for AsAuthenticator (the object
  // must outlive it).
  std::function<uint64_t()> AsEpoch() const;
  size_t size() const;

 private:
  using Digest = std::array<unsigned char, 32>;  // SHA-256
  struct DigestHash {
    size_t operator()(const Digest& d) const {  // a digest's bytes are already uniform
      size_t h;
      std::memcpy(&h, d.data(), sizeof h);
      return h;
    }
  };
  mutable std::mutex mu_;
  std::unordered_map<Digest, CallerRef, DigestHash> by_digest_;  // GUARDED_BY(mu_)
  std::atomic<uint64_t> epoch_{0};  // keys added so far
};

// One epoch from two (an authenticator's and a limits' version, say): a number that changes
// whenever either input changes. Asked on every request, so the inputs seen last are read
// without a lock, between two reads of an even count (a seqlock); a change takes the lock and
// keeps the count odd while it writes. Thread-safe.
class EpochOfTwo {
 public:
  uint64_t Of(uint64_t a, uint64_t b) {
    const uint64_t n = n_.load();
    if (n % 2 == 0 && a_.load() == a && b_.load() == b && n_.load() == n) return n;
    std::lock_guard<std::mutex> l(mu_);
    if (a != a_.load() || b != b_.load()) {
      n_.fetch_add(1);  // odd: being written
      a_.store(a);
      b_.store(b);
      n_.fetch_add(1);  // even: a new epoch
    }
    return n_.load();
  }

 private:
  std::mutex mu_;  // serializes changes
  std::atomic<uint64_t> a_{~uint64_t{0}}, b_{~uint64_t{0}}, n_{0};
};

}  // namespace aicloud::gateway
