// The pool's lease path, sizes, metrics and failure handling (docs/design.md D11).
#include "phos/ctxpool/context_pool.h"

#include <gtest/gtest.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "../testing/wait_until.h"
#include "counting_driver.h"

namespace phos::ctxpool {
namespace {

using namespace std::chrono_literals;
using testing::DriverCounters;

// The one series of family `name` in `registry`, as collected; none when there is not exactly one.
std::optional<prometheus::ClientMetric> FindMetric(const prometheus::Registry& registry,
                                                   const std::string& name) {
  for (const prometheus::MetricFamily& family : registry.Collect()) {
    if (family.name == name && family.metric.size() == 1) return family.metric[0];
  }
  return std::nullopt;
}

class ContextPoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    driver_ = testing::OpenCountingDriver(&counters_);
    ASSERT_NE(driver_, nullptr);
    counters_->fail_context_creates = 0;
    counters_->fail_blas_creates = 0;
    base_contexts_ = counters_->contexts.load();
    base_handles_ = counters_->blas_handles.load();
  }

  std::unique_ptr<ContextPool> Open(PoolOptions options,
                                    std::shared_ptr<prometheus::Registry> registry = nullptr) {
    auto pool = ContextPool::Open(options, driver_, std::move(registry));
    EXPECT_TRUE(pool.ok()) << pool.status().ToString();
    return pool.ok() ? std::move(*pool) : nullptr;
  }

  std::shared_ptr<driver::DriverTable> driver_;
  DriverCounters* counters_ = nullptr;
  int base_contexts_ = 0;
  int base_handles_ = 0;
};

TEST_F(ContextPoolTest, RefillsToMinimumInTheBackground) {
  auto pool = Open({.min_ready = 3, .max_contexts = 5});
  ASSERT_TRUE(pool->WaitIdle(10s));
  PoolStats m = pool->Stats();
  EXPECT_EQ(m.ready, 3u);
  EXPECT_EQ(m.created, 3u);
  EXPECT_EQ(counters_->contexts.load() - base_contexts_, 3);
  EXPECT_EQ(counters_->blas_handles.load() - base_handles_, 3);
  EXPECT_GT(m.create_seconds_total, 0);
}

TEST_F(ContextPoolTest, LeaseIsAHitWithAReadyContextAndRefillReplacesIt) {
  auto pool = Open({.min_ready = 2, .max_contexts = 4});
  ASSERT_TRUE(pool->WaitIdle(10s));
  Result<ContextLease> lease = pool->Lease();
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  EXPECT_NE(lease->context(), nullptr);
  EXPECT_NE(lease->blas_handle(), nullptr);
  EXPECT_EQ(lease->device(), 0);
  ASSERT_TRUE(pool->WaitIdle(10s));
  PoolStats m = pool->Stats();
  EXPECT_EQ(m.hits, 1u);
  EXPECT_EQ(m.misses, 0u);
  EXPECT_EQ(m.leased, 1u);
  EXPECT_EQ(m.ready, 2u);  // refilled behind the lease
  EXPECT_EQ(m.created, 3u);
}

TEST_F(ContextPoolTest, ReturnedContextIsScrubbedThenLeasedAgain) {
  auto pool = Open({.min_ready = 1, .max_contexts = 1});
  ASSERT_TRUE(pool->WaitIdle(10s));
  uint64_t first_id;
  {
    Result<ContextLease> lease = pool->Lease();
    ASSERT_TRUE(lease.ok());
    first_id = lease->context_id();
  }
  ASSERT_TRUE(pool->WaitIdle(10s));
  Result<ContextLease> again = pool->Lease();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->context_id(), first_id);
  PoolStats m = pool->Stats();
  EXPECT_EQ(m.returns, 1u);
  EXPECT_EQ(m.scrubs, 1u);
  EXPECT_EQ(m.hits, 2u);
  EXPECT_EQ(m.created, 1u);
}

TEST_F(ContextPoolTest, MissBelowMaximumCreatesSynchronously) {
  auto pool = Open({.min_ready = 0, .max_contexts = 2});
  Result<ContextLease> lease = pool->Lease();
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  PoolStats m = pool->Stats();
  EXPECT_EQ(m.misses, 1u);
  EXPECT_EQ(m.miss_waits, 0u);
  EXPECT_EQ(m.created, 1u);
}

TEST_F(ContextPoolTest, FreshLeaseCreatesAContextEvenWithReadyOnes) {
  auto pool = Open({.min_ready = 1, .max_contexts = 1});
  ASSERT_TRUE(pool->WaitIdle(5s));
  uint64_t created = pool->Stats().created;
  Result<ContextLease> fresh = pool->LeaseFresh();
  ASSERT_TRUE(fresh.ok()) << fresh.status().ToString();
  PoolStats m = pool->Stats();
  EXPECT_EQ(m.created, created + 1);  // beyond max_contexts: what a process without the pool pays
  EXPECT_EQ(m.misses, 1u);
  Result<ContextLease> pooled = pool->Lease();  // the ready one is still there
  ASSERT_TRUE(pooled.ok()) << pooled.status().ToString();
  EXPECT_NE(pooled->context(), fresh->context());
  EXPECT_EQ(pool->Stats().hits, 1u);
}

