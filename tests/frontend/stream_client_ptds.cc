// The stream client's part built with -DCUDA_API_PER_THREAD_DEFAULT_STREAM (as `nvcc
// --default-stream per-thread` builds a program): its calls are the _ptds / _ptsz entry points,
// in which stream 0 is the calling thread's own default stream.
#ifndef CUDA_API_PER_THREAD_DEFAULT_STREAM
#error "build this file with -DCUDA_API_PER_THREAD_DEFAULT_STREAM"
#endif

#include <cuda_runtime.h>

#include <cstring>
#include <thread>
#include <vector>

#include "stream_client.h"

namespace phos::stream_client {

int PerThreadDefaultStreams() {
  constexpr size_t kN = 4096;
  constexpr size_t kBytes = kN * sizeof(float);
  float* d = nullptr;
  OK(cudaMalloc(reinterpret_cast<void**>(&d), 2 * kBytes));
  unsigned long long main_id = 0, main_id_again = 0, worker_id = 0;
  OK(cudaStreamGetId(0, &main_id));
  OK(cudaStreamGetId(cudaStreamPerThread, &main_id_again));
  EXPECT(main_id == main_id_again);

  // The worker's default stream is held by a host function, with a memset behind it.
  Gate gate;
  std::thread worker([&] {
    OK(cudaStreamGetId(0, &worker_id));
    OK(cudaLaunchHostFunc(0, WaitAtGate, &gate));
    OK(cudaMemsetAsync(d + kN, 0x22, kBytes, 0));
  });
  worker.join();
  EXPECT(AwaitStarted(gate));
  EXPECT(worker_id != 0 && worker_id != main_id);
  EXPECT(cudaStreamQuery(0) == cudaSuccess);  // the main thread's stream: nothing held there

  // The main thread's default stream does not wait for the worker's: synchronous copies on it
  // complete while the worker's stream is held.
  std::vector<float> host(kN), back(kN, 0.0f);
  for (size_t i = 0; i < kN; ++i) host[i] = static_cast<float>(i) + 0.25f;
  OK(cudaMemcpy(d, host.data(), kBytes, cudaMemcpyHostToDevice));
  OK(cudaMemcpy(back.data(), d, kBytes, cudaMemcpyDeviceToHost));
  EXPECT(back == host);
  OK(cudaMemsetAsync(d, 0x33, 64, cudaStreamPerThread));
  OK(cudaStreamSynchronize(0));

  // cudaStreamLegacy keeps the legacy stream's rules: its work waits for the blocking streams,
  // the worker's held default stream among them.
  OK(cudaMemsetAsync(d, 0x44, 16, cudaStreamLegacy));
  EXPECT(cudaStreamQuery(cudaStreamLegacy) == cudaErrorNotReady);
  gate.open = true;
  OK(cudaStreamSynchronize(cudaStreamLegacy));
  std::vector<unsigned char> bytes(2 * kBytes);
  OK(cudaMemcpy(bytes.data(), d, bytes.size(), cudaMemcpyDeviceToHost));
  std::vector<unsigned char> want(2 * kBytes);
  std::memcpy(want.data(), host.data(), kBytes);
  std::memset(want.data(), 0x33, 64);
  std::memset(want.data(), 0x44, 16);
  std::memset(want.data() + kBytes, 0x22, kBytes);
  EXPECT(bytes == want);
  OK(cudaFree(d));
  return g_failures;
}

}  // namespace phos::stream_client
