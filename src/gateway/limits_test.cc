#include "gateway/budget.h"
#include "gateway/limits.h"
#include "gateway/rate_share.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <future>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <thread>

#include "store/memory_store.h"
#include "store/store_test_util.h"

namespace aicloud::gateway {
namespace {

int AdmitMany(RateLimiter& rl, std::span<const LimitScope> s, int tries, int64_t tokens = 0);

TEST(RateLimiter, RpmBucketBurstsThenRefills) {
  FakeClock clock;
  RateLimiter rl(&clock);
  Limits l{.rpm = 3};
  std::vector<LimitScope> s = {{"key k1", &l}};
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(rl.Admit(s, 0).ok) << i;
  RateVerdict v = rl.Admit(s, 0);
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.retry_after_s, 20);  // one request every 20 s at 3 per minute
  EXPECT_NE(v.message.find("key k1 allows 3 requests per minute"), std::string::npos) << v.message;
  clock.Advance(20 * kMicrosPerSecond);
  EXPECT_TRUE(rl.Admit(s, 0).ok);
  EXPECT_FALSE(rl.Admit(s, 0).ok);
}

TEST(RateLimiter, AllOrNothingAcrossScopesAndTpmAdjust) {
  FakeClock clock;
  RateLimiter rl(&clock);
  Limits key{.tpm = 1000}, tenant{.rpm = 100, .tpm = 500};
  std::vector<LimitScope> s = {{"key k1", &key}, {"tenant t", &tenant}};
  EXPECT_TRUE(rl.Admit(s, 400).ok);
  RateVerdict v = rl.Admit(s, 400);  // the key has room, the tenant does not
  EXPECT_FALSE(v.ok);
  EXPECT_NE(v.message.find("tenant t allows 500 tokens per minute"), std::string::npos) << v.message;
  rl.Adjust(s, 300);  // the first request used 100 of its 400
  EXPECT_TRUE(rl.Admit(s, 400).ok);
  RateVerdict big = rl.Admit(s, 5000);
  EXPECT_FALSE(big.ok);
  EXPECT_NE(big.message.find("more than key k1 allows per minute"), std::string::npos) << big.message;
}

// More scopes than the limiter keeps at hand between its check and its take (four): still all or
// nothing, and each scope's bucket is taken from once. Scopes without limits get no buckets, and
// neither does another gateway's debit of a scope that has no limit anywhere.
TEST(RateLimiter, ManyScopesAndScopesWithoutLimits) {
  FakeClock clock;
  RateLimiter rl(&clock);
  Limits two{.rpm = 2}, none{};
  const std::vector<std::string> names = {"key a", "key b", "key c", "key d", "key e", "tenant t"};
  std::vector<LimitScope> s;
  for (const std::string& n : names) s.push_back({n, &two});
  s.push_back({"key unlimited", &none});
  EXPECT_TRUE(rl.Admit(s, 0).ok);
  EXPECT_TRUE(rl.Admit(s, 0).ok);
  EXPECT_FALSE(rl.Admit(s, 0).ok);  // every bucket is empty now, the sixth's too
  EXPECT_EQ(rl.Scopes(), names.size());  // "key unlimited" has none
  std::vector<LimitScope> sixth = {{"tenant t", &two}};  // beyond the four kept: taken from too
  EXPECT_FALSE(rl.Admit(sixth, 0).ok);
  clock.Advance(30 * kMicrosPerSecond);  // one request back in every bucket
  EXPECT_TRUE(rl.Admit(s, 0).ok);
  EXPECT_FALSE(rl.Admit(sixth, 0).ok);
  rl.Debit("key elsewhere", {.requests = 5, .tokens = 100});  // no rpm or tpm known for it
  EXPECT_EQ(rl.Scopes(), names.size());
  rl.Debit("key elsewhere", {.requests = 5, .rpm = 60});
  EXPECT_EQ(rl.Scopes(), names.size() + 1);
}

// Buckets of scopes nobody uses go once they are full again; those in use, or still below their
// limit (own requests or another gateway's debit), stay, and a pruned scope comes back full.
TEST(RateLimiter, PruneDropsIdleFullBucketsOnly) {
  FakeClock clock;
  RateLimiter rl(&clock);
  Limits l{.rpm = 60, .tpm = 6000};
  std::vector<LimitScope> idle = {{"key idle", &l}}, busy = {{"key busy", &l}};
  for (int i = 0; i < 1000; ++i) {
    Limits one{.rpm = 10};
    const std::string name = "key once-" + std::to_string(i);
    std::vector<LimitScope> s = {{name, &one}};
    ASSERT_TRUE(rl.Admit(s, 0).ok);
  }
  EXPECT_EQ(AdmitMany(rl, idle, 60, 100), 60);  // empties its rpm bucket
  rl.Debit("key elsewhere", {.requests = 1000, .rpm = 60});  // ten minutes of debt (the most kept)
  EXPECT_EQ(rl.Scopes(), 1002u);
  EXPECT_TRUE(rl.Prune(600 * kMicrosPerSecond).empty());  // nothing idle for ten minutes yet

  clock.Advance(300 * kMicrosPerSecond);
  EXPECT_TRUE(rl.Admit(busy, 10).ok);
  clock.Advance(301 * kMicrosPerSecond);
  std::vector<std::string> dropped = rl.Prune(600 * kMicrosPerSecond);
  EXPECT_EQ(dropped.size(), 1001u);  // the one-off keys and "key idle", refilled long ago
  EXPECT_EQ(std::count(dropped.begin(), dropped.end(), "key idle"), 1);
  EXPECT_EQ(std::count(dropped.begin(), dropped.end(), "key busy"), 0);       // used 301 s ago
  EXPECT_EQ(std::count(dropped.begin(), dropped.end(), "key elsewhere"), 0);  // still in debt
  EXPECT_EQ(rl.Scopes(), 2u);
  EXPECT_EQ(AdmitMany(rl, idle, 70, 100), 60);  // back, with a full bucket (not less, not more)
  std::vector<LimitScope> elsewhere = {{"key elsewhere", &l}};
  EXPECT_EQ(AdmitMany(rl, elsewhere, 5), 1);  // the debt still holds it back: -600 + 601 s of refill

  clock.Advance(3600 * kMicrosPerSecond);  // all refilled; "key idle" was used an hour ago
  EXPECT_EQ(rl.Prune(600 * kMicrosPerSecond).size(), 3u);
  EXPECT_EQ(rl.Scopes(), 0u);
  EXPECT_TRUE(rl.Totals(7200 * kMicrosPerSecond).empty());
}

TEST(BudgetLedger, ReserveSettleAndPeriods) {
  int64_t now = 86400 * 100 + 5;
  BudgetLedger ledger(nullptr, [&] { return now; });
  Limits l{.budget_tokens = 1000, .budget_period_s = 86400};
  std::vector<BudgetScope> s = {{"key k1", "t", &l}};
  StatusOr<BudgetReservation> a = ledger.Reserve(s, 600, 0);
  ASSERT_TRUE(a.ok());
  int retry = -1;
  StatusOr<BudgetReservation> b = ledger.Reserve(s, 600, 0, &retry);  // 600 in flight: no room
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(b.status().message().find("key k1 has 400 of 1000 tokens left"), std::string::npos) << b.status();
  EXPECT_EQ(retry, 86400 - 5);
  ledger.Settle(*a, 100, 0);
  EXPECT_EQ(ledger.Usage("key k1").spent_tokens, 100);
  EXPECT_EQ(ledger.Usage("key k1").reserved_tokens, 0);
  StatusOr<BudgetReservation> late = ledger.Reserve(s, 600, 0);
  EXPECT_TRUE(late.ok());
  now += 86400;  // next day: spending starts over; yesterday's request belongs to yesterday
  StatusOr<BudgetReservation> today = ledger.Reserve(s, 1000, 0);
  EXPECT_TRUE(today.ok());
  EXPECT_FALSE(ledger.Reserve(s, 1, 0).ok());
  ledger.Settle(*late, 600, 0);  // settles into the day it was admitted in, which is over
  EXPECT_EQ(ledger.Usage("key k1").spent_tokens, 0);
  EXPECT_EQ(ledger.Usage("key k1").reserved_tokens, 1000);
  ledger.Settle(*today, 10, 0);
  EXPECT_EQ(ledger.Usage("key k1").spent_tokens, 10);
  EXPECT_EQ(ledger.Usage("key k1").reserved_tokens, 0);
}

// Costs that do not add up exactly in binary leave no residue: an idle scope holds nothing.
TEST(BudgetLedger, CostRoundingLeavesNothingInFlight) {
  store::MemoryStore store;
  int64_t now = 1'000;
  Limits l{.budget_cost = 10};
  std::vector<BudgetScope> s = {{"key k", "t", &l}};
  BudgetLedger ledger(&store, [&] { return now; }, {.id = "a"});
  StatusOr<BudgetReservation> a = ledger.Reserve(s, 1, 0.1), b = ledger.Reserve(s, 1, 0.2);
  ASSERT_TRUE(a.ok() && b.ok());
  ledger.Settle(*a, 1, 0.1);
  ledger.Settle(*b, 1, 0.2);
  EXPECT_EQ(ledger.Usage("key k").reserved_cost, 0.0);
  ASSERT_TRUE(ledger.Flush().ok());  // settles, still active: keeps some room
  ASSERT_TRUE(ledger.Flush().ok());  // idle now: gives the grant back
  const int64_t rev = store.Revision();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(ledger.Flush().ok());
  EXPECT_EQ(store.Revision(), rev) << "an idle ledger kept writing its budget every flush";
}

// Another gateway's spare room is not the budget being spent: the refusal says so and asks to
// come back in seconds, not at the end of the period.
TEST(BudgetLedger, SpareRoomOfAnotherGatewayIsNotADayLongRefusal) {
  store::MemoryStore store;
  int64_t now = 86400 * 3 + 10;
  Limits l{.budget_tokens = 800, .budget_period_s = 86400};
  std::vector<BudgetScope> s = {{"tenant t", "t", &l}};
  BudgetLedger a(&store, [&] { return now; }, {.id = "a"}), b(&store, [&] { return now; }, {.id = "b"});
  StatusOr<BudgetReservation> r = a.Reserve(s, 100, 0);  // a's grant: 100 + spare room
  ASSERT_TRUE(r.ok());
  a.Settle(*r, 0, 0);
  ASSERT_TRUE(a.Flush().ok());  // a: nothing in flight, some spare room
  int retry = 0;
  StatusOr<BudgetReservation> big = b.Reserve(s, 800, 0, &retry);
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(big.status().message().find("give it back within seconds"), std::string::npos) << big.status();
  EXPECT_LE(retry, 2);
  ASSERT_TRUE(a.Flush().ok());  // a idle: hands its room back
  EXPECT_TRUE(b.Reserve(s, 800, 0).ok());
}

TEST(BudgetLedger, CostBudgetNamesTheScope) {
  BudgetLedger ledger(nullptr, [] { return int64_t{0}; });
  Limits key{.budget_tokens = 1'000'000}, tenant{.budget_cost = 1.0};
  std::vector<BudgetScope> s = {{"key k1", "t", &key}, {"tenant t", "t", &tenant}};
  ASSERT_TRUE(ledger.Reserve(s, 10, 0.75).ok());
  StatusOr<BudgetReservation> r = ledger.Reserve(s, 10, 0.5);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("tenant t has 0.25 of 1 cost left"), std::string::npos) << r.status();
  EXPECT_EQ(ledger.Usage("key k1").reserved_tokens, 10);  // nothing taken by the failed reserve
}

