// Events: capture, completion, re-recording, modelled elapsed time and its error codes.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "exec_test_util.h"

namespace phos::sim::testing {
namespace {

class EventTest : public ExecTest {
 protected:
  // Scale 4: a 50 ms modelled op holds its engine for 200 ms of wall time.
  EventTest() : ExecTest(/*time_scale=*/4) {}

  Op Sleeper(Engine engine, double cost_s) {
    Op op;
    op.engine = engine;
    op.cost_seconds = cost_s;
    return op;
  }
};

TEST_F(EventTest, ElapsedTimeIsModelledDeviceTime) {
  auto stream = NewStream();
  auto start = NewEvent();
  auto end = NewEvent();
  ASSERT_EQ(start->Record(*stream), CUDA_SUCCESS);
  stream->Enqueue(Sleeper(Engine::kCopyH2D, 0.05));
  ASSERT_EQ(end->Record(*stream), CUDA_SUCCESS);
  ASSERT_EQ(end->Synchronize(), CUDA_SUCCESS);
  float ms = 0;
  ASSERT_EQ(Event::ElapsedTime(*start, *end, &ms), CUDA_SUCCESS);
  // 200 ms of wall time at scale 4: 50 modelled milliseconds, within 10% on a loaded host.
  EXPECT_GE(ms, 49.9f);
  EXPECT_LT(ms, 55.0f);
  ASSERT_EQ(Event::ElapsedTime(*end, *start, &ms), CUDA_SUCCESS);
  EXPECT_LT(ms, -49.9f);
}

TEST_F(EventTest, QueryAndSynchronizeFollowTheCapturedWork) {
  auto stream = NewStream();
  auto event = NewEvent();
  EXPECT_FALSE(event->recorded());
  EXPECT_EQ(event->Query(), CUDA_SUCCESS);  // an event never recorded stands for no work
  EXPECT_EQ(event->Synchronize(), CUDA_SUCCESS);
  stream->Enqueue(Sleeper(Engine::kCopyD2H, 0.05));
  ASSERT_EQ(event->Record(*stream), CUDA_SUCCESS);
  EXPECT_TRUE(event->recorded());
  EXPECT_EQ(event->Query(), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(event->Synchronize(), CUDA_SUCCESS);
  EXPECT_EQ(event->Query(), CUDA_SUCCESS);
  EXPECT_EQ(stream->Query(), CUDA_SUCCESS);
}

TEST_F(EventTest, RecordCapturesOnlyWorkEnqueuedBefore) {
  auto stream = NewStream();
  auto event = NewEvent();
  stream->Enqueue(Sleeper(Engine::kCopyH2D, 0.01));
  ASSERT_EQ(event->Record(*stream), CUDA_SUCCESS);
  stream->Enqueue(Sleeper(Engine::kCopyH2D, 0.1));
  ASSERT_EQ(event->Synchronize(), CUDA_SUCCESS);
  EXPECT_EQ(stream->Query(), CUDA_ERROR_NOT_READY);
  ASSERT_EQ(stream->Synchronize(), CUDA_SUCCESS);
}

TEST_F(EventTest, ReRecordingReplacesTheCapture) {
  auto slow = NewStream(CU_STREAM_NON_BLOCKING);
  auto idle = NewStream(CU_STREAM_NON_BLOCKING);
  auto event = NewEvent();
  slow->Enqueue(Sleeper(Engine::kCopyH2D, 0.1));
  ASSERT_EQ(event->Record(*slow), CUDA_SUCCESS);
  EXPECT_EQ(event->Query(), CUDA_ERROR_NOT_READY);
  ASSERT_EQ(event->Record(*idle), CUDA_SUCCESS);
  EXPECT_EQ(event->Query(), CUDA_SUCCESS);
  ASSERT_EQ(ctx_->Synchronize(), CUDA_SUCCESS);
}

TEST_F(EventTest, RecordOnNullStreamCapturesBlockingStreamsWork) {
  auto blocking = NewStream(CU_STREAM_DEFAULT);
  auto non_blocking = NewStream(CU_STREAM_NON_BLOCKING);
  auto event = NewEvent();
  blocking->Enqueue(Sleeper(Engine::kCopyH2D, 0.05));
  non_blocking->Enqueue(Sleeper(Engine::kCopyD2H, 0.2));
  ASSERT_EQ(event->Record(null_stream()), CUDA_SUCCESS);
  ASSERT_EQ(event->Synchronize(), CUDA_SUCCESS);
  EXPECT_EQ(blocking->Query(), CUDA_SUCCESS);
  EXPECT_EQ(non_blocking->Query(), CUDA_ERROR_NOT_READY);
  ASSERT_EQ(ctx_->Synchronize(), CUDA_SUCCESS);
}

TEST_F(EventTest, ElapsedTimeErrors) {
  auto stream = NewStream();
  auto a = NewEvent();
  auto b = NewEvent();
  auto untimed = NewEvent(CU_EVENT_DISABLE_TIMING);
  float ms = 0;
  EXPECT_EQ(Event::ElapsedTime(*a, *b, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(Event::ElapsedTime(*a, *b, &ms), CUDA_ERROR_INVALID_HANDLE);  // neither recorded
  ASSERT_EQ(a->Record(*stream), CUDA_SUCCESS);
  EXPECT_EQ(Event::ElapsedTime(*a, *b, &ms), CUDA_ERROR_INVALID_HANDLE);  // end not recorded
  stream->Enqueue(Sleeper(Engine::kCopyH2D, 0.05));
  ASSERT_EQ(b->Record(*stream), CUDA_SUCCESS);
  EXPECT_EQ(Event::ElapsedTime(*a, *b, &ms), CUDA_ERROR_NOT_READY);
  ASSERT_EQ(untimed->Record(*stream), CUDA_SUCCESS);
  ASSERT_EQ(stream->Synchronize(), CUDA_SUCCESS);
  EXPECT_EQ(Event::ElapsedTime(*a, *untimed, &ms), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(Event::ElapsedTime(*untimed, *b, &ms), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(Event::ElapsedTime(*a, *b, &ms), CUDA_SUCCESS);
  EXPECT_EQ(untimed->Query(), CUDA_SUCCESS);  // timing disabled, completion still tracked
}

TEST_F(EventTest, CreateValidatesFlags) {
  std::shared_ptr<Event> e;
  EXPECT_EQ(Event::Create(0x10, &e), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(Event::Create(CU_EVENT_INTERPROCESS, &e), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(Event::Create(CU_EVENT_DEFAULT, nullptr), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(Event::Create(CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING, &e), CUDA_SUCCESS);
  EXPECT_TRUE(e->timing_disabled());
  ASSERT_EQ(Event::Create(CU_EVENT_BLOCKING_SYNC, &e), CUDA_SUCCESS);
  EXPECT_FALSE(e->timing_disabled());
  EXPECT_EQ(e->flags(), static_cast<unsigned>(CU_EVENT_BLOCKING_SYNC));
}

TEST_F(EventTest, DestroyingARecordedEventIsSafe) {
  auto stream = NewStream();
  auto event = NewEvent();
  stream->Enqueue(Sleeper(Engine::kCopyH2D, 0.02));
  ASSERT_EQ(event->Record(*stream), CUDA_SUCCESS);
  auto waiter = NewStream(CU_STREAM_NON_BLOCKING);
  ASSERT_EQ(waiter->WaitEvent(*event), CUDA_SUCCESS);
  event.reset();
  ASSERT_EQ(waiter->Synchronize(), CUDA_SUCCESS);
  EXPECT_EQ(stream->Query(), CUDA_SUCCESS);
}

// An event of one context can order work of another (cuStreamWaitEvent across contexts).
TEST_F(EventTest, WaitAcrossContexts) {
  std::unique_ptr<ExecContext> other = executor_->CreateContext();
  std::shared_ptr<Stream> other_stream;
  ASSERT_EQ(other->CreateStream(CU_STREAM_DEFAULT, &other_stream), CUDA_SUCCESS);
  Trace trace;
  auto event = NewEvent(CU_EVENT_DISABLE_TIMING);
  null_stream().Enqueue(TracedOp(Engine::kCopyH2D, 0.05, &trace, "producer"));
  ASSERT_EQ(event->Record(null_stream()), CUDA_SUCCESS);
  ASSERT_EQ(other_stream->WaitEvent(*event), CUDA_SUCCESS);
  other_stream->Enqueue(TracedOp(Engine::kCompute, 0, &trace, "consumer"));
  ASSERT_EQ(other->Synchronize(), CUDA_SUCCESS);
  EXPECT_EQ(trace.labels(), (std::vector<std::string>{"producer", "consumer"}));
}

}  // namespace
}  // namespace phos::sim::testing
