#include "phos/ctxpool/communicator_pool.h"

#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include <fmt/core.h>

#include "context_ops.h"
#include "phos/base/log.h"

namespace phos::ctxpool {

std::string NcclResultName(ncclResult_t result) {
  static constexpr const char* kNames[] = {"ncclSuccess",         "ncclUnhandledCudaError", "ncclSystemError",
                                           "ncclInternalError",   "ncclInvalidArgument",    "ncclInvalidUsage",
                                           "ncclRemoteError",     "ncclInProgress"};
  int v = static_cast<int>(result);
  const char* name = v >= 0 && v < ncclNumResults ? kNames[v] : "unknown ncclResult_t";
  return fmt::format("{} ({})", name, v);
}

namespace detail {

// The state a CommunicatorPool and its leases share (as PoolCore is for contexts).
class GroupCore : public std::enable_shared_from_this<GroupCore> {
 public:
  GroupCore(const CommunicatorPoolOptions& options, driver::DriverTable* driver, int node_devices)
      : options_(options), driver_(driver), node_devices_(node_devices) {}

  void Start(int initial_size) {
    {
      std::lock_guard lock(mu_);
      sizes_[initial_size];  // in use from the start
    }
    // The refill thread keeps the core alive: Shutdown leaves it to finish a creation alone.
    refill_thread_ = std::thread([self = shared_from_this()] { self->RefillLoop(); });
    scrub_thread_ = std::thread([this] { ScrubLoop(); });
  }

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
    idle_cv_.notify_all();
    if (refill_thread_.joinable()) refill_busy ? refill_thread_.detach() : refill_thread_.join();
    if (scrub_thread_.joinable()) scrub_thread_.join();
    std::unique_lock lock(mu_);
    for (auto& [size, s] : sizes_) {
      std::deque<PooledGroup> ready = std::move(s.ready);
      s.ready.clear();
      for (const PooledGroup& g : ready) DestroyAccounted(g, lock);
    }
    std::deque<Dirty> dirty = std::move(dirty_);
    dirty_.clear();
    for (Dirty& d : dirty) {
      lock.unlock();
      ScrubDeviceGroup(*driver_, d.group, d.tenants, /*zero=*/false).IgnoreError();
      lock.lock();
      DestroyAccounted(d.group, lock);
    }
    PHOS_LOG(Info, "ctxpool", "communicator pool stopped ({} groups created, {} destroyed)", counters_.groups_created,
             counters_.groups_destroyed);
  }

  Result<DeviceGroupLease> Lease(int size, const std::atomic<bool>* cancel) {
    if (size < 1 || size > node_devices_) {
      return Status::InvalidArgument(
          fmt::format("device group of {} GPUs: the node has {} device(s)", size, node_devices_));
    }
    auto deadline = Clock::now() + options_.lease_timeout;
    std::unique_lock lock(mu_);
    if (stopping_) return Status::FailedPrecondition("communicator pool is stopping");
    Size& s = sizes_[size];
    if (s.ready.empty()) {
      ++counters_.misses;
      ++s.waiting;
      refill_cv_.notify_one();
      while (!stopping_ && s.ready.empty() && Clock::now() < deadline && !(cancel != nullptr && cancel->load())) {
        ready_cv_.wait_for(lock, std::chrono::milliseconds(50));
      }
      --s.waiting;
      if (s.ready.empty()) {
        ++counters_.lease_failures;
        if (stopping_) return Status::FailedPrecondition("communicator pool is stopping");
        if (cancel != nullptr && cancel->load()) return Status::Unavailable(fmt::format("device group of {}: lease cancelled", size));
        return Status::Unavailable(fmt::format("no device group of {} GPUs became ready within {} ms{}", size,
                                               options_.lease_timeout.count(),
                                               last_create_error_.empty() ? "" : "; last creation: " + last_create_error_));
      }
    } else {
      ++counters_.hits;
    }
    PooledGroup group = std::move(s.ready.front());
    s.ready.pop_front();
    ++s.leased;
    ++counters_.leases;
    refill_cv_.notify_one();
    lock.unlock();
    return DeviceGroupLease(shared_from_this(), std::move(group));
  }

