// A tour of simgpu through the public CUDA driver API: create a context, allocate, copy, launch
// a kernel from a module, check the result, and print what each step cost on the modelled
// device (wall time divided by the time scale) beside the profile's own figures.
//
// Usage: simgpu_tour [MiB [module.simgpu.so]]   (configure the device with PHOS_SIMGPU_*)
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <vector>

#include <cuda.h>

#include "phos/simgpu/simgpu.h"

namespace {

#define CHECK(call)                                                                           \
  do {                                                                                        \
    CUresult r_ = (call);                                                                     \
    if (r_ != CUDA_SUCCESS) {                                                                 \
      const char* name_ = nullptr;                                                            \
      cuGetErrorName(r_, &name_);                                                             \
      std::fprintf(stderr, "simgpu_tour: %s failed: %s\n", #call, name_ ? name_ : "unknown"); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) { return std::chrono::duration<double>(Clock::now() - since).count(); }

}  // namespace

int main(int argc, char** argv) {
  size_t mib = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 256;
  const char* module_path = argc > 2 ? argv[2] : PHOS_SAXPY_MODULE;
  if (mib == 0) {
    std::fprintf(stderr, "usage: %s [MiB [module.simgpu.so]]\n", argv[0]);
    return 2;
  }
  size_t n = mib * (1u << 20) / sizeof(float);
  size_t bytes = n * sizeof(float);

  CHECK(cuInit(0));
  PhosSimConfig config{};
  CHECK(phosSimGetConfig(&config));
  double scale = config.time_scale;
  CUdevice dev = 0;
  CHECK(cuDeviceGet(&dev, 0));
  char name[128];
  CHECK(cuDeviceGetName(name, sizeof(name), dev));
  std::printf("device 0: %s (profile %s, time scale %g: modelled = wall / %g)\n", name, config.profile, scale, scale);

  auto t = Clock::now();
  CUcontext ctx = nullptr;
  CHECK(cuCtxCreate(&ctx, nullptr, 0, dev));
  std::printf("  context created        %9.1f ms modelled\n", Seconds(t) / scale * 1e3);

  std::ifstream file(module_path, std::ios::binary);
  std::vector<char> image((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  if (image.empty()) {
    std::fprintf(stderr, "simgpu_tour: cannot read module %s\n", module_path);
    return 1;
  }
  t = Clock::now();
  CUmodule module = nullptr;
  CUfunction saxpy = nullptr;
  CHECK(cuModuleLoadData(&module, image.data()));
  CHECK(cuModuleGetFunction(&saxpy, module, "_Z5saxpyfPKfPfi"));
  std::printf("  module loaded          %9.1f ms modelled\n", Seconds(t) / scale * 1e3);

  float* x = nullptr;
  float* y = nullptr;
  CHECK(cuMemHostAlloc(reinterpret_cast<void**>(&x), bytes, 0));
  CHECK(cuMemHostAlloc(reinterpret_cast<void**>(&y), bytes, 0));
  for (size_t i = 0; i < n; ++i) {
    x[i] = static_cast<float>(i % 1000);
    y[i] = 1.0f;
  }
  CUdeviceptr dx = 0, dy = 0;
  CHECK(cuMemAlloc(&dx, bytes));
  CHECK(cuMemAlloc(&dy, bytes));
  // Device memory is backed on first touch; touch it once so the copies below measure the link.
  CHECK(cuMemsetD8(dx, 0, bytes));
  CHECK(cuMemsetD8(dy, 0, bytes));
  CHECK(cuCtxSynchronize());
  CHECK(phosSimResetStats(dev));

  CUstream stream = nullptr;
  CUevent e0, e1, e2, e3;
  CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  for (CUevent* e : {&e0, &e1, &e2, &e3}) CHECK(cuEventCreate(e, CU_EVENT_DEFAULT));

  float a = 2.0f;
  int count = static_cast<int>(n);
  void* params[] = {&a, &dx, &dy, &count};
  CHECK(cuEventRecord(e0, stream));
  CHECK(cuMemcpyHtoDAsync(dx, x, bytes, stream));
  CHECK(cuMemcpyHtoDAsync(dy, y, bytes, stream));
  CHECK(cuEventRecord(e1, stream));
  // One element per thread: simgpu runs a block's threads one after another, so a grid-stride
  // loop over a large array would walk it with a cache-hostile stride.
  unsigned blocks = static_cast<unsigned>((n + 255) / 256);
  CHECK(cuLaunchKernel(saxpy, blocks, 1, 1, 256, 1, 1, 0, stream, params, nullptr));
  CHECK(cuEventRecord(e2, stream));
  CHECK(cuMemcpyDtoHAsync(y, dy, bytes, stream));
  CHECK(cuEventRecord(e3, stream));
  CHECK(cuStreamSynchronize(stream));

  size_t wrong = 0;
  for (size_t i = 0; i < n; ++i) wrong += std::fabs(y[i] - (2.0f * static_cast<float>(i % 1000) + 1.0f)) > 0;
  float h2d_ms = 0, kernel_ms = 0, d2h_ms = 0;
  CHECK(cuEventElapsedTime(&h2d_ms, e0, e1));
  CHECK(cuEventElapsedTime(&kernel_ms, e1, e2));
  CHECK(cuEventElapsedTime(&d2h_ms, e2, e3));
  PhosSimStats stats{};
  CHECK(phosSimGetStats(dev, &stats));

  std::printf("  H2D %4zu MiB (pinned)   %9.1f ms modelled  %6.1f GB/s\n", 2 * mib, h2d_ms, 2 * bytes / h2d_ms / 1e6);
  std::printf("  saxpy kernel           %9.1f ms modelled  (kernels run at CPU speed)\n", kernel_ms);
  std::printf("  D2H %4zu MiB (pinned)   %9.1f ms modelled  %6.1f GB/s\n", mib, d2h_ms, bytes / d2h_ms / 1e6);
  std::printf("  result: %s (%zu of %zu elements wrong)\n", wrong == 0 ? "correct" : "WRONG", wrong, n);
  std::printf("  host-bound operations: %llu of %llu paced (more than a few means the host, not the\n"
              "  modelled device, set these timings; raise PHOS_SIMGPU_TIME_SCALE)\n",
              stats.host_bound_ops, stats.paced_ops);

  for (CUevent e : {e0, e1, e2, e3}) CHECK(cuEventDestroy(e));
  CHECK(cuStreamDestroy(stream));
  CHECK(cuMemFree(dx));
  CHECK(cuMemFree(dy));
  CHECK(cuMemFreeHost(x));
  CHECK(cuMemFreeHost(y));
  CHECK(cuModuleUnload(module));
  CHECK(cuCtxDestroy(ctx));
  return wrong == 0 ? 0 : 1;
}
