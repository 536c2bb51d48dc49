// A failing kernel: the fault is contained, the context enters its sticky error state, its pending
// and later work is dropped, and waits return instead of hanging.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "exec_test_util.h"

namespace phos::sim::testing {
namespace {

class StickyErrorTest : public ExecTest {
 protected:
  StickyErrorTest() {
    page_size_ = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    guarded_ = mmap(nullptr, page_size_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  }
  ~StickyErrorTest() override { munmap(guarded_, page_size_); }

  // A kernel whose every block writes into the PROT_NONE page, as a kernel handed a pointer to a
  // buffer that is not resident would.
  Op FaultingKernel() {
    Op op;
    op.engine = Engine::kCompute;
    op.blocks = 8;
    volatile int* target = static_cast<volatile int*>(guarded_);
    op.run_blocks = [target](uint64_t first, uint64_t) {
      target[first] = 1;
      return CUDA_SUCCESS;
    };
    return op;
  }

  Op Flag(Engine engine, std::atomic<bool>* ran, double cost_s = 0) {
    Op op;
    op.engine = engine;
    op.cost_seconds = cost_s;
    op.work = [ran] {
      *ran = true;
      return CUDA_SUCCESS;
    };
    return op;
  }

  size_t page_size_ = 0;
  void* guarded_ = nullptr;
};

TEST_F(StickyErrorTest, FaultingKernelFailsTheContextWithoutCrashing) {
  auto stream = NewStream();
  std::atomic<bool> before{false}, behind{false}, later{false};
  stream->Enqueue(Flag(Engine::kCopyH2D, &before));
  stream->Enqueue(FaultingKernel());
  stream->Enqueue(Flag(Engine::kCopyD2H, &behind));
  EXPECT_EQ(stream->Synchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(ctx_->sticky_error(), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(stream->Query(), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(ctx_->Synchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);

  stream->Enqueue(Flag(Engine::kCompute, &later));
  EXPECT_EQ(stream->Synchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_TRUE(before.load());
  EXPECT_FALSE(behind.load());
  EXPECT_FALSE(later.load());

  const ExecutorStats stats = executor_->stats();
  EXPECT_EQ(stats.kernel_faults, 1u);
  EXPECT_EQ(stats.kernels_run, 1u);
  EXPECT_EQ(stats.engine(Engine::kCopyD2H).dropped_ops, 1u);
  EXPECT_EQ(stats.engine(Engine::kCompute).dropped_ops, 1u);
}

TEST_F(StickyErrorTest, PendingWorkOfOtherStreamsIsDroppedAndWaitsReturn) {
  auto faulting = NewStream(CU_STREAM_NON_BLOCKING);
  auto other = NewStream(CU_STREAM_NON_BLOCKING);
  auto gate = NewEvent();
  std::atomic<bool> gated{false};
  // `other` waits for a slow copy, by when the kernel has failed the context.
  other->Enqueue(Flag(Engine::kCopyH2D, &gated, 0.1));
  ASSERT_EQ(gate->Record(*other), CUDA_SUCCESS);
  std::atomic<bool> after_gate{false};
  other->Enqueue(Flag(Engine::kCompute, &after_gate));
  faulting->Enqueue(FaultingKernel());
  EXPECT_EQ(ctx_->Synchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_FALSE(after_gate.load());
  EXPECT_EQ(gate->Query(), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(gate->Synchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  float ms = 0;
  auto start = NewEvent();
  ASSERT_EQ(start->Record(*other), CUDA_SUCCESS);
  EXPECT_EQ(Event::ElapsedTime(*start, *gate, &ms), CUDA_ERROR_ILLEGAL_ADDRESS);
}

TEST_F(StickyErrorTest, FailingWorkResultIsSticky) {
  Op op;
  op.engine = Engine::kCopyD2H;
  op.work = [] { return CUDA_ERROR_LAUNCH_FAILED; };
  null_stream().Enqueue(std::move(op));
  EXPECT_EQ(null_stream().Synchronize(), CUDA_ERROR_LAUNCH_FAILED);
  // The first error wins.
  null_stream().Enqueue(FaultingKernel());
  EXPECT_EQ(ctx_->Synchronize(), CUDA_ERROR_LAUNCH_FAILED);
}

TEST_F(StickyErrorTest, ThrowingWorkFailsTheOpInsteadOfTheProcess) {
  Op op;
  op.engine = Engine::kCompute;
  op.blocks = 2;
  op.run_blocks = [](uint64_t, uint64_t) -> CUresult { throw std::runtime_error("kernel bug"); };
  null_stream().Enqueue(std::move(op));
  EXPECT_EQ(null_stream().Synchronize(), CUDA_ERROR_UNKNOWN);
}

TEST_F(StickyErrorTest, OtherContextsAreUnaffected) {
  std::unique_ptr<ExecContext> healthy = executor_->CreateContext();
  null_stream().Enqueue(FaultingKernel());
  ASSERT_EQ(ctx_->Synchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  std::atomic<bool> ran{false};
  healthy->null_stream()->Enqueue(Flag(Engine::kCompute, &ran));
  EXPECT_EQ(healthy->Synchronize(), CUDA_SUCCESS);
  EXPECT_TRUE(ran.load());
  EXPECT_EQ(healthy->sticky_error(), CUDA_SUCCESS);
}

TEST_F(StickyErrorTest, FaultingCopyFailsLikeAKernel) {
  Op op;
  op.engine = Engine::kCopyH2D;
  op.work = [this] {
    static_cast<volatile char*>(guarded_)[0] = 1;
    return CUDA_SUCCESS;
  };
  null_stream().Enqueue(std::move(op));
  EXPECT_EQ(null_stream().Synchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
}

TEST_F(StickyErrorTest, KernelFaultsManyTimesWithoutCrashing) {
  for (int i = 0; i < 5; ++i) {
    std::unique_ptr<ExecContext> ctx = executor_->CreateContext();
    ctx->null_stream()->Enqueue(FaultingKernel());
    EXPECT_EQ(ctx->Synchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  }
  EXPECT_EQ(executor_->stats().kernel_faults, 5u);
}

// A device with a watchdog (PHOS_SIMGPU_KERNEL_TIMEOUT) on a clock the test keeps: each block
// advances it by its modelled time. A kernel that runs past the timeout stops with
// CUDA_ERROR_LAUNCH_TIMEOUT, sticky; one within it runs every block once, whatever the slices.
template <int kTimeoutMs>
class WatchdogTest : public ExecTest {
 protected:
  WatchdogTest()
      : ExecTest(/*time_scale=*/1.0, /*workers=*/2, kTimeoutMs / 1000.0, [this] { return now_ns_.load(); }) {}

  // A kernel of `blocks` blocks that counts, per block, the times it ran, each block taking
  // `block_time` of the watchdog's clock.
  Op CountingKernel(std::vector<std::atomic<int>>* runs, std::chrono::microseconds block_time) {
    Op op;
    op.engine = Engine::kCompute;
    op.blocks = runs->size();
    op.run_blocks = [this, runs, block_time](uint64_t first, uint64_t end) {
      for (uint64_t b = first; b < end; ++b) {
        now_ns_.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(block_time).count());
        (*runs)[b].fetch_add(1);
      }
      return CUDA_SUCCESS;
    };
    return op;
  }

  std::atomic<int64_t> now_ns_{0};
};

using ShortWatchdogTest = WatchdogTest<20>;
using LongWatchdogTest = WatchdogTest<600'000>;

TEST_F(ShortWatchdogTest, AKernelPastTheWatchdogStopsWithALaunchTimeout) {
  // 100,000 blocks of a millisecond each: 50 s on two workers, against a 20 ms watchdog.
  std::vector<std::atomic<int>> runs(100'000);
  null_stream().Enqueue(CountingKernel(&runs, std::chrono::milliseconds(1)));
  EXPECT_EQ(null_stream().Synchronize(), CUDA_ERROR_LAUNCH_TIMEOUT);
  EXPECT_EQ(ctx_->sticky_error(), CUDA_ERROR_LAUNCH_TIMEOUT);
  size_t ran = 0;
  for (const std::atomic<int>& r : runs) ran += static_cast<size_t>(r.load());
  EXPECT_LT(ran, runs.size());
  std::atomic<bool> later{false};
  Op after;
  after.engine = Engine::kCompute;
  after.work = [&later] {
    later = true;
    return CUDA_SUCCESS;
  };
  null_stream().Enqueue(std::move(after));
  EXPECT_EQ(null_stream().Synchronize(), CUDA_ERROR_LAUNCH_TIMEOUT);
  EXPECT_FALSE(later.load());
}

TEST_F(LongWatchdogTest, AKernelWithinTheWatchdogRunsEveryBlockOnce) {
  std::vector<std::atomic<int>> runs(100'003);
  Op op = CountingKernel(&runs, std::chrono::microseconds(0));
  // The slices: each worker's range starts with one block, then grows.
  std::atomic<int> calls{0}, single_blocks{0};
  op.run_blocks = [run = std::move(op.run_blocks), &calls, &single_blocks](uint64_t first, uint64_t end) {
    calls.fetch_add(1);
    if (end - first == 1) single_blocks.fetch_add(1);
    return run(first, end);
  };
  null_stream().Enqueue(std::move(op));
  EXPECT_EQ(null_stream().Synchronize(), CUDA_SUCCESS);
  for (size_t b = 0; b < runs.size(); ++b) ASSERT_EQ(runs[b].load(), 1) << "block " << b;
  EXPECT_EQ(executor_->stats().kernels_run, 1u);
  EXPECT_GE(single_blocks.load(), 2);  // the first slice of each of the two workers' ranges
  EXPECT_GT(calls.load(), 2 * 2);
}

TEST_F(LongWatchdogTest, ABlockRangeStopsOnceAnotherOfItsKernelsRangesFailed) {
  // Two workers, 100,000 blocks of a modelled second: block 0 fails at once, and the other
  // worker's range, whose blocks start only once block 0 has failed, stops at its next look between
  // slices; at the latest, the 600 s watchdog stops it 600 blocks in. Either way, deterministically,
  // far short of its 50,000 blocks, and the kernel's error is the first one.
  std::vector<std::atomic<int>> runs(100'000);
  Op op = CountingKernel(&runs, std::chrono::seconds(1));
  auto failed = std::make_shared<std::atomic<bool>>(false);
  op.run_blocks = [run = std::move(op.run_blocks), failed](uint64_t first, uint64_t end) {
    if (first == 0) {
      failed->store(true);
      return CUDA_ERROR_LAUNCH_FAILED;
    }
    while (!failed->load()) std::this_thread::yield();
    return run(first, end);
  };
  null_stream().Enqueue(std::move(op));
  EXPECT_EQ(null_stream().Synchronize(), CUDA_ERROR_LAUNCH_FAILED);
  size_t ran = 0;
  for (const std::atomic<int>& r : runs) ran += static_cast<size_t>(r.load());
  EXPECT_LT(ran, runs.size() / 2);
}

using StickyErrorDeathTest = StickyErrorTest;

// Host functions are application code on the host: a fault there is a real crash.
TEST_F(StickyErrorDeathTest, FaultInAHostFunctionIsNotSwallowed) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        Op op;
        op.engine = Engine::kHost;
        op.work = [this] {
          static_cast<volatile char*>(guarded_)[0] = 1;
          return CUDA_SUCCESS;
        };
        null_stream().Enqueue(std::move(op));
        (void)null_stream().Synchronize();
      },
      "");
}

}  // namespace
}  // namespace phos::sim::testing
