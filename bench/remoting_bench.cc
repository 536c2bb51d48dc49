// Remoting overhead: what a function pays for running its CUDA calls in phosd (docs/design.md D1), against
// calling simgpu directly in-process, measured in one run.
//
//   async launch  µs per cudaLaunchKernel of an empty kernel, amortised over N launches and one
//                 synchronisation (remoted: ring record, no reply; direct: cuLaunchKernel)
//   sync call     p50/p99 µs of cudaStreamQuery on an idle stream (remoted: a full round trip
//                 through the ring and the server's executor; direct: cuStreamQuery)
//   device        µs of the first cudaGetDeviceProperties (one record from phosd), p50 µs of later
//                 ones and of cudaDeviceGetAttribute (answered from the frontend's copy); direct:
//                 every cuDeviceGetAttribute plus name, UUID and memory, and one cuDeviceGetAttribute
//
// The parent process runs the API server; the remoted client is this executable re-run as a
// child (--client) with PHOS_GPU_SOCKET / PHOS_INSTANCE_TOKEN, linked to libphos-cudart.
// simgpu runs the ci profile at time scale 0.01 unless PHOS_SIMGPU_* say otherwise, so that the
// modelled launch cost (4 µs x scale) does not hide the call path.
//
// Usage: remoting_bench [--launches N] [--report PATH] [--no-report]
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <fmt/core.h>

#include "phos/base/subprocess.h"
#include "phos/frontend/sim_module.h"
#include "phos/runtime/api_server.h"
#include "phos/driver/driver_table.h"
#include "remoting_bench_kernels.cuh"
#include "report.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kSyncCalls = 20000;

struct Numbers {
  double submit_us = 0;  // per launch, until the last launch call returned (before the sync)
  double launch_us = 0;
  double sync_p50_us = 0;
  double sync_p99_us = 0;
  double properties_first_us = 0;  // remoted only: the call that fetches the device's record
  double properties_p50_us = 0;
  double attribute_p50_us = 0;
};

