// The one pool machinery behind ContextPool and CommunicatorPool (docs/design.md D11): items are
// created ahead of time by a background refill, leased, scrubbed by a background thread when
// returned and leased again, destroyed when their scrub fails or the pool stops. What an item is
// (a context with its cuBLAS handle, a device group) is the PoolOps; the items are kept per key (the
// context pool has one key, the communicator pool one per group size).
//
// Leases hold the core by shared_ptr, so a lease that outlives its pool still has somewhere to
// return to (the item is then destroyed). Every figure is kept in the PoolInstruments the core
// registered, which phosd serves.
#pragma once

#include <fmt/core.h>
#include <prometheus/registry.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "phos/base/log.h"
#include "phos/base/status.h"
#include "phos/ctxpool/pool_stats.h"
#include "pool_instruments.h"

namespace phos::ctxpool::detail {

// What a pool does with its items. Each runs outside the pool's lock, on the refill thread, the
// scrub thread or a lessee's thread.
template <typename Item, typename Tenant>
struct PoolOps {
  // A new item for `key`.
  std::function<Result<Item>(int key)> create;
  // Undoes what a tenant did in the item (zeroing its memory when `zero`). An error means the
  // item must be destroyed, not leased again.
  std::function<Status(const Item& item, const Tenant& tenant, bool zero)> scrub;
  // Errors are the operation's to log: there is nothing else to do with them.
  std::function<void(const Item& item)> destroy;
  // "pooled context", "device group of 2 GPUs": the items of `key`, in messages.
  std::function<std::string(int key)> describe;
};

struct PoolCoreOptions {
  std::string name;      // "device 0", "communicator pool": starts every log line and error
  size_t min_ready = 0;  // per key; waiting lessees add to it
  size_t max_held = 1;   // per key: ready, leased, scrubbing and being created
  std::chrono::milliseconds lease_timeout{0};
  std::chrono::milliseconds refill_retry_interval{0};
  bool zero_on_scrub = true;
  // A miss below max_held creates the item on the caller's thread (contexts: what the caller would
  // pay without the pool) rather than waiting for the refill (device groups: tens of seconds).
  bool create_on_miss = false;
};

template <typename Item, typename Tenant>
class PoolCore : public std::enable_shared_from_this<PoolCore<Item, Tenant>> {
 public:
  using Clock = std::chrono::steady_clock;

  PoolCore(PoolCoreOptions options, PoolOps<Item, Tenant> ops, std::shared_ptr<prometheus::Registry> registry,
           const PoolMetricNames& names)
      : options_(std::move(options)),
        ops_(std::move(ops)),
        registry_(std::move(registry)),
        metrics_(*registry_, names) {}

  // Starts the refill (making items of `initial_key` from the start) and the scrub thread.
  void Start(int initial_key) {
    {
      std::lock_guard lock(mu_);
      slots_[initial_key];
      ChangedLocked();
    }
    // The refill thread keeps the core alive: Shutdown may leave it to finish a creation alone.
    refill_thread_ = std::thread([self = this->shared_from_this()] { self->RefillLoop(); });
    scrub_thread_ = std::thread([this] { ScrubLoop(); });
  }

  // Stops the threads and destroys every item held (ready or waiting for the scrub); items leased
  // now are destroyed when returned.
  void Shutdown() {
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
    changed_cv_.notify_all();
    // A creation in flight may take seconds (3.1 s for a context on a100-pcie4, times the time
    // scale on simgpu): shutdown does not wait for it; the refill thread destroys what it made.
    // It holds the core, whose ops hold what they use (the driver table), so nothing it touches
    // goes away under it.
    if (refill_thread_.joinable()) refill_busy ? refill_thread_.detach() : refill_thread_.join();
    if (scrub_thread_.joinable()) scrub_thread_.join();
    std::unique_lock lock(mu_);
    for (auto& [key, slot] : slots_) {
      std::deque<Item> ready = std::move(slot.ready);
      slot.ready.clear();
      for (const Item& item : ready) DestroyAccounted(key, item, lock);
    }
    std::deque<Dirty> dirty = std::move(dirty_);
    dirty_.clear();
    for (Dirty& d : dirty) {
      // Not zeroed: nobody leases it again. Scrubbed still, for what destroying does not release
      // (a tenant's extra cuBLAS handles hold host memory).
      lock.unlock();
      ops_.scrub(d.item, d.tenant, /*zero=*/false).IgnoreError();
      lock.lock();
      --slots_[d.key].dirty;
      DestroyAccounted(d.key, d.item, lock);
    }
    PoolStats s = StatsLocked();
    PHOS_LOG(Info, "ctxpool", "{}: pool stopped ({} created, {} destroyed, {} leased out)", options_.name,
             s.created, s.destroyed, s.leased);
  }

