// The driver work behind the pools: creating a pooled context with its cuBLAS handle, scrubbing
// one a tenant returned, destroying one; the same for device groups (a context per device and a
// communicator over them). Each leaves the calling thread's current context as it found it.
#pragma once

#include "phos/base/status.h"
#include "phos/ctxpool/communicator_pool.h"
#include "phos/ctxpool/context_pool.h"
#include "phos/driver/driver_table.h"

namespace phos::ctxpool::detail {

// A new context on `device` and, when the driver table has cuBLAS, a handle in it. No cuBLAS
// workspace is allocated: simgpu's cuBLAS has none, and NVIDIA's allocates its default one at
// the handle's first GEMM on a stream, which the first lessee pays once per context.
Result<PooledContext> CreatePooledContext(driver::DriverTable& driver, int device);

// Undoes what the tenant did: waits for its work, resets the pooled cuBLAS handle to its
// defaults (stream NULL, CUBLAS_DEFAULT_MATH), destroys its extra cuBLAS handles, events and
// streams, zeroes its allocations when `zero` (cuMemsetD8Async on the NULL stream, then a
// synchronize), frees them and unloads its modules. The first driver error stops the scrub and
// is returned: the context must then be destroyed, not reused.
Status ScrubPooledContext(driver::DriverTable& driver, const PooledContext& pooled,
                          const TenantResources& tenant, bool zero);

// The bytes of device memory in use on `pooled`'s device (cuMemGetInfo's total less free), read
// with its context current.
Result<uint64_t> DeviceMemoryUsed(driver::DriverTable& driver, const PooledContext& pooled);

// Unloads the modules `pooled` keeps for an owner (PooledContext::kept_modules), each removed from
// the map once unloaded; the first driver error stops and is returned (the rest stay in the map).
Status UnloadKeptModules(driver::DriverTable& driver, PooledContext& pooled);

// Destroys the kept modules, the handle and the context (which releases whatever the tenant
// left). Errors are logged: there is nothing else to do with them.
void DestroyPooledContext(driver::DriverTable& driver, const PooledContext& pooled);

// A pooled context on each of node devices 0..size-1, then a communicator over them: one
// ncclGetUniqueId, and ncclCommInitRank for rank d with context d current, all inside one
// ncclGroupStart/End (one thread creates every rank). On failure whatever was made is destroyed.
Result<PooledGroup> CreateDeviceGroup(driver::DriverTable& driver, int size);

// Scrubs every context of the group with its tenant's resources (tenants[d] for context d),
// as ScrubPooledContext does; the first error is returned and the group must be destroyed.
Status ScrubDeviceGroup(driver::DriverTable& driver, const PooledGroup& group,
                        const std::vector<TenantResources>& tenants, bool zero);

// The communicator's ranks first (they hold their contexts), then the contexts. Errors are logged.
void DestroyDeviceGroup(driver::DriverTable& driver, const PooledGroup& group);

}  // namespace phos::ctxpool::detail
