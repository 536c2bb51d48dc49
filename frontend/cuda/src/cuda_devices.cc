// Devices in the driver API: what the session told the runtime frontend about each device
// (kDeviceGetProperties, asked once per device and kept), so both APIs answer alike.
#include <algorithm>
#include <cstring>

#include "cuda_internal.h"

namespace ipc = phos::ipc;
using phos::frontend::driver::Initialized;

namespace {

// The properties of `device` once cuInit succeeded.
CUresult Properties(CUdevice device, ipc::DeviceProperties* out) {
  if (!Initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  return phos::frontend::CopyDeviceProperties(device, out);
}

}  // namespace

extern "C" {

CUresult cuDriverGetVersion(int* version) {
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return phos::frontend::Client::Get().Call(ipc::Op::kDriverGetVersion, nullptr, 0, nullptr, 0, true, version,
                                            sizeof(*version), nullptr, /*take_async_error=*/false);
}

CUresult cuDeviceGetCount(int* count) {
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!Initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  return phos::frontend::SessionDeviceCount(count);
}

// A CUdevice is the session's device ordinal, as the runtime's device numbers are.
CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!Initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  int count = 0;
  if (CUresult r = phos::frontend::SessionDeviceCount(&count); r != CUDA_SUCCESS) return r;
  if (ordinal < 0 || ordinal >= count) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char* name, int len, CUdevice device) {
  if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  ipc::DeviceProperties p;
  if (CUresult r = Properties(device, &p); r != CUDA_SUCCESS) return r;
  // Cut to `len` bytes, NUL included, as the driver cuts it.
  const size_t n = std::min(std::strlen(p.name), static_cast<size_t>(len) - 1);
  std::memcpy(name, p.name, n);
  name[n] = '\0';
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetUuid(CUuuid* uuid, CUdevice device) {
  if (uuid == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ipc::DeviceProperties p;
  if (CUresult r = Properties(device, &p); r != CUDA_SUCCESS) return r;
  static_assert(sizeof(uuid->bytes) == sizeof(p.uuid));
  std::memcpy(uuid->bytes, p.uuid, sizeof(p.uuid));
  return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem(size_t* bytes, CUdevice device) {
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ipc::DeviceProperties p;
  if (CUresult r = Properties(device, &p); r != CUDA_SUCCESS) return r;
  *bytes = p.total_memory;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int* value, CUdevice_attribute attribute, CUdevice device) {
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int index = 0;
  std::memcpy(&index, &attribute, sizeof(index));  // any integer a C caller passed
  if (index <= 0 || index >= CU_DEVICE_ATTRIBUTE_MAX || index >= static_cast<int>(ipc::kDeviceAttributeSlots)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  ipc::DeviceProperties p;
  if (CUresult r = Properties(device, &p); r != CUDA_SUCCESS) return r;
  if (p.results[index] != CUDA_SUCCESS) return static_cast<CUresult>(p.results[index]);
  *value = p.attributes[index];
  return CUDA_SUCCESS;
}

CUresult cuDeviceComputeCapability(int* major, int* minor, CUdevice device) {
  if (major == nullptr || minor == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ipc::DeviceProperties p;
  if (CUresult r = Properties(device, &p); r != CUDA_SUCCESS) return r;
  *major = p.attributes[CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR];
  *minor = p.attributes[CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR];
  return CUDA_SUCCESS;
}

#undef cuDeviceGetUuid
CUresult cuDeviceGetUuid(CUuuid* uuid, CUdevice device) { return cuDeviceGetUuid_v2(uuid, device); }

}  // extern "C"