  // A ready item of `key`. On a miss, an item already on its way (being scrubbed or created, and
  // not counted on by an earlier waiter) is waited for however long that takes: it ends by itself,
  // sooner than a creation started now would. With nothing on its way: created on the caller's
  // thread (create_on_miss, below the maximum), else waited for up to lease_timeout (a return, or
  // the refill). `cancel` (may be null) ends any wait once it becomes true. `waited` (may be null)
  // is set to the time the call waited for an item: zero on a hit. `rank` (may be null) orders the
  // ready items: the lowest (0 at best) is leased, the longest ready of equals first.
  using Rank = std::function<int(const Item&)>;
  Result<Item> Lease(int key, const std::atomic<bool>* cancel, Clock::duration* waited = nullptr,
                     const Rank* rank = nullptr) {
    Clock::time_point start = Clock::now();
    if (waited != nullptr) *waited = Clock::duration::zero();
    std::unique_lock lock(mu_);
    if (stopping_) return StoppingStatus();
    Slot& slot = slots_[key];  // a key joins the refill when first leased
    if (!slot.ready.empty()) {
      metrics_.hits.Increment();
      return TakeReadyLocked(slot, start, nullptr, rank);
    }
    metrics_.misses.Increment();
    if (slot.OnItsWay() <= slot.waiting && options_.create_on_miss && slot.Held() < options_.max_held) {
      return CreateForLeaseLocked(key, start, lock, "lease (miss, created synchronously)", waited);
    }
    metrics_.miss_waits.Increment();
    ++slot.waiting;
    ChangedLocked();
    refill_cv_.notify_one();
    auto cancelled = [cancel] { return cancel != nullptr && cancel->load(); };
    Clock::time_point deadline = start + options_.lease_timeout;
    bool create = false;
    while (!stopping_ && slot.ready.empty() && !cancelled()) {
      Clock::time_point now = Clock::now();
      // Whatever is on its way serves the waiters in turn; only a waiter with nothing coming for
      // it creates one or gives up at the deadline.
      const bool coming = slot.OnItsWay() >= slot.waiting;
      if (!coming && options_.create_on_miss && slot.Held() < options_.max_held) {
        create = true;
        break;
      }
      if (!coming && now >= deadline) break;
      Clock::time_point until = coming ? now + kCancelPoll : deadline;
      // The cancel flag is polled: whoever sets it has no way to wake this wait.
      if (cancel != nullptr) until = std::min(until, now + kCancelPoll);
      ready_cv_.wait_until(lock, until);
    }
    --slot.waiting;
    if (create && !stopping_ && !cancelled()) {
      return CreateForLeaseLocked(key, start, lock, "lease (miss, created synchronously)", waited);
    }
    if (!stopping_ && !slot.ready.empty()) return TakeReadyLocked(slot, start, waited, rank);
    metrics_.lease_failures.Increment();
    ChangedLocked();
    if (stopping_) return StoppingStatus();
    if (cancelled()) {
      return Status::Unavailable(
          fmt::format("{}: lease of a {} cancelled", options_.name, ops_.describe(key)));
    }
    if (slot.Held() >= options_.max_held) {
      return Status::Unavailable(fmt::format("{}: every {} ({} at most) stayed leased for {} ms",
                                             options_.name, ops_.describe(key), options_.max_held,
                                             options_.lease_timeout.count()));
    }
    return Status::Unavailable(
        fmt::format("{}: no {} became ready within {} ms{}", options_.name, ops_.describe(key),
                    options_.lease_timeout.count(),
                    last_create_error_.empty() ? "" : "; last creation: " + last_create_error_));
  }

