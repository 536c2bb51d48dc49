// VMM: reservations, physical allocations, mappings, access rights.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "memory/device_memory.h"

namespace phos::sim {
namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kGiB = 1ull << 30;
constexpr uint64_t kG = DeviceMemory::kGranularity;

class VmmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DeviceMemoryOptions options;
    options.device_capacity = {80 * kGiB, 64 * kMiB};
    ASSERT_EQ(DeviceMemory::Create(options, &mem_), CUDA_SUCCESS);
  }
  CUdeviceptr Reserve(uint64_t size) {
    CUdeviceptr p = 0;
    EXPECT_EQ(mem_->ReserveAddress(size, 0, 0, &p), CUDA_SUCCESS);
    return p;
  }
  CUmemGenericAllocationHandle Create(uint64_t size, int device = 0) {
    CUmemGenericAllocationHandle h = 0;
    EXPECT_EQ(mem_->CreatePhysical(device, size, &h), CUDA_SUCCESS);
    return h;
  }
  std::unique_ptr<DeviceMemory> mem_;
};

TEST_F(VmmTest, ReserveHonoursAFreeRequestedAddress) {
  const CUdeviceptr want = mem_->base() + kGiB;
  CUdeviceptr a = 0;
  ASSERT_EQ(mem_->ReserveAddress(8 * kMiB, 0, want, &a), CUDA_SUCCESS);
  EXPECT_EQ(a, want);
  // Taken: the address is only a hint, another range comes back.
  CUdeviceptr b = 0;
  ASSERT_EQ(mem_->ReserveAddress(8 * kMiB, 0, want, &b), CUDA_SUCCESS);
  EXPECT_NE(b, want);
  EXPECT_TRUE(b + 8 * kMiB <= a || a + 8 * kMiB <= b);
  // Partly taken is taken too.
  CUdeviceptr c = 0;
  ASSERT_EQ(mem_->ReserveAddress(8 * kMiB, 0, want + 4 * kMiB, &c), CUDA_SUCCESS);
  EXPECT_TRUE(c + 8 * kMiB <= a || a + 8 * kMiB <= c);
  // Outside the device address space: ignored as a hint.
  CUdeviceptr d = 0;
  ASSERT_EQ(mem_->ReserveAddress(2 * kMiB, 0, 0x1000000000ull, &d), CUDA_SUCCESS);
  EXPECT_GE(d, mem_->base());
  EXPECT_LT(d, mem_->base() + mem_->size());
  // A freed reservation can be had again at the same address (same-address restore).
  ASSERT_EQ(mem_->FreeAddress(a, 8 * kMiB), CUDA_SUCCESS);
  CUdeviceptr again = 0;
  ASSERT_EQ(mem_->ReserveAddress(8 * kMiB, 0, want, &again), CUDA_SUCCESS);
  EXPECT_EQ(again, want);
}

