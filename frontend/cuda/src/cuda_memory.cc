// Memory in the driver API: allocations, copies and sets through the runtime frontend's code
// (cudart_memory.cc), so an allocation of either API is one of the other's too (cudaFree frees a
// cuMemAlloc pointer, cudaPointerGetAttributes knows it) and host bytes travel in the ring as the
// runtime's do.
#include <cstring>

#include "cuda_internal.h"

namespace ipc = phos::ipc;
using phos::frontend::Client;
using phos::frontend::driver::NeedContext;
using phos::frontend::driver::StreamId;

namespace {

CUresult CopyDtoD(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream, bool sync) {
  if (CUresult r = NeedContext(); r != CUDA_SUCCESS) return r;
  if (bytes == 0) return CUDA_SUCCESS;
  ipc::CopyArgs a{dst, src, bytes, 0};
  if (CUresult r = StreamId(stream, &a.stream); r != CUDA_SUCCESS) return r;
  return Client::Get().Call(ipc::Op::kMemcpyDtoD, &a, sizeof(a), nullptr, 0, sync);
}

CUresult CopyHtoD(CUdeviceptr dst, const void* src, size_t bytes, CUstream stream, bool sync) {
  if (CUresult r = NeedContext(); r != CUDA_SUCCESS) return r;
  if (bytes == 0) return CUDA_SUCCESS;
  if (src == nullptr) return CUDA_ERROR_INVALID_VALUE;
  uint64_t sid = 0;
  if (CUresult r = StreamId(stream, &sid); r != CUDA_SUCCESS) return r;
  // The bytes are in the ring when this returns: the caller may reuse `src` at once, as after a
  // copy from pageable memory.
  return phos::frontend::CopyToDevice(dst, src, bytes, sid, sync);
}

// Device to host waits for the bytes even in the asynchronous form: they come back in the reply.
CUresult CopyDtoH(void* dst, CUdeviceptr src, size_t bytes, CUstream stream) {
  if (CUresult r = NeedContext(); r != CUDA_SUCCESS) return r;
  if (bytes == 0) return CUDA_SUCCESS;
  if (dst == nullptr) return CUDA_ERROR_INVALID_VALUE;
  uint64_t sid = 0;
  if (CUresult r = StreamId(stream, &sid); r != CUDA_SUCCESS) return r;
  return phos::frontend::CopyToHost(dst, src, bytes, sid);
}

// `count` elements of `element_bytes` set to `value` (phosd checks the alignment the driver does).
CUresult Set(CUdeviceptr dst, uint32_t value, size_t count, uint32_t element_bytes, CUstream stream, bool sync) {
  if (CUresult r = NeedContext(); r != CUDA_SUCCESS) return r;
  if (count == 0) return CUDA_SUCCESS;
  ipc::MemsetArgs a{dst, 0, 0, value, element_bytes};
  if (__builtin_mul_overflow(count, element_bytes, &a.bytes)) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = StreamId(stream, &a.stream); r != CUDA_SUCCESS) return r;
  return Client::Get().Call(ipc::Op::kMemset, &a, sizeof(a), nullptr, 0, sync);
}

// What cuPointerGetAttribute answers for device memory of this process: an allocation, with its
// range and device.
struct DevicePointer {
  uintptr_t base = 0;
  phos::frontend::DeviceAllocation allocation{};
};

}  // namespace

