#include "core/status.h"

#include <gtest/gtest.h>

namespace aicloud {
namespace {

TEST(StatusTest, OkAndErrors) {
  EXPECT_TRUE(OkStatus().ok());
  EXPECT_EQ(OkStatus().ToString(), "OK");
  Status s = InvalidArgumentError("nodes.csv:3: gpu: not a number");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.ToString(), "INVALID_ARGUMENT: nodes.csv:3: gpu: not a number");
}

TEST(StatusOrTest, HoldsValueOrStatus) {
  StatusOr<int> v = 7;
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, 7);
  StatusOr<int> e = NotFoundError("missing");
  EXPECT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kNotFound);
}

Status FailsThrough() {
  AICLOUD_RETURN_IF_ERROR(ResourceExhaustedError("full"));
  return OkStatus();
}

TEST(StatusTest, ReturnIfErrorPropagates) {
  EXPECT_EQ(FailsThrough().code(), StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace aicloud
