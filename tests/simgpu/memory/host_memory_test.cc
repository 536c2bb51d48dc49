#include "memory/host_memory.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

namespace phos::sim {
namespace {

TEST(HostMemoryTest, AllocateIsPinnedUntilFreed) {
  HostMemory host;
  void* p = nullptr;
  ASSERT_EQ(host.Allocate(10000, CU_MEMHOSTALLOC_PORTABLE, &p), CUDA_SUCCESS);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(sysconf(_SC_PAGESIZE)), 0u);
  std::memset(p, 0x42, 10000);
  auto* bytes = static_cast<char*>(p);
  EXPECT_TRUE(host.IsPinned(p, 10000));
  EXPECT_TRUE(host.IsPinned(bytes + 9999, 1));
  EXPECT_TRUE(host.IsPinned(bytes + 5000, 0));
  EXPECT_FALSE(host.IsPinned(p, 10001));
  EXPECT_FALSE(host.IsPinned(bytes - 1, 2));
  PinnedRange range;
  ASSERT_TRUE(host.Find(bytes + 123, &range));
  EXPECT_EQ(range.base, p);
  EXPECT_EQ(range.size, 10000u);
  EXPECT_EQ(range.flags, static_cast<unsigned>(CU_MEMHOSTALLOC_PORTABLE));
  EXPECT_TRUE(range.allocated);
  EXPECT_EQ(host.Free(bytes + 8), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(host.Free(p), CUDA_SUCCESS);
  EXPECT_FALSE(host.IsPinned(p, 1));
  EXPECT_FALSE(host.Find(p, &range));
  EXPECT_EQ(host.Free(p), CUDA_ERROR_INVALID_VALUE);
}

TEST(HostMemoryTest, AllocateRejectsBadArguments) {
  HostMemory host;
  void* p = nullptr;
  EXPECT_EQ(host.Allocate(0, 0, &p), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(host.Allocate(16, 0, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(host.Allocate(~0ull, 0, &p), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(host.Free(nullptr), CUDA_ERROR_INVALID_VALUE);
  int local = 0;
  EXPECT_EQ(host.Free(&local), CUDA_ERROR_INVALID_VALUE);
}

TEST(HostMemoryTest, RegisterRefusesOverlapAndUnregisterNeedsTheBase) {
  HostMemory host;
  std::vector<char> buffer(1 << 16);
  char* b = buffer.data();
  ASSERT_EQ(host.Register(b + 1000, 2000, CU_MEMHOSTREGISTER_PORTABLE), CUDA_SUCCESS);
  EXPECT_TRUE(host.IsPinned(b + 1000, 2000));
  EXPECT_FALSE(host.IsPinned(b + 999, 2));
  EXPECT_EQ(host.Register(b + 1000, 2000, 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
  EXPECT_EQ(host.Register(b + 1500, 10, 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);   // inside
  EXPECT_EQ(host.Register(b + 500, 501, 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);   // over start
  EXPECT_EQ(host.Register(b + 2999, 100, 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);  // over end
  EXPECT_EQ(host.Register(b, 1 << 16, 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);     // around
  ASSERT_EQ(host.Register(b + 3000, 1000, 0), CUDA_SUCCESS);  // adjacent ranges are separate
  ASSERT_EQ(host.Register(b, 1000, 0), CUDA_SUCCESS);
  // A range spanning two registrations is not inside one pinned range.
  EXPECT_FALSE(host.IsPinned(b + 2500, 1000));
  EXPECT_EQ(host.Register(nullptr, 10, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(host.Register(b + 5000, 0, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(host.Register(b + 5000, ~0ull, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(host.Unregister(b + 1001), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
  EXPECT_EQ(host.Unregister(b + 9000), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
  EXPECT_EQ(host.Unregister(nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(host.Free(b + 1000), CUDA_ERROR_INVALID_VALUE);  // registered, not allocated
  PinnedRange range;
  ASSERT_TRUE(host.Find(b + 1999, &range));
  EXPECT_FALSE(range.allocated);
  EXPECT_EQ(range.flags, static_cast<unsigned>(CU_MEMHOSTREGISTER_PORTABLE));
  EXPECT_EQ(host.Unregister(b + 1000), CUDA_SUCCESS);
  EXPECT_FALSE(host.IsPinned(b + 1000, 1));
  EXPECT_EQ(host.Unregister(b + 1000), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
  EXPECT_EQ(host.Register(b + 1000, 2000, 0), CUDA_SUCCESS);
}

TEST(HostMemoryTest, AllocatedAndRegisteredRangesExcludeEachOther) {
  HostMemory host;
  void* p = nullptr;
  ASSERT_EQ(host.Allocate(8192, 0, &p), CUDA_SUCCESS);
  EXPECT_EQ(host.Register(static_cast<char*>(p) + 4096, 100, 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
  EXPECT_EQ(host.Unregister(p), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
  EXPECT_TRUE(host.IsPinned(p, 8192));
}

TEST(HostMemoryTest, ConcurrentRegisterAndQuery) {
  HostMemory host;
  constexpr int kSlots = 64;
  constexpr int kRounds = 2000;
  std::vector<char> buffer(2 * kSlots * 256);
  std::atomic<bool> failed{false};
  auto worker = [&](int half) {
    char* base = buffer.data() + half * kSlots * 256;
    for (int round = 0; round < kRounds; ++round) {
      char* slot = base + (round % kSlots) * 256;
      if (host.Register(slot, 256, 0) != CUDA_SUCCESS || !host.IsPinned(slot, 256) ||
          host.Unregister(slot) != CUDA_SUCCESS || host.IsPinned(slot, 1)) {
        failed = true;
        return;
      }
    }
  };
  std::thread a(worker, 0);
  std::thread b(worker, 1);
  a.join();
  b.join();
  EXPECT_FALSE(failed);
  EXPECT_FALSE(host.IsPinned(buffer.data(), 1));
}

}  // namespace
}  // namespace phos::sim