TEST_F(VmmTest, ReserveRejectsMisalignedArgumentsAndHonoursAlignment) {
  CUdeviceptr p = 0;
  EXPECT_EQ(mem_->ReserveAddress(0, 0, 0, &p), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(mem_->ReserveAddress(kMiB, 0, 0, &p), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(mem_->ReserveAddress(kG, 3 * kMiB, 0, &p), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(mem_->ReserveAddress(kG, 0, mem_->base() + 4096, &p), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(mem_->ReserveAddress(kG, 0, 0, nullptr), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(mem_->ReserveAddress(kG, 0, 0, &p), CUDA_SUCCESS);
  EXPECT_EQ(p % kG, 0u);
  ASSERT_EQ(mem_->ReserveAddress(kG, 4096, 0, &p), CUDA_SUCCESS);  // raised to the granularity
  EXPECT_EQ(p % kG, 0u);
  ASSERT_EQ(mem_->ReserveAddress(kG, kGiB, 0, &p), CUDA_SUCCESS);
  EXPECT_EQ(p % kGiB, 0u);
  EXPECT_EQ(mem_->ReserveAddress(2 * mem_->size(), 0, 0, &p), CUDA_ERROR_OUT_OF_MEMORY);
}

TEST_F(VmmTest, ReservationsAndLinearAllocationsNeverOverlap) {
  CUdeviceptr linear = 0;
  ASSERT_EQ(mem_->Allocate(0, 1, 4 * kMiB, &linear), CUDA_SUCCESS);
  CUdeviceptr r = 0;
  ASSERT_EQ(mem_->ReserveAddress(4 * kMiB, 0, linear, &r), CUDA_SUCCESS);
  EXPECT_NE(r, linear);
  CUdeviceptr linear2 = 0;
  ASSERT_EQ(mem_->Allocate(0, 1, 4 * kMiB, &linear2), CUDA_SUCCESS);
  EXPECT_TRUE(linear2 + 4 * kMiB <= r || r + 4 * kMiB <= linear2);
}

TEST_F(VmmTest, FreeAddressNeedsTheExactUnmappedReservation) {
  const CUdeviceptr r = Reserve(8 * kMiB);
  EXPECT_EQ(mem_->FreeAddress(r, 4 * kMiB), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(mem_->FreeAddress(r + kG, 6 * kMiB), CUDA_ERROR_INVALID_VALUE);
  const auto h = Create(kG);
  ASSERT_EQ(mem_->Map(r + 6 * kMiB, kG, 0, h), CUDA_SUCCESS);
  EXPECT_EQ(mem_->FreeAddress(r, 8 * kMiB), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(mem_->Unmap(r + 6 * kMiB, kG), CUDA_SUCCESS);
  EXPECT_EQ(mem_->FreeAddress(r, 8 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(mem_->FreeAddress(r, 8 * kMiB), CUDA_ERROR_INVALID_VALUE);
  // The range is gone: mapping into it fails.
  EXPECT_EQ(mem_->Map(r, kG, 0, h), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(VmmTest, MappingsOfOneHandleShareContentAcrossUnmapAndRemap) {
  const auto h = Create(4 * kMiB);
  const CUdeviceptr a = Reserve(4 * kMiB);
  const CUdeviceptr b = Reserve(8 * kMiB);
  ASSERT_EQ(mem_->Map(a, 4 * kMiB, 0, h), CUDA_SUCCESS);
  ASSERT_EQ(mem_->SetAccess(a, 4 * kMiB, Access::kReadWrite), CUDA_SUCCESS);
  auto* pa = reinterpret_cast<unsigned char*>(a);
  for (uint64_t i = 0; i < 4 * kMiB; i += 4096) pa[i] = static_cast<unsigned char>(i / 4096);
  // Second mapping of the same bytes, read-only, in the upper half of another reservation.
  ASSERT_EQ(mem_->Map(b + 4 * kMiB, 4 * kMiB, 0, h), CUDA_SUCCESS);
  ASSERT_EQ(mem_->SetAccess(b + 4 * kMiB, 4 * kMiB, Access::kRead), CUDA_SUCCESS);
  const auto* pb = reinterpret_cast<const volatile unsigned char*>(b + 4 * kMiB);
  EXPECT_EQ(pb[4096 * 7], 7);
  pa[4096 * 9] = 0xee;
  EXPECT_EQ(pb[4096 * 9], 0xee);
  ASSERT_EQ(mem_->Unmap(a, 4 * kMiB), CUDA_SUCCESS);
  EXPECT_FALSE(mem_->CheckRange(a, 1, Access::kNone));
  EXPECT_EQ(pb[4096 * 9], 0xee);
  ASSERT_EQ(mem_->Unmap(b + 4 * kMiB, 4 * kMiB), CUDA_SUCCESS);
  // No mapping left but the handle is live: remapping brings the content back, with no access
  // until it is granted again.
  ASSERT_EQ(mem_->Map(a, 4 * kMiB, 0, h), CUDA_SUCCESS);
  EXPECT_FALSE(mem_->CheckRange(a, 1, Access::kRead));
  ASSERT_EQ(mem_->SetAccess(a, 4 * kMiB, Access::kRead), CUDA_SUCCESS);
  EXPECT_EQ(pa[4096 * 7], 7);
  EXPECT_EQ(pa[4096 * 9], 0xee);
  // A mapping at an offset sees the bytes at that offset.
  ASSERT_EQ(mem_->Map(b, kG, kG, h), CUDA_SUCCESS);
  ASSERT_EQ(mem_->SetAccess(b, kG, Access::kRead), CUDA_SUCCESS);
  EXPECT_EQ(reinterpret_cast<const unsigned char*>(b)[4096 * 2], (kG / 4096 + 2) & 0xff);
  AllocationInfo info;
  ASSERT_TRUE(mem_->FindAllocation(b + 100, &info));
  EXPECT_TRUE(info.vmm);
  EXPECT_EQ(info.base, b);
  EXPECT_EQ(info.size, kG);
  EXPECT_EQ(info.handle, h);
  EXPECT_EQ(info.offset, kG);
  EXPECT_EQ(info.access, Access::kRead);
  PhysicalInfo physical;
  ASSERT_TRUE(mem_->FindPhysical(h, &physical));
  EXPECT_EQ(physical.mappings, 2);
  EXPECT_EQ(physical.size, 4 * kMiB);
}

// The VmFlags line of /proc/self/smaps for the mapping that starts at `addr` ("" if none does).
std::string VmFlagsOf(CUdeviceptr addr) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    unsigned long long start = 0;
    char dash = 0;
    std::istringstream head(line);
    if (line.find(':') > line.find(' ') && head >> std::hex >> start >> dash && dash == '-') {
      inside = start == addr;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line;
    }
  }
  return "";
}

TEST_F(VmmTest, MappingsAskTheHostForHugePages) {
  // Whether the host grants them depends on its shmem_enabled setting; the advice is what simgpu
  // controls, and it outlives the access changes that follow a map.
  const auto h = Create(4 * kMiB);
  const CUdeviceptr a = Reserve(4 * kMiB);
  ASSERT_EQ(mem_->Map(a, 4 * kMiB, 0, h), CUDA_SUCCESS);
  ASSERT_EQ(mem_->SetAccess(a, 4 * kMiB, Access::kReadWrite), CUDA_SUCCESS);
  const std::string flags = VmFlagsOf(a);
  ASSERT_FALSE(flags.empty()) << "no mapping at " << std::hex << a;
  EXPECT_NE((flags + " ").find(" hg "), std::string::npos) << flags;
}

TEST_F(VmmTest, AccessRightsGateCheckRange) {
  const auto h = Create(kG, 1);
  const CUdeviceptr r = Reserve(kG);
  ASSERT_EQ(mem_->Map(r, kG, 0, h), CUDA_SUCCESS);
  int device = -1;
  EXPECT_TRUE(mem_->CheckRange(r, kG, Access::kNone, &device));
  EXPECT_EQ(device, 1);
  EXPECT_FALSE(mem_->CheckRange(r, 8, Access::kRead));
  EXPECT_FALSE(mem_->CheckRange(r, 8, Access::kReadWrite));
  ASSERT_EQ(mem_->SetAccess(r, kG, Access::kRead), CUDA_SUCCESS);
  EXPECT_TRUE(mem_->CheckRange(r, kG, Access::kRead));
  EXPECT_FALSE(mem_->CheckRange(r, 8, Access::kReadWrite));
  ASSERT_EQ(mem_->SetAccess(r, kG, Access::kReadWrite), CUDA_SUCCESS);
  EXPECT_TRUE(mem_->CheckRange(r, kG, Access::kReadWrite));
  reinterpret_cast<volatile int*>(r)[0] = 5;
  EXPECT_FALSE(mem_->CheckRange(r, kG + 1, Access::kRead));  // runs into unmapped space
  ASSERT_EQ(mem_->SetAccess(r, kG, Access::kNone), CUDA_SUCCESS);
  EXPECT_FALSE(mem_->CheckRange(r, 4, Access::kRead));
}

TEST_F(VmmTest, CheckRangeSpansAdjacentMappings) {
  const auto h1 = Create(kG);
  const auto h2 = Create(kG, 1);
  const CUdeviceptr r = Reserve(3 * kG);
  ASSERT_EQ(mem_->Map(r, kG, 0, h1), CUDA_SUCCESS);
  ASSERT_EQ(mem_->Map(r + kG, kG, 0, h2), CUDA_SUCCESS);
  ASSERT_EQ(mem_->SetAccess(r, 2 * kG, Access::kReadWrite), CUDA_SUCCESS);
  int device = -1;
  EXPECT_TRUE(mem_->CheckRange(r + kMiB, kG, Access::kReadWrite, &device));
  EXPECT_EQ(device, 0);  // the device of the first byte
  EXPECT_TRUE(mem_->CheckRange(r, 2 * kG, Access::kReadWrite));
  std::memset(reinterpret_cast<void*>(r + kG - 16), 0x3c, 32);  // really contiguous
  EXPECT_FALSE(mem_->CheckRange(r, 2 * kG + 1, Access::kNone));
  ASSERT_EQ(mem_->SetAccess(r + kG, kG, Access::kRead), CUDA_SUCCESS);
  EXPECT_FALSE(mem_->CheckRange(r + kMiB, kG, Access::kReadWrite));
  EXPECT_TRUE(mem_->CheckRange(r + kMiB, kG, Access::kRead));
  // A hole between mappings breaks the range.
  const auto h3 = Create(kG);
  const CUdeviceptr s = Reserve(3 * kG);
  ASSERT_EQ(mem_->Map(s, kG, 0, h3), CUDA_SUCCESS);
  ASSERT_EQ(mem_->Map(s + 2 * kG, kG, 0, h1), CUDA_SUCCESS);
  ASSERT_EQ(mem_->SetAccess(s, kG, Access::kReadWrite), CUDA_SUCCESS);
  ASSERT_EQ(mem_->SetAccess(s + 2 * kG, kG, Access::kReadWrite), CUDA_SUCCESS);
  EXPECT_FALSE(mem_->CheckRange(s, 3 * kG, Access::kNone));
  EXPECT_FALSE(mem_->CheckRange(s + kG, 1, Access::kNone));
}

// Guarded writes and zeroing go through the file, part of whose pages exist (written before)
// and part are holes, across the 64 MiB windows the presence of pages is read in: both kinds of
// extent take the bytes.
TEST_F(VmmTest, GuardedWritesAndZeroingCrossPresentPagesAndHoles) {
  const uint64_t size = 72 * kMiB;
  volatile unsigned char* bytes = nullptr;
  auto map_fresh = [&]() {
    const auto h = Create(size);
    const CUdeviceptr r = Reserve(size);
    EXPECT_EQ(mem_->Map(r, size, 0, h), CUDA_SUCCESS);
    EXPECT_EQ(mem_->SetAccess(r, size, Access::kReadWrite), CUDA_SUCCESS);
    bytes = reinterpret_cast<volatile unsigned char*>(r);
    // Pages present at the start and from 63 to 66 MiB only.
    bytes[0] = 1;
    std::memset(reinterpret_cast<void*>(r + 63 * kMiB), 2, 3 * kMiB);
    return r;
  };
  CUdeviceptr r = map_fresh();
  std::vector<unsigned char> data(size - 100);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<unsigned char>(i * 7 + 3);
  ASSERT_EQ(mem_->WriteGuarded(r + 50, data.data(), data.size()), CUDA_SUCCESS);
  size_t wrong = 0;
  for (size_t i = 0; i < size; ++i) {
    const unsigned char want = i < 50 ? (i == 0 ? 1 : 0) : i < size - 50 ? data[i - 50] : 0;
    wrong += bytes[i] != want ? 1 : 0;
  }
  EXPECT_EQ(wrong, 0u);

  r = map_fresh();
  ASSERT_TRUE(mem_->ZeroMapped(r + 1, size - 2));
  wrong = 0;
  for (size_t i = 1; i < size - 1; ++i) wrong += bytes[i] != 0 ? 1 : 0;
  EXPECT_EQ(wrong, 0u);
  EXPECT_EQ(bytes[0], 1);
}

TEST_F(VmmTest, ReleaseWhileMappedKeepsTheMemoryUntilUnmap) {
  const auto h = Create(4 * kMiB, 1);
  const CUdeviceptr r = Reserve(4 * kMiB);
  ASSERT_EQ(mem_->Map(r, 4 * kMiB, 0, h), CUDA_SUCCESS);
  ASSERT_EQ(mem_->SetAccess(r, 4 * kMiB, Access::kReadWrite), CUDA_SUCCESS);
  std::memset(reinterpret_cast<void*>(r), 0x77, 4 * kMiB);
  ASSERT_EQ(mem_->ReleasePhysical(h), CUDA_SUCCESS);
  EXPECT_EQ(mem_->UsedBytes(1), 4 * kMiB);
  EXPECT_EQ(reinterpret_cast<volatile unsigned char*>(r)[4 * kMiB - 1], 0x77);
  EXPECT_TRUE(mem_->CheckRange(r, 4 * kMiB, Access::kReadWrite));
  PhysicalInfo physical;
  EXPECT_FALSE(mem_->FindPhysical(h, &physical));
  EXPECT_EQ(mem_->ReleasePhysical(h), CUDA_ERROR_INVALID_VALUE);
  const CUdeviceptr other = Reserve(4 * kMiB);
  EXPECT_EQ(mem_->Map(other, 4 * kMiB, 0, h), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(mem_->Unmap(r, 4 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(mem_->UsedBytes(1), 0u);
}

// A fresh 4 MiB physical allocation, mapped read-write at a reservation of its own.
struct Mapped {
  CUmemGenericAllocationHandle handle = 0;
  CUdeviceptr at = 0;
};
Mapped MapFresh(DeviceMemory& mem) {
  Mapped m;
  EXPECT_EQ(mem.CreatePhysical(0, 4 * kMiB, &m.handle), CUDA_SUCCESS);
  EXPECT_EQ(mem.ReserveAddress(4 * kMiB, 0, 0, &m.at), CUDA_SUCCESS);
  EXPECT_EQ(mem.Map(m.at, 4 * kMiB, 0, m.handle), CUDA_SUCCESS);
  EXPECT_EQ(mem.SetAccess(m.at, 4 * kMiB, Access::kReadWrite), CUDA_SUCCESS);
  return m;
}

// Writes 0x77 over a 4 MiB physical allocation, zeroes it in whole first if `zero` (as a scrub
// does), releases it, and maps the next allocation of that size (which reuses its slice of the
// file) where it was. Returns the host page bytes right after the release; *last = the last byte
// the next allocation reads.
uint64_t ReleaseAndReuse(DeviceMemory& mem, bool zero, unsigned char* last) {
  const auto [h, r] = MapFresh(mem);
  std::memset(reinterpret_cast<void*>(r), 0x77, 4 * kMiB);
  if (zero) {
    EXPECT_TRUE(mem.ZeroMapped(r, 4 * kMiB));
  }
  EXPECT_EQ(mem.Unmap(r, 4 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(mem.ReleasePhysical(h), CUDA_SUCCESS);
  const uint64_t pages = mem.HostPageBytes();
  CUmemGenericAllocationHandle next = 0;
  EXPECT_EQ(mem.CreatePhysical(0, 4 * kMiB, &next), CUDA_SUCCESS);
  EXPECT_EQ(mem.Map(r, 4 * kMiB, 0, next), CUDA_SUCCESS);
  EXPECT_EQ(mem.SetAccess(r, 4 * kMiB, Access::kRead), CUDA_SUCCESS);
  *last = reinterpret_cast<volatile unsigned char*>(r)[4 * kMiB - 1];
  return pages;
}

std::unique_ptr<DeviceMemory> Memory(uint64_t retained_bytes, uint64_t prefault_bytes = 0) {
  DeviceMemoryOptions options;
  options.device_capacity = {kGiB};
  options.retained_bytes = retained_bytes;
  options.prefault_bytes = prefault_bytes;
  std::unique_ptr<DeviceMemory> mem;
  EXPECT_EQ(DeviceMemory::Create(options, &mem), CUDA_SUCCESS);
  return mem;
}

TEST(VmmRetentionTest, AZeroedReleaseKeepsItsPagesForTheNext) {
  auto mem = Memory(64 * kMiB);
  unsigned char last = 1;
  // Without a second mapping (ThreadSanitizer builds) the zeroing itself gives the pages back.
  EXPECT_EQ(ReleaseAndReuse(*mem, /*zero=*/true, &last), mem->HasSecondMapping() ? 4 * kMiB : 0u);
  EXPECT_EQ(last, 0);
}

TEST(VmmRetentionTest, AReleaseNotZeroedGivesItsPagesBackAndLeaksNothing) {
  auto mem = Memory(64 * kMiB);
  unsigned char last = 1;
  EXPECT_EQ(ReleaseAndReuse(*mem, /*zero=*/false, &last), 0u);
  EXPECT_EQ(last, 0) << "a tenant's bytes reached the next allocation";
}

TEST(VmmRetentionTest, PastTheRetainedLimitAZeroedReleaseGivesItsPagesBack) {
  auto mem = Memory(0);
  unsigned char last = 1;
  EXPECT_EQ(ReleaseAndReuse(*mem, /*zero=*/true, &last), 0u);
  EXPECT_EQ(last, 0);
}

TEST(VmmRetentionTest, AWriteAfterTheZeroingUndoesIt) {
  auto mem = Memory(64 * kMiB);
  const auto [h, r] = MapFresh(*mem);
  ASSERT_TRUE(mem->ZeroMapped(r, 4 * kMiB));
  const unsigned char secret = 0x5a;
  ASSERT_EQ(mem->WriteGuarded(r + 4 * kMiB - 1, &secret, 1), CUDA_SUCCESS);
  ASSERT_EQ(mem->Unmap(r, 4 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(mem->ReleasePhysical(h), CUDA_SUCCESS);
  EXPECT_EQ(mem->HostPageBytes(), 0u);
}

TEST(VmmRetentionTest, AnAllocationTakesThePagesAllocatedAhead) {
  auto mem = Memory(0, /*prefault_bytes=*/8 * kMiB);
  EXPECT_EQ(mem->HostPageBytes(), 8 * kMiB);
  const CUdeviceptr r = MapFresh(*mem).at;
  std::memset(reinterpret_cast<void*>(r), 0x55, 4 * kMiB);
  EXPECT_EQ(mem->HostPageBytes(), 8 * kMiB) << "the allocation's pages were not those allocated ahead";
}

TEST(VmmLifetimeTest, DestroyingWithLiveMappingsIsClean) {
  DeviceMemoryOptions options;
  options.device_capacity = {kGiB};
  options.va_size = 256 * kMiB;
  options.preferred_base = 0;
  std::unique_ptr<DeviceMemory> mem;
  ASSERT_EQ(DeviceMemory::Create(options, &mem), CUDA_SUCCESS);
  CUmemGenericAllocationHandle h = 0;
  CUdeviceptr r = 0;
  ASSERT_EQ(mem->CreatePhysical(0, kG, &h), CUDA_SUCCESS);
  ASSERT_EQ(mem->ReserveAddress(kG, 0, 0, &r), CUDA_SUCCESS);
  ASSERT_EQ(mem->Map(r, kG, 0, h), CUDA_SUCCESS);
  ASSERT_EQ(mem->SetAccess(r, kG, Access::kReadWrite), CUDA_SUCCESS);
  reinterpret_cast<volatile char*>(r)[0] = 1;
  mem.reset();
  EXPECT_EQ(mem, nullptr);
}

}  // namespace
}  // namespace phos::sim
