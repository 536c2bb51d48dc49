// The state a ContextPool and its leases share. Leases hold it by shared_ptr, so a lease that
// outlives its pool still has somewhere to return to (the context is then destroyed).
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

#include "latency_window.h"
#include "phos/ctxpool/context_pool.h"

namespace phos::ctxpool::detail {

class PoolCore : public std::enable_shared_from_this<PoolCore> {
 public:
  PoolCore(const PoolOptions& options, driver::DriverTable* driver);

  void Start();
  // Stops the threads and destroys every context held (ready or waiting for the scrub).
  void Shutdown();

  Result<ContextLease> Lease();
  Result<ContextLease> LeaseFresh();
  void Return(PooledContext pooled, TenantResources tenant);
  bool WaitIdle(std::chrono::milliseconds timeout);
  PoolMetrics Metrics() const;
  const PoolOptions& options() const { return options_; }

 private:
  using Clock = std::chrono::steady_clock;
  struct Dirty {
    PooledContext pooled;
    TenantResources tenant;
  };

  void RefillLoop();
  void ScrubLoop();
  // Creates one context outside the lock and accounts for it (creating_ must have been raised).
  Result<PooledContext> CreateAccounted(std::unique_lock<std::mutex>& lock);
  void DestroyAccounted(const PooledContext& pooled, std::unique_lock<std::mutex>& lock);
  size_t TotalLocked() const { return ready_.size() + leased_ + dirty_.size() + scrubbing_ + creating_; }
  bool RefillWantedLocked() const;
  ContextLease MakeLease(PooledContext pooled, Clock::time_point start, std::unique_lock<std::mutex>& lock);
  // A lease of a context created now, on the caller's thread (`what` names the failure).
  Result<ContextLease> CreateLease(Clock::time_point start, std::unique_lock<std::mutex>& lock, const char* what);

  const PoolOptions options_;
  driver::DriverTable* const driver_;

  mutable std::mutex mu_;
  std::condition_variable ready_cv_;   // a context became ready (lease waiters), or stop
  std::condition_variable refill_cv_;  // the refill may have work, or stop
  std::condition_variable scrub_cv_;   // a context was returned, or stop
  std::condition_variable idle_cv_;    // a creation or a scrub finished
  bool stopping_ = false;
  bool started_ = false;
  std::deque<PooledContext> ready_;
  std::deque<Dirty> dirty_;
  size_t leased_ = 0;
  size_t scrubbing_ = 0;  // taken from dirty_ by the scrub thread, not yet ready
  size_t creating_ = 0;
  bool refill_creating_ = false;  // the refill thread is inside a creation
  // Set by a failed refill creation until the retry interval passes; WaitIdle treats the pool
  // as idle then (it serves with what it has).
  Clock::time_point refill_blocked_until_{};
  uint64_t next_id_ = 0;
  PoolMetrics counters_;
  LatencyWindow lease_latency_us_;
  std::thread refill_thread_;
  std::thread scrub_thread_;
};

}  // namespace phos::ctxpool::detail
