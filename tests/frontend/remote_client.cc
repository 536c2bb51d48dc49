// A function-like client of the frontend libraries, driven by frontend_test.cc with
// PHOS_GPU_SOCKET and PHOS_INSTANCE_TOKEN set. Each mode checks its own results and exits 0 only
// when every check held; a failed check prints what differed.
//
// Usage: remote_client MODULE MODE [ARGS]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include <cublas_v2.h>
#include <cuda.h>
#include <cuda_runtime.h>

#include "kernels.cuh"
#include "phos/frontend/sim_module.h"

namespace {

int g_failures = 0;

#define EXPECT(cond)                                                         \
  do {                                                                       \
    if (!(cond)) {                                                           \
      std::fprintf(stderr, "remote_client:%d: check failed: %s\n", __LINE__, #cond); \
      ++g_failures;                                                          \
    }                                                                        \
  } while (0)

#define OK(call) EXPECT((call) == cudaSuccess)

cudaError_t LaunchFill(float* p, float v, int n, cudaStream_t stream) {
  void* args[] = {&p, &v, &n};
  return cudaLaunchKernel(reinterpret_cast<const void*>(&fill_kernel), dim3((n + 255) / 256), dim3(256), args, 0, stream);
}

int RoundTrip() {
  int count = 0;
  OK(cudaGetDeviceCount(&count));
  EXPECT(count == 1);
  cudaDeviceProp prop;
  OK(cudaGetDeviceProperties(&prop, 0));
  EXPECT(prop.totalGlobalMem > 0 && prop.name[0] != '\0' && prop.major >= 7);
  int version = 0;
  OK(cudaDriverGetVersion(&version));
  EXPECT(version > 0);

  // 5 MiB: more than a record (2 MiB) and more than the reply area, so copies go in chunks.
  const size_t n = (5u << 20) / sizeof(float) + 7;
  std::vector<float> host(n), back(n, -1.f);
  for (size_t i = 0; i < n; ++i) host[i] = static_cast<float>(i);
  float *a = nullptr, *b = nullptr;
  OK(cudaMalloc(reinterpret_cast<void**>(&a), n * sizeof(float)));
  OK(cudaMalloc(reinterpret_cast<void**>(&b), n * sizeof(float)));
  OK(cudaMemcpy(a, host.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  OK(cudaMemcpy(b, a, n * sizeof(float), cudaMemcpyDeviceToDevice));
  OK(cudaMemcpy(back.data(), b, n * sizeof(float), cudaMemcpyDeviceToHost));
  EXPECT(back == host);

  // cudaMemcpyDefault infers every direction, host-to-host included.
  std::vector<float> other(n, 0.f);
  OK(cudaMemset(b, 0, n * sizeof(float)));
  OK(cudaMemcpy(b, host.data(), n * sizeof(float), cudaMemcpyDefault));
  OK(cudaMemcpy(other.data(), b, n * sizeof(float), cudaMemcpyDefault));
  EXPECT(other == host);
  std::vector<float> h2h(n, 0.f);
  OK(cudaMemcpy(h2h.data(), host.data(), n * sizeof(float), cudaMemcpyDefault));
  EXPECT(h2h == host);

  // Async forms on a stream, pinned host memory, events.
  cudaStream_t s = nullptr;
  OK(cudaStreamCreate(&s));
  float* pinned = nullptr;
  OK(cudaMallocHost(reinterpret_cast<void**>(&pinned), n * sizeof(float)));
  cudaEvent_t e0, e1;
  OK(cudaEventCreate(&e0));
  OK(cudaEventCreate(&e1));
  OK(cudaEventRecord(e0, s));
  OK(cudaMemsetAsync(a, 0, n * sizeof(float), s));
  OK(LaunchFill(a, 2.5f, 1000, s));
  OK(cudaMemcpyAsync(pinned, a, n * sizeof(float), cudaMemcpyDeviceToHost, s));
  OK(cudaEventRecord(e1, s));
  OK(cudaStreamSynchronize(s));
  EXPECT(pinned[0] == 2.5f && pinned[999] == 2.5f && pinned[1000] == 0.f && pinned[n - 1] == 0.f);
  float ms = -1;
  OK(cudaEventElapsedTime(&ms, e0, e1));
  EXPECT(ms >= 0);
  OK(cudaEventQuery(e1));
  OK(cudaStreamQuery(s));
  for (size_t i = 0; i < n; ++i) pinned[i] = 1.f;
  OK(cudaMemcpyAsync(b, pinned, n * sizeof(float), cudaMemcpyHostToDevice, s));
  OK(cudaMemcpyAsync(a, b, n * sizeof(float), cudaMemcpyDeviceToDevice, s));
  OK(cudaStreamSynchronize(s));
  OK(cudaMemcpy(back.data(), a, n * sizeof(float), cudaMemcpyDeviceToHost));
  EXPECT(back[0] == 1.f && back[n - 1] == 1.f);
  OK(cudaEventDestroy(e0));
  OK(cudaEventDestroy(e1));
  OK(cudaStreamDestroy(s));
  OK(cudaFreeHost(pinned));
  OK(cudaFree(a));
  OK(cudaFree(b));
  OK(cudaDeviceSynchronize());
  EXPECT(cudaGetLastError() == cudaSuccess);
  return g_failures;
}

int AsyncError() {
  float* a = nullptr;
  OK(cudaMalloc(reinterpret_cast<void**>(&a), 4096));
  // Past the end of the buffer: the server refuses the memset; the async call itself succeeds.
  OK(cudaMemsetAsync(a + 1000, 0, 4096, nullptr));
  cudaError_t e = cudaDeviceSynchronize();
  EXPECT(e == cudaErrorInvalidValue);
  // Reported once, then cleared.
  OK(cudaDeviceSynchronize());
  // cudaGetLastError also takes a pending async error.
  OK(cudaMemsetAsync(a + 1000, 0, 4096, nullptr));
  EXPECT(cudaStreamQuery(nullptr) == cudaErrorInvalidValue);
  OK(cudaMemsetAsync(a + 1000, 0, 4096, nullptr));
  float host = 0;
  // A synchronous call after it reports it too.
  EXPECT(cudaMemcpy(&host, a, sizeof(host), cudaMemcpyDeviceToHost) == cudaErrorInvalidValue);
  EXPECT(cudaGetLastError() == cudaErrorInvalidValue);
  EXPECT(cudaGetLastError() == cudaSuccess);
  OK(cudaFree(a));
  return g_failures;
}

int Handles() {
  cudaStream_t s1 = nullptr, s2 = nullptr;
  OK(cudaStreamCreate(&s1));
  OK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  auto v1 = reinterpret_cast<uintptr_t>(s1), v2 = reinterpret_cast<uintptr_t>(s2);
  EXPECT(v1 != v2 && v1 > 2 && v2 > 2);
  cudaEvent_t e = nullptr;
  OK(cudaEventCreate(&e));
  OK(cudaEventRecord(e, s1));
  OK(cudaStreamWaitEvent(s2, e, 0));
  OK(cudaStreamSynchronize(s2));
  OK(cudaStreamDestroy(s1));
  EXPECT(cudaStreamSynchronize(s1) == cudaErrorInvalidResourceHandle);
  EXPECT(cudaEventSynchronize(reinterpret_cast<cudaEvent_t>(0x999990)) == cudaErrorInvalidResourceHandle);
  EXPECT(cudaSetDevice(3) == cudaErrorInvalidDevice);
  EXPECT(std::strcmp(cudaGetErrorName(cudaErrorInvalidValue), "cudaErrorInvalidValue") == 0);
  EXPECT(cudaHostAlloc(reinterpret_cast<void**>(&e), 64, cudaHostAllocMapped) == cudaErrorNotSupported);
  cudaGetLastError();
  OK(cudaEventDestroy(e));
  OK(cudaStreamDestroy(s2));

  // A pointer to a freed part of one of this instance's own granules is its own memory, not
  // another owner's: the launch is not refused (the kernel does not touch it: n = 0).
  float* kept = nullptr;
  float* freed = nullptr;
  OK(cudaMalloc(reinterpret_cast<void**>(&kept), 256));
  OK(cudaMalloc(reinterpret_cast<void**>(&freed), 256));
  OK(cudaFree(freed));
  float value = 1.0f;
  int none = 0;
  void* args[] = {&freed, &value, &none};
  OK(cudaLaunchKernel(reinterpret_cast<const void*>(&fill_kernel), dim3(1), dim3(1), args, 0, nullptr));
  OK(cudaDeviceSynchronize());
  OK(cudaFree(kept));
  return g_failures;
}

// Prints its buffer's address, waits for a line on stdin, then checks the data is intact.
int Owner() {
  const int n = 1024;
  float* a = nullptr;
  OK(cudaMalloc(reinterpret_cast<void**>(&a), n * sizeof(float)));
  OK(LaunchFill(a, 7.f, n, nullptr));
  OK(cudaDeviceSynchronize());
  std::printf("%p\n", static_cast<void*>(a));
  std::fflush(stdout);
  std::string line;
  std::getline(std::cin, line);
  std::vector<float> back(n);
  OK(cudaMemcpy(back.data(), a, n * sizeof(float), cudaMemcpyDeviceToHost));
  for (float v : back) EXPECT(v == 7.f);
  std::printf("%s\n", g_failures == 0 ? "intact" : "changed");
  return g_failures;
}

// Every way of naming another instance's buffer is refused.
int Attacker(const char* address) {
  auto* victim = reinterpret_cast<float*>(std::strtoull(address, nullptr, 16));
  std::vector<float> host(1024, 0.f);
  EXPECT(cudaMemcpy(host.data(), victim, 4096, cudaMemcpyDeviceToHost) == cudaErrorInvalidValue);
  EXPECT(cudaMemcpy(victim, host.data(), 4096, cudaMemcpyHostToDevice) == cudaErrorInvalidValue);
  EXPECT(cudaMemset(victim, 0, 4096) == cudaErrorInvalidValue);
  float* mine = nullptr;
  OK(cudaMalloc(reinterpret_cast<void**>(&mine), 4096));
  EXPECT(cudaMemcpy(mine, victim, 4096, cudaMemcpyDeviceToDevice) == cudaErrorInvalidValue);
  EXPECT(cudaFree(victim) == cudaErrorInvalidValue);
  OK(LaunchFill(victim, -1.f, 1024, nullptr));  // asynchronous: refused at the server
  EXPECT(cudaDeviceSynchronize() == cudaErrorInvalidValue);
  cublasHandle_t h = nullptr;
  EXPECT(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS);
  float one = 1.f, zero = 0.f;
  EXPECT(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 32, 32, 32, &one, mine, 32, mine, 32, &zero, victim, 32) == CUBLAS_STATUS_SUCCESS);
  EXPECT(cudaDeviceSynchronize() == cudaErrorInvalidValue);
  cublasDestroy(h);
  OK(cudaFree(mine));
  return g_failures;
}

int LaunchMany(int count) {
  for (int i = 0; i < count; ++i) OK(cudaLaunchKernel(reinterpret_cast<const void*>(&empty_kernel), dim3(1), dim3(1), nullptr, 0, nullptr));
  OK(cudaDeviceSynchronize());
  return g_failures;
}


// The device family against the ci profile's documented figures (an A100 80GB PCIe: CUDA C++
// Programming Guide for compute capability 8.0, A100 whitepaper and product brief, NVIDIA's
// developer forum for the L2 persistence limits).
int Device() {
  int count = 0;
  OK(cudaGetDeviceCount(&count));
  EXPECT(count == 1);
  cudaDeviceProp prop;
  std::memset(&prop, 0x5a, sizeof(prop));
  OK(cudaGetDeviceProperties(&prop, 0));
  EXPECT(std::strcmp(prop.name, "phos simgpu CI device (a100-pcie4 link)") == 0);
  EXPECT(prop.major == 8 && prop.minor == 0);
  EXPECT(prop.multiProcessorCount == 108);
  EXPECT(prop.sharedMemPerBlock == 48 * 1024);
  EXPECT(prop.sharedMemPerBlockOptin == 163 * 1024);
  EXPECT(prop.sharedMemPerMultiprocessor == 164 * 1024);
  EXPECT(prop.reservedSharedMemPerBlock == 1024);
  EXPECT(prop.regsPerBlock == 65536 && prop.regsPerMultiprocessor == 65536);
  EXPECT(prop.totalConstMem == 65536);
  EXPECT(prop.memPitch == 2147483647);
  EXPECT(prop.warpSize == 32 && prop.maxThreadsPerBlock == 1024 && prop.maxThreadsPerMultiProcessor == 2048);
  EXPECT(prop.maxThreadsDim[0] == 1024 && prop.maxThreadsDim[1] == 1024 && prop.maxThreadsDim[2] == 64);
  EXPECT(prop.maxGridSize[0] == 2147483647 && prop.maxGridSize[1] == 65535 && prop.maxGridSize[2] == 65535);
  EXPECT(prop.maxBlocksPerMultiProcessor == 32);
  EXPECT(prop.l2CacheSize == 40 * 1024 * 1024);
  EXPECT(prop.persistingL2CacheMaxSize == 31457280 && prop.accessPolicyMaxWindowSize == 134213632);
  EXPECT(prop.memoryBusWidth == 5120);
  EXPECT(prop.textureAlignment == 512);
  EXPECT(prop.maxTexture1D == 131072 && prop.maxTexture2D[0] == 131072 && prop.maxTexture2D[1] == 65536);
  EXPECT(prop.maxTexture3D[0] == 16384 && prop.maxTexture3D[2] == 16384);
  EXPECT(prop.maxTexture2DLayered[2] == 2048 && prop.maxTextureCubemapLayered[1] == 2046);
  EXPECT(prop.gpuPciDeviceID == 0x20B510DEu && prop.gpuPciSubsystemID == 0x153310DEu);
  EXPECT(prop.pciDomainID == 0 && prop.pciBusID == 0x17 && prop.pciDeviceID == 0);
  EXPECT(prop.unifiedAddressing == 1 && prop.concurrentKernels == 1 && prop.ECCEnabled == 1);
  EXPECT(prop.managedMemory == 0 && prop.cooperativeLaunch == 0);
  // Served by the frontend's default pool, whatever the driver says.
  EXPECT(prop.memoryPoolsSupported == 1);
  EXPECT(prop.hostNumaId == -1);
  EXPECT(prop.totalGlobalMem > (1ull << 30));
  bool uuid_set = false;
  for (char b : prop.uuid.bytes) uuid_set = uuid_set || b != 0;
  EXPECT(uuid_set);
  for (unsigned char b : prop.luid) EXPECT(b == 0);  // Windows only
  for (int r : prop.reserved) EXPECT(r == 0);

  // Every attribute answers, in agreement with the properties; nothing else does.
  for (int a = 1; a < CU_DEVICE_ATTRIBUTE_MAX; ++a) {
    int v = 0;
    cudaError_t e = cudaDeviceGetAttribute(&v, static_cast<cudaDeviceAttr>(a), 0);
    if (e != cudaSuccess) std::fprintf(stderr, "attribute %d: %s\n", a, cudaGetErrorName(e));
    EXPECT(e == cudaSuccess);
  }
  int v = 0;
  OK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
  EXPECT(static_cast<size_t>(v) == prop.sharedMemPerBlockOptin);
  OK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxRegistersPerMultiprocessor, 0));
  EXPECT(v == prop.regsPerMultiprocessor);
  for (int a : {0, static_cast<int>(CU_DEVICE_ATTRIBUTE_MAX), -1, 4096}) {
    EXPECT(cudaDeviceGetAttribute(&v, static_cast<cudaDeviceAttr>(a), 0) == cudaErrorInvalidValue);
  }
  EXPECT(cudaDeviceGetAttribute(&v, cudaDevAttrWarpSize, 1) == cudaErrorInvalidDevice);
  EXPECT(cudaDeviceGetAttribute(&v, cudaDevAttrWarpSize, -1) == cudaErrorInvalidDevice);
  EXPECT(cudaDeviceGetAttribute(nullptr, cudaDevAttrWarpSize, 0) == cudaErrorInvalidValue);
  EXPECT(cudaGetDeviceProperties(&prop, 1) == cudaErrorInvalidDevice);
  EXPECT(cudaGetDeviceProperties(nullptr, 0) == cudaErrorInvalidValue);

  // PCI bus ids, both ways, in NVIDIA's forms.
  char bus[32];
  OK(cudaDeviceGetPCIBusId(bus, sizeof(bus), 0));
  EXPECT(std::strcmp(bus, "0000:17:00.0") == 0);
  OK(cudaDeviceGetPCIBusId(bus, 5, 0));
  EXPECT(std::strcmp(bus, "0000") == 0);
  EXPECT(cudaDeviceGetPCIBusId(bus, 0, 0) == cudaErrorInvalidValue);
  EXPECT(cudaDeviceGetPCIBusId(bus, sizeof(bus), 3) == cudaErrorInvalidDevice);
  for (const char* id : {"0000:17:00.0", "0000:17:00", "17:00.0", "0:17:0.0"}) {
    int device = -1;
    OK(cudaDeviceGetByPCIBusId(&device, id));
    EXPECT(device == 0);
  }
  int device = -1;
  EXPECT(cudaDeviceGetByPCIBusId(&device, "0000:18:00.0") == cudaErrorInvalidDevice);
  EXPECT(cudaDeviceGetByPCIBusId(&device, "0000:17:00.1") == cudaErrorInvalidDevice);
  EXPECT(cudaDeviceGetByPCIBusId(&device, "bus seventeen") == cudaErrorInvalidValue);
  EXPECT(cudaDeviceGetByPCIBusId(&device, "0000:17:00.0 trailing") == cudaErrorInvalidValue);
  EXPECT(cudaDeviceGetByPCIBusId(&device, "0000:100:00.0") == cudaErrorInvalidValue);
  EXPECT(cudaDeviceGetByPCIBusId(nullptr, "0000:17:00.0") == cudaErrorInvalidValue);
  EXPECT(cudaDeviceGetByPCIBusId(&device, nullptr) == cudaErrorInvalidValue);
  cudaDeviceProp want{};
  want.major = 8;
  OK(cudaChooseDevice(&device, &want));
  EXPECT(device == 0);
  EXPECT(cudaChooseDevice(&device, nullptr) == cudaErrorInvalidValue);

  // Flags, kept per device; one scheduling policy at most.
  unsigned flags = 99;
  OK(cudaGetDeviceFlags(&flags));
  EXPECT(flags == cudaDeviceScheduleAuto);
  OK(cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync | cudaDeviceSyncMemops));
  OK(cudaGetDeviceFlags(&flags));
  EXPECT(flags == (cudaDeviceScheduleBlockingSync | cudaDeviceSyncMemops));
  EXPECT(cudaSetDeviceFlags(cudaDeviceScheduleSpin | cudaDeviceScheduleYield) == cudaErrorInvalidValue);
  EXPECT(cudaSetDeviceFlags(0x100) == cudaErrorInvalidValue);
  EXPECT(cudaGetDeviceFlags(nullptr) == cudaErrorInvalidValue);
  OK(cudaInitDevice(0, cudaDeviceScheduleSpin, cudaInitDeviceFlagsAreValid));
  OK(cudaGetDeviceFlags(&flags));
  EXPECT(flags == cudaDeviceScheduleSpin);
  EXPECT(cudaInitDevice(1, 0, 0) == cudaErrorInvalidDevice);
  EXPECT(cudaInitDevice(0, 0, 2) == cudaErrorInvalidValue);
  int least = 7, greatest = 7;
  OK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  EXPECT(least == 0 && greatest == -5);  // simgpu's range, NVIDIA's on compute capability 7.5+
  OK(cudaDeviceGetStreamPriorityRange(nullptr, nullptr));

