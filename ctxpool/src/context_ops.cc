#include "context_ops.h"

#include <fmt/core.h>

#include "phos/driver/context_scope.h"
#include "phos/driver/cuda_check.h"
#include "phos/driver/physical_memory.h"
#include "phos/base/log.h"

namespace phos::ctxpool::detail {
namespace {

const char* BlasStatusName(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    default:
      return "cuBLAS error";
  }
}

// The cuBLAS counterpart of CuStatus: allocation failures are out of memory, the rest device errors.
Status BlasStatus(cublasStatus_t s, const char* call) {
  if (s == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  std::string message = fmt::format("{}: {} ({})", call, BlasStatusName(s), static_cast<int>(s));
  return s == CUBLAS_STATUS_ALLOC_FAILED ? Status::OutOfMemory(std::move(message))
                                         : Status::DeviceError(std::move(message));
}
#define PHOS_BLAS_RETURN_IF_ERROR(call) PHOS_RETURN_IF_ERROR(BlasStatus((call), #call))

}  // namespace

Result<PooledContext> CreatePooledContext(driver::DriverTable& driver, int device) {
  const driver::CuErrorText& text = driver.error_text();
  CUdevice dev = 0;
  PHOS_CU_RETURN_IF_ERROR(text, driver.cuDeviceGet(&dev, device));
  PooledContext pooled;
  PHOS_CU_RETURN_IF_ERROR(text, driver.cuCtxCreate(&pooled.context, nullptr, 0, dev));
  // cuCtxCreate pushed the context on this thread; the handle binds to it, then it is popped.
  cublasStatus_t blas = driver.has_cublas() ? driver.cublasCreate(&pooled.blas) : CUBLAS_STATUS_SUCCESS;
  driver.cuCtxPopCurrent(nullptr);
  if (blas != CUBLAS_STATUS_SUCCESS) {
    driver.cuCtxDestroy(pooled.context);
    return BlasStatus(blas, "cublasCreate");
  }
  return pooled;
}

// Physical memory the tenant handed over unmapped (TenantResources::unmapped): zeroed (with `zero`)
// and released whatever else of the scrub fails, since destroying the context would not release it.
// Without a usable context it is released unzeroed: it is mapped nowhere, and kept it would be lost.
Status ReleaseUnmapped(driver::DriverTable& driver, CUcontext context, const TenantResources& tenant, bool zero) {
  if (tenant.unmapped.empty()) return Status::Ok();
  driver::ContextScope scope(driver, context);
  Status first = Status::Ok();
  for (const TenantResources::Unmapped& u : tenant.unmapped) {
    Status s = zero && scope.ok() ? driver::ZeroAndRelease(driver, u.handle, u.bytes, u.device)
                                  : driver::CuStatus(driver.cuMemRelease(u.handle), "cuMemRelease", driver.error_text());
    if (first.ok() && !s.ok()) first = s;
  }
  if (first.ok() && zero && !scope.ok()) first = Status::DeviceError("memory released unzeroed: no usable context");
  return first;
}

Status ScrubPooledContext(driver::DriverTable& driver, const PooledContext& pooled,
                          const TenantResources& tenant, bool zero) {
  const driver::CuErrorText& text = driver.error_text();
  PHOS_RETURN_IF_ERROR(ReleaseUnmapped(driver, pooled.context, tenant, zero));
  driver::ContextScope scope(driver, pooled.context);
  if (!scope.ok()) return Status::DeviceError("cuCtxPushCurrent of the returned context failed");
  // The tenant's queued work finishes first; a sticky error from it (an illegal address) shows
  // here and condemns the context.
  PHOS_CU_RETURN_IF_ERROR(text, driver.cuCtxSynchronize());
  if (pooled.blas != nullptr) {
    // Before the tenant's streams go: the handle may still name one of them.
    PHOS_BLAS_RETURN_IF_ERROR(driver.cublasSetStream(pooled.blas, nullptr));
    PHOS_BLAS_RETURN_IF_ERROR(driver.cublasSetMathMode(pooled.blas, CUBLAS_DEFAULT_MATH));
  }
  for (cublasHandle_t h : tenant.blas_handles) PHOS_BLAS_RETURN_IF_ERROR(driver.cublasDestroy(h));
  for (CUevent e : tenant.events) PHOS_CU_RETURN_IF_ERROR(text, driver.cuEventDestroy(e));
  for (CUstream s : tenant.streams) PHOS_CU_RETURN_IF_ERROR(text, driver.cuStreamDestroy(s));
  if (zero && (!tenant.allocations.empty() || !tenant.mappings.empty())) {
    for (const TenantResources::Allocation& a : tenant.allocations) {
      PHOS_CU_RETURN_IF_ERROR(text, driver.cuMemsetD8Async(a.base, 0, a.bytes, nullptr));
    }
    for (const TenantResources::Mapping& m : tenant.mappings) {
      PHOS_CU_RETURN_IF_ERROR(text, driver.cuMemsetD8Async(m.base, 0, m.bytes, nullptr));
    }
    PHOS_CU_RETURN_IF_ERROR(text, driver.cuCtxSynchronize());
  }
  for (const TenantResources::Allocation& a : tenant.allocations)
    PHOS_CU_RETURN_IF_ERROR(text, driver.cuMemFree(a.base));
  for (const TenantResources::Mapping& m : tenant.mappings) {
    PHOS_CU_RETURN_IF_ERROR(text, driver.cuMemUnmap(m.base, m.bytes));
    PHOS_CU_RETURN_IF_ERROR(text, driver.cuMemRelease(m.handle));
  }
  for (const TenantResources::AddressRange& r : tenant.address_ranges)
    PHOS_CU_RETURN_IF_ERROR(text, driver.cuMemAddressFree(r.base, r.bytes));
  for (CUmodule m : tenant.modules) PHOS_CU_RETURN_IF_ERROR(text, driver.cuModuleUnload(m));
  PHOS_CU_RETURN_IF_ERROR(text, driver.cuCtxSynchronize());
  return Status::Ok();
}

Result<uint64_t> DeviceMemoryUsed(driver::DriverTable& driver, const PooledContext& pooled) {
  driver::ContextScope scope(driver, pooled.context);
  if (!scope.ok()) return Status::DeviceError("cuCtxPushCurrent of a pooled context failed");
  size_t free = 0, total = 0;
  PHOS_CU_RETURN_IF_ERROR(driver.error_text(), driver.cuMemGetInfo(&free, &total));
  return static_cast<uint64_t>(total - free);
}

Status UnloadKeptModules(driver::DriverTable& driver, PooledContext& pooled) {
  if (pooled.kept_modules.empty()) return Status::Ok();
  driver::ContextScope scope(driver, pooled.context);
  if (!scope.ok()) return Status::DeviceError("cuCtxPushCurrent of a pooled context failed");
  for (auto it = pooled.kept_modules.begin(); it != pooled.kept_modules.end();) {
    PHOS_CU_RETURN_IF_ERROR(driver.error_text(), driver.cuModuleUnload(it->second));
    it = pooled.kept_modules.erase(it);
  }
  return Status::Ok();
}

void DestroyPooledContext(driver::DriverTable& driver, const PooledContext& pooled) {
  if (!pooled.kept_modules.empty()) {
    PooledContext kept = pooled;
    Status s = UnloadKeptModules(driver, kept);
    if (!s.ok()) PHOS_LOG(Warn, "ctxpool", "context {}: kept modules: {}", pooled.id, s.message());
  }
  if (pooled.blas != nullptr) {
    driver::ContextScope scope(driver, pooled.context);
    Status s = BlasStatus(driver.cublasDestroy(pooled.blas), "cublasDestroy");
    if (!s.ok()) PHOS_LOG(Warn, "ctxpool", "context {}: {}", pooled.id, s.message());
  }
  Status s = driver::CuStatus(driver.cuCtxDestroy(pooled.context), "cuCtxDestroy", driver.error_text());
  if (!s.ok()) PHOS_LOG(Warn, "ctxpool", "context {}: {}", pooled.id, s.message());
}

Result<PooledGroup> CreateDeviceGroup(driver::DriverTable& driver, int size) {
  PooledGroup group;
  for (int d = 0; d < size; ++d) {
    Result<PooledContext> pooled = CreatePooledContext(driver, d);
    if (!pooled.ok()) {
      DestroyDeviceGroup(driver, group);
      return pooled.status().WithContext(fmt::format("device group of {}: context on device {}", size, d));
    }
    group.contexts.push_back(*pooled);
  }
  ncclUniqueId id;
  ncclResult_t r = driver.ncclGetUniqueId(&id);
  group.comms.assign(size, nullptr);
  if (r == ncclSuccess) {
    r = driver.ncclGroupStart();
    for (int d = 0; r == ncclSuccess && d < size; ++d) {
      driver::ContextScope scope(driver, group.contexts[d].context);
      if (!scope.ok()) {
        r = ncclUnhandledCudaError;
        break;
      }
      r = driver.ncclCommInitRank(&group.comms[d], size, id, d);
    }
    ncclResult_t end = driver.ncclGroupEnd();
    if (r == ncclSuccess) r = end;
  }
  if (r != ncclSuccess) {
    DestroyDeviceGroup(driver, group);
    return Status::DeviceError(
        fmt::format("device group of {}: communicator (ncclCommInitRank per context): {}", size, NcclResultName(r)));
  }
  return group;
}

Status ScrubDeviceGroup(driver::DriverTable& driver, const PooledGroup& group,
                        const std::vector<TenantResources>& tenants, bool zero) {
  static const TenantResources kNothing;
  for (ncclComm_t comm : group.comms) {
    if (comm != nullptr) continue;
    // Destroyed, not scrubbed: what no context's destruction releases goes first.
    for (size_t d = 0; d < group.contexts.size() && d < tenants.size(); ++d) {
      ReleaseUnmapped(driver, group.contexts[d].context, tenants[d], zero).IgnoreError();
    }
    return Status::FailedPrecondition(fmt::format("device group {}: its communicator was aborted", group.id));
  }
  for (size_t d = 0; d < group.contexts.size(); ++d) {
    const TenantResources& tenant = d < tenants.size() ? tenants[d] : kNothing;
    PHOS_RETURN_IF_ERROR(
        ScrubPooledContext(driver, group.contexts[d], tenant, zero).WithContext(fmt::format("device {}", d)));
  }
  return Status::Ok();
}

void DestroyDeviceGroup(driver::DriverTable& driver, const PooledGroup& group) {
  for (ncclComm_t comm : group.comms) {
    if (comm == nullptr) continue;
    if (ncclResult_t r = driver.ncclCommDestroy(comm); r != ncclSuccess)
      PHOS_LOG(Warn, "ctxpool", "device group {}: ncclCommDestroy: {}", group.id, NcclResultName(r));
  }
  for (const PooledContext& pooled : group.contexts) DestroyPooledContext(driver, pooled);
}

}  // namespace phos::ctxpool::detail
