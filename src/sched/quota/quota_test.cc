#include "sched/quota/quota.h"

#include <gtest/gtest.h>

#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "core/rng.h"

namespace aicloud::sched {
namespace {

constexpr char kH100[] = "H100-SXM";
constexpr std::optional<int64_t> kNone = std::nullopt;

QueueSpec Queue(std::string name, std::string cohort, int64_t nominal,
                std::optional<int64_t> borrowing = kNone, std::optional<int64_t> lending = kNone,
                double weight = 1.0) {
  QueueSpec q;
  q.name = std::move(name);
  q.cohort = std::move(cohort);
  q.weight = weight;
  q.flavors[kH100] = FlavorQuota{nominal, borrowing, lending};
  return q;
}

// Borrowing: how much team-a may still take, given its own and its cohort's quota and usage.
struct AvailableCase {
  const char* name;
  std::vector<QueueSpec> queues;
  std::vector<std::pair<std::string, int64_t>> usage;  // (queue, H100 milli)
  int64_t want_available;                              // for team-a
};

void PrintTo(const AvailableCase& c, std::ostream* os) { *os << c.name; }

class AvailableTest : public ::testing::TestWithParam<AvailableCase> {};

TEST_P(AvailableTest, MatchesKueueSemantics) {
  const AvailableCase& c = GetParam();
  QuotaManager q;
  for (const QueueSpec& s : c.queues) ASSERT_TRUE(q.AddQueue(s).ok()) << s.name;
  for (const auto& [queue, amount] : c.usage) ASSERT_TRUE(q.Charge(queue, kH100, amount).ok());
  EXPECT_EQ(q.Available("team-a", kH100), c.want_available);
  EXPECT_TRUE(q.Fits("team-a", kH100, c.want_available, nullptr));
  EXPECT_FALSE(q.Fits("team-a", kH100, c.want_available + 1, nullptr));
}

INSTANTIATE_TEST_SUITE_P(
    Quota, AvailableTest,
    ::testing::Values(
        AvailableCase{"AloneOnlyNominal", {Queue("team-a", "", 8000)}, {{"team-a", 3000}}, 5000},
        AvailableCase{"BorrowsAllUnusedOfCohort",
                      {Queue("team-a", "r", 8000), Queue("team-b", "r", 8000)}, {}, 16000},
        AvailableCase{"BorrowingLimitCaps",
                      {Queue("team-a", "r", 8000, 4000), Queue("team-b", "r", 8000)}, {}, 12000},
        AvailableCase{"BorrowsOnlyWhatOthersLeaveUnused",
                      {Queue("team-a", "r", 8000), Queue("team-b", "r", 8000)},
                      {{"team-b", 6000}}, 10000},
        AvailableCase{"LendingLimitCapsWhatIsLent",
                      {Queue("team-a", "r", 8000), Queue("team-b", "r", 8000, kNone, 3000)}, {},
                      11000},
        AvailableCase{"LendsMinOfUnusedAndLendingLimit",
                      {Queue("team-a", "r", 8000), Queue("team-b", "r", 8000, kNone, 3000)},
                      {{"team-b", 6000}}, 10000},
        AvailableCase{"OwnLendingLimitKeepsRestGuaranteed",
                      // team-a lends at most 2000 of its 8000: 6000 stays its own even when b
                      // has borrowed all it could.
                      {Queue("team-a", "r", 8000, kNone, 2000), Queue("team-b", "r", 8000)},
                      {{"team-b", 10000}}, 6000},
        AvailableCase{"NominalLentOutIsNotAvailable",
                      {Queue("team-a", "r", 8000), Queue("team-b", "r", 8000)},
                      {{"team-b", 14000}}, 2000},
        AvailableCase{"BorrowersShareOnePool",
                      // c borrowed 4000 of b's unused 8000; a can borrow the other 4000 only.
                      {Queue("team-a", "r", 8000), Queue("team-b", "r", 8000),
                       Queue("team-c", "r", 8000)},
                      {{"team-a", 8000}, {"team-c", 12000}}, 4000},
        AvailableCase{"OtherCohortsDoNotLend",
                      {Queue("team-a", "r", 8000), Queue("team-b", "s", 8000)}, {}, 8000},
        AvailableCase{"ZeroBorrowingLimit",
                      {Queue("team-a", "r", 8000, 0), Queue("team-b", "r", 8000)},
                      {{"team-a", 2000}}, 6000}),
    [](const auto& p) { return std::string(p.param.name); });

TEST(QuotaManagerTest, ReasonNamesQueueFlavorAndNumbers) {
  QuotaManager q;
  ASSERT_TRUE(q.AddQueue(Queue("team-a", "r", 16000, 0)).ok());
  ASSERT_TRUE(q.Charge("team-a", kH100, 12000).ok());
  std::string why;
  EXPECT_FALSE(q.Fits("team-a", kH100, 8000, &why));
  EXPECT_EQ(why, "queue team-a: H100-SXM: 8000 requested, 4000 of 16000 nominal + 0 borrowable left");
}

TEST(QuotaManagerTest, ReasonSaysWhenNominalIsLentOut) {
  QuotaManager q;
  ASSERT_TRUE(q.AddQueue(Queue("team-a", "r", 8000)).ok());
  ASSERT_TRUE(q.AddQueue(Queue("team-b", "r", 8000)).ok());
  ASSERT_TRUE(q.Charge("team-b", kH100, 14000).ok());
  std::string why;
  EXPECT_FALSE(q.Fits("team-a", kH100, 8000, &why));
  EXPECT_EQ(why,
            "queue team-a: H100-SXM: 8000 requested, 2000 of 8000 nominal + 0 borrowable left "
            "(6000 of its nominal lent to the cohort)");
}

// The example of docs/quotas.md, built the way the doc shows.
TEST(QuotaManagerTest, DocExampleTwoTenants) {
  QuotaManager q;
  ASSERT_TRUE(q.AddQueue({.name = "team-a", .cohort = "research",
                          .flavors = {{kH100, {.nominal = 8000, .lending_limit = 2000}}}})
                  .ok());
  ASSERT_TRUE(q.AddQueue({.name = "team-b", .cohort = "research",
                          .flavors = {{kH100, {.nominal = 8000, .borrowing_limit = 4000}}}})
                  .ok());
  EXPECT_EQ(q.Available("team-b", kH100), 10000);
  ASSERT_TRUE(q.Charge("team-b", kH100, 10000).ok());
  std::string why;
  EXPECT_FALSE(q.Fits("team-a", kH100, 8000, &why));
  EXPECT_EQ(why,
            "queue team-a: H100-SXM: 8000 requested, 6000 of 8000 nominal + 0 borrowable left "
            "(2000 of its nominal lent to the cohort)");
  EXPECT_EQ(q.Borrowed("team-b", kH100), 2000);
}

TEST(QuotaManagerTest, UnknownQueueIsRejectedByName) {
  QuotaManager q;
  std::string why;
  EXPECT_FALSE(q.Fits("team-x", kH100, 1, &why));
  EXPECT_EQ(why, "queue team-x is not defined");
  EXPECT_EQ(q.Charge("team-x", kH100, 1).code(), StatusCode::kNotFound);
  PodRequest pod = WholeGpus(1, 1000, 1024);
  pod.queue = "team-x";
  EXPECT_FALSE(q.FitsPod(pod, kH100, &why));
  EXPECT_EQ(why, "queue team-x is not defined");
}

TEST(QuotaManagerTest, UndeclaredFlavorHasNoQuota) {
  QuotaManager q;
  ASSERT_TRUE(q.AddQueue(Queue("team-a", "", 8000)).ok());
  std::string why;
  EXPECT_FALSE(q.Fits("team-a", "A100-80GB", 1000, &why));
  EXPECT_EQ(why, "queue team-a: A100-80GB: 1000 requested, no quota for this flavor");
  EXPECT_EQ(q.Charge("team-a", "A100-80GB", 1000).code(), StatusCode::kNotFound);
}

TEST(QuotaManagerTest, AddQueueValidates) {
  QuotaManager q;
  EXPECT_EQ(q.AddQueue(Queue("", "", 1)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(q.AddQueue(Queue("a", "", -1)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(q.AddQueue(Queue("a", "", 1, -1)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(q.AddQueue(Queue("a", "", 1, kNone, 2)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(q.AddQueue(Queue("a", "", 1, kNone, kNone, 0)).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(q.AddQueue(Queue("a", "", 1)).ok());
  EXPECT_EQ(q.AddQueue(Queue("a", "", 1)).code(), StatusCode::kAlreadyExists);
}

TEST(QuotaManagerTest, UnchargeNeverGoesNegative) {
  QuotaManager q;
  ASSERT_TRUE(q.AddQueue(Queue("team-a", "", 8000)).ok());
  ASSERT_TRUE(q.Charge("team-a", kH100, 1000).ok());
  EXPECT_EQ(q.Uncharge("team-a", kH100, 1001).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(q.Usage("team-a", kH100), 1000);
  EXPECT_TRUE(q.Uncharge("team-a", kH100, 1000).ok());
  EXPECT_EQ(q.Usage("team-a", kH100), 0);
}

TEST(QuotaManagerTest, BorrowedIsUsageAboveNominal) {
  QuotaManager q;
  ASSERT_TRUE(q.AddQueue(Queue("team-a", "r", 8000)).ok());
  ASSERT_TRUE(q.AddQueue(Queue("team-b", "r", 8000)).ok());
  ASSERT_TRUE(q.Charge("team-a", kH100, 11000).ok());
  EXPECT_EQ(q.Borrowed("team-a", kH100), 3000);
  EXPECT_EQ(q.Borrowed("team-b", kH100), 0);
}

TEST(QuotaManagerTest, PodChargesCpuAndMemoryOnlyWhenDeclared) {
  QuotaManager q;
  QueueSpec a = Queue("team-a", "", 8000);
  a.flavors[std::string(kCpuFlavor)] = FlavorQuota{4000};
  ASSERT_TRUE(q.AddQueue(a).ok());
  PodRequest pod = WholeGpus(2, 3000, 4096);
  pod.queue = "team-a";
  auto charges = q.PodCharges(pod, kH100);
  ASSERT_EQ(charges.size(), 2u);
  EXPECT_EQ(charges[0], (std::pair<std::string, int64_t>{kH100, 2000}));
  EXPECT_EQ(charges[1], (std::pair<std::string, int64_t>{"cpu", 3000}));
  ASSERT_TRUE(q.ChargePod(pod, kH100).ok());
  std::string why;
  EXPECT_FALSE(q.FitsPod(pod, kH100, &why));
  EXPECT_EQ(why, "queue team-a: cpu: 3000 requested, 1000 of 4000 nominal + 0 borrowable left");
  ASSERT_TRUE(q.UnchargePod(pod, kH100).ok());
  EXPECT_EQ(q.Usage("team-a", kH100), 0);
  EXPECT_EQ(q.Usage("team-a", kCpuFlavor), 0);
  // A refund larger than the usage changes nothing at all.
  EXPECT_FALSE(q.UnchargePod(pod, kH100).ok());
  EXPECT_EQ(q.Usage("team-a", kH100), 0);
}

TEST(QuotaManagerTest, DominantShareIsMaxOverFlavorsOverCohortNominalByWeight) {
  QuotaManager q;
  QueueSpec a = Queue("team-a", "r", 8000);
  a.flavors["cpu"] = FlavorQuota{10000};
  QueueSpec b = Queue("team-b", "r", 8000, kNone, kNone, 2.0);
  b.flavors["cpu"] = FlavorQuota{30000};
  ASSERT_TRUE(q.AddQueue(a).ok());
  ASSERT_TRUE(q.AddQueue(b).ok());
  EXPECT_EQ(q.DominantShare("team-a"), 0.0);
  ASSERT_TRUE(q.Charge("team-a", kH100, 4000).ok());  // 4000 / 16000 = 0.25
  ASSERT_TRUE(q.Charge("team-a", "cpu", 10000).ok());  // 10000 / 40000 = 0.25
  ASSERT_TRUE(q.Charge("team-b", kH100, 8000).ok());  // 0.5, weight 2 -> 0.25
  ASSERT_TRUE(q.Charge("team-b", "cpu", 2000).ok());
  EXPECT_DOUBLE_EQ(q.DominantShare("team-a"), 0.25);
  EXPECT_DOUBLE_EQ(q.DominantShare("team-b"), 0.25);
  ASSERT_TRUE(q.Charge("team-a", "cpu", 10000).ok());  // cpu now dominant: 0.5
  EXPECT_DOUBLE_EQ(q.DominantShare("team-a"), 0.5);
  EXPECT_EQ(q.DominantShare("team-x"), 0.0);
}

// Random admissions and refunds: whatever Fits admits keeps every queue within nominal +
// borrowing limit, the cohort within its lendable pool, and every guaranteed part available.
TEST(QuotaManagerTest, RandomAdmissionsKeepInvariants) {
  for (uint64_t seed = 1; seed <= 30; ++seed) {
    Rng rng(seed);
    QuotaManager q;
    std::vector<QueueSpec> specs;
    for (int i = 0; i < 4; ++i) {
      int64_t nominal = 1000 * static_cast<int64_t>(rng.Uniform(9));
      std::optional<int64_t> borrow, lend;
      if (rng.Uniform(2)) borrow = 1000 * static_cast<int64_t>(rng.Uniform(6));
      if (rng.Uniform(2)) lend = std::min<int64_t>(nominal, 1000 * rng.Uniform(6));
      specs.push_back(Queue("q" + std::to_string(i), i < 3 ? "c" : "", nominal, borrow, lend));
      ASSERT_TRUE(q.AddQueue(specs.back()).ok());
    }
    std::vector<std::pair<std::string, int64_t>> admitted;
    for (int step = 0; step < 300; ++step) {
      if (!admitted.empty() && rng.Uniform(3) == 0) {
        size_t i = rng.Uniform(admitted.size());
        ASSERT_TRUE(q.Uncharge(admitted[i].first, kH100, admitted[i].second).ok());
        admitted.erase(admitted.begin() + static_cast<long>(i));
      } else {
        const QueueSpec& s = specs[rng.Uniform(specs.size())];
        int64_t amount = 500 * static_cast<int64_t>(1 + rng.Uniform(8));
        if (q.Fits(s.name, kH100, amount, nullptr)) {
          ASSERT_TRUE(q.Charge(s.name, kH100, amount).ok());
          admitted.emplace_back(s.name, amount);
        }
      }
      int64_t pool = 0, pool_used = 0;
      for (const QueueSpec& s : specs) {
        const FlavorQuota& f = s.flavors.at(kH100);
        const int64_t used = q.Usage(s.name, kH100);
        ASSERT_GE(used, 0);
        if (f.borrowing_limit) {
          ASSERT_LE(used, f.nominal + *f.borrowing_limit) << s.name;
        }
        const int64_t lendable = f.lending_limit ? *f.lending_limit : f.nominal;
        if (s.cohort.empty()) {
          ASSERT_LE(used, f.nominal) << "a queue without a cohort never borrows";
          continue;
        }
        pool += lendable;
        pool_used += std::max<int64_t>(0, used - (f.nominal - lendable));
      }
      ASSERT_LE(pool_used, pool) << "seed " << seed << " step " << step;
    }
  }
}

}  // namespace
}  // namespace aicloud::sched
