// Errors and entry points of the driver API: cuGetErrorName and cuGetErrorString from the driver's
// own table (simgpu's, phos-cuda-errors), and cuGetProcAddress over the functions this library
// serves, each by the base name cuda.h gives it (cuMemAlloc for cuMemAlloc_v2), as CUDA 13's driver
// answers it; the runtime's cudaGetDriverEntryPoint asks it (cudart_entry_points.cc).
#include <cstring>
#include <string_view>

#include "api/error_table.h"
#include "cuda_internal.h"

namespace {

struct EntryPoint {
  const char* name;    // the base name
  void* function;      // the newest ABI of it, the one cuda.h's macros name
  bool stream_ordered; // has a per-thread default stream form (_ptds / _ptsz), which phos lacks
};

#define PHOS_ENTRY(name, ordered) {#name, reinterpret_cast<void*>(&name), ordered}
// cuda.h's macros turn each &name below into its current form (cuMemAlloc into cuMemAlloc_v2).
const EntryPoint kEntryPoints[] = {
    PHOS_ENTRY(cuInit, false),
    PHOS_ENTRY(cuDriverGetVersion, false),
    PHOS_ENTRY(cuGetErrorName, false),
    PHOS_ENTRY(cuGetErrorString, false),
    PHOS_ENTRY(cuGetProcAddress, false),
    PHOS_ENTRY(cuDeviceGet, false),
    PHOS_ENTRY(cuDeviceGetCount, false),
    PHOS_ENTRY(cuDeviceGetName, false),
    PHOS_ENTRY(cuDeviceGetUuid, false),
    PHOS_ENTRY(cuDeviceTotalMem, false),
    PHOS_ENTRY(cuDeviceGetAttribute, false),
    PHOS_ENTRY(cuDeviceComputeCapability, false),
    PHOS_ENTRY(cuDevicePrimaryCtxRetain, false),
    PHOS_ENTRY(cuDevicePrimaryCtxRelease, false),
    PHOS_ENTRY(cuDevicePrimaryCtxGetState, false),
    PHOS_ENTRY(cuDevicePrimaryCtxSetFlags, false),
    PHOS_ENTRY(cuDevicePrimaryCtxReset, false),
    PHOS_ENTRY(cuCtxGetCurrent, false),
    PHOS_ENTRY(cuCtxSetCurrent, false),
    PHOS_ENTRY(cuCtxGetDevice, false),
    PHOS_ENTRY(cuCtxSynchronize, false),
    PHOS_ENTRY(cuCtxPushCurrent, false),
    PHOS_ENTRY(cuCtxPopCurrent, false),
    PHOS_ENTRY(cuCtxCreate, false),
    PHOS_ENTRY(cuMemAlloc, false),
    PHOS_ENTRY(cuMemFree, false),
    PHOS_ENTRY(cuMemGetInfo, false),
    PHOS_ENTRY(cuMemAllocHost, false),
    PHOS_ENTRY(cuMemHostAlloc, false),
    PHOS_ENTRY(cuMemFreeHost, false),
    PHOS_ENTRY(cuMemcpyHtoD, true),
    PHOS_ENTRY(cuMemcpyDtoH, true),
    PHOS_ENTRY(cuMemcpyDtoD, true),
    PHOS_ENTRY(cuMemcpyHtoDAsync, true),
    PHOS_ENTRY(cuMemcpyDtoHAsync, true),
    PHOS_ENTRY(cuMemcpyDtoDAsync, true),
    PHOS_ENTRY(cuMemsetD8, true),
    PHOS_ENTRY(cuMemsetD16, true),
    PHOS_ENTRY(cuMemsetD32, true),
    PHOS_ENTRY(cuMemsetD8Async, true),
    PHOS_ENTRY(cuMemsetD16Async, true),
    PHOS_ENTRY(cuMemsetD32Async, true),
    PHOS_ENTRY(cuPointerGetAttribute, false),
    PHOS_ENTRY(cuStreamCreate, false),
    PHOS_ENTRY(cuStreamDestroy, false),
    PHOS_ENTRY(cuStreamSynchronize, true),
    PHOS_ENTRY(cuStreamQuery, true),
    PHOS_ENTRY(cuStreamWaitEvent, true),
    PHOS_ENTRY(cuEventCreate, false),
    PHOS_ENTRY(cuEventDestroy, false),
    PHOS_ENTRY(cuEventRecord, true),
    PHOS_ENTRY(cuEventSynchronize, false),
    PHOS_ENTRY(cuEventQuery, false),
    PHOS_ENTRY(cuEventElapsedTime, false),
    PHOS_ENTRY(cuModuleLoadData, false),
    PHOS_ENTRY(cuModuleLoadDataEx, false),
    PHOS_ENTRY(cuModuleLoadFatBinary, false),
    PHOS_ENTRY(cuModuleUnload, false),
    PHOS_ENTRY(cuModuleGetFunction, false),
    PHOS_ENTRY(cuModuleGetGlobal, false),
    PHOS_ENTRY(cuFuncGetAttribute, false),
    PHOS_ENTRY(cuLaunchKernel, true),
};
#undef PHOS_ENTRY

}  // namespace

extern "C" {

CUresult cuGetErrorName(CUresult error, const char** name) {
  if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const phos::sim::ErrorEntry* e = phos::sim::FindError(error);
  *name = e != nullptr ? e->name : nullptr;
  return e != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuGetErrorString(CUresult error, const char** text) {
  if (text == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const phos::sim::ErrorEntry* e = phos::sim::FindError(error);
  *text = e != nullptr ? e->string : nullptr;
  return e != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

// With CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM a stream-ordered function is not found: its
// per-thread form is what the caller asks for, and phos's driver library lacks those forms (the
// legacy form would order the work on another stream than the caller means).
CUresult cuGetProcAddress(const char* symbol, void** function, int cuda_version, cuuint64_t flags,
                          CUdriverProcAddressQueryResult* status) {
  if (symbol == nullptr || function == nullptr || cuda_version <= 0) return CUDA_ERROR_INVALID_VALUE;
  constexpr cuuint64_t kKnown = CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  if ((flags & ~kKnown) != 0) return CUDA_ERROR_INVALID_VALUE;
  *function = nullptr;
  const bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  for (const EntryPoint& e : kEntryPoints) {
    if (std::string_view(e.name) != symbol || (per_thread && e.stream_ordered)) continue;
    *function = e.function;
    if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
  }
  if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  return CUDA_ERROR_NOT_FOUND;
}

}  // extern "C"