  void Return(PooledGroup group, std::vector<TenantResources> tenants) {
    std::unique_lock lock(mu_);
    Size& s = sizes_[static_cast<int>(group.contexts.size())];
    --s.leased;
    ++counters_.returns;
    if (!stopping_) {
      ++s.dirty;
      dirty_.push_back({std::move(group), std::move(tenants)});
      scrub_cv_.notify_one();
      return;
    }
    lock.unlock();
    ScrubDeviceGroup(*driver_, group, tenants, /*zero=*/false).IgnoreError();
    lock.lock();
    DestroyAccounted(group, lock);
  }

  bool WaitIdle(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    return idle_cv_.wait_for(lock, timeout, [this] {
      if (!dirty_.empty()) return false;
      for (const auto& [size, s] : sizes_) {
        if (s.scrubbing != 0 || s.creating != 0) return false;
      }
      return RefillSizeLocked() == 0;
    });
  }

  CommunicatorPoolMetrics Metrics() const {
    std::lock_guard lock(mu_);
    CommunicatorPoolMetrics m = counters_;
    for (const auto& [size, s] : sizes_) {
      m.ready += s.ready.size();
      m.leased += s.leased;
      m.scrubbing += s.dirty + s.scrubbing;
      m.creating += s.creating;
    }
    return m;
  }

  int node_devices() const { return node_devices_; }

 private:
  using Clock = std::chrono::steady_clock;
  struct Size {
    std::deque<PooledGroup> ready;
    size_t leased = 0;
    size_t dirty = 0;  // in dirty_
    size_t scrubbing = 0;
    size_t creating = 0;
    size_t waiting = 0;  // Lease() calls waiting for a ready group
    size_t Total() const { return ready.size() + leased + dirty + scrubbing + creating; }
  };
  struct Dirty {
    PooledGroup group;
    std::vector<TenantResources> tenants;
  };

  // The size the refill should create a group of next; 0 for none.
  int RefillSizeLocked() const {
    if (stopping_ || Clock::now() < refill_blocked_until_) return 0;
    for (const auto& [size, s] : sizes_) {
      size_t coming = s.ready.size() + s.dirty + s.scrubbing + s.creating;
      if (coming < options_.min_ready + s.waiting && s.Total() < options_.max_groups) return size;
    }
    return 0;
  }

  void DestroyAccounted(const PooledGroup& group, std::unique_lock<std::mutex>& lock) {
    lock.unlock();
    DestroyDeviceGroup(*driver_, group);
    lock.lock();
    ++counters_.groups_destroyed;
    idle_cv_.notify_all();
  }

  void RefillLoop() {
    std::unique_lock lock(mu_);
    while (!stopping_) {
      int size = RefillSizeLocked();
      if (size == 0) {
        if (Clock::now() < refill_blocked_until_) {
          refill_cv_.wait_until(lock, refill_blocked_until_);
        } else {
          refill_cv_.wait(lock);
        }
        continue;
      }
      ++sizes_[size].creating;
      refill_creating_ = true;
      lock.unlock();
      Clock::time_point start = Clock::now();
      Result<PooledGroup> created = CreateDeviceGroup(*driver_, size);
      double seconds = std::chrono::duration<double>(Clock::now() - start).count();
      lock.lock();
      refill_creating_ = false;
      --sizes_[size].creating;
      idle_cv_.notify_all();
      if (!created.ok()) {
        ++counters_.create_failures;
        last_create_error_ = created.status().message();
        refill_blocked_until_ = Clock::now() + options_.refill_retry_interval;
        PHOS_LOG(Warn, "ctxpool", "creating a device group of {} failed ({} failures so far): {}", size,
                 counters_.create_failures, last_create_error_);
        continue;
      }
      created->id = ++next_id_;
      ++counters_.groups_created;
      counters_.create_seconds_total += seconds;
      counters_.create_seconds_last = seconds;
      if (stopping_) {
        DestroyAccounted(*created, lock);
        break;
      }
      PHOS_LOG(Info, "ctxpool", "device group {} ({} devices, contexts and communicator) ready in {:.3f} s", created->id,
               size, seconds);
      sizes_[size].ready.push_back(std::move(*created));
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
      Size& s = sizes_[static_cast<int>(dirty.group.contexts.size())];
      --s.dirty;
      ++s.scrubbing;
      lock.unlock();
      Status scrubbed = ScrubDeviceGroup(*driver_, dirty.group, dirty.tenants, options_.zero_on_scrub);
      lock.lock();
      --s.scrubbing;
      if (scrubbed.ok() && !stopping_) {
        ++counters_.scrubs;
        s.ready.push_back(std::move(dirty.group));
        ready_cv_.notify_all();
      } else {
        if (!scrubbed.ok()) {
          ++counters_.scrub_failures;
          PHOS_LOG(Warn, "ctxpool", "device group {} failed its scrub and is destroyed: {}", dirty.group.id,
                   scrubbed.message());
        }
        DestroyAccounted(dirty.group, lock);
        refill_cv_.notify_one();
      }
      idle_cv_.notify_all();
    }
  }

