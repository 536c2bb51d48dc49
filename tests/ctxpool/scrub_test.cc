// Scrub on return (docs/design.md D11): what one tenant left in a context is gone before the next tenant
// leases it, and 1,000 lease/return cycles leak nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

#include "counting_driver.h"
#include "phos/ctxpool/context_pool.h"
#include "phos/driver/physical_memory.h"

namespace phos::ctxpool {
namespace {

using namespace std::chrono_literals;

constexpr uint32_t kPattern = 0xC0FFEE17;
const std::vector<size_t> kTenantSizes = {4096, 100000, 1u << 20, 3u << 20};

// Makes the lease's context current for a scope.
class Current {
 public:
  Current(driver::DriverTable& d, const ContextLease& lease) : d_(d) {
    EXPECT_EQ(d_.cuCtxPushCurrent(lease.context()), CUDA_SUCCESS);
  }
  ~Current() { d_.cuCtxPopCurrent(nullptr); }

 private:
  driver::DriverTable& d_;
};

class ScrubTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    driver_ = testing::OpenCountingDriver(&counters_);
    ASSERT_NE(driver_, nullptr);
  }

  // Tenant A: allocates kTenantSizes, writes kPattern everywhere, and records it all.
  void WritePattern(ContextLease& lease) {
    driver::DriverTable& d = *driver_;
    Current current(d, lease);
    for (size_t bytes : kTenantSizes) {
      CUdeviceptr ptr = 0;
      ASSERT_EQ(d.cuMemAlloc(&ptr, bytes), CUDA_SUCCESS);
      std::vector<uint32_t> pattern(bytes / 4 + 1, kPattern);
      ASSERT_EQ(d.cuMemcpyHtoD(ptr, pattern.data(), bytes), CUDA_SUCCESS);
      lease.tenant().allocations.push_back({ptr, bytes});
    }
  }

  std::shared_ptr<driver::DriverTable> driver_;
  testing::DriverCounters* counters_ = nullptr;
};

TEST_P(ScrubTest, NextTenantNeverSeesThePattern) {
  auto pool =
      ContextPool::Open({.min_ready = 1, .max_contexts = 1, .zero_on_scrub = GetParam()}, driver_);
  ASSERT_TRUE(pool.ok());
  uint64_t a_context;
  {
    Result<ContextLease> a = (*pool)->Lease();
    ASSERT_TRUE(a.ok());
    a_context = a->context_id();
    WritePattern(*a);
  }
  ASSERT_TRUE((*pool)->WaitIdle(10s));
  Result<ContextLease> b = (*pool)->Lease();
  ASSERT_TRUE(b.ok());
  ASSERT_EQ(b->context_id(), a_context);  // the same context, scrubbed
  driver::DriverTable& d = *driver_;
  Current current(d, *b);
  for (size_t bytes : kTenantSizes) {
    CUdeviceptr ptr = 0;
    ASSERT_EQ(d.cuMemAlloc(&ptr, bytes), CUDA_SUCCESS);
    std::vector<uint8_t> seen(bytes);
    ASSERT_EQ(d.cuMemcpyDtoH(seen.data(), ptr, bytes), CUDA_SUCCESS);
    size_t pattern_bytes = 0;
    for (size_t i = 0; i < bytes; ++i) {
      pattern_bytes += seen[i] == reinterpret_cast<const uint8_t*>(&kPattern)[i % 4] ? 1 : 0;
    }
    EXPECT_LT(pattern_bytes, bytes / 16)
        << "tenant B's allocation of " << bytes << " bytes holds tenant A's pattern";
    EXPECT_EQ(std::count(seen.begin(), seen.end(), 0), static_cast<std::ptrdiff_t>(bytes)) << bytes;
    b->tenant().allocations.push_back({ptr, bytes});
  }
}

INSTANTIATE_TEST_SUITE_P(ZeroOnScrub, ScrubTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Memset" : "FreshPages";
                         });

class ScrubStateTest : public ScrubTest {};