// A fresh lease is made beyond max_contexts; returned, it is scrubbed and destroyed rather than
// kept, or each fresh lease (a cold-boot, stop-the-world or no-pool restore) would leave the pool
// one context larger for good.
TEST_F(ContextPoolTest, AFreshLeaseBeyondTheMaximumIsDestroyedWhenReturned) {
  auto pool = Open({.min_ready = 1, .max_contexts = 1});
  ASSERT_TRUE(pool->WaitIdle(5s));
  for (int i = 0; i < 3; ++i) {
    Result<ContextLease> fresh = pool->LeaseFresh();
    ASSERT_TRUE(fresh.ok()) << fresh.status().ToString();
    fresh->Return();
    ASSERT_TRUE(pool->WaitIdle(5s));
    PoolStats m = pool->Stats();
    EXPECT_EQ(m.destroyed, static_cast<uint64_t>(i + 1));
    EXPECT_EQ(m.ready, 1u) << "the pool holds its maximum, not one more per fresh lease";
    EXPECT_EQ(m.scrub_failures, 0u);
  }
}

TEST_F(ContextPoolTest, MaximumIsNeverExceededAndAMissAtTheMaximumWaitsForAReturn) {
  auto pool = Open({.min_ready = 2, .max_contexts = 2, .lease_timeout = 5000ms});
  ASSERT_TRUE(pool->WaitIdle(10s));
  Result<ContextLease> a = pool->Lease();
  Result<ContextLease> b = pool->Lease();
  ASSERT_TRUE(a.ok() && b.ok());
  // Returned once the third lease is counted as waiting at the maximum, not after some time.
  std::thread returner([&] {
    pool->WaitUntil([](const PoolStats& s) { return s.miss_waits == 1; }, 10s);
    a->Return();
  });
  Result<ContextLease> c = pool->Lease();
  returner.join();
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  PoolStats m = pool->Stats();
  EXPECT_EQ(m.created, 2u);
  EXPECT_EQ(m.miss_waits, 1u);
  EXPECT_LE(counters_->contexts.load() - base_contexts_, 2);
}

TEST_F(ContextPoolTest, LeaseAtTheMaximumTimesOutWithAClearError) {
  auto pool = Open({.min_ready = 1, .max_contexts = 1, .lease_timeout = 30ms});
  Result<ContextLease> a = pool->Lease();
  ASSERT_TRUE(a.ok());
  Result<ContextLease> b = pool->Lease();
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(b.status().message().find("stayed leased"), std::string::npos) << b.status().message();
  EXPECT_EQ(pool->Stats().lease_failures, 1u);
}

// A hit makes no driver call (what keeps it in microseconds: ctxpool_bench holds the 50 us target;
// a unit test asserts no time) and every lease is timed in the latency histogram.
TEST_F(ContextPoolTest, LeaseHitsMakeNoDriverCallAndAreTimed) {
  auto registry = std::make_shared<prometheus::Registry>();
  auto pool = Open({.min_ready = 4, .max_contexts = 4}, registry);
  ASSERT_TRUE(pool->WaitIdle(10s));
  int contexts = counters_->contexts.load(), handles = counters_->blas_handles.load();
  for (int i = 0; i < 200; ++i) {
    Result<ContextLease> lease = pool->Lease();
    ASSERT_TRUE(lease.ok());
    lease->Return();
    ASSERT_TRUE(pool->WaitIdle(10s));
  }
  PoolStats m = pool->Stats();
  EXPECT_EQ(m.hits, 200u);
  EXPECT_EQ(m.created, 4u);
  EXPECT_EQ(counters_->contexts.load(), contexts);
  EXPECT_EQ(counters_->blas_handles.load(), handles);
  std::optional<prometheus::ClientMetric> latency =
      FindMetric(*registry, "phos_ctxpool_lease_latency_seconds");
  ASSERT_TRUE(latency.has_value());
  EXPECT_EQ(latency->histogram.sample_count, 200u);
  EXPECT_GT(latency->histogram.sample_sum, 0);
}

TEST_F(ContextPoolTest, BadOptionsAreRefused) {
  EXPECT_EQ(ContextPool::Open({.max_contexts = 0}, driver_).status().code(),
            StatusCode::kInvalidArgument);
  auto too_many = ContextPool::Open({.min_ready = 5, .max_contexts = 2}, driver_);
  ASSERT_FALSE(too_many.ok());
  EXPECT_NE(too_many.status().message().find("min_ready (5) exceeds max_contexts (2)"), std::string::npos);
  auto no_device = ContextPool::Open({.device = 42}, driver_);
  ASSERT_FALSE(no_device.ok());
  EXPECT_NE(no_device.status().message().find("device 42 does not exist"), std::string::npos);
  EXPECT_FALSE(ContextPool::Open({}, nullptr).ok());
}

