// Stream-ordered allocation and each device's default memory pool. The pool is an account kept
// in the frontend over the session's ordinary allocations (docs/remoting.md, "Stream-ordered
// allocation"): cudaMallocAsync allocates at once (the memory is ready before the stream reaches
// the call, which stream order allows), cudaFreeAsync is an asynchronous record that phosd
// executes in order, after the work queued before it. Freed memory goes back at once, so the pool
// reserves what its allocations use and nothing more.
#include <algorithm>
#include <array>
#include <mutex>

#include "cudart_internal.h"

using phos::frontend::Client;
using phos::frontend::Return;
using phos::frontend::StreamId;
namespace ipc = phos::ipc;

// cudaMemPool_t is a pointer to this opaque type of the CUDA headers; phos defines it as its pool.
struct CUmemPoolHandle_st {
  uint64_t release_threshold = 0;  // kept: freed memory is never held, whatever it says
  uint64_t used = 0;               // bytes of live allocations from this pool
  uint64_t used_high = 0;          // high-water mark of `used` since the last reset
  uint64_t reserved_high = 0;      // the same for reserved memory (reserved == used here)
  int reuse_follow_event = 1;      // the cudaMemPoolReuse* policies: CUDA's defaults, kept
  int reuse_opportunistic = 1;
  int reuse_internal = 1;
};

namespace {

// The session's devices are at most kMaxNcclRanks (ipc/wire.h): a device group's size.
std::array<CUmemPoolHandle_st, phos::ipc::kMaxNcclRanks> g_pools;
std::mutex g_pools_mu;

cudaError_t CheckDevice(int device) {
  int count = 0;
  if (CUresult r = phos::frontend::SessionDeviceCount(&count); r != CUDA_SUCCESS) return Return(r);
  if (device < 0 || device >= count || device >= static_cast<int>(g_pools.size())) return Return(cudaErrorInvalidDevice);
  return cudaSuccess;
}

// The device whose default pool `pool` is; -1 when it is none of them.
int DeviceOf(cudaMemPool_t pool) {
  for (size_t d = 0; d < g_pools.size(); ++d) {
    if (pool == &g_pools[d]) return static_cast<int>(d);
  }
  return -1;
}

cudaError_t AllocateFrom(void** ptr, size_t size, int device) {
  uint64_t out = 0;
  CUresult r = phos::frontend::AllocateDevice(size, /*pooled=*/true, &out);
  if (r != CUDA_SUCCESS) return Return(r == CUDA_ERROR_OUT_OF_MEMORY ? cudaErrorMemoryAllocation : static_cast<cudaError_t>(r));
  *ptr = reinterpret_cast<void*>(out);
  std::lock_guard lock(g_pools_mu);
  CUmemPoolHandle_st& pool = g_pools[device];
  pool.used += size;
  pool.used_high = std::max(pool.used_high, pool.used);
  pool.reserved_high = std::max(pool.reserved_high, pool.used);
  return cudaSuccess;
}

}  // namespace

namespace phos::frontend {

void PoolReleased(int device, size_t bytes) {
  if (device < 0 || device >= static_cast<int>(g_pools.size())) return;
  std::lock_guard lock(g_pools_mu);
  CUmemPoolHandle_st& pool = g_pools[device];
  pool.used -= std::min<uint64_t>(pool.used, bytes);
}

}  // namespace phos::frontend

extern "C" {

cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int device) {
  if (pool == nullptr) return Return(cudaErrorInvalidValue);
  if (cudaError_t e = CheckDevice(device); e != cudaSuccess) return e;
  *pool = &g_pools[device];
  return cudaSuccess;
}

// The current pool is always the default one (cudaDeviceSetMemPool is not served).
cudaError_t cudaDeviceGetMemPool(cudaMemPool_t* pool, int device) { return cudaDeviceGetDefaultMemPool(pool, device); }

cudaError_t cudaMallocAsync(void** ptr, size_t size, cudaStream_t stream) {
  (void)stream;
  if (ptr == nullptr) return Return(cudaErrorInvalidValue);
  *ptr = nullptr;
  if (size == 0) return cudaSuccess;
  const int device = phos::frontend::ThreadDevice();
  if (cudaError_t e = CheckDevice(device); e != cudaSuccess) return e;
  return AllocateFrom(ptr, size, device);
}

