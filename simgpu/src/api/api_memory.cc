// Device and pinned host memory, copies and memsets.
#include "api/copy.h"
#include "api/driver.h"

using namespace phos::sim;

namespace {

constexpr unsigned kKnownHostAllocFlags =
    CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED;
constexpr unsigned kKnownHostRegisterFlags = CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP |
                                             CU_MEMHOSTREGISTER_IOMEMORY | CU_MEMHOSTREGISTER_READ_ONLY;

// Resolves the current context and `stream`, then runs `fn(driver, stream)`.
template <typename Fn>
CUresult OnStream(CUstream handle, Fn fn) {
  Driver* d = nullptr;
  std::shared_ptr<Context> ctx;
  std::shared_ptr<Stream> stream;
  if (CUresult r = RequireStream(handle, &d, &ctx, &stream); r != CUDA_SUCCESS) return r;
  return fn(*d, *stream);
}

CUresult Copy(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream, CallKind kind, CopySides sides) {
  return OnStream(stream, [&](Driver& d, Stream& s) { return EnqueueCopy(d, s, dst, src, bytes, kind, sides); });
}

CUresult Memset(CUdeviceptr dst, uint32_t value, size_t element_size, size_t count, CUstream stream) {
  return OnStream(stream,
                  [&](Driver& d, Stream& s) { return EnqueueMemset(d, s, dst, value, element_size, count); });
}

CUdeviceptr HostPtr(const void* p) { return reinterpret_cast<CUdeviceptr>(p); }

CUresult Copy2D(const CUDA_MEMCPY2D* c, CUstream stream, CallKind kind) {
  if (c == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return OnStream(stream, [&](Driver& d, Stream& s) { return EnqueueMemcpy2D(d, s, *c, kind); });
}

CUresult Memset2D(CUdeviceptr dst, size_t pitch, uint32_t value, size_t element_size, size_t width, size_t height,
                  CUstream stream) {
  return OnStream(stream, [&](Driver& d, Stream& s) {
    return EnqueueMemset2D(d, s, dst, pitch, value, element_size, width, height);
  });
}

}  // namespace

extern "C" {

PHOS_SIM_API CUresult CUDAAPI cuMemAlloc(CUdeviceptr* dptr, size_t bytesize) {
  if (dptr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver* d = nullptr;
  std::shared_ptr<Context> ctx;
  if (CUresult r = RequireContext(&d, &ctx); r != CUDA_SUCCESS) return r;
  if (bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  return d->memory().Allocate(ctx->device->ordinal, ctx->id, bytesize, dptr);
}

PHOS_SIM_API CUresult CUDAAPI cuMemFree(CUdeviceptr dptr) {
  Driver* d = nullptr;
  std::shared_ptr<Context> ctx;
  if (CUresult r = RequireContext(&d, &ctx); r != CUDA_SUCCESS) return r;
  // cuMemFree synchronises: work still using the memory finishes first.
  if (CUresult r = ctx->exec->Synchronize(); r != CUDA_SUCCESS) return r;
  return d->memory().Free(dptr);
}

PHOS_SIM_API CUresult CUDAAPI cuMemGetInfo(size_t* free, size_t* total) {
  if (free == nullptr || total == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver* d = nullptr;
  std::shared_ptr<Context> ctx;
  if (CUresult r = RequireContext(&d, &ctx); r != CUDA_SUCCESS) return r;
  uint64_t f = 0, t = 0;
  if (CUresult r = d->memory().Info(ctx->device->ordinal, &f, &t); r != CUDA_SUCCESS) return r;
  *free = f;
  *total = t;
  return CUDA_SUCCESS;
}

PHOS_SIM_API CUresult CUDAAPI cuMemHostAlloc(void** pp, size_t bytesize, unsigned int flags) {
  if (pp == nullptr || bytesize == 0 || (flags & ~kKnownHostAllocFlags) != 0) return CUDA_ERROR_INVALID_VALUE;
  Driver* d = nullptr;
  std::shared_ptr<Context> ctx;
  if (CUresult r = RequireContext(&d, &ctx); r != CUDA_SUCCESS) return r;
  return d->host_memory().Allocate(bytesize, flags, pp);
}

PHOS_SIM_API CUresult CUDAAPI cuMemAllocHost(void** pp, size_t bytesize) {
  return cuMemHostAlloc(pp, bytesize, 0);
}

PHOS_SIM_API CUresult CUDAAPI cuMemGetAddressRange(CUdeviceptr* pbase, size_t* psize, CUdeviceptr dptr) {
  Driver* d = nullptr;
  std::shared_ptr<Context> ctx;
  if (CUresult r = RequireContext(&d, &ctx); r != CUDA_SUCCESS) return r;
  AllocationInfo info;
  if (!d->memory().FindAllocation(dptr, &info)) return CUDA_ERROR_NOT_FOUND;
  if (pbase != nullptr) *pbase = info.base;
  if (psize != nullptr) *psize = info.size;
  return CUDA_SUCCESS;
}

PHOS_SIM_API CUresult CUDAAPI cuPointerGetAttribute(void* data, CUpointer_attribute attribute, CUdeviceptr ptr) {
  if (data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver* d = nullptr;
  if (CUresult r = RequireDriver(&d); r != CUDA_SUCCESS) return r;
  AllocationInfo info;
  bool device = d->memory().FindAllocation(ptr, &info);
  if (!device) {
    // Host memory is known to the driver only when pinned or registered.
    if (!d->host_memory().IsPinned(reinterpret_cast<const void*>(ptr), 1)) return CUDA_ERROR_INVALID_VALUE;
    switch (attribute) {
      case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: *static_cast<unsigned*>(data) = CU_MEMORYTYPE_HOST; return CUDA_SUCCESS;
      case CU_POINTER_ATTRIBUTE_HOST_POINTER: *static_cast<void**>(data) = reinterpret_cast<void*>(ptr); return CUDA_SUCCESS;
      default: return CUDA_ERROR_INVALID_VALUE;
    }
  }
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: *static_cast<unsigned*>(data) = CU_MEMORYTYPE_DEVICE; return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: *static_cast<CUdeviceptr*>(data) = ptr; return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *static_cast<int*>(data) = info.device; return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *static_cast<CUdeviceptr*>(data) = info.base; return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *static_cast<size_t*>(data) = info.size; return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MAPPED: *static_cast<int*>(data) = 1; return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED: *static_cast<int*>(data) = 0; return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE: *static_cast<int*>(data) = 0; return CUDA_SUCCESS;
    default: return CUDA_ERROR_NOT_SUPPORTED;
  }
}

PHOS_SIM_API CUresult CUDAAPI cuMemFreeHost(void* p) {
  Driver* d = nullptr;
  std::shared_ptr<Context> ctx;
  if (CUresult r = RequireContext(&d, &ctx); r != CUDA_SUCCESS) return r;
  return d->host_memory().Free(p);
}

PHOS_SIM_API CUresult CUDAAPI cuMemHostRegister(void* p, size_t bytesize, unsigned int flags) {
  if (p == nullptr || bytesize == 0 || (flags & ~kKnownHostRegisterFlags) != 0) return CUDA_ERROR_INVALID_VALUE;
  Driver* d = nullptr;
  std::shared_ptr<Context> ctx;
  if (CUresult r = RequireContext(&d, &ctx); r != CUDA_SUCCESS) return r;
  return d->host_memory().Register(p, bytesize, flags);
}

PHOS_SIM_API CUresult CUDAAPI cuMemHostUnregister(void* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver* d = nullptr;
  std::shared_ptr<Context> ctx;
  if (CUresult r = RequireContext(&d, &ctx); r != CUDA_SUCCESS) return r;
  return d->host_memory().Unregister(p);
}

PHOS_SIM_API CUresult CUDAAPI cuMemcpyHtoD(CUdeviceptr dst, const void* src, size_t bytes) {
  if (src == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return Copy(dst, HostPtr(src), bytes, nullptr, CallKind::kSync, CopySides::kHostToDevice);
}

PHOS_SIM_API CUresult CUDAAPI cuMemcpyDtoH(void* dst, CUdeviceptr src, size_t bytes) {
  if (dst == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return Copy(HostPtr(dst), src, bytes, nullptr, CallKind::kSync, CopySides::kDeviceToHost);
}

PHOS_SIM_API CUresult CUDAAPI cuMemcpyDtoD(CUdeviceptr dst, CUdeviceptr src, size_t bytes) {
  // Device-to-device copies are asynchronous with respect to the host, even this one (CUDA's
  // API synchronization behavior).
  return Copy(dst, src, bytes, nullptr, CallKind::kAsync, CopySides::kDeviceToDevice);
}

PHOS_SIM_API CUresult CUDAAPI cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t bytes) {
  return Copy(dst, src, bytes, nullptr, CallKind::kSync, CopySides::kUnified);
}

PHOS_SIM_API CUresult CUDAAPI cuMemcpyHtoDAsync(CUdeviceptr dst, const void* src, size_t bytes, CUstream stream) {
  if (src == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return Copy(dst, HostPtr(src), bytes, stream, CallKind::kAsync, CopySides::kHostToDevice);
}

PHOS_SIM_API CUresult CUDAAPI cuMemcpyDtoHAsync(void* dst, CUdeviceptr src, size_t bytes, CUstream stream) {
  if (dst == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return Copy(HostPtr(dst), src, bytes, stream, CallKind::kAsync, CopySides::kDeviceToHost);
}

PHOS_SIM_API CUresult CUDAAPI cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream) {
  return Copy(dst, src, bytes, stream, CallKind::kAsync, CopySides::kDeviceToDevice);
}

PHOS_SIM_API CUresult CUDAAPI cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream) {
  return Copy(dst, src, bytes, stream, CallKind::kAsync, CopySides::kUnified);
}

PHOS_SIM_API CUresult CUDAAPI cuMemsetD8(CUdeviceptr dst, unsigned char value, size_t count) {
  return Memset(dst, value, 1, count, nullptr);
}

PHOS_SIM_API CUresult CUDAAPI cuMemsetD32(CUdeviceptr dst, unsigned int value, size_t count) {
  return Memset(dst, value, 4, count, nullptr);
}

PHOS_SIM_API CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t count, CUstream stream) {
  return Memset(dst, value, 1, count, stream);
}

PHOS_SIM_API CUresult CUDAAPI cuMemsetD32Async(CUdeviceptr dst, unsigned int value, size_t count,
                                               CUstream stream) {
  return Memset(dst, value, 4, count, stream);
}

// 2D copies are synchronous like cuMemcpy (device-to-device ones too: CUDA's API synchronization
// behavior makes only the 1D cuMemcpyDtoD asynchronous).
PHOS_SIM_API CUresult CUDAAPI cuMemcpy2D(const CUDA_MEMCPY2D* copy) { return Copy2D(copy, nullptr, CallKind::kSync); }

PHOS_SIM_API CUresult CUDAAPI cuMemcpy2DUnaligned(const CUDA_MEMCPY2D* copy) {
  return Copy2D(copy, nullptr, CallKind::kSync);
}

PHOS_SIM_API CUresult CUDAAPI cuMemcpy2DAsync(const CUDA_MEMCPY2D* copy, CUstream stream) {
  return Copy2D(copy, stream, CallKind::kAsync);
}

PHOS_SIM_API CUresult CUDAAPI cuMemsetD16(CUdeviceptr dst, unsigned short value, size_t count) {
  return Memset(dst, value, 2, count, nullptr);
}

PHOS_SIM_API CUresult CUDAAPI cuMemsetD16Async(CUdeviceptr dst, unsigned short value, size_t count, CUstream stream) {
  return Memset(dst, value, 2, count, stream);
}

PHOS_SIM_API CUresult CUDAAPI cuMemsetD2D8(CUdeviceptr dst, size_t pitch, unsigned char value, size_t width,
                                           size_t height) {
  return Memset2D(dst, pitch, value, 1, width, height, nullptr);
}

PHOS_SIM_API CUresult CUDAAPI cuMemsetD2D16(CUdeviceptr dst, size_t pitch, unsigned short value, size_t width,
                                            size_t height) {
  return Memset2D(dst, pitch, value, 2, width, height, nullptr);
}

PHOS_SIM_API CUresult CUDAAPI cuMemsetD2D32(CUdeviceptr dst, size_t pitch, unsigned int value, size_t width,
                                            size_t height) {
  return Memset2D(dst, pitch, value, 4, width, height, nullptr);
}

PHOS_SIM_API CUresult CUDAAPI cuMemsetD2D8Async(CUdeviceptr dst, size_t pitch, unsigned char value, size_t width,
                                                size_t height, CUstream stream) {
  return Memset2D(dst, pitch, value, 1, width, height, stream);
}

PHOS_SIM_API CUresult CUDAAPI cuMemsetD2D16Async(CUdeviceptr dst, size_t pitch, unsigned short value, size_t width,
                                                 size_t height, CUstream stream) {
  return Memset2D(dst, pitch, value, 2, width, height, stream);
}

PHOS_SIM_API CUresult CUDAAPI cuMemsetD2D32Async(CUdeviceptr dst, size_t pitch, unsigned int value, size_t width,
                                                 size_t height, CUstream stream) {
  return Memset2D(dst, pitch, value, 4, width, height, stream);
}

}  // extern "C"
