// Read-only buffers shared between instance address spaces on simgpu (docs/design.md D14): one
// physical allocation mapped read-only into several ranges, counted once in the device's memory,
// kept while any range maps it, zeroed and freed with the last.
#include "phos/runtime/shared_buffers.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "phos/driver/physical_memory.h"
#include "phos/runtime/va_allocator.h"

namespace phos::runtime {
namespace {

constexpr uint64_t kGiB = 1ull << 30;

class SharedBuffersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto table = driver::DriverTable::Open({.gpu = driver::GpuKind::kSim});
    ASSERT_TRUE(table.ok()) << table.status().ToString();
    table_ = std::move(*table);
    ASSERT_EQ(table_->cuInit(0), CUDA_SUCCESS);
    CUdevice dev = 0;
    ASSERT_EQ(table_->cuDeviceGet(&dev, 0), CUDA_SUCCESS);
    ASSERT_EQ(table_->cuCtxCreate(&context_, nullptr, 0, dev), CUDA_SUCCESS);
    first_ = Space();
    second_ = Space();
    ASSERT_TRUE(first_ != nullptr && second_ != nullptr);
    bytes_ = 3 * first_->granularity();
    pattern_.resize(bytes_);
    for (size_t i = 0; i < bytes_; ++i) pattern_[i] = static_cast<unsigned char>(i * 7 + 3);
  }
  void TearDown() override {
    first_.reset();
    second_.reset();
    if (context_ != nullptr) table_->cuCtxDestroy(context_);
  }

  std::unique_ptr<InstanceAddressSpace> Space() {
    auto space = InstanceAddressSpace::Reserve(table_.get(), {.range_bytes = 1 * kGiB});
    EXPECT_TRUE(space.ok()) << space.status().ToString();
    return space.ok() ? std::move(*space) : nullptr;
  }
  uint64_t Used() {
    size_t free = 0;
    size_t total = 0;
    EXPECT_EQ(table_->cuMemGetInfo(&free, &total), CUDA_SUCCESS);
    return total - free;
  }
  std::vector<unsigned char> Read(CUdeviceptr at) {
    std::vector<unsigned char> out(bytes_);
    EXPECT_EQ(table_->cuMemcpyDtoH(out.data(), at, bytes_), CUDA_SUCCESS);
    return out;
  }
  // What a first restore does: maps its own allocation, registers it, loads it, then maps it
  // read-only and marks it resident.
  CUdeviceptr LoadAndPublish() {
    const CUdeviceptr at = first_->base() + first_->granularity();
    EXPECT_TRUE(first_->MapAt(at, bytes_).ok());
    InstanceAddressSpace::ShareableMapping mapping;
    EXPECT_TRUE(first_->RegisterShared(at, &shares_, kContent, &mapping));
    EXPECT_EQ(mapping.address, at);
    EXPECT_EQ(shares_.Acquire(0, kContent, bytes_), 0u) << "still loading: not handed out";
    EXPECT_EQ(table_->cuMemcpyHtoD(at, pattern_.data(), bytes_), CUDA_SUCCESS);
    EXPECT_EQ(driver::SetDeviceAccess(*table_, at, mapping.bytes, mapping.device, CU_MEM_ACCESS_FLAGS_PROT_READ),
              CUDA_SUCCESS);
    EXPECT_TRUE(shares_.MarkResident(0, kContent, mapping.handle));
    return at;
  }
  // What a later restore does: maps the resident allocation read-only at its own address.
  CUdeviceptr MapShared() {
    const CUdeviceptr at = second_->base() + 2 * second_->granularity();
    const CUmemGenericAllocationHandle handle = shares_.Acquire(0, kContent, bytes_);
    EXPECT_NE(handle, 0u);
    EXPECT_TRUE(second_->MapSharedAt(at, bytes_, handle, &shares_, kContent).ok());
    return at;
  }

  static constexpr const char* kContent = "3 chunks: a, b, c";
  std::shared_ptr<driver::DriverTable> table_;
  CUcontext context_ = nullptr;
  SharedBuffers shares_;
  std::unique_ptr<InstanceAddressSpace> first_;
  std::unique_ptr<InstanceAddressSpace> second_;
  uint64_t bytes_ = 0;
  std::vector<unsigned char> pattern_;
};