  // An item created now on the caller's thread, whatever is ready and whatever max_held says
  // (counted as a miss).
  Result<Item> LeaseCreated(int key) {
    Clock::time_point start = Clock::now();
    std::unique_lock lock(mu_);
    if (stopping_) return StoppingStatus();
    metrics_.misses.Increment();
    return CreateForLeaseLocked(key, start, lock, "fresh lease", nullptr);
  }

  void Return(int key, Item item, Tenant tenant) {
    std::unique_lock lock(mu_);
    Slot& slot = slots_[key];
    --slot.leased;
    metrics_.returns.Increment();
    if (!stopping_) {
      ++slot.dirty;
      dirty_.push_back({key, std::move(item), std::move(tenant)});
      ChangedLocked();
      scrub_cv_.notify_one();
      return;
    }
    lock.unlock();
    ops_.scrub(item, tenant, /*zero=*/false).IgnoreError();
    lock.lock();
    DestroyAccounted(key, item, lock);
  }

  // Until nothing is being scrubbed or created and the refill has nothing to do (or cannot, after
  // a failed creation, until the retry interval passes). False on timeout.
  bool WaitIdle(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    return changed_cv_.wait_for(lock, timeout, [this] { return IdleLocked(); });
  }

  // Until `done` holds for the pool's figures, re-checked at every change of them. False on timeout.
  bool WaitUntil(const std::function<bool(const PoolStats&)>& done, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    return changed_cv_.wait_for(lock, timeout, [&] { return done(StatsLocked()); });
  }

  PoolStats Stats() const {
    std::lock_guard lock(mu_);
    return StatsLocked();
  }

  // Items of `key` that may be leased at once soon (a caller's forecast: the instance ranges free
  // for restores): the refill keeps max(min_ready, demand) ready or on their way, up to max_held.
  void SetDemand(int key, size_t demand) {
    std::lock_guard lock(mu_);
    Slot& slot = slots_[key];
    if (slot.demand == demand) return;
    if (demand > options_.max_held && slot.demand <= options_.max_held) {
      PHOS_LOG(Warn, "ctxpool", "{}: {} {}s may be leased at once; the pool holds {} at most", options_.name, demand,
               ops_.describe(key), options_.max_held);
    }
    slot.demand = demand;
    ChangedLocked();
    refill_cv_.notify_one();
  }

 private:
  static constexpr std::chrono::milliseconds kCancelPoll{50};

  // The items of one key.
  struct Slot {
    std::deque<Item> ready;
    size_t leased = 0;
    size_t dirty = 0;  // returned, in dirty_
    size_t scrubbing = 0;
    size_t creating = 0;
    // Being destroyed: still held (the device still has it), so a replacement does not exceed
    // max_held, and counted in no state of the stats.
    size_t destroying = 0;
    size_t waiting = 0;  // Lease() calls waiting for one to become ready
    size_t demand = 0;   // SetDemand: may be leased at once soon
    // Not leased: ready, or becoming ready (returned and scrubbed, or created).
    size_t Coming() const { return ready.size() + dirty + scrubbing + creating; }
    size_t OnItsWay() const { return dirty + scrubbing + creating; }
    size_t Held() const { return Coming() + leased + destroying; }
  };
  struct Dirty {
    int key;
    Item item;
    Tenant tenant;
  };

  Status StoppingStatus() const {
    return Status::FailedPrecondition(options_.name + ": the pool is stopping");
  }

  // The key the refill should create an item of next, if any.
  std::optional<int> RefillKeyLocked() const {
    if (stopping_ || Clock::now() < refill_blocked_until_) return std::nullopt;
    for (const auto& [key, slot] : slots_) {
      const size_t target = std::max(options_.min_ready, slot.demand) + slot.waiting;
      if (slot.Coming() < target && slot.Held() < options_.max_held) return key;
    }
    return std::nullopt;
  }

  bool IdleLocked() const {
    if (!dirty_.empty()) return false;
    for (const auto& [key, slot] : slots_) {
      if (slot.scrubbing != 0 || slot.creating != 0 || slot.destroying != 0) return false;
    }
    return !RefillKeyLocked().has_value();
  }

