// The virtual memory management API: address reservations, physical allocations, mappings.
#include "api/driver.h"

using namespace phos::sim;

namespace {

// Checks the allocation properties simgpu supports: pinned device memory on a valid device,
// no shareable handle types, no compression. Returns the device ordinal.
CUresult CheckAllocationProp(Driver& d, const CUmemAllocationProp* prop, int* device) {
  if (prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
  if (prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
  if (d.device(prop->location.id) == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  if (prop->requestedHandleTypes != CU_MEM_HANDLE_TYPE_NONE) return CUDA_ERROR_NOT_SUPPORTED;
  if (prop->allocFlags.compressionType != 0) return CUDA_ERROR_NOT_SUPPORTED;
  *device = prop->location.id;
  return CUDA_SUCCESS;
}

}  // namespace

extern "C" {

PHOS_SIM_API CUresult CUDAAPI cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp* prop,
                                                            CUmemAllocationGranularity_flags option) {
  if (granularity == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver* d = nullptr;
  if (CUresult r = RequireDriver(&d); r != CUDA_SUCCESS) return r;
  int device = 0;
  if (CUresult r = CheckAllocationProp(*d, prop, &device); r != CUDA_SUCCESS) return r;
  if (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *granularity = DeviceMemory::kGranularity;
  return CUDA_SUCCESS;
}

PHOS_SIM_API CUresult CUDAAPI cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                                  unsigned long long flags) {
  if (ptr == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  Driver* d = nullptr;
  if (CUresult r = RequireDriver(&d); r != CUDA_SUCCESS) return r;
  return d->memory().ReserveAddress(size, alignment, addr, ptr);
}

PHOS_SIM_API CUresult CUDAAPI cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  Driver* d = nullptr;
  if (CUresult r = RequireDriver(&d); r != CUDA_SUCCESS) return r;
  return d->memory().FreeAddress(ptr, size);
}

PHOS_SIM_API CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                                          const CUmemAllocationProp* prop, unsigned long long flags) {
  if (handle == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  Driver* d = nullptr;
  if (CUresult r = RequireDriver(&d); r != CUDA_SUCCESS) return r;
  int device = 0;
  if (CUresult r = CheckAllocationProp(*d, prop, &device); r != CUDA_SUCCESS) return r;
  return d->memory().CreatePhysical(device, size, handle);
}

PHOS_SIM_API CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle) {
  Driver* d = nullptr;
  if (CUresult r = RequireDriver(&d); r != CUDA_SUCCESS) return r;
  return d->memory().ReleasePhysical(handle);
}

PHOS_SIM_API CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                                       CUmemGenericAllocationHandle handle, unsigned long long flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  Driver* d = nullptr;
  if (CUresult r = RequireDriver(&d); r != CUDA_SUCCESS) return r;
  return d->memory().Map(ptr, size, offset, handle);
}

PHOS_SIM_API CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size) {
  Driver* d = nullptr;
  if (CUresult r = RequireDriver(&d); r != CUDA_SUCCESS) return r;
  return d->memory().Unmap(ptr, size);
}

PHOS_SIM_API CUresult CUDAAPI cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc,
                                             size_t count) {
  if (desc == nullptr || count == 0) return CUDA_ERROR_INVALID_VALUE;
  Driver* d = nullptr;
  if (CUresult r = RequireDriver(&d); r != CUDA_SUCCESS) return r;
  // simgpu devices share one address space, so the access of the last descriptor naming a
  // device applies to every device (a departure only for multi-device peer access).
  Access access = Access::kNone;
  for (size_t i = 0; i < count; ++i) {
    if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE || d->device(desc[i].location.id) == nullptr) {
      return CUDA_ERROR_INVALID_DEVICE;
    }
    switch (desc[i].flags) {
      case CU_MEM_ACCESS_FLAGS_PROT_NONE: access = Access::kNone; break;
      case CU_MEM_ACCESS_FLAGS_PROT_READ: access = Access::kRead; break;
      case CU_MEM_ACCESS_FLAGS_PROT_READWRITE: access = Access::kReadWrite; break;
      default: return CUDA_ERROR_INVALID_VALUE;
    }
  }
  return d->memory().SetAccess(ptr, size, access);
}

}  // extern "C"
