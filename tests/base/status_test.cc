#include "phos/base/status.h"

#include <gtest/gtest.h>


namespace phos {
namespace {

Result<int> Half(int v) {
  if (v % 2 != 0) return Status::InvalidArgument("odd value " + std::to_string(v));
  return v / 2;
}

Result<int> Quarter(int v) {
  PHOS_ASSIGN_OR_RETURN(int half, Half(v));
  PHOS_ASSIGN_OR_RETURN(int quarter, Half(half));
  return quarter;
}

Status CheckPositive(int v) {
  if (v <= 0) return Status::InvalidArgument("not positive");
  return Status::Ok();
}

Status CheckBoth(int a, int b) {
  PHOS_RETURN_IF_ERROR(CheckPositive(a));
  PHOS_RETURN_IF_ERROR(CheckPositive(b).WithContext("second"));
  return Status::Ok();
}

TEST(StatusTest, OkAndErrorsCarryCodeAndMessage) {
  EXPECT_TRUE(Status::Ok().ok());
  EXPECT_EQ(Status::Ok().ToString(), "OK");
  Status s = Status::NotFound("snapshot 'mlp' v3");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.ToString(), "NotFound: snapshot 'mlp' v3");
}

TEST(StatusTest, WithContextPrefixesAndKeepsCode) {
  Status s = Status::Corruption("checksum mismatch").WithContext("load chunk 3f2a").WithContext("restore fn 'mlp'");
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_EQ(s.message(), "restore fn 'mlp': load chunk 3f2a: checksum mismatch");
  EXPECT_TRUE(Status::Ok().WithContext("ignored").ok());
}

TEST(StatusTest, FromErrnoNamesTheError) {
  Status s = Status::FromErrno(ENOENT, "open /nowhere");
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_EQ(s.message(), "open /nowhere: No such file or directory");
}

TEST(ResultTest, AssignOrReturnPropagates) {
  Result<int> ok = Quarter(12);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, 3);
  Result<int> bad = Quarter(6);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "odd value 3");
}

TEST(ResultTest, ReturnIfErrorPropagatesContext) {
  EXPECT_TRUE(CheckBoth(1, 2).ok());
  EXPECT_EQ(CheckBoth(-1, 2).message(), "not positive");
  EXPECT_EQ(CheckBoth(1, -2).message(), "second: not positive");
}

}  // namespace
}  // namespace phos
