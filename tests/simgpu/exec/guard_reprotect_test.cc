// A protection change over a guarded range (cuMemSetAccess on a buffer its restore has just
// loaded: a shared read-only buffer going from guarded to read-only, docs/design.md D14) must
// leave no moment where the range is still inaccessible but no longer guarded. An access faulting
// at such a moment is not taken for a guard fault, so it fails the op with an illegal address
// although the access is allowed a moment later.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <thread>

#include "exec/access_guard.h"
#include "exec/fault_guard.h"
#include "memory/device_memory.h"
#include "memory/guard_table.h"

namespace phos::sim {
namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kG = DeviceMemory::kGranularity;
constexpr int kWeight = 1234;

// An access, on a thread of its own as an engine's would be, made while the protection of the
// range it touches changes (from the hook the change calls before applying the new protection).
struct RacingAccess {
  uintptr_t address = 0;
  bool write = false;
  std::atomic<uint64_t> guard_faults{0};  // counted by the guard service when it takes the fault up
  GuardSite site{0, "compute", &guard_faults};
  std::atomic<int> hook_calls{0};
  std::atomic<bool> done{false};
  FaultReport report;
  int value = 0;
  std::thread thread;
};

void AccessDuringReprotect(void* user, uintptr_t /*start*/, uint64_t /*bytes*/) {
  auto* access = static_cast<RacingAccess*>(user);
  if (access->hook_calls.fetch_add(1) > 0) return;
  access->thread = std::thread([access] {
    AltSignalStack stack;
    access->report = FaultGuard::Run(
        [access] {
          auto* word = reinterpret_cast<volatile int*>(access->address);
          if (access->write) {
            *word = 1;
          } else {
            access->value = *word;
          }
        },
        &access->site);
    access->done.store(true);
  });
  // Until the access has ended, or its fault is with the guard service (which cannot settle it
  // before the change completed): either way the access faulted while the change was under way.
  while (!access->done.load() && access->guard_faults.load() == 0) std::this_thread::yield();
}

class GuardReprotectTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DeviceMemoryOptions options;
    options.device_capacity = {64 * kMiB};
    ASSERT_EQ(DeviceMemory::Create(options, &mem_), CUDA_SUCCESS);
    ASSERT_EQ(mem_->ReserveAddress(kG, 0, 0, &range_), CUDA_SUCCESS);
    CUmemGenericAllocationHandle handle = 0;
    ASSERT_EQ(mem_->CreatePhysical(0, kG, &handle), CUDA_SUCCESS);
    ASSERT_EQ(mem_->Map(range_, kG, 0, handle), CUDA_SUCCESS);
    ASSERT_EQ(mem_->SetAccess(range_, kG, Access::kReadWrite), CUDA_SUCCESS);
    // The second page, as in the restore that lost its instance: the loader loaded it, then guarded.
    access_.address = range_ + GuardTable::PageSize();
    *reinterpret_cast<volatile int*>(access_.address) = kWeight;
    ASSERT_EQ(GuardTable::Global().Guard(range_, kG), CUDA_SUCCESS);
    // A handler that loads nothing: an access that succeeds owes it to the new protection alone.
    AccessGuard::SetHandler([](uintptr_t, const char*) { return GuardDecision::kFail; });
    GuardTable::Global().SetReprotectHookForTesting(AccessDuringReprotect, &access_);
  }
  void TearDown() override {
    GuardTable::Global().SetReprotectHookForTesting(nullptr, nullptr);
    if (access_.thread.joinable()) access_.thread.join();
    AccessGuard::SetHandler({});
    GuardTable::Global().Forget(range_, kG);
  }

  std::unique_ptr<DeviceMemory> mem_;
  CUdeviceptr range_ = 0;
  RacingAccess access_;
};

TEST_F(GuardReprotectTest, AReadRacingTheChangeToReadOnlyRunsOnceTheChangeIsDone) {
  ASSERT_EQ(mem_->SetAccess(range_, kG, Access::kRead), CUDA_SUCCESS);
  access_.thread.join();
  EXPECT_EQ(access_.hook_calls.load(), 1);
  EXPECT_FALSE(access_.report.faulted) << "illegal address at " << std::hex << access_.report.address;
  EXPECT_EQ(access_.value, kWeight);
  EXPECT_FALSE(GuardTable::Global().Contains(access_.address));
}

TEST_F(GuardReprotectTest, AWriteRacingTheChangeToReadOnlyStillFaults) {
  // The guard is replaced by read-only, never by read-write: a missed write is caught.
  access_.write = true;
  ASSERT_EQ(mem_->SetAccess(range_, kG, Access::kRead), CUDA_SUCCESS);
  access_.thread.join();
  EXPECT_EQ(access_.hook_calls.load(), 1);
  EXPECT_TRUE(access_.report.faulted);
  EXPECT_EQ(access_.report.address, access_.address);
  EXPECT_EQ(*reinterpret_cast<volatile int*>(access_.address), kWeight);
}

TEST_F(GuardReprotectTest, AnAccessRacingTheChangeToReadWriteRuns) {
  access_.write = true;
  ASSERT_EQ(mem_->SetAccess(range_, kG, Access::kReadWrite), CUDA_SUCCESS);
  access_.thread.join();
  EXPECT_FALSE(access_.report.faulted) << "illegal address at " << std::hex << access_.report.address;
  EXPECT_EQ(*reinterpret_cast<volatile int*>(access_.address), 1);
}

}  // namespace
}  // namespace phos::sim