cudaError_t cudaMallocFromPoolAsync(void** ptr, size_t size, cudaMemPool_t pool, cudaStream_t stream) {
  (void)stream;
  if (ptr == nullptr) return Return(cudaErrorInvalidValue);
  const int device = DeviceOf(pool);
  if (device < 0) return Return(cudaErrorInvalidValue);
  *ptr = nullptr;
  if (size == 0) return cudaSuccess;
  if (cudaError_t e = CheckDevice(device); e != cudaSuccess) return e;
  // Allocated on the pool's device: the thread's device is switched for the call and back.
  int previous = 0;
  if (cudaError_t e = cudaGetDevice(&previous); e != cudaSuccess) return e;
  if (previous != device && cudaSetDevice(device) != cudaSuccess) return Return(cudaErrorInvalidDevice);
  cudaError_t e = AllocateFrom(ptr, size, device);
  if (previous != device) cudaSetDevice(previous);
  return e;
}

cudaError_t cudaFreeAsync(void* ptr, cudaStream_t stream) {
  if (ptr == nullptr) return cudaSuccess;
  auto base = reinterpret_cast<uintptr_t>(ptr);
  phos::frontend::DeviceAllocation freed;
  // Only the start of an allocation of this process may be freed: refused here, synchronously,
  // as NVIDIA's runtime does; phosd checks again when the record arrives.
  if (!phos::frontend::ForgetDeviceAllocation(base, &freed)) return Return(cudaErrorInvalidValue);
  if (freed.pooled) phos::frontend::PoolReleased(freed.device, freed.bytes);
  ipc::StreamPointerArgs a{base, 0};
  if (CUresult r = StreamId(stream, &a.stream); r != CUDA_SUCCESS) return Return(r);
  return Return(Client::Get().Call(ipc::Op::kMemFreeAsync, &a, sizeof(a), nullptr, 0, false));
}

// Nothing freed is kept, so there is nothing to trim.
cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, size_t min_bytes_to_keep) {
  (void)min_bytes_to_keep;
  return Return(DeviceOf(pool) < 0 ? cudaErrorInvalidValue : cudaSuccess);
}

cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value) {
  if (DeviceOf(pool) < 0 || value == nullptr) return Return(cudaErrorInvalidValue);
  std::lock_guard lock(g_pools_mu);
  switch (attr) {
    case cudaMemPoolReuseFollowEventDependencies: pool->reuse_follow_event = *static_cast<int*>(value) != 0; return cudaSuccess;
    case cudaMemPoolReuseAllowOpportunistic: pool->reuse_opportunistic = *static_cast<int*>(value) != 0; return cudaSuccess;
    case cudaMemPoolReuseAllowInternalDependencies: pool->reuse_internal = *static_cast<int*>(value) != 0; return cudaSuccess;
    case cudaMemPoolAttrReleaseThreshold: pool->release_threshold = *static_cast<uint64_t*>(value); return cudaSuccess;
    // The high-water marks may only be reset, to zero (they then restart from the current use).
    case cudaMemPoolAttrReservedMemHigh:
    case cudaMemPoolAttrUsedMemHigh:
      if (*static_cast<uint64_t*>(value) != 0) return Return(cudaErrorInvalidValue);
      (attr == cudaMemPoolAttrUsedMemHigh ? pool->used_high : pool->reserved_high) = pool->used;
      return cudaSuccess;
    default:
      return Return(cudaErrorInvalidValue);
  }
}

cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value) {
  if (DeviceOf(pool) < 0 || value == nullptr) return Return(cudaErrorInvalidValue);
  std::lock_guard lock(g_pools_mu);
  switch (attr) {
    case cudaMemPoolReuseFollowEventDependencies: *static_cast<int*>(value) = pool->reuse_follow_event; return cudaSuccess;
    case cudaMemPoolReuseAllowOpportunistic: *static_cast<int*>(value) = pool->reuse_opportunistic; return cudaSuccess;
    case cudaMemPoolReuseAllowInternalDependencies: *static_cast<int*>(value) = pool->reuse_internal; return cudaSuccess;
    case cudaMemPoolAttrReleaseThreshold: *static_cast<uint64_t*>(value) = pool->release_threshold; return cudaSuccess;
    case cudaMemPoolAttrReservedMemCurrent:
    case cudaMemPoolAttrUsedMemCurrent: *static_cast<uint64_t*>(value) = pool->used; return cudaSuccess;
    case cudaMemPoolAttrReservedMemHigh: *static_cast<uint64_t*>(value) = pool->reserved_high; return cudaSuccess;
    case cudaMemPoolAttrUsedMemHigh: *static_cast<uint64_t*>(value) = pool->used_high; return cudaSuccess;
    default:
      return Return(cudaErrorInvalidValue);
  }
}

}  // extern "C"