TEST(BudgetLedger, ConcurrentReservationsNeverOverspend) {
  BudgetLedger ledger(nullptr, [] { return int64_t{0}; });
  Limits l{.budget_tokens = 10'000};
  std::vector<BudgetScope> s = {{"tenant t", "t", &l}};
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 500; ++i) {
        StatusOr<BudgetReservation> r = ledger.Reserve(s, 30, 0);
        if (!r.ok()) continue;
        ++ok;
        ledger.Settle(*r, 25, 0);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_LE(ledger.Usage("tenant t").spent_tokens, 10'000);
  EXPECT_EQ(ledger.Usage("tenant t").spent_tokens, 25 * ok.load());
  EXPECT_LT(ok.load(), 8 * 500);
}

TEST(BudgetLedger, SurvivesRestartThroughTheStore) {
  store::MemoryStore store;
  int64_t now = 1'000'000;
  Limits l{.budget_tokens = 1000, .budget_cost = 2, .budget_period_s = 3600};
  std::vector<BudgetScope> s = {{"key odd/Id_1", "nlp", &l}};
  {
    BudgetLedger ledger(&store, [&] { return now; });
    ASSERT_TRUE(ledger.Load().ok());
    StatusOr<BudgetReservation> r = ledger.Reserve(s, 500, 1.0);
    ASSERT_TRUE(r.ok());
    ledger.Settle(*r, 700, 1.5);
    ASSERT_TRUE(ledger.Flush().ok());
    StatusOr<BudgetReservation> r2 = ledger.Reserve(s, 100, 0.1);
    ledger.Settle(*r2, 100, 0.1);
    ASSERT_TRUE(ledger.Flush(/*release=*/true).ok());  // an update of the stored object; the grant handed back
  }
  BudgetLedger again(&store, [&] { return now; });
  ASSERT_TRUE(again.Load().ok());
  EXPECT_EQ(again.Usage("key odd/Id_1").spent_tokens, 800);
  EXPECT_DOUBLE_EQ(again.Usage("key odd/Id_1").spent_cost, 1.6);
  StatusOr<BudgetReservation> r = again.Reserve(s, 300, 0);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("has 200 of 1000 tokens left"), std::string::npos) << r.status();
}

// Idle scopes are forgotten without losing what they spent: with a store it is read back on the
// next use; without one a scope goes only once its period is over, and a lifetime budget stays.
TEST(BudgetLedger, PruneForgetsIdleScopesAndLosesNoSpending) {
  int64_t now = 86400 * 100 + 5;
  BudgetLedger local(nullptr, [&] { return now; });
  Limits hourly{.budget_tokens = 1000, .budget_period_s = 3600}, lifetime{.budget_tokens = 1000};
  std::vector<BudgetScope> h = {{"key h", "t", &hourly}}, life = {{"key life", "t", &lifetime}};
  StatusOr<BudgetReservation> a = local.Reserve(h, 400, 0), b = local.Reserve(life, 400, 0);
  ASSERT_TRUE(a.ok() && b.ok());
  now += 700;
  EXPECT_EQ(local.Prune(600), 0u);  // both in flight
  local.Settle(*a, 300, 0);
  local.Settle(*b, 300, 0);
  now += 700;
  EXPECT_EQ(local.Prune(600), 0u);  // idle, but the hour is not over: its spending is only here
  EXPECT_EQ(local.Usage("key h").spent_tokens, 300);
  now += 3600;
  EXPECT_EQ(local.Prune(600), 1u);  // the hour is over; the lifetime budget stays
  EXPECT_EQ(local.Scopes(), 1u);
  EXPECT_EQ(local.Usage("key life").spent_tokens, 300);
  EXPECT_FALSE(local.Reserve(life, 701, 0).ok());
  EXPECT_TRUE(local.Reserve(h, 1000, 0).ok());  // a new hour

  store::MemoryStore store;
  BudgetLedger shared(&store, [&] { return now; });
  ASSERT_TRUE(shared.Load().ok());
  StatusOr<BudgetReservation> r = shared.Reserve(life, 500, 0);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(shared.Flush().ok());
  EXPECT_EQ(shared.Prune(0), 0u);  // in flight, and holding a grant
  shared.Settle(*r, 450, 0);
  ASSERT_TRUE(shared.Flush().ok());  // settles, shrinks the grant
  ASSERT_TRUE(shared.Flush().ok());  // nothing reserved since: the grant goes
  EXPECT_EQ(shared.Prune(600), 0u);  // used just now
  now += 601;
  EXPECT_EQ(shared.Prune(600), 1u);
  EXPECT_EQ(shared.Scopes(), 0u);
  StatusOr<BudgetReservation> over = shared.Reserve(life, 551, 0);  // 450 spent, read back
  ASSERT_FALSE(over.ok());
  EXPECT_NE(over.status().message().find("has 550 of 1000 tokens left"), std::string::npos) << over.status();
}

// Two gateways share one budget through the store: every request is checked in memory against
// the gateway's grant, yet together they never spend more than the budget, and their spending
// adds up in the shared object (no gateway overwrites the other's).
TEST(BudgetLedger, GatewaysSharingAStoreNeverOverspendTogether) {
  store::MemoryStore store;
  std::atomic<int64_t> now{5'000};
  auto wall = [&] { return now.load(); };
  BudgetLedger a(&store, wall, {.id = "gw-a"}), b(&store, wall, {.id = "gw-b"});
  ASSERT_NE(a.id(), b.id());
  const int64_t kBudget = 20'000;
  Limits l{.budget_tokens = kBudget, .budget_period_s = 86400};
  std::vector<BudgetScope> s = {{"tenant t", "t", &l}};
  std::atomic<int> ok{0}, denied{0}, unavailable{0}, busy{0}, other{0};
  std::atomic<int64_t> settled{0};
  std::atomic<bool> stop{false};
  std::thread flusher([&] {  // as each gateway's background thread does
    while (!stop.load()) {
      EXPECT_TRUE(a.Flush().ok());
      EXPECT_TRUE(b.Flush().ok());
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < 16; ++t) {
    threads.emplace_back([&, t] {
      BudgetLedger& g = t % 2 ? a : b;
      for (int i = 0; i < 100; ++i) {
        const bool may_block = i % 4 != 0;  // some calls from an I/O thread
        StatusOr<BudgetReservation> r = g.Reserve(s, 83, 0, nullptr, may_block);
        if (r.ok()) {
          ++ok;
          g.Settle(*r, 55 + (i % 29), 0);  // the real usage, at most the reservation
          settled += 55 + (i % 29);
        } else if (r.status().code() == StatusCode::kResourceExhausted) {
          ++denied;
        } else if (r.status().code() == StatusCode::kUnavailable) {
          ++unavailable;  // from an I/O thread: go to a worker; from a worker: the budget is busy
          if (may_block) ++busy;
        } else {
          ++other;
          ADD_FAILURE() << r.status();
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  stop = true;
  flusher.join();
  ASSERT_TRUE(a.Flush(true).ok());
  ASSERT_TRUE(b.Flush(true).ok());
  EXPECT_EQ(other.load(), 0);
  EXPECT_GT(denied.load(), 0) << "1,600 requests of up to 83 tokens must exhaust 20,000";
  StatusOr<store::ListResult> o = store.List({.kind = "GatewayBudget"});
  ASSERT_TRUE(o.ok());
  ASSERT_EQ(o->items.size(), 1u);
  const int64_t spent = o->items[0]["status"]["spentTokens"].get<int64_t>();
  EXPECT_LE(settled.load(), kBudget) << "the two gateways together spent more than the budget";
  EXPECT_EQ(spent, settled.load()) << "spending of one gateway was lost";
  BudgetLedger reader(&store, wall);
  ASSERT_TRUE(reader.Load().ok());
  EXPECT_EQ(reader.Usage("tenant t").spent_tokens, spent);
  EXPECT_LT(busy.load(), 60) << "workers should rarely lose the race for a grant five times";
  EXPECT_GT(spent, kBudget - 2 * 83 - kBudget / 8) << "most of the budget went unused";
  EXPECT_TRUE(o->items[0]["status"]["grants"].empty()) << o->items[0];  // both handed theirs back
}

// A gateway that dies keeps its grant only until its lease runs out; then the others get it.
TEST(BudgetLedger, ADeadGatewaysGrantLapses) {
  store::MemoryStore store;
  int64_t now = 1'000;
  auto wall = [&] { return now; };
  Limits l{.budget_tokens = 800};
  std::vector<BudgetScope> s = {{"key k", "t", &l}};
  {
    BudgetLedger dead(&store, wall, {.id = "dead", .lease_s = 10});
    StatusOr<BudgetReservation> r = dead.Reserve(s, 500, 0);
    ASSERT_TRUE(r.ok());
    // Gone without settling or flushing: its grant (500 + a chunk) stays in the store.
  }
  BudgetLedger live(&store, wall, {.id = "live", .lease_s = 10});
  StatusOr<BudgetReservation> r = live.Reserve(s, 400, 0);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(r.status().message().find("key k has 200 of 800 tokens left"), std::string::npos) << r.status();
  EXPECT_TRUE(live.Reserve(s, 200, 0).ok());  // what the dead one did not hold
  now += 11;  // its lease ran out
  EXPECT_TRUE(live.Reserve(s, 400, 0).ok());
  // From an I/O thread, a request beyond the grant is not refused but sent where blocking is fine.
  StatusOr<BudgetReservation> more = live.Reserve(s, 150, 0, nullptr, /*may_block=*/false);
  ASSERT_FALSE(more.ok());
  EXPECT_EQ(more.status().code(), StatusCode::kUnavailable) << more.status();
  EXPECT_EQ(live.Usage("key k").reserved_tokens, 600);  // nothing taken by it
}

// Runs a hook in the middle of every commit, as another thread's work would interleave with a
// ledger's store round trip.
class HookStore : public store::testing::ForwardingStore {
 public:
  using ForwardingStore::ForwardingStore;
  std::function<void()> during_commit;
  bool fail_commits = false;  // every write answers UNAVAILABLE
  // What the next failing write does before it answers `fail_with` (once).
  enum class Fate { kLost, kLands, kLandsLate };
  int fail_writes = 0;
  Fate fate = Fate::kLost;
  StatusCode fail_with = StatusCode::kDeadlineExceeded;
  StatusOr<std::vector<store::json>> Commit(std::vector<store::WriteOp> ops) override {
    if (fail_commits) return UnavailableError("store down");
    if (during_commit) std::exchange(during_commit, nullptr)();
    if (late_) (void)inner()->Commit(*std::exchange(late_, std::nullopt));  // lands before this one
    if (fail_writes > 0) {
      --fail_writes;
      if (fate == Fate::kLands) (void)inner()->Commit(std::move(ops));
      if (fate == Fate::kLandsLate) late_ = std::move(ops);
      return Status(fail_with, "store timed out");
    }
    return inner()->Commit(std::move(ops));
  }

 private:
  std::optional<std::vector<store::WriteOp>> late_;
};

// A flush that shrinks a grant must not let the I/O thread admit, during the store write, what
// the smaller grant no longer covers: another gateway would be handed the same tokens.
TEST(BudgetLedger, AShrinkingGrantAdmitsNothingItWillNotCover) {
  store::MemoryStore mem;
  HookStore hs(&mem);
  int64_t now = 1'000;
  auto wall = [&] { return now; };
  Limits l{.budget_tokens = 800};
  std::vector<BudgetScope> s = {{"tenant t", "t", &l}};
  BudgetLedger a(&hs, wall, {.id = "a"}), b(&hs, wall, {.id = "b"});
  StatusOr<BudgetReservation> first = a.Reserve(s, 100, 0);  // grant: 100 + a chunk of 100
  ASSERT_TRUE(first.ok());
  a.Settle(*first, 0, 0);
  ASSERT_TRUE(a.Flush().ok());  // still active: the grant stays a chunk (100), nothing in flight
  bool during_ok = false;
  hs.during_commit = [&] {  // the next flush shrinks the grant to 0 (idle); meanwhile a request
    StatusOr<BudgetReservation> r = a.Reserve(s, 100, 0, nullptr, /*may_block=*/false);
    during_ok = r.ok();
  };
  ASSERT_TRUE(a.Flush().ok());
  EXPECT_FALSE(during_ok) << "admitted within a grant that was being given back";
  StatusOr<BudgetReservation> big = b.Reserve(s, 800, 0);
  const int64_t in_flight = a.Usage("tenant t").reserved_tokens + b.Usage("tenant t").reserved_tokens;
  EXPECT_LE(in_flight, 800) << "two gateways hold more than the budget";
  EXPECT_TRUE(big.ok()) << big.status();  // all of it was free again
}

// A store whose reads of one tenant's objects wait until released (a slow or distant store).
class GatedStore : public store::testing::ForwardingStore {
 public:
  GatedStore(store::Store* inner, std::string gated_tenant)
      : ForwardingStore(inner), gated_tenant_(std::move(gated_tenant)) {}
  StatusOr<store::json> Get(const store::ObjectKey& key) override {
    if (key.tenant == gated_tenant_) {
      std::unique_lock<std::mutex> l(mu_);
      ++waiting_;
      cv_.notify_all();
      cv_.wait(l, [&] { return open_; });
    }
    return inner()->Get(key);
  }
  void AwaitWaiter() {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return waiting_ > 0; });
  }
  void Open() {
    std::lock_guard<std::mutex> l(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  const std::string gated_tenant_;
  std::mutex mu_;
  std::condition_variable cv_;
  int waiting_ = 0;
  bool open_ = false;
};

// Scopes sync with the store independently: a request whose scope needs a grant is not held up
// behind another scope's round trip that the store is slow to answer.
TEST(BudgetLedger, ASlowSyncOfOneScopeDoesNotHoldUpAnother) {
  store::MemoryStore mem;
  GatedStore gs(&mem, "slow");
  auto wall = [] { return int64_t{1'000}; };
  Limits l{.budget_tokens = 10'000};
  std::vector<BudgetScope> slow = {{"tenant slow", "slow", &l}}, fast = {{"tenant fast", "fast", &l}};
  BudgetLedger ledger(&gs, wall, {.id = "a"});
  auto stuck = std::async(std::launch::async, [&] { return ledger.Reserve(slow, 100, 0).status(); });
  gs.AwaitWaiter();  // the slow scope's sync is inside the store now
  auto other = std::async(std::launch::async, [&] { return ledger.Reserve(fast, 100, 0).status(); });
  const bool answered = other.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  gs.Open();
  EXPECT_TRUE(answered) << "the fast scope waited for the slow scope's store round trip";
  EXPECT_TRUE(other.get().ok());
  EXPECT_TRUE(stuck.get().ok());
  EXPECT_EQ(ledger.Usage("tenant slow").reserved_tokens, 100);
  EXPECT_EQ(ledger.Usage("tenant fast").reserved_tokens, 100);
}

// A flush whose write failed may have landed or not: it timed out, it lands only after the next
// flush read the object (so that flush's write is refused and retried), or it was refused after
// landing (the answer to a resent copy). The ledger's write number in the object tells which, so
// the spending is in the shared total exactly once in every case (it was added twice when the
// write had landed).
TEST(BudgetLedger, SpendingWhoseWriteFailedIsCountedOnce) {
  using Fate = HookStore::Fate;
  struct Case {
    const char* name;
    Fate fate;
    StatusCode code;
  };
  for (const Case& c : {Case{"timed out, lost", Fate::kLost, StatusCode::kDeadlineExceeded},
                        Case{"timed out, landed", Fate::kLands, StatusCode::kDeadlineExceeded},
                        Case{"timed out, landed late", Fate::kLandsLate, StatusCode::kDeadlineExceeded},
                        Case{"refused after landing", Fate::kLands, StatusCode::kAborted},
                        Case{"unavailable, landed late", Fate::kLandsLate, StatusCode::kUnavailable}}) {
    SCOPED_TRACE(c.name);
    store::MemoryStore mem;
    HookStore hs(&mem);
    auto wall = [] { return int64_t{1'000}; };
    Limits l{.budget_tokens = 100'000};
    std::vector<BudgetScope> s = {{"tenant t", "t", &l}};
    BudgetLedger a(&hs, wall, {.id = "a"});
    StatusOr<BudgetReservation> r = a.Reserve(s, 500, 0);
    ASSERT_TRUE(r.ok()) << r.status();
    a.Settle(*r, 300, 0);
    hs.fail_writes = 1;
    hs.fate = c.fate;
    hs.fail_with = c.code;
    (void)a.Flush();  // fails, or (refused) is retried within the flush
    StatusOr<BudgetReservation> r2 = a.Reserve(s, 500, 0);  // more spending meanwhile
    ASSERT_TRUE(r2.ok()) << r2.status();
    a.Settle(*r2, 200, 0);
    ASSERT_TRUE(a.Flush().ok());
    ASSERT_TRUE(a.Flush().ok());  // nothing left to settle: the total stays
    BudgetLedger reader(&hs, wall, {.id = "reader"});
    ASSERT_TRUE(reader.Load().ok());
    EXPECT_EQ(reader.Usage("tenant t").spent_tokens, 500);
    EXPECT_EQ(a.Usage("tenant t").spent_tokens, 500);
  }
}

// A write that timed out but landed stays known as landed through many refused writes while
// another gateway keeps writing the object: refused writes that can no longer land are dropped
// at the next read, so they do not push it out of the ledger's memory.
TEST(BudgetLedger, ALandedWriteStaysKnownThroughRefusalsWhileOthersWrite) {
  store::MemoryStore mem;
  HookStore hs(&mem);
  auto wall = [] { return int64_t{1'000}; };
  Limits l{.budget_tokens = 100'000};
  std::vector<BudgetScope> s = {{"tenant t", "t", &l}};
  BudgetLedger a(&hs, wall, {.id = "a"}), b(&mem, wall, {.id = "b"});
  StatusOr<BudgetReservation> r = a.Reserve(s, 500, 0);
  ASSERT_TRUE(r.ok()) << r.status();
  a.Settle(*r, 300, 0);
  hs.fail_writes = 1;
  hs.fate = HookStore::Fate::kLands;
  hs.fail_with = StatusCode::kDeadlineExceeded;
  EXPECT_FALSE(a.Flush().ok());  // landed, reported as a timeout
  hs.fate = HookStore::Fate::kLost;
  hs.fail_with = StatusCode::kAborted;
  for (int i = 0; i < 6; ++i) {  // 6 x 16 refused attempts: more than the doubts the ledger keeps
    StatusOr<BudgetReservation> rb = b.Reserve(s, 10, 0);
    ASSERT_TRUE(rb.ok()) << rb.status();
    b.Settle(*rb, 10, 0);
    ASSERT_TRUE(b.Flush().ok());  // moves the object on, carrying a's write number
    hs.fail_writes = 16;
    EXPECT_FALSE(a.Flush().ok());
  }
  hs.fail_writes = 0;
  ASSERT_TRUE(a.Flush().ok());
  BudgetLedger reader(&mem, wall, {.id = "reader"});
  ASSERT_TRUE(reader.Load().ok());
  EXPECT_EQ(reader.Usage("tenant t").spent_tokens, 300 + 6 * 10);
}

// A GatewayBudget edited by hand or by a foreign tool must not crash or wedge the gateway:
// wrong types count as nothing, bogus grants are ignored, huge values are clamped.
TEST(BudgetLedger, MalformedStoredObjectsAreReadSafely) {
  store::MemoryStore store;
  Limits l{.budget_tokens = 1000};
  std::vector<BudgetScope> s = {{"key k", "t", &l}};
  int64_t now = 5'000;
  {
    BudgetLedger writer(&store, [&] { return now; }, {.id = "w"});
    StatusOr<BudgetReservation> r = writer.Reserve(s, 10, 0);
    ASSERT_TRUE(r.ok());
    writer.Settle(*r, 10, 0);
    ASSERT_TRUE(writer.Flush(true).ok());
  }
  StatusOr<store::ListResult> objs = store.List({.kind = "GatewayBudget"});
  ASSERT_TRUE(objs.ok() && objs->items.size() == 1);
  store::json bad = objs->items[0];
  bad["status"] = {{"spentTokens", "12"},
                   {"spentCost", "a lot"},
                   {"grants", {{"x", {{"tokens", -500}, {"expires", "soon"}}},
                               {"y", "junk"},
                               {"z", {{"tokens", 1e30}, {"expires", now + 5}}},
                               {"forever", {{"tokens", 900}, {"expires", int64_t{1} << 60}}}}}};
  ASSERT_TRUE(store.Update(bad, 0).ok());
  BudgetLedger ledger(&store, [&] { return now; }, {.id = "l"});
  ASSERT_TRUE(ledger.Load().ok());
  EXPECT_EQ(ledger.Usage("key k").spent_tokens, 0);  // "12" is not a number
  // z is clamped to the whole budget: nothing left while it lives; "forever" is ignored.
  StatusOr<BudgetReservation> r = ledger.Reserve(s, 100, 0);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted) << r.status();
  now += 6;  // z's lease is over
  r = ledger.Reserve(s, 100, 0);
  ASSERT_TRUE(r.ok()) << r.status();
  ledger.Settle(*r, 100, 0);
  EXPECT_TRUE(ledger.Flush().ok());
  BudgetLedger again(&store, [&] { return now; });
  ASSERT_TRUE(again.Load().ok());
  EXPECT_EQ(again.Usage("key k").spent_tokens, 100);  // the object is whole again
  bad["spec"] = "not an object";
  bad["metadata"]["resourceVersion"] = "0";
  ASSERT_TRUE(store.Update(bad, 0).ok());
  EXPECT_TRUE(again.Load().ok());  // skipped, no throw
}

// A gateway whose clock is still in the previous period must not reset the new period's spend.
TEST(BudgetLedger, AClockBehindDoesNotResetANewerPeriod) {
  store::MemoryStore store;
  int64_t ahead = 86400 * 10 + 1, behind = 86400 * 10 - 2;
  Limits l{.budget_tokens = 1000, .budget_period_s = 86400};
  std::vector<BudgetScope> s = {{"key k", "t", &l}};
  BudgetLedger a(&store, [&] { return ahead; }, {.id = "a"}), b(&store, [&] { return behind; }, {.id = "b"});
  StatusOr<BudgetReservation> r = a.Reserve(s, 100, 0);
  ASSERT_TRUE(r.ok());
  a.Settle(*r, 100, 0);
  ASSERT_TRUE(a.Flush().ok());
  StatusOr<BudgetReservation> late = b.Reserve(s, 100, 0);
  ASSERT_FALSE(late.ok());
  EXPECT_EQ(late.status().code(), StatusCode::kUnavailable) << late.status();
  EXPECT_NE(late.status().message().find("clock is behind"), std::string::npos) << late.status();
  EXPECT_NE(b.Flush().message().find("clock is behind"), std::string::npos);  // and writes nothing
  BudgetLedger reader(&store, [&] { return ahead; });
  ASSERT_TRUE(reader.Load().ok());
  EXPECT_EQ(reader.Usage("key k").spent_tokens, 100);
}

// Two gateways, each with its own limiter, exchanging totals through one store; a reaches it
// through `a_store` (its writes can be made to fail) and its clock may be `a_skew_s` off.
struct SharedPair {
  store::MemoryStore store;
  HookStore a_store{&store};
  FakeClock clock;  // the buckets' clock
  int64_t wall = 1'700'000'000;
  int64_t a_skew_s = 0;
  RateLimiter a{&clock}, b{&clock};
  RateShare sa{&a_store, &a, [this] { return wall + a_skew_s; }, {.id = "a", .lease_s = 10}};
  RateShare sb{&store, &b, [this] { return wall; }, {.id = "b", .lease_s = 10}};
  void SyncBoth() {
    ASSERT_TRUE(sa.Sync().ok());
    ASSERT_TRUE(sb.Sync().ok());
  }
};

int AdmitMany(RateLimiter& rl, std::span<const LimitScope> s, int tries, int64_t tokens) {
  int n = 0;
  for (int i = 0; i < tries; ++i) n += rl.Admit(s, tokens).ok ? 1 : 0;
  return n;
}

// Five minutes of two gateways taking all they are allowed, exchanging every second: together
// they admit what one gateway would (60 + 1 per second), not twice that.
TEST(RateShare, TwoGatewaysTogetherAdmitOneRpmLimit) {
  for (bool shared : {true, false}) {
    SharedPair p;
    Limits l{.rpm = 60};
    std::vector<LimitScope> s = {{"key k1", &l}};
    if (shared) p.SyncBoth();
    int total = 0;
    for (int tick = 0; tick < 3000; ++tick) {  // 100 ms ticks
      total += AdmitMany(p.a, s, 5) + AdmitMany(p.b, s, 5);
      p.clock.Advance(100'000);
      if (tick % 10 == 9) {
        ++p.wall;
        if (shared) p.SyncBoth();
      }
    }
    if (shared) {
      EXPECT_LE(total, 60 + 300 + 4);  // one gateway's allowance; a second's lag at most
      EXPECT_GE(total, 60 + 300 - 4);  // and nobody starves
      EXPECT_EQ(p.sa.Peers(), 1);
    } else {
      EXPECT_GE(total, 2 * (60 + 300) - 4);  // what sharing prevents
    }
  }
}

TEST(RateShare, TokensGivenBackAreGivenBackEverywhere) {
  SharedPair p;  // the buckets' clock stands still: no refill, exact levels
  Limits l{.tpm = 6000};
  std::vector<LimitScope> s = {{"tenant t", &l}};
  p.SyncBoth();
  ASSERT_TRUE(p.a.Admit(s, 1000).ok);
  p.a.Adjust(s, 700);  // the request used 300 of the 1000 it reserved
  ++p.wall;
  p.SyncBoth();
  EXPECT_FALSE(p.b.Admit(s, 5701).ok);
  EXPECT_TRUE(p.b.Admit(s, 5700).ok);
  ++p.wall;
  ASSERT_TRUE(p.sb.Sync().ok());  // b publishes, then a looks: a sees b's 5700 on top of its 300
  ASSERT_TRUE(p.sa.Sync().ok());
  RateVerdict v = p.a.Admit(s, 1);
  EXPECT_FALSE(v.ok);
  EXPECT_NE(v.message.find("tenant t allows 6000 tokens per minute"), std::string::npos) << v.message;
  p.b.Release(s, 5700);  // b's request was handed elsewhere: it gives everything back
  ++p.wall;
  ASSERT_TRUE(p.sb.Sync().ok());
  ASSERT_TRUE(p.sa.Sync().ok());
  EXPECT_TRUE(p.a.Admit(s, 5700).ok);
}

// A gateway that starts takes the others' totals as they are (not their history); what they take
// afterwards, and scopes they begin afterwards, count in full. A scope idle for the whole window
// comes back counted from zero.
TEST(RateShare, NewcomersBaselineAndScopesThatComeBackStartOver) {
  SharedPair p;
  Limits l{.rpm = 60};
  std::vector<LimitScope> k1 = {{"key k1", &l}}, k2 = {{"key k2", &l}};
  ASSERT_TRUE(p.sa.Sync().ok());
  EXPECT_EQ(AdmitMany(p.a, k1, 50), 50);
  ++p.wall;
  ASSERT_TRUE(p.sa.Sync().ok());
  ASSERT_TRUE(p.sb.Sync().ok());  // b's first look: a's 50 are history
  EXPECT_EQ(AdmitMany(p.a, k1, 5), 5);
  EXPECT_EQ(AdmitMany(p.a, k2, 7), 7);  // a scope a begins after b's first look
  ++p.wall;
  p.SyncBoth();
  EXPECT_EQ(AdmitMany(p.b, k1, 60), 55);
  EXPECT_EQ(AdmitMany(p.b, k2, 60), 53);

  // k2 idle for longer than the window leaves a's object; used again, it counts from zero.
  p.clock.Advance(601 * kMicrosPerSecond);  // refills every bucket, and ages a's k2 out
  p.wall += 601;
  p.SyncBoth();
  EXPECT_EQ(AdmitMany(p.a, k2, 3), 3);
  ++p.wall;
  p.SyncBoth();
  EXPECT_EQ(AdmitMany(p.b, k2, 60), 57);  // 3 taken, not 10
}

// A scope pruned on one gateway (idle, full) starts its totals over there; the others must count
// what it takes afterwards from zero, neither refunding the old total nor missing the new use.
TEST(RateShare, APrunedScopeComesBackCountedFromZero) {
  SharedPair p;
  Limits l{.rpm = 60};
  std::vector<LimitScope> k = {{"key k", &l}};
  p.SyncBoth();
  EXPECT_EQ(AdmitMany(p.a, k, 40), 40);
  ++p.wall;
  p.SyncBoth();
  EXPECT_EQ(AdmitMany(p.b, k, 60), 20);  // b saw a's 40

  p.clock.Advance(700 * kMicrosPerSecond);  // everything full again; k idle on both for 700 s
  p.wall += 700;
  p.SyncBoth();
  std::vector<std::string> dropped = p.a.Prune(600 * kMicrosPerSecond);
  ASSERT_EQ(dropped, std::vector<std::string>{"key k"});
  p.sa.Forget(dropped);
  EXPECT_EQ(p.sa.PublishedScopes(), 0u);
  p.sb.Forget(p.b.Prune(600 * kMicrosPerSecond));
  ++p.wall;
  p.SyncBoth();

  EXPECT_EQ(AdmitMany(p.a, k, 25), 25);  // a's totals for k restart at 0
  ++p.wall;
  p.SyncBoth();
  EXPECT_EQ(AdmitMany(p.b, k, 60), 35);  // 60 - 25: not 60 - 25 + 40 (a refund), not 60
  ++p.wall;
  p.SyncBoth();  // b publishes its 35 after a has looked; a sees them at its next look
  ASSERT_TRUE(p.sa.Sync().ok());
  EXPECT_EQ(AdmitMany(p.a, k, 10), 0);  // and a sees b's 35
}

// A scope only other gateways serve has its buckets here too, refilling as theirs do: the first
// request here finds the room the fleet has, not the sum of everything taken elsewhere.
TEST(RateShare, AScopeServedOnlyElsewhereRefillsHereToo) {
  SharedPair p;
  Limits l{.rpm = 60};
  std::vector<LimitScope> s = {{"key k1", &l}};
  p.SyncBoth();
  for (int sec = 0; sec < 20 * 60; ++sec) {  // 20 minutes at half the limit, all on a
    if (sec % 2 == 0) {
      ASSERT_TRUE(p.a.Admit(s, 0).ok);
    }
    p.clock.Advance(kMicrosPerSecond);
    ++p.wall;
    p.SyncBoth();
  }
  RateVerdict v = p.b.Admit(s, 0);
  EXPECT_TRUE(v.ok) << v.message;
  EXPECT_GE(AdmitMany(p.b, s, 60), 55);
}

// Requests and tokens of a scope are published together: a late usage report (it touches only
// the token bucket) must not make the other gateways refund, then charge again, its requests.
TEST(RateShare, RequestsAndTokensArePublishedTogether) {
  SharedPair p;
  Limits l{.rpm = 60, .tpm = 60000};
  std::vector<LimitScope> s = {{"key k1", &l}};
  p.SyncBoth();
  EXPECT_EQ(AdmitMany(p.a, s, 50, 10), 50);
  for (int i = 0; i < 121; ++i) {  // 605 s, exchanging every 5 s: the buckets refill
    p.clock.Advance(5 * kMicrosPerSecond);
    p.wall += 5;
    p.SyncBoth();
  }
  p.a.Adjust(s, 5);  // a stream's usage, long after its admission
  ++p.wall;
  p.SyncBoth();
  EXPECT_TRUE(p.a.Admit(s, 10).ok);
  ++p.wall;
  p.SyncBoth();
  EXPECT_EQ(AdmitMany(p.b, s, 60, 10), 59);
}

// Nothing compares the gateways' clocks but the leases: a gateway whose clock is behind still
// has its new scopes counted everywhere.
TEST(RateShare, SkewedClocksLoseNothing) {
  SharedPair p;
  p.a_skew_s = -5;
  Limits l{.rpm = 60};
  std::vector<LimitScope> s = {{"key k1", &l}};
  for (int i = 0; i < 2; ++i, ++p.wall) p.SyncBoth();
  EXPECT_EQ(AdmitMany(p.a, s, 60), 60);
  p.SyncBoth();
  EXPECT_EQ(AdmitMany(p.b, s, 60), 0);
}

// A gateway that cannot write for longer than its lease is forgotten by the others, not lost:
// when it writes again they take what it admitted meanwhile.
TEST(RateShare, AGatewayCutOffFromTheStoreIsCaughtUpWith) {
  SharedPair p;
  Limits l{.rpm = 60};
  std::vector<LimitScope> k1 = {{"key k1", &l}}, k2 = {{"key k2", &l}};
  p.SyncBoth();
  EXPECT_EQ(AdmitMany(p.a, k1, 10), 10);
  ++p.wall;
  p.SyncBoth();
  p.a_store.fail_commits = true;
  EXPECT_EQ(AdmitMany(p.a, k1, 20), 20);  // k1 goes on, k2 begins, while a cannot write
  EXPECT_EQ(AdmitMany(p.a, k2, 30), 30);
  for (int i = 0; i < 15; ++i, ++p.wall) {
    EXPECT_FALSE(p.sa.Sync().ok());
    ASSERT_TRUE(p.sb.Sync().ok());
  }
  EXPECT_EQ(p.sb.Peers(), 0);  // a's lease ran out
  p.a_store.fail_commits = false;
  p.SyncBoth();
  EXPECT_EQ(p.sb.Peers(), 1);
  EXPECT_EQ(AdmitMany(p.b, k1, 60), 30);
  EXPECT_EQ(AdmitMany(p.b, k2, 60), 30);
}

// A gateway that starts while another's lease has lapsed sees that one's totals, when it comes
// back, as history: not as consumption to charge all at once.
TEST(RateShare, AGatewayBackAfterALapseIsHistoryToANewcomer) {
  SharedPair p;
  Limits l{.rpm = 60};
  std::vector<LimitScope> s = {{"key k1", &l}};
  EXPECT_EQ(AdmitMany(p.a, s, 50), 50);
  for (int i = 0; i < 5; ++i, ++p.wall) ASSERT_TRUE(p.sa.Sync().ok());
  p.wall += 11;  // a's lease lapses
  RateLimiter c(&p.clock);
  RateShare sc(&p.store, &c, [&] { return p.wall; }, {.id = "c"});
  ASSERT_TRUE(sc.Sync().ok());  // c's first look: a is not there
  ++p.wall;
  ASSERT_TRUE(p.sa.Sync().ok());  // a is back
  ASSERT_TRUE(sc.Sync().ok());
  EXPECT_EQ(sc.Peers(), 1);
  EXPECT_EQ(AdmitMany(c, s, 60), 60);
}

// What a gateway admitted while it could not write is published when it can again, even when
// the scope went idle for the whole window meanwhile (and so re-enters the object).
TEST(RateShare, WhatWasTakenDuringAnOutageIsNotLostWhenTheScopeReturns) {
  SharedPair p;
  Limits l{.rpm = 60};
  std::vector<LimitScope> s = {{"key k1", &l}};
  p.SyncBoth();
  EXPECT_EQ(AdmitMany(p.a, s, 10), 10);
  ++p.wall;
  p.SyncBoth();
  p.a_store.fail_commits = true;
  EXPECT_EQ(AdmitMany(p.a, s, 20), 20);
  for (int i = 0; i < 61; ++i) {  // 610 s: k1 idle longer than the window, a unable to write
    p.clock.Advance(10 * kMicrosPerSecond);
    p.wall += 10;
    EXPECT_FALSE(p.sa.Sync().ok());
    ASSERT_TRUE(p.sb.Sync().ok());
  }
  p.a_store.fail_commits = false;
  EXPECT_EQ(AdmitMany(p.a, s, 5), 5);
  ++p.wall;
  p.SyncBoth();
  EXPECT_EQ(AdmitMany(p.b, s, 60), 35);  // b's bucket refilled, then a's 20 + 5 taken
}

TEST(RateShare, StoppedAndDeadGatewaysAreForgotten) {
  SharedPair p;
  RateLimiter c_limiter(&p.clock);
  RateShare sc(&p.store, &c_limiter, [&] { return p.wall; }, {.id = "c", .lease_s = 10});
  p.SyncBoth();
  ASSERT_TRUE(sc.Sync().ok());
  EXPECT_EQ(sc.Peers(), 2);
  ASSERT_TRUE(p.sb.Release().ok());  // b stops
  EXPECT_FALSE(p.store.Get({"GatewayRate", "", "rates-b"}).ok());
  ASSERT_TRUE(sc.Sync().ok());
  EXPECT_EQ(sc.Peers(), 1);
  p.wall += 11;  // a stops renewing: its lease runs out
  ASSERT_TRUE(sc.Sync().ok());
  EXPECT_EQ(sc.Peers(), 0);
  EXPECT_TRUE(p.store.Get({"GatewayRate", "", "rates-a"}).ok());  // it may come back
  p.wall += 3600;
  ASSERT_TRUE(sc.Sync().ok());
  EXPECT_FALSE(p.store.Get({"GatewayRate", "", "rates-a"}).ok());  // an hour later: removed
}

// A GatewayRate edited by hand or written by a foreign tool must not throw, drain buckets
// forever or count a lease no gateway would write.
TEST(RateShare, MalformedStoredObjectsAreReadSafely) {
  SharedPair p;
  Limits l{.rpm = 60, .tpm = 1000};
  std::vector<LimitScope> s = {{"key k1", &l}};
  p.SyncBoth();
  const int64_t now = p.wall;
  for (const char* bad : {
           R"({"expires": "soon", "scopes": {"key k1": {"requests": 5, "since": 0}}})",
           R"({"expires": NOW_PLUS_5, "scopes": ["key k1"]})",
           R"({"expires": NOW_PLUS_5, "scopes": {"key k1": {"requests": "many", "tokens": -7, "since": "x"}}})",
           R"({"expires": NOW_PLUS_5, "scopes": {"key k1": 12}})",
           R"({"expires": 99999999999, "scopes": {"key k1": {"requests": 1e300, "tokens": 1e300, "since": NOW}}})",
       }) {
    ++p.wall;
    std::string text = bad;
    for (auto [from, to] : {std::pair<std::string, int64_t>{"NOW_PLUS_5", now + 5}, {"NOW", now}}) {
      for (size_t at; (at = text.find(from)) != std::string::npos;) text.replace(at, from.size(), std::to_string(to));
    }
    store::json o = {{"apiVersion", "aicloud/v1"},
                     {"kind", "GatewayRate"},
                     {"metadata", {{"name", "rates-foreign"}}},
                     {"status", store::json::parse(text)}};
    StatusOr<store::json> w = p.store.Update(o, 0);
    if (!w.ok()) w = p.store.Create(o);
    ASSERT_TRUE(w.ok()) << w.status();
    Status st = p.sa.Sync();
    EXPECT_TRUE(st.ok()) << text << ": " << st;
    EXPECT_TRUE(p.a.Admit(s, 1).ok) << text;  // nothing foreign drained the buckets
  }
  // A live-looking object claiming absurd totals drains the buckets, but only by ten minutes'
  // allowance: the scope is back after that.
  store::json o = {{"apiVersion", "aicloud/v1"},
                   {"kind", "GatewayRate"},
                   {"metadata", {{"name", "rates-foreign"}}},
                   {"status", {{"expires", p.wall + 6},
                               {"scopes", {{"key k1", {{"requests", 1e300}, {"tokens", 1e300}, {"since", p.wall + 1}}}}}}}};
  ASSERT_TRUE(p.store.Update(o, 0).ok());
  ++p.wall;
  ASSERT_TRUE(p.sa.Sync().ok());
  EXPECT_FALSE(p.a.Admit(s, 1).ok);
  p.clock.Advance(601 * kMicrosPerSecond);
  EXPECT_TRUE(p.a.Admit(s, 1).ok);
}

TEST(Period, ParseAndName) {
  EXPECT_EQ(*ParsePeriod("30d"), 30 * 86400);
  EXPECT_EQ(*ParsePeriod("15m"), 900);
  EXPECT_EQ(*ParsePeriod(""), 0);
  EXPECT_FALSE(ParsePeriod("1w").ok());
  EXPECT_FALSE(ParsePeriod("d").ok());
  EXPECT_EQ(PeriodName(86400), "1d");
  EXPECT_EQ(PeriodName(0), "lifetime");
}

}  // namespace
}  // namespace aicloud::gateway
