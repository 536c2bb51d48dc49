// Stream priorities on the compute engine: queued work of a higher-priority stream starts before
// queued work of a lower one; work already running is not preempted; copies are not affected.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "../../testing/wait_until.h"
#include "exec_test_util.h"

namespace phos::sim::testing {
namespace {

using Labels = std::vector<std::string>;

// One compute worker, so that what is queued behind a running op waits for it.
class StreamPriorityTest : public ExecTest {
 protected:
  StreamPriorityTest() : ExecTest(/*time_scale=*/1.0, /*workers=*/1) {}

  std::shared_ptr<Stream> NewStreamAt(int priority) {
    std::shared_ptr<Stream> s;
    EXPECT_EQ(ctx_->CreateStream(CU_STREAM_NON_BLOCKING, &s, priority), CUDA_SUCCESS);
    return s;
  }
};

// An op whose work holds the compute worker until `release` is set, and says when it started.
Op Blocker(Trace* trace, std::atomic<bool>* started, std::atomic<bool>* release) {
  Op op;
  op.engine = Engine::kCompute;
  op.work = [trace, started, release] {
    trace->Add("blocker");
    started->store(true);
    while (!release->load()) std::this_thread::yield();
    return CUDA_SUCCESS;
  };
  return op;
}

TEST_F(StreamPriorityTest, QueuedHigherPriorityWorkStartsFirst) {
  Trace trace;
  std::atomic<bool> started{false}, release{false};
  auto low = NewStreamAt(kLeastStreamPriority);
  auto middle = NewStreamAt(-2);
  auto high = NewStreamAt(kGreatestStreamPriority);
  low->Enqueue(Blocker(&trace, &started, &release));
  ASSERT_TRUE(phos::testing::WaitUntil([&] { return started.load(); }));
  // Queued behind the blocker in the order low, middle, high; served high, middle, low.
  low->Enqueue(TracedOp(Engine::kCompute, 0, &trace, "low"));
  middle->Enqueue(TracedOp(Engine::kCompute, 0, &trace, "middle"));
  high->Enqueue(TracedOp(Engine::kCompute, 0, &trace, "high 1"));
  high->Enqueue(TracedOp(Engine::kCompute, 0, &trace, "high 2"));
  release.store(true);
  ASSERT_EQ(ctx_->Synchronize(), CUDA_SUCCESS);
  // "high 2" waits for "high 1" (stream order); queued when it completes, it still goes before
  // the lower priorities waiting since before.
  EXPECT_EQ(trace.labels(), (Labels{"blocker", "high 1", "high 2", "middle", "low"}));
}

TEST_F(StreamPriorityTest, RunningWorkIsNotPreempted) {
  Trace trace;
  std::atomic<bool> started{false}, release{false};
  auto low = NewStreamAt(kLeastStreamPriority);
  auto high = NewStreamAt(kGreatestStreamPriority);
  low->Enqueue(Blocker(&trace, &started, &release));
  ASSERT_TRUE(phos::testing::WaitUntil([&] { return started.load(); }));
  high->Enqueue(TracedOp(Engine::kCompute, 0, &trace, "high"));
  EXPECT_EQ(high->Query(), CUDA_ERROR_NOT_READY);
  release.store(true);
  ASSERT_EQ(ctx_->Synchronize(), CUDA_SUCCESS);
  EXPECT_EQ(trace.labels(), (Labels{"blocker", "high"}));
}

TEST_F(StreamPriorityTest, PrioritiesOutsideTheRangeAreClamped) {
  EXPECT_EQ(NewStreamAt(kGreatestStreamPriority - 10)->priority(), kGreatestStreamPriority);
  EXPECT_EQ(NewStreamAt(kLeastStreamPriority + 10)->priority(), kLeastStreamPriority);
  EXPECT_EQ(NewStreamAt(-3)->priority(), -3);
  EXPECT_EQ(null_stream().priority(), 0);
  EXPECT_EQ(NewStream()->priority(), 0);
}

}  // namespace
}  // namespace phos::sim::testing
