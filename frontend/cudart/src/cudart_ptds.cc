// The per-thread default stream entry points: what a program built with `nvcc --default-stream
// per-thread` or -DCUDA_API_PER_THREAD_DEFAULT_STREAM calls instead of the plain names
// (cuda_runtime_api.h renames them _ptds for synchronous calls and _ptsz for the ones that take a
// stream). In them stream 0 is the calling thread's default stream (cudart_streams.cc), which does
// not synchronise with the session's other streams; cudaStreamLegacy keeps the legacy stream's
// rules. A synchronous call runs on the thread's stream and waits for it, as CUDA's does. The host
// functions' forms are in cudart_host_functions.cc.
#include "cudart_internal.h"

using phos::frontend::PerThreadDefault;

namespace {

// Waits for the calling thread's default stream after `queued` succeeded.
cudaError_t ThenSynchronize(cudaError_t queued) {
  return queued != cudaSuccess ? queued : cudaStreamSynchronize(cudaStreamPerThread);
}

}  // namespace

extern "C" {

cudaError_t cudaMemcpy_ptds(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  return ThenSynchronize(cudaMemcpyAsync(dst, src, count, kind, cudaStreamPerThread));
}

cudaError_t cudaMemcpy2D_ptds(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                              size_t height, cudaMemcpyKind kind) {
  return ThenSynchronize(
      cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height, kind, cudaStreamPerThread));
}

cudaError_t cudaMemset_ptds(void* dst, int value, size_t count) {
  return ThenSynchronize(cudaMemsetAsync(dst, value, count, cudaStreamPerThread));
}

cudaError_t cudaMemset2D_ptds(void* dst, size_t pitch, int value, size_t width, size_t height) {
  return ThenSynchronize(cudaMemset2DAsync(dst, pitch, value, width, height, cudaStreamPerThread));
}

cudaError_t cudaMemcpyAsync_ptsz(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                                 cudaStream_t stream) {
  return cudaMemcpyAsync(dst, src, count, kind, PerThreadDefault(stream));
}

cudaError_t cudaMemcpy2DAsync_ptsz(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                                   size_t height, cudaMemcpyKind kind, cudaStream_t stream) {
  return cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height, kind, PerThreadDefault(stream));
}

cudaError_t cudaMemsetAsync_ptsz(void* dst, int value, size_t count, cudaStream_t stream) {
  return cudaMemsetAsync(dst, value, count, PerThreadDefault(stream));
}

cudaError_t cudaMemset2DAsync_ptsz(void* dst, size_t pitch, int value, size_t width, size_t height,
                                   cudaStream_t stream) {
  return cudaMemset2DAsync(dst, pitch, value, width, height, PerThreadDefault(stream));
}

cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t stream) {
  return cudaStreamSynchronize(PerThreadDefault(stream));
}

cudaError_t cudaStreamQuery_ptsz(cudaStream_t stream) {
  return cudaStreamQuery(PerThreadDefault(stream));
}

cudaError_t cudaStreamWaitEvent_ptsz(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  return cudaStreamWaitEvent(PerThreadDefault(stream), event, flags);
}

cudaError_t cudaEventRecord_ptsz(cudaEvent_t event, cudaStream_t stream) {
  return cudaEventRecord(event, PerThreadDefault(stream));
}

cudaError_t cudaStreamGetPriority_ptsz(cudaStream_t stream, int* priority) {
  return cudaStreamGetPriority(PerThreadDefault(stream), priority);
}

cudaError_t cudaStreamGetFlags_ptsz(cudaStream_t stream, unsigned int* flags) {
  return cudaStreamGetFlags(PerThreadDefault(stream), flags);
}

cudaError_t cudaStreamGetDevice_ptsz(cudaStream_t stream, int* device) {
  return cudaStreamGetDevice(PerThreadDefault(stream), device);
}

cudaError_t cudaStreamGetId_ptsz(cudaStream_t stream, unsigned long long* id) {
  return cudaStreamGetId(PerThreadDefault(stream), id);
}

cudaError_t cudaLaunchKernel_ptsz(const void* func, dim3 grid, dim3 block, void** args, size_t shared,
                                  cudaStream_t stream) {
  return cudaLaunchKernel(func, grid, block, args, shared, PerThreadDefault(stream));
}

cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 grid, dim3 block, void** args, size_t shared,
                                    cudaStream_t stream) {
  return __cudaLaunchKernel(kernel, grid, block, args, shared, PerThreadDefault(stream));
}

cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t* config, const void* func, void** args) {
  if (config == nullptr) return cudaLaunchKernelExC(config, func, args);
  cudaLaunchConfig_t own = *config;
  own.stream = PerThreadDefault(config->stream);
  return cudaLaunchKernelExC(&own, func, args);
}

cudaError_t cudaLaunchCooperativeKernel_ptsz(const void* func, dim3 grid, dim3 block, void** args, size_t shared,
                                             cudaStream_t stream) {
  return cudaLaunchCooperativeKernel(func, grid, block, args, shared, PerThreadDefault(stream));
}

cudaError_t cudaMemcpyToSymbol_ptds(const void* symbol, const void* src, size_t count, size_t offset,
                                    cudaMemcpyKind kind) {
  return ThenSynchronize(cudaMemcpyToSymbolAsync(symbol, src, count, offset, kind, cudaStreamPerThread));
}

cudaError_t cudaMemcpyFromSymbol_ptds(void* dst, const void* symbol, size_t count, size_t offset,
                                      cudaMemcpyKind kind) {
  return ThenSynchronize(cudaMemcpyFromSymbolAsync(dst, symbol, count, offset, kind, cudaStreamPerThread));
}

cudaError_t cudaMemcpyToSymbolAsync_ptsz(const void* symbol, const void* src, size_t count, size_t offset,
                                         cudaMemcpyKind kind, cudaStream_t stream) {
  return cudaMemcpyToSymbolAsync(symbol, src, count, offset, kind, PerThreadDefault(stream));
}

cudaError_t cudaMemcpyFromSymbolAsync_ptsz(void* dst, const void* symbol, size_t count, size_t offset,
                                           cudaMemcpyKind kind, cudaStream_t stream) {
  return cudaMemcpyFromSymbolAsync(dst, symbol, count, offset, kind, PerThreadDefault(stream));
}

cudaError_t cudaMallocAsync_ptsz(void** ptr, size_t size, cudaStream_t stream) {
  return cudaMallocAsync(ptr, size, PerThreadDefault(stream));
}

cudaError_t cudaMallocFromPoolAsync_ptsz(void** ptr, size_t size, cudaMemPool_t pool, cudaStream_t stream) {
  return cudaMallocFromPoolAsync(ptr, size, pool, PerThreadDefault(stream));
}

cudaError_t cudaFreeAsync_ptsz(void* ptr, cudaStream_t stream) {
  return cudaFreeAsync(ptr, PerThreadDefault(stream));
}

}  // extern "C"
