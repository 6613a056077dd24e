#include "sched/max_tree.h"

#include <gtest/gtest.h>

#include <vector>

#include "core/rng.h"

namespace aicloud::sched {
namespace {

// Brute force over the same values: the best value, how many hold it, and their indexes.
struct Expect {
  int64_t best = MaxTree::kNone;
  std::vector<size_t> at;
};
Expect Brute(const std::vector<int64_t>& v) {
  Expect e;
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] == MaxTree::kNone) continue;
    if (e.at.empty() || v[i] > e.best) {
      e.best = v[i];
      e.at = {i};
    } else if (v[i] == e.best) {
      e.at.push_back(i);
    }
  }
  return e;
}

TEST(MaxTreeTest, EmptyUntilSomethingIsSet) {
  MaxTree t;
  t.Reset(5);
  EXPECT_TRUE(t.empty());
  t.Set(3, 7);
  EXPECT_FALSE(t.empty());
  EXPECT_EQ(t.max(), 7);
  EXPECT_EQ(t.First(), 3u);
  t.Set(3, MaxTree::kNone);
  EXPECT_TRUE(t.empty());
}

TEST(MaxTreeTest, MatchesBruteForceUnderRandomUpdatesAndBulkLoads) {
  Rng rng(11);
  for (size_t n : {1u, 2u, 3u, 7u, 8u, 9u, 100u, 1000u}) {
    MaxTree t;
    t.Reset(n);
    std::vector<int64_t> v(n, MaxTree::kNone);
    for (int step = 0; step < 3000; ++step) {
      if (step % 500 == 0) {
        // Bulk load every leaf, then build once.
        for (size_t i = 0; i < n; ++i) {
          v[i] = rng.Uniform(4) == 0 ? MaxTree::kNone : static_cast<int64_t>(rng.Uniform(5));
          t.SetLeaf(i, v[i]);
        }
        t.Build();
      } else {
        const size_t i = rng.Uniform(n);
        v[i] = rng.Uniform(4) == 0 ? MaxTree::kNone : static_cast<int64_t>(rng.Uniform(5));
        t.Set(i, v[i]);
      }
      const Expect e = Brute(v);
      ASSERT_EQ(t.empty(), e.at.empty());
      if (e.at.empty()) continue;
      ASSERT_EQ(t.max(), e.best);
      ASSERT_EQ(t.ties(), static_cast<int64_t>(e.at.size()));
      ASSERT_EQ(t.First(), e.at.front());
      for (size_t k = 0; k < e.at.size(); ++k) ASSERT_EQ(t.Nth(static_cast<int64_t>(k)), e.at[k]);
    }
  }
}

}  // namespace
}  // namespace aicloud::sched
