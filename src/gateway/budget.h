// BudgetLedger: token and cost budgets per period, per key and per tenant, that concurrent
// requests — on one gateway or on several sharing a store — cannot overspend.
//
// A request RESERVES its worst case before it is sent — prompt-token upper bound + max_tokens,
// and their cost — on every scope at once (key and tenant), under one lock. After the answer it is
// SETTLED: the reservation is dropped and the real usage (from `usage`) is spent. A failed call
// settles with zero. Since usage never exceeds the reservation (the engine stops at max_tokens and
// the prompt estimate is an upper bound, see request.h), spending can never pass the budget,
// however many requests race. (LiteLLM's check-then-act budget races, its issues #34732 and
// #26672, are what this avoids.)
//
// Several gateways. With a Store, each scope's budget is shared through its GatewayBudget object
// (tenant = the scope's tenant; spec {scope, periodStart, periodSeconds}; status {spentTokens,
// spentCost, grants: {<ledger id>: {tokens, cost, expires}}, settled: {<ledger id>: {seq,
// expires}}}): a ledger admits requests only
// within its own GRANT, a share of the budget it took from that object with a compare-and-swap
// update that keeps spent + the live grants of all ledgers <= budget. So each request is checked
// in memory, and no two gateways can hand out the same tokens. A grant covers what the ledger has
// in flight plus a chunk (1/8 of the budget) for the next requests; when a request does not fit,
// Reserve takes more through the store (or, asked not to block, answers UNAVAILABLE so the
// caller retries where blocking is fine). Flush() (every second in the gateway) moves the
// settled spending into the shared total, shrinks the grant back to what is in flight (+ a chunk
// while requests keep coming) and renews its lease: a grant not renewed for `lease_s` (a gateway
// that died) no longer counts, so its share comes back to the others. Spending is settled into
// the object by whichever ledger spent it, so it adds up across gateways and restarts. Each
// write carries the ledger's write number (status.settled), so spending whose write timed out
// is added once: the next sync reads back whether that write landed.
// Without a store the ledger is one process's memory.
//
// Periods are fixed windows aligned to the Unix epoch (a 1d budget resets at 00:00 UTC); period 0
// is a lifetime allowance. A crash loses at most one flush period's settlements; reservations
// are never stored: they die with the requests.
//
//   BudgetLedger ledger(store, wall_seconds);
//   AICLOUD_RETURN_IF_ERROR(ledger.Load());
//   StatusOr<BudgetReservation> r = ledger.Reserve(scopes, 1200, 0.0004);  // RESOURCE_EXHAUSTED
//   ... ledger.Settle(*r, 431, 0.00015);
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "gateway/access.h"
#include "store/store.h"

namespace aicloud::gateway {

// A scope of a budget: its ledger key ("key k1", "tenant nlp"), the tenant it is stored under,
// and the limits that hold the budget.
struct BudgetScope {
  std::string_view name;           // not owned; read during Reserve only
  std::string_view tenant;         // not owned; read during Reserve only
  const Limits* limits = nullptr;  // not owned; read during Reserve only
};

// What a Reserve took; hand it back to Settle exactly once.
struct BudgetReservation {
  struct Part {
    std::string name;
    int64_t period_start = 0;
  };
  std::vector<Part> parts;  // empty when no scope had a budget
  int64_t tokens = 0;
  double cost = 0;
};

struct BudgetUsage {
  int64_t spent_tokens = 0, reserved_tokens = 0;
  double spent_cost = 0, reserved_cost = 0;
  int64_t period_start = 0;
};

struct BudgetLedgerOptions {
  std::string id;      // this ledger's name in the shared grants; "" = random (one per process)
  int64_t lease_s = 10;  // a grant not renewed for this long stops counting
};

// Thread-safe.
class BudgetLedger {
 public:
  // store may be null (in-memory only). wall_seconds: Unix time now (injected for tests).
  BudgetLedger(store::Store* store, std::function<int64_t()> wall_seconds, BudgetLedgerOptions options = {});

  // Reads the stored GatewayBudget objects, so Usage() reports their spending (no-op without a
  // store). Admission does not need it: grants are taken from the objects as requests come.
  Status Load();

  // RESOURCE_EXHAUSTED naming the scope and the budget ("budget: key k1 has 120 of 100000
  // tokens left (in flight included) in its 1d budget period; this request may use up to 1200")
  // when any scope would exceed its budget; *retry_after_s is then the seconds until that period
  // ends (0 = never). With a store and may_block false, UNAVAILABLE when the request does not fit
  // in this ledger's grant (taking more needs the store): nothing was reserved; call again with
  // may_block where waiting for the store is fine.
  StatusOr<BudgetReservation> Reserve(std::span<const BudgetScope> scopes, int64_t tokens, double cost,
                                      int* retry_after_s = nullptr, bool may_block = true);
  void Settle(const BudgetReservation& r, int64_t tokens, double cost);

  // Settles this ledger's spending into the shared objects and resizes and renews its grants;
  // with `release` (a gateway stopping) the grants shrink to what is still in flight, so other
  // gateways need not wait for the lease to run out. No-op without a store.
  Status Flush(bool release = false);

