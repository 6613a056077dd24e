// RateShare: rpm and tpm limits held jointly by the gateways that share a store.
//
// Each gateway enforces rate limits with its own token buckets (limits.h), which alone would let
// N gateways admit N times a key's rpm. With RateShare every gateway publishes, once a second,
// what each scope took from it — net requests and tokens, and the limits it applies — in its
// GatewayRate object (cluster-scoped, name "rates-<gateway id>"; status {expires, seq, scopes:
// {<scope>: {requests, tokens, rpm, tpm, since}}}), reads the others' objects, and debits its own
// buckets with what each other gateway took since its previous look. Every bucket thus sees the
// whole fleet's consumption: over any stretch the gateways together admit what one gateway would
// (the bucket's capacity plus its refill), and the excess is bounded by what the others admit
// within one exchange (a second), after which the buckets run negative and hold requests back
// until the average is restored. This is the "cluster" scheme of Kong's and LiteLLM's limiters
// (counters synchronised periodically), not a central counter on every request: a request's
// admission never waits for the store.
//
// Deltas are taken per scope against the totals seen last time, so nothing is counted twice,
// and nothing is lost while a gateway cannot write (the others catch up when it can; they keep
// what they saw of a gateway whose lease lapsed for an hour) — unless the outage outlasts the
// window and the limiter prunes the scope meanwhile (Forget): what was taken after the last
// landed write is then not charged elsewhere. A scope enters a gateway's object
// when used and leaves it after `window_s` idle; each entry carries `since`, the publisher's
// exchange number when it entered, and counts what the publisher took since its last landed write
// before that: an entry another gateway has not seen before is therefore all new consumption —
// except on that gateway's own first exchange, which takes what is already published as history,
// and for a gateway first seen after a long life (more than 3 exchanges: one this gateway forgot,
// or one whose lease had lapsed when this one started), whose totals are history too; what that
// one took while forgotten is not counted. No clocks are compared but for leases. A gateway that
// stops deletes its object; one that died is forgotten when its lease runs out, and its object
// deleted an hour later.
//
//   RateShare share(store, &limiter, wall_seconds, {.id = ledger.id()});
//   every second: if (Status s = share.Sync(); !s.ok()) log(s);   // limits stay local meanwhile
//   at stop:      share.Release();
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "gateway/limits.h"
#include "store/store.h"

namespace aicloud::gateway {

struct RateShareOptions {
  std::string id;          // this gateway's name among the others (required)
  int64_t lease_s = 10;    // an object not renewed for this long belongs to a gateway that is gone
                           // (make it several exchange periods)
  int64_t window_s = 600;  // scopes published: those this gateway used within the window
};

// Thread-safe (one exchange at a time).
class RateShare {
 public:
  RateShare(store::Store* store, RateLimiter* limiter, std::function<int64_t()> wall_seconds,
            RateShareOptions options);

  // One exchange: writes this gateway's object, reads the others' and debits the limiter.
  // On an error the limiter keeps what it had; the next exchange catches up.
  Status Sync();
  // Deletes this gateway's object (a gateway stopping).
  Status Release();

  // Forgets what was published for scopes the limiter pruned (RateLimiter::Prune): their totals
  // start over from zero, so if one comes back it enters the object afresh (a new `since`).
  void Forget(const std::vector<std::string>& scopes);
  // Scopes with publication state (tests).
  size_t PublishedScopes() const;

  // Gateways seen alive at the last exchange, this one excluded (tests, metrics).
  int Peers() const;

 private:
  // What a scope's published totals count from: a scope enters publication when first used
  // within the window and starts over (new `since`, totals from `base`) when it comes back.
  struct Published {
    int64_t since = 0;
    RateTotals base;     // subtracted from this gateway's totals while published
    RateTotals written;  // this gateway's totals at its last exchange whose write landed
    bool live = false;
  };
  struct Seen {
    int64_t since = 0;
    RateTotals totals;
  };
  struct Peer {
    std::unordered_map<std::string, Seen> last;  // by scope, as of the previous exchange
    int64_t alive_at = 0;                         // wall seconds it was last seen alive
    bool alive = false;
  };
  std::string ObjectName() const { return "rates-" + options_.id; }

  store::Store* const store_;
  RateLimiter* const limiter_;
  const std::function<int64_t()> wall_seconds_;
  const RateShareOptions options_;
  mutable std::mutex mu_;
  std::map<std::string, Peer> peers_;               // GUARDED_BY(mu_), by object name
  std::unordered_map<std::string, Published> published_;  // GUARDED_BY(mu_)
  int64_t seq_ = 0;        // GUARDED_BY(mu_): exchanges so far
  bool synced_ = false;    // GUARDED_BY(mu_): an exchange has read the others
};

}  // namespace aicloud::gateway
