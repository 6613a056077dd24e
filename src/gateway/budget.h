// BudgetLedger: token and cost budgets per period, per key and per tenant, that concurrent
// requests cannot overspend.
//
// A request RESERVES its worst case before it is sent — prompt-token upper bound + max_tokens,
// and their cost — on every scope at once (key and tenant), under one lock: the reservation
// succeeds only when spent + reserved + this <= budget on each scope. After the answer it is
// SETTLED: the reservation is dropped and the real usage (from `usage`) is added to spent. A
// failed call settles with zero. Since usage never exceeds the reservation (the engine stops at
// max_tokens and the prompt estimate is an upper bound, see request.h), spent can never pass the
// budget, however many requests race. (LiteLLM's check-then-act budget races, its issues #34732
// and #26672, are what this avoids.)
//
// Periods are fixed windows aligned to the Unix epoch (a 1d budget resets at 00:00 UTC); period 0
// is a lifetime allowance. Durability: with a Store, spent amounts are kept as GatewayBudget
// objects (tenant = the scope's tenant, spec {scope, periodStart, periodSeconds}, status
// {spentTokens, spentCost}); Load() reads them at start and Flush() writes the changed ones in
// one commit (the gateway flushes every `flush period` and at Stop, so a crash loses at most one
// period's settlements; reservations are never stored: they die with the requests).
//
//   BudgetLedger ledger(store, wall_seconds);
//   AICLOUD_RETURN_IF_ERROR(ledger.Load());
//   StatusOr<BudgetReservation> r = ledger.Reserve(scopes, 1200, 0.0004);  // RESOURCE_EXHAUSTED
//   ... ledger.Settle(*r, 431, 0.00015);
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "gateway/access.h"
#include "store/store.h"

namespace aicloud::gateway {

// A scope of a budget: its ledger key ("key k1", "tenant nlp"), the tenant it is stored under,
// and the limits that hold the budget.
struct BudgetScope {
  std::string name;
  std::string tenant;
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

// Thread-safe.
class BudgetLedger {
 public:
  // store may be null (in-memory only). wall_seconds: Unix time now (injected for tests).
  BudgetLedger(store::Store* store, std::function<int64_t()> wall_seconds);

  // Reads the stored GatewayBudget objects (no-op without a store).
  Status Load();

  // RESOURCE_EXHAUSTED naming the scope and the budget ("budget: key k1 has 120 of 100000
  // tokens left in this 1d period; this request may use up to 1200") when any scope would
  // exceed its budget; *retry_after_s is then the seconds until that period ends (0 = never).
  StatusOr<BudgetReservation> Reserve(std::span<const BudgetScope> scopes, int64_t tokens, double cost,
                                      int* retry_after_s = nullptr);
  void Settle(const BudgetReservation& r, int64_t tokens, double cost);

  // Writes the entries changed since the last flush; no-op without a store.
  Status Flush();

  // The current period's numbers of `scope` (tests, metrics).
  BudgetUsage Usage(const std::string& scope) const;

 private:
  struct Entry {
    std::string tenant;
    int64_t period_s = 0;
    BudgetUsage u;
    bool dirty = false;
    bool stored = false;
  };
  void RollLocked(Entry& e, int64_t now_s) const;
  static std::string ObjectName(const std::string& scope);

  store::Store* const store_;
  const std::function<int64_t()> wall_seconds_;
  mutable std::mutex mu_;
  std::map<std::string, Entry> entries_;  // GUARDED_BY(mu_)
  std::mutex flush_mu_;                   // one Flush at a time
};

// "30s", "15m", "1h", "1d", "30d" -> seconds; "" or "none" -> 0. INVALID_ARGUMENT otherwise.
StatusOr<int64_t> ParsePeriod(std::string_view text);
// 86400 -> "1d", 3600 -> "1h", 0 -> "lifetime".
std::string PeriodName(int64_t seconds);

}  // namespace aicloud::gateway
