// A function-like client of the frontend CUDA runtime for kernel attributes, occupancy, launches
// with attributes and module globals, driven by frontend_test.cc with PHOS_GPU_SOCKET and
// PHOS_INSTANCE_TOKEN set. It is g++-built: the symbol and function templates cuda_runtime.h
// keeps for nvcc are not there, so symbols are passed by address and kernels as const void*. Each mode checks
// its results against figures worked out here (the ci profile is an A100's; simgpu's kernel figures are
// simgpu/README.md's) and exits 0 only when every check held.
//
// Usage: launch_client MODULE MODE [TOKEN]
#include <cuda_runtime.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "launch_kernels.cuh"
#include "phos/frontend/fork_child.h"
#include "phos/frontend/sim_module.h"

// What CUDA 13's nvcc-generated launch code calls (crt/host_runtime.h); not in the runtime's
// public headers.
extern "C" cudaError_t __cudaGetKernel(cudaKernel_t* kernel, const void* func);
extern "C" cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 grid, dim3 block, void** args,
                                          size_t shared, cudaStream_t stream);
extern "C" void** __cudaRegisterFatBinary(void* fatbin);
extern "C" void __cudaUnregisterFatBinary(void** handle);
extern "C" char __cudaInitModule(void** handle);
extern "C" void __cudaRegisterVar(void** handle, char* host_var, char* device_address,
                                  const char* device_name, int ext, size_t size, int constant, int global);

// Exported, so that dladdr names it, but no module's global.
extern "C" {
__attribute__((visibility("default"))) int launch_client_host_only = 0;
}

namespace {

int g_failures = 0;

#define EXPECT(cond)                                                                 \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      std::fprintf(stderr, "launch_client:%d: check failed: %s\n", __LINE__, #cond); \
      ++g_failures;                                                                  \
    }                                                                                \
  } while (0)

#define OK(call) EXPECT((call) == cudaSuccess)

const void* const kKernel = reinterpret_cast<const void*>(&lookup_scale);

