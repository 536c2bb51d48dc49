#include "phos/base/unique_fd.h"

#include <fcntl.h>
#include <gtest/gtest.h>

#include <utility>

namespace phos {
namespace {

// Whether `fd` is an open descriptor of this process (fcntl fails with EBADF otherwise).
bool IsOpen(int fd) {
  return fcntl(fd, F_GETFD) != -1;
}

TEST(UniqueFdTest, ClosesWhatItHoldsWhenItGoes) {
  int raw = open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(raw, 0);
  {
    UniqueFd fd(raw);
    EXPECT_TRUE(fd.valid());
    EXPECT_EQ(fd.get(), raw);
  }
  EXPECT_FALSE(IsOpen(raw));
}

TEST(UniqueFdTest, AMoveHandsTheDescriptorOver) {
  int raw = open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(raw, 0);
  UniqueFd to;
  {
    UniqueFd from(raw);
    to = std::move(from);
    EXPECT_FALSE(from.valid());  // NOLINT(bugprone-use-after-move): a moved-from one holds nothing
  }
  EXPECT_TRUE(IsOpen(raw));  // the moved-from owner's end did not close it
  EXPECT_EQ(to.get(), raw);
  to.reset();
  EXPECT_FALSE(IsOpen(raw));
}

TEST(UniqueFdTest, ReleaseGivesItUpOpen) {
  int raw = open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(raw, 0);
  {
    UniqueFd fd(raw);
    EXPECT_EQ(fd.release(), raw);
    EXPECT_FALSE(fd.valid());
  }
  EXPECT_TRUE(IsOpen(raw));
  close(raw);
}

TEST(UniqueFdTest, ResetClosesTheOldOne) {
  int first = open("/dev/null", O_RDONLY | O_CLOEXEC);
  int second = open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(first, 0);
  ASSERT_GE(second, 0);
  UniqueFd fd(first);
  fd.reset(second);
  EXPECT_FALSE(IsOpen(first));
  EXPECT_TRUE(IsOpen(second));
}

}  // namespace
}  // namespace phos