  // Limits: the runtime's defaults, what the device refuses, what it clamps.
  size_t limit = 0;
  const std::pair<cudaLimit, size_t> defaults[] = {
      {cudaLimitStackSize, 1024}, {cudaLimitPrintfFifoSize, 1 << 20}, {cudaLimitMallocHeapSize, 8 << 20},
      {cudaLimitDevRuntimeSyncDepth, 2}, {cudaLimitDevRuntimePendingLaunchCount, 2048},
      {cudaLimitPersistingL2CacheSize, 0}};
  for (const auto& [which, value] : defaults) {
    OK(cudaDeviceGetLimit(&limit, which));
    EXPECT(limit == value);
  }
  OK(cudaDeviceSetLimit(cudaLimitStackSize, 4096));
  OK(cudaDeviceGetLimit(&limit, cudaLimitStackSize));
  EXPECT(limit == 4096);
  EXPECT(cudaDeviceSetLimit(cudaLimitStackSize, 1 << 20) == cudaErrorInvalidValue);  // over 512 KiB
  EXPECT(cudaDeviceSetLimit(cudaLimitMallocHeapSize, prop.totalGlobalMem + 1) == cudaErrorMemoryAllocation);
  EXPECT(cudaDeviceSetLimit(cudaLimitDevRuntimeSyncDepth, 25) == cudaErrorInvalidValue);
  OK(cudaDeviceSetLimit(cudaLimitDevRuntimeSyncDepth, 4));  // compute capability 8.0 has it
  OK(cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, 1ull << 30));
  OK(cudaDeviceGetLimit(&limit, cudaLimitPersistingL2CacheSize));
  EXPECT(limit == 31457280);
  OK(cudaDeviceSetLimit(cudaLimitMaxL2FetchGranularity, 1000));
  OK(cudaDeviceGetLimit(&limit, cudaLimitMaxL2FetchGranularity));
  EXPECT(limit == 128);
  EXPECT(cudaDeviceSetLimit(static_cast<cudaLimit>(99), 1) == cudaErrorUnsupportedLimit);
  EXPECT(cudaDeviceGetLimit(&limit, static_cast<cudaLimit>(-1)) == cudaErrorUnsupportedLimit);
  EXPECT(cudaDeviceGetLimit(nullptr, cudaLimitStackSize) == cudaErrorInvalidValue);

  // Memory information follows the session's allocations.
  size_t free_before = 0, total = 0, free_after = 0;
  OK(cudaMemGetInfo(&free_before, &total));
  EXPECT(total > 0 && free_before <= total && total <= prop.totalGlobalMem);
  EXPECT(cudaMemGetInfo(nullptr, &total) == cudaErrorInvalidValue);
  float* kept = nullptr;
  OK(cudaMalloc(reinterpret_cast<void**>(&kept), 64 << 20));
  OK(cudaMemGetInfo(&free_after, &total));
  EXPECT(free_after + (64 << 20) <= free_before);

  // One device: no peer.
  int can = 7;
  OK(cudaDeviceCanAccessPeer(&can, 0, 0));
  EXPECT(can == 0);
  EXPECT(cudaDeviceCanAccessPeer(&can, 0, 1) == cudaErrorInvalidDevice);
  EXPECT(cudaDeviceCanAccessPeer(nullptr, 0, 0) == cudaErrorInvalidValue);
  EXPECT(cudaDeviceEnablePeerAccess(0, 0) == cudaErrorInvalidDevice);
  EXPECT(cudaDeviceEnablePeerAccess(1, 0) == cudaErrorInvalidDevice);
  EXPECT(cudaDeviceDisablePeerAccess(0) == cudaErrorPeerAccessNotEnabled);
  cudaGetLastError();

  // Reset: what the process made on the device is gone, limits are back to their defaults, flags
  // stay, and the device (kernels included) works again.
  cudaStream_t stream = nullptr;
  cudaEvent_t event = nullptr;
  OK(cudaStreamCreate(&stream));
  OK(cudaEventCreate(&event));
  OK(cudaDeviceReset());
  EXPECT(cudaFree(kept) == cudaErrorInvalidValue);
  EXPECT(cudaStreamSynchronize(stream) == cudaErrorInvalidResourceHandle);
  EXPECT(cudaEventQuery(event) == cudaErrorInvalidResourceHandle);
  cudaGetLastError();
  OK(cudaDeviceGetLimit(&limit, cudaLimitStackSize));
  EXPECT(limit == 1024);
  OK(cudaGetDeviceFlags(&flags));
  EXPECT(flags == cudaDeviceScheduleSpin);
  OK(cudaMemGetInfo(&free_after, &total));
  EXPECT(free_after == free_before);
  const int n = 1000;
  float* a = nullptr;
  OK(cudaMalloc(reinterpret_cast<void**>(&a), n * sizeof(float)));
  OK(LaunchFill(a, 4.5f, n, nullptr));
  std::vector<float> back(n, 0.f);
  OK(cudaMemcpy(back.data(), a, n * sizeof(float), cudaMemcpyDeviceToHost));
  EXPECT(back[0] == 4.5f && back[n - 1] == 4.5f);
  OK(cudaFree(a));

  int version = 0;
  OK(cudaRuntimeGetVersion(&version));
  EXPECT(version == CUDART_VERSION);
  OK(cudaDriverGetVersion(&version));
  EXPECT(version >= 13000);
  return g_failures;
}

}  // namespace

