#include "http/usage_header.h"

#include <gtest/gtest.h>

namespace aicloud::http {
namespace {

TEST(UsageHeader, WrittenValuesReadBack) {
  EXPECT_EQ(UsageHeaderValue({12, 9}), "prompt_tokens=12, completion_tokens=9");
  EXPECT_EQ(UsageHeaderValue({-3, 0}), "prompt_tokens=0, completion_tokens=0");
  for (UsageCounts u : {UsageCounts{0, 0}, UsageCounts{12, 9}, UsageCounts{999'999'999'999'999, 1}}) {
    std::optional<UsageCounts> back = ParseUsageHeader(UsageHeaderValue(u));
    ASSERT_TRUE(back.has_value()) << UsageHeaderValue(u);
    EXPECT_EQ(back->prompt_tokens, u.prompt_tokens);
    EXPECT_EQ(back->completion_tokens, u.completion_tokens);
  }
}

// Anything but the exact form is refused, so the gateway reads the body instead of guessing.
TEST(UsageHeader, OtherFormsAreRefused) {
  for (const char* v : {"", "prompt_tokens=12", "prompt_tokens=12, completion_tokens=",
                        "completion_tokens=9, prompt_tokens=12", "prompt_tokens=12,completion_tokens=9",
                        "prompt_tokens=12, completion_tokens=9 ", " prompt_tokens=12, completion_tokens=9",
                        "prompt_tokens=12, completion_tokens=9, total_tokens=21", "prompt_tokens=-1, completion_tokens=9",
                        "prompt_tokens=+1, completion_tokens=9", "prompt_tokens=1.5, completion_tokens=9",
                        "prompt_tokens=1000000000000000, completion_tokens=9",  // 16 digits
                        "PROMPT_TOKENS=12, completion_tokens=9", "prompt_tokens=12; completion_tokens=9"}) {
    EXPECT_FALSE(ParseUsageHeader(v).has_value()) << v;
  }
}

}  // namespace
}  // namespace aicloud::http
