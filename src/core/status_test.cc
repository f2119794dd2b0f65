#include "stoker/status.h"

#include <gtest/gtest.h>

#include <memory>

namespace stoker {
namespace {

Result<int> parse_positive(int value) {
  if (value <= 0) return Status(StatusCode::kInvalidArgument, "not positive");
  return value;
}

Result<int> doubled(int value) {
  STOKER_ASSIGN_OR_RETURN(int checked, parse_positive(value));
  return checked * 2;
}

Status check_both(int a, int b) {
  STOKER_RETURN_IF_ERROR(parse_positive(a).status());
  STOKER_RETURN_IF_ERROR(parse_positive(b).status().with_context("second"));
  return Status();
}

TEST(Status, DefaultIsOk) {
  Status status;
  EXPECT_TRUE(status.ok());
  EXPECT_EQ(status.code(), StatusCode::kOk);
}

TEST(Status, ContextIsPrefixed) {
  Status status = Status(StatusCode::kCorruptData, "bad packet").with_context("video 'a.mp4'");
  EXPECT_EQ(status.message(), "video 'a.mp4': bad packet");
  EXPECT_EQ(status.code(), StatusCode::kCorruptData);
  EXPECT_TRUE(Status().with_context("ignored").ok());
}

TEST(Result, PropagatesValuesAndErrors) {
  EXPECT_EQ(*doubled(21), 42);
  Result<int> failed = doubled(-1);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(check_both(1, 2).ok());
  EXPECT_EQ(check_both(1, 0).message(), "second: not positive");
}

TEST(Result, HoldsMoveOnlyValues) {
  Result<std::unique_ptr<int>> result = std::make_unique<int>(7);
  ASSERT_TRUE(result.ok());
  std::unique_ptr<int> taken = std::move(result).value();
  EXPECT_EQ(*taken, 7);
}

}  // namespace
}  // namespace stoker
