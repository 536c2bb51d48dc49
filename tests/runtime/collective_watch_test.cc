// The collective watch (runtime/src/collective_watch.h) over a counting abort: the session's end
// aborts once, whatever the executor does; with a timeout, each record that runs past it is
// judged once.
#include "collective_watch.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>

#include "../testing/wait_until.h"

namespace phos::runtime {
namespace {

using phos::testing::WaitUntil;
using namespace std::chrono_literals;

TEST(CollectiveWatchTest, AbortNowAbortsOnceWithTheReason) {
  int calls = 0;
  std::string reason;
  CollectiveWatch watch(0ms, [&](const char* why) {
    ++calls;
    reason = why;
    return 1;
  });
  watch.Arm();  // no timeout: nothing to watch
  watch.BeginRecord();
  EXPECT_EQ(watch.AbortNow("the session ended"), 1);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(reason, "the session ended");
}

TEST(CollectiveWatchTest, EachRecordRunningPastTheTimeoutIsJudgedOnce) {
  std::atomic<int> judged{0};
  CollectiveWatch watch(1ms, [&](const char*) { return ++judged; });
  watch.Arm();
  watch.BeginRecord();
  ASSERT_TRUE(WaitUntil([&] { return judged.load() == 1; }));
  watch.EndRecord();
  watch.BeginRecord();
  ASSERT_TRUE(WaitUntil([&] { return judged.load() == 2; }));
  watch.EndRecord();
  EXPECT_EQ(watch.AbortNow("the session ended"), 3);
}

}  // namespace
}  // namespace phos::runtime