  PoolStats StatsLocked() const {
    PoolStats s = metrics_.Counts();
    AddHeldLocked(s);
    return s;
  }

  // What is held now, by state, added to `s` (no metric is read: this runs on every lease).
  void AddHeldLocked(PoolStats& s) const {
    for (const auto& [key, slot] : slots_) {
      s.ready += slot.ready.size();
      s.leased += slot.leased;
      s.scrubbing += slot.dirty + slot.scrubbing;
      s.creating += slot.creating;
    }
  }

  // After every change of the figures: the held-now gauges follow, WaitIdle/WaitUntil re-check,
  // and so do waiting leases (what is on their way may have changed: a creation failed).
  void ChangedLocked() {
    PoolStats s;
    AddHeldLocked(s);
    metrics_.SetHeld(s.ready, s.leased, s.scrubbing, s.creating);
    changed_cv_.notify_all();
    ready_cv_.notify_all();
  }

  // `waited`, when not null, gets the time since `start` (the lease missed and waited).
  Item TakeReadyLocked(Slot& slot, Clock::time_point start, Clock::duration* waited, const Rank* rank) {
    auto best = slot.ready.begin();
    if (rank != nullptr) {
      int best_rank = (*rank)(*best);
      for (auto it = std::next(best); it != slot.ready.end() && best_rank > 0; ++it) {
        if (int r = (*rank)(*it); r < best_rank) {
          best = it;
          best_rank = r;
        }
      }
    }
    Item item = std::move(*best);
    slot.ready.erase(best);
    ++slot.leased;
    metrics_.leases.Increment();
    Clock::duration took = Clock::now() - start;
    if (waited != nullptr) *waited = took;
    metrics_.lease_seconds.Observe(std::chrono::duration<double>(took).count());
    ChangedLocked();
    refill_cv_.notify_one();
    return item;
  }

  Result<Item> CreateForLeaseLocked(int key, Clock::time_point start, std::unique_lock<std::mutex>& lock,
                                    const char* what, Clock::duration* waited) {
    ++slots_[key].creating;
    ChangedLocked();
    Result<Item> created = CreateAccounted(key, lock);
    if (!created.ok()) {
      metrics_.lease_failures.Increment();
      ChangedLocked();
      return created.status().WithContext(what);
    }
    ++slots_[key].leased;
    metrics_.leases.Increment();
    Clock::duration took = Clock::now() - start;
    if (waited != nullptr) *waited = took;
    metrics_.lease_seconds.Observe(std::chrono::duration<double>(took).count());
    ChangedLocked();
    return created;
  }

  // Creates one item outside the lock and accounts for it (the slot's `creating` must have been raised).
  Result<Item> CreateAccounted(int key, std::unique_lock<std::mutex>& lock) {
    lock.unlock();
    Clock::time_point start = Clock::now();
    Result<Item> created = ops_.create(key);
    double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    lock.lock();
    --slots_[key].creating;
    if (!created.ok()) {
      metrics_.create_failures.Increment();
      if (created.status().code() == StatusCode::kOutOfMemory) metrics_.create_out_of_memory.Increment();
      last_create_error_ = created.status().message();
      ChangedLocked();
      PHOS_LOG(Warn, "ctxpool", "{}: creating a {} failed ({} failures so far; {} ready): {}", options_.name,
               ops_.describe(key), metrics_.create_failures.Value(), slots_[key].ready.size(),
               last_create_error_);
      return created.status().WithContext(fmt::format("{}: create {}", options_.name, ops_.describe(key)));
    }
    created->id = ++next_id_;
    metrics_.created.Increment();
    metrics_.create_seconds.Observe(seconds);
    ChangedLocked();
    PHOS_LOG(Debug, "ctxpool", "{}: {} {} created in {:.3f} s", options_.name, ops_.describe(key),
             created->id, seconds);
    return created;
  }