extern "C" {

CUresult cuMemAlloc(CUdeviceptr* ptr, size_t bytes) {
  if (ptr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = NeedContext(); r != CUDA_SUCCESS) return r;
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  uint64_t out = 0;
  CUresult r = phos::frontend::AllocateDevice(bytes, /*pooled=*/false, &out);
  if (r == CUDA_SUCCESS) *ptr = out;
  return r;
}

CUresult cuMemFree(CUdeviceptr ptr) {
  if (CUresult r = NeedContext(); r != CUDA_SUCCESS) return r;
  return phos::frontend::FreeDevice(ptr);
}

CUresult cuMemGetInfo(size_t* free, size_t* total) {
  if (free == nullptr || total == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = NeedContext(); r != CUDA_SUCCESS) return r;
  ipc::MemInfo info{};
  size_t n = 0;
  CUresult r = Client::Get().Call(ipc::Op::kMemGetInfo, nullptr, 0, nullptr, 0, true, &info, sizeof(info), &n);
  if (r == CUDA_SUCCESS && n != sizeof(info)) r = CUDA_ERROR_UNKNOWN;
  if (r != CUDA_SUCCESS) return r;
  *free = info.free_bytes;
  *total = info.total_bytes;
  return CUDA_SUCCESS;
}

CUresult cuMemHostAlloc(void** ptr, size_t bytes, unsigned int flags) {
  constexpr unsigned kKnown = CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED;
  if (ptr == nullptr || (flags & ~kKnown) != 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = NeedContext(); r != CUDA_SUCCESS) return r;
  // refused.tsv: phosd cannot map the function process's pages into the device (as cudaHostAlloc).
  if ((flags & CU_MEMHOSTALLOC_DEVICEMAP) != 0) return CUDA_ERROR_NOT_SUPPORTED;
  return phos::frontend::AllocateHost(bytes, flags, ptr);
}

CUresult cuMemAllocHost(void** ptr, size_t bytes) { return cuMemHostAlloc(ptr, bytes, 0); }

CUresult cuMemFreeHost(void* ptr) {
  if (CUresult r = NeedContext(); r != CUDA_SUCCESS) return r;
  return phos::frontend::FreeHost(ptr);
}

CUresult cuMemcpyHtoD(CUdeviceptr dst, const void* src, size_t bytes) { return CopyHtoD(dst, src, bytes, nullptr, true); }
CUresult cuMemcpyDtoH(void* dst, CUdeviceptr src, size_t bytes) { return CopyDtoH(dst, src, bytes, nullptr); }
CUresult cuMemcpyDtoD(CUdeviceptr dst, CUdeviceptr src, size_t bytes) { return CopyDtoD(dst, src, bytes, nullptr, true); }
CUresult cuMemcpyHtoDAsync(CUdeviceptr dst, const void* src, size_t bytes, CUstream stream) {
  return CopyHtoD(dst, src, bytes, stream, false);
}
CUresult cuMemcpyDtoHAsync(void* dst, CUdeviceptr src, size_t bytes, CUstream stream) {
  return CopyDtoH(dst, src, bytes, stream);
}
CUresult cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream) {
  return CopyDtoD(dst, src, bytes, stream, false);
}

CUresult cuMemsetD8(CUdeviceptr dst, unsigned char value, size_t count) { return Set(dst, value, count, 1, nullptr, true); }
CUresult cuMemsetD16(CUdeviceptr dst, unsigned short value, size_t count) {
  return Set(dst, value, count, 2, nullptr, true);
}
CUresult cuMemsetD32(CUdeviceptr dst, unsigned int value, size_t count) { return Set(dst, value, count, 4, nullptr, true); }
CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t count, CUstream stream) {
  return Set(dst, value, count, 1, stream, false);
}
CUresult cuMemsetD16Async(CUdeviceptr dst, unsigned short value, size_t count, CUstream stream) {
  return Set(dst, value, count, 2, stream, false);
}
CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned int value, size_t count, CUstream stream) {
  return Set(dst, value, count, 4, stream, false);
}

// Device allocations and the host memory phos counts as pinned, as cudaPointerGetAttributes knows
// them. No host memory is mapped into the device, so host memory has no device pointer; attributes
// of memory phos does not serve (IPC, VMM handles, access flags) are refused (refused.tsv).
CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attribute, CUdeviceptr ptr) {
  if (data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!phos::frontend::driver::Initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  const void* p = reinterpret_cast<const void*>(ptr);
  DevicePointer device;
  const bool on_device = phos::frontend::FindDeviceAllocation(p, &device.base, &device.allocation);
  phos::frontend::HostRangeInfo host{};
  if (!on_device && !phos::frontend::FindHostRange(p, &host)) return CUDA_ERROR_INVALID_VALUE;
  const int ordinal = on_device ? device.allocation.device : host.device;
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
      *static_cast<CUcontext*>(data) = phos::frontend::driver::PrimaryContext(ordinal);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      *static_cast<unsigned*>(data) = on_device ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
      if (!on_device) return CUDA_ERROR_INVALID_VALUE;
      *static_cast<CUdeviceptr*>(data) = ptr;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
      if (on_device) return CUDA_ERROR_INVALID_VALUE;
      *static_cast<void**>(data) = reinterpret_cast<void*>(ptr);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
      *static_cast<int*>(data) = 0;  // managed memory is not served
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
      *static_cast<int*>(data) = ordinal;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
      *static_cast<CUdeviceptr*>(data) = on_device ? device.base : host.base;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
      *static_cast<size_t*>(data) = on_device ? device.allocation.bytes : host.bytes;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MAPPED:
      *static_cast<int*>(data) = on_device ? 1 : 0;
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_NOT_SUPPORTED;
  }
}

}  // extern "C"
