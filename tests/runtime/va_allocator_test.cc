// The instance address space on simgpu: sub-allocation, reuse, large allocations, exact
// placement, and the Save -> Restore round trip that restore relies on.
#include "phos/runtime/va_allocator.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "phos/driver/physical_memory.h"

namespace phos::runtime {
namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kGiB = 1ull << 30;

class VaAllocatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto table = driver::DriverTable::Open({.gpu = driver::GpuKind::kSim});
    ASSERT_TRUE(table.ok()) << table.status().ToString();
    table_ = std::move(*table);
    ASSERT_EQ(table_->cuInit(0), CUDA_SUCCESS);
    CUdevice dev = 0;
    ASSERT_EQ(table_->cuDeviceGet(&dev, 0), CUDA_SUCCESS);
    ASSERT_EQ(table_->cuCtxCreate(&context_, nullptr, 0, dev), CUDA_SUCCESS);
  }
  void TearDown() override {
    if (context_ != nullptr) table_->cuCtxDestroy(context_);
  }

  std::unique_ptr<InstanceAddressSpace> Space(uint64_t range = 1 * kGiB) {
    auto space = InstanceAddressSpace::Reserve(table_.get(), {.range_bytes = range});
    EXPECT_TRUE(space.ok()) << space.status().ToString();
    return space.ok() ? std::move(*space) : nullptr;
  }

  std::shared_ptr<driver::DriverTable> table_;
  CUcontext context_ = nullptr;
};

TEST_F(VaAllocatorTest, SmallAllocationsArePackedAndAlignedInOneGranule) {
  auto space = Space();
  ASSERT_NE(space, nullptr);
  std::vector<CUdeviceptr> ptrs;
  for (uint64_t bytes : {1, 100, 256, 257, 4000}) {
    auto p = space->Allocate(bytes);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    EXPECT_EQ(*p % InstanceAddressSpace::kAlignment, 0u);
    EXPECT_TRUE(space->Contains(*p));
    ptrs.push_back(*p);
  }
  EXPECT_EQ(space->mapping_count(), 1u);
  EXPECT_EQ(space->mapped_bytes(), space->granularity());
  // Packed: each follows the previous one's 256-rounded size.
  EXPECT_EQ(ptrs[1] - ptrs[0], 256u);
  EXPECT_EQ(ptrs[2] - ptrs[1], 256u);
  EXPECT_EQ(ptrs[3] - ptrs[2], 256u);
  EXPECT_EQ(ptrs[4] - ptrs[3], 512u);
}

TEST_F(VaAllocatorTest, FreedRangesAreReused) {
  auto space = Space();
  ASSERT_NE(space, nullptr);
  auto a = space->Allocate(1024);
  auto b = space->Allocate(1024);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(space->Free(*a).ok());
  auto c = space->Allocate(512);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(*c, *a);
  EXPECT_EQ(space->Free(*a + 256).code(), StatusCode::kNotFound);
  auto big = space->Allocate(8 * kMiB);
  ASSERT_TRUE(big.ok());
  ASSERT_TRUE(space->Free(*big).ok());
  auto again = space->Allocate(8 * kMiB);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *big);
}

TEST_F(VaAllocatorTest, LargeAllocationsGetTheirOwnGranuleRoundedMapping) {
  auto space = Space();
  ASSERT_NE(space, nullptr);
  const uint64_t g = space->granularity();
  auto a = space->Allocate(g + 1);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ((*a - space->base()) % g, 0u);
  EXPECT_EQ(space->mapped_bytes(), 2 * g);
  auto b = space->Allocate(g);
  ASSERT_TRUE(b.ok());
  EXPECT_GE(*b, *a + 2 * g);
  EXPECT_EQ(space->mapping_count(), 2u);
  // The memory is usable end to end.
  std::vector<uint8_t> out(g + 1, 0), in(g + 1);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<uint8_t>(i * 7);
  ASSERT_EQ(table_->cuMemcpyHtoD(*a, in.data(), in.size()), CUDA_SUCCESS);
  ASSERT_EQ(table_->cuMemcpyDtoH(out.data(), *a, out.size()), CUDA_SUCCESS);
  EXPECT_EQ(in, out);
}

