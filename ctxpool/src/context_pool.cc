#include "phos/ctxpool/context_pool.h"

#include <fmt/core.h>

#include <utility>

#include "context_ops.h"
#include "phos/driver/cuda_check.h"
#include "phos/base/log.h"
#include "pool_core.h"

namespace phos::ctxpool {
namespace detail {

PoolCore::PoolCore(const PoolOptions& options, driver::DriverTable* driver)
    : options_(options), driver_(driver), lease_latency_us_(options.latency_window) {
  counters_.device = options.device;
}

void PoolCore::Start() {
  started_ = true;
  // The refill thread keeps the core alive: Shutdown may leave it to finish a creation alone.
  refill_thread_ = std::thread([self = shared_from_this()] { self->RefillLoop(); });
  scrub_thread_ = std::thread([this] { ScrubLoop(); });
}

void PoolCore::Shutdown() {
  bool refill_busy;
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    stopping_ = true;
    refill_busy = refill_creating_;
  }
  refill_cv_.notify_all();
  scrub_cv_.notify_all();
  ready_cv_.notify_all();
  idle_cv_.notify_all();
  // A creation in flight may take seconds (3.1 s modelled on a100-pcie4, times the time scale on
  // simgpu): shutdown does not wait for it; the refill thread destroys what it made and ends.
  if (refill_thread_.joinable()) refill_busy ? refill_thread_.detach() : refill_thread_.join();
  if (scrub_thread_.joinable()) scrub_thread_.join();
  std::unique_lock lock(mu_);
  std::deque<PooledContext> ready = std::move(ready_);
  std::deque<Dirty> dirty = std::move(dirty_);
  ready_.clear();
  dirty_.clear();
  for (const PooledContext& pooled : ready) DestroyAccounted(pooled, lock);
  for (Dirty& d : dirty) {
    // The tenant's extra cuBLAS handles hold host memory that cuCtxDestroy does not release.
    lock.unlock();
    ScrubPooledContext(*driver_, d.pooled, d.tenant, /*zero=*/false).IgnoreError();
    lock.lock();
    DestroyAccounted(d.pooled, lock);
  }
  PHOS_LOG(Info, "ctxpool", "device {}: pool stopped ({} contexts created, {} destroyed, {} leases out)",
           options_.device, counters_.contexts_created, counters_.contexts_destroyed, leased_);
}

bool PoolCore::RefillWantedLocked() const {
  if (stopping_ || Clock::now() < refill_blocked_until_) return false;
  size_t coming = ready_.size() + dirty_.size() + scrubbing_ + creating_;
  return coming < options_.min_ready && TotalLocked() < options_.max_contexts;
}

Result<PooledContext> PoolCore::CreateAccounted(std::unique_lock<std::mutex>& lock) {
  lock.unlock();
  Clock::time_point start = Clock::now();
  Result<PooledContext> created = CreatePooledContext(*driver_, options_.device);
  double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  lock.lock();
  --creating_;
  idle_cv_.notify_all();
  if (!created.ok()) {
    ++counters_.create_failures;
    if (created.status().code() == StatusCode::kOutOfMemory) ++counters_.create_out_of_memory;
    PHOS_LOG(Warn, "ctxpool",
             "device {}: creating a pooled context failed ({} failures so far; serving with {} ready): {}",
             options_.device, counters_.create_failures, ready_.size(), created.status().message());
    return created.status().WithContext(fmt::format("device {}: create pooled context", options_.device));
  }
  created->id = ++next_id_;
  ++counters_.contexts_created;
  counters_.create_seconds_total += seconds;
  counters_.create_seconds_last = seconds;
  PHOS_LOG(Debug, "ctxpool", "device {}: context {} created in {:.3f} s", options_.device, created->id,
           seconds);
  return created;
}

void PoolCore::DestroyAccounted(const PooledContext& pooled, std::unique_lock<std::mutex>& lock) {
  lock.unlock();
  DestroyPooledContext(*driver_, pooled);
  lock.lock();
  ++counters_.contexts_destroyed;
  idle_cv_.notify_all();
}

ContextLease PoolCore::MakeLease(PooledContext pooled, Clock::time_point start,
                                 std::unique_lock<std::mutex>& lock) {
  ++leased_;
  ++counters_.leases;
  lease_latency_us_.Record(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
  lock.unlock();
  return ContextLease(shared_from_this(), pooled, options_.device);
}

Result<ContextLease> PoolCore::Lease() {
  Clock::time_point start = Clock::now();
  std::unique_lock lock(mu_);
  if (stopping_)
    return Status::FailedPrecondition(fmt::format("device {}: context pool is stopping", options_.device));
  if (!ready_.empty()) {
    ++counters_.hits;
    PooledContext pooled = ready_.front();
    ready_.pop_front();
    refill_cv_.notify_one();
    return MakeLease(pooled, start, lock);
  }
  ++counters_.misses;
  if (TotalLocked() < options_.max_contexts) return CreateLease(start, lock, "lease (miss, created synchronously)");
  ++counters_.miss_waits;
  bool ready = ready_cv_.wait_until(lock, start + options_.lease_timeout,
                                    [this] { return stopping_ || !ready_.empty(); });
  if (!ready || stopping_) {
    ++counters_.lease_failures;
    return Status::Unavailable(fmt::format("device {}: all {} pooled contexts stayed leased for {} ms",
                                           options_.device, options_.max_contexts,
                                           options_.lease_timeout.count()));
  }
  PooledContext pooled = ready_.front();
  ready_.pop_front();
  refill_cv_.notify_one();
  return MakeLease(pooled, start, lock);
}

Result<ContextLease> PoolCore::LeaseFresh() {
  Clock::time_point start = Clock::now();
  std::unique_lock lock(mu_);
  if (stopping_)
    return Status::FailedPrecondition(fmt::format("device {}: context pool is stopping", options_.device));
  ++counters_.misses;
  return CreateLease(start, lock, "fresh lease");
}

Result<ContextLease> PoolCore::CreateLease(Clock::time_point start, std::unique_lock<std::mutex>& lock,
                                           const char* what) {
  ++creating_;
  Result<PooledContext> created = CreateAccounted(lock);
  if (!created.ok()) {
    ++counters_.lease_failures;
    return created.status().WithContext(what);
  }
  return MakeLease(*created, start, lock);
}

void PoolCore::Return(PooledContext pooled, TenantResources tenant) {
  std::unique_lock lock(mu_);
  --leased_;
  ++counters_.returns;
  if (!stopping_) {
    dirty_.push_back({pooled, std::move(tenant)});
    scrub_cv_.notify_one();
    return;
  }
  lock.unlock();
  ScrubPooledContext(*driver_, pooled, tenant, /*zero=*/false).IgnoreError();
  lock.lock();
  DestroyAccounted(pooled, lock);
}

void PoolCore::RefillLoop() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    if (RefillWantedLocked()) {
      ++creating_;
      refill_creating_ = true;
      Result<PooledContext> created = CreateAccounted(lock);
      refill_creating_ = false;
      if (!created.ok()) {
        refill_blocked_until_ = Clock::now() + options_.refill_retry_interval;
      } else if (stopping_) {
        DestroyAccounted(*created, lock);
      } else {
        ready_.push_back(*created);
        ready_cv_.notify_one();
      }
      continue;
    }
    if (Clock::now() < refill_blocked_until_) {
      refill_cv_.wait_until(lock, refill_blocked_until_);
    } else {
      refill_cv_.wait(lock);
    }
  }
}

