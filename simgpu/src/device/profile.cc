#include "device/profile.h"

namespace phos::sim {
namespace {

constexpr uint64_t kGiB = 1ull << 30;

// A100 80 GB on a PCIe 4.0 x16 host link: the class of PhOS's testbed (A800 80 GB).
constexpr DeviceProfile kA100Pcie4 = {
    .name = "a100-pcie4",
    .device_name = "NVIDIA A100 80GB PCIe",
    .cc_major = 8,
    .cc_minor = 0,
    .sm_count = 108,           // A100 whitepaper: 108 SMs
    .memory_bytes = 80 * kGiB, // A100/A800 80GB spec; PhOS testbed (A800 80 GB)
    // 25 GB/s: nvbandwidth issue #42 (25.13 GB/s at 512 MiB); PhOS §8.3 footnote "measured
    // bandwidth is 25 GBps".
    .h2d_pinned_bps = 25e9,
    // Assumption: symmetric to H2D on PCIe 4.0.
    .d2h_pinned_bps = 25e9,
    // Assumption: pageable copies reach ~40% of pinned (commonly reported 40-50%; ai-dynamo
    // snapshot #206 shows per-allocation pinning alone drops 87-108 to 17-30 GB/s on PCIe 5).
    .h2d_pageable_bps = 10e9,
    .d2h_pageable_bps = 10e9,
    // Assumption: HBM2e spec 1.9-2.0 TB/s; device-to-device copies reach ~75-80% of it.
    .d2d_bps = 1.5e12,
    // PhOS §2.3: creating the GPU context of a Llama2-13B inference process took 3.1 s (against
    // 1.7 s of data copy); cuml PR #1473 measured 3.8 s for a first handle "mostly because of cuda
    // context creation". This includes the driver state loading that a pool avoids.
    .context_create_s = 3.1,
    // Assumption: loading one small module (a few kernels, under 1 MiB) takes a few ms once the
    // context exists; PhOS counts PyTorch's thousands of kernels inside the 3.1 s above.
    .module_load_s = 0.005,
    // Assumption: "a few µs" of launch overhead per kernel.
    .kernel_launch_s = 4e-6,
    // cublasCreate: 2.76 ms first, 0.33 ms steady (Cytnx #1144, RTX 4070 Ti SUPER, CUDA 13); no
    // A100 figure found, so the same.
    .blas_handle_create_first_s = 2.76e-3,
    .blas_handle_create_s = 0.33e-3,
    // Assumption: 0.5 s, inside the bound an NCCL maintainer gives for a single-node
    // communicator (NCCL issue #340: initialisation on one node should take up to ~1 s).
    .nccl_comm_init_s = 0.5,
    .async_engine_count = 2,         // PhOS §5: one copy engine per direction used
    .memory_clock_khz = 1512000,     // A100 80GB PCIe: HBM2e at 1512 MHz
    .memory_bus_width_bits = 5120,   // A100 whitepaper
    .l2_cache_bytes = 40 << 20,      // A100 whitepaper: 40 MB L2
    .clock_rate_khz = 1410000,       // A100 boost clock 1410 MHz
};

// H100 80 GB on a PCIe 5.0 x16 host link.
constexpr DeviceProfile kH100Pcie5 = {
    .name = "h100-pcie5",
    .device_name = "NVIDIA H100 PCIe",
    .cc_major = 9,
    .cc_minor = 0,
    .sm_count = 114,           // H100 PCIe: 114 SMs (H100 whitepaper)
    .memory_bytes = 80 * kGiB, // spec
    // 55 GB/s: nvbandwidth's host_to_device_memcpy_ce (copy engines, which cuMemcpyHtoDAsync
    // uses) on 8x H100 PCIe Gen5 x16: 55.3-55.6 GB/s per GPU. (The 35 GB/s of nvbandwidth issue
    // #24 is its SM-copy test, host_to_device_memcpy_sm.)
    .h2d_pinned_bps = 55e9,
    // 52.77 GB/s: nvbandwidth issue #24, device-to-host (SM copies).
    .d2h_pinned_bps = 52.77e9,
    // Assumption: ~40% of pinned, as for a100-pcie4.
    .h2d_pageable_bps = 22e9,
    .d2h_pageable_bps = 21e9,
    // Assumption: the PCIe card's HBM2e is specified at 2.0 TB/s (3.35 TB/s is the SXM part);
    // copies reach ~80% of it.
    .d2d_bps = 1.6e12,
    // No better source than a100-pcie4's: same costs (no H100 measurements of these were found).
    .context_create_s = 3.1,
    .module_load_s = 0.005,
    .kernel_launch_s = 4e-6,
    .blas_handle_create_first_s = 2.76e-3,
    .blas_handle_create_s = 0.33e-3,
    .nccl_comm_init_s = 0.5,
    .async_engine_count = 2,
    .memory_clock_khz = 1593000,     // H100 PCIe HBM2e at 1593 MHz
    .memory_bus_width_bits = 5120,   // H100 whitepaper
    .l2_cache_bytes = 50 << 20,      // H100 whitepaper: 50 MB L2
    .clock_rate_khz = 1755000,       // H100 PCIe boost clock 1755 MHz
};

// For tests only: a100-pcie4 (link, memory, attributes) with creation costs cut to a few ms, so
// that each test process starts fast at a time scale where copies are bound by the modelled link.
// Derived rather than restated, so the two cannot drift apart.
constexpr DeviceProfile MakeCiProfile() {
  DeviceProfile p = kA100Pcie4;
  p.name = "ci";
  p.device_name = "phos simgpu CI device (a100-pcie4 link)";
  p.context_create_s = 0.002;
  p.module_load_s = 0.0005;
  // cuBLAS handle creation is already a few ms: kept, so that tests see the modelled cost.
  p.nccl_comm_init_s = 0.005;  // cut like context creation, still long enough to be seen paid
  return p;
}
constexpr DeviceProfile kCi = MakeCiProfile();

}  // namespace

const std::vector<const DeviceProfile*>& AllProfiles() {
  static const std::vector<const DeviceProfile*> all = {&kA100Pcie4, &kH100Pcie5, &kCi};
  return all;
}

const DeviceProfile* FindProfile(std::string_view name) {
  for (const DeviceProfile* p : AllProfiles()) {
    if (p->name == name) return p;
  }
  return nullptr;
}

}  // namespace phos::sim
