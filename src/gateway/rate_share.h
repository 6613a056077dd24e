// RateShare: rpm and tpm limits held jointly by the gateways that share a store.
//
// Each gateway enforces rate limits with its own token buckets (limits.h), which alone would let
// N gateways admit N times a key's rpm. With RateShare every gateway publishes, once a second,
// what each scope took from it — net requests and tokens since it started — in its GatewayRate
// object (cluster-scoped, name "rates-<gateway id>"; status {expires, scopes: {<scope>:
// {requests, tokens, since}}}), reads the others' objects, and debits its own buckets with what
// each other gateway took since its previous look. Every bucket thus sees the whole fleet's
// consumption: over any stretch the gateways together admit what one gateway would (the
// bucket's capacity plus its refill), and the excess is bounded by what the others admit within
// one exchange (a second), after which the buckets run negative and hold requests back until the
// average is restored. This is the "cluster" scheme of Kong's and LiteLLM's limiters (counters
// synchronised periodically), not a central counter on every request: a request's admission
// never waits for the store.
//
// A gateway that stops deletes its object; one that dies stops renewing it and is forgotten
// after `lease_s`. Each published scope carries `since`, when the publisher began counting it
// (again: a scope idle for the whole window leaves the object and comes back with a new `since`
// and totals from zero). A scope another gateway began counting after this one's previous look
// is new consumption and is debited in full; one counted since before that (a gateway first
// seen by one that just started) is taken as the baseline. Leases and that rule assume the
// gateways' clocks agree within a few seconds, as the budget grants do.
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

#include "core/status.h"
#include "gateway/limits.h"
#include "store/store.h"

namespace aicloud::gateway {

struct RateShareOptions {
  std::string id;          // this gateway's name among the others (required)
  int64_t lease_s = 10;    // an object not renewed for this long belongs to a gateway that is gone
  int64_t window_s = 600;  // scopes published: those this gateway used within the window
};

// Thread-safe (one exchange at a time).
class RateShare {
 public:
  RateShare(store::Store* store, RateLimiter* limiter, std::function<int64_t()> wall_seconds,
            RateShareOptions options);

  // One exchange: writes this gateway's object, reads the others' and debits the limiter.
  // On an error the limiter keeps what it had; the next exchange catches up (deltas are taken
  // against the last totals seen, so nothing is lost or counted twice).
  Status Sync();
  // Deletes this gateway's object (a gateway stopping).
  Status Release();

  // Gateways seen alive at the last exchange, this one excluded (tests, metrics).
  int Peers() const;

 private:
  // What a scope's published totals count from: a scope enters publication when first used
  // within the window and starts over (new `since`, totals from `base`) when it comes back.
  struct Published {
    int64_t since = 0;
    RateTotals base;  // this gateway's totals when the scope (re-)entered publication
    RateTotals last;  // this gateway's totals at the last exchange that published it
    bool live = false;
  };
  struct Seen {
    int64_t since = 0;
    RateTotals totals;
  };
  struct Peer {
    std::unordered_map<std::string, Seen> last;  // by scope, as of the previous exchange
  };
  std::string ObjectName() const { return "rates-" + options_.id; }

  store::Store* const store_;
  RateLimiter* const limiter_;
  const std::function<int64_t()> wall_seconds_;
  const RateShareOptions options_;
  const int64_t started_;  // wall seconds
  mutable std::mutex mu_;
  std::map<std::string, Peer> peers_;               // GUARDED_BY(mu_), by object name
  std::unordered_map<std::string, Published> published_;  // GUARDED_BY(mu_)
  int64_t last_sync_ = 0;                           // GUARDED_BY(mu_): wall seconds, 0 = never
};

}  // namespace aicloud::gateway