void PoolCore::ScrubLoop() {
  std::unique_lock lock(mu_);
  while (true) {
    scrub_cv_.wait(lock, [this] { return stopping_ || !dirty_.empty(); });
    if (stopping_) return;  // Shutdown destroys what is left
    Dirty dirty = std::move(dirty_.front());
    dirty_.pop_front();
    ++scrubbing_;
    lock.unlock();
    Clock::time_point start = Clock::now();
    Status scrubbed = ScrubPooledContext(*driver_, dirty.pooled, dirty.tenant, options_.zero_on_scrub);
    double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    lock.lock();
    --scrubbing_;
    counters_.scrub_seconds_total += seconds;
    if (scrubbed.ok() && !stopping_) {
      ++counters_.scrubs;
      ready_.push_back(dirty.pooled);
      ready_cv_.notify_one();
    } else {
      if (!scrubbed.ok()) {
        ++counters_.scrub_failures;
        PHOS_LOG(Warn, "ctxpool", "device {}: context {} failed its scrub and is destroyed: {}",
                 options_.device, dirty.pooled.id, scrubbed.message());
      }
      DestroyAccounted(dirty.pooled, lock);
      refill_cv_.notify_one();
    }
    idle_cv_.notify_all();
  }
}

bool PoolCore::WaitIdle(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  return idle_cv_.wait_for(lock, timeout, [this] {
    return dirty_.empty() && scrubbing_ == 0 && creating_ == 0 && !RefillWantedLocked();
  });
}

