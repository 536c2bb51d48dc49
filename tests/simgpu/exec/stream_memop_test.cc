// The stream-memory-operation engine: a polled op holds up its own stream until its work stops
// answering CUDA_ERROR_NOT_READY, without holding up other streams or other memory operations;
// a failed context drops it rather than leaving its stream waiting.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "exec_test_util.h"

namespace phos::sim::testing {
namespace {

using Labels = std::vector<std::string>;

class StreamMemOpTest : public ExecTest {};

// A memop whose work completes once `word` reaches `value`.
Op WaitFor(const std::atomic<int>* word, int value) {
  Op op;
  op.engine = Engine::kMemOp;
  op.work = [word, value] { return word->load() >= value ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY; };
  return op;
}

Op Write(std::atomic<int>* word, int value) {
  Op op;
  op.engine = Engine::kMemOp;
  op.work = [word, value] {
    word->store(value);
    return CUDA_SUCCESS;
  };
  return op;
}

TEST_F(StreamMemOpTest, WaitHoldsOnlyItsStreamUntilAWriteSatisfiesIt) {
  Trace trace;
  std::atomic<int> word{0};
  auto waiting = NewStream(CU_STREAM_NON_BLOCKING);
  auto other = NewStream(CU_STREAM_NON_BLOCKING);
  waiting->Enqueue(WaitFor(&word, 2));
  waiting->Enqueue(TracedOp(Engine::kCompute, 0, &trace, "after the wait"));
  // A second wait on another stream, satisfied first: a pending wait does not block the engine.
  other->Enqueue(WaitFor(&word, 1));
  other->Enqueue(TracedOp(Engine::kCompute, 0, &trace, "other"));
  EXPECT_EQ(waiting->Query(), CUDA_ERROR_NOT_READY);
  word.store(1);
  ASSERT_EQ(other->Synchronize(), CUDA_SUCCESS);
  EXPECT_EQ(trace.labels(), (Labels{"other"}));
  EXPECT_EQ(waiting->Query(), CUDA_ERROR_NOT_READY);
  // A write on the engine itself releases the wait.
  other->Enqueue(Write(&word, 2));
  ASSERT_EQ(waiting->Synchronize(), CUDA_SUCCESS);
  EXPECT_EQ(trace.labels(), (Labels{"other", "after the wait"}));
  EXPECT_EQ(executor_->stats().engine(Engine::kMemOp).ops, 3u);
}

TEST_F(StreamMemOpTest, FailedContextDropsAPendingWait) {
  std::atomic<int> word{0};
  auto waiting = NewStream(CU_STREAM_NON_BLOCKING);
  auto failing = NewStream(CU_STREAM_NON_BLOCKING);
  waiting->Enqueue(WaitFor(&word, 1));
  failing->EnqueueHeld(Op{}, /*marker=*/true)->Release(CUDA_ERROR_ILLEGAL_ADDRESS);
  // Nothing ever writes the word: the wait ends because the context failed.
  EXPECT_EQ(waiting->Synchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(executor_->stats().engine(Engine::kMemOp).dropped_ops, 1u);
}

TEST_F(StreamMemOpTest, WorkThatFailsFailsTheContext) {
  auto stream = NewStream(CU_STREAM_NON_BLOCKING);
  Op op;
  op.engine = Engine::kMemOp;
  op.work = [] { return CUDA_ERROR_ILLEGAL_ADDRESS; };
  stream->Enqueue(std::move(op));
  EXPECT_EQ(stream->Synchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
}

}  // namespace
}  // namespace phos::sim::testing
