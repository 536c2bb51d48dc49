// cudaGetDriverEntryPoint and cudaGetDriverEntryPointByVersion: the driver functions phos serves,
// as cuGetProcAddress of phos's driver library (libphos-cuda.so, frontend/cuda) finds them. That
// library is built over this one, so this one opens it when first asked, from its own directory:
// never a libcuda.so.1 found elsewhere, whose functions would not reach phosd.
#include <dlfcn.h>

#include <mutex>
#include <string>

#include "cudart_internal.h"

namespace {

using GetProcAddress = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);

// cuGetProcAddress_v2 of the libcuda.so.1 beside this library; null when there is none.
GetProcAddress DriverGetProcAddress() {
  static GetProcAddress found = [] () -> GetProcAddress {
    Dl_info self{};
    if (dladdr(reinterpret_cast<void*>(&DriverGetProcAddress), &self) == 0 || self.dli_fname == nullptr) return nullptr;
    std::string path = self.dli_fname;
    path = path.substr(0, path.rfind('/') + 1) + "libcuda.so.1";
    void* library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    return library == nullptr ? nullptr : reinterpret_cast<GetProcAddress>(dlsym(library, "cuGetProcAddress_v2"));
  }();
  return found;
}

// cudaEnableDefault is the legacy stream: this runtime's default stream (its per-thread entry
// points are the _ptds / _ptsz forms).
cudaError_t Find(const char* symbol, void** function, int version, unsigned long long flags,
                 cudaDriverEntryPointQueryResult* status) {
  if (symbol == nullptr || function == nullptr) return phos::frontend::Return(cudaErrorInvalidValue);
  cuuint64_t driver_flags = 0;
  switch (flags) {
    case cudaEnableDefault:
    case cudaEnableLegacyStream:
      driver_flags = CU_GET_PROC_ADDRESS_LEGACY_STREAM;
      break;
    case cudaEnablePerThreadDefaultStream:
      driver_flags = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
      break;
    default:
      return phos::frontend::Return(cudaErrorInvalidValue);
  }
  *function = nullptr;
  CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  if (GetProcAddress get = DriverGetProcAddress(); get != nullptr) {
    if (get(symbol, function, version, driver_flags, &found) != CUDA_SUCCESS) *function = nullptr;
  }
  // A symbol phos does not serve is no error: the pointer is null and the status says why.
  if (status != nullptr) *status = static_cast<cudaDriverEntryPointQueryResult>(found);
  return cudaSuccess;
}

}  // namespace

extern "C" {

cudaError_t cudaGetDriverEntryPoint(const char* symbol, void** funcPtr, unsigned long long flags,
                                    cudaDriverEntryPointQueryResult* driverStatus) {
  return Find(symbol, funcPtr, CUDART_VERSION, flags, driverStatus);
}

cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** funcPtr, unsigned int cudaVersion,
                                             unsigned long long flags, cudaDriverEntryPointQueryResult* driverStatus) {
  return Find(symbol, funcPtr, static_cast<int>(cudaVersion), flags, driverStatus);
}

}  // extern "C"
