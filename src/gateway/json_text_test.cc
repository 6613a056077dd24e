// json_text.h against nlohmann's dump(), which it stands in for on the request path.
#include "gateway/json_text.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include <nlohmann/json.hpp>

#include "gateway/request.h"

namespace aicloud::gateway {
namespace {

using nlohmann::json;

std::string Str(std::string_view s) {
  std::string out;
  AppendJsonString(&out, s);
  return out;
}

std::string Num(double v) {
  std::string out;
  AppendJsonDouble(&out, v);
  return out;
}

TEST(JsonTextTest, StringsAreEscapedAsDumpEscapesThem) {
  for (std::string_view s : {std::string_view(""), std::string_view("plain"), std::string_view("q\"b\\s/"),
                             std::string_view("\b\f\n\r\t"), std::string_view("\x01\x1f\x7f"),
                             std::string_view("\xc3\xbc" "n\xc3\xaf" "code \xe2\x82\xac \xf0\x9f\x98\x80"),
                             std::string_view("a\0b", 3)}) {
    EXPECT_EQ(Str(s), json(std::string(s)).dump()) << s;
  }
}

TEST(JsonTextTest, BytesThatAreNotUtf8BecomeReplacementCharacters) {
  for (std::string_view s : {std::string_view("\xff"), std::string_view("ok\xc3"), std::string_view("\xed\xa0\x80 surrogate"),
                             std::string_view("\xc0\xaf overlong")}) {
    const std::string out = Str(s);
    EXPECT_EQ(out, json(std::string(s)).dump(-1, ' ', false, json::error_handler_t::replace)) << s;
    EXPECT_NE(out.find("\xef\xbf\xbd"), std::string::npos) << out;
    EXPECT_FALSE(json::parse(out, nullptr, false).is_discarded()) << out;
  }
}

TEST(JsonTextTest, DoublesAreLaidOutAsDumpLaysThemOut) {
  for (double v : {0.0, -0.0, 1.0, -1.0, 0.5, 0.1, 0.0001, 0.00012345, 0.00001, 1e-5, 123.456, 100000.0, 1e15,
                   999999999999999.0, 1e16, 1.5e16, 1e-300, -2.5e-7, 3.0e21, 1e308, 2.2250738585072014e-308,
                   4.9406564584124654e-324, 12.0, 0.3, 2.0 / 3.0}) {
    EXPECT_EQ(Num(v), json(v).dump()) << v;
  }
  EXPECT_EQ(Num(std::numeric_limits<double>::quiet_NaN()), "null");
  EXPECT_EQ(Num(std::numeric_limits<double>::infinity()), "null");
  EXPECT_EQ(Num(-std::numeric_limits<double>::infinity()), "null");
}

// Grisu2 (dump's digits) is not always the shortest, so a few values may differ in their digits;
// every one reads back as the same double, and nearly all match byte for byte.
TEST(JsonTextTest, RandomDoublesReadBackExactly) {
  std::mt19937_64 rng(7);
  int same = 0, total = 0;
  for (int i = 0; i < 20000; ++i) {
    double v;
    uint64_t bits = rng();
    std::memcpy(&v, &bits, sizeof v);
    if (!std::isfinite(v)) continue;
    if (i % 2 == 0) v = std::ldexp(static_cast<double>(rng() % 1000000) / 1000.0, static_cast<int>(rng() % 40) - 20);
    const std::string out = Num(v);
    ++total;
    same += out == json(v).dump() ? 1 : 0;
    EXPECT_EQ(json::parse(out).get<double>(), v) << out;
  }
  EXPECT_GT(same, total * 99 / 100);
}

TEST(JsonTextTest, ARewrittenBodyStaysValidJsonWhateverTheModelName) {
  BodyEdits edits;
  edits.model = std::string("base-\xff-model");
  StatusOr<std::string> out = RewriteBody(R"({"model":"alias","messages":[]})", edits);
  ASSERT_TRUE(out.ok()) << out.status();
  json doc = json::parse(*out, nullptr, false);
  ASSERT_FALSE(doc.is_discarded()) << *out;
  EXPECT_EQ(doc["model"], "base-\xef\xbf\xbd-model");
  // The same through the document path (a number simdjson refuses sends the text there).
  out = RewriteBody(R"({"model":"alias","seed":123456789012345678901234567890})", edits);
  ASSERT_TRUE(out.ok()) << out.status();
  doc = json::parse(*out, nullptr, false);
  ASSERT_FALSE(doc.is_discarded()) << *out;
  EXPECT_EQ(doc["model"], "base-\xef\xbf\xbd-model");
}

}  // namespace
}  // namespace aicloud::gateway
