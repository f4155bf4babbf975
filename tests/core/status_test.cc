#include "core/status.h"

#include <gtest/gtest.h>

namespace narrows::core {
namespace {

Result<int> Half(int x) {
  if (x % 2) return Status::InvalidArgument("odd");
  return x / 2;
}

Status Chain(int x) {
  auto r = Half(x);
  NARROWS_RETURN_IF_ERROR(r.status());
  return Status::Ok();
}

TEST(StatusTest, ResultCarriesValueOrError) {
  EXPECT_EQ(*Half(8), 4);
  const auto bad = Half(3);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().ToString(), "InvalidArgument: odd");
  EXPECT_TRUE(Chain(4).ok());
  EXPECT_EQ(Chain(5).code(), StatusCode::kInvalidArgument);
}

TEST(StatusDeathTest, CheckAbortsWithFileAndLine) {
  EXPECT_DEATH(NARROWS_CHECK(1 + 1 == 3) << "arithmetic", "status_test.cc:[0-9]+: check failed: 1 \\+ 1 == 3 arithmetic");
}

}  // namespace
}  // namespace narrows::core
