#include "fleet/router.h"

#include <gtest/gtest.h>

#include <map>
#include <vector>

namespace aicloud::fleet {
namespace {

std::vector<ReplicaView> Replicas(int n) {
  std::vector<ReplicaView> out;
  for (int i = 0; i < n; ++i) {
    ReplicaView r;
    r.id = "r" + std::to_string(i);
    r.ready = true;
    out.push_back(r);
  }
  return out;
}

RouteRequest Prompt(std::vector<uint64_t> hashes, std::string adapter = "") {
  return {"m", std::move(adapter), std::move(hashes)};
}

std::unique_ptr<Router> Make(const char* name) {
  StatusOr<std::unique_ptr<Router>> r = MakeRouter(name);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return std::move(*r);
}

TEST(RouterTest, RoundRobinIsFairAndSkipsUnready) {
  std::unique_ptr<Router> rr = Make("round-robin");
  std::vector<ReplicaView> reps = Replicas(3);
  std::map<size_t, int> count;
  for (int i = 0; i < 300; ++i) ++count[*rr->Pick(Prompt({}), reps)];
  EXPECT_EQ(count[0], 100);
  EXPECT_EQ(count[1], 100);
  EXPECT_EQ(count[2], 100);
  reps[1].ready = false;
  count.clear();
  for (int i = 0; i < 300; ++i) ++count[*rr->Pick(Prompt({}), reps)];
  EXPECT_EQ(count[0], 150);
  EXPECT_EQ(count[1], 0);
  EXPECT_EQ(count[2], 150);
}

TEST(RouterTest, EveryPolicyRespectsReadinessAndReportsNoneReady) {
  for (const std::string& name : RouterNames()) {
    std::unique_ptr<Router> r = Make(name.c_str());
    std::vector<ReplicaView> reps = Replicas(3);
    reps[0].ready = false;  // the idlest, and the one holding the prefix below
    reps[1].running = 5;
    reps[2].running = 9;
    // Teach the prefix index that r0 holds the prompt.
    std::vector<ReplicaView> only0 = Replicas(1);
    r->Pick(Prompt({1, 2, 3}), only0);
    for (int i = 0; i < 10; ++i) {
      StatusOr<size_t> pick = r->Pick(Prompt({1, 2, 3}), reps);
      ASSERT_TRUE(pick.ok()) << name;
      EXPECT_NE(*pick, 0u) << name;
    }
    for (ReplicaView& v : reps) v.ready = false;
    StatusOr<size_t> none = r->Pick(Prompt({1}), reps);
    ASSERT_FALSE(none.ok()) << name;
    EXPECT_EQ(none.status().code(), StatusCode::kUnavailable);
    EXPECT_EQ(none.status().message(), "no ready replica");
    EXPECT_FALSE(r->Pick(Prompt({1}), {}).ok());
  }
}

TEST(RouterTest, LeastRequestPicksFewestInFlight) {
  std::unique_ptr<Router> r = Make("least-request");
  std::vector<ReplicaView> reps = Replicas(3);
  reps[0].running = 4;
  reps[1].running = 1;
  reps[1].queue_depth = 2;
  reps[2].running = 2;
  EXPECT_EQ(*r->Pick(Prompt({}), reps), 2u);
}

TEST(RouterTest, PrefixAwarePoliciesFollowThePrefix) {
  struct Case {
    const char* policy;
    int queue_on_holder;
    double kv_on_holder;
    size_t want;
  };
  const Case cases[] = {
      {"prefix", 0, 0.2, 1},
      {"score", 0, 0.2, 1},
      {"prefix", 3, 0.4, 1},    // some load: affinity still wins
      {"score", 3, 0.1, 1},     // 3 x 0.75 match + 2 x 0.9 free KV > 2 (queue) + 2 (KV)
      {"score", 3, 0.4, 0},     // ... but not once the holder's KV is at 0.4 as well
      {"prefix", 9, 0.5, 0},    // saturated (queue > 5): filtered out, falls back
      {"score", 9, 0.5, 0},
      {"prefix", 0, 0.85, 0},   // KV >= 0.8: filtered out
      {"score", 0, 0.85, 0},
  };
  for (const Case& c : cases) {
    std::unique_ptr<Router> r = Make(c.policy);
    std::vector<ReplicaView> reps = Replicas(3);
    // First request of a conversation lands on r1 (the others have queues).
    reps[0].queue_depth = 2;
    reps[2].queue_depth = 2;
    ASSERT_EQ(*r->Pick(Prompt({10, 11, 12}), reps), 1u) << c.policy;
    // The follow-up shares the first three blocks; now r1 is the loaded one.
    reps[0].queue_depth = 0;
    reps[2].queue_depth = 0;
    reps[2].running = 1;
    reps[1].queue_depth = c.queue_on_holder;
    reps[1].kv_usage = c.kv_on_holder;
    EXPECT_EQ(*r->Pick(Prompt({10, 11, 12, 13}), reps), c.want)
        << c.policy << " queue " << c.queue_on_holder << " kv " << c.kv_on_holder;
  }
}

TEST(RouterTest, ScoreRouterWeighsLoadAgainstAffinity) {
  // With GIE's weights a full prefix match (3) beats an empty queue elsewhere (2) when KV is
  // equal, but not when the holder's KV is much fuller as well (2 x 0.7).
  std::unique_ptr<Router> r = Make("score");
  std::vector<ReplicaView> reps = Replicas(2);
  reps[1].queue_depth = 1;
  ASSERT_EQ(*r->Pick(Prompt({7, 8}), reps), 0u);
  reps[0].queue_depth = 4;
  reps[1].queue_depth = 0;
  EXPECT_EQ(*r->Pick(Prompt({7, 8}), reps), 0u);
  reps[0].kv_usage = 0.75;
  reps[1].kv_usage = 0.05;
  EXPECT_EQ(*r->Pick(Prompt({7, 8}), reps), 1u);
}

TEST(RouterTest, ScoreRouterPrefersResidentAdapter) {
  std::unique_ptr<Router> r = Make("score");
  std::vector<ReplicaView> reps = Replicas(3);
  reps[0].adapters = {"a", "b"};
  reps[0].max_adapters = 2;        // full, without "c"
  reps[1].adapters = {"a"};
  reps[1].max_adapters = 2;        // a free slot
  reps[2].adapters = {"c"};
  reps[2].max_adapters = 2;
  EXPECT_EQ(*r->Pick(Prompt({}, "c"), reps), 2u);
  EXPECT_EQ(*r->Pick(Prompt({}, "b"), reps), 0u);
  reps[0].adapters = {"x", "y"};
  EXPECT_EQ(*r->Pick(Prompt({}, "b"), reps), 1u);  // free slot 0.8 beats full 0
}

TEST(RouterTest, DeterministicForTheSameInputs) {
  for (const std::string& name : RouterNames()) {
    std::unique_ptr<Router> a = Make(name.c_str());
    std::unique_ptr<Router> b = Make(name.c_str());
    std::vector<ReplicaView> reps = Replicas(4);
    for (uint64_t i = 0; i < 200; ++i) {
      reps[i % 4].running = static_cast<int>(i % 7);
      RouteRequest req = Prompt({i % 5, 100 + i % 3, 200 + i});
      ASSERT_EQ(*a->Pick(req, reps), *b->Pick(req, reps)) << name << " i=" << i;
    }
  }
}

TEST(RouterTest, UnknownPolicy) {
  StatusOr<std::unique_ptr<Router>> r = MakeRouter("random");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("round-robin, least-request, prefix, score"), std::string::npos);
}

TEST(PrefixIndexTest, MatchesLeadingBlocksOnlyAndEvictsLeastRecentlyUsed) {
  PrefixIndex index(4);
  const std::vector<uint64_t> a = {1, 2, 3};
  index.Record("r", a);
  EXPECT_EQ(index.MatchedBlocks("r", std::vector<uint64_t>{1, 2, 3, 4}), 3);
  EXPECT_EQ(index.MatchedBlocks("r", std::vector<uint64_t>{1, 9, 3}), 1);  // stops at first miss
  EXPECT_EQ(index.MatchedBlocks("other", a), 0);
  index.Record("r", std::vector<uint64_t>{5, 6});  // 1 is the least recently used: evicted
  EXPECT_EQ(index.BlocksOn("r"), 4);
  EXPECT_EQ(index.MatchedBlocks("r", a), 0);
  EXPECT_EQ(index.MatchedBlocks("r", std::vector<uint64_t>{5, 6}), 2);
  index.RemoveReplica("r");
  EXPECT_EQ(index.BlocksOn("r"), 0);
}

TEST(PrefixIndexTest, MatchIsCappedAtMaxBlocks) {
  PrefixIndex index(1000, 8);
  std::vector<uint64_t> h;
  for (uint64_t i = 0; i < 20; ++i) h.push_back(i);
  index.Record("r", h);
  EXPECT_EQ(index.MatchedBlocks("r", h), 8);
}

}  // namespace
}  // namespace aicloud::fleet