PoolMetrics PoolCore::Metrics() const {
  std::lock_guard lock(mu_);
  PoolMetrics m = counters_;
  m.lease_p50_us = lease_latency_us_.Quantile(0.5);
  m.lease_p99_us = lease_latency_us_.Quantile(0.99);
  m.ready = ready_.size();
  m.leased = leased_;
  m.scrubbing = dirty_.size() + scrubbing_;
  m.creating = creating_;
  return m;
}

}  // namespace detail

ContextLease::ContextLease(std::shared_ptr<detail::PoolCore> core, detail::PooledContext pooled, int device)
    : core_(std::move(core)), pooled_(pooled), device_(device) {}

ContextLease::ContextLease(ContextLease&& other) noexcept
    : core_(std::move(other.core_)),
      pooled_(std::exchange(other.pooled_, {})),
      device_(other.device_),
      tenant_(std::move(other.tenant_)) {}

ContextLease& ContextLease::operator=(ContextLease&& other) noexcept {
  if (this != &other) {
    Return();
    core_ = std::move(other.core_);
    pooled_ = std::exchange(other.pooled_, {});
    device_ = other.device_;
    tenant_ = std::move(other.tenant_);
  }
  return *this;
}

ContextLease::~ContextLease() {
  Return();
}

void ContextLease::Return() {
  if (core_ == nullptr || pooled_.context == nullptr) return;
  std::shared_ptr<detail::PoolCore> core = std::move(core_);
  core->Return(std::exchange(pooled_, {}), std::exchange(tenant_, {}));
}

ContextPool::ContextPool(std::shared_ptr<detail::PoolCore> core) : core_(std::move(core)) {}

ContextPool::~ContextPool() {
  core_->Shutdown();
}

Result<std::unique_ptr<ContextPool>> ContextPool::Open(const PoolOptions& options,
                                                       driver::DriverTable* driver) {
  if (driver == nullptr) return Status::InvalidArgument("context pool needs a driver table");
  if (options.max_contexts == 0)
    return Status::InvalidArgument("context pool: max_contexts must be at least 1");
  if (options.min_ready > options.max_contexts) {
    return Status::InvalidArgument(fmt::format("context pool: min_ready ({}) exceeds max_contexts ({})",
                                               options.min_ready, options.max_contexts));
  }
  if (options.latency_window == 0)
    return Status::InvalidArgument("context pool: latency_window must be at least 1");
  if (options.lease_timeout.count() < 0 || options.refill_retry_interval.count() < 0) {
    return Status::InvalidArgument(
        "context pool: lease_timeout and refill_retry_interval must not be negative");
  }
  PHOS_CU_RETURN_IF_ERROR(driver->error_text(), driver->cuInit(0));
  int count = 0;
  PHOS_CU_RETURN_IF_ERROR(driver->error_text(), driver->cuDeviceGetCount(&count));
  if (options.device < 0 || options.device >= count) {
    return Status::InvalidArgument(
        fmt::format("context pool: device {} does not exist ({} devices)", options.device, count));
  }
  auto core = std::make_shared<detail::PoolCore>(options, driver);
  core->Start();
  PHOS_LOG(Info, "ctxpool", "device {}: context pool open (min ready {}, max {}, zero on scrub {})",
           options.device, options.min_ready, options.max_contexts, options.zero_on_scrub);
  return std::unique_ptr<ContextPool>(new ContextPool(std::move(core)));
}

Result<ContextLease> ContextPool::Lease() {
  return core_->Lease();
}
Result<ContextLease> ContextPool::LeaseFresh() {
  return core_->LeaseFresh();
}
bool ContextPool::WaitIdle(std::chrono::milliseconds timeout) {
  return core_->WaitIdle(timeout);
}
PoolMetrics ContextPool::Metrics() const {
  return core_->Metrics();
}
const PoolOptions& ContextPool::options() const {
  return core_->options();
}

}  // namespace phos::ctxpool