// Runs lookup_scale over in[i] = i + 1 with `shared` bytes of dynamic shared memory; what it
// wrote. The table and bias are whatever the module holds.
std::vector<float> Run(int n, size_t shared, cudaError_t* result) {
  std::vector<float> in(n), out(n, -1.0f);
  for (int i = 0; i < n; ++i) in[i] = static_cast<float>(i + 1);
  float *din = nullptr, *dout = nullptr;
  OK(cudaMalloc(reinterpret_cast<void**>(&din), n * sizeof(float)));
  OK(cudaMalloc(reinterpret_cast<void**>(&dout), n * sizeof(float)));
  OK(cudaMemcpy(din, in.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  void* args[] = {&din, &dout, &n};
  // A launch is asynchronous: what the server made of it comes with the next synchronising call.
  *result = cudaLaunchKernel(kKernel, dim3((n + 63) / 64), dim3(64), args, shared, nullptr);
  if (*result == cudaSuccess) *result = cudaDeviceSynchronize();
  if (*result == cudaSuccess) OK(cudaMemcpy(out.data(), dout, n * sizeof(float), cudaMemcpyDeviceToHost));
  OK(cudaFree(din));
  OK(cudaFree(dout));
  return out;
}

// out[i] as lookup_scale computes it, on the CPU.
float Expected(const float (&table)[16], float bias, int i) {
  return table[i % 16] * static_cast<float>(i + 1) + bias;
}

int Functions() {
  cudaFuncAttributes attr{};
  OK(cudaFuncGetAttributes(&attr, kKernel));
  EXPECT(attr.numRegs == 32);
  EXPECT(attr.maxThreadsPerBlock == 1024);
  EXPECT(attr.sharedSizeBytes == 0 && attr.localSizeBytes == 0);
  EXPECT(attr.constSizeBytes == 16 * sizeof(float));
  EXPECT(attr.ptxVersion == 80 && attr.binaryVersion == 80);
  EXPECT(attr.maxDynamicSharedSizeBytes == 49152);
  EXPECT(attr.preferredShmemCarveout == -1);
  EXPECT(attr.requiredClusterWidth == 0 && attr.nonPortableClusterSizeAllowed == 0);
  EXPECT(cudaFuncGetAttributes(nullptr, kKernel) == cudaErrorInvalidValue);
  EXPECT(cudaFuncGetAttributes(&attr, &launch_client_host_only) == cudaErrorInvalidDeviceFunction);
  EXPECT(cudaFuncGetAttributes(&attr, &g_failures) == cudaErrorInvalidDeviceFunction);  // not even exported
  cudaGetLastError();

  const char* name = nullptr;
  OK(cudaFuncGetName(&name, kKernel));
  EXPECT(name != nullptr && std::strcmp(name, "_Z12lookup_scalePKfPfi") == 0);
  size_t offset = 0, size = 0;
  OK(cudaFuncGetParamInfo(kKernel, 2, &offset, &size));
  EXPECT(offset == 16 && size == 4);
  EXPECT(cudaFuncGetParamInfo(kKernel, 3, &offset, &size) == cudaErrorInvalidValue);

  // Occupancy: 2048 threads, 32 blocks and 164 KiB of shared memory (1 KiB reserved per block)
  // per SM, 108 SMs.
  int blocks = 0;
  OK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kKernel, 1024, 0));
  EXPECT(blocks == 2);
  OK(cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&blocks, kKernel, 256, 0,
                                                            cudaOccupancyDisableCachingOverride));
  EXPECT(blocks == 8);
  OK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kKernel, 128, 48 * 1024));
  EXPECT(blocks == 3);
  EXPECT(cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&blocks, kKernel, 256, 0, 4) ==
         cudaErrorInvalidValue);
  size_t available = 0;
  OK(cudaOccupancyAvailableDynamicSMemPerBlock(&available, kKernel, 4, 128));
  EXPECT(available == 167936 / 4);
  int min_grid = 0, block = 0;
  OK(cudaOccupancyMaxPotentialBlockSize(&min_grid, &block, kKernel));
  EXPECT(block == 1024 && min_grid == 2 * 108);  // the largest block that fills an SM
  // At most 100 threads: 100 and 96 reach 16 and 21 blocks (1600, 2016 threads); 64 reaches the
  // 32 blocks an SM holds, 2048 threads.
  OK(cudaOccupancyMaxPotentialBlockSize(&min_grid, &block, kKernel, 0, 100));
  EXPECT(block == 64 && min_grid == 32 * 108);
  cudaGetLastError();

  // Settings: beyond the opt-in limit refused; within it, a launch that needs it runs.
  cudaError_t launched = cudaSuccess;
  Run(64, 100000, &launched);
  EXPECT(launched == cudaErrorInvalidValue);
  cudaGetLastError();
  EXPECT(cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 166913) ==
         cudaErrorInvalidValue);
  OK(cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 100000));
  Run(64, 100000, &launched);
  EXPECT(launched == cudaSuccess);
  // The carveout reaches the calculator: half the SM's shared memory (100 KiB, the next size
  // the SM offers) holds two 49 KiB blocks, not three.
  OK(cudaFuncSetAttribute(kKernel, cudaFuncAttributePreferredSharedMemoryCarveout, 50));
  OK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kKernel, 128, 48 * 1024));
  EXPECT(blocks == 2);
  OK(cudaFuncGetAttributes(&attr, kKernel));
  EXPECT(attr.maxDynamicSharedSizeBytes == 100000 && attr.preferredShmemCarveout == 50);
  EXPECT(cudaFuncSetAttribute(kKernel, static_cast<cudaFuncAttribute>(3), 1) == cudaErrorInvalidValue);
  OK(cudaFuncSetCacheConfig(kKernel, cudaFuncCachePreferShared));
  EXPECT(cudaFuncSetCacheConfig(kKernel, static_cast<cudaFuncCache>(9)) == cudaErrorInvalidValue);
  // Deprecated in CUDA 13, and still exported: a program built against an older toolkit calls it.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  OK(cudaFuncSetSharedMemConfig(kKernel, cudaSharedMemBankSizeFourByte));
  EXPECT(cudaFuncSetSharedMemConfig(kKernel, static_cast<cudaSharedMemConfig>(5)) == cudaErrorInvalidValue);
