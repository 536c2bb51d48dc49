// stream_report's part built as `nvcc --default-stream per-thread` builds a program: its calls
// are the _ptds / _ptsz entry points, in which stream 0 is the calling thread's default stream.
#ifndef CUDA_API_PER_THREAD_DEFAULT_STREAM
#error "build this file with -DCUDA_API_PER_THREAD_DEFAULT_STREAM"
#endif

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "stream_report.h"

namespace {

constexpr size_t kN = 1 << 14;

struct Counter {
  std::atomic<int> calls{0};
};

void Count(void* counter) {
  static_cast<Counter*>(counter)->calls.fetch_add(1);
}

// One thread's work on its default stream: its own values up and back, a host function between,
// the stream's id. The values are the thread's: `seed` * 1000 + i.
void Work(int seed, Counter* counter, unsigned long long* id, int* wrong) {
  std::vector<float> up(kN), down(kN, -1.0f);
  for (size_t i = 0; i < kN; ++i) up[i] = static_cast<float>(seed * 1000 + static_cast<int>(i));
  float* d = nullptr;
  OK(cudaMalloc(reinterpret_cast<void**>(&d), kN * sizeof(float)));
  OK(cudaMemcpyAsync(d, up.data(), kN * sizeof(float), cudaMemcpyHostToDevice, 0));
  OK(cudaLaunchHostFunc(0, Count, counter));
  OK(cudaMemcpyAsync(down.data(), d, kN * sizeof(float), cudaMemcpyDeviceToHost, 0));
  OK(cudaStreamSynchronize(0));
  OK(cudaStreamGetId(0, id));
  *wrong = 0;
  for (size_t i = 0; i < kN; ++i) *wrong += down[i] != up[i] ? 1 : 0;
  OK(cudaFree(d));
}

}  // namespace

void PerThreadDefaultStreams() {
  Counter counter;
  unsigned long long ids[2] = {0, 0};
  int wrong[2] = {-1, -1};
  std::thread first(Work, 1, &counter, &ids[0], &wrong[0]);
  std::thread second(Work, 2, &counter, &ids[1], &wrong[1]);
  first.join();
  second.join();
  unsigned long long main_id = 0, per_thread_id = 0;
  OK(cudaStreamGetId(0, &main_id));
  OK(cudaStreamGetId(cudaStreamPerThread, &per_thread_id));
  CHECK(wrong[0] == 0 && wrong[1] == 0);
  CHECK(counter.calls.load() == 2);
  // Each thread's default stream is its own.
  CHECK(ids[0] != ids[1] && ids[0] != main_id && ids[1] != main_id);
  CHECK(main_id == per_thread_id);
  // A synchronous call goes on the calling thread's stream too.
  std::vector<int> host(64), back(64, 0);
  for (int i = 0; i < 64; ++i) host[i] = i * i;
  int* d = nullptr;
  OK(cudaMalloc(reinterpret_cast<void**>(&d), sizeof(int) * 64));
  OK(cudaMemcpy(d, host.data(), sizeof(int) * 64, cudaMemcpyHostToDevice));
  OK(cudaMemset(d, 0, sizeof(int) * 8));
  OK(cudaMemcpy(back.data(), d, sizeof(int) * 64, cudaMemcpyDeviceToHost));
  std::memset(host.data(), 0, sizeof(int) * 8);
  CHECK(back == host);
  OK(cudaFree(d));
  std::printf("per-thread default streams: 2 threads, distinct streams\n");
}
