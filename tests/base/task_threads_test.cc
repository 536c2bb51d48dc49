#include "phos/base/task_threads.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <vector>

namespace phos {
namespace {

TEST(TaskThreadsTest, OneThreadRunsTasksInTheOrderPosted) {
  std::vector<int> ran;
  {
    TaskThreads threads(1);
    for (int i = 0; i < 100; ++i) threads.Post([&ran, i] { ran.push_back(i); });
  }  // the destructor runs what is queued before it joins
  ASSERT_EQ(ran.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(ran[i], i);
}

// A task blocked on one thread does not hold back the others: the second thread runs them.
TEST(TaskThreadsTest, ATaskThatBlocksLeavesTheOtherThreadsRunning) {
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  std::atomic<int> others{0};
  {
    TaskThreads threads(2);
    threads.Post([&] {
      std::unique_lock lock(mu);
      cv.wait(lock, [&] { return release; });
    });
    for (int i = 0; i < 10; ++i) {
      threads.Post([&] {
        if (others.fetch_add(1) + 1 == 10) {
          std::lock_guard lock(mu);
          release = true;
          cv.notify_all();
        }
      });
    }
  }  // joins only once the blocked task was released, by the last of the others
  EXPECT_EQ(others.load(), 10);
  EXPECT_TRUE(release);
}

}  // namespace
}  // namespace phos