  // Forgets the scopes no request used for `idle_s` that hold nothing (no grant, nothing in flight
  // or unsettled), so memory holds the scopes in use. With a store their numbers are in the
  // shared objects and are read again on next use; without one a scope goes only once its period
  // is over (its next use would start the period afresh anyway), and a lifetime budget never.
  // Returns how many went.
  size_t Prune(int64_t idle_s);
  size_t Scopes() const;  // scopes held (tests, metrics)

  // The current period's numbers of `scope` (tests, metrics): spent is the shared total as of
  // this ledger's last look at the store plus what it settled since.
  BudgetUsage Usage(const std::string& scope) const;

  const std::string& id() const { return options_.id; }

 private:
  struct Entry {
    std::string tenant;
    int64_t period_s = 0;
    int64_t period_start = 0;
    int64_t budget_tokens = 0;  // 0 = no token budget
    double budget_cost = 0;     // 0 = no cost budget
    int64_t spent_tokens = 0;   // without a store: all spending; with: the shared total last seen
    double spent_cost = 0;
    int64_t unflushed_tokens = 0;  // with a store: settled here since the last sync
    double unflushed_cost = 0;
    int64_t reserved_tokens = 0;
    double reserved_cost = 0;
    int64_t grant_tokens = 0;   // with a store: this ledger's share (in flight + unflushed + room)
    double grant_cost = 0;
    int64_t others_tokens = 0;  // other ledgers' live grants at the last sync
    double others_cost = 0;
    int64_t others_held_tokens = 0;  // of which in flight or settled there (not spare room)
    double others_held_cost = 0;
    int64_t in_flight = 0;      // reservations of this period not yet settled
    int64_t grant_expires = 0;  // wall seconds; the grant is void from then on
    // While a sync's write is in flight: admit only within this too (in today's accounting, so
    // what is admitted meanwhile fits both the stored grant and the one being written). Kept, and
    // only lowered, after a write that failed (it may land, even when refused: a refusal can
    // answer a resent copy), until a write succeeds. -1 = none.
    int64_t sync_limit_tokens = -1;
    double sync_limit_cost = -1;
    // Writes since the last one known to have landed that did not succeed: timed out, or refused
    // (a refusal may answer a resent request whose first copy landed). Each with the number it
    // was written under and the settled spending that would be in the shared total if it landed
    // (this ledger's unsettled-to-the-store spending when it was written). A sync reads the
    // number of the ledger's last write that landed from status.settled; a match tells how much
    // of what is unflushed here the total holds already. Cleared when a write succeeds: it was a
    // compare-and-swap on a version none of them had reached, so none of them can land after it.
    // `base`: the object version the write was a compare-and-swap on (-1: a create), so a doubt
    // that can no longer land (the object moved past its base) is dropped at the next read.
    struct Doubt {
      uint64_t seq;
      int64_t tokens;
      double cost;
      int64_t base;
    };
    std::vector<Doubt> doubts;
    uint64_t reserves = 0;      // Reserve calls so far (to tell whether one came during a sync)
    int64_t used_at = 0;        // wall seconds of the last Reserve or Settle
    bool active = false;        // reserved since the last sync
  };
  void RollLocked(Entry& e, int64_t now_s) const;
  // Whether `tokens`/`cost` fit on `e` now (grant or, without a store, budget).
  bool FitsLocked(const Entry& e, int64_t tokens, double cost, int64_t now_s) const;
  // One compare-and-swap round trip for scope `name`: settle, take a grant that covers what is
  // in flight + `extra_*` (+ a chunk while active), renew the lease.
  Status Sync(const std::string& name, int64_t extra_tokens, double extra_cost, bool release = false);
  static std::string ObjectName(const std::string& scope);

  store::Store* const store_;
  const std::function<int64_t()> wall_seconds_;
  BudgetLedgerOptions options_;
  mutable std::mutex mu_;
  uint64_t write_seq_;  // GUARDED_BY(mu_); numbers this ledger's writes (random start, so a restart
                        // with the same id does not meet its own old numbers)
  // The scope's entry, made (empty) when it has none. REQUIRES: mu_ held.
  Entry& EntryLocked(std::string_view name);

  std::map<std::string, Entry, std::less<>> entries_;  // GUARDED_BY(mu_)
  // One store round trip at a time per scope, so a slow sync of one scope does not hold up a
  // request that needs another. A scope's lock is shared while a Sync holds or awaits it, and
  // Prune leaves such a scope alone.
  std::map<std::string, std::shared_ptr<std::mutex>> sync_locks_;  // GUARDED_BY(mu_)
};

// "30s", "15m", "1h", "1d", "30d" -> seconds; "" or "none" -> 0. INVALID_ARGUMENT otherwise.
StatusOr<int64_t> ParsePeriod(std::string_view text);
// 86400 -> "1d", 3600 -> "1h", 0 -> "lifetime".
std::string PeriodName(int64_t seconds);

}  // namespace aicloud::gateway
