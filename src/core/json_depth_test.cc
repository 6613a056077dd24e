#include "core/json_depth.h"

#include <gtest/gtest.h>

#include <string>

namespace aicloud {
namespace {

TEST(JsonDepth, CountsBracketsOutsideStrings) {
  EXPECT_TRUE(JsonNestsWithin("{}", 1));
  EXPECT_FALSE(JsonNestsWithin("{}", 0));
  EXPECT_TRUE(JsonNestsWithin(R"({"a":[1,{"b":[]}]})", 4));
  EXPECT_FALSE(JsonNestsWithin(R"({"a":[1,{"b":[]}]})", 3));
  // Siblings do not add up; brackets in strings, escaped quotes included, do not count.
  EXPECT_TRUE(JsonNestsWithin("[[],[],[],[]]", 2));
  EXPECT_TRUE(JsonNestsWithin(R"({"s":"[[[[\"[[[[","t":"\\"})", 1));
  const std::string deep = std::string(1'000'000, '[') + std::string(1'000'000, ']');
  EXPECT_FALSE(JsonNestsWithin(deep, 64));
  EXPECT_TRUE(JsonNestsWithin(deep, 1'000'000));
}

}  // namespace
}  // namespace aicloud