TEST_F(ContextPoolTest, FailingRefillIsCountedAndThePoolKeepsServing) {
  auto pool = Open({.min_ready = 2, .max_contexts = 4, .refill_retry_interval = 20ms});
  ASSERT_TRUE(pool->WaitIdle(10s));
  counters_->context_failure = CUDA_ERROR_OUT_OF_MEMORY;
  counters_->fail_context_creates = 3;
  std::vector<ContextLease> leases;
  for (int i = 0; i < 2; ++i) {
    Result<ContextLease> lease = pool->Lease();
    ASSERT_TRUE(lease.ok()) << lease.status().ToString();  // the two ready ones
    leases.push_back(std::move(*lease));
  }
  // The refill fails three times (out of memory), backs off, then recovers.
  ASSERT_TRUE(
      pool->WaitUntil([](const PoolStats& s) { return s.create_failures == 3 && s.ready == 2; }, 10s));
  PoolStats m = pool->Stats();
  EXPECT_EQ(m.create_failures, 3u);
  EXPECT_EQ(m.create_out_of_memory, 3u);
  EXPECT_EQ(m.ready, 2u);
  EXPECT_EQ(m.leased, 2u);
}

TEST_F(ContextPoolTest, FailingCreationOnAMissFailsThatLeaseOnly) {
  auto pool = Open({.min_ready = 0, .max_contexts = 2});
  counters_->context_failure = CUDA_ERROR_UNKNOWN;
  counters_->fail_context_creates = 1;
  Result<ContextLease> failed = pool->Lease();
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), StatusCode::kDeviceError);
  EXPECT_NE(failed.status().message().find("CUDA_ERROR_UNKNOWN"), std::string::npos)
      << failed.status().message();
  Result<ContextLease> next = pool->Lease();
  EXPECT_TRUE(next.ok()) << next.status().ToString();
  PoolStats m = pool->Stats();
  EXPECT_EQ(m.lease_failures, 1u);
  EXPECT_EQ(m.create_failures, 1u);
  EXPECT_EQ(m.leases, 1u);
}

TEST_F(ContextPoolTest, FailingCublasCreateDestroysTheNewContext) {
  auto pool = Open({.min_ready = 0, .max_contexts = 1});
  counters_->fail_blas_creates = 1;
  Result<ContextLease> failed = pool->Lease();
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), StatusCode::kOutOfMemory);
  EXPECT_NE(failed.status().message().find("CUBLAS_STATUS_ALLOC_FAILED"), std::string::npos);
  EXPECT_EQ(counters_->contexts.load(), base_contexts_);  // not leaked
  EXPECT_TRUE(pool->Lease().ok());
}

TEST_F(ContextPoolTest, DestroyingThePoolDestroysItsContextsAndLateReturnsToo) {
  auto pool = Open({.min_ready = 2, .max_contexts = 3});
  ASSERT_TRUE(pool->WaitIdle(10s));
  Result<ContextLease> lease = pool->Lease();
  ASSERT_TRUE(lease.ok());
  pool.reset();
  // Only the leased one is left, once a refill caught making one at shutdown (which shutdown does
  // not wait for) has destroyed what it made.
  EXPECT_TRUE(::phos::testing::WaitUntil([&] { return counters_->contexts.load() - base_contexts_ == 1; }))
      << counters_->contexts.load() - base_contexts_;
  lease->Return();
  EXPECT_EQ(counters_->contexts.load(), base_contexts_);
  EXPECT_EQ(counters_->blas_handles.load(), base_handles_);
}

TEST_F(ContextPoolTest, MetricsAsPrometheusText) {
  auto registry = std::make_shared<prometheus::Registry>();
  auto pool = Open({.min_ready = 1, .max_contexts = 2}, registry);
  ASSERT_TRUE(pool->WaitIdle(10s));
  ASSERT_TRUE(pool->Lease().ok());
  ASSERT_TRUE(pool->WaitIdle(10s));
  std::string text = prometheus::TextSerializer().Serialize(registry->Collect());
  EXPECT_NE(text.find("# TYPE phos_ctxpool_leases_total counter\n"), std::string::npos) << text;
  EXPECT_NE(text.find("phos_ctxpool_leases_total{device=\"0\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("# TYPE phos_ctxpool_lease_latency_seconds histogram\n"), std::string::npos) << text;
  EXPECT_NE(text.find("phos_ctxpool_lease_latency_seconds_bucket{device=\"0\",le=\"+Inf\"} 1\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("phos_ctxpool_contexts{device=\"0\",state=\"ready\"} "), std::string::npos) << text;
  // A second pool in the same registry shares the families: one HELP line each.
  auto second = Open({.min_ready = 0, .max_contexts = 1}, registry);
  ASSERT_NE(second, nullptr);
  text = prometheus::TextSerializer().Serialize(registry->Collect());
  size_t first_help = text.find("# HELP phos_ctxpool_leases_total ");
  ASSERT_NE(first_help, std::string::npos) << text;
  EXPECT_EQ(text.find("# HELP phos_ctxpool_leases_total ", first_help + 1), std::string::npos) << text;
}

}  // namespace
}  // namespace phos::ctxpool
