#include "core/rng.h"

#include <gtest/gtest.h>

#include <vector>

namespace aicloud {
namespace {

TEST(RngTest, SameSeedSameSequence) {
  Rng a(42), b(42), c(43);
  bool differs = false;
  for (int i = 0; i < 100; ++i) {
    uint64_t x = a.Next();
    EXPECT_EQ(x, b.Next());
    differs = differs || x != c.Next();
  }
  EXPECT_TRUE(differs);
}

TEST(RngTest, UniformIsInRangeAndRoughlyFlat) {
  Rng r(7);
  std::vector<int> hist(10, 0);
  for (int i = 0; i < 100000; ++i) {
    uint64_t v = r.Uniform(10);
    ASSERT_LT(v, 10u);
    ++hist[v];
  }
  for (int h : hist) EXPECT_NEAR(h, 10000, 500);
  for (int i = 0; i < 1000; ++i) {
    double d = r.UniformDouble();
    ASSERT_GE(d, 0.0);
    ASSERT_LT(d, 1.0);
  }
}

}  // namespace
}  // namespace aicloud