  const CommunicatorPoolOptions options_;
  driver::DriverTable* const driver_;
  const int node_devices_;

  mutable std::mutex mu_;
  std::condition_variable ready_cv_;   // a group became ready, or stop
  std::condition_variable refill_cv_;  // the refill may have work, or stop
  std::condition_variable scrub_cv_;   // a group was returned, or stop
  std::condition_variable idle_cv_;    // a creation or a scrub finished
  bool stopping_ = false;
  bool refill_creating_ = false;
  std::map<int, Size> sizes_;  // group sizes in use
  std::deque<Dirty> dirty_;
  Clock::time_point refill_blocked_until_{};
  std::string last_create_error_;
  uint64_t next_id_ = 0;
  CommunicatorPoolMetrics counters_;
  std::thread refill_thread_;
  std::thread scrub_thread_;
};

}  // namespace detail

DeviceGroupLease::DeviceGroupLease(std::shared_ptr<detail::GroupCore> core, detail::PooledGroup group)
    : core_(std::move(core)), group_(std::move(group)), tenants_(group_.contexts.size()) {}

DeviceGroupLease::DeviceGroupLease(DeviceGroupLease&& other) noexcept
    : core_(std::move(other.core_)), group_(std::exchange(other.group_, {})), tenants_(std::move(other.tenants_)) {}

DeviceGroupLease& DeviceGroupLease::operator=(DeviceGroupLease&& other) noexcept {
  if (this != &other) {
    Return();
    core_ = std::move(other.core_);
    group_ = std::exchange(other.group_, {});
    tenants_ = std::move(other.tenants_);
  }
  return *this;
}

DeviceGroupLease::~DeviceGroupLease() { Return(); }

void DeviceGroupLease::Return() {
  if (core_ == nullptr) return;
  std::shared_ptr<detail::GroupCore> core = std::move(core_);
  core->Return(std::exchange(group_, {}), std::exchange(tenants_, {}));
}

CommunicatorPool::CommunicatorPool(std::shared_ptr<detail::GroupCore> core) : core_(std::move(core)) {}

CommunicatorPool::~CommunicatorPool() { core_->Shutdown(); }

