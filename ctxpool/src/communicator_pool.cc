#include "phos/ctxpool/communicator_pool.h"

#include <fmt/core.h>
#include <prometheus/registry.h>

#include <utility>

#include "context_ops.h"
#include "phos/base/log.h"
#include "phos/driver/cuda_check.h"
#include "pool_core.h"

namespace phos::ctxpool {

std::string NcclResultName(ncclResult_t result) {
  static constexpr const char* kNames[] = {"ncclSuccess",       "ncclUnhandledCudaError", "ncclSystemError",
                                           "ncclInternalError", "ncclInvalidArgument",    "ncclInvalidUsage",
                                           "ncclRemoteError",   "ncclInProgress"};
  int v = static_cast<int>(result);
  const char* name = v >= 0 && v < ncclNumResults ? kNames[v] : "unknown ncclResult_t";
  return fmt::format("{} ({})", name, v);
}

DeviceGroupLease::DeviceGroupLease(std::shared_ptr<detail::GroupCore> core, detail::PooledGroup group)
    : core_(std::move(core)), group_(std::move(group)), tenants_(group_.contexts.size()) {}

DeviceGroupLease::DeviceGroupLease(DeviceGroupLease&& other) noexcept
    : core_(std::move(other.core_)),
      group_(std::exchange(other.group_, {})),
      tenants_(std::move(other.tenants_)) {}

DeviceGroupLease& DeviceGroupLease::operator=(DeviceGroupLease&& other) noexcept {
  if (this != &other) {
    Return();
    core_ = std::move(other.core_);
    group_ = std::exchange(other.group_, {});
    tenants_ = std::move(other.tenants_);
  }
  return *this;
}

DeviceGroupLease::~DeviceGroupLease() {
  Return();
}

void DeviceGroupLease::Return() {
  if (core_ == nullptr) return;
  std::shared_ptr<detail::GroupCore> core = std::move(core_);
  int size = static_cast<int>(group_.contexts.size());
  core->Return(size, std::exchange(group_, {}), std::exchange(tenants_, {}));
}

CommunicatorPool::CommunicatorPool(int node_devices, std::shared_ptr<detail::GroupCore> core)
    : node_devices_(node_devices), core_(std::move(core)) {}

CommunicatorPool::~CommunicatorPool() {
  core_->Shutdown();
}

Result<std::unique_ptr<CommunicatorPool>> CommunicatorPool::Open(
    const CommunicatorPoolOptions& options, std::shared_ptr<driver::DriverTable> driver,
    std::shared_ptr<prometheus::Registry> registry) {
  if (driver == nullptr) return Status::InvalidArgument("communicator pool needs a driver table");
  if (!driver->has_nccl())
    return Status::FailedPrecondition("communicator pool: the driver table has no NCCL");
  if (options.max_groups == 0 || options.min_ready > options.max_groups) {
    return Status::InvalidArgument(
        fmt::format("communicator pool: need 1 <= max_groups ({}) and min_ready ({}) <= max_groups",
                    options.max_groups, options.min_ready));
  }
  if (options.lease_timeout.count() < 0 || options.refill_retry_interval.count() < 0) {
    return Status::InvalidArgument(
        "communicator pool: lease_timeout and refill_retry_interval must not be negative");
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
  detail::PoolCoreOptions core_options{.name = "communicator pool",
                                       .min_ready = options.min_ready,
                                       .max_held = options.max_groups,
                                       .lease_timeout = options.lease_timeout,
                                       .refill_retry_interval = options.refill_retry_interval,
                                       .zero_on_scrub = options.zero_on_scrub,
                                       .create_on_miss = false};
  using Tenants = std::vector<TenantResources>;
  detail::PoolOps<detail::PooledGroup, Tenants> ops{
      .create = [driver](int size) { return detail::CreateDeviceGroup(*driver, size); },
      .scrub = [driver](const detail::PooledGroup& group, const Tenants& tenants,
                        bool zero) { return detail::ScrubDeviceGroup(*driver, group, tenants, zero); },
      .destroy = [driver](const detail::PooledGroup& group) { detail::DestroyDeviceGroup(*driver, group); },
      .describe = [](int size) { return fmt::format("device group of {} GPUs", size); }};
  if (registry == nullptr) registry = std::make_shared<prometheus::Registry>();
  auto core = std::make_shared<detail::GroupCore>(
      std::move(core_options), std::move(ops), std::move(registry),
      detail::PoolMetricNames{.prefix = "phos_devgroup", .items = "groups"});
  core->Start(initial);
  PHOS_LOG(Info, "ctxpool",
           "communicator pool open: groups of {} device(s) being made (min ready {}, max {} per size)",
           initial, options.min_ready, options.max_groups);
  return std::unique_ptr<CommunicatorPool>(new CommunicatorPool(count, std::move(core)));
}

Result<DeviceGroupLease> CommunicatorPool::Lease(int size, const std::atomic<bool>* cancel) {
  if (size < 1 || size > node_devices_) {
    return Status::InvalidArgument(
        fmt::format("device group of {} GPUs: the node has {} device(s)", size, node_devices_));
  }
  PHOS_ASSIGN_OR_RETURN(detail::PooledGroup group, core_->Lease(size, cancel));
  return DeviceGroupLease(core_, std::move(group));
}

bool CommunicatorPool::WaitIdle(std::chrono::milliseconds timeout) {
  return core_->WaitIdle(timeout);
}

bool CommunicatorPool::WaitUntil(const std::function<bool(const PoolStats&)>& done,
                                 std::chrono::milliseconds timeout) {
  return core_->WaitUntil(done, timeout);
}

PoolStats CommunicatorPool::Stats() const {
  return core_->Stats();
}

}  // namespace phos::ctxpool
