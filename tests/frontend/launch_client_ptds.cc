// The launch client's part built with -DCUDA_API_PER_THREAD_DEFAULT_STREAM (as `nvcc
// --default-stream per-thread` builds a program): its symbol copies and launches with attributes
// are the _ptds / _ptsz entry points, in which stream 0 is the calling thread's own default
// stream, and what they compute matches the plain ones.
#ifndef CUDA_API_PER_THREAD_DEFAULT_STREAM
#error "build this file with -DCUDA_API_PER_THREAD_DEFAULT_STREAM"
#endif

#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <vector>

// The variables and kernel of launch_kernels.cuh, whose host shadows launch_client.cc defines.
struct PerThreadTargets {
  const void* lut;        // float[16]
  const void* processed;  // unsigned
  const void* bias;       // float
  const void* kernel;     // lookup_scale(const float*, float*, int)
};

// Returns the checks that failed.
int PerThreadSymbolsAndLaunches(const PerThreadTargets& t) {
  int failures = 0;
  auto expect = [&failures](bool ok, int line) {
    if (!ok) {
      std::fprintf(stderr, "launch_client_ptds:%d: check failed\n", line);
      ++failures;
    }
  };
  float table[16];
  for (int i = 0; i < 16; ++i) table[i] = static_cast<float>(3 * i);
  const float bias = 0.25f;
  expect(cudaMemcpyToSymbol(t.lut, table, sizeof(table)) == cudaSuccess, __LINE__);  // _ptds
  expect(cudaMemcpyToSymbolAsync(t.bias, &bias, sizeof(bias), 0, cudaMemcpyHostToDevice, 0) == cudaSuccess,
         __LINE__);  // _ptsz
  int n = 128;
  std::vector<float> in(n);
  for (int i = 0; i < n; ++i) in[i] = static_cast<float>(i);
  float *din = nullptr, *dout = nullptr;
  expect(cudaMalloc(reinterpret_cast<void**>(&din), n * sizeof(float)) == cudaSuccess, __LINE__);
  expect(cudaMalloc(reinterpret_cast<void**>(&dout), n * sizeof(float)) == cudaSuccess, __LINE__);
  expect(cudaMemcpy(din, in.data(), n * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess, __LINE__);
  cudaLaunchAttribute ignore{};
  ignore.id = cudaLaunchAttributeIgnore;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(2);
  config.blockDim = dim3(64);
  config.stream = 0;  // this thread's default stream
  config.attrs = &ignore;
  config.numAttrs = 1;
  void* args[] = {&din, &dout, &n};
  expect(cudaLaunchKernelExC(&config, t.kernel, args) == cudaSuccess,
         __LINE__);  // _ptsz
  std::vector<float> out(n, -1.0f);
  expect(cudaMemcpy(out.data(), dout, n * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess, __LINE__);
  bool matches = true;
  for (int i = 0; i < n; ++i) matches &= out[i] == table[i % 16] * in[i] + bias;
  expect(matches, __LINE__);
  unsigned count = 0;
  expect(cudaMemcpyFromSymbolAsync(&count, t.processed, sizeof(count), 0, cudaMemcpyDeviceToHost, 0) ==
             cudaSuccess,
         __LINE__);  // _ptsz
  expect(cudaStreamSynchronize(0) == cudaSuccess, __LINE__);
  float back[16] = {};
  expect(cudaMemcpyFromSymbol(back, t.lut, sizeof(back)) == cudaSuccess, __LINE__);  // _ptds
  expect(std::memcmp(back, table, sizeof(table)) == 0, __LINE__);
  expect(cudaLaunchCooperativeKernel(t.kernel, dim3(2), dim3(64), args, 0, 0) == cudaErrorNotSupported,
         __LINE__);  // _ptsz, refused
  cudaGetLastError();
  expect(cudaFree(din) == cudaSuccess && cudaFree(dout) == cudaSuccess, __LINE__);
  return failures + (count == static_cast<unsigned>(n) ? 0 : 1);
}
