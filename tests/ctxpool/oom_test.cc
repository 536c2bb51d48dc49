// The pool on a device whose memory runs out for real (PHOS_SIMGPU_MEMORY=64M for this binary):
// it keeps leasing, and the scrub gives a tenant's memory back. simgpu contexts and cuBLAS handles
// take no device memory, so out-of-memory during refill itself is injected in
// context_pool_test.cc (FailingRefillIsCountedAndThePoolKeepsServing).
#include <gtest/gtest.h>

#include <chrono>
#include <vector>

#include "phos/ctxpool/context_pool.h"

namespace phos::ctxpool {
namespace {

using namespace std::chrono_literals;

size_t FreeBytes(driver::DriverTable& d, const ContextLease& lease) {
  EXPECT_EQ(d.cuCtxPushCurrent(lease.context()), CUDA_SUCCESS);
  size_t free = 0, total = 0;
  EXPECT_EQ(d.cuMemGetInfo(&free, &total), CUDA_SUCCESS);
  d.cuCtxPopCurrent(nullptr);
  return free;
}

TEST(ContextPoolOutOfMemoryTest, ExhaustedDeviceKeepsLeasingAndScrubGivesTheMemoryBack) {
  auto driver = driver::DriverTable::Open({.gpu = driver::GpuKind::kSim});
  ASSERT_TRUE(driver.ok());
  driver::DriverTable& d = **driver;
  auto pool = ContextPool::Open({.min_ready = 2, .max_contexts = 3}, *driver);
  ASSERT_TRUE(pool.ok());
  ASSERT_TRUE((*pool)->WaitIdle(10s));

  Result<ContextLease> hog = (*pool)->Lease();
  ASSERT_TRUE(hog.ok());
  size_t baseline = FreeBytes(d, *hog);
  ASSERT_LE(baseline, 64u << 20);
  ASSERT_EQ(d.cuCtxPushCurrent(hog->context()), CUDA_SUCCESS);
  CUresult r = CUDA_SUCCESS;
  while (r == CUDA_SUCCESS) {
    CUdeviceptr ptr = 0;
    r = d.cuMemAlloc(&ptr, 4u << 20);
    if (r == CUDA_SUCCESS) hog->tenant().allocations.push_back({ptr, 4u << 20});
  }
  d.cuCtxPopCurrent(nullptr);
  ASSERT_EQ(r, CUDA_ERROR_OUT_OF_MEMORY);
  ASSERT_GE(hog->tenant().allocations.size(), 10u);

  // The device is full; the pool still leases (a ready context, refilled behind it).
  Result<ContextLease> other = (*pool)->Lease();
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  ASSERT_EQ(d.cuCtxPushCurrent(other->context()), CUDA_SUCCESS);
  CUdeviceptr ptr = 0;
  EXPECT_EQ(d.cuMemAlloc(&ptr, 4u << 20), CUDA_ERROR_OUT_OF_MEMORY);
  d.cuCtxPopCurrent(nullptr);

  hog->Return();
  ASSERT_TRUE((*pool)->WaitIdle(10s));
  EXPECT_EQ(FreeBytes(d, *other), baseline);
  ASSERT_EQ(d.cuCtxPushCurrent(other->context()), CUDA_SUCCESS);
  EXPECT_EQ(d.cuMemAlloc(&ptr, 4u << 20), CUDA_SUCCESS);
  other->tenant().allocations.push_back({ptr, 4u << 20});
  d.cuCtxPopCurrent(nullptr);
  PoolStats m = (*pool)->Stats();
  EXPECT_EQ(m.scrub_failures, 0u);
  EXPECT_EQ(m.lease_failures, 0u);
}

}  // namespace
}  // namespace phos::ctxpool
