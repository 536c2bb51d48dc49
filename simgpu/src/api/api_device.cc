// Initialisation, driver version, devices, primary contexts and error names.
#include <cstring>

#include "api/driver.h"
#include "api/error_table.h"

using namespace phos::sim;

namespace {

// The attributes phos and typical CUDA applications query. Anything else is answered with
// CUDA_ERROR_NOT_SUPPORTED rather than an invented value (simgpu/README.md).
bool DeviceAttribute(const Device& d, CUdevice_attribute attrib, int* value) {
  const DeviceProfile& p = *d.profile;
  switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *value = p.cc_major; return true;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *value = p.cc_minor; return true;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *value = p.sm_count; return true;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *value = 1024; return true;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: *value = 1024; return true;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: *value = 1024; return true;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: *value = 64; return true;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: *value = 2147483647; return true;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: *value = 65535; return true;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: *value = 65535; return true;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *value = 32; return true;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: *value = 2048; return true;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: *value = 48 << 10; return true;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: *value = 65536; return true;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY: *value = 64 << 10; return true;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: *value = p.clock_rate_khz; return true;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: *value = p.memory_clock_khz; return true;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: *value = p.memory_bus_width_bits; return true;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: *value = p.l2_cache_bytes; return true;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: *value = p.async_engine_count; return true;
    case CU_DEVICE_ATTRIBUTE_GPU_OVERLAP: *value = 1; return true;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS: *value = 1; return true;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: *value = 1; return true;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: *value = 0; return true;  // no mapped pinned memory
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: *value = 0; return true;       // no cuMemAllocManaged
    case CU_DEVICE_ATTRIBUTE_INTEGRATED: *value = 0; return true;
    case CU_DEVICE_ATTRIBUTE_ECC_ENABLED: *value = 1; return true;
    case CU_DEVICE_ATTRIBUTE_TCC_DRIVER: *value = 0; return true;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE: *value = CU_COMPUTEMODE_DEFAULT; return true;
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: *value = 0; return true;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: *value = 0x17 + d.ordinal; return true;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: *value = 0; return true;
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: *value = 1; return true;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED: *value = 0; return true;
    case CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED: *value = 1; return true;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM: *value = 0; return true;
    case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED: *value = 0; return true;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: *value = 0; return true;
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH: *value = 0; return true;
    default: return false;
  }
}

}  // namespace

extern "C" {

PHOS_SIM_API CUresult CUDAAPI cuInit(unsigned int flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  return Driver::Init();
}

PHOS_SIM_API CUresult CUDAAPI cuDriverGetVersion(int* version) {
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *version = CUDA_VERSION;  // the toolkit's cuda.h that simgpu implements
  return CUDA_SUCCESS;
}

PHOS_SIM_API CUresult CUDAAPI cuDeviceGetCount(int* count) {
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver* d = nullptr;
  if (CUresult r = RequireDriver(&d); r != CUDA_SUCCESS) return r;
  *count = d->device_count();
  return CUDA_SUCCESS;
}

PHOS_SIM_API CUresult CUDAAPI cuDeviceGet(CUdevice* device, int ordinal) {
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver* d = nullptr;
  if (CUresult r = RequireDriver(&d); r != CUDA_SUCCESS) return r;
  if (d->device(ordinal) == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

PHOS_SIM_API CUresult CUDAAPI cuDeviceGetName(char* name, int len, CUdevice dev) {
  if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  Driver* d = nullptr;
  if (CUresult r = RequireDriver(&d); r != CUDA_SUCCESS) return r;
  Device* device = d->device(dev);
  if (device == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  std::string_view full = device->profile->device_name;
  size_t n = std::min(full.size(), static_cast<size_t>(len) - 1);
  std::memcpy(name, full.data(), n);
  name[n] = '\0';
  return CUDA_SUCCESS;
}

PHOS_SIM_API CUresult CUDAAPI cuDeviceGetUuid(CUuuid* uuid, CUdevice dev) {
  if (uuid == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver* d = nullptr;
  if (CUresult r = RequireDriver(&d); r != CUDA_SUCCESS) return r;
  Device* device = d->device(dev);
  if (device == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  *uuid = device->uuid;
  return CUDA_SUCCESS;
}

PHOS_SIM_API CUresult CUDAAPI cuDeviceTotalMem(size_t* bytes, CUdevice dev) {
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver* d = nullptr;
  if (CUresult r = RequireDriver(&d); r != CUDA_SUCCESS) return r;
  Device* device = d->device(dev);
  if (device == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = device->capacity;
  return CUDA_SUCCESS;
}

PHOS_SIM_API CUresult CUDAAPI cuDeviceGetAttribute(int* value, CUdevice_attribute attrib, CUdevice dev) {
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver* d = nullptr;
  if (CUresult r = RequireDriver(&d); r != CUDA_SUCCESS) return r;
  Device* device = d->device(dev);
  if (device == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  if (attrib < 0 || attrib >= CU_DEVICE_ATTRIBUTE_MAX) return CUDA_ERROR_INVALID_VALUE;
  return DeviceAttribute(*device, attrib, value) ? CUDA_SUCCESS : CUDA_ERROR_NOT_SUPPORTED;
}

PHOS_SIM_API CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver* d = nullptr;
  if (CUresult r = RequireDriver(&d); r != CUDA_SUCCESS) return r;
  Device* device = d->device(dev);
  if (device == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  return d->RetainPrimary(device, pctx);
}

PHOS_SIM_API CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev) {
  Driver* d = nullptr;
  if (CUresult r = RequireDriver(&d); r != CUDA_SUCCESS) return r;
  Device* device = d->device(dev);
  if (device == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  return d->ReleasePrimary(device);
}

PHOS_SIM_API CUresult CUDAAPI cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags, int* active) {
  if (flags == nullptr || active == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver* d = nullptr;
  if (CUresult r = RequireDriver(&d); r != CUDA_SUCCESS) return r;
  Device* device = d->device(dev);
  if (device == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard lock(device->primary_mu);
  *flags = 0;
  *active = device->primary_refs > 0 ? 1 : 0;
  return CUDA_SUCCESS;
}

PHOS_SIM_API CUresult CUDAAPI cuGetErrorName(CUresult error, const char** str) {
  if (str == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const ErrorEntry* e = FindError(error);
  if (e == nullptr) {
    *str = nullptr;
    return CUDA_ERROR_INVALID_VALUE;
  }
  *str = e->name;
  return CUDA_SUCCESS;
}

PHOS_SIM_API CUresult CUDAAPI cuGetErrorString(CUresult error, const char** str) {
  if (str == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const ErrorEntry* e = FindError(error);
  if (e == nullptr) {
    *str = nullptr;
    return CUDA_ERROR_INVALID_VALUE;
  }
  *str = e->string;
  return CUDA_SUCCESS;
}

}  // extern "C"
