#include "phos/ctxpool/context_pool.h"

#include <fmt/core.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <utility>

#include "context_ops.h"
#include "phos/base/log.h"
#include "phos/driver/cuda_check.h"
#include "pool_core.h"

namespace phos::ctxpool {
namespace {

// The pool's contexts are all of one kind: one key in the core.
constexpr int kKey = 0;

}  // namespace

ContextLease::ContextLease(std::shared_ptr<detail::ContextCore> core, detail::PooledContext pooled,
                           int device, std::chrono::nanoseconds waited, std::string modules_owner)
    : core_(std::move(core)),
      pooled_(std::move(pooled)),
      device_(device),
      waited_(waited),
      modules_owner_(std::move(modules_owner)) {}

ContextLease::ContextLease(ContextLease&& other) noexcept
    : core_(std::move(other.core_)),
      pooled_(std::exchange(other.pooled_, {})),
      device_(other.device_),
      waited_(other.waited_),
      modules_owner_(std::move(other.modules_owner_)),
      tenant_(std::move(other.tenant_)) {}

ContextLease& ContextLease::operator=(ContextLease&& other) noexcept {
  if (this != &other) {
    Return();
    core_ = std::move(other.core_);
    pooled_ = std::exchange(other.pooled_, {});
    device_ = other.device_;
    waited_ = other.waited_;
    modules_owner_ = std::move(other.modules_owner_);
    tenant_ = std::move(other.tenant_);
  }
  return *this;
}

ModulesByHash ContextLease::TakeKeptModules() {
  return std::exchange(pooled_.kept_modules, {});
}

void ContextLease::KeepModules(const std::string& owner, ModulesByHash modules) {
  if (owner != pooled_.modules_owner) {
    // Kept for someone else (never taken by this lessee): they go, whoever keeps modules now.
    for (auto& [hash, m] : pooled_.kept_modules) tenant_.modules.push_back(m);
    pooled_.kept_modules.clear();
    pooled_.modules_owner = owner;
  }
  for (auto& [hash, m] : modules) {
    if (owner.empty() || !pooled_.kept_modules.emplace(hash, m).second) tenant_.modules.push_back(m);
  }
}

ContextLease::~ContextLease() {
  Return();
}

void ContextLease::Return() {
  if (core_ == nullptr || pooled_.context == nullptr) return;
  std::shared_ptr<detail::ContextCore> core = std::move(core_);
  core->Return(kKey, std::exchange(pooled_, {}), std::exchange(tenant_, {}));
}

ContextPool::ContextPool(const PoolOptions& options, std::shared_ptr<driver::DriverTable> driver,
                         std::shared_ptr<detail::ContextCore> core)
    : options_(options), driver_(std::move(driver)), core_(std::move(core)) {}

ContextPool::~ContextPool() {
  core_->Shutdown();
}

Result<std::unique_ptr<ContextPool>> ContextPool::Open(const PoolOptions& options,
                                                       std::shared_ptr<driver::DriverTable> driver,
                                                       std::shared_ptr<prometheus::Registry> registry) {
  if (driver == nullptr) return Status::InvalidArgument("context pool needs a driver table");
  if (options.max_contexts == 0)
    return Status::InvalidArgument("context pool: max_contexts must be at least 1");
  if (options.min_ready > options.max_contexts) {
    return Status::InvalidArgument(fmt::format("context pool: min_ready ({}) exceeds max_contexts ({})",
                                               options.min_ready, options.max_contexts));
  }
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
  detail::PoolCoreOptions core_options{.name = fmt::format("device {}", options.device),
                                       .min_ready = options.min_ready,
                                       .max_held = options.max_contexts,
                                       .lease_timeout = options.lease_timeout,
                                       .refill_retry_interval = options.refill_retry_interval,
                                       .zero_on_scrub = options.zero_on_scrub,
                                       .create_on_miss = true};
  int device = options.device;
  if (registry == nullptr) registry = std::make_shared<prometheus::Registry>();
  // Read where a context is current anyway: once the scrub has freed what a tenant left, the
  // reading is what the device holds without it (a leak across tenants shows as growth).
  prometheus::Gauge& memory_used = prometheus::BuildGauge()
                                        .Name("phos_device_memory_used_bytes")
                                        .Help("Device memory in use, read when the pool last created or scrubbed "
                                              "a context.")
                                        .Register(*registry)
                                        .Add({{"device", std::to_string(device)}});
  auto read_memory = [driver, gauge = &memory_used](const detail::PooledContext& pooled) {
    if (Result<uint64_t> used = detail::DeviceMemoryUsed(*driver, pooled); used.ok()) {
      gauge->Set(static_cast<double>(*used));
    }
  };
  detail::PoolOps<detail::PooledContext, TenantResources> ops{
      .create =
          [driver, device, read_memory](int) {
            Result<detail::PooledContext> created = detail::CreatePooledContext(*driver, device);
            if (created.ok()) read_memory(*created);
            return created;
          },
      .scrub =
          [driver, read_memory](const detail::PooledContext& pooled, const TenantResources& tenant, bool zero) {
            Status scrubbed = detail::ScrubPooledContext(*driver, pooled, tenant, zero);
            if (scrubbed.ok()) read_memory(pooled);
            return scrubbed;
          },
      .destroy =
          [driver](const detail::PooledContext& pooled) { detail::DestroyPooledContext(*driver, pooled); },
      .describe = [](int) { return std::string("pooled context"); }};
  auto core = std::make_shared<detail::ContextCore>(
      std::move(core_options), std::move(ops), std::move(registry),
      detail::PoolMetricNames{.prefix = "phos_ctxpool",
                              .items = "contexts",
                              .labels = {{"device", std::to_string(options.device)}}});
  core->Start(kKey);
  PHOS_LOG(Info, "ctxpool", "device {}: context pool open (min ready {}, max {}, zero on scrub {})",
           options.device, options.min_ready, options.max_contexts, options.zero_on_scrub);
  return std::unique_ptr<ContextPool>(new ContextPool(options, driver, std::move(core)));
}

Result<ContextLease> ContextPool::Lease(const std::atomic<bool>* cancel, const std::string& modules_owner) {
  // The owner's own modules first; then a context holding none, so that another owner's stay kept.
  const detail::ContextCore::Rank rank = [&modules_owner](const detail::PooledContext& c) {
    if (c.kept_modules.empty()) return 1;
    return c.modules_owner == modules_owner ? 0 : 2;
  };
  detail::ContextCore::Clock::duration waited{};
  PHOS_ASSIGN_OR_RETURN(detail::PooledContext pooled, core_->Lease(kKey, cancel, &waited, &rank));
  ContextLease lease(core_, std::move(pooled), options_.device,
                     std::chrono::duration_cast<std::chrono::nanoseconds>(waited), modules_owner);
  if (lease.pooled_.modules_owner != modules_owner) {
    // Another owner's code is never visible to this lessee.
    Status unloaded = detail::UnloadKeptModules(*driver_, lease.pooled_);
    if (!unloaded.ok()) {
      // The context goes back to the scrub, which destroys it when its modules cannot be unloaded.
      for (auto& [hash, m] : lease.pooled_.kept_modules) lease.tenant_.modules.push_back(m);
      lease.pooled_.kept_modules.clear();
      lease.Return();
      return unloaded.WithContext(
          fmt::format("device {}: lease: unload the modules kept for another function", options_.device));
    }
    lease.pooled_.modules_owner = modules_owner;
  }
  return lease;
}

Result<ContextLease> ContextPool::LeaseFresh() {
  PHOS_ASSIGN_OR_RETURN(detail::PooledContext pooled, core_->LeaseCreated(kKey));
  return ContextLease(core_, std::move(pooled), options_.device, std::chrono::nanoseconds(0), "");
}

void ContextPool::SetDemand(size_t contexts) { core_->SetDemand(kKey, contexts); }

bool ContextPool::WaitIdle(std::chrono::milliseconds timeout) {
  return core_->WaitIdle(timeout);
}

bool ContextPool::WaitUntil(const std::function<bool(const PoolStats&)>& done,
                            std::chrono::milliseconds timeout) {
  return core_->WaitUntil(done, timeout);
}

PoolStats ContextPool::Stats() const {
  return core_->Stats();
}

}  // namespace phos::ctxpool
