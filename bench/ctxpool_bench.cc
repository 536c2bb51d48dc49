// Context pool benchmark (docs/design.md D11, issue 5): lease latency from a warm pool against creating a
// context plus a cuBLAS handle from scratch, on the same simgpu device profile, in one run.
// Writes the "ctxpool" section of docs/benchmarks.md.
//
//   ctxpool_bench [--leases N] [--scratch N]
// The profile and time scale are simgpu's defaults (a100-pcie4, x10) unless PHOS_SIMGPU_PROFILE /
// PHOS_SIMGPU_TIME_SCALE say otherwise. Creation costs 3.1 s modelled there, 31 s of wall time,
// so only a few from-scratch samples are taken (default 3).
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "phos/ctxpool/context_pool.h"
#include "phos/driver/driver_table.h"
#include "report.h"

namespace {

using Clock = std::chrono::steady_clock;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

const char* EnvOr(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

}  // namespace

int main(int argc, char** argv) {
  int leases = 2000, scratch = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--leases") == 0) {
      leases = std::atoi(argv[i + 1]);
    } else if (std::strcmp(argv[i], "--scratch") == 0) {
      scratch = std::atoi(argv[i + 1]);
    } else {
      std::fprintf(stderr, "usage: %s [--leases N] [--scratch N]\n", argv[0]);
      return 2;
    }
  }
  if (leases < 1 || scratch < 1) {
    std::fprintf(stderr, "ctxpool_bench: --leases and --scratch must be positive\n");
    return 2;
  }
  auto driver = phos::driver::DriverTable::Open({.gpu = phos::driver::GpuKind::kSim});
  if (!driver.ok()) {
    std::fprintf(stderr, "ctxpool_bench: %s\n", driver.status().ToString().c_str());
    return 1;
  }
  phos::driver::DriverTable& d = **driver;
  if (d.cuInit(0) != CUDA_SUCCESS) {
    std::fprintf(stderr, "ctxpool_bench: cuInit failed\n");
    return 1;
  }

  // From scratch: what a session paid before the pool, cuCtxCreate + cublasCreate.
  std::vector<double> scratch_s;
  for (int i = 0; i < scratch; ++i) {
    CUdevice dev = 0;
    CUcontext ctx = nullptr;
    cublasHandle_t h = nullptr;
    Clock::time_point t0 = Clock::now();
    if (d.cuDeviceGet(&dev, 0) != CUDA_SUCCESS || d.cuCtxCreate(&ctx, nullptr, 0, dev) != CUDA_SUCCESS ||
        d.cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) {
      std::fprintf(stderr, "ctxpool_bench: creating a context from scratch failed\n");
      return 1;
    }
    scratch_s.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    d.cublasDestroy(h);
    d.cuCtxPopCurrent(nullptr);
    d.cuCtxDestroy(ctx);
    std::printf("from scratch %d/%d: %.3f s\n", i + 1, scratch, scratch_s.back());
  }

  // The pool: one context made ahead; each lease is returned and scrubbed before the next, so
  // every lease is a hit, as on a daemon whose pool keeps up with its sessions.
  auto pool = phos::ctxpool::ContextPool::Open({.min_ready = 1, .max_contexts = 1}, *driver);
  if (!pool.ok()) {
    std::fprintf(stderr, "ctxpool_bench: %s\n", pool.status().ToString().c_str());
    return 1;
  }
  if (!(*pool)->WaitIdle(std::chrono::minutes(10))) {
    std::fprintf(stderr, "ctxpool_bench: the pool did not fill\n");
    return 1;
  }
  std::vector<double> return_us, call_us;
  for (int i = 0; i < leases; ++i) {
    Clock::time_point call = Clock::now();
    auto lease = (*pool)->Lease();
    call_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - call).count());
    if (!lease.ok()) {
      std::fprintf(stderr, "ctxpool_bench: %s\n", lease.status().ToString().c_str());
      return 1;
    }
    Clock::time_point t0 = Clock::now();
    lease->Return();
    return_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    (*pool)->WaitIdle(std::chrono::minutes(1));
  }
  phos::ctxpool::PoolStats m = (*pool)->Stats();
  double scratch_median = Median(scratch_s);
  std::sort(call_us.begin(), call_us.end());
  double call_p50 = call_us[call_us.size() / 2], call_p99 = call_us[call_us.size() * 99 / 100];
  std::printf(
      "lease p50 %.2f us, p99 %.2f us around the call (lease object included); %llu leases, %llu hits; "
      "return p50 %.2f us\n",
      call_p50, call_p99, static_cast<unsigned long long>(m.leases), static_cast<unsigned long long>(m.hits),
      Median(return_us));
  // The ratio and the target use the latency around the call (the lease object included).
  double ratio = scratch_median / (call_p50 * 1e-6);
  bool met = call_p50 <= 50.0;
  std::printf("context + cuBLAS handle from scratch: median %.3f s over %d\n", scratch_median, scratch);
  std::printf("from scratch / lease p50 = %.0fx; target lease p50 <= 50 us: %s\n", ratio,
              met ? "met" : "MISSED");

  std::string md = fmt::format(
      "## Context pool (`ctxpool`)\n\n"
      "{} — `{}` — profile `{}`, time scale {} (simgpu; wall time below).\n\n"
      "| what | p50 | p99 | samples |\n|---|---|---|---|\n"
      "| `ContextPool::Lease()` hit, around the call | {:.2f} µs | {:.2f} µs | {} |\n"
      "| lease return (hand-off to the scrub thread) | {:.2f} µs | — | {} |\n"
      "| `cuCtxCreate` + `cublasCreate` from scratch | {:.3f} s | — | {} |\n\n"
      "Ratio from scratch / lease p50 (around the call): **{:.0f}x**. Target lease p50 ≤ 50 µs: **{}**.\n\n"
      "Each lease is returned and scrubbed before the next (every lease a hit). Creation costs the "
      "profile's 3.1 s modelled context creation (PhOS §2.3) plus the first cuBLAS handle, times the "
      "time scale, so only {} from-scratch samples are taken; the lease path makes no driver call.\n",
      phos::bench::NowUtc(), phos::bench::CommandLine(argc, argv), EnvOr("PHOS_SIMGPU_PROFILE", "a100-pcie4"),
      EnvOr("PHOS_SIMGPU_TIME_SCALE", "10"), call_p50, call_p99,
      leases, Median(return_us), leases, scratch_median, scratch, ratio, met ? "met" : "missed", scratch);
  phos::bench::WriteSection(std::string(PHOS_SOURCE_DIR) + "/docs/benchmarks.md", "ctxpool", md);
  return met ? 0 : 1;
}
