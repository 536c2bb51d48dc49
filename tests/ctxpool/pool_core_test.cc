// The pool core (ctxpool/src/pool_core.h) on its own, with fake items: keys refilled separately,
// waits that end by a count or a cancel, failed creations reported to the waiting lease, scrub
// failures replaced, shutdown and late returns, and the held-now gauges in the registry.
#include "pool_core.h"

#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

namespace phos::ctxpool::detail {
namespace {

using namespace std::chrono_literals;

struct FakeItem {
  int key = 0;
  uint64_t id = 0;
};
struct FakeTenant {
  bool fail_scrub = false;
};
using FakeCore = PoolCore<FakeItem, FakeTenant>;

class PoolCoreTest : public ::testing::Test {
 protected:
  std::shared_ptr<FakeCore> Start(PoolCoreOptions options, int initial_key = 1) {
    PoolOps<FakeItem, FakeTenant> ops{
        .create = [c = counts_](int key) -> Result<FakeItem> {
          if (c->fail_creates.load() > 0) {
            --c->fail_creates;
            return Status::OutOfMemory("fake device full");
          }
          ++c->live;
          return FakeItem{.key = key};
        },
        .scrub =
            [](const FakeItem&, const FakeTenant& tenant, bool) {
              return tenant.fail_scrub ? Status::DeviceError("fake scrub failed") : Status::Ok();
            },
        .destroy = [c = counts_](const FakeItem&) { --c->live; },
        .describe = [](int key) { return "item of " + std::to_string(key); }};
    options.name = "fake pool";
    auto core = std::make_shared<FakeCore>(std::move(options), std::move(ops), registry_,
                                           PoolMetricNames{.prefix = "fake", .items = "items"});
    core->Start(initial_key);
    return core;
  }

  double Gauge(const std::string& state) {
    for (const prometheus::MetricFamily& family : registry_->Collect()) {
      if (family.name != "fake_items") continue;
      for (const prometheus::ClientMetric& metric : family.metric) {
        for (const prometheus::ClientMetric::Label& label : metric.label) {
          if (label.name == "state" && label.value == state) return metric.gauge.value;
        }
      }
    }
    return -1;
  }