Result<std::unique_ptr<CommunicatorPool>> CommunicatorPool::Open(const CommunicatorPoolOptions& options,
                                                                 driver::DriverTable* driver) {
  if (driver == nullptr) return Status::InvalidArgument("communicator pool needs a driver table");
  if (!driver->has_nccl()) return Status::FailedPrecondition("communicator pool: the driver table has no NCCL");
  if (options.max_groups == 0 || options.min_ready > options.max_groups) {
    return Status::InvalidArgument(fmt::format("communicator pool: need 1 <= max_groups ({}) and min_ready ({}) <= max_groups",
                                               options.max_groups, options.min_ready));
  }
  if (options.lease_timeout.count() < 0 || options.refill_retry_interval.count() < 0) {
    return Status::InvalidArgument("communicator pool: lease_timeout and refill_retry_interval must not be negative");
  }
  PHOS_CU_RETURN_IF_ERROR(driver->error_text(), driver->cuInit(0));
  int count = 0;
  PHOS_CU_RETURN_IF_ERROR(driver->error_text(), driver->cuDeviceGetCount(&count));
  if (count < 1) return Status::FailedPrecondition("communicator pool: the node has no device");
  int initial = options.initial_group_size == 0 ? count : options.initial_group_size;
  if (initial < 1 || initial > count) {
    return Status::InvalidArgument(
        fmt::format("communicator pool: initial group of {} devices, the node has {}", initial, count));
  }
  auto core = std::make_shared<detail::GroupCore>(options, driver, count);
  core->Start(initial);
  PHOS_LOG(Info, "ctxpool", "communicator pool open: groups of {} device(s) being made (min ready {}, max {} per size)",
           initial, options.min_ready, options.max_groups);
  return std::unique_ptr<CommunicatorPool>(new CommunicatorPool(std::move(core)));
}

Result<DeviceGroupLease> CommunicatorPool::Lease(int size, const std::atomic<bool>* cancel) {
  return core_->Lease(size, cancel);
}
bool CommunicatorPool::WaitIdle(std::chrono::milliseconds timeout) { return core_->WaitIdle(timeout); }
CommunicatorPoolMetrics CommunicatorPool::Metrics() const { return core_->Metrics(); }
int CommunicatorPool::node_devices() const { return core_->node_devices(); }

std::string ToPrometheusText(const CommunicatorPoolMetrics& m) {
  std::string out;
  auto metric = [&out](const char* name, const char* type, const char* help, double value) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{} {}\n", name, help, name, type, name, value);
  };
  auto d = [](uint64_t v) { return static_cast<double>(v); };
  metric("phos_devgroup_leases_total", "counter", "Device group leases granted.", d(m.leases));
  metric("phos_devgroup_lease_hits_total", "counter", "Leases served by a ready group.", d(m.hits));
  metric("phos_devgroup_lease_misses_total", "counter", "Leases that waited for the refill.", d(m.misses));
  metric("phos_devgroup_lease_failures_total", "counter", "Lease calls that failed.", d(m.lease_failures));
  metric("phos_devgroup_returns_total", "counter", "Leases returned.", d(m.returns));
  metric("phos_devgroup_groups_created_total", "counter", "Groups (contexts and communicator) created.",
         d(m.groups_created));
  metric("phos_devgroup_groups_destroyed_total", "counter", "Groups destroyed.", d(m.groups_destroyed));
  metric("phos_devgroup_create_failures_total", "counter", "Group creations that failed.", d(m.create_failures));
  metric("phos_devgroup_create_seconds_total", "counter", "Time spent creating groups.", m.create_seconds_total);
  metric("phos_devgroup_create_seconds_last", "gauge", "Time the most recent group creation took.",
         m.create_seconds_last);
  metric("phos_devgroup_scrubs_total", "counter", "Returned groups scrubbed and made leasable again.", d(m.scrubs));
  metric("phos_devgroup_scrub_failures_total", "counter", "Scrubs that failed; the group was destroyed.",
         d(m.scrub_failures));
  out += "# HELP phos_devgroup_groups Device groups held, by state.\n# TYPE phos_devgroup_groups gauge\n";
  out += fmt::format("phos_devgroup_groups{{state=\"ready\"}} {}\n", m.ready);
  out += fmt::format("phos_devgroup_groups{{state=\"leased\"}} {}\n", m.leased);
  out += fmt::format("phos_devgroup_groups{{state=\"scrubbing\"}} {}\n", m.scrubbing);
  out += fmt::format("phos_devgroup_groups{{state=\"creating\"}} {}\n", m.creating);
  return out;
}

}  // namespace phos::ctxpool