double Micros(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

void Percentiles(std::vector<double>& v, Numbers* n) {
  std::sort(v.begin(), v.end());
  n->sync_p50_us = v[v.size() / 2];
  n->sync_p99_us = v[v.size() * 99 / 100];
}

// The median µs of `calls` runs of `call`.
template <typename F>
double MedianMicros(int calls, F call) {
  std::vector<double> lat(calls);
  for (int i = 0; i < calls; ++i) {
    auto s = Clock::now();
    call(i);
    lat[i] = Micros(Clock::now() - s);
  }
  std::sort(lat.begin(), lat.end());
  return lat[lat.size() / 2];
}

// An attribute for call i: every one of the enumeration in turn.
CUdevice_attribute AttributeOf(int i) { return static_cast<CUdevice_attribute>(1 + i % (CU_DEVICE_ATTRIBUTE_MAX - 1)); }

std::vector<char> ReadModule() {
  std::ifstream file(PHOS_BENCH_MODULE, std::ios::binary);
  return std::vector<char>((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
}

// The child: remoted calls through libphos-cudart.
int Client(long launches) {
  static std::vector<char> image = ReadModule();
  __phosRegisterSimModule(image.data(), image.size());
  const void* kernel = reinterpret_cast<const void*>(&bench_empty_kernel);
  // Warm-up: connection, module upload, kernel lookup.
  for (int i = 0; i < 1000; ++i) cudaLaunchKernel(kernel, dim3(1), dim3(1), nullptr, 0, nullptr);
  if (cudaDeviceSynchronize() != cudaSuccess) return 1;
  Numbers n;
  auto t = Clock::now();
  for (long i = 0; i < launches; ++i) {
    if (cudaLaunchKernel(kernel, dim3(1), dim3(1), nullptr, 0, nullptr) != cudaSuccess) return 1;
  }
  n.submit_us = Micros(Clock::now() - t) / static_cast<double>(launches);
  if (cudaDeviceSynchronize() != cudaSuccess) return 1;
  n.launch_us = Micros(Clock::now() - t) / static_cast<double>(launches);
  std::vector<double> lat(kSyncCalls);
  for (int i = 0; i < kSyncCalls; ++i) {
    auto s = Clock::now();
    if (cudaStreamQuery(nullptr) != cudaSuccess) return 1;
    lat[i] = Micros(Clock::now() - s);
  }
  Percentiles(lat, &n);
  cudaDeviceProp prop;
  auto t0 = Clock::now();
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return 1;
  n.properties_first_us = Micros(Clock::now() - t0);
  n.properties_p50_us = MedianMicros(kSyncCalls, [&](int) { cudaGetDeviceProperties(&prop, 0); });
  int value = 0;
  n.attribute_p50_us = MedianMicros(
      kSyncCalls, [&](int i) { cudaDeviceGetAttribute(&value, static_cast<cudaDeviceAttr>(AttributeOf(i)), 0); });
  std::printf("%.6f %.6f %.6f %.6f %.6f %.6f %.6f\n", n.submit_us, n.launch_us, n.sync_p50_us, n.sync_p99_us,
              n.properties_first_us, n.properties_p50_us, n.attribute_p50_us);
  return 0;
}

// The baseline: the same calls on simgpu through the driver table, in this process.
bool Direct(phos::driver::DriverTable& d, long launches, Numbers* n) {
  CUdevice dev;
  CUcontext ctx;
  CUmodule module;
  CUfunction f;
  std::vector<char> image = ReadModule();
  if (d.cuDeviceGet(&dev, 0) != CUDA_SUCCESS || d.cuCtxCreate(&ctx, nullptr, 0, dev) != CUDA_SUCCESS ||
      d.cuModuleLoadData(&module, image.data()) != CUDA_SUCCESS ||
      d.cuModuleGetFunction(&f, module, "_Z18bench_empty_kernelv") != CUDA_SUCCESS) {
    return false;
  }
  for (int i = 0; i < 1000; ++i) d.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr);
  d.cuCtxSynchronize();
  auto t = Clock::now();
  for (long i = 0; i < launches; ++i) d.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr);
  n->submit_us = Micros(Clock::now() - t) / static_cast<double>(launches);
  if (d.cuCtxSynchronize() != CUDA_SUCCESS) return false;
  n->launch_us = Micros(Clock::now() - t) / static_cast<double>(launches);
  std::vector<double> lat(kSyncCalls);
  for (int i = 0; i < kSyncCalls; ++i) {
    auto s = Clock::now();
    d.cuStreamQuery(nullptr);
    lat[i] = Micros(Clock::now() - s);
  }
  Percentiles(lat, n);
  // What cudaGetDeviceProperties asks of a driver: every attribute, the name, UUID and memory.
  n->properties_p50_us = MedianMicros(kSyncCalls / 10, [&](int) {
    int value = 0;
    for (int a = 1; a < CU_DEVICE_ATTRIBUTE_MAX; ++a) d.cuDeviceGetAttribute(&value, static_cast<CUdevice_attribute>(a), dev);
    char name[256];
    CUuuid uuid;
    size_t bytes = 0;
    d.cuDeviceGetName(name, sizeof(name), dev);
    d.cuDeviceGetUuid(&uuid, dev);
    d.cuDeviceTotalMem(&bytes, dev);
  });
  n->attribute_p50_us = MedianMicros(kSyncCalls, [&](int i) {
    int value = 0;
    d.cuDeviceGetAttribute(&value, AttributeOf(i), dev);
  });
  d.cuModuleUnload(module);
  d.cuCtxDestroy(ctx);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  setenv("PHOS_SIMGPU_PROFILE", "ci", 0);
  setenv("PHOS_SIMGPU_TIME_SCALE", "0.01", 0);
  long launches = 100000;
  std::string report = PHOS_SOURCE_DIR "/docs/benchmarks.md";
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--client") == 0 && i + 1 < argc) return Client(std::atol(argv[i + 1]));
    if (std::strcmp(argv[i], "--launches") == 0 && i + 1 < argc) {
      launches = std::atol(argv[++i]);
    } else if (std::strcmp(argv[i], "--report") == 0 && i + 1 < argc) {
      report = argv[++i];
    } else if (std::strcmp(argv[i], "--no-report") == 0) {
      report.clear();
    } else {
      std::fprintf(stderr, "usage: %s [--launches N] [--report PATH] [--no-report]\n", argv[0]);
      return 2;
    }
  }
  if (launches <= 0) {
    std::fprintf(stderr, "--launches must be positive\n");
    return 2;
  }
  auto table = phos::driver::DriverTable::Open({.gpu = phos::driver::GpuKind::kSim});
  if (!table.ok()) {
    std::fprintf(stderr, "%s\n", table.status().ToString().c_str());
    return 1;
  }
  std::string sock = "/tmp/phos-remoting-bench-" + std::to_string(getpid()) + ".sock";
  auto server = phos::runtime::ApiServer::Start({.socket_path = sock}, *table);
  if (!server.ok()) {
    std::fprintf(stderr, "%s\n", server.status().ToString().c_str());
    return 1;
  }
  std::string token = (*server)->IssueToken();
  phos::SpawnOptions client;
  client.argv = {std::filesystem::read_symlink("/proc/self/exe").string(), "--client", std::to_string(launches)};
  client.env = {{"PHOS_GPU_SOCKET", sock}, {"PHOS_INSTANCE_TOKEN", token}};
  Numbers remote;
  auto out = phos::RunCommand(std::move(client), std::chrono::minutes(10));
  if (!out.ok() || !out->status.success() ||
      std::sscanf(out->output.c_str(), "%lf %lf %lf %lf %lf %lf %lf", &remote.submit_us, &remote.launch_us,
                  &remote.sync_p50_us, &remote.sync_p99_us, &remote.properties_first_us, &remote.properties_p50_us,
                  &remote.attribute_p50_us) != 7) {
    std::fprintf(stderr, "remoted client failed: %s\n",
                 out.ok() ? (out->status.ToString() + ": " + out->output).c_str() : out.status().ToString().c_str());
    return 1;
  }
  (*server)->EndSession(token);
  Numbers direct;
  if (!Direct(**table, launches, &direct)) {
    std::fprintf(stderr, "direct simgpu run failed\n");
    return 1;
  }
  const double kLaunchTarget = 2.0, kSyncTarget = 15.0;
  std::string rows = fmt::format(
      "| async launch, µs per call until the last launch returned (caller's cost) | {:.3f} | {:.3f} | {:.2f} | | |\n"
      "| async launch, µs per call (amortised over {} + 1 sync) | {:.3f} | {:.3f} | {:.2f} | ≤ {:.0f} | {} |\n"
      "| sync round trip (cudaStreamQuery), p50 µs | {:.2f} | {:.2f} | {:.1f} | ≤ {:.0f} | {} |\n"
      "| sync round trip (cudaStreamQuery), p99 µs | {:.2f} | {:.2f} | {:.1f} | | |\n"
      "| cudaGetDeviceProperties, first call (one record from phosd), µs | {:.2f} | | | | |\n"
      "| cudaGetDeviceProperties, later calls (the frontend's copy), p50 µs | {:.3f} | {:.3f} | {:.2f} | | |\n"
      "| cudaDeviceGetAttribute (the frontend's copy), p50 µs | {:.3f} | {:.3f} | {:.2f} | | |\n",
      remote.submit_us, direct.submit_us, remote.submit_us / direct.submit_us, launches, remote.launch_us, direct.launch_us, remote.launch_us / direct.launch_us, kLaunchTarget,
      remote.launch_us <= kLaunchTarget ? "met" : "**missed**", remote.sync_p50_us, direct.sync_p50_us,
      remote.sync_p50_us / direct.sync_p50_us, kSyncTarget, remote.sync_p50_us <= kSyncTarget ? "met" : "**missed**",
      remote.sync_p99_us, direct.sync_p99_us, remote.sync_p99_us / direct.sync_p99_us, remote.properties_first_us,
      remote.properties_p50_us, direct.properties_p50_us, remote.properties_p50_us / direct.properties_p50_us,
      remote.attribute_p50_us, direct.attribute_p50_us, remote.attribute_p50_us / direct.attribute_p50_us);
  std::printf("| measure | remoted | direct simgpu | ratio | target | |\n|---|---|---|---|---|---|\n%s", rows.c_str());
  if (!report.empty()) {
    std::string md = fmt::format(
        "## Remoting: call overhead of a function's CUDA calls executed in phosd\n\n"
        "Command: `{}` (profile {}, time scale {}; {})\n\n"
        "Remoted: a client process on libphos-cudart, the API server in the benchmark process, one "
        "shared-memory ring. Direct: the same calls on simgpu through the driver table in-process. "
        "Empty kernel, 1x1 grid; the ci profile's 4 µs modelled launch is scaled by the time scale. "
        "Device queries: direct is what a driver is asked for them (every attribute, the name, UUID and "
        "memory for cudaGetDeviceProperties; one attribute), remoted the frontend after its one record.\n\n"
        "| measure | remoted | direct simgpu | ratio | target | |\n|---|---|---|---|---|---|\n{}\n",
        phos::bench::CommandLine(argc, argv), std::getenv("PHOS_SIMGPU_PROFILE"), std::getenv("PHOS_SIMGPU_TIME_SCALE"),
        phos::bench::NowUtc(), rows);
    if (phos::bench::WriteSection(report, "remoting", md)) std::printf("results written to %s\n", report.c_str());
  }
  return 0;
}
