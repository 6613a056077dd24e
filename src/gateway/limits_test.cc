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
    ASSERT_TRUE(ledger.Flush().ok());  // an update of the stored object
  }
  BudgetLedger again(&store, [&] { return now; });
  ASSERT_TRUE(again.Load().ok());
  EXPECT_EQ(again.Usage("key odd/Id_1").spent_tokens, 800);
  EXPECT_DOUBLE_EQ(again.Usage("key odd/Id_1").spent_cost, 1.6);
  StatusOr<BudgetReservation> r = again.Reserve(s, 300, 0);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("has 200 of 1000 tokens left"), std::string::npos) << r.status();
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
