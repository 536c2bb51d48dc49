// Address space creation, linear allocations, capacity, pointer queries.
#include "memory/device_memory.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

namespace phos::sim {
namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kGiB = 1ull << 30;

uint64_t ResidentBytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  unsigned long long size = 0;
  unsigned long long resident = 0;
  if (f == nullptr) return 0;
  if (std::fscanf(f, "%llu %llu", &size, &resident) != 2) resident = 0;
  std::fclose(f);
  return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

uint64_t ResidentPagesIn(CUdeviceptr addr, uint64_t len) {
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> vec((len + page - 1) / page);
  if (mincore(reinterpret_cast<void*>(addr), len, vec.data()) != 0) return ~0ull;
  uint64_t n = 0;
  for (unsigned char v : vec) n += v & 1;
  return n;
}

class DeviceMemoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DeviceMemoryOptions options;
    options.device_capacity = {80 * kGiB, 64 * kMiB};
    ASSERT_EQ(DeviceMemory::Create(options, &mem_), CUDA_SUCCESS);
  }
  std::unique_ptr<DeviceMemory> mem_;
};

TEST(DeviceMemoryCreateTest, RejectsBadOptions) {
  std::unique_ptr<DeviceMemory> mem;
  DeviceMemoryOptions options;
  options.va_size = 0;
  EXPECT_EQ(DeviceMemory::Create(options, &mem), CUDA_ERROR_INVALID_VALUE);
  options.va_size = 3 * kMiB;
  EXPECT_EQ(DeviceMemory::Create(options, &mem), CUDA_ERROR_INVALID_VALUE);
  options.va_size = 64 * kMiB;
  options.preferred_base = 0x200000001000ull;
  EXPECT_EQ(DeviceMemory::Create(options, &mem), CUDA_ERROR_INVALID_VALUE);
  options.preferred_base = 0;
  EXPECT_EQ(DeviceMemory::Create(options, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(mem, nullptr);
}

TEST(DeviceMemoryCreateTest, HonoursAFreePreferredBase) {
  if (!DeviceMemory::kHonoursPreferredBase) GTEST_SKIP() << "preferred base not tried under ThreadSanitizer";
  // Find an address that is certainly free by reserving and releasing it.
  const uint64_t len = 64 * kMiB;
  void* probe =
      mmap(nullptr, len + DeviceMemory::kGranularity, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(probe, MAP_FAILED);
  munmap(probe, len + DeviceMemory::kGranularity);
  const uint64_t want = (reinterpret_cast<uint64_t>(probe) + DeviceMemory::kGranularity - 1) &
                        ~(DeviceMemory::kGranularity - 1);
  DeviceMemoryOptions options;
  options.va_size = len;
  options.preferred_base = want;
  std::unique_ptr<DeviceMemory> mem;
  ASSERT_EQ(DeviceMemory::Create(options, &mem), CUDA_SUCCESS);
  EXPECT_EQ(mem->base(), want);
  EXPECT_EQ(mem->size(), len);
}

TEST(DeviceMemoryCreateTest, FallsBackWhenThePreferredBaseIsTaken) {
  DeviceMemoryOptions options;
  options.device_capacity = {kGiB};
  options.va_size = 64 * kMiB;
  std::unique_ptr<DeviceMemory> first;
  std::unique_ptr<DeviceMemory> second;
  ASSERT_EQ(DeviceMemory::Create(options, &first), CUDA_SUCCESS);
  ASSERT_EQ(DeviceMemory::Create(options, &second), CUDA_SUCCESS);
  EXPECT_NE(first->base(), second->base());
  EXPECT_EQ(second->base() % DeviceMemory::kGranularity, 0u);
  const bool disjoint =
      second->base() + second->size() <= first->base() || first->base() + first->size() <= second->base();
  EXPECT_TRUE(disjoint);
  CUdeviceptr p = 0;
  ASSERT_EQ(second->Allocate(0, 1, 4 * kMiB, &p), CUDA_SUCCESS);
  EXPECT_GE(p, second->base());
  EXPECT_LT(p, second->base() + second->size());
  std::memset(reinterpret_cast<void*>(p), 0x5a, 4 * kMiB);
}

TEST_F(DeviceMemoryTest, AllocateWriteFreeAndReuse) {
  CUdeviceptr p = 0;
  ASSERT_EQ(mem_->Allocate(0, 1, kMiB, &p), CUDA_SUCCESS);
  EXPECT_GE(p, mem_->base());
  EXPECT_LT(p, mem_->base() + mem_->size());
  auto* bytes = reinterpret_cast<unsigned char*>(p);
  std::memset(bytes, 0xab, kMiB);
  EXPECT_EQ(bytes[kMiB - 1], 0xab);
  EXPECT_EQ(mem_->Free(p), CUDA_SUCCESS);
  CUdeviceptr q = 0;
  ASSERT_EQ(mem_->Allocate(0, 1, kMiB, &q), CUDA_SUCCESS);
  EXPECT_EQ(q, p);  // the freed range is reused
  // Fresh memory after reuse: the old content went with the old pages.
  EXPECT_EQ(reinterpret_cast<unsigned char*>(q)[0], 0);
  EXPECT_EQ(mem_->Free(q), CUDA_SUCCESS);
  EXPECT_EQ(mem_->UsedBytes(0), 0u);
}

TEST_F(DeviceMemoryTest, AlignmentAndChargeFollowTheSize) {
  CUdeviceptr small = 0;
  CUdeviceptr large = 0;
  ASSERT_EQ(mem_->Allocate(0, 1, 100, &small), CUDA_SUCCESS);
  EXPECT_EQ(small % DeviceMemory::kSmallAlignment, 0u);
  EXPECT_EQ(mem_->UsedBytes(0), DeviceMemory::kSmallAlignment);
  ASSERT_EQ(mem_->Allocate(0, 1, 3 * kMiB, &large), CUDA_SUCCESS);
  EXPECT_EQ(large % DeviceMemory::kGranularity, 0u);
  EXPECT_EQ(mem_->UsedBytes(0), DeviceMemory::kSmallAlignment + 4 * kMiB);
  CUdeviceptr exact = 0;
  ASSERT_EQ(mem_->Allocate(0, 1, 2 * kMiB, &exact), CUDA_SUCCESS);
  EXPECT_EQ(exact % DeviceMemory::kGranularity, 0u);
  EXPECT_EQ(mem_->UsedBytes(0), DeviceMemory::kSmallAlignment + 6 * kMiB);
}

TEST_F(DeviceMemoryTest, RejectsBadArguments) {
  CUdeviceptr p = 0;
  EXPECT_EQ(mem_->Allocate(0, 1, 0, &p), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(mem_->Allocate(0, 1, 16, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(mem_->Allocate(2, 1, 16, &p), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(mem_->Allocate(-1, 1, 16, &p), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(mem_->Allocate(0, 1, ~0ull, &p), CUDA_ERROR_OUT_OF_MEMORY);
  uint64_t free = 0;
  uint64_t total = 0;
  EXPECT_EQ(mem_->Info(5, &free, &total), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(mem_->Info(0, nullptr, &total), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(mem_->UsedBytes(7), 0u);
}

TEST_F(DeviceMemoryTest, CapacityExhaustionChangesNothing) {
  CUdeviceptr a = 0;
  ASSERT_EQ(mem_->Allocate(1, 1, 48 * kMiB, &a), CUDA_SUCCESS);
  uint64_t free = 0;
  uint64_t total = 0;
  ASSERT_EQ(mem_->Info(1, &free, &total), CUDA_SUCCESS);
  EXPECT_EQ(total, 64 * kMiB);
  EXPECT_EQ(free, 16 * kMiB);
  CUdeviceptr b = 0xdead;
  EXPECT_EQ(mem_->Allocate(1, 1, 32 * kMiB, &b), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(b, 0xdeadu);
  EXPECT_EQ(mem_->UsedBytes(1), 48 * kMiB);
  // Capacity is per device: device 0 is unaffected.
  EXPECT_EQ(mem_->Allocate(0, 1, 32 * kMiB, &b), CUDA_SUCCESS);
  // The rounded size is what counts: 16 MiB + 1 rounds to 18 MiB.
  EXPECT_EQ(mem_->Allocate(1, 1, 16 * kMiB + 1, &b), CUDA_ERROR_OUT_OF_MEMORY);
  ASSERT_EQ(mem_->Allocate(1, 1, 16 * kMiB, &b), CUDA_SUCCESS);
  ASSERT_EQ(mem_->Info(1, &free, &total), CUDA_SUCCESS);
  EXPECT_EQ(free, 0u);
  EXPECT_EQ(mem_->Allocate(1, 1, 1, &b), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(mem_->Free(a), CUDA_SUCCESS);
  ASSERT_EQ(mem_->Info(1, &free, &total), CUDA_SUCCESS);
  EXPECT_EQ(free, 48 * kMiB);
}

TEST(DeviceMemoryAddressSpaceTest, ExhaustedAddressSpaceIsOutOfMemory) {
  DeviceMemoryOptions options;
  options.device_capacity = {kGiB};
  options.va_size = 16 * kMiB;
  options.preferred_base = 0;
  std::unique_ptr<DeviceMemory> mem;
  ASSERT_EQ(DeviceMemory::Create(options, &mem), CUDA_SUCCESS);
  CUdeviceptr a = 0;
  CUdeviceptr b = 0;
  ASSERT_EQ(mem->Allocate(0, 1, 8 * kMiB, &a), CUDA_SUCCESS);
  ASSERT_EQ(mem->Allocate(0, 1, 8 * kMiB, &b), CUDA_SUCCESS);
  EXPECT_EQ(mem->Allocate(0, 1, 4096, &b), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(mem->UsedBytes(0), 16 * kMiB);
}

TEST_F(DeviceMemoryTest, BadFreesAreInvalidValue) {
  CUdeviceptr p = 0;
  ASSERT_EQ(mem_->Allocate(0, 1, 8192, &p), CUDA_SUCCESS);
  EXPECT_EQ(mem_->Free(p + 16), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(mem_->Free(0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(mem_->Free(mem_->base() + mem_->size() - 4096), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(mem_->Free(p), CUDA_SUCCESS);
  EXPECT_EQ(mem_->Free(p), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(mem_->UsedBytes(0), 0u);
}

TEST_F(DeviceMemoryTest, FreeAllOwnedByFreesOnlyThatOwner) {
  CUdeviceptr mine[3];
  CUdeviceptr theirs = 0;
  ASSERT_EQ(mem_->Allocate(0, 7, 4096, &mine[0]), CUDA_SUCCESS);
  ASSERT_EQ(mem_->Allocate(0, 8, 4 * kMiB, &theirs), CUDA_SUCCESS);
  ASSERT_EQ(mem_->Allocate(0, 7, 4 * kMiB, &mine[1]), CUDA_SUCCESS);
  ASSERT_EQ(mem_->Allocate(1, 7, kMiB, &mine[2]), CUDA_SUCCESS);
  mem_->FreeAllOwnedBy(7);
  for (CUdeviceptr p : mine) {
    EXPECT_FALSE(mem_->CheckRange(p, 1, Access::kNone));
    EXPECT_EQ(mem_->Free(p), CUDA_ERROR_INVALID_VALUE);
  }
  EXPECT_EQ(mem_->UsedBytes(0), 4 * kMiB);
  EXPECT_EQ(mem_->UsedBytes(1), 0u);
  EXPECT_TRUE(mem_->CheckRange(theirs, 4 * kMiB, Access::kReadWrite));
  mem_->FreeAllOwnedBy(7);  // nothing left: a no-op
  EXPECT_EQ(mem_->Free(theirs), CUDA_SUCCESS);
}

TEST_F(DeviceMemoryTest, BackingIsLazy) {
  const uint64_t before = ResidentBytes();
  std::vector<CUdeviceptr> blocks(4);
  for (CUdeviceptr& p : blocks) ASSERT_EQ(mem_->Allocate(0, 1, 16 * kGiB, &p), CUDA_SUCCESS);
  uint64_t free = 0;
  uint64_t total = 0;
  ASSERT_EQ(mem_->Info(0, &free, &total), CUDA_SUCCESS);
  EXPECT_EQ(free, 16 * kGiB);
  // Touch both ends of each block: usable, yet only the touched pages are resident.
  for (CUdeviceptr p : blocks) {
    reinterpret_cast<volatile char*>(p)[0] = 1;
    reinterpret_cast<volatile char*>(p)[16 * kGiB - 1] = 2;
  }
  EXPECT_LT(ResidentBytes() - before, 64 * kMiB);
  for (CUdeviceptr p : blocks) EXPECT_EQ(mem_->Free(p), CUDA_SUCCESS);
}

TEST_F(DeviceMemoryTest, FreeReturnsPagesToTheKernel) {
  const uint64_t len = 128 * kMiB;
  const uint64_t before = ResidentBytes();
  CUdeviceptr p = 0;
  ASSERT_EQ(mem_->Allocate(0, 1, len, &p), CUDA_SUCCESS);
  std::memset(reinterpret_cast<void*>(p), 0x11, len);
  EXPECT_GE(ResidentBytes(), before + len - 8 * kMiB);
  EXPECT_EQ(ResidentPagesIn(p, len), len / static_cast<uint64_t>(sysconf(_SC_PAGESIZE)));
  ASSERT_EQ(mem_->Free(p), CUDA_SUCCESS);
  EXPECT_LT(ResidentBytes(), before + 8 * kMiB);
  EXPECT_EQ(ResidentPagesIn(p, len), 0u);
}

TEST_F(DeviceMemoryTest, CheckRangeOfLinearAllocations) {
  CUdeviceptr p = 0;
  ASSERT_EQ(mem_->Allocate(1, 1, 1000, &p), CUDA_SUCCESS);
  int device = -1;
  EXPECT_TRUE(mem_->CheckRange(p, 1000, Access::kReadWrite, &device));
  EXPECT_EQ(device, 1);
  EXPECT_TRUE(mem_->CheckRange(p + 999, 1, Access::kRead));
  EXPECT_TRUE(mem_->CheckRange(p + 500, 0, Access::kReadWrite));
  EXPECT_FALSE(mem_->CheckRange(p, 1001, Access::kRead));            // past the requested bytes
  EXPECT_FALSE(mem_->CheckRange(p + 1000, 1, Access::kRead));        // in the rounding padding
  EXPECT_FALSE(mem_->CheckRange(p - 1, 2, Access::kRead));           // starts before
  EXPECT_FALSE(mem_->CheckRange(p + 10, ~0ull - 5, Access::kRead));  // wraps
  EXPECT_FALSE(mem_->CheckRange(0, 1, Access::kNone));
  int host = 0;
  EXPECT_FALSE(mem_->CheckRange(reinterpret_cast<CUdeviceptr>(&host), sizeof(host), Access::kNone));
  // Two separate allocations never form one range, even when adjacent.
  CUdeviceptr q = 0;
  ASSERT_EQ(mem_->Allocate(1, 1, 4096, &q), CUDA_SUCCESS);
  CUdeviceptr r = 0;
  ASSERT_EQ(mem_->Allocate(1, 1, 4096, &r), CUDA_SUCCESS);
  ASSERT_EQ(r, q + 4096);
  EXPECT_FALSE(mem_->CheckRange(q, 8192, Access::kNone));
}

TEST_F(DeviceMemoryTest, FindAllocationReportsTheContainingAllocation) {
  CUdeviceptr p = 0;
  ASSERT_EQ(mem_->Allocate(0, 42, 3 * kMiB + 5, &p), CUDA_SUCCESS);
  AllocationInfo info;
  ASSERT_TRUE(mem_->FindAllocation(p + kMiB, &info));
  EXPECT_EQ(info.base, p);
  EXPECT_EQ(info.size, 3 * kMiB + 5);
  EXPECT_EQ(info.device, 0);
  EXPECT_EQ(info.owner, 42u);
  EXPECT_FALSE(info.vmm);
  EXPECT_EQ(info.access, Access::kReadWrite);
  EXPECT_FALSE(mem_->FindAllocation(p + 3 * kMiB + 5, &info));
  EXPECT_FALSE(mem_->FindAllocation(p - 1, &info));
  EXPECT_FALSE(mem_->FindAllocation(p, nullptr));
  ASSERT_EQ(mem_->Free(p), CUDA_SUCCESS);
  EXPECT_FALSE(mem_->FindAllocation(p, &info));
}

TEST_F(DeviceMemoryTest, ConcurrentAllocateFreeAndCheck) {
  constexpr int kIterations = 3000;
  std::atomic<bool> failed{false};
  std::atomic<bool> done{false};
  auto worker = [&](int seed) {
    std::mt19937_64 rng(seed);
    std::vector<std::pair<CUdeviceptr, uint64_t>> live;
    for (int i = 0; i < kIterations; ++i) {
      if (live.size() < 16 && (live.empty() || rng() % 2 == 0)) {
        const uint64_t bytes = 1 + rng() % (3 * kMiB);
        CUdeviceptr p = 0;
        if (mem_->Allocate(0, seed, bytes, &p) != CUDA_SUCCESS) {
          failed = true;
          return;
        }
        // Each thread writes its own id at both ends; a shared range would show the other's.
        reinterpret_cast<volatile unsigned char*>(p)[0] = static_cast<unsigned char>(seed);
        reinterpret_cast<volatile unsigned char*>(p)[bytes - 1] = static_cast<unsigned char>(seed);
        live.emplace_back(p, bytes);
      } else {
        const size_t k = rng() % live.size();
        const auto [p, bytes] = live[k];
        if (reinterpret_cast<volatile unsigned char*>(p)[0] != seed ||
            reinterpret_cast<volatile unsigned char*>(p)[bytes - 1] != seed ||
            mem_->Free(p) != CUDA_SUCCESS) {
          failed = true;
          return;
        }
        live.erase(live.begin() + static_cast<long>(k));
      }
    }
    for (const auto& [p, bytes] : live) {
      if (mem_->Free(p) != CUDA_SUCCESS) failed = true;
    }
  };
  std::atomic<bool> inconsistent{false};
  std::thread checker([&] {
    std::mt19937_64 rng(3);
    while (!done) {
      AllocationInfo info;
      const CUdeviceptr probe = mem_->base() + rng() % (128 * kMiB);
      if (!mem_->FindAllocation(probe, &info)) continue;
      if (probe < info.base || probe - info.base >= info.size || info.device != 0 ||
          (info.owner != 1 && info.owner != 2)) {
        inconsistent = true;
      }
    }
  });
  std::thread a(worker, 1);
  std::thread b(worker, 2);
  a.join();
  b.join();
  done = true;
  checker.join();
  EXPECT_FALSE(failed);
  EXPECT_FALSE(inconsistent);
  EXPECT_EQ(mem_->UsedBytes(0), 0u);
}

// Zeroing a linear allocation (the pool's scrub of what a tenant allocated) drops its whole pages
// instead of writing them: an allocation the tenant never touched costs no host memory to zero.
TEST_F(DeviceMemoryTest, ZeroingALinearAllocationFaultsNoPageIn) {
  const uint64_t len = 256 * kMiB;
  CUdeviceptr p = 0;
  ASSERT_EQ(mem_->Allocate(0, 1, len, &p), CUDA_SUCCESS);
  auto* bytes = reinterpret_cast<unsigned char*>(p);
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  // Base pages only: with transparent huge pages (simgpu asks for them) a write may fault in a
  // whole 2 MiB page, and what stays resident of it after the zeroing splits it is the kernel's
  // choice, not the zeroing's. What is counted here is that zeroing itself faults nothing in.
  ASSERT_EQ(madvise(bytes, len, MADV_NOHUGEPAGE), 0);
  // A few pages the tenant wrote, and an unaligned range whose partial pages are written.
  std::memset(bytes, 0xab, 4 * page);
  std::memset(bytes + len - 3 * page, 0xcd, 3 * page);
  ASSERT_TRUE(mem_->ZeroMapped(p + 100, len - 200));
  EXPECT_LE(ResidentPagesIn(p, len), 2u);  // at most the two partial pages at the ends
  EXPECT_EQ(bytes[99], 0xab);
  EXPECT_EQ(bytes[100], 0);
  EXPECT_EQ(bytes[2 * page], 0);
  EXPECT_EQ(bytes[len - 101], 0);
  EXPECT_EQ(bytes[len - 100], 0xcd);
  EXPECT_EQ(bytes[len / 2], 0);
  // Outside an allocation, or past its end: not done, the caller writes.
  EXPECT_FALSE(mem_->ZeroMapped(p, len + kGiB));
  EXPECT_EQ(mem_->Free(p), CUDA_SUCCESS);
  EXPECT_FALSE(mem_->ZeroMapped(p, page));
}

}  // namespace
}  // namespace phos::sim
