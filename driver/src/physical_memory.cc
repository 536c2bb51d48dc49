#include "phos/driver/physical_memory.h"

#include "phos/driver/cuda_check.h"

namespace phos::driver {

CUresult SetDeviceAccess(DriverTable& driver, CUdeviceptr address, uint64_t bytes, int device, CUmemAccess_flags flags) {
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device;
  access.flags = flags;
  return driver.cuMemSetAccess(address, bytes, &access, 1);
}

Status ZeroAndRelease(DriverTable& driver, CUmemGenericAllocationHandle handle, uint64_t bytes, int device) {
  const CuErrorText& text = driver.error_text();
  CUdeviceptr staging = 0;
  CUresult r = driver.cuMemAddressReserve(&staging, bytes, 0, 0, 0);
  bool mapped = false;
  if (r == CUDA_SUCCESS) {
    r = driver.cuMemMap(staging, bytes, 0, handle, 0);
    mapped = r == CUDA_SUCCESS;
  }
  if (r == CUDA_SUCCESS) r = SetDeviceAccess(driver, staging, bytes, device, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  if (r == CUDA_SUCCESS) r = driver.cuMemsetD8(staging, 0, bytes);
  // The memset must be done before the memory goes.
  if (r == CUDA_SUCCESS) r = driver.cuCtxSynchronize();
  if (mapped) driver.cuMemUnmap(staging, bytes);
  if (staging != 0) driver.cuMemAddressFree(staging, bytes);
  const CUresult released = driver.cuMemRelease(handle);
  if (r != CUDA_SUCCESS) return CuStatus(r, "zero of physical memory before its release", text);
  return CuStatus(released, "cuMemRelease", text);
}

}  // namespace phos::driver
