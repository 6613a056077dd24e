#include "fleet/node_pool.h"

#include <gtest/gtest.h>

namespace aicloud::fleet {
namespace {

TEST(WarmPoolProviderTest, WarmNodesStartFastThenColdOnesTakeTheDelay) {
  WarmPoolProvider p({.provision_delay_s = 180, .warm_pool_size = 2, .warm_start_s = 10});
  std::vector<NodeGrant> g = p.Request(3, 100);
  ASSERT_EQ(g.size(), 3u);
  EXPECT_TRUE(g[0].from_warm_pool);
  EXPECT_DOUBLE_EQ(g[0].ready_at_s, 110);
  EXPECT_TRUE(g[1].from_warm_pool);
  EXPECT_FALSE(g[2].from_warm_pool);
  EXPECT_DOUBLE_EQ(g[2].ready_at_s, 280);
  // The pool refills in the background: empty until the replacements are provisioned.
  EXPECT_EQ(p.WarmAvailable(200), 0);
  EXPECT_EQ(p.WarmAvailable(280), 2);
  // A request before the refill lands gets a refilling node, still ahead of a new one.
  std::vector<NodeGrant> early = p.Request(1, 150);
  EXPECT_DOUBLE_EQ(early[0].ready_at_s, 290);
}

TEST(WarmPoolProviderTest, ReleasedNodesRefillThePoolAndCostIsCounted) {
  WarmPoolProvider p({.provision_delay_s = 180, .warm_pool_size = 1, .warm_start_s = 0});
  std::vector<NodeGrant> g = p.Request(2, 0);  // one warm, one cold; one refill starts
  p.Release(g[1].node_id, 100);                // pool has a refill pending: full, node returned
  EXPECT_EQ(p.WarmAvailable(100), 0);
  EXPECT_EQ(p.WarmAvailable(180), 1);
  // Node-seconds: g0 in use 0..200, g1 0..100, the refill idle 0..200 (paid while provisioning).
  EXPECT_DOUBLE_EQ(p.NodeSeconds(200), 200 + 100 + 200);
  EXPECT_DOUBLE_EQ(p.WarmIdleSeconds(200), 200);
}

TEST(WarmPoolProviderTest, NoPoolMeansEveryNodeWaitsTheFullDelay) {
  WarmPoolProvider p({.provision_delay_s = 180, .warm_pool_size = 0, .warm_start_s = 10});
  for (const NodeGrant& g : p.Request(3, 5)) {
    EXPECT_FALSE(g.from_warm_pool);
    EXPECT_DOUBLE_EQ(g.ready_at_s, 185);
  }
  EXPECT_EQ(p.provisioned(), 3);
}

TEST(IdleNodesToReleaseTest, OnlyNodesEmptyLongerThanTheThreshold) {
  struct Case {
    NodeUsage node;
    bool released;
  };
  const Case cases[] = {
      {{"busy", 1, 0}, false},
      {{"idle-599s", 0, 401}, false},
      {{"idle-600s", 0, 400}, true},
      {{"idle-long", 0, 0}, true},
  };
  std::vector<NodeUsage> nodes;
  for (const Case& c : cases) nodes.push_back(c.node);
  std::vector<std::string> out = IdleNodesToRelease(nodes, 1000, 600);
  std::vector<std::string> want;
  for (const Case& c : cases) {
    if (c.released) want.push_back(c.node.node_id);
  }
  EXPECT_EQ(out, want);
  EXPECT_EQ(IdleNodesToRelease(nodes, 1000, 0).size(), 3u);
}

}  // namespace
}  // namespace aicloud::fleet