#pragma GCC diagnostic pop
  cudaGetLastError();

  // Launches with attributes: a completion event and hints run the kernel; a cooperative grid is
  // refused, as cudaLaunchCooperativeKernel is.
  float table[16];
  for (int i = 0; i < 16; ++i) table[i] = static_cast<float>(i);
  OK(cudaMemcpyToSymbol(&lut, table, sizeof(table)));
  int n = 256;
  float *din = nullptr, *dout = nullptr;
  std::vector<float> in(n);
  for (int i = 0; i < n; ++i) in[i] = static_cast<float>(i + 1);
  OK(cudaMalloc(reinterpret_cast<void**>(&din), n * sizeof(float)));
  OK(cudaMalloc(reinterpret_cast<void**>(&dout), n * sizeof(float)));
  OK(cudaMemcpy(din, in.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  cudaStream_t stream = nullptr;
  OK(cudaStreamCreate(&stream));
  cudaEvent_t done = nullptr;
  OK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  cudaLaunchAttribute attrs[3];
  std::memset(attrs, 0, sizeof(attrs));
  attrs[0].id = cudaLaunchAttributeLaunchCompletionEvent;
  attrs[0].val.launchCompletionEvent.event = done;
  attrs[1].id = cudaLaunchAttributePriority;
  attrs[1].val.priority = 0;
  attrs[2].id = cudaLaunchAttributeIgnore;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(4);
  config.blockDim = dim3(64);
  config.stream = stream;
  config.attrs = attrs;
  config.numAttrs = 3;
  void* args[] = {&din, &dout, &n};
  OK(cudaLaunchKernelExC(&config, kKernel, args));
  OK(cudaEventSynchronize(done));
  OK(cudaStreamSynchronize(stream));
  std::vector<float> out(n);
  OK(cudaMemcpy(out.data(), dout, n * sizeof(float), cudaMemcpyDeviceToHost));
  bool matches = true;
  for (int i = 0; i < n; ++i) matches &= out[i] == Expected(table, 0.0f, i);
  EXPECT(matches);
  // The C++ template of cuda_runtime.h takes the kernel's arguments themselves.
  OK(cudaMemset(dout, 0, n * sizeof(float)));
  OK(cudaLaunchKernelEx(&config, lookup_scale, static_cast<const float*>(din), dout, n));
  OK(cudaStreamSynchronize(stream));
  OK(cudaMemcpy(out.data(), dout, n * sizeof(float), cudaMemcpyDeviceToHost));
  EXPECT(out[n - 1] == Expected(table, 0.0f, n - 1));
  cudaLaunchAttribute cooperative{};
  cooperative.id = cudaLaunchAttributeCooperative;
  cooperative.val.cooperative = 1;
  config.attrs = &cooperative;
  config.numAttrs = 1;
  EXPECT(cudaLaunchKernelExC(&config, kKernel, args) == cudaErrorNotSupported);
  config.numAttrs = 33;
  EXPECT(cudaLaunchKernelExC(&config, kKernel, args) == cudaErrorInvalidValue);
  EXPECT(cudaLaunchCooperativeKernel(kKernel, dim3(4), dim3(64), args, 0, stream) == cudaErrorNotSupported);
  int clusters = -1;
  EXPECT(cudaOccupancyMaxPotentialClusterSize(&clusters, kKernel, &config) == cudaErrorNotSupported &&
         clusters == 0);
  EXPECT(cudaOccupancyMaxActiveClusters(&clusters, kKernel, &config) == cudaErrorNotSupported &&
         clusters == 0);
  cudaGetLastError();

  // What nvcc's launch code calls: a kernel handle every other call takes as the kernel.
  cudaKernel_t handle = nullptr;
  OK(__cudaGetKernel(&handle, kKernel));
  cudaKernel_t same = nullptr;
  OK(cudaGetKernel(&same, kKernel));
  EXPECT(handle == same);
  OK(cudaFuncGetAttributes(&attr, reinterpret_cast<const void*>(handle)));
  EXPECT(attr.maxDynamicSharedSizeBytes == 100000);
  OK(cudaMemset(dout, 0, n * sizeof(float)));
  OK(__cudaLaunchKernel(handle, dim3(4), dim3(64), args, 0, stream));
  OK(cudaStreamSynchronize(stream));
  OK(cudaMemcpy(out.data(), dout, n * sizeof(float), cudaMemcpyDeviceToHost));
  EXPECT(out[7] == Expected(table, 0.0f, 7));
  OK(cudaEventDestroy(done));
  OK(cudaStreamDestroy(stream));
  OK(cudaFree(din));
  OK(cudaFree(dout));
  EXPECT(cudaGetLastError() == cudaSuccess);
  return g_failures;
}

int Symbols() {
  float table[16];
  for (int i = 0; i < 16; ++i) table[i] = 0.5f * static_cast<float>(i) - 2.0f;
  const float bias = 1.5f;
  OK(cudaMemcpyToSymbol(&lut, table, sizeof(table)));
  OK(cudaMemcpyToSymbol(&launch_test::bias, &bias, sizeof(bias)));
  size_t size = 0;
  OK(cudaGetSymbolSize(&size, &lut));
  EXPECT(size == sizeof(table));
  OK(cudaGetSymbolSize(&size, &processed));
  EXPECT(size == sizeof(unsigned));
  const int n = 1000;
  cudaError_t launched = cudaSuccess;
  std::vector<float> out = Run(n, 0, &launched);
  EXPECT(launched == cudaSuccess);
  bool matches = true;
  for (int i = 0; i < n; ++i) matches &= out[i] == Expected(table, bias, i);
  EXPECT(matches);
  unsigned count = 0;
  OK(cudaMemcpyFromSymbol(&count, &processed, sizeof(count)));
  EXPECT(count == static_cast<unsigned>(n));

  // A part of the table at an offset, asynchronously; read back whole.
  cudaStream_t stream = nullptr;
  OK(cudaStreamCreate(&stream));
  const float part[4] = {100, 101, 102, 103};
  OK(cudaMemcpyToSymbolAsync(&lut, part, sizeof(part), 8 * sizeof(float), cudaMemcpyHostToDevice, stream));
  float back[16] = {};
  OK(cudaMemcpyFromSymbolAsync(back, &lut, sizeof(back), 0, cudaMemcpyDeviceToHost, stream));
  OK(cudaStreamSynchronize(stream));
  std::memcpy(&table[8], part, sizeof(part));
  EXPECT(std::memcmp(back, table, sizeof(table)) == 0);

  // Device to device both ways, and cudaMemcpyDefault, which knows the global's address as
  // device memory.
  float* scratch = nullptr;
  OK(cudaMalloc(reinterpret_cast<void**>(&scratch), sizeof(table)));
  OK(cudaMemcpyFromSymbol(scratch, &lut, sizeof(table), 0, cudaMemcpyDeviceToDevice));
  float reversed[16];
  for (int i = 0; i < 16; ++i) reversed[i] = table[15 - i];
  OK(cudaMemcpy(scratch, reversed, sizeof(reversed), cudaMemcpyHostToDevice));
  OK(cudaMemcpyToSymbol(&lut, scratch, sizeof(reversed), 0, cudaMemcpyDefault));
  void* address = nullptr;
  OK(cudaGetSymbolAddress(&address, &lut));
  std::memset(back, 0, sizeof(back));
  OK(cudaMemcpy(back, address, sizeof(back), cudaMemcpyDefault));
  EXPECT(std::memcmp(back, reversed, sizeof(reversed)) == 0);

  // Refusals: past the global's end, the wrong direction, what names no global.
  EXPECT(cudaMemcpyToSymbol(&lut, table, sizeof(table) + 1) == cudaErrorInvalidValue);
  EXPECT(cudaMemcpyToSymbol(&lut, table, 8, sizeof(table) - 4) == cudaErrorInvalidValue);
  EXPECT(cudaMemcpyToSymbol(&lut, table, 4, 0, cudaMemcpyDeviceToHost) == cudaErrorInvalidMemcpyDirection);
  EXPECT(cudaMemcpyFromSymbol(back, &lut, 4, 0, cudaMemcpyHostToDevice) == cudaErrorInvalidMemcpyDirection);
  EXPECT(cudaGetSymbolAddress(&address, &launch_client_host_only) == cudaErrorInvalidSymbol);
  EXPECT(cudaGetSymbolAddress(&address, &g_failures) == cudaErrorInvalidSymbol);
  EXPECT(cudaMemcpyToSymbol(&launch_client_host_only, &bias, 4) == cudaErrorInvalidSymbol);
  EXPECT(cudaGetSymbolSize(nullptr, &lut) == cudaErrorInvalidValue);
  // A variable nvcc's code registered with a fatbin that did not load (here: no fatbin at all)
  // names no global, even under a name that is one.
  static float orphan_shadow[16];
  void** no_module = __cudaRegisterFatBinary(nullptr);
  __cudaRegisterVar(no_module, reinterpret_cast<char*>(orphan_shadow), nullptr, "lut", 0,
                    sizeof(orphan_shadow), 1, 0);
  EXPECT(cudaGetSymbolAddress(&address, orphan_shadow) == cudaErrorInvalidSymbol);
  void* managed = nullptr;
  EXPECT(cudaMallocManaged(&managed, 64) == cudaErrorNotSupported && managed == nullptr);
  EXPECT(cudaGetLastError() == cudaErrorNotSupported);
  EXPECT(__cudaInitModule(no_module) == 0);  // no module to load
  __cudaUnregisterFatBinary(no_module);        // as nvcc's code does at exit
  OK(cudaStreamDestroy(stream));
  OK(cudaFree(scratch));
  return g_failures;
}

// A kernel setting and a table made before a fork: the forked instance's new session gets the
// setting again when it first uses the kernel, and resolves the globals of its own module.
int ForkReplay(const char* token) {
  float table[16];
  for (int i = 0; i < 16; ++i) table[i] = static_cast<float>(i + 1);
  OK(cudaMemcpyToSymbol(&lut, table, sizeof(table)));
  OK(cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 100000));
  cudaError_t launched = cudaSuccess;
  Run(64, 100000, &launched);
  EXPECT(launched == cudaSuccess);
  void* parent_address = nullptr;
  OK(cudaGetSymbolAddress(&parent_address, &processed));
  if (g_failures != 0) return g_failures;
  std::fflush(nullptr);
  const pid_t child = fork();
  if (child == 0) {
    if (__phosForkChild(token) != 0) _exit(3);
    void* child_address = nullptr;
    OK(cudaGetSymbolAddress(&child_address, &processed));
    EXPECT(child_address != nullptr && child_address != parent_address);
    float fresh[16] = {};
    OK(cudaMemcpyFromSymbol(fresh, &lut, sizeof(fresh)));
    EXPECT(fresh[0] == 0.0f && fresh[15] == 0.0f);  // the new session's module, as it loaded
    OK(cudaMemcpyToSymbol(&lut, table, sizeof(table)));
    std::vector<float> out = Run(32, 100000, &launched);
    EXPECT(launched == cudaSuccess);
    EXPECT(out[31] == Expected(table, 0.0f, 31));
    unsigned count = 0;
    OK(cudaMemcpyFromSymbol(&count, &processed, sizeof(count)));
    EXPECT(count == 32u);
    cudaFuncAttributes attr{};
    OK(cudaFuncGetAttributes(&attr, kKernel));
    EXPECT(attr.maxDynamicSharedSizeBytes == 100000);
    std::fflush(nullptr);
    _exit(g_failures == 0 ? 0 : 1);
  }
  int status = 0;
  EXPECT(waitpid(child, &status, 0) == child);
  EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  unsigned count = 0;
  OK(cudaMemcpyFromSymbol(&count, &processed, sizeof(count)));
  EXPECT(count == 64u);  // the parent's session and module are its own still
  return g_failures;
}

}  // namespace

// launch_client_ptds.cc: the same calls as a per-thread default stream build makes them.
struct PerThreadTargets {
  const void* lut;
  const void* processed;
  const void* bias;
  const void* kernel;
};
int PerThreadSymbolsAndLaunches(const PerThreadTargets& targets);

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s MODULE MODE [TOKEN]\n", argv[0]);
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
  if (mode == "functions") return Functions();
  if (mode == "symbols") return Symbols();
  if (mode == "per-thread") {
    return PerThreadSymbolsAndLaunches({&lut, &processed, &launch_test::bias,
                                        reinterpret_cast<const void*>(&lookup_scale)});
  }
  if (mode == "fork-replay" && argc > 3) return ForkReplay(argv[3]);
  std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
  return 2;
}
