#include "exec/fault_guard.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <stdexcept>
#include <thread>

#include "exec/executor.h"
#include "exec/model_clock.h"

namespace phos::sim {
namespace {

// A page no access is allowed to: PROT_NONE, as phos guards buffers not yet restored.
class GuardedPage {
 public:
  GuardedPage() {
    size_ = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    memory_ = mmap(nullptr, size_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  }
  ~GuardedPage() { munmap(memory_, size_); }
  volatile int* at(size_t offset) {
    return reinterpret_cast<volatile int*>(static_cast<char*>(memory_) + offset);
  }
  uintptr_t address(size_t offset) const { return reinterpret_cast<uintptr_t>(memory_) + offset; }

 private:
  void* memory_;
  size_t size_;
};

TEST(FaultGuardTest, ReportsNoFaultAndRunsTheCallable) {
  int value = 0;
  FaultReport report = FaultGuard::Run([&] { value = 42; });
  EXPECT_FALSE(report.faulted);
  EXPECT_EQ(value, 42);
}

TEST(FaultGuardTest, CatchesWriteToProtectedMemoryWithItsAddress) {
  GuardedPage page;
  FaultReport report = FaultGuard::Run([&] { *page.at(64) = 1; });
  EXPECT_TRUE(report.faulted);
  EXPECT_EQ(report.signal, SIGSEGV);
  EXPECT_EQ(report.address, page.address(64));
}

TEST(FaultGuardTest, CatchesRepeatedFaultsOnOneThread) {
  // The signal mask is restored on each jump back; a second fault must be caught too.
  GuardedPage page;
  for (int i = 0; i < 3; ++i) {
    FaultReport report = FaultGuard::Run([&] { (void)*page.at(0); });
    EXPECT_TRUE(report.faulted) << "attempt " << i;
  }
}

TEST(FaultGuardTest, NestedGuardsReportToTheInnermost) {
  GuardedPage page;
  FaultReport inner;
  bool after_inner = false;
  FaultReport outer = FaultGuard::Run([&] {
    inner = FaultGuard::Run([&] { *page.at(8) = 1; });
    after_inner = true;
  });
  EXPECT_TRUE(inner.faulted);
  EXPECT_EQ(inner.address, page.address(8));
  EXPECT_TRUE(after_inner);
  EXPECT_FALSE(outer.faulted);
}

TEST(FaultGuardTest, ExceptionsPassThroughAndLeaveTheGuardUsable) {
  EXPECT_THROW(FaultGuard::Run([] { throw std::runtime_error("kernel bug"); }), std::runtime_error);
  GuardedPage page;
  EXPECT_TRUE(FaultGuard::Run([&] { *page.at(0) = 1; }).faulted);
}

TEST(FaultGuardTest, CatchesFaultsOnOtherThreads) {
  GuardedPage page;
  FaultReport report;
  std::thread t([&] {
    AltSignalStack stack;
    EXPECT_TRUE(stack.installed());
    report = FaultGuard::Run([&] { *page.at(4) = 1; });
  });
  t.join();
  EXPECT_TRUE(report.faulted);
  EXPECT_EQ(report.address, page.address(4));
}

TEST(FaultGuardDeathTest, UnguardedFaultOnMainThreadStillCrashes) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ModelClock clock(1);
  Executor executor(0, clock, ExecutorOptions{2});  // installs the handler
  GuardedPage page;
  EXPECT_DEATH(*page.at(0) = 1, "");
}

TEST(FaultGuardDeathTest, UnguardedFaultOnAnotherThreadStillCrashes) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ModelClock clock(1);
  Executor executor(0, clock, ExecutorOptions{2});
  GuardedPage page;
  EXPECT_DEATH(
      {
        std::thread t([&] { *page.at(0) = 1; });
        t.join();
      },
      "");
}

TEST(FaultGuardDeathTest, SignalSentByKillIsNotSwallowedInsideAGuard) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // Only faults raised by an access are caught; a SIGSEGV sent to the process keeps its meaning.
  EXPECT_DEATH(FaultGuard::Run([] { raise(SIGSEGV); }), "");
}

}  // namespace
}  // namespace phos::sim