// cudaMallocPitch, 2D copies and sets, peer copies on one device, host registration and pointer
// attributes, each result against the same operations done on a host image of the buffer.
int Pitched() {
  const size_t width = 1000, height = 37, host_pitch = 1003;
  unsigned char* dev = nullptr;
  size_t pitch = 0;
  OK(cudaMallocPitch(reinterpret_cast<void**>(&dev), &pitch, width, height));
  EXPECT(pitch == 1024);
  std::vector<unsigned char> host(host_pitch * height), image(pitch * height, 0);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<unsigned char>(i * 31 + 7);
  OK(cudaMemset(dev, 0, pitch * height));
  OK(cudaMemcpy2D(dev, pitch, host.data(), host_pitch, width, height, cudaMemcpyHostToDevice));
  for (size_t r = 0; r < height; ++r) std::memcpy(&image[r * pitch], &host[r * host_pitch], width);
  // Rows 5..14, bytes 100..399, set to 0xab.
  OK(cudaMemset2D(dev + 5 * pitch + 100, pitch, 0xab, 300, 10));
  for (size_t r = 5; r < 15; ++r) std::memset(&image[r * pitch + 100], 0xab, 300);
  std::vector<unsigned char> whole(pitch * height, 1);
  OK(cudaMemcpy(whole.data(), dev, whole.size(), cudaMemcpyDeviceToHost));
  EXPECT(whole == image);
  // Back down, dense, from column 50 of row 3, on a stream.
  cudaStream_t s = nullptr;
  OK(cudaStreamCreate(&s));
  std::vector<unsigned char> dense(600 * 20, 0);
  OK(cudaMemcpy2DAsync(dense.data(), 600, dev + 3 * pitch + 50, pitch, 600, 20, cudaMemcpyDefault, s));
  OK(cudaStreamSynchronize(s));
  bool rows_match = true;
  for (size_t r = 0; r < 20; ++r) rows_match &= std::memcmp(&dense[r * 600], &image[(r + 3) * pitch + 50], 600) == 0;
  EXPECT(rows_match);
  // Device to device between pitched buffers, then a memset2D on the stream.
  unsigned char* other = nullptr;
  size_t other_pitch = 0;
  OK(cudaMallocPitch(reinterpret_cast<void**>(&other), &other_pitch, 2000, height));
  EXPECT(other_pitch == 2048);
  OK(cudaMemcpy2DAsync(other + 8, other_pitch, dev, pitch, width, height, cudaMemcpyDeviceToDevice, s));
  OK(cudaMemset2DAsync(other + 8, other_pitch, 0x11, 16, height, s));
  std::vector<unsigned char> got(width * height, 0);
  OK(cudaMemcpy2DAsync(got.data(), width, other + 8, other_pitch, width, height, cudaMemcpyDeviceToHost, s));
  OK(cudaStreamSynchronize(s));
  std::vector<unsigned char> want(width * height);
  for (size_t r = 0; r < height; ++r) {
    std::memcpy(&want[r * width], &image[r * pitch], width);
    std::memset(&want[r * width], 0x11, 16);
  }
  EXPECT(got == want);

  // 6 MiB of rows: more than a record and more than the reply area, so both directions go in
  // several records; then rows of 3 MiB each, which no record holds whole.
  for (size_t row_bytes : {size_t{3000}, size_t{3} << 20}) {
    const size_t rows = row_bytes == 3000 ? 2100 : 2;
    unsigned char* big = nullptr;
    size_t big_pitch = 0;
    OK(cudaMallocPitch(reinterpret_cast<void**>(&big), &big_pitch, row_bytes, rows));
    std::vector<unsigned char> src(row_bytes * rows), back(row_bytes * rows, 0);
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 131 + i / 4093);
    OK(cudaMemcpy2D(big, big_pitch, src.data(), row_bytes, row_bytes, rows, cudaMemcpyHostToDevice));
    OK(cudaMemcpy2D(back.data(), row_bytes, big, big_pitch, row_bytes, rows, cudaMemcpyDeviceToHost));
    EXPECT(back == src);
    OK(cudaFree(big));
  }

  // Arguments NVIDIA's runtime refuses, and extents phosd refuses.
  EXPECT(cudaMemcpy2D(dense.data(), 10, dev, pitch, 20, 2, cudaMemcpyDeviceToHost) == cudaErrorInvalidPitchValue);
  EXPECT(cudaMemcpy2D(dense.data(), 600, dev, pitch, 600, height + 1, cudaMemcpyDeviceToHost) == cudaErrorInvalidValue);
  EXPECT(cudaMemset2D(dev, pitch, 0, width, height + 1) == cudaErrorInvalidValue);
  EXPECT(cudaMemset2D(dev, 10, 0, 20, 2) == cudaErrorInvalidPitchValue);
  cudaGetLastError();
  OK(cudaMemcpy(whole.data(), dev, whole.size(), cudaMemcpyDeviceToHost));
  EXPECT(whole == image);

  // Peer copies: on one device, a plain device-to-device copy.
  OK(cudaMemcpyPeer(other, 0, dev, 0, 4096));
  OK(cudaMemcpyPeerAsync(other + 4096, 0, dev, 0, 4096, s));
  OK(cudaStreamSynchronize(s));
  std::vector<unsigned char> peer(8192, 0);
  OK(cudaMemcpy(peer.data(), other, peer.size(), cudaMemcpyDeviceToHost));
  EXPECT(std::memcmp(peer.data(), image.data(), 4096) == 0 && std::memcmp(peer.data() + 4096, image.data(), 4096) == 0);
  EXPECT(cudaMemcpyPeer(other, 1, dev, 0, 16) == cudaErrorInvalidDevice);
  EXPECT(cudaMemcpyPeer(host.data(), 0, dev, 0, 16) == cudaErrorInvalidValue);
  cudaGetLastError();

  // Pointer attributes: device memory, pinned and registered host memory, memory CUDA does not know.
  cudaPointerAttributes attr{};
  OK(cudaPointerGetAttributes(&attr, dev + 10));
  EXPECT(attr.type == cudaMemoryTypeDevice && attr.device == 0 && attr.devicePointer == dev + 10 && attr.hostPointer == nullptr);
  void* pinned = nullptr;
  OK(cudaMallocHost(&pinned, 4096));
  OK(cudaPointerGetAttributes(&attr, static_cast<char*>(pinned) + 100));
  EXPECT(attr.type == cudaMemoryTypeHost && attr.hostPointer == static_cast<char*>(pinned) + 100 && attr.devicePointer == nullptr);
  OK(cudaPointerGetAttributes(&attr, host.data()));
  EXPECT(attr.type == cudaMemoryTypeUnregistered && attr.device == cudaInvalidDeviceId && attr.hostPointer == host.data());
  OK(cudaHostRegister(host.data(), host.size(), cudaHostRegisterDefault));
  OK(cudaPointerGetAttributes(&attr, host.data() + 5));
  EXPECT(attr.type == cudaMemoryTypeHost);
  EXPECT(cudaHostRegister(host.data() + 8, 16, cudaHostRegisterDefault) == cudaErrorHostMemoryAlreadyRegistered);
  EXPECT(cudaHostRegister(image.data(), 16, cudaHostRegisterMapped) == cudaErrorNotSupported);
  void* mapped = nullptr;
  EXPECT(cudaHostGetDevicePointer(&mapped, host.data(), 0) == cudaErrorNotSupported);
  // Registered memory is copied like any host memory.
  OK(cudaMemcpy2D(dev, pitch, host.data(), host_pitch, width, 2, cudaMemcpyHostToDevice));
  OK(cudaHostUnregister(host.data()));
  EXPECT(cudaHostUnregister(host.data()) == cudaErrorHostMemoryNotRegistered);
  EXPECT(cudaPointerGetAttributes(nullptr, dev) == cudaErrorInvalidValue);
  cudaGetLastError();
  OK(cudaFreeHost(pinned));
  OK(cudaStreamDestroy(s));
  OK(cudaFree(other));
  OK(cudaFree(dev));
  EXPECT(cudaGetLastError() == cudaSuccess);
  return g_failures;
}

