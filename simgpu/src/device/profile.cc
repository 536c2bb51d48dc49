#include "device/profile.h"

#include <cuda.h>

namespace phos::sim {
namespace {

constexpr uint64_t kGiB = 1ull << 30;

// Texture and surface limits of compute capability 8.0 and 9.0 (the same for both): CUDA C++
// Programming Guide, "Technical Specifications per Compute Capability" (1D, 2D, 3D, layered,
// gather, cubemap and linear-memory extents). The mipmapped and alternate 3D extents, the 2D linear
// pitch and the alignments are not in NVIDIA's documents: they are what NVIDIA's driver reports for
// these devices (cudaDeviceProp, deviceQuery; texture alignment 512 bytes in deviceQuery of A100).
constexpr TextureLimits kTextureLimitsSm80Sm90 = {
    .texture1d_width = 131072,
    .texture1d_linear_width = 1 << 28,
    .texture1d_mipmapped_width = 32768,
    .texture1d_layered = {32768, 2048},
    .texture2d = {131072, 65536},
    .texture2d_linear = {131072, 65000, 2097120},
    .texture2d_mipmapped = {32768, 32768},
    .texture2d_gather = {32768, 32768},
    .texture2d_layered = {32768, 32768, 2048},
    .texture3d = {16384, 16384, 16384},
    .texture3d_alternate = {8192, 8192, 32768},
    .texture_cubemap_width = 32768,
    .texture_cubemap_layered = {32768, 2046},
    .surface1d_width = 32768,
    .surface1d_layered = {32768, 2048},
    .surface2d = {131072, 65536},
    .surface2d_layered = {32768, 32768, 2048},
    .surface3d = {16384, 16384, 16384},
    .surface_cubemap_width = 32768,
    .surface_cubemap_layered = {32768, 2046},
    .texture_alignment = 512,
    .texture_pitch_alignment = 32,
    .surface_alignment = 512,
};

// What the simulated device does, the same for every profile. Where the card's answer differs,
// the comment gives it: a program that asks before it uses a capability must be told what simgpu
// (and so phosd) will actually do.
constexpr DeviceCapabilities kSimgpuCapabilities = {
    .gpu_overlap = 1,         // copy engines run beside the compute pool
    .concurrent_kernels = 1,  // kernels of different streams share the compute pool
    .kernel_exec_timeout = 0,  // no watchdog, as on a data-center card without a display
    // Card: 1 (instruction-level preemption since Pascal). The compute pool runs a launch's block
    // ranges to completion: another context's kernel waits for a worker.
    .compute_preemption = 0,
    .cooperative_launch = 0,               // card: 1; no cuLaunchCooperativeKernel
    .cooperative_multi_device_launch = 0,  // card: 1 (deprecated API); not implemented
    .cluster_launch = 0,                   // H100: 1; no thread block clusters (A100: 0)
    .stream_priorities = 1,                // the compute pool serves higher priorities first
    .tensor_map_access = 0,                // H100: 1; no cuTensorMapEncode* (A100: 0)
    .unified_function_pointers = 0,        // as the cards on an x86 host
    .mem_sync_domain_count = 1,            // H100: 4; launches cannot choose a domain (A100: 1)
    .unified_addressing = 1,               // one address space at a fixed base
    .integrated = 0,
    .can_map_host_memory = 0,              // card: 1; no mapped pinned memory (simgpu/README.md)
    .host_register = 1,                    // cuMemHostRegister
    .read_only_host_register = 0,          // card: 1; CU_MEMHOSTREGISTER_READ_ONLY not honoured
    .can_use_host_pointer_for_registered_mem = 0,  // card: 1; registered memory is not mapped
    .managed_memory = 0,                   // card: 1; no cuMemAllocManaged
    .concurrent_managed_access = 0,        // card: 1 on Linux; no managed memory
    .direct_managed_mem_access_from_host = 0,  // as the cards on an x86 host
    .pageable_memory_access = 0,           // as the cards on an x86 host without HMM
    .pageable_memory_access_uses_host_page_tables = 0,
    .host_native_atomic = 0,               // as the cards on PCIe
    .only_partial_host_native_atomic = 0,
    .virtual_memory_management = 1,        // cuMemAddressReserve, cuMemCreate, cuMemMap
    .memory_pools = 0,                     // card: 1; no cuMemAllocAsync or cuMemPool*
    .mempool_supported_handle_types = 0,   // card: POSIX file descriptors; no pools
    .generic_compression = 0,              // card: 1; no compressible allocations
    .sparse_cuda_array = 0,                // card: 1; no CUDA arrays
    .deferred_mapping_cuda_array = 0,      // card: 1; no CUDA arrays
    .can_tex2d_gather = 0,                 // card: 1; no textures
    .mem_decompress_algorithm_mask = 0,    // as the cards (a Blackwell engine)
    .mem_decompress_maximum_length = 0,
    .host_numa_virtual_memory_management = 0,  // cuMemCreate takes device locations only
    .host_numa_memory_pools = 0,
    .host_numa_multinode_ipc = 0,
    .host_memory_pools = 0,
    .host_virtual_memory_management = 0,
    .handle_type_posix_file_descriptor = 0,  // card: 1; no cuMemExportToShareableHandle
    .handle_type_win32 = 0,
    .handle_type_win32_kmt = 0,
    .handle_type_fabric = 0,               // as the PCIe cards
    .ipc_event = 0,                        // card: 1; no cuIpc*
    .dma_buf = 0,                          // card: 1 with the open kernel modules; no dma-buf export
    .host_alloc_dma_buf = 0,
    .timeline_semaphore_interop = 0,       // card: 1; no external semaphores
    .multicast = 0,                        // as the PCIe cards (no NVSwitch)
    .d3d12_cig = 0,
    .vulkan_cig = 0,
    .gpu_direct_rdma = 0,                  // card: 1; nothing for a NIC to map
    .gpu_direct_rdma_with_cuda_vmm = 0,
    .gpu_direct_rdma_flush_writes_options = 0,
    .gpu_direct_rdma_writes_ordering = 0,
    .can_flush_remote_writes = 0,          // card: 1; no CU_STREAM_WAIT_VALUE_FLUSH
    // cuStreamWaitValue32/64 and cuStreamWriteValue32/64 (their _v2 names); not cuStreamBatchMemOp
    // nor the v1 forms (card: 1 for the v1 attributes).
    .stream_mem_ops_v1 = 0,
    .stream_mem_ops_64_bit_v1 = 0,
    .stream_wait_value_nor_v1 = 0,
    .stream_mem_ops_64_bit = 1,
    .stream_wait_value_nor = 1,
    .tcc_driver = 0,                       // a Windows driver model
    .compute_mode = CU_COMPUTEMODE_DEFAULT,
    .mps_enabled = 0,
    .numa_config = CU_DEVICE_NUMA_CONFIG_NONE,
    .numa_id = -1,
    .host_numa_id = -1,                    // simulated devices hang off no NUMA node
};

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
    // Compute capability 8.0 limits: CUDA C++ Programming Guide, "Technical Specifications per
    // Compute Capability"; deviceQuery of A100 prints the same.
    .max_threads_per_block = 1024,
    .max_block_dim = {1024, 1024, 64},
    .max_grid_dim = {2147483647, 65535, 65535},
    .warp_size = 32,
    .max_threads_per_sm = 2048,
    .max_blocks_per_sm = 32,
    .max_registers_per_block = 64 << 10,
    .max_registers_per_sm = 64 << 10,
    .shared_memory_per_block = 48 << 10,
    .shared_memory_per_block_optin = 163 << 10,  // programming guide: 163 KB for 8.0
    .shared_memory_per_sm = 164 << 10,           // 164 KB; A100 whitepaper: up to 164 KB shared
    // Programming guide, 8.x shared memory: 1 KB of each block's shared memory is reserved.
    .reserved_shared_memory_per_block = 1 << 10,
    .total_constant_memory = 64 << 10,
    .max_pitch = 2147483647,                     // deviceQuery of A100: maximum memory pitch
    .clock_rate_khz = 1410000,                   // A100 80GB PCIe product brief: boost 1410 MHz
    .memory_clock_khz = 1512000,                 // A100 80GB PCIe: HBM2e at 1512 MHz
    .memory_bus_width_bits = 5120,               // A100 whitepaper
    .l2_cache_bytes = 40 << 20,                  // A100 whitepaper: 40 MB L2
    // NVIDIA developer forum (thread 275542, an A100's cudaDeviceProp): persistingL2CacheMaxSize
    // 31457280 (30 MiB, 3/4 of L2) and accessPolicyMaxWindowSize 134213632.
    .max_persisting_l2_bytes = 30 << 20,
    .max_access_policy_window_bytes = 134213632,
    .single_to_double_perf_ratio = 2,            // A100 datasheet: FP32 19.5 TFLOPS, FP64 9.7
    .ecc_enabled = 1,                            // deviceQuery of A100: ECC enabled
    .global_l1_cache = 1,                        // programming guide: 8.x caches globals in L1
    .local_l1_cache = 1,
    .multi_gpu_board = 0,                        // one GPU per PCIe card
    .async_engine_count = 2,  // PhOS §5: one copy engine per direction used (the card has 3)
    // A100 80GB PCIe product brief: device id 0x20B5, subsystem id 0x1533.
    .pci_device_id = 0x20b5,
    .pci_subsystem_id = 0x1533,
    // The simulated host's slots, not a property of the card: device i on bus 0x17 + i.
    .pci_domain = 0,
    .pci_first_bus = 0x17,
    .textures = kTextureLimitsSm80Sm90,
    .caps = kSimgpuCapabilities,
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
    // Compute capability 9.0 limits: CUDA C++ Programming Guide, "Technical Specifications per
    // Compute Capability".
    .max_threads_per_block = 1024,
    .max_block_dim = {1024, 1024, 64},
    .max_grid_dim = {2147483647, 65535, 65535},
    .warp_size = 32,
    .max_threads_per_sm = 2048,
    .max_blocks_per_sm = 32,
    .max_registers_per_block = 64 << 10,
    .max_registers_per_sm = 64 << 10,
    .shared_memory_per_block = 48 << 10,
    .shared_memory_per_block_optin = 227 << 10,  // programming guide: 227 KB for 9.0
    .shared_memory_per_sm = 228 << 10,           // 228 KB; H100 whitepaper: up to 228 KB shared
    .reserved_shared_memory_per_block = 1 << 10, // programming guide, 9.0: as 8.x, 1 KB
    .total_constant_memory = 64 << 10,
    .max_pitch = 2147483647,
    .clock_rate_khz = 1755000,       // H100 PCIe product brief: boost 1755 MHz
    .memory_clock_khz = 1593000,     // H100 PCIe HBM2e at 1593 MHz (2.0 TB/s over 5120 bits)
    .memory_bus_width_bits = 5120,   // H100 whitepaper
    .l2_cache_bytes = 50 << 20,      // H100 whitepaper: 50 MB L2
    // Assumption: 3/4 of L2 as on A100 (37.5 MiB; no H100 figure found). The access policy window
    // is A100's: a driver limit, not a cache size.
    .max_persisting_l2_bytes = (50 << 20) / 4 * 3,
    .max_access_policy_window_bytes = 134213632,
    .single_to_double_perf_ratio = 2,  // H100 PCIe datasheet: FP32 51 TFLOPS, FP64 26
    .ecc_enabled = 1,
    .global_l1_cache = 1,
    .local_l1_cache = 1,
    .multi_gpu_board = 0,
    .async_engine_count = 2,           // as a100-pcie4: one per direction
    // H100 PCIe product brief: device id 0x2331, subsystem id 0x1626.
    .pci_device_id = 0x2331,
    .pci_subsystem_id = 0x1626,
    .pci_domain = 0,
    .pci_first_bus = 0x17,             // the simulated host's slots, as a100-pcie4
    .textures = kTextureLimitsSm80Sm90,
    .caps = kSimgpuCapabilities,
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