  std::shared_ptr<prometheus::Registry> registry_ = std::make_shared<prometheus::Registry>();
  // Shared with the pool's operations, so a refill thread that Shutdown left to finish a creation
  // never touches a destroyed fixture.
  struct Counts {
    std::atomic<int> live{0};
    std::atomic<int> fail_creates{0};
  };
  std::shared_ptr<Counts> counts_ = std::make_shared<Counts>();
};

TEST_F(PoolCoreTest, EachKeyIsRefilledAndALeasedKeyJoinsTheRefill) {
  auto core = Start({.min_ready = 1, .max_held = 2, .lease_timeout = 10s});
  ASSERT_TRUE(core->WaitIdle(10s));
  EXPECT_EQ(core->Stats().ready, 1u);
  Result<FakeItem> other = core->Lease(2, nullptr);  // nothing of key 2 yet: waits for the refill
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  EXPECT_EQ(other->key, 2);
  ASSERT_TRUE(core->WaitIdle(10s));
  PoolStats s = core->Stats();
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.miss_waits, 1u);
  EXPECT_EQ(s.ready, 2u);  // one of each key
  EXPECT_EQ(s.leased, 1u);
  EXPECT_EQ(Gauge("ready"), 2);
  EXPECT_EQ(Gauge("leased"), 1);
  core->Return(2, *other, {});
  core->Shutdown();
  EXPECT_EQ(counts_->live.load(), 0);
}

TEST_F(PoolCoreTest, CancelEndsTheWaitOfThatLeaseOnly) {
  auto core = Start({.min_ready = 0, .max_held = 1, .lease_timeout = 60s});
  Result<FakeItem> held = core->Lease(1, nullptr);
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  std::atomic<bool> cancel{false};
  std::thread canceller([&] {
    core->WaitUntil([](const PoolStats& s) { return s.miss_waits == 2; }, 30s);
    cancel = true;
  });
  Result<FakeItem> waiting = core->Lease(1, &cancel);
  canceller.join();
  ASSERT_FALSE(waiting.ok());
  EXPECT_EQ(waiting.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(waiting.status().message().find("fake pool: lease of a item of 1 cancelled"), std::string::npos)
      << waiting.status().message();
  EXPECT_EQ(core->Stats().lease_failures, 1u);
  core->Return(1, *held, {});
  Result<FakeItem> again = core->Lease(1, nullptr);  // the pool still serves
  EXPECT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->id, held->id);
  core->Return(1, *again, {});
  core->Shutdown();
}

TEST_F(PoolCoreTest, FailedCreationIsNamedInTheTimeoutOfTheWaitingLease) {
  counts_->fail_creates = 1;
  // The refill's one attempt fails (its retry is far away); a lease then gives up at once,
  // naming that error.
  auto core = Start({.min_ready = 1, .max_held = 1, .lease_timeout = 0ms, .refill_retry_interval = 60s});
  ASSERT_TRUE(core->WaitUntil([](const PoolStats& s) { return s.create_failures == 1; }, 10s));
  Result<FakeItem> lease = core->Lease(1, nullptr);
  ASSERT_FALSE(lease.ok());
  EXPECT_EQ(lease.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(
      lease.status().message().find("no item of 1 became ready within 0 ms; last creation: fake device full"),
      std::string::npos)
      << lease.status().message();
  PoolStats s = core->Stats();
  EXPECT_EQ(s.create_failures, 1u);
  EXPECT_EQ(s.create_out_of_memory, 1u);
  EXPECT_EQ(s.lease_failures, 1u);
  EXPECT_EQ(s.created, 0u);
  core->Shutdown();
}

TEST_F(PoolCoreTest, MissCreatesOnTheCallersThreadBelowTheMaximumAndWaitsAtIt) {
  auto core = Start({.min_ready = 0, .max_held = 1, .lease_timeout = 30s, .create_on_miss = true});
  Result<FakeItem> first = core->Lease(1, nullptr);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(core->Stats().miss_waits, 0u);
  std::thread returner([&] {
    core->WaitUntil([](const PoolStats& s) { return s.miss_waits == 1; }, 30s);
    core->Return(1, *first, {});
  });
  Result<FakeItem> second = core->Lease(1, nullptr);
  returner.join();
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(second->id, first->id);  // the returned one, scrubbed
  PoolStats s = core->Stats();
  EXPECT_EQ(s.created, 1u);
  EXPECT_EQ(s.scrubs, 1u);
  core->Return(1, *second, {});
  core->Shutdown();
}

TEST_F(PoolCoreTest, MissWaitsForTheCreationInFlightAndReportsTheWait) {
  // The refill's creation is held until the lease has missed: the lease must wait for that one
  // (create_on_miss would otherwise make a second) and say that it waited.
  // Shared with the operations: a refill thread that Shutdown leaves to finish must not outlive them.
  struct Held {
    std::mutex mu;
    std::condition_variable cv;
    bool release = false;
    std::atomic<int> on_lessee_thread{0};
    std::thread::id lessee = std::this_thread::get_id();
  };
  auto held = std::make_shared<Held>();
  PoolOps<FakeItem, FakeTenant> ops{
      .create = [held](int key) -> Result<FakeItem> {
        if (std::this_thread::get_id() == held->lessee) ++held->on_lessee_thread;
        std::unique_lock lock(held->mu);
        held->cv.wait(lock, [&] { return held->release; });
        return FakeItem{.key = key};
      },
      .scrub = [](const FakeItem&, const FakeTenant&, bool) { return Status::Ok(); },
      .destroy = [](const FakeItem&) {},
      .describe = [](int) { return std::string("held item"); }};
  auto core = std::make_shared<FakeCore>(
      PoolCoreOptions{.name = "held pool", .min_ready = 1, .max_held = 4, .lease_timeout = 0ms, .create_on_miss = true},
      std::move(ops), registry_, PoolMetricNames{.prefix = "held", .items = "items"});
  core->Start(1);
  ASSERT_TRUE(core->WaitUntil([](const PoolStats& s) { return s.creating == 1; }, 10s));
  std::thread releaser([&] {
    core->WaitUntil([](const PoolStats& s) { return s.miss_waits == 1; }, 30s);
    std::lock_guard lock(held->mu);
    held->release = true;
    held->cv.notify_all();
  });
  FakeCore::Clock::duration waited{};
  Result<FakeItem> lease = core->Lease(1, nullptr, &waited);
  releaser.join();
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();  // lease_timeout 0 does not fail a wait for work in flight
  EXPECT_GT(waited.count(), 0);
  PoolStats s = core->Stats();
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.miss_waits, 1u);
  EXPECT_EQ(held->on_lessee_thread.load(), 0);  // it took the refill's, and created none itself
  EXPECT_EQ(s.lease_failures, 0u);
  core->Return(1, *lease, {});
  core->Shutdown();
}

TEST_F(PoolCoreTest, DemandRaisesTheRefillTargetUpToTheMaximum) {
  auto core = Start({.min_ready = 1, .max_held = 3, .lease_timeout = 10s});
  ASSERT_TRUE(core->WaitIdle(10s));
  EXPECT_EQ(core->Stats().ready, 1u);
  core->SetDemand(1, 5);  // more than the maximum: the pool goes as far as it may
  ASSERT_TRUE(core->WaitIdle(10s));
  EXPECT_EQ(core->Stats().ready, 3u);
  Result<FakeItem> hit = core->Lease(1, nullptr);
  ASSERT_TRUE(hit.ok());
  FakeCore::Clock::duration waited = 1s;
  Result<FakeItem> second = core->Lease(1, nullptr, &waited);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(waited.count(), 0);  // a hit waits for nothing
  EXPECT_EQ(core->Stats().misses, 0u);
  core->SetDemand(1, 0);  // back to min_ready: nothing is destroyed, nothing more made
  core->Return(1, *hit, {});
  core->Return(1, *second, {});
  ASSERT_TRUE(core->WaitIdle(10s));
  PoolStats s = core->Stats();
  EXPECT_EQ(s.ready, 3u);
  EXPECT_EQ(s.created, 3u);
  core->Shutdown();
}

TEST_F(PoolCoreTest, ItemThatFailsItsScrubIsDestroyedAndReplaced) {
  auto core = Start({.min_ready = 1, .max_held = 1, .lease_timeout = 10s});
  Result<FakeItem> lease = core->Lease(1, nullptr);
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  core->Return(1, *lease, {.fail_scrub = true});
  ASSERT_TRUE(core->WaitUntil([](const PoolStats& s) { return s.ready == 1; }, 10s));
  PoolStats s = core->Stats();
  EXPECT_EQ(s.scrub_failures, 1u);
  EXPECT_EQ(s.destroyed, 1u);
  EXPECT_EQ(s.created, 2u);
  Result<FakeItem> next = core->Lease(1, nullptr);
  ASSERT_TRUE(next.ok());
  EXPECT_NE(next->id, lease->id);
  core->Return(1, *next, {});
  core->Shutdown();
}

TEST_F(PoolCoreTest, ShutdownDestroysWhatIsHeldAndLateReturnsToo) {
  auto core = Start({.min_ready = 2, .max_held = 3, .lease_timeout = 10s});
  ASSERT_TRUE(core->WaitIdle(10s));
  Result<FakeItem> lease = core->Lease(1, nullptr);
  ASSERT_TRUE(lease.ok());
  ASSERT_TRUE(core->WaitIdle(10s));  // the refill has replaced it: no creation left in flight
  core->Shutdown();
  EXPECT_EQ(counts_->live.load(), 1);  // only the leased one
  EXPECT_EQ(core->Lease(1, nullptr).status().code(), StatusCode::kFailedPrecondition);
  core->Return(1, *lease, {});
  EXPECT_EQ(counts_->live.load(), 0);
  PoolStats s = core->Stats();
  EXPECT_EQ(s.created, s.destroyed);
  EXPECT_EQ(Gauge("leased"), 0);
}

}  // namespace
}  // namespace phos::ctxpool::detail
