#include "gateway/budget.h"
#include "gateway/limits.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "store/memory_store.h"

namespace aicloud::gateway {
namespace {

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
  EXPECT_TRUE(ledger.Reserve(s, 600, 0).ok());
  now += 86400;  // next day: spending starts over, the in-flight reservation stays
  EXPECT_EQ(ledger.Reserve(s, 400, 0).ok(), true);
  EXPECT_FALSE(ledger.Reserve(s, 1, 0).ok());
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
  std::atomic<int> ok{0}, denied{0}, unavailable{0}, other{0};
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
        } else if (r.status().code() == StatusCode::kUnavailable && !may_block) {
          ++unavailable;
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
  EXPECT_EQ(a.Usage("tenant t").spent_tokens, spent);  // both see the sum after their last sync
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
