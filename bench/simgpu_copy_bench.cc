// Copy-engine throughput on simgpu: does a pinned host-to-device copy run at the profile's
// modelled bandwidth at the default time scale, or does this host's memcpy hold it back?
//
// For each size, a stream of back-to-back asynchronous copies (as nvbandwidth measures) is timed
// by wall clock; modelled bandwidth = bytes / (wall / time scale). Results are printed as ratios
// to the profile's figure and written to docs/benchmarks.md.
//
// Usage: simgpu_copy_bench [--report PATH] [--no-report]
//   Device and scale come from PHOS_SIMGPU_PROFILE / PHOS_SIMGPU_TIME_SCALE (defaults:
//   a100-pcie4, the default scale).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <cuda.h>
#include <fmt/core.h>

#include "phos/simgpu/simgpu.h"
#include "report.h"

namespace {

#define CHECK(call)                                                             \
  do {                                                                          \
    CUresult r_ = (call);                                                       \
    if (r_ != CUDA_SUCCESS) {                                                   \
      const char* n_ = nullptr;                                                 \
      cuGetErrorName(r_, &n_);                                                  \
      std::fprintf(stderr, "%s failed: %s\n", #call, n_ ? n_ : "unknown");      \
      std::exit(2);                                                             \
    }                                                                           \
  } while (0)

using Clock = std::chrono::steady_clock;

struct Row {
  std::string what;
  size_t size = 0;
  double modelled_gbps = 0;  // median over repetitions
  double min_gbps = 0;
  double profile_gbps = 0;
  unsigned long long host_bound = 0;
  unsigned long long paced = 0;
};

// Median and minimum modelled GB/s of `reps` runs of `count` back-to-back copies of `size`.
Row Measure(const char* what, CUstream stream, CUdeviceptr dev, void* host, size_t size, bool to_device,
            double scale, double profile_bps) {
  const size_t kBytesPerRun = 512ull << 20;
  size_t count = std::max<size_t>(1, kBytesPerRun / size);
  const int kReps = 5;
  std::vector<double> gbps;
  CHECK(phosSimResetStats(0));
  for (int rep = 0; rep < kReps; ++rep) {
    auto t = Clock::now();
    for (size_t i = 0; i < count; ++i) {
      if (to_device) {
        CHECK(cuMemcpyHtoDAsync(dev, host, size, stream));
      } else {
        CHECK(cuMemcpyDtoHAsync(host, dev, size, stream));
      }
    }
    CHECK(cuStreamSynchronize(stream));
    double wall = std::chrono::duration<double>(Clock::now() - t).count();
    gbps.push_back(static_cast<double>(size * count) / (wall / scale) / 1e9);
  }
  PhosSimStats stats{};
  CHECK(phosSimGetStats(0, &stats));
  std::sort(gbps.begin(), gbps.end());
  return Row{what, size, gbps[gbps.size() / 2], gbps.front(), profile_bps / 1e9, stats.host_bound_ops,
             stats.paced_ops};
}

}  // namespace

int main(int argc, char** argv) {
  std::string report = PHOS_SOURCE_DIR "/docs/benchmarks.md";
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--report") == 0 && i + 1 < argc) {
      report = argv[++i];
    } else if (std::strcmp(argv[i], "--no-report") == 0) {
      report.clear();
    } else {
      std::fprintf(stderr, "usage: %s [--report PATH] [--no-report]\n", argv[0]);
      return 2;
    }
  }

  CHECK(cuInit(0));
  PhosSimConfig config{};
  CHECK(phosSimGetConfig(&config));
  std::string profile = config.profile;
  double scale = config.time_scale;
  PhosSimProfileInfo modelled{};
  CHECK(phosSimGetProfile(0, &modelled));

  std::printf("simgpu copy bench: profile %s, time scale %g (context creation is paid once first)\n",
              profile.c_str(), scale);
  CUcontext ctx = nullptr;
  CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
  CHECK(cuCtxSetCurrent(ctx));

  const size_t kMax = 256ull << 20;
  void* pinned = nullptr;
  CHECK(cuMemHostAlloc(&pinned, kMax, 0));
  std::memset(pinned, 0x5a, kMax);
  CUdeviceptr dev = 0;
  CHECK(cuMemAlloc(&dev, kMax));
  // Device memory is backed on first touch; touch it so the copies measure the modelled link.
  CHECK(cuMemsetD8(dev, 0, kMax));
  CUstream stream = nullptr;
  CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CHECK(cuStreamSynchronize(stream));
  CHECK(cuCtxSynchronize());

  std::vector<Row> rows;
  for (size_t size : {1ull << 20, 4ull << 20, 16ull << 20, 64ull << 20, 256ull << 20}) {
    rows.push_back(Measure("H2D pinned", stream, dev, pinned, size, true, scale, modelled.h2d_pinned_bps));
  }
  rows.push_back(Measure("D2H pinned", stream, dev, pinned, 64ull << 20, false, scale, modelled.d2h_pinned_bps));
  // Pageable memory for contrast: staged by the driver, at the profile's pageable rate.
  std::vector<char> pageable(64ull << 20, 0x5a);
  rows.push_back(
      Measure("H2D pageable", stream, dev, pageable.data(), pageable.size(), true, scale, modelled.h2d_pageable_bps));

  std::string table =
      "| copy | size | modelled GB/s (median) | min | profile GB/s | ratio | host-bound ops |\n"
      "|---|---|---|---|---|---|---|\n";
  bool pass = true;
  std::printf("%-12s %9s %12s %9s %9s %7s %12s\n", "copy", "size", "median GB/s", "min", "profile", "ratio",
              "host-bound");
  for (const Row& r : rows) {
    double ratio = r.modelled_gbps / r.profile_gbps;
    // The target: pinned copies within 5% of the modelled bandwidth from 4 MiB up (the sizes at
    // which a real PCIe link reaches line rate; GPU Snapshot, Portus).
    bool pinned_row = r.what.find("pinned") != std::string::npos;
    if (pinned_row && r.size >= (4u << 20) && std::abs(ratio - 1.0) > 0.05) pass = false;
    std::printf("%-12s %6zu MiB %12.2f %9.2f %9.2f %7.3f %6llu / %llu\n", r.what.c_str(), r.size >> 20,
                r.modelled_gbps, r.min_gbps, r.profile_gbps, ratio, r.host_bound, r.paced);
    table += fmt::format("| {} | {} MiB | {:.2f} | {:.2f} | {:.2f} | {:.3f} | {} of {} |\n", r.what, r.size >> 20,
                         r.modelled_gbps, r.min_gbps, r.profile_gbps, ratio, r.host_bound, r.paced);
  }
  std::printf("target (pinned copies >= 4 MiB within 5%% of the profile): %s\n", pass ? "met" : "MISSED");

  if (!report.empty()) {
    std::string md = fmt::format(
        "## simgpu copy engines: pinned copy throughput\n\n"
        "Command: `{}` (profile {}, time scale {}; {})\n\n"
        "A stream of back-to-back asynchronous copies per row, 512 MiB per repetition, 5 "
        "repetitions; modelled GB/s = bytes / (wall time / time scale). Host-bound ops are copies "
        "whose real memcpy took longer than the modelled duration.\n\n{}\n"
        "Target: pinned copies of 4 MiB and more within 5% of the modelled bandwidth at the default "
        "time scale — **{}**.\n\n",
        phos::bench::CommandLine(argc, argv), profile, scale, phos::bench::NowUtc(), table,
        pass ? "met" : "missed");
    if (phos::bench::WriteSection(report, "simgpu_copy", md)) std::printf("results written to %s\n", report.c_str());
  }

  CHECK(cuStreamDestroy(stream));
  CHECK(cuMemFree(dev));
  CHECK(cuMemFreeHost(pinned));
  CHECK(cuDevicePrimaryCtxRelease(0));
  return pass ? 0 : 1;
}