  void DestroyAccounted(int key, const Item& item, std::unique_lock<std::mutex>& lock) {
    ++slots_[key].destroying;
    lock.unlock();
    ops_.destroy(item);
    lock.lock();
    --slots_[key].destroying;
    metrics_.destroyed.Increment();
    ChangedLocked();
    refill_cv_.notify_one();
  }

  void RefillLoop() {
    std::unique_lock lock(mu_);
    while (!stopping_) {
      std::optional<int> key = RefillKeyLocked();
      if (!key.has_value()) {
        if (Clock::now() < refill_blocked_until_) {
          refill_cv_.wait_until(lock, refill_blocked_until_);
        } else {
          refill_cv_.wait(lock);
        }
        continue;
      }
      ++slots_[*key].creating;
      refill_creating_ = true;
      ChangedLocked();
      Result<Item> created = CreateAccounted(*key, lock);
      refill_creating_ = false;
      if (!created.ok()) {
        // Serve with what is there; try again after the interval.
        refill_blocked_until_ = Clock::now() + options_.refill_retry_interval;
        ChangedLocked();
        continue;
      }
      if (stopping_) {
        DestroyAccounted(*key, *created, lock);
        break;
      }
      slots_[*key].ready.push_back(std::move(*created));
      ChangedLocked();
      ready_cv_.notify_all();
    }
  }

  void ScrubLoop() {
    std::unique_lock lock(mu_);
    while (true) {
      scrub_cv_.wait(lock, [this] { return stopping_ || !dirty_.empty(); });
      if (stopping_) return;  // Shutdown destroys what is left
      Dirty dirty = std::move(dirty_.front());
      dirty_.pop_front();
      Slot& slot = slots_[dirty.key];
      --slot.dirty;
      ++slot.scrubbing;
      lock.unlock();
      Clock::time_point start = Clock::now();
      Status scrubbed = ops_.scrub(dirty.item, dirty.tenant, options_.zero_on_scrub);
      double seconds = std::chrono::duration<double>(Clock::now() - start).count();
      lock.lock();
      --slot.scrubbing;
      metrics_.scrub_seconds.Observe(seconds);
      // A fresh lease (LeaseCreated) is made beyond max_held: what comes back over the bound is
      // destroyed, or every fresh lease would leave the pool one item (and its device memory) larger.
      const bool over_bound = slot.Held() >= options_.max_held;
      if (scrubbed.ok() && !stopping_ && !over_bound) {
        metrics_.scrubs.Increment();
        slot.ready.push_back(std::move(dirty.item));
        ChangedLocked();
        ready_cv_.notify_all();
        continue;
      }
      if (scrubbed.ok()) {
        metrics_.scrubs.Increment();
      } else {
        metrics_.scrub_failures.Increment();
        PHOS_LOG(Warn, "ctxpool", "{}: {} {} failed its scrub and is destroyed: {}", options_.name,
                 ops_.describe(dirty.key), dirty.item.id, scrubbed.message());
      }
      DestroyAccounted(dirty.key, dirty.item, lock);
    }
  }

  const PoolCoreOptions options_;
  const PoolOps<Item, Tenant> ops_;
  // Held for metrics_, whose families it owns: a lease returned after phosd dropped its registry
  // still counts somewhere valid.
  const std::shared_ptr<prometheus::Registry> registry_;
  PoolInstruments metrics_;

  mutable std::mutex mu_;
  std::condition_variable ready_cv_;    // an item became ready (lease waiters), or stop
  std::condition_variable refill_cv_;   // the refill may have work, or stop
  std::condition_variable scrub_cv_;    // an item was returned, or stop
  std::condition_variable changed_cv_;  // any figure changed (WaitIdle, WaitUntil), or stop
  bool stopping_ = false;
  bool refill_creating_ = false;  // the refill thread is inside a creation
  std::map<int, Slot> slots_;     // keys in use; a Slot& stays valid as keys join
  std::deque<Dirty> dirty_;
  // Set by a failed refill creation until the retry interval passes; WaitIdle treats the pool as
  // idle then (it serves with what it has).
  Clock::time_point refill_blocked_until_{};
  std::string last_create_error_;
  uint64_t next_id_ = 0;
  std::thread refill_thread_;
  std::thread scrub_thread_;
};

}  // namespace phos::ctxpool::detail
