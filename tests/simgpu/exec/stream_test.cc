// Streams: order, asynchrony, cross-stream waits, the legacy NULL stream, teardown.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "exec_test_util.h"

namespace phos::sim::testing {
namespace {

using Clock = std::chrono::steady_clock;
using Labels = std::vector<std::string>;

class StreamTest : public ExecTest {};

TEST_F(StreamTest, OpsRunInEnqueueOrderAcrossEngines) {
  Trace trace;
  auto stream = NewStream();
  // Engines differ and later ops are cheaper: only stream order keeps them in sequence.
  stream->Enqueue(TracedOp(Engine::kCopyH2D, 0.03, &trace, "h2d"));
  stream->Enqueue(TracedOp(Engine::kCompute, 0.02, &trace, "compute"));
  stream->Enqueue(TracedOp(Engine::kCopyD2H, 0.01, &trace, "d2h"));
  stream->Enqueue(TracedOp(Engine::kHost, 0, &trace, "host"));
  stream->Enqueue(TracedOp(Engine::kCompute, 0, &trace, "last"));
  ASSERT_EQ(stream->Synchronize(), CUDA_SUCCESS);
  EXPECT_EQ(trace.labels(), (Labels{"h2d", "compute", "d2h", "host", "last"}));
}

TEST_F(StreamTest, EnqueueReturnsBeforeTheWorkIsDone) {
  Trace trace;
  auto stream = NewStream();
  const auto start = Clock::now();
  const uint64_t seq = stream->Enqueue(TracedOp(Engine::kCopyH2D, 0.2, &trace, "slow"));
  EXPECT_LT(MsSince(start), 50.0);
  EXPECT_EQ(seq, 1u);
  EXPECT_EQ(stream->Query(), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(stream->last_enqueued(), 1u);
  EXPECT_EQ(stream->last_completed(), 0u);
  ASSERT_EQ(stream->Synchronize(), CUDA_SUCCESS);
  EXPECT_GE(MsSince(start), 200.0);
  EXPECT_EQ(stream->Query(), CUDA_SUCCESS);
  EXPECT_EQ(stream->last_completed(), 1u);
}

TEST_F(StreamTest, WaitBlocksForOneOpOnly) {
  auto stream = NewStream();
  Trace trace;
  const uint64_t first = stream->Enqueue(TracedOp(Engine::kCopyH2D, 0.02, &trace, "first"));
  stream->Enqueue(TracedOp(Engine::kCopyH2D, 0.3, &trace, "second"));
  const auto start = Clock::now();
  ASSERT_EQ(stream->Wait(first), CUDA_SUCCESS);
  EXPECT_LT(MsSince(start), 200.0);
  EXPECT_EQ(stream->Query(), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(stream->Wait(99), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(stream->Synchronize(), CUDA_SUCCESS);
}

TEST_F(StreamTest, WaitEventOrdersStreamsWithoutBlockingTheHost) {
  Trace trace;
  auto producer = NewStream(CU_STREAM_NON_BLOCKING);
  auto consumer = NewStream(CU_STREAM_NON_BLOCKING);
  auto ready = NewEvent();
  const auto start = Clock::now();
  producer->Enqueue(TracedOp(Engine::kCopyH2D, 0.1, &trace, "produce"));
  ASSERT_EQ(ready->Record(*producer), CUDA_SUCCESS);
  ASSERT_EQ(consumer->WaitEvent(*ready), CUDA_SUCCESS);
  consumer->Enqueue(TracedOp(Engine::kCompute, 0, &trace, "consume"));
  EXPECT_LT(MsSince(start), 50.0);
  EXPECT_EQ(consumer->Query(), CUDA_ERROR_NOT_READY);
  ASSERT_EQ(consumer->Synchronize(), CUDA_SUCCESS);
  EXPECT_GE(MsSince(start), 100.0);
  EXPECT_EQ(trace.labels(), (Labels{"produce", "consume"}));
}

// The wait uses what the event captured when it was called; re-recording later does not move it.
TEST_F(StreamTest, WaitEventUsesTheCaptureAtCallTime) {
  Trace trace;
  auto producer = NewStream(CU_STREAM_NON_BLOCKING);
  auto consumer = NewStream(CU_STREAM_NON_BLOCKING);
  auto event = NewEvent();
  producer->Enqueue(TracedOp(Engine::kCopyH2D, 0.05, &trace, "first"));
  ASSERT_EQ(event->Record(*producer), CUDA_SUCCESS);
  ASSERT_EQ(consumer->WaitEvent(*event), CUDA_SUCCESS);
  producer->Enqueue(TracedOp(Engine::kCopyH2D, 0.3, &trace, "second"));
  ASSERT_EQ(event->Record(*producer), CUDA_SUCCESS);
  consumer->Enqueue(TracedOp(Engine::kCompute, 0, &trace, "consume"));
  ASSERT_EQ(consumer->Synchronize(), CUDA_SUCCESS);
  // "second" started (its work runs first, then its pacing) but has not completed.
  EXPECT_EQ(producer->Query(), CUDA_ERROR_NOT_READY);
  ASSERT_EQ(ctx_->Synchronize(), CUDA_SUCCESS);
  EXPECT_EQ(trace.labels().front(), "first");
}

TEST_F(StreamTest, WaitOnNeverRecordedEventIsANoOp) {
  auto stream = NewStream();
  auto event = NewEvent();
  ASSERT_EQ(stream->WaitEvent(*event), CUDA_SUCCESS);
  EXPECT_EQ(stream->last_enqueued(), 0u);
  EXPECT_EQ(stream->Query(), CUDA_SUCCESS);
}

// k1 on s, k2 on the NULL stream, k3 on s: k2 waits for k1 and k3 waits for k2 (the example in
// the driver API's "Stream synchronization behavior").
TEST_F(StreamTest, LegacyNullStreamSynchronizesWithBlockingStreams) {
  Trace trace;
  auto s = NewStream(CU_STREAM_DEFAULT);
  s->Enqueue(TracedOp(Engine::kCopyH2D, 0.1, &trace, "k1"));
  null_stream().Enqueue(TracedOp(Engine::kCopyD2H, 0.05, &trace, "k2"));
  s->Enqueue(TracedOp(Engine::kCompute, 0, &trace, "k3"));
  ASSERT_EQ(ctx_->Synchronize(), CUDA_SUCCESS);
  EXPECT_EQ(trace.labels(), (Labels{"k1", "k2", "k3"}));
}

TEST_F(StreamTest, NonBlockingStreamsAreExemptFromTheNullStream) {
  Trace trace;
  auto n = NewStream(CU_STREAM_NON_BLOCKING);
  n->Enqueue(TracedOp(Engine::kCopyH2D, 0.15, &trace, "n-slow"));
  null_stream().Enqueue(TracedOp(Engine::kCopyD2H, 0.05, &trace, "null"));
  n->Enqueue(TracedOp(Engine::kCompute, 0, &trace, "n-after"));
  ASSERT_EQ(null_stream().Synchronize(), CUDA_SUCCESS);
  EXPECT_EQ(n->Query(), CUDA_ERROR_NOT_READY);  // the NULL stream did not wait for it
  ASSERT_EQ(ctx_->Synchronize(), CUDA_SUCCESS);
  // "null" ran without waiting for n; "n-after" did not wait for "null" to complete.
  const Labels labels = trace.labels();
  ASSERT_EQ(labels.size(), 3u);
  EXPECT_EQ(labels[2], "n-after");
}

TEST_F(StreamTest, NullStreamWorkDoesNotDelayNonBlockingStreams) {
  Trace trace;
  auto n = NewStream(CU_STREAM_NON_BLOCKING);
  null_stream().Enqueue(TracedOp(Engine::kCopyH2D, 0.2, &trace, "null-slow"));
  n->Enqueue(TracedOp(Engine::kCompute, 0, &trace, "n"));
  ASSERT_EQ(n->Synchronize(), CUDA_SUCCESS);
  EXPECT_EQ(null_stream().Query(), CUDA_ERROR_NOT_READY);
  ASSERT_EQ(ctx_->Synchronize(), CUDA_SUCCESS);
  EXPECT_EQ(trace.labels().size(), 2u);
}

TEST_F(StreamTest, BlockingStreamsDoNotWaitForEachOther) {
  Trace trace;
  auto a = NewStream(CU_STREAM_DEFAULT);
  auto b = NewStream(CU_STREAM_DEFAULT);
  a->Enqueue(TracedOp(Engine::kCopyH2D, 0.2, &trace, "a"));
  b->Enqueue(TracedOp(Engine::kCompute, 0, &trace, "b"));
  ASSERT_EQ(b->Synchronize(), CUDA_SUCCESS);
  EXPECT_EQ(a->Query(), CUDA_ERROR_NOT_READY);
  ASSERT_EQ(ctx_->Synchronize(), CUDA_SUCCESS);
}

TEST_F(StreamTest, InvalidStreamFlagsAreRejected) {
  std::shared_ptr<Stream> s;
  EXPECT_EQ(ctx_->CreateStream(0x8, &s), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(s, nullptr);
  EXPECT_EQ(ctx_->CreateStream(CU_STREAM_DEFAULT, nullptr), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(ctx_->CreateStream(CU_STREAM_NON_BLOCKING, &s), CUDA_SUCCESS);
  EXPECT_TRUE(s->non_blocking());
  EXPECT_EQ(s->flags(), static_cast<unsigned>(CU_STREAM_NON_BLOCKING));
  EXPECT_TRUE(null_stream().is_null());
}

TEST_F(StreamTest, DestroyingAStreamLetsItsWorkFinish) {
  std::atomic<bool> ran{false};
  auto stream = NewStream();
  Op op;
  op.engine = Engine::kCopyH2D;
  op.cost_seconds = 0.1;
  op.work = [&] {
    ran = true;
    return CUDA_SUCCESS;
  };
  stream->Enqueue(std::move(op));
  Trace trace;
  stream->Enqueue(TracedOp(Engine::kCompute, 0, &trace, "after"));
  const auto start = Clock::now();
  stream.reset();
  EXPECT_LT(MsSince(start), 50.0);  // destroying does not wait
  // The NULL stream still orders after the destroyed stream's pending work.
  null_stream().Enqueue(TracedOp(Engine::kCompute, 0, &trace, "null"));
  ASSERT_EQ(ctx_->Synchronize(), CUDA_SUCCESS);
  EXPECT_TRUE(ran.load());
  EXPECT_EQ(trace.labels(), (Labels{"after", "null"}));
}

TEST_F(StreamTest, DestroyingTheContextWaitsForItsWork) {
  std::atomic<bool> ran{false};
  auto stream = NewStream();
  Op op;
  op.engine = Engine::kCopyD2H;
  op.cost_seconds = 0.1;
  op.work = [&] {
    ran = true;
    return CUDA_SUCCESS;
  };
  stream->Enqueue(std::move(op));
  const auto start = Clock::now();
  ctx_.reset();
  EXPECT_GE(MsSince(start), 50.0);
  EXPECT_TRUE(ran.load());
  EXPECT_EQ(stream->Query(), CUDA_SUCCESS);  // the handle outlives the context safely
}

TEST_F(StreamTest, ThousandSmallOpsCompleteQuickly) {
  auto a = NewStream();
  auto b = NewStream(CU_STREAM_NON_BLOCKING);
  auto event = NewEvent(CU_EVENT_DISABLE_TIMING);
  std::atomic<int> count{0};
  const auto start = Clock::now();
  for (int i = 0; i < 1000; ++i) {
    Op op;
    op.engine = static_cast<Engine>(i % kEngineCount);
    op.work = [&count] {
      count.fetch_add(1, std::memory_order_relaxed);
      return CUDA_SUCCESS;
    };
    Stream& target = i % 3 == 0 ? null_stream() : (i % 3 == 1 ? *a : *b);
    target.Enqueue(std::move(op));
    if (i % 10 == 0) {
      ASSERT_EQ(event->Record(target), CUDA_SUCCESS);
      ASSERT_EQ((i % 3 == 1 ? *b : *a).WaitEvent(*event), CUDA_SUCCESS);
    }
  }
  const double enqueue_us = MsSince(start) * 1e3 / 1000;
  ASSERT_EQ(ctx_->Synchronize(), CUDA_SUCCESS);
  EXPECT_EQ(count.load(), 1000);
  // A few microseconds per enqueue on an idle host; the bound leaves room for a loaded one and
  // for sanitizer builds.
  EXPECT_LT(enqueue_us, 200.0);
  EXPECT_LT(MsSince(start), 5000.0);
}

TEST_F(StreamTest, ConcurrentEnqueuersKeepPerStreamOrder) {
  auto stream = NewStream();
  std::mutex mu;
  std::vector<int> order;
  std::vector<std::thread> threads;
  std::vector<std::vector<uint64_t>> seqs(4);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 100; ++i) {
        Op op;
        op.engine = Engine::kCompute;
        op.work = [&, t, i] {
          std::lock_guard lock(mu);
          order.push_back(t * 1000 + i);
          return CUDA_SUCCESS;
        };
        seqs[t].push_back(stream->Enqueue(std::move(op)));
      }
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_EQ(stream->Synchronize(), CUDA_SUCCESS);
  ASSERT_EQ(order.size(), 400u);
  // Ops ran in sequence-number order, and each thread's ops in its own order.
  std::vector<int> last(4, -1);
  for (int v : order) {
    EXPECT_GT(v % 1000, last[v / 1000]);
    last[v / 1000] = v % 1000;
  }
  for (const auto& s : seqs) {
    for (size_t i = 1; i < s.size(); ++i) EXPECT_GT(s[i], s[i - 1]);
  }
}

}  // namespace
}  // namespace phos::sim::testing
