// A CUDA runtime program (cuda_runtime_api.h and cuda.h's types only, linked with NVIDIA's
// libcudart and not with libcuda) that reaches driver functions through cudaGetDriverEntryPoint and
// cudaGetDriverEntryPointByVersion, as libraries built on the runtime do, and mixes them with
// runtime calls: memory of either API used by the other, one context for both. Every value is
// checked against its own computation; "CHECK FAILED" on any mismatch.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <vector>

namespace {

int g_failures = 0;

#define CHECK(cond)                                                       \
  do {                                                                    \
    if (!(cond)) {                                                        \
      std::printf("CHECK FAILED %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      ++g_failures;                                                       \
    }                                                                     \
  } while (0)

template <typename F>
F Find(const char* name) {
  void* function = nullptr;
  cudaDriverEntryPointQueryResult status = cudaDriverEntryPointVersionNotSufficent;
  CHECK(cudaGetDriverEntryPointByVersion(name, &function, 13000, cudaEnableDefault, &status) == cudaSuccess);
  CHECK(status == cudaDriverEntryPointSuccess && function != nullptr);
  return reinterpret_cast<F>(function);
}

}  // namespace

int main() {
  CHECK(cudaSetDevice(0) == cudaSuccess);
  auto mem_alloc = Find<CUresult (*)(CUdeviceptr*, size_t)>("cuMemAlloc");
  auto mem_free = Find<CUresult (*)(CUdeviceptr)>("cuMemFree");
  auto memset_d32 = Find<CUresult (*)(CUdeviceptr, unsigned, size_t)>("cuMemsetD32");
  auto ctx_get_current = Find<CUresult (*)(CUcontext*)>("cuCtxGetCurrent");
  auto primary_retain = Find<CUresult (*)(CUcontext*, CUdevice)>("cuDevicePrimaryCtxRetain");
  auto primary_release = Find<CUresult (*)(CUdevice)>("cuDevicePrimaryCtxRelease");
  auto init = Find<CUresult (*)(unsigned)>("cuInit");
  CHECK(init(0) == CUDA_SUCCESS);

  // The runtime's context is the device's primary context.
  CUcontext current = nullptr, primary = nullptr;
  CHECK(ctx_get_current(&current) == CUDA_SUCCESS);
  CHECK(primary_retain(&primary, 0) == CUDA_SUCCESS);
  CHECK(current != nullptr && current == primary);
  CHECK(primary_release(0) == CUDA_SUCCESS);

  // Driver memory set by the driver, read by the runtime; runtime memory set by the driver.
  constexpr size_t kWords = 1024;
  CUdeviceptr driver_memory = 0;
  CHECK(mem_alloc(&driver_memory, kWords * 4) == CUDA_SUCCESS);
  CHECK(memset_d32(driver_memory, 0xa5a5a5a5u, kWords) == CUDA_SUCCESS);
  std::vector<uint32_t> back(kWords);
  CHECK(cudaMemcpy(back.data(), reinterpret_cast<void*>(driver_memory), kWords * 4, cudaMemcpyDefault) == cudaSuccess);
  size_t wrong = 0;
  for (uint32_t v : back) wrong += v != 0xa5a5a5a5u;
  CHECK(wrong == 0);
  cudaPointerAttributes attributes{};
  CHECK(cudaPointerGetAttributes(&attributes, reinterpret_cast<void*>(driver_memory)) == cudaSuccess);
  CHECK(attributes.type == cudaMemoryTypeDevice);
  void* runtime_memory = nullptr;
  CHECK(cudaMalloc(&runtime_memory, kWords * 4) == cudaSuccess);
  CHECK(memset_d32(reinterpret_cast<CUdeviceptr>(runtime_memory), 7u, kWords / 2) == CUDA_SUCCESS);
  CHECK(cudaMemset(static_cast<char*>(runtime_memory) + kWords * 2, 0, kWords * 2) == cudaSuccess);
  CHECK(cudaMemcpy(back.data(), runtime_memory, kWords * 4, cudaMemcpyDeviceToHost) == cudaSuccess);
  wrong = 0;
  for (size_t i = 0; i < kWords; ++i) wrong += back[i] != (i < kWords / 2 ? 7u : 0u);
  CHECK(wrong == 0);
  CHECK(mem_free(reinterpret_cast<CUdeviceptr>(runtime_memory)) == CUDA_SUCCESS);  // either API frees
  CHECK(cudaFree(reinterpret_cast<void*>(driver_memory)) == cudaSuccess);

  // A function phos does not serve, or no function at all: found as nothing, not as an error.
  void* function = reinterpret_cast<void*>(&g_failures);
  cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSuccess;
  CHECK(cudaGetDriverEntryPoint("cuNoSuchFunction", &function, cudaEnableDefault, &status) == cudaSuccess);
  CHECK(function == nullptr && status == cudaDriverEntryPointSymbolNotFound);
  CHECK(cudaGetDriverEntryPoint("cuMemAlloc", &function, 99, &status) == cudaErrorInvalidValue);
  CHECK(cudaGetLastError() == cudaErrorInvalidValue);

  // Pinned host memory keeps the flags it was made with.
  void* pinned = nullptr;
  CHECK(cudaHostAlloc(&pinned, 4096, cudaHostAllocPortable) == cudaSuccess);
  unsigned flags = 99;
  CHECK(cudaHostGetFlags(&flags, pinned) == cudaSuccess);
  CHECK(flags == cudaHostAllocPortable);
  CHECK(cudaFreeHost(pinned) == cudaSuccess);
  if (g_failures != 0) {
    std::printf("entry point report: %d checks failed\n", g_failures);
    return 1;
  }
  std::printf("entry point report: driver functions through the runtime, one context, all checks held\n");
  return 0;
}
