// A CUDA program as its users write one (the toolkit's headers, NVIDIA's libcudart, nothing of
// phos) exercising streams: priorities and what a stream says about itself, host functions in
// stream order across two streams with copies between them, a host function holding its stream,
// and (stream_report_ptds.cc, built with -DCUDA_API_PER_THREAD_DEFAULT_STREAM) the per-thread
// default stream used from two threads. It computes every expected value itself and exits 0 only
// when every check held. transparency_test runs it under `phos-fn run`.
#include "stream_report.h"

#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <thread>
#include <vector>

int g_failures = 0;

namespace {

constexpr int kN = 1 << 15;

// The order host functions ran in, by the number each was given.
std::mutex g_log_mu;
std::vector<int> g_log;

void Log(int number) {
  std::lock_guard<std::mutex> lock(g_log_mu);
  g_log.push_back(number);
}

// Host functions of the pipeline below: each writes host memory a later copy sends.
struct Pipeline {
  std::vector<int> input, doubled, received, plus_five;
};

void DoubleInput(void* p) {
  auto* pipe = static_cast<Pipeline*>(p);
  for (int i = 0; i < kN; ++i) pipe->doubled[i] = pipe->input[i] * 2;
  Log(1);
}

void AddFive(cudaStream_t, cudaError_t status, void* p) {
  auto* pipe = static_cast<Pipeline*>(p);
  CHECK(status == cudaSuccess);
  for (int i = 0; i < kN; ++i) pipe->plus_five[i] = pipe->received[i] + 5;
  Log(2);
}

void LogThird(void*) {
  Log(3);
}

// Returns only once the program opens it: what its stream queued after it cannot have run.
struct Gate {
  std::atomic<bool> started{false};
  std::atomic<bool> open{false};
};

void WaitAtGate(void* g) {
  auto* gate = static_cast<Gate*>(g);
  gate->started = true;
  while (!gate->open) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

void Priorities() {
  int least = 1, greatest = 1;
  OK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  CHECK(least == 0 && greatest <= least);
  cudaStream_t high = nullptr, low = nullptr, beyond = nullptr;
  OK(cudaStreamCreateWithPriority(&high, cudaStreamNonBlocking, greatest));
  OK(cudaStreamCreateWithPriority(&low, cudaStreamDefault, least));
  OK(cudaStreamCreateWithPriority(&beyond, cudaStreamNonBlocking, greatest - 10));
  int priority = 1, device = -1;
  unsigned flags = 7;
  OK(cudaStreamGetPriority(high, &priority));
  CHECK(priority == greatest);
  OK(cudaStreamGetPriority(beyond, &priority));
  CHECK(priority == greatest);  // clamped to the range
  OK(cudaStreamGetPriority(low, &priority));
  CHECK(priority == least);
  OK(cudaStreamGetFlags(high, &flags));
  CHECK(flags == cudaStreamNonBlocking);
  OK(cudaStreamGetFlags(low, &flags));
  CHECK(flags == cudaStreamDefault);
  OK(cudaStreamGetDevice(high, &device));
  CHECK(device == 0);
  unsigned long long id_high = 0, id_low = 0;
  OK(cudaStreamGetId(high, &id_high));
  OK(cudaStreamGetId(low, &id_low));
  CHECK(id_high != id_low);
  std::printf("priorities: least %d, greatest %d\n", least, greatest);
  for (cudaStream_t s : {high, low, beyond}) OK(cudaStreamDestroy(s));
}

void HostFunctionsInStreamOrder() {
  cudaStream_t s1 = nullptr, s2 = nullptr;
  OK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  OK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  int *d1 = nullptr, *d2 = nullptr, *d3 = nullptr;
  const size_t bytes = kN * sizeof(int);
  OK(cudaMalloc(reinterpret_cast<void**>(&d1), bytes));
  OK(cudaMalloc(reinterpret_cast<void**>(&d2), bytes));
  OK(cudaMalloc(reinterpret_cast<void**>(&d3), bytes));
  Pipeline pipe{std::vector<int>(kN), std::vector<int>(kN, 0), std::vector<int>(kN, 0),
                std::vector<int>(kN, 0)};
  for (int i = 0; i < kN; ++i) pipe.input[i] = i * 7 - 3;
  cudaEvent_t first = nullptr, second = nullptr;
  OK(cudaEventCreateWithFlags(&first, cudaEventDisableTiming));
  OK(cudaEventCreateWithFlags(&second, cudaEventDisableTiming));

  // s1: the input, then a host function doubling it into the bytes the next copy sends.
  OK(cudaMemcpyAsync(d1, pipe.input.data(), bytes, cudaMemcpyHostToDevice, s1));
  OK(cudaLaunchHostFunc(s1, DoubleInput, &pipe));
  OK(cudaMemcpyAsync(d2, pipe.doubled.data(), bytes, cudaMemcpyHostToDevice, s1));
  OK(cudaEventRecord(first, s1));
  // s2, after all of that: across the device, back to the host, a callback adding five, and up.
  OK(cudaStreamWaitEvent(s2, first, 0));
  OK(cudaMemcpyAsync(d3, d2, bytes, cudaMemcpyDeviceToDevice, s2));
  OK(cudaMemcpyAsync(pipe.received.data(), d3, bytes, cudaMemcpyDeviceToHost, s2));
  OK(cudaStreamAddCallback(s2, AddFive, &pipe, 0));
  OK(cudaMemcpyAsync(d1, pipe.plus_five.data(), bytes, cudaMemcpyHostToDevice, s2));
  OK(cudaEventRecord(second, s2));
  // s1 again, after s2's work.
  OK(cudaStreamWaitEvent(s1, second, 0));
  OK(cudaLaunchHostFunc(s1, LogThird, nullptr));
  OK(cudaStreamSynchronize(s1));

  std::vector<int> result(kN, 0);
  OK(cudaMemcpy(result.data(), d1, bytes, cudaMemcpyDeviceToHost));
  int wrong = 0;
  for (int i = 0; i < kN; ++i) wrong += result[i] != (i * 7 - 3) * 2 + 5 ? 1 : 0;
  CHECK(wrong == 0);
  {
    std::lock_guard<std::mutex> lock(g_log_mu);
    CHECK(g_log == std::vector<int>({1, 2, 3}));
  }

  // A host function that has not returned holds its stream's later work, and only that stream's.
  Gate gate;
  OK(cudaMemsetAsync(d3, 0, bytes, s1));
  OK(cudaLaunchHostFunc(s1, WaitAtGate, &gate));
  OK(cudaMemsetAsync(d3, 0x7f, bytes, s1));
  while (!gate.started) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK(cudaStreamQuery(s1) == cudaErrorNotReady);
  OK(cudaMemcpyAsync(d2, d1, bytes, cudaMemcpyDeviceToDevice, s2));
  OK(cudaStreamSynchronize(s2));
  CHECK(cudaStreamQuery(s1) == cudaErrorNotReady);
  gate.open = true;
  OK(cudaStreamSynchronize(s1));
  std::vector<unsigned char> set(bytes, 0);
  OK(cudaMemcpy(set.data(), d3, bytes, cudaMemcpyDeviceToHost));
  CHECK(set == std::vector<unsigned char>(bytes, 0x7f));

  OK(cudaEventDestroy(first));
  OK(cudaEventDestroy(second));
  for (cudaStream_t s : {s1, s2}) OK(cudaStreamDestroy(s));
  for (int* p : {d1, d2, d3}) OK(cudaFree(p));
}

}  // namespace

int main() {
  int count = 0;
  OK(cudaGetDeviceCount(&count));
  CHECK(count >= 1);
  Priorities();
  HostFunctionsInStreamOrder();
  PerThreadDefaultStreams();
  if (g_failures == 0) std::printf("stream report: host functions 1, 2, 3 in order, all checks held\n");
  return g_failures == 0 ? 0 : 1;
}