// cudaMallocAsync / cudaFreeAsync and the default pool's counters.
int Pools() {
  cudaMemPool_t pool = nullptr;
  OK(cudaDeviceGetDefaultMemPool(&pool, 0));
  EXPECT(pool != nullptr);
  cudaMemPool_t again = nullptr;
  OK(cudaDeviceGetMemPool(&again, 0));
  EXPECT(again == pool);
  EXPECT(cudaDeviceGetDefaultMemPool(&again, 3) == cudaErrorInvalidDevice);
  uint64_t threshold = 64u << 20, value = 0;
  OK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  OK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &value));
  EXPECT(value == threshold);

  cudaStream_t s = nullptr;
  OK(cudaStreamCreate(&s));
  const int n = 1 << 18;  // 1 MiB of floats
  float *a = nullptr, *b = nullptr;
  OK(cudaMallocAsync(reinterpret_cast<void**>(&a), n * sizeof(float), s));
  OK(cudaMallocFromPoolAsync(reinterpret_cast<void**>(&b), 2 * n * sizeof(float), pool, s));
  OK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &value));
  EXPECT(value == 3u * n * sizeof(float));
  // Stream order: the free of `a` follows the fill and the copy that read it.
  OK(LaunchFill(a, 4.25f, n, s));
  OK(cudaMemcpyAsync(b + n, a, n * sizeof(float), cudaMemcpyDeviceToDevice, s));
  OK(cudaFreeAsync(a, s));
  OK(cudaStreamSynchronize(s));
  std::vector<float> back(n, 0.f);
  OK(cudaMemcpy(back.data(), b + n, n * sizeof(float), cudaMemcpyDeviceToHost));
  EXPECT(back == std::vector<float>(n, 4.25f));
  OK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &value));
  EXPECT(value == 2u * n * sizeof(float));
  OK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &value));
  EXPECT(value == 3u * n * sizeof(float));
  OK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &value));
  EXPECT(value == 2u * n * sizeof(float));
  uint64_t zero = 0, one = 1;
  OK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero));
  OK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &value));
  EXPECT(value == 2u * n * sizeof(float));
  EXPECT(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &one) == cudaErrorInvalidValue);
  // The freed buffer is gone: phosd refuses it, and the frontend refuses a second free.
  EXPECT(cudaMemset(a, 0, 16) == cudaErrorInvalidValue);
  EXPECT(cudaFreeAsync(a, s) == cudaErrorInvalidValue);
  EXPECT(cudaFreeAsync(b + 1, s) == cudaErrorInvalidValue);
  int stack_value = 0;
  auto* foreign = reinterpret_cast<cudaMemPool_t>(&stack_value);
  EXPECT(cudaMemPoolTrimTo(foreign, 0) == cudaErrorInvalidValue);
  OK(cudaMemPoolTrimTo(pool, 0));
  cudaGetLastError();
  // cudaFree takes pooled memory too.
  OK(cudaFree(b));
  OK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &value));
  EXPECT(value == 0);
  OK(cudaStreamDestroy(s));
  OK(cudaDeviceSynchronize());
  EXPECT(cudaGetLastError() == cudaSuccess);
  return g_failures;
}

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s MODULE MODE [ARGS]\n", argv[0]);
    return 2;
  }
  std::ifstream file(argv[1], std::ios::binary);
  static std::vector<char> image((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  if (image.empty()) {
    std::fprintf(stderr, "cannot read module %s\n", argv[1]);
    return 2;
  }
  __phosRegisterSimModule(image.data(), image.size());
  std::string mode = argv[2];
  if (mode == "roundtrip") return RoundTrip();
  if (mode == "async-error") return AsyncError();
  if (mode == "handles") return Handles();
  if (mode == "device") return Device();
  if (mode == "owner") return Owner();
  if (mode == "pitched") return Pitched();
  if (mode == "pools") return Pools();
  if (mode == "attacker" && argc > 3) return Attacker(argv[3]);
  if (mode == "launch-many" && argc > 3) return LaunchMany(std::atoi(argv[3]));
  if (mode == "no-session") {
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, 16);
    std::printf("%s\n", cudaGetErrorName(e));
    return e == cudaErrorNoDevice ? 0 : 1;
  }
  std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
  return 2;
}
