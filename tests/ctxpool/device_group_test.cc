// Device groups (ctxpool/communicator_pool.h): contexts on devices 0..N-1 and a communicator over
// exactly those contexts, made in the background, leased whole, scrubbed on return, reused, and
// destroyed when the scrub fails. Runs on simgpu with 2 devices (PHOS_SIMGPU_DEVICES=2).
#include <gtest/gtest.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "phos/ctxpool/communicator_pool.h"

namespace phos::ctxpool {
namespace {

using namespace std::chrono_literals;

constexpr uint32_t kPattern = 0x5EED1234;

// While one is in scope, cuCtxCreate of the driver table it was given blocks; afterwards it goes
// through to the real one. The entry stays replaced (the pool's threads read it without a lock),
// so give it a table of the test's own. The entry points are plain function pointers, so the
// state is global.
class HeldContextCreation {
 public:
  explicit HeldContextCreation(driver::DriverTable& driver) {
    real_create_ = driver.cuCtxCreate;
    held_ = true;
    driver.cuCtxCreate = [](CUcontext* ctx, CUctxCreateParams* params, unsigned int flags, CUdevice dev) {
      held_.wait(true);
      return real_create_(ctx, params, flags, dev);
    };
  }
  ~HeldContextCreation() {
    held_ = false;
    held_.notify_all();
  }
  HeldContextCreation(const HeldContextCreation&) = delete;
  HeldContextCreation& operator=(const HeldContextCreation&) = delete;

 private:
  static inline std::atomic<bool> held_{false};
  static inline decltype(driver::DriverTable::cuCtxCreate) real_create_ = nullptr;
};

class DeviceGroupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto driver = driver::DriverTable::Open({.gpu = driver::GpuKind::kSim});
    ASSERT_TRUE(driver.ok()) << driver.status().ToString();
    driver_ = std::move(*driver);
    ASSERT_TRUE(driver_->has_nccl());
    ASSERT_EQ(driver_->cuInit(0), CUDA_SUCCESS);
    int count = 0;
    ASSERT_EQ(driver_->cuDeviceGetCount(&count), CUDA_SUCCESS);
    ASSERT_EQ(count, 2) << "run with PHOS_SIMGPU_DEVICES=2";
  }

  std::unique_ptr<CommunicatorPool> Open(CommunicatorPoolOptions options) {
    auto pool = CommunicatorPool::Open(options, driver_);
    EXPECT_TRUE(pool.ok()) << pool.status().ToString();
    return pool.ok() ? std::move(*pool) : nullptr;
  }

  // Writes kPattern into a new allocation of `bytes` in the group's context `device`, recorded in
  // the tenant; returns its address.
  CUdeviceptr WritePattern(DeviceGroupLease& group, int device, size_t bytes) {
    driver::DriverTable& d = *driver_;
    EXPECT_EQ(d.cuCtxPushCurrent(group.context(device)), CUDA_SUCCESS);
    CUdeviceptr ptr = 0;
    EXPECT_EQ(d.cuMemAlloc(&ptr, bytes), CUDA_SUCCESS);
    std::vector<uint32_t> pattern(bytes / 4, kPattern);
    EXPECT_EQ(d.cuMemcpyHtoD(ptr, pattern.data(), bytes), CUDA_SUCCESS);
    d.cuCtxPopCurrent(nullptr);
    group.tenant(device).allocations.push_back({ptr, bytes});
    return ptr;
  }