TEST_F(ScrubStateTest, TenantStreamsEventsHandlesAndModesAreGone) {
  auto pool = ContextPool::Open({.min_ready = 1, .max_contexts = 1}, driver_);
  ASSERT_TRUE(pool.ok());
  driver::DriverTable& d = *driver_;
  int streams_before = counters_->streams.load();
  int handles_before = counters_->blas_handles.load();
  CUstream stream = nullptr;
  CUevent event = nullptr;
  {
    Result<ContextLease> a = (*pool)->Lease();
    ASSERT_TRUE(a.ok());
    handles_before = counters_->blas_handles.load();
    Current current(d, *a);
    ASSERT_EQ(d.cuStreamCreate(&stream, 0), CUDA_SUCCESS);
    ASSERT_EQ(d.cuEventCreate(&event, 0), CUDA_SUCCESS);
    cublasHandle_t extra = nullptr;
    ASSERT_EQ(d.cublasCreate(&extra), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(d.cublasSetStream(a->blas_handle(), reinterpret_cast<cudaStream_t>(stream)),
              CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(d.cublasSetMathMode(a->blas_handle(), CUBLAS_TF32_TENSOR_OP_MATH), CUBLAS_STATUS_SUCCESS);
    a->tenant().streams.push_back(stream);
    a->tenant().events.push_back(event);
    a->tenant().blas_handles.push_back(extra);
  }
  ASSERT_TRUE((*pool)->WaitIdle(10s));
  EXPECT_EQ(counters_->streams.load(), streams_before);
  EXPECT_EQ(counters_->blas_handles.load(), handles_before);
  Result<ContextLease> b = (*pool)->Lease();
  ASSERT_TRUE(b.ok());
  Current current(d, *b);
  EXPECT_NE(d.cuStreamQuery(stream), CUDA_SUCCESS);
  EXPECT_NE(d.cuEventQuery(event), CUDA_SUCCESS);
  cudaStream_t blas_stream = reinterpret_cast<cudaStream_t>(1);
  ASSERT_EQ(d.cublasGetStream(b->blas_handle(), &blas_stream), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(blas_stream, nullptr);
  cublasMath_t mode = CUBLAS_TF32_TENSOR_OP_MATH;
  ASSERT_EQ(d.cublasGetMathMode(b->blas_handle(), &mode), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(mode, CUBLAS_DEFAULT_MATH);
  EXPECT_EQ((*pool)->Stats().scrub_failures, 0u);
}

// Physical memory a tenant's range no longer maps (a migration's source, TenantResources::unmapped),
// watched through a second mapping of its own: the witness keeps the memory alive past its release
// and shows what the scrub left in it.
class UnmappedMemoryTest : public ScrubTest {
 protected:
  static constexpr size_t kBytes = 2u << 20;

  size_t Used() {
    size_t free = 0, total = 0;
    EXPECT_EQ(driver_->cuMemGetInfo(&free, &total), CUDA_SUCCESS);
    return total - free;
  }
  // In `lease`'s context: memory holding kPattern, mapped only at witness_, handed to the scrub.
  void HandOver(ContextLease& lease) {
    driver::DriverTable& d = *driver_;
    Current current(d, lease);
    used_before_ = Used();
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    CUmemGenericAllocationHandle handle = 0;
    ASSERT_EQ(d.cuMemCreate(&handle, kBytes, &prop, 0), CUDA_SUCCESS);
    ASSERT_EQ(d.cuMemAddressReserve(&witness_, kBytes, 0, 0, 0), CUDA_SUCCESS);
    ASSERT_EQ(d.cuMemMap(witness_, kBytes, 0, handle, 0), CUDA_SUCCESS);
    ASSERT_EQ(driver::SetDeviceAccess(d, witness_, kBytes, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE), CUDA_SUCCESS);
    std::vector<uint32_t> pattern(kBytes / 4, kPattern);
    ASSERT_EQ(d.cuMemcpyHtoD(witness_, pattern.data(), kBytes), CUDA_SUCCESS);
    lease.tenant().unmapped.push_back({handle, kBytes, 0});
  }
  // In `lease`'s context: the memory reads zero, and goes with the witness, its last mapping.
  void ExpectZeroedAndReleased(ContextLease& lease) {
    driver::DriverTable& d = *driver_;
    Current current(d, lease);
    std::vector<uint8_t> seen(kBytes, 0xff);
    ASSERT_EQ(d.cuMemcpyDtoH(seen.data(), witness_, kBytes), CUDA_SUCCESS);
    EXPECT_EQ(std::count(seen.begin(), seen.end(), 0), static_cast<std::ptrdiff_t>(kBytes));
    ASSERT_EQ(d.cuMemUnmap(witness_, kBytes), CUDA_SUCCESS);
    ASSERT_EQ(d.cuMemAddressFree(witness_, kBytes), CUDA_SUCCESS);
    EXPECT_EQ(Used(), used_before_);
  }

  CUdeviceptr witness_ = 0;
  size_t used_before_ = 0;
};

// The scrub zeroes it through an address of its own, then releases it.
TEST_F(UnmappedMemoryTest, IsZeroedThenReleasedByTheScrub) {
  auto pool = ContextPool::Open({.min_ready = 1, .max_contexts = 1}, driver_);
  ASSERT_TRUE(pool.ok());
  {
    Result<ContextLease> a = (*pool)->Lease();
    ASSERT_TRUE(a.ok());
    ASSERT_NO_FATAL_FAILURE(HandOver(*a));
  }
  ASSERT_TRUE((*pool)->WaitIdle(10s));
  EXPECT_EQ((*pool)->Stats().scrub_failures, 0u);
  Result<ContextLease> b = (*pool)->Lease();
  ASSERT_TRUE(b.ok());
  ExpectZeroedAndReleased(*b);
}

// A scrub that fails (the context is destroyed) still zeroes and releases it: destroying a context
// releases no physical allocation.
TEST_F(UnmappedMemoryTest, IsZeroedAndReleasedWhenTheScrubFails) {
  auto pool = ContextPool::Open({.min_ready = 1, .max_contexts = 1}, driver_);
  ASSERT_TRUE(pool.ok());
  {
    Result<ContextLease> a = (*pool)->Lease();
    ASSERT_TRUE(a.ok());
    ASSERT_NO_FATAL_FAILURE(HandOver(*a));
    a->tenant().allocations.push_back({0x1000, 4096});  // not this context's: the scrub fails
  }
  ASSERT_TRUE((*pool)->WaitUntil([](const PoolStats& s) { return s.ready == 1 && s.scrub_failures == 1; }, 10s));
  Result<ContextLease> b = (*pool)->Lease();
  ASSERT_TRUE(b.ok());
  ExpectZeroedAndReleased(*b);
}

TEST_F(ScrubStateTest, ContextThatFailsItsScrubIsDestroyedNotReused) {
  auto pool = ContextPool::Open({.min_ready = 1, .max_contexts = 1}, driver_);
  ASSERT_TRUE(pool.ok());
  int contexts_before = counters_->contexts.load();
  uint64_t first;
  {
    Result<ContextLease> a = (*pool)->Lease();
    ASSERT_TRUE(a.ok());
    first = a->context_id();
    contexts_before = counters_->contexts.load();
    // Not an allocation of this context: cuMemFree (or the memset) fails, the scrub with it.
    a->tenant().allocations.push_back({0x1000, 4096});
  }
  // The scrub fails, the context is destroyed and the refill makes its replacement.
  ASSERT_TRUE((*pool)->WaitUntil([](const PoolStats& s) { return s.ready == 1; }, 10s));
  PoolStats m = (*pool)->Stats();
  EXPECT_EQ(m.scrub_failures, 1u);
  EXPECT_EQ(m.destroyed, 1u);
  EXPECT_EQ(m.created, 2u);  // the refill replaced it
  EXPECT_EQ(counters_->contexts.load(), contexts_before);
  Result<ContextLease> b = (*pool)->Lease();
  ASSERT_TRUE(b.ok());
  EXPECT_NE(b->context_id(), first);
}

TEST_F(ScrubStateTest, ChurnOfAThousandLeasesLeaksNothing) {
  int contexts_at_open = counters_->contexts.load(), handles_at_open = counters_->blas_handles.load();
  auto pool = ContextPool::Open({.min_ready = 2, .max_contexts = 4}, driver_);
  ASSERT_TRUE(pool.ok());
  ASSERT_TRUE((*pool)->WaitIdle(10s));
  driver::DriverTable& d = *driver_;
  auto free_bytes = [&] {
    Result<ContextLease> probe = (*pool)->Lease();
    EXPECT_TRUE(probe.ok());
    Current current(d, *probe);
    size_t free = 0, total = 0;
    EXPECT_EQ(d.cuMemGetInfo(&free, &total), CUDA_SUCCESS);
    return free;
  };
  size_t baseline = free_bytes();
  ASSERT_TRUE((*pool)->WaitIdle(10s));
  int streams = counters_->streams.load();
  for (int i = 0; i < 1000; ++i) {
    Result<ContextLease> lease = (*pool)->Lease();
    ASSERT_TRUE(lease.ok()) << i << ": " << lease.status().ToString();
    Current current(d, *lease);
    CUdeviceptr ptr = 0;
    ASSERT_EQ(d.cuMemAlloc(&ptr, 65536), CUDA_SUCCESS);
    ASSERT_EQ(d.cuMemsetD8(ptr, 0x5a, 65536), CUDA_SUCCESS);
    lease->tenant().allocations.push_back({ptr, 65536});
    CUstream stream = nullptr;
    ASSERT_EQ(d.cuStreamCreate(&stream, 0), CUDA_SUCCESS);
    lease->tenant().streams.push_back(stream);
  }
  ASSERT_TRUE((*pool)->WaitIdle(30s));
  PoolStats m = (*pool)->Stats();
  EXPECT_EQ(m.scrub_failures, 0u);
  EXPECT_EQ(m.leases, 1001u);
  EXPECT_LE(m.created, 4u);
  EXPECT_EQ(counters_->streams.load(), streams);
  // Contexts and handles: exactly what the pool holds now, one handle each.
  int held = static_cast<int>(m.ready + m.leased + m.scrubbing + m.creating);
  EXPECT_EQ(held, static_cast<int>(m.created - m.destroyed));
  EXPECT_EQ(counters_->contexts.load() - contexts_at_open, held);
  EXPECT_EQ(counters_->blas_handles.load() - handles_at_open, held);
  EXPECT_EQ(free_bytes(), baseline);
}

}  // namespace
}  // namespace phos::ctxpool
