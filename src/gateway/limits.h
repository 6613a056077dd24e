// Rate limits: requests per minute and tokens per minute, per key and per tenant.
//
// Each (scope, rpm|tpm) is a token bucket holding at most one minute of allowance: it starts
// full, refills continuously at limit/60 per second, and a request takes 1 from the rpm bucket and
// its token estimate from the tpm bucket — from every scope at once or from none. So a key with
// rpm 60 may burst 60 requests, then send one per second; a quiet minute restores the burst.
// (A sliding-window log would be exact but costs memory per request; the bucket is the usual
// choice of Envoy's and NGINX's limiters.)
//
// Tokens are not known before the answer: admission takes the request's estimate (prompt
// estimate + max_tokens), and Adjust() returns the difference once the real usage is known (or
// takes more, letting the bucket go negative, which delays later requests).
//
// Several gateways: each counts what it took per scope (Totals) and takes what the others took
// (Debit), exchanged through the store by RateShare (rate_share.h); every bucket then sees the
// whole fleet's consumption, so together the gateways admit the limit, not N times it.
//
//   RateLimiter rl(&clock);
//   RateVerdict v = rl.Admit({{"key k1", &caller.key_limits}, {"tenant nlp", &caller.tenant_limits}}, 900);
//   if (!v.ok) return 429 with Retry-After v.retry_after_s and v.message;
//   ... rl.Adjust(scopes, 900 - used);
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/clock.h"
#include "gateway/access.h"

namespace aicloud::gateway {

// One scope of a request: "key k1" or "tenant nlp" (the name appears in 429 messages).
struct LimitScope {
  std::string_view name;           // not owned; only used during the call
  const Limits* limits = nullptr;  // not owned; only used during the call
};

// Net amounts a scope took on one gateway since it started: requests admitted and tokens taken,
// less what Release and Adjust gave back.
struct RateTotals {
  double requests = 0;
  double tokens = 0;
  int64_t rpm = 0;  // the limits last applied to the scope (0 = none)
  int64_t tpm = 0;
};

struct RateVerdict {
  bool ok = true;
  std::string message;    // which limit, e.g. "rate limit: key k1 allows 60 requests per minute"
  int retry_after_s = 0;  // when the request would fit (at least 1)
};

// Thread-safe (one mutex; a bucket update is a few arithmetic operations).
class RateLimiter {
 public:
  explicit RateLimiter(Clock* clock) : clock_(clock) {}

  RateVerdict Admit(std::span<const LimitScope> scopes, int64_t tokens);
  // delta > 0 returns tokens to the tpm buckets (the estimate was high), < 0 takes more.
  void Adjust(std::span<const LimitScope> scopes, int64_t delta);
  // Undoes an Admit whose request was handed elsewhere before it ran: the request and its
  // `tokens` go back to the buckets (so the request, admitted again there, counts once).
  void Release(std::span<const LimitScope> scopes, int64_t tokens);

  // This limiter's own totals, for the scopes it took from or gave back to within the last
  // `window_us` (what it publishes to the other gateways); requests and tokens together.
  std::unordered_map<std::string, RateTotals> Totals(int64_t window_us) const;
  // What another gateway took from `scope` (negative: gave back), with the limits it applies:
  // taken from this limiter's buckets now; a scope not seen here yet gets its buckets (full, at
  // those limits) first, so the debt refills here as it would there.
  void Debit(const std::string& scope, const RateTotals& taken);

  // Drops the buckets of scopes nobody here used for `idle_us` that are full again (so forgetting
  // them changes no answer), and returns those scopes: their totals start over from zero if they
  // come back (RateShare forgets what it published for them). Keeps memory to the scopes in use.
  std::vector<std::string> Prune(int64_t idle_us);
  size_t Scopes() const;  // scopes with a bucket (tests, metrics)

 private:
  // A bucket never taken from (init false, touched_us -1) answers as a missing one would.
  struct Bucket {
    double level = 0;
    int64_t at_us = 0;
    bool init = false;
    int64_t limit = 0;   // at the last refill
    double taken = 0;    // net, by this limiter
    int64_t touched_us = -1;  // never
  };
  // Both buckets of a scope, so a request finds them with one lookup.
  struct ScopeBuckets {
    Bucket rpm, tpm;
  };
  // Looks names up without building a string (heterogeneous lookup).
  struct NameHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  using ScopeMap = std::unordered_map<std::string, ScopeBuckets, NameHash, std::equal_to<>>;
  // The scope's buckets, made (empty) when it has none. REQUIRES: mu_ held.
  ScopeBuckets& BucketsLocked(std::string_view name);
  static void Refill(Bucket& b, int64_t limit, int64_t now_us);
  static void DebitBucket(Bucket& b, double amount, int64_t limit, int64_t now_us);
  // Others' debits take a bucket at most this many minutes of allowance below empty (ten
  // gateways each taking a full bucket within one exchange), so a bogus total cannot shut a
  // scope out for longer than that.
  static constexpr double kMaxDebt = 10;

  Clock* const clock_;
  mutable std::mutex mu_;
  ScopeMap scopes_;  // GUARDED_BY(mu_)
};

}  // namespace aicloud::gateway