  // An all-reduce on streams of the group's own contexts (what a function's tp-mlp layer does):
  // device d contributes d + 1 to every element, so every rank ends with 3.
  void ExpectAllReduceAddsUp(DeviceGroupLease& group) {
    driver::DriverTable& d = *driver_;
    const size_t n = 1024;
    CUdeviceptr buf[2];
    CUstream streams[2];
    for (int dev = 0; dev < 2; ++dev) {
      ASSERT_EQ(d.cuCtxPushCurrent(group.context(dev)), CUDA_SUCCESS);
      ASSERT_EQ(d.cuMemAlloc(&buf[dev], n * sizeof(float)), CUDA_SUCCESS);
      std::vector<float> v(n, static_cast<float>(dev + 1));
      ASSERT_EQ(d.cuMemcpyHtoD(buf[dev], v.data(), n * sizeof(float)), CUDA_SUCCESS);
      ASSERT_EQ(d.cuStreamCreate(&streams[dev], CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
      d.cuCtxPopCurrent(nullptr);
      group.tenant(dev).allocations.push_back({buf[dev], n * sizeof(float)});
      group.tenant(dev).streams.push_back(streams[dev]);
    }
    ASSERT_EQ(d.ncclGroupStart(), ncclSuccess);
    for (int dev = 0; dev < 2; ++dev) {
      ASSERT_EQ(d.cuCtxPushCurrent(group.context(dev)), CUDA_SUCCESS);
      ASSERT_EQ(
          d.ncclAllReduce(reinterpret_cast<void*>(buf[dev]), reinterpret_cast<void*>(buf[dev]), n, ncclFloat,
                          ncclSum, group.comm(dev), reinterpret_cast<cudaStream_t>(streams[dev])),
          ncclSuccess);
      d.cuCtxPopCurrent(nullptr);
    }
    ASSERT_EQ(d.ncclGroupEnd(), ncclSuccess);
    for (int dev = 0; dev < 2; ++dev) {
      ASSERT_EQ(d.cuCtxPushCurrent(group.context(dev)), CUDA_SUCCESS);
      ASSERT_EQ(d.cuStreamSynchronize(streams[dev]), CUDA_SUCCESS);
      std::vector<float> out(n);
      ASSERT_EQ(d.cuMemcpyDtoH(out.data(), buf[dev], n * sizeof(float)), CUDA_SUCCESS);
      d.cuCtxPopCurrent(nullptr);
      EXPECT_EQ(out[0], 3.0f);
      EXPECT_EQ(out[n - 1], 3.0f);
    }
  }

  std::shared_ptr<driver::DriverTable> driver_;
};

TEST_F(DeviceGroupTest, GroupIsMadeInTheBackgroundAndItsCommunicatorRunsOnItsContexts) {
  // Open returns while every context creation is held: it does not wait for a group.
  std::unique_ptr<CommunicatorPool> pool;
  {
    HeldContextCreation held(*driver_);
    pool = Open({});
    ASSERT_NE(pool, nullptr);
    EXPECT_EQ(pool->Stats().created, 0u) << "Open must not wait for a group";
  }
  Result<DeviceGroupLease> group = pool->Lease(2);
  ASSERT_TRUE(group.ok()) << group.status().ToString();
  ASSERT_EQ(group->size(), 2);
  EXPECT_NE(group->context(0), group->context(1));
  EXPECT_NE(group->blas_handle(0), nullptr);
  driver::DriverTable& d = *driver_;
  for (int rank = 0; rank < 2; ++rank) {
    int n = 0, r = -1;
    ASSERT_EQ(d.ncclCommCount(group->comm(rank), &n), ncclSuccess);
    ASSERT_EQ(d.ncclCommUserRank(group->comm(rank), &r), ncclSuccess);
    EXPECT_EQ(n, 2);
    EXPECT_EQ(r, rank);
  }
  ASSERT_NO_FATAL_FAILURE(ExpectAllReduceAddsUp(*group));
  PoolStats m = pool->Stats();
  EXPECT_EQ(m.leases, 1u);
  EXPECT_EQ(m.created, 1u);
  EXPECT_GT(m.create_seconds_total, 0);
}

TEST_F(DeviceGroupTest, ReturnedGroupIsScrubbedThenLeasedAgainAsAHit) {
  auto pool = Open({.min_ready = 1, .max_groups = 1});
  ASSERT_NE(pool, nullptr);
  uint64_t first = 0;
  CUdeviceptr written[2];
  const size_t bytes = 1u << 20;
  {
    Result<DeviceGroupLease> a = pool->Lease(2);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    first = a->group_id();
    for (int dev = 0; dev < 2; ++dev) written[dev] = WritePattern(*a, dev, bytes);
  }
  ASSERT_TRUE(pool->WaitIdle(30s));
  PoolStats m = pool->Stats();
  EXPECT_EQ(m.returns, 1u);
  EXPECT_EQ(m.scrubs, 1u);
  EXPECT_EQ(m.ready, 1u);
  Result<DeviceGroupLease> b = pool->Lease(2);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->group_id(), first);  // reused, not recreated
  EXPECT_EQ(pool->Stats().hits, m.hits + 1);
  EXPECT_EQ(pool->Stats().created, 1u);
  // Tenant A's memory is gone from both contexts, and the next tenant's allocations never show it.
  driver::DriverTable& d = *driver_;
  for (int dev = 0; dev < 2; ++dev) {
    ASSERT_EQ(d.cuCtxPushCurrent(b->context(dev)), CUDA_SUCCESS);
    CUdeviceptr base = 0;
    size_t size = 0;
    EXPECT_NE(d.cuMemGetAddressRange(&base, &size, written[dev]), CUDA_SUCCESS) << "device " << dev;
    CUdeviceptr ptr = 0;
    ASSERT_EQ(d.cuMemAlloc(&ptr, bytes), CUDA_SUCCESS);
    std::vector<uint32_t> seen(bytes / 4);
    ASSERT_EQ(d.cuMemcpyDtoH(seen.data(), ptr, bytes), CUDA_SUCCESS);
    EXPECT_EQ(std::count(seen.begin(), seen.end(), kPattern), 0) << "device " << dev;
    d.cuCtxPopCurrent(nullptr);
    b->tenant(dev).allocations.push_back({ptr, bytes});
  }
}

TEST_F(DeviceGroupTest, GroupThatFailsItsScrubIsDestroyedAndReplaced) {
  auto pool = Open({.min_ready = 1, .max_groups = 1});
  ASSERT_NE(pool, nullptr);
  uint64_t first = 0;
  {
    Result<DeviceGroupLease> a = pool->Lease(2);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    first = a->group_id();
    // Not an allocation of device 1's context: its scrub fails, and the whole group goes.
    a->tenant(1).allocations.push_back({0x1000, 4096});
  }
  // The scrub fails, the group is destroyed and the refill makes its replacement.
  ASSERT_TRUE(pool->WaitUntil([](const PoolStats& s) { return s.ready == 1; }, 30s));
  PoolStats m = pool->Stats();
  EXPECT_EQ(m.scrub_failures, 1u);
  EXPECT_EQ(m.destroyed, 1u);
  EXPECT_EQ(m.created, 2u);  // the refill replaced it
  Result<DeviceGroupLease> b = pool->Lease(2);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_NE(b->group_id(), first);
}

// A lessee that aborted the group's communicator (its tenant left a collective half-entered)
// forgets it: the group is destroyed on return rather than scrubbed back into the pool, and the
// refill makes a new one whose communicator works.
TEST_F(DeviceGroupTest, GroupWhoseCommunicatorWasAbortedIsDestroyedAndReplaced) {
  auto pool = Open({.min_ready = 1, .max_groups = 1});
  ASSERT_NE(pool, nullptr);
  driver::DriverTable& d = *driver_;
  uint64_t first = 0;
  {
    Result<DeviceGroupLease> a = pool->Lease(2);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    first = a->group_id();
    const CUdeviceptr buf = WritePattern(*a, 0, 4096);
    ASSERT_EQ(d.cuCtxPushCurrent(a->context(0)), CUDA_SUCCESS);
    ASSERT_EQ(d.ncclAllReduce(reinterpret_cast<void*>(buf), reinterpret_cast<void*>(buf), 1024, ncclFloat, ncclSum,
                              a->comm(0), nullptr),
              ncclSuccess);  // rank 1 never comes
    d.cuCtxPopCurrent(nullptr);
    for (int rank = 0; rank < 2; ++rank) ASSERT_EQ(d.ncclCommAbort(a->comm(rank)), ncclSuccess);
    a->ForgetCommunicator();
  }
  ASSERT_TRUE(pool->WaitUntil([](const PoolStats& s) { return s.ready == 1 && s.created == 2; }, 30s));
  PoolStats m = pool->Stats();
  EXPECT_EQ(m.destroyed, 1u);
  EXPECT_EQ(m.scrub_failures, 1u);
  Result<DeviceGroupLease> b = pool->Lease(2);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_NE(b->group_id(), first);
  ASSERT_NO_FATAL_FAILURE(ExpectAllReduceAddsUp(*b));
}

TEST_F(DeviceGroupTest, SmallerGroupSizeJoinsWhenFirstLeased) {
  auto pool = Open({.min_ready = 0});
  ASSERT_NE(pool, nullptr);
  Result<DeviceGroupLease> one = pool->Lease(1);
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  EXPECT_EQ(one->size(), 1);
  EXPECT_EQ(pool->Stats().misses, 1u);
}

TEST_F(DeviceGroupTest, GroupLargerThanTheNodeOrEmptyIsRefused) {
  auto pool = Open({.min_ready = 0});
  ASSERT_NE(pool, nullptr);
  Result<DeviceGroupLease> three = pool->Lease(3);
  ASSERT_FALSE(three.ok());
  EXPECT_EQ(three.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(three.status().message().find("2 device"), std::string::npos) << three.status().message();
  EXPECT_EQ(pool->Lease(0).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(DeviceGroupTest, BadOptionsAreRefused) {
  EXPECT_EQ(CommunicatorPool::Open({.initial_group_size = 3}, driver_).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(CommunicatorPool::Open({.min_ready = 3, .max_groups = 2}, driver_).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(CommunicatorPool::Open({.max_groups = 0}, driver_).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(CommunicatorPool::Open({}, nullptr).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(DeviceGroupTest, CancelledLeaseStopsWaiting) {
  // Nothing made ahead and at most one group, which is out: the second lease can only wait.
  auto pool = Open({.min_ready = 0, .max_groups = 1});
  ASSERT_NE(pool, nullptr);
  Result<DeviceGroupLease> held = pool->Lease(2);
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  std::atomic<bool> cancel{false};
  // Cancelled once the lease is counted as waiting, not after some time.
  std::thread canceller([&] {
    pool->WaitUntil([](const PoolStats& s) { return s.miss_waits == 2; }, 30s);
    cancel = true;
  });
  Result<DeviceGroupLease> waiting = pool->Lease(2, &cancel);
  canceller.join();
  ASSERT_FALSE(waiting.ok());
  EXPECT_EQ(waiting.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(waiting.status().message().find("cancelled"), std::string::npos);
}

TEST_F(DeviceGroupTest, MetricsAsPrometheusText) {
  auto registry = std::make_shared<prometheus::Registry>();
  auto pool = CommunicatorPool::Open({.min_ready = 0}, driver_, registry);
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  std::string text = prometheus::TextSerializer().Serialize(registry->Collect());
  EXPECT_NE(text.find("# TYPE phos_devgroup_leases_total counter"), std::string::npos) << text;
  EXPECT_NE(text.find("phos_devgroup_groups{state=\"ready\"} 0"), std::string::npos) << text;
  EXPECT_NE(text.find("# TYPE phos_devgroup_create_seconds histogram"), std::string::npos) << text;
}

}  // namespace
}  // namespace phos::ctxpool
