// A client of the frontend's streams and host functions, driven by frontend_test.cc with
// PHOS_GPU_SOCKET and PHOS_INSTANCE_TOKEN set. Each mode checks its own results against values it
// computes itself and exits 0 only when every check held; a failed check prints what differed.
// Ordering is shown by counters and gates the host functions hold, never by sleeping.
//
// Usage: stream_client MODULE MODE
#include "stream_client.h"

#include <cuda_runtime.h>
#include <dirent.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "../testing/wait_until.h"
#include "kernels.cuh"
#include "phos/frontend/fork_child.h"
#include "phos/frontend/sim_module.h"
#include "phos/base/sanitizers.h"

namespace phos::stream_client {

void WaitAtGate(void* gate) {
  auto* g = static_cast<Gate*>(gate);
  g->started = true;
  while (!g->open) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

bool AwaitStarted(const Gate& gate) {
  return testing::WaitUntil([&gate] { return gate.started.load(); });
}

namespace {

cudaError_t LaunchFill(float* p, float v, int n, cudaStream_t stream) {
  void* args[] = {&p, &v, &n};
  return cudaLaunchKernel(reinterpret_cast<const void*>(&fill_kernel), dim3((n + 255) / 256), dim3(256), args,
                          0, stream);
}

// A host function's place in the order of all of them.
struct Step {
  std::atomic<int>* counter;
  int seen = -1;
};

void RecordStep(void* step) {
  auto* s = static_cast<Step*>(step);
  s->seen = s->counter->fetch_add(1);
}

// cudaStreamAddCallback's form: also keeps what it was told.
struct Callback {
  Step step;
  cudaStream_t stream = nullptr;
  cudaError_t status = cudaErrorUnknown;
};

void RecordCallback(cudaStream_t stream, cudaError_t status, void* callback) {
  auto* c = static_cast<Callback*>(callback);
  c->stream = stream;
  c->status = status;
  RecordStep(&c->step);
}

// Writes the host bytes the next copy on its stream sends.
struct Fill {
  std::vector<float>* host;
};

void FillHost(void* fill) {
  std::vector<float>& host = *static_cast<Fill*>(fill)->host;
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i) * 3.0f + 1.0f;
}

struct Sequence {
  std::vector<int>* order;
  int index;
};

void AppendIndex(void* sequence) {
  auto* s = static_cast<Sequence*>(sequence);
  s->order->push_back(s->index);
}

int Priorities() {
  int least = 1, greatest = 1;
  OK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  EXPECT(least == 0 && greatest == -5);  // simgpu's range, NVIDIA's on compute capability 7.5+
  cudaStream_t high = nullptr, low = nullptr, clamped = nullptr;
  OK(cudaStreamCreateWithPriority(&high, cudaStreamNonBlocking, greatest));
  OK(cudaStreamCreateWithPriority(&low, cudaStreamDefault, least));
  OK(cudaStreamCreateWithPriority(&clamped, cudaStreamDefault, greatest - 7));
  int priority = 1, device = -1;
  unsigned flags = 9;
  OK(cudaStreamGetPriority(high, &priority));
  EXPECT(priority == greatest);
  OK(cudaStreamGetFlags(high, &flags));
  EXPECT(flags == cudaStreamNonBlocking);
  OK(cudaStreamGetPriority(clamped, &priority));
  EXPECT(priority == greatest);
  OK(cudaStreamGetPriority(low, &priority));
  EXPECT(priority == least);
  OK(cudaStreamGetFlags(low, &flags));
  EXPECT(flags == cudaStreamDefault);
  OK(cudaStreamGetDevice(high, &device));
  EXPECT(device == 0);
  unsigned long long id_high = 0, id_low = 0, id_thread = 0, id_thread_again = 0, id_legacy = 0;
  OK(cudaStreamGetId(high, &id_high));
  OK(cudaStreamGetId(low, &id_low));
  OK(cudaStreamGetId(cudaStreamPerThread, &id_thread));
  OK(cudaStreamGetId(cudaStreamPerThread, &id_thread_again));
  OK(cudaStreamGetId(nullptr, &id_legacy));
  EXPECT(id_high != id_low && id_thread != id_high && id_thread != id_low && id_thread != id_legacy);
  EXPECT(id_thread == id_thread_again);
  OK(cudaStreamGetPriority(nullptr, &priority));
  EXPECT(priority == 0);
  OK(cudaStreamGetFlags(cudaStreamLegacy, &flags));
  EXPECT(flags == cudaStreamDefault);

  // What a driver refuses.
  cudaStream_t refused = nullptr;
  EXPECT(cudaStreamCreateWithPriority(&refused, 0x4, 0) == cudaErrorInvalidValue);
  EXPECT(cudaStreamCreateWithPriority(nullptr, 0, 0) == cudaErrorInvalidValue);
  EXPECT(cudaStreamGetPriority(reinterpret_cast<cudaStream_t>(0x12340), &priority) ==
         cudaErrorInvalidResourceHandle);
  EXPECT(cudaStreamGetFlags(high, nullptr) == cudaErrorInvalidValue);
  EXPECT(cudaStreamDestroy(cudaStreamPerThread) == cudaErrorInvalidResourceHandle);

  // Work on each priority lands.
  constexpr int kN = 4096;
  float* d = nullptr;
  OK(cudaMalloc(reinterpret_cast<void**>(&d), 3 * kN * sizeof(float)));
  OK(LaunchFill(d, 1.0f, kN, low));
  OK(LaunchFill(d + kN, 2.0f, kN, high));
  OK(LaunchFill(d + 2 * kN, 3.0f, kN, cudaStreamPerThread));
  OK(cudaDeviceSynchronize());
  std::vector<float> back(3 * kN);
  OK(cudaMemcpy(back.data(), d, back.size() * sizeof(float), cudaMemcpyDeviceToHost));
  for (int i = 0; i < 3 * kN; ++i) EXPECT(back[i] == static_cast<float>(i / kN + 1));
  for (cudaStream_t s : {high, low, clamped}) OK(cudaStreamDestroy(s));
  OK(cudaFree(d));

  // cudaDeviceReset destroys the thread's default stream with the others; its next use makes a
  // new one, and nothing tries to destroy the old one again.
  OK(cudaDeviceReset());
  unsigned long long id_after = 0;
  OK(cudaStreamGetId(cudaStreamPerThread, &id_after));
  EXPECT(id_after != id_thread);
  OK(cudaStreamSynchronize(cudaStreamPerThread));
  OK(cudaDeviceSynchronize());
  return g_failures;
}

int HostFunctions() {
  constexpr size_t kN = 1 << 16;
  constexpr size_t kBytes = kN * sizeof(float);
  cudaStream_t s1 = nullptr, s2 = nullptr;
  OK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  OK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  float *d_in = nullptr, *d_mid = nullptr, *d_out = nullptr;
  OK(cudaMalloc(reinterpret_cast<void**>(&d_in), kBytes));
  OK(cudaMalloc(reinterpret_cast<void**>(&d_mid), kBytes));
  OK(cudaMalloc(reinterpret_cast<void**>(&d_out), kBytes));
  std::vector<float> in(kN), staged(kN, 0.0f), out(kN, -1.0f);
  for (size_t i = 0; i < kN; ++i) in[i] = static_cast<float>(i) * 0.5f;

  // In stream order across two streams: a, then (through an event) b, then c; the copy queued
  // after FillHost sends what FillHost wrote.
  std::atomic<int> counter{0};
  Step a{&counter};
  Step b{&counter};
  Callback c{{&counter}};
  Fill fill{&staged};
  OK(cudaMemcpyAsync(d_in, in.data(), kBytes, cudaMemcpyHostToDevice, s1));
  OK(cudaLaunchHostFunc(s1, RecordStep, &a));
  OK(cudaLaunchHostFunc(s1, FillHost, &fill));
  OK(cudaMemcpyAsync(d_mid, staged.data(), kBytes, cudaMemcpyHostToDevice, s1));
  cudaEvent_t event = nullptr;
  OK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  OK(cudaEventRecord(event, s1));
  OK(cudaStreamWaitEvent(s2, event, 0));
  OK(cudaLaunchHostFunc(s2, RecordStep, &b));
  OK(cudaMemcpyAsync(d_out, d_mid, kBytes, cudaMemcpyDeviceToDevice, s2));
  OK(cudaStreamAddCallback(s2, RecordCallback, &c, 0));
  OK(cudaMemcpyAsync(out.data(), d_out, kBytes, cudaMemcpyDeviceToHost, s2));
  OK(cudaStreamSynchronize(s2));
  EXPECT(a.seen == 0 && b.seen == 1 && c.step.seen == 2);
  EXPECT(c.stream == s2 && c.status == cudaSuccess);
  size_t wrong = 0;
  for (size_t i = 0; i < kN; ++i) wrong += out[i] != static_cast<float>(i) * 3.0f + 1.0f ? 1 : 0;
  EXPECT(wrong == 0);

  // A function that has not returned holds up its own stream's later work, and only that: the
  // caller does not wait, another stream's work completes, the bytes behind the gate stay unwritten.
  Gate gate;
  OK(cudaMemsetAsync(d_in, 0, kBytes, s1));
  OK(cudaLaunchHostFunc(s1, WaitAtGate, &gate));
  OK(cudaMemsetAsync(d_in, 0x11, kBytes, s1));
  EXPECT(AwaitStarted(gate));
  EXPECT(cudaStreamQuery(s1) == cudaErrorNotReady);
  OK(cudaMemcpyAsync(d_out, d_mid, kBytes, cudaMemcpyDeviceToDevice, s2));
  OK(cudaStreamSynchronize(s2));
  std::vector<unsigned char> probe(64, 0xee);
  OK(cudaMemcpyAsync(probe.data(), d_in, probe.size(), cudaMemcpyDeviceToHost, s2));
  EXPECT(probe == std::vector<unsigned char>(64, 0));
  EXPECT(cudaStreamQuery(s1) == cudaErrorNotReady);
  gate.open = true;
  OK(cudaStreamSynchronize(s1));
  OK(cudaMemcpy(probe.data(), d_in, probe.size(), cudaMemcpyDeviceToHost));
  EXPECT(probe == std::vector<unsigned char>(64, 0x11));

  // Many, in the order queued: on a stream, then on the legacy stream.
  std::vector<int> order;
  std::vector<Sequence> sequence(1100);
  for (int i = 0; i < 1100; ++i) {
    sequence[i] = {&order, i};
    OK(cudaLaunchHostFunc(i < 1000 ? s1 : nullptr, AppendIndex, &sequence[i]));
    if (i == 999) OK(cudaStreamSynchronize(s1));
  }
  OK(cudaDeviceSynchronize());
  bool in_order = order.size() == 1100;
  for (int i = 0; in_order && i < 1100; ++i) in_order = order[i] == i;
  EXPECT(in_order);

  // A function phosd refuses (no such stream) never runs; the refusal is the next synchronising
  // call's error, and later functions run.
  Step refused{&counter};
  OK(cudaLaunchHostFunc(reinterpret_cast<cudaStream_t>(0x7770), RecordStep, &refused));
  EXPECT(cudaDeviceSynchronize() == cudaErrorInvalidResourceHandle);
  Step after{&counter};
  OK(cudaLaunchHostFunc(s1, RecordStep, &after));
  OK(cudaStreamSynchronize(s1));
  EXPECT(refused.seen == -1 && after.seen == 3);

  // What the runtime refuses itself.
  EXPECT(cudaLaunchHostFunc(s1, nullptr, nullptr) == cudaErrorInvalidValue);
  EXPECT(cudaStreamAddCallback(s1, RecordCallback, &c, 1) == cudaErrorInvalidValue);

  OK(cudaEventDestroy(event));
  for (cudaStream_t s : {s1, s2}) OK(cudaStreamDestroy(s));
  for (float* p : {d_in, d_mid, d_out}) OK(cudaFree(p));
  return g_failures;
}

// A function that never returns: the process ends with it still waiting (and work queued behind
// it), and its session with the process.
int Held() {
  static Gate gate;  // never opened
  cudaStream_t s = nullptr;
  OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  float* d = nullptr;
  OK(cudaMalloc(reinterpret_cast<void**>(&d), 4096));
  OK(cudaLaunchHostFunc(s, WaitAtGate, &gate));
  OK(cudaMemsetAsync(d, 0, 4096, s));
  EXPECT(AwaitStarted(gate));
  std::printf("held\n");
  std::fflush(stdout);
  return g_failures;
}

// The process's threads (/proc/self/task); -1 when it cannot tell.
// Threads a sanitizer's runtime keeps beside the program's: ThreadSanitizer's background thread.
constexpr int kSanitizerThreads = kThreadSanitizer ? 1 : 0;

int CountThreads() {
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return -1;
  int n = 0;
  while (dirent* e = readdir(dir)) n += e->d_name[0] != '.' ? 1 : 0;
  closedir(dir);
  return n;
}

// What the fork template asks before it forks: the host-function thread stops when nothing is
// pending, and stays (counted) while something is.
int Quiesce() {
  cudaStream_t s = nullptr;
  OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  EXPECT(__phosQuiesce() == 0);  // no thread yet
  // This one, and a sanitizer's where the build has one: ThreadSanitizer starts its own at the
  // process's first thread creation, so one thread is made and joined before counting, and the
  // count taken once the joined one is gone from /proc/self/task (which may lag the join).
  const int alone = CountThreads();
  std::thread([] {}).join();
  EXPECT(testing::WaitUntil([&] { return CountThreads() <= alone + kSanitizerThreads; }));
  const int before = CountThreads();
  Gate gate;
  OK(cudaLaunchHostFunc(s, WaitAtGate, &gate));
  EXPECT(AwaitStarted(gate));
  EXPECT(__phosQuiesce() == 1);
  EXPECT(CountThreads() == before + 1);  // the host-function thread stays
  gate.open = true;
  OK(cudaStreamSynchronize(s));
  EXPECT(__phosQuiesce() == 0);
  // Joined: gone from /proc/self/task once the kernel has released it, which may lag the join.
  EXPECT(testing::WaitUntil([&] { return CountThreads() == before; }));
  // Host functions still run after it: the thread starts again.
  std::atomic<int> counter{0};
  Step again{&counter};
  OK(cudaLaunchHostFunc(s, RecordStep, &again));
  OK(cudaStreamSynchronize(s));
  EXPECT(again.seen == 0);
  EXPECT(__phosQuiesce() == 0);
  EXPECT(testing::WaitUntil([&] { return CountThreads() == before; }));
  OK(cudaStreamDestroy(s));
  return g_failures;
}

}  // namespace
}  // namespace phos::stream_client

int main(int argc, char** argv) {
  using namespace phos::stream_client;
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s MODULE MODE\n", argv[0]);
    return 2;
  }
  std::ifstream file(argv[1], std::ios::binary);
  static std::vector<char> image((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  if (image.empty()) {
    std::fprintf(stderr, "cannot read module %s\n", argv[1]);
    return 2;
  }
  __phosRegisterSimModule(image.data(), image.size());
  const std::string mode = argv[2];
  if (mode == "priorities") return Priorities();
  if (mode == "host-functions") return HostFunctions();
  if (mode == "per-thread") return PerThreadDefaultStreams();
  if (mode == "held") return Held();
  if (mode == "quiesce") return Quiesce();
  std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
  return 2;
}
