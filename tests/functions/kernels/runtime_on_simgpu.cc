#include "runtime_on_simgpu.h"

#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <vector>

namespace phos::fn::testing {
namespace {

CUmodule g_module = nullptr;

}  // namespace

CUresult LoadDecoderKernelModule() {
  std::ifstream in(PHOS_FN_KERNELS_MODULE_PATH, std::ios::binary);
  if (!in) return CUDA_ERROR_FILE_NOT_FOUND;
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // Module images are read as aligned words, as phosd keeps them.
  std::vector<std::uint64_t> words((bytes.size() + 7) / 8);
  std::copy(bytes.begin(), bytes.end(), reinterpret_cast<char*>(words.data()));
  return cuModuleLoadData(&g_module, words.data());
}

CUresult UnloadDecoderKernelModule() {
  const CUresult r = cuModuleUnload(g_module);
  g_module = nullptr;
  return r;
}

}  // namespace phos::fn::testing

extern "C" cudaError_t cudaLaunchKernel(const void* func, dim3 grid, dim3 block, void** args,
                                        size_t shared_bytes, cudaStream_t stream) {
  Dl_info info{};
  if (dladdr(func, &info) == 0 || info.dli_sname == nullptr || info.dli_saddr != func) {
    return cudaErrorInvalidDeviceFunction;
  }
  CUfunction function = nullptr;
  if (cuModuleGetFunction(&function, phos::fn::testing::g_module, info.dli_sname) != CUDA_SUCCESS) {
    return cudaErrorInvalidDeviceFunction;
  }
  const CUresult r =
      cuLaunchKernel(function, grid.x, grid.y, grid.z, block.x, block.y, block.z,
                     static_cast<unsigned>(shared_bytes), reinterpret_cast<CUstream>(stream), args, nullptr);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorLaunchFailure;
}

extern "C" const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorInvalidDeviceFunction:
      return "cudaErrorInvalidDeviceFunction";
    default:
      return "cudaErrorLaunchFailure";
  }
}