TEST_F(VaAllocatorTest, SharedGranuleIsReleasedWhenItsLastAllocationIsFreed) {
  auto space = Space();
  ASSERT_NE(space, nullptr);
  auto a = space->Allocate(300);
  auto b = space->Allocate(300);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(space->mapping_count(), 1u);
  ASSERT_TRUE(space->Free(*a).ok());
  EXPECT_EQ(space->mapping_count(), 1u);
  ASSERT_TRUE(space->Free(*b).ok());
  EXPECT_EQ(space->mapping_count(), 0u);
  EXPECT_EQ(space->mapped_bytes(), 0u);
  // Unmapped: the driver no longer knows the address.
  CUdeviceptr base = 0;
  size_t size = 0;
  EXPECT_NE(table_->cuMemGetAddressRange(&base, &size, *a), CUDA_SUCCESS);
}

TEST_F(VaAllocatorTest, MapAtPlacesExactlyAndRefusesTakenOrBadAddresses) {
  auto space = Space();
  ASSERT_NE(space, nullptr);
  const uint64_t g = space->granularity();
  const CUdeviceptr large_at = space->base() + 4 * g;
  ASSERT_TRUE(space->MapAt(large_at, 3 * g).ok());
  const CUdeviceptr small_at = space->base() + 10 * g + 4096;
  ASSERT_TRUE(space->MapAt(small_at, 1000).ok());
  AddressSpaceState state = space->Save();
  ASSERT_EQ(state.allocations.size(), 2u);
  EXPECT_EQ(state.allocations[0], (SavedAllocation{large_at, 3 * g}));
  EXPECT_EQ(state.allocations[1], (SavedAllocation{small_at, 1000}));

  EXPECT_EQ(space->MapAt(large_at + g, g).code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(space->MapAt(large_at + 512, 256).code(), StatusCode::kAlreadyExists);  // inside the large one
  EXPECT_EQ(space->MapAt(small_at + 768, 256).code(), StatusCode::kAlreadyExists);  // overlaps the small one
  EXPECT_TRUE(space->MapAt(small_at + 1024, 256).ok());                             // just after it
  EXPECT_EQ(space->MapAt(space->base() + 20 * g + 100, 256).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(space->MapAt(space->base() + 20 * g + 4096, g).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(space->MapAt(space->base() - g, g).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(space->MapAt(space->base() + space->range_bytes() - g, 2 * g).code(), StatusCode::kInvalidArgument);
  // A new allocation never lands on a placed one.
  auto p = space->Allocate(5 * g);
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(*p + 5 * g <= large_at || *p >= large_at + 3 * g);
}

TEST_F(VaAllocatorTest, SaveThenRestoreGivesTheSameAddressesAndTheDataSurvives) {
  AddressSpaceState state;
  std::vector<std::vector<uint8_t>> contents;
  {
    auto space = Space(256 * kMiB);
    ASSERT_NE(space, nullptr);
    for (uint64_t bytes : {uint64_t{64}, uint64_t{5000}, 3 * kMiB, uint64_t{256}, 2 * kMiB}) {
      auto p = space->Allocate(bytes);
      ASSERT_TRUE(p.ok()) << p.status().ToString();
    }
    auto gone = space->Allocate(700);
    ASSERT_TRUE(gone.ok());
    ASSERT_TRUE(space->Free(*gone).ok());
    state = space->Save();
    ASSERT_EQ(state.allocations.size(), 5u);
    for (const SavedAllocation& a : state.allocations) {
      std::vector<uint8_t> bytes(a.bytes);
      for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(a.address + i * 13);
      ASSERT_EQ(table_->cuMemcpyHtoD(a.address, bytes.data(), bytes.size()), CUDA_SUCCESS);
      std::vector<uint8_t> back(a.bytes);
      ASSERT_EQ(table_->cuMemcpyDtoH(back.data(), a.address, back.size()), CUDA_SUCCESS);
      contents.push_back(std::move(back));
    }
  }
  // The first space is gone (its range freed): the restore takes the very same range.
  auto restored = InstanceAddressSpace::Restore(table_.get(), state);
  ASSERT_TRUE(restored.ok()) << restored.status().ToString();
  EXPECT_EQ((*restored)->base(), state.base);
  AddressSpaceState again = (*restored)->Save();
  EXPECT_EQ(again.allocations, state.allocations);
  // Fill through the restored addresses (restore's loader does this) and read back intact.
  for (size_t i = 0; i < state.allocations.size(); ++i) {
    const SavedAllocation& a = state.allocations[i];
    ASSERT_EQ(table_->cuMemcpyHtoD(a.address, contents[i].data(), a.bytes), CUDA_SUCCESS);
  }
  for (size_t i = 0; i < state.allocations.size(); ++i) {
    const SavedAllocation& a = state.allocations[i];
    std::vector<uint8_t> back(a.bytes);
    ASSERT_EQ(table_->cuMemcpyDtoH(back.data(), a.address, back.size()), CUDA_SUCCESS);
    EXPECT_EQ(back, contents[i]) << "allocation at " << a.address;
  }
}

TEST_F(VaAllocatorTest, RestoreAtATakenRangeFailsClearly) {
  auto space = Space(64 * kMiB);
  ASSERT_NE(space, nullptr);
  AddressSpaceState state = space->Save();
  auto clash = InstanceAddressSpace::Restore(table_.get(), state);
  ASSERT_FALSE(clash.ok());
  EXPECT_EQ(clash.status().code(), StatusCode::kAlreadyExists) << clash.status().ToString();
  auto unaligned = InstanceAddressSpace::Reserve(table_.get(), {.range_bytes = 64 * kMiB, .base = space->base() + 4096});
  EXPECT_EQ(unaligned.status().code(), StatusCode::kInvalidArgument);
}

TEST_F(VaAllocatorTest, TwoSpacesDoNotOverlap) {
  auto a = Space(4 * kGiB);
  auto b = Space(4 * kGiB);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_TRUE(a->base() + a->range_bytes() <= b->base() || b->base() + b->range_bytes() <= a->base());
  auto pa = a->Allocate(100);
  auto pb = b->Allocate(100);
  ASSERT_TRUE(pa.ok() && pb.ok());
  EXPECT_FALSE(b->Contains(*pa));
  EXPECT_FALSE(a->Contains(*pb));
}

TEST_F(VaAllocatorTest, OutOfMemoryIsACleanError) {
  auto space = Space(8 * kMiB);
  ASSERT_NE(space, nullptr);
  auto too_big = space->Allocate(16 * kMiB);
  ASSERT_FALSE(too_big.ok());
  EXPECT_EQ(too_big.status().code(), StatusCode::kOutOfMemory);
  auto fill = space->Allocate(8 * kMiB);
  ASSERT_TRUE(fill.ok()) << fill.status().ToString();
  auto more = space->Allocate(1);
  ASSERT_FALSE(more.ok());
  EXPECT_EQ(more.status().code(), StatusCode::kOutOfMemory);
  EXPECT_NE(more.status().message().find("no room"), std::string::npos) << more.status().message();
  // The device itself running out (ci profile: 80 GiB) is an error too, and leaves no mapping.
  auto huge_space = Space(128 * kGiB);
  ASSERT_NE(huge_space, nullptr);
  auto huge = huge_space->Allocate(100 * kGiB);
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), StatusCode::kOutOfMemory) << huge.status().ToString();
  EXPECT_EQ(huge_space->mapping_count(), 0u);
  EXPECT_EQ(space->Allocate(0).status().code(), StatusCode::kInvalidArgument);
}

// Memory that goes back to the driver has been zeroed: a GPU's driver may give it to the next
// allocation in the process (another tenant's) as it is. simgpu counts every release that was not.
TEST_F(VaAllocatorTest, WhatIsFreedOrDestroyedIsZeroedBeforeItGoesBackToTheDriver) {
  ASSERT_NE(table_->phosSimGetStats, nullptr);
  auto unzeroed = [&] {
    PhosSimStats stats{};
    EXPECT_EQ(table_->phosSimGetStats(0, &stats), CUDA_SUCCESS);
    return stats.released_unzeroed_bytes;
  };
  // The count itself: memory written and released as it is.
  {
    auto space = Space();
    ASSERT_NE(space, nullptr);
    auto p = space->Allocate(2 * kMiB);
    ASSERT_TRUE(p.ok());
    ASSERT_EQ(table_->cuMemsetD8(*p, 0x5a, 2 * kMiB), CUDA_SUCCESS);
    ASSERT_EQ(table_->cuCtxSynchronize(), CUDA_SUCCESS);
    const uint64_t counted = unzeroed();
    AddressSpaceRelease r = space->Release();
    ASSERT_EQ(r.mappings.size(), 1u);
    EXPECT_EQ(table_->cuMemUnmap(r.mappings[0].base, r.mappings[0].bytes), CUDA_SUCCESS);
    EXPECT_EQ(table_->cuMemRelease(r.mappings[0].handle), CUDA_SUCCESS);
    EXPECT_EQ(table_->cuMemAddressFree(r.range_base, r.range_bytes), CUDA_SUCCESS);
    EXPECT_EQ(unzeroed(), counted + r.mappings[0].bytes);
  }
  const uint64_t before = unzeroed();
  auto space = Space();
  ASSERT_NE(space, nullptr);
  std::vector<uint8_t> secret(3 * kMiB, 0x5a);
  auto large = space->Allocate(secret.size());
  auto small = space->Allocate(100);
  auto kept = space->Allocate(secret.size());
  ASSERT_TRUE(large.ok() && small.ok() && kept.ok());
  for (CUdeviceptr p : {*large, *kept}) ASSERT_EQ(table_->cuMemcpyHtoD(p, secret.data(), secret.size()), CUDA_SUCCESS);
  ASSERT_EQ(table_->cuMemcpyHtoD(*small, secret.data(), 100), CUDA_SUCCESS);
  ASSERT_TRUE(space->Free(*large).ok());
  ASSERT_TRUE(space->Free(*small).ok());  // the last allocation of its granule: the granule goes
  EXPECT_EQ(unzeroed(), before);
  space.reset();  // what is still mapped goes with the space
  EXPECT_EQ(unzeroed(), before);
}

// A migration's source: the borrowed range is unmapped at once, so that the same addresses can be
// mapped again (on the target) before the old memory is zeroed; the memory is handed over whole,
// still holding its bytes, and goes back to the driver zeroed.
TEST_F(VaAllocatorTest, UnmapAllFreesTheRangeAtOnceAndHandsTheMemoryOverToBeZeroed) {
  ASSERT_NE(table_->phosSimGetStats, nullptr);
  auto stats = [&] {
    PhosSimStats s{};
    EXPECT_EQ(table_->phosSimGetStats(0, &s), CUDA_SUCCESS);
    return s;
  };
  CUdeviceptr arena = 0;
  ASSERT_EQ(table_->cuMemAddressReserve(&arena, kGiB, 0, 0, 0), CUDA_SUCCESS);
  auto space = InstanceAddressSpace::Reserve(table_.get(), {.range_bytes = kGiB, .base = arena, .borrowed = true});
  ASSERT_TRUE(space.ok()) << space.status().ToString();
  auto large = (*space)->Allocate(3 * kMiB);
  auto small = (*space)->Allocate(100);
  ASSERT_TRUE(large.ok() && small.ok());
  std::vector<uint8_t> secret(3 * kMiB, 0x5a);
  ASSERT_EQ(table_->cuMemcpyHtoD(*large, secret.data(), secret.size()), CUDA_SUCCESS);
  const uint64_t unzeroed = stats().released_unzeroed_bytes;

  std::vector<ctxpool::TenantResources::Unmapped> to_zero;
  ASSERT_TRUE((*space)->UnmapAll(&to_zero).ok());
  EXPECT_EQ((*space)->mapping_count(), 0u);
  EXPECT_EQ((*space)->allocation_count(), 0u);
  ASSERT_EQ(to_zero.size(), 2u);  // the large allocation's granules and the small one's
  // The range maps again right away, while the old memory still exists, unzeroed.
  EXPECT_TRUE((*space)->MapAt(*large, 3 * kMiB).ok());
  const ctxpool::TenantResources::Unmapped* held = nullptr;
  for (const auto& u : to_zero) {
    EXPECT_EQ(u.device, 0);
    if (u.bytes >= secret.size()) held = &u;
  }
  ASSERT_NE(held, nullptr);
  // A witness mapping of the handed-over memory keeps it alive past its release and shows what the
  // release left in it.
  CUdeviceptr witness = 0;
  ASSERT_EQ(table_->cuMemAddressReserve(&witness, held->bytes, 0, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(table_->cuMemMap(witness, held->bytes, 0, held->handle, 0), CUDA_SUCCESS);
  ASSERT_EQ(driver::SetDeviceAccess(*table_, witness, held->bytes, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE), CUDA_SUCCESS);
  std::vector<uint8_t> seen(secret.size());
  ASSERT_EQ(table_->cuMemcpyDtoH(seen.data(), witness, seen.size()), CUDA_SUCCESS);
  EXPECT_EQ(seen, secret);
  for (const auto& u : to_zero) EXPECT_TRUE(driver::ZeroAndRelease(*table_, u.handle, u.bytes, u.device).ok());
  ASSERT_EQ(table_->cuMemcpyDtoH(seen.data(), witness, seen.size()), CUDA_SUCCESS);
  EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](uint8_t b) { return b == 0; }));
  EXPECT_EQ(table_->cuMemUnmap(witness, held->bytes), CUDA_SUCCESS);
  EXPECT_EQ(table_->cuMemAddressFree(witness, held->bytes), CUDA_SUCCESS);
  EXPECT_EQ(stats().released_unzeroed_bytes, unzeroed);
  space->reset();
  EXPECT_EQ(table_->cuMemAddressFree(arena, kGiB), CUDA_SUCCESS);
}

TEST_F(VaAllocatorTest, ReleaseHandsEveryMappingOver) {
  auto space = Space();
  ASSERT_NE(space, nullptr);
  ASSERT_TRUE(space->Allocate(100).ok());
  ASSERT_TRUE(space->Allocate(3 * kMiB).ok());
  AddressSpaceRelease r = space->Release();
  ASSERT_EQ(r.mappings.size(), 2u);
  EXPECT_EQ(r.range_base, space->base());
  EXPECT_EQ(space->mapping_count(), 0u);
  // The caller now owns them: undo them as the pool's scrub does.
  for (const auto& m : r.mappings) {
    EXPECT_EQ(table_->cuMemUnmap(m.base, m.bytes), CUDA_SUCCESS);
    EXPECT_EQ(table_->cuMemRelease(m.handle), CUDA_SUCCESS);
  }
  EXPECT_EQ(table_->cuMemAddressFree(r.range_base, r.range_bytes), CUDA_SUCCESS);
}

TEST_F(VaAllocatorTest, BorrowedRangeIsUsedAsGivenAndNeverFreed) {
  // The caller's reservation (the API server's arena of instance ranges).
  CUdeviceptr arena = 0;
  ASSERT_EQ(table_->cuMemAddressReserve(&arena, 2 * kGiB, 0, 0, 0), CUDA_SUCCESS);
  EXPECT_EQ(InstanceAddressSpace::Reserve(table_.get(), {.range_bytes = kGiB, .borrowed = true}).status().code(),
            StatusCode::kInvalidArgument);
  {
    auto space = InstanceAddressSpace::Reserve(table_.get(),
                                               {.range_bytes = kGiB, .base = arena + kGiB, .borrowed = true});
    ASSERT_TRUE(space.ok()) << space.status().ToString();
    EXPECT_TRUE((*space)->borrowed());
    auto p = (*space)->Allocate(3 * kMiB);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    EXPECT_EQ(*p, arena + kGiB);
    std::vector<uint8_t> ones(3 * kMiB, 1);
    ASSERT_EQ(table_->cuMemcpyHtoD(*p, ones.data(), ones.size()), CUDA_SUCCESS);
    // Zeroed, unmapped and released at once: the range can be mapped again right away, and what is
    // mapped there next does not show the old bytes.
    ASSERT_TRUE((*space)->ZeroAndUnmapAll().ok());
    EXPECT_EQ((*space)->mapping_count(), 0u);
    EXPECT_TRUE((*space)->MapAt(arena + kGiB, 3 * kMiB).ok());
    std::vector<uint8_t> back(3 * kMiB, 7);
    ASSERT_EQ(table_->cuMemcpyDtoH(back.data(), arena + kGiB, back.size()), CUDA_SUCCESS);
    EXPECT_TRUE(std::all_of(back.begin(), back.end(), [](uint8_t b) { return b == 0; }));
    AddressSpaceRelease r = (*space)->Release();
    EXPECT_EQ(r.range_bytes, 0u);  // the range stays the caller's
    for (const auto& m : r.mappings) {
      EXPECT_EQ(table_->cuMemUnmap(m.base, m.bytes), CUDA_SUCCESS);
      EXPECT_EQ(table_->cuMemRelease(m.handle), CUDA_SUCCESS);
    }
  }
  // Still reserved by its owner: the driver does not hand it out, and the owner frees it.
  CUdeviceptr other = 0;
  ASSERT_EQ(table_->cuMemAddressReserve(&other, kGiB, 0, arena + kGiB, 0), CUDA_SUCCESS);
  EXPECT_NE(other, arena + kGiB);
  EXPECT_EQ(table_->cuMemAddressFree(other, kGiB), CUDA_SUCCESS);
  EXPECT_EQ(table_->cuMemAddressFree(arena, 2 * kGiB), CUDA_SUCCESS);
}

}  // namespace
}  // namespace phos::runtime
