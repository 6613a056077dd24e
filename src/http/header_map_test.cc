#include "http/header_map.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace aicloud::http {
namespace {

std::vector<std::pair<std::string, std::string>> Fields(const HeaderMap& h) { return {h.begin(), h.end()}; }

TEST(HeaderMapTest, AddLowerCasesNamesAndJoinsRepeats) {
  HeaderMap h;
  h.Add("Content-Type", "application/json");
  h.Add("Accept", "a");
  h.Add("ACCEPT", "b");
  h.Add("X-Empty", "");
  ASSERT_EQ(h.size(), 3u);
  EXPECT_EQ(Fields(h), (std::vector<std::pair<std::string, std::string>>{
                           {"content-type", "application/json"}, {"accept", "a, b"}, {"x-empty", ""}}));
  EXPECT_EQ(h.Get("content-type"), "application/json");
  EXPECT_EQ(h.Get("Content-Type"), "");  // lookups take lower-case names
  EXPECT_EQ(h.Get("missing"), "");
  EXPECT_TRUE(h.contains("x-empty"));
  EXPECT_EQ(h.count("accept"), 1u);
  EXPECT_EQ(h.count("missing"), 0u);
  EXPECT_EQ(h.find("missing"), h.end());
  ASSERT_NE(h.find("accept"), h.end());
  EXPECT_EQ(h.find("accept")->second, "a, b");
}

TEST(HeaderMapTest, SubscriptFindsOrAddsAnEmptyField) {
  HeaderMap h{{"x-a", "1"}};
  EXPECT_EQ(h["x-a"], "1");
  h["x-a"] = "2";
  EXPECT_EQ(h.Get("x-a"), "2");
  EXPECT_EQ(h["x-b"], "");
  EXPECT_EQ(h.size(), 2u);
  h["x-b"] = "3";
  EXPECT_EQ(Fields(h), (std::vector<std::pair<std::string, std::string>>{{"x-a", "2"}, {"x-b", "3"}}));
}

TEST(HeaderMapTest, ClearKeepsStorageForTheNextMessageButNotALargeOne) {
  HeaderMap h;
  const std::string value(100, 'v');  // past the small-string buffer: on the heap
  h.Add("Authorization", value);
  h.Add("Host", "h");
  const char* storage = h.begin()->second.data();
  h.clear();
  EXPECT_TRUE(h.empty());
  EXPECT_EQ(h.begin(), h.end());
  EXPECT_EQ(h.Get("authorization"), "");
  h.Add("Authorization", std::string(90, 'w'));  // the next message's field reuses it
  ASSERT_EQ(h.size(), 1u);
  EXPECT_EQ(h.begin()->second.data(), storage);
  EXPECT_EQ(h.Get("authorization"), std::string(90, 'w'));
  EXPECT_FALSE(h.contains("host"));  // a spare is not a field

  // More than kKeptBytes is given back: the next value gets fresh storage of its own size.
  EXPECT_GE(h.begin()->second.capacity(), 100u);
  h.Add("X-Big", std::string(HeaderMap::kKeptBytes, 'b'));
  h.clear();
  h.Add("Authorization", std::string(90, 'w'));
  EXPECT_LT(h.begin()->second.capacity(), 100u);
}

TEST(HeaderMapTest, AddRefusesANewNameBeyondMaxFields) {
  HeaderMap h;
  for (size_t i = 0; i < HeaderMap::kMaxFields; ++i) ASSERT_TRUE(h.Add("x-" + std::to_string(i), "v"));
  EXPECT_FALSE(h.Add("x-one-more", "v"));
  EXPECT_EQ(h.size(), HeaderMap::kMaxFields);
  EXPECT_FALSE(h.contains("x-one-more"));
  EXPECT_TRUE(h.Add("X-0", "w"));  // a repeat still joins
  EXPECT_EQ(h.Get("x-0"), "v, w");
}

TEST(HeaderMapTest, CopiesAndMovesCarryOnlyTheFields) {
  HeaderMap h;
  for (int i = 0; i < 5; ++i) h.Add("x-" + std::to_string(i), "v");
  h.clear();
  h.Add("X-Only", "1");
  HeaderMap copy = h;
  EXPECT_EQ(copy.size(), 1u);
  EXPECT_EQ(Fields(copy), Fields(h));
  EXPECT_EQ(copy, h);

  HeaderMap moved = std::move(copy);
  EXPECT_EQ(Fields(moved), (std::vector<std::pair<std::string, std::string>>{{"x-only", "1"}}));
  EXPECT_TRUE(copy.empty());  // NOLINT(bugprone-use-after-move): moved-from is empty and usable
  copy.Add("x-again", "2");
  EXPECT_EQ(copy.Get("x-again"), "2");

  HeaderMap assigned{{"x-old", "0"}};
  assigned = moved;
  EXPECT_EQ(assigned, moved);
  EXPECT_FALSE(assigned.contains("x-old"));
}

TEST(HeaderMapTest, EqualityIgnoresOrderButNotValues) {
  HeaderMap a{{"x-a", "1"}, {"x-b", "2"}};
  HeaderMap b{{"x-b", "2"}, {"x-a", "1"}};
  EXPECT_EQ(a, b);
  b["x-b"] = "3";
  EXPECT_FALSE(a == b);
  HeaderMap c{{"x-a", "1"}};
  EXPECT_FALSE(a == c);
  EXPECT_EQ((HeaderMap{{"X-A", "1"}, {"x-a", "2"}}), (HeaderMap{{"x-a", "1, 2"}}));  // literals join as Add does
}

}  // namespace
}  // namespace aicloud::http