TEST_F(SharedBuffersTest, TwoRangesMapOnePhysicalAllocation) {
  const uint64_t before = Used();
  const CUdeviceptr a = LoadAndPublish();
  EXPECT_EQ(Used() - before, bytes_);
  const CUdeviceptr b = MapShared();
  EXPECT_EQ(Used() - before, bytes_) << "the second mapping holds no memory of its own";
  EXPECT_EQ(Read(a), pattern_);
  EXPECT_EQ(Read(b), pattern_);
  const SharedBuffers::Stats s = shares_.stats();
  EXPECT_EQ(s.allocations, 1u);
  EXPECT_EQ(s.bytes, bytes_);
  EXPECT_EQ(s.references, 2u);
  EXPECT_EQ(s.shared_bytes, bytes_);
}

TEST_F(SharedBuffersTest, TheFirstRangeEndingLeavesTheBytesToTheOthersAndTheLastFreesThem) {
  const uint64_t before = Used();
  LoadAndPublish();
  const CUdeviceptr b = MapShared();
  ASSERT_TRUE(first_->ZeroAndUnmapAll().ok());
  EXPECT_EQ(Read(b), pattern_) << "not zeroed while another range maps it";
  EXPECT_EQ(Used() - before, bytes_);
  EXPECT_EQ(shares_.stats().references, 1u);
  // A third range still gets it.
  auto third = Space();
  ASSERT_NE(third, nullptr);
  const CUmemGenericAllocationHandle handle = shares_.Acquire(0, kContent, bytes_);
  ASSERT_NE(handle, 0u);
  ASSERT_TRUE(third->MapSharedAt(third->base(), bytes_, handle, &shares_, kContent).ok());
  third.reset();  // unmapped by its destructor: a reference dropped, the memory kept
  EXPECT_EQ(Read(b), pattern_);
  ASSERT_TRUE(second_->ZeroAndUnmapAll().ok());
  EXPECT_EQ(Used(), before) << "the last range released it";
  EXPECT_EQ(shares_.stats().allocations, 0u);
  EXPECT_EQ(shares_.Acquire(0, kContent, bytes_), 0u);
}

TEST_F(SharedBuffersTest, OnlyOneAllocationPerContentAndSizeAndDevice) {
  LoadAndPublish();
  // Another allocation of the same content stays private.
  const CUdeviceptr at = second_->base();
  ASSERT_TRUE(second_->MapAt(at, bytes_).ok());
  InstanceAddressSpace::ShareableMapping mapping;
  EXPECT_FALSE(second_->RegisterShared(at, &shares_, kContent, &mapping));
  // Sub-allocations cannot be shared: they share their granule with others.
  auto small = second_->Allocate(4096);
  ASSERT_TRUE(small.ok());
  EXPECT_FALSE(second_->RegisterShared(*small, &shares_, "small", &mapping));
  // A different size or device is a different content.
  EXPECT_EQ(shares_.Acquire(0, kContent, bytes_ + first_->granularity()), 0u);
  EXPECT_EQ(shares_.Acquire(1, kContent, bytes_), 0u);
  EXPECT_EQ(shares_.stats().references, 1u);
}

TEST_F(SharedBuffersTest, AMappingThatFailsDropsItsReference) {
  LoadAndPublish();
  const CUmemGenericAllocationHandle handle = shares_.Acquire(0, kContent, bytes_);
  ASSERT_NE(handle, 0u);
  // Not granule-aligned.
  Status s = second_->MapSharedAt(second_->base() + 4096, bytes_, handle, &shares_, kContent);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_EQ(shares_.stats().references, 1u);
}

