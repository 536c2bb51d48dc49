// Device profiles: the numbers simgpu models a GPU with. Data, not code: each number in
// profile.cc carries its source (the table with its sources: simgpu/README.md, "Device profiles").
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace phos::sim {

// Texture and surface size limits, as cuDeviceGetAttribute's MAXIMUM_TEXTURE* and
// MAXIMUM_SURFACE* attributes name them (extents in elements, pitches and alignments in bytes).
// simgpu has no texture or surface objects; these are the modelled GPU's limits, reported so that
// a program sizing its work by them sees the device it expects.
struct TextureLimits {
  int texture1d_width = 0;
  int texture1d_linear_width = 0;     // deprecated attribute; still answered by NVIDIA's driver
  int texture1d_mipmapped_width = 0;
  int texture1d_layered[2] = {};      // width, layers
  int texture2d[2] = {};              // width, height
  int texture2d_linear[3] = {};       // width, height, pitch
  int texture2d_mipmapped[2] = {};    // width, height
  int texture2d_gather[2] = {};       // width, height
  int texture2d_layered[3] = {};      // width, height, layers
  int texture3d[3] = {};              // width, height, depth
  int texture3d_alternate[3] = {};    // width, height, depth
  int texture_cubemap_width = 0;
  int texture_cubemap_layered[2] = {};  // width, layers
  int surface1d_width = 0;
  int surface1d_layered[2] = {};      // width, layers
  int surface2d[2] = {};              // width, height
  int surface2d_layered[3] = {};      // width, height, layers
  int surface3d[3] = {};              // width, height, depth
  int surface_cubemap_width = 0;
  int surface_cubemap_layered[2] = {};  // width, layers
  int texture_alignment = 0;
  int texture_pitch_alignment = 0;
  int surface_alignment = 0;
};

// What the device can do, one field per capability attribute of cuDeviceGetAttribute. These say
// how the simulated device behaves, not what the modelled card can do: a capability whose API
// simgpu does not implement reads 0 even where the card has it, so that a program that checks
// before it calls takes the path that works (simgpu/README.md lists both answers).
struct DeviceCapabilities {
  // Execution.
  int gpu_overlap = 0;                    // copies overlap kernels
  int concurrent_kernels = 0;
  int kernel_exec_timeout = 0;            // a watchdog limits kernel run time
  int compute_preemption = 0;
  int cooperative_launch = 0;
  int cooperative_multi_device_launch = 0;
  int cluster_launch = 0;
  int stream_priorities = 0;
  int tensor_map_access = 0;
  int unified_function_pointers = 0;
  int mem_sync_domain_count = 0;          // a count: 1 is a single domain
  // Memory and the host.
  int unified_addressing = 0;
  int integrated = 0;
  int can_map_host_memory = 0;
  int host_register = 0;
  int read_only_host_register = 0;
  int can_use_host_pointer_for_registered_mem = 0;
  int managed_memory = 0;
  int concurrent_managed_access = 0;
  int direct_managed_mem_access_from_host = 0;
  int pageable_memory_access = 0;
  int pageable_memory_access_uses_host_page_tables = 0;
  int host_native_atomic = 0;
  int only_partial_host_native_atomic = 0;
  int virtual_memory_management = 0;
  int memory_pools = 0;
  int mempool_supported_handle_types = 0;  // a CUmemAllocationHandleType mask
  int generic_compression = 0;
  int sparse_cuda_array = 0;
  int deferred_mapping_cuda_array = 0;
  int can_tex2d_gather = 0;
  int mem_decompress_algorithm_mask = 0;
  int mem_decompress_maximum_length = 0;
  int host_numa_virtual_memory_management = 0;
  int host_numa_memory_pools = 0;
  int host_numa_multinode_ipc = 0;
  int host_memory_pools = 0;
  int host_virtual_memory_management = 0;
  // Sharing with other processes, devices and APIs.
  int handle_type_posix_file_descriptor = 0;
  int handle_type_win32 = 0;
  int handle_type_win32_kmt = 0;
  int handle_type_fabric = 0;
  int ipc_event = 0;
  int dma_buf = 0;
  int host_alloc_dma_buf = 0;
  int timeline_semaphore_interop = 0;
  int multicast = 0;
  int d3d12_cig = 0;
  int vulkan_cig = 0;
  int gpu_direct_rdma = 0;
  int gpu_direct_rdma_with_cuda_vmm = 0;
  int gpu_direct_rdma_flush_writes_options = 0;  // a CUflushGPUDirectRDMAWritesOptions mask
  int gpu_direct_rdma_writes_ordering = 0;       // a CUGPUDirectRDMAWritesOrdering
  int can_flush_remote_writes = 0;
  // Stream memory operations (cuStreamBatchMemOp and the v1 forms).
  int stream_mem_ops_v1 = 0;
  int stream_mem_ops_64_bit_v1 = 0;
  int stream_wait_value_nor_v1 = 0;
  int stream_mem_ops_64_bit = 0;
  int stream_wait_value_nor = 0;
  // The host system.
  int tcc_driver = 0;
  int compute_mode = 0;     // a CUcomputemode
  int mps_enabled = 0;
  int numa_config = 0;      // a CUdeviceNumaConfig
  int numa_id = -1;         // NUMA node of the device's memory; -1: none
  int host_numa_id = -1;    // NUMA node of the host nearest the device; -1: none
};

struct DeviceProfile {
  std::string_view name;         // profile name used in configuration, e.g. "a100-pcie4"
  std::string_view device_name;  // what cuDeviceGetName reports
  int cc_major = 0;              // compute capability
  int cc_minor = 0;
  int sm_count = 0;
  uint64_t memory_bytes = 0;

  // Link and memory bandwidths, bytes per device second.
  double h2d_pinned_bps = 0;
  double d2h_pinned_bps = 0;
  double h2d_pageable_bps = 0;
  double d2h_pageable_bps = 0;
  double d2d_bps = 0;

  // Fixed costs, device seconds.
  double context_create_s = 0;
  double module_load_s = 0;
  double kernel_launch_s = 0;
  // cublasCreate: the first handle of a context loads the library's state into it; later ones
  // are cheap.
  double blas_handle_create_first_s = 0;
  double blas_handle_create_s = 0;
  // ncclCommInitRank / ncclCommInitAll / ncclCommSplit: creating one communicator (its ranks
  // initialise in parallel).
  double nccl_comm_init_s = 0;

  // Attributes reported by cuDeviceGetAttribute. Launch shapes: cuLaunchKernel refuses what
  // exceeds them.
  int max_threads_per_block = 0;
  int max_block_dim[3] = {};
  int max_grid_dim[3] = {};
  int warp_size = 0;
  int max_threads_per_sm = 0;
  int max_blocks_per_sm = 0;
  int max_registers_per_block = 0;      // 32-bit registers
  int max_registers_per_sm = 0;
  // Shared memory, bytes. Per block without opting in (also the most dynamic shared memory a
  // launch may ask for until cuFuncSetAttribute raises the function's limit), per block with the
  // opt-in, per SM, and what the driver reserves of each block's.
  int shared_memory_per_block = 0;
  int shared_memory_per_block_optin = 0;
  int shared_memory_per_sm = 0;
  int reserved_shared_memory_per_block = 0;
  int total_constant_memory = 0;        // bytes for __constant__ variables
  int max_pitch = 0;                    // bytes, of pitched copies
  int clock_rate_khz = 0;
  int memory_clock_khz = 0;
  int memory_bus_width_bits = 0;
  int l2_cache_bytes = 0;
  int max_persisting_l2_bytes = 0;      // the most L2 a context may set aside for persisting lines
  int max_access_policy_window_bytes = 0;
  int single_to_double_perf_ratio = 0;  // FP32 over FP64 throughput
  int ecc_enabled = 0;
  int global_l1_cache = 0;              // globals may be cached in L1
  int local_l1_cache = 0;               // locals may be cached in L1
  int multi_gpu_board = 0;              // several GPUs on one board
  int async_engine_count = 0;           // copy engines; simgpu runs one per direction
  // PCI identity: device and subsystem ids of the card (vendor 0x10de), and where the simulated
  // host puts device ordinal i: domain `pci_domain`, bus `pci_first_bus + i`, device 0.
  int pci_device_id = 0;
  int pci_subsystem_id = 0;
  int pci_domain = 0;
  int pci_first_bus = 0;
  TextureLimits textures;
  DeviceCapabilities caps;
};

// NVIDIA's PCI vendor id, the low half of CU_DEVICE_ATTRIBUTE_GPU_PCI_DEVICE_ID.
inline constexpr int kNvidiaPciVendor = 0x10de;

// The profile named `name`, or nullptr.
const DeviceProfile* FindProfile(std::string_view name);
// Every profile, in a fixed order (for listings and error messages).
const std::vector<const DeviceProfile*>& AllProfiles();

}  // namespace phos::sim