// Copy-on-write: the range that is to write its shared buffer gets a private copy at the same
// address, with the same bytes, writable; the others keep reading the shared bytes.
TEST_F(SharedBuffersTest, APrivateCopyReplacesTheSharedMappingAtTheSameAddress) {
  const uint64_t before = Used();
  const CUdeviceptr a = LoadAndPublish();
  const CUdeviceptr b = MapShared();
  ASSERT_TRUE(second_->MakePrivate(b).ok());
  EXPECT_EQ(Used() - before, 2 * bytes_);
  EXPECT_EQ(Read(b), pattern_);
  ASSERT_EQ(table_->cuMemsetD8(b, 0xab, bytes_), CUDA_SUCCESS);
  ASSERT_EQ(table_->cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(Read(b), std::vector<unsigned char>(bytes_, 0xab));
  EXPECT_EQ(Read(a), pattern_);
  EXPECT_EQ(shares_.stats().references, 1u);
  EXPECT_EQ(second_->MakePrivate(b).code(), StatusCode::kNotFound) << "private already";
  ASSERT_TRUE(second_->ZeroAndUnmapAll().ok());
  EXPECT_EQ(Used() - before, bytes_) << "the copy is freed with its range, the shared one stays";
}

// An allocation withdrawn while it loads (its instance is to write it) is handed to nobody.
TEST_F(SharedBuffersTest, AWithdrawnAllocationIsNotHandedOut) {
  const CUdeviceptr at = first_->base() + 8 * first_->granularity();  // clear of LoadAndPublish's
  ASSERT_TRUE(first_->MapAt(at, bytes_).ok());
  InstanceAddressSpace::ShareableMapping mapping;
  ASSERT_TRUE(first_->RegisterShared(at, &shares_, kContent, &mapping));
  EXPECT_TRUE(shares_.Withdraw(0, kContent, mapping.handle));
  first_->ForgetShare(at);
  EXPECT_FALSE(shares_.MarkResident(0, kContent, mapping.handle));
  EXPECT_EQ(shares_.Acquire(0, kContent, bytes_), 0u);
  EXPECT_EQ(shares_.stats().allocations, 0u);
  // Resident ones cannot be withdrawn: their instances make private copies instead.
  LoadAndPublish();
  EXPECT_FALSE(shares_.Withdraw(0, kContent, mapping.handle));
  EXPECT_EQ(shares_.stats().allocations, 1u);
}

// A withdrawn allocation's registrant withdrawing again (or publishing) after another allocation
// registered the same content leaves that one registered: it is the other instance's.
TEST_F(SharedBuffersTest, AWithdrawOfAnotherAllocationsContentChangesNothing) {
  const CUdeviceptr at = first_->base() + 8 * first_->granularity();
  ASSERT_TRUE(first_->MapAt(at, bytes_).ok());
  InstanceAddressSpace::ShareableMapping withdrawn;
  ASSERT_TRUE(first_->RegisterShared(at, &shares_, kContent, &withdrawn));
  ASSERT_TRUE(shares_.Withdraw(0, kContent, withdrawn.handle));
  first_->ForgetShare(at);
  // Another instance registers the content and loads it.
  const CUdeviceptr other = second_->base();
  ASSERT_TRUE(second_->MapAt(other, bytes_).ok());
  InstanceAddressSpace::ShareableMapping registered;
  ASSERT_TRUE(second_->RegisterShared(other, &shares_, kContent, &registered));
  ASSERT_NE(registered.handle, withdrawn.handle);
  EXPECT_FALSE(shares_.Withdraw(0, kContent, withdrawn.handle));
  EXPECT_FALSE(shares_.MarkResident(0, kContent, withdrawn.handle));
  EXPECT_EQ(shares_.stats().allocations, 1u) << "the other instance's registration stays";
  EXPECT_EQ(shares_.Acquire(0, kContent, bytes_), 0u) << "and is not resident before its own load";
  EXPECT_TRUE(shares_.MarkResident(0, kContent, registered.handle));
  EXPECT_EQ(shares_.Acquire(0, kContent, bytes_), registered.handle);
}

// Copy-on-write with no other instance mapping the allocation: it is made writable where it is.
TEST_F(SharedBuffersTest, TheSoleMappingOfASharedAllocationIsMadeWritableWithoutACopy) {
  const uint64_t before = Used();
  const CUdeviceptr a = LoadAndPublish();
  ASSERT_TRUE(first_->MakePrivate(a).ok());
  EXPECT_EQ(Used() - before, bytes_) << "no copy made";
  EXPECT_EQ(Read(a), pattern_);
  ASSERT_EQ(table_->cuMemsetD8(a, 0xcd, bytes_), CUDA_SUCCESS);
  ASSERT_EQ(table_->cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(Read(a), std::vector<unsigned char>(bytes_, 0xcd));
  EXPECT_EQ(shares_.stats().allocations, 0u) << "not handed out any more";
  EXPECT_EQ(shares_.Acquire(0, kContent, bytes_), 0u);
  ASSERT_TRUE(first_->ZeroAndUnmapAll().ok());
  EXPECT_EQ(Used(), before);
}

TEST_F(SharedBuffersTest, AFunctionWhoseWriteFaultedStopsSharing) {
  EXPECT_TRUE(shares_.Enabled("llama"));
  shares_.Disable("llama");
  EXPECT_FALSE(shares_.Enabled("llama"));
  EXPECT_TRUE(shares_.Enabled("moe"));
  EXPECT_EQ(shares_.stats().disabled_functions, 1u);
}

}  // namespace
}  // namespace phos::runtime
