// Initialisation, driver version, devices, primary contexts and error names.
#include <cstring>
#include <optional>

#include "api/driver.h"
#include "api/error_table.h"

using namespace phos::sim;

namespace {

// Every attribute of the CUDA 13 enumeration, from the device's profile: limits and identity are
// the modelled card's, capabilities what simgpu does (profile.h). The switch names every
// enumerator, so a toolkit that adds one fails the build (-Wswitch) until it is answered here.
CUresult DeviceAttribute(const Device& d, CUdevice_attribute attrib, int* value) {
  const DeviceProfile& p = *d.profile;
  const TextureLimits& t = p.textures;
  const DeviceCapabilities& c = p.caps;
  std::optional<int> v;  // unset: the value names no enumerator
  switch (attrib) {
    // Identity and the host system.
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: v = p.cc_major; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: v = p.cc_minor; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: v = p.sm_count; break;
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: v = p.pci_domain; break;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: v = p.pci_first_bus + d.ordinal; break;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: v = 0; break;  // the slot's device number
    case CU_DEVICE_ATTRIBUTE_GPU_PCI_DEVICE_ID: v = (p.pci_device_id << 16) | kNvidiaPciVendor; break;
    case CU_DEVICE_ATTRIBUTE_GPU_PCI_SUBSYSTEM_ID: v = (p.pci_subsystem_id << 16) | kNvidiaPciVendor; break;
    case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD: v = p.multi_gpu_board; break;
    case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD_GROUP_ID: v = d.ordinal; break;  // one board per device
    case CU_DEVICE_ATTRIBUTE_ECC_ENABLED: v = p.ecc_enabled; break;
    case CU_DEVICE_ATTRIBUTE_TCC_DRIVER: v = c.tcc_driver; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE: v = c.compute_mode; break;
    case CU_DEVICE_ATTRIBUTE_MPS_ENABLED: v = c.mps_enabled; break;
    case CU_DEVICE_ATTRIBUTE_NUMA_CONFIG: v = c.numa_config; break;
    case CU_DEVICE_ATTRIBUTE_NUMA_ID: v = c.numa_id; break;
    case CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID: v = c.host_numa_id; break;
    case CU_DEVICE_ATTRIBUTE_INTEGRATED: v = c.integrated; break;
    // Launch shapes and execution resources.
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: v = p.max_threads_per_block; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: v = p.max_block_dim[0]; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: v = p.max_block_dim[1]; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: v = p.max_block_dim[2]; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: v = p.max_grid_dim[0]; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: v = p.max_grid_dim[1]; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: v = p.max_grid_dim[2]; break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: v = p.warp_size; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: v = p.max_threads_per_sm; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: v = p.max_blocks_per_sm; break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: v = p.max_registers_per_block; break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: v = p.max_registers_per_sm; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: v = p.shared_memory_per_block; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: v = p.shared_memory_per_block_optin; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: v = p.shared_memory_per_sm; break;
    case CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK: v = p.reserved_shared_memory_per_block; break;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY: v = p.total_constant_memory; break;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: v = p.clock_rate_khz; break;
    case CU_DEVICE_ATTRIBUTE_SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO: v = p.single_to_double_perf_ratio; break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED: v = p.global_l1_cache; break;
    case CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED: v = p.local_l1_cache; break;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: v = p.async_engine_count; break;
    case CU_DEVICE_ATTRIBUTE_GPU_OVERLAP: v = c.gpu_overlap; break;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS: v = c.concurrent_kernels; break;
    case CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT:
      v = c.kernel_exec_timeout != 0 || d.executor->kernel_timeout_ns() > 0 ? 1 : 0;
      break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED: v = c.compute_preemption; break;
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH: v = c.cooperative_launch; break;
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_MULTI_DEVICE_LAUNCH: v = c.cooperative_multi_device_launch; break;
    case CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH: v = c.cluster_launch; break;
    case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED: v = c.stream_priorities; break;
    case CU_DEVICE_ATTRIBUTE_TENSOR_MAP_ACCESS_SUPPORTED: v = c.tensor_map_access; break;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_FUNCTION_POINTERS: v = c.unified_function_pointers; break;
    case CU_DEVICE_ATTRIBUTE_MEM_SYNC_DOMAIN_COUNT: v = c.mem_sync_domain_count; break;
    // Memory.
    case CU_DEVICE_ATTRIBUTE_MAX_PITCH: v = p.max_pitch; break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: v = p.memory_clock_khz; break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: v = p.memory_bus_width_bits; break;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: v = p.l2_cache_bytes; break;
    case CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE: v = p.max_persisting_l2_bytes; break;
    case CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE: v = p.max_access_policy_window_bytes; break;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: v = c.unified_addressing; break;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: v = c.can_map_host_memory; break;
    case CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED: v = c.host_register; break;
    case CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED: v = c.read_only_host_register; break;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM:
      v = c.can_use_host_pointer_for_registered_mem;
      break;
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: v = c.managed_memory; break;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS: v = c.concurrent_managed_access; break;
    case CU_DEVICE_ATTRIBUTE_DIRECT_MANAGED_MEM_ACCESS_FROM_HOST: v = c.direct_managed_mem_access_from_host; break;
    case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS: v = c.pageable_memory_access; break;
    case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES:
      v = c.pageable_memory_access_uses_host_page_tables;
      break;
    case CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED: v = c.host_native_atomic; break;
    case CU_DEVICE_ATTRIBUTE_ONLY_PARTIAL_HOST_NATIVE_ATOMIC_SUPPORTED: v = c.only_partial_host_native_atomic; break;
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: v = c.virtual_memory_management; break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: v = c.memory_pools; break;
    case CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES: v = c.mempool_supported_handle_types; break;
    case CU_DEVICE_ATTRIBUTE_GENERIC_COMPRESSION_SUPPORTED: v = c.generic_compression; break;
    case CU_DEVICE_ATTRIBUTE_SPARSE_CUDA_ARRAY_SUPPORTED: v = c.sparse_cuda_array; break;
    case CU_DEVICE_ATTRIBUTE_DEFERRED_MAPPING_CUDA_ARRAY_SUPPORTED: v = c.deferred_mapping_cuda_array; break;
    case CU_DEVICE_ATTRIBUTE_MEM_DECOMPRESS_ALGORITHM_MASK: v = c.mem_decompress_algorithm_mask; break;
    case CU_DEVICE_ATTRIBUTE_MEM_DECOMPRESS_MAXIMUM_LENGTH: v = c.mem_decompress_maximum_length; break;
    case CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
      v = c.host_numa_virtual_memory_management;
      break;
    case CU_DEVICE_ATTRIBUTE_HOST_NUMA_MEMORY_POOLS_SUPPORTED: v = c.host_numa_memory_pools; break;
    case CU_DEVICE_ATTRIBUTE_HOST_NUMA_MULTINODE_IPC_SUPPORTED: v = c.host_numa_multinode_ipc; break;
    case CU_DEVICE_ATTRIBUTE_HOST_MEMORY_POOLS_SUPPORTED: v = c.host_memory_pools; break;
    case CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: v = c.host_virtual_memory_management; break;
    // Sharing with other processes, devices and APIs.
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED: v = c.handle_type_posix_file_descriptor; break;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_HANDLE_SUPPORTED: v = c.handle_type_win32; break;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_KMT_HANDLE_SUPPORTED: v = c.handle_type_win32_kmt; break;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED: v = c.handle_type_fabric; break;
    case CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED: v = c.ipc_event; break;
    case CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED: v = c.dma_buf; break;
    case CU_DEVICE_ATTRIBUTE_HOST_ALLOC_DMA_BUF_SUPPORTED: v = c.host_alloc_dma_buf; break;
    case CU_DEVICE_ATTRIBUTE_TIMELINE_SEMAPHORE_INTEROP_SUPPORTED: v = c.timeline_semaphore_interop; break;
    case CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED: v = c.multicast; break;
    case CU_DEVICE_ATTRIBUTE_D3D12_CIG_SUPPORTED: v = c.d3d12_cig; break;
    case CU_DEVICE_ATTRIBUTE_VULKAN_CIG_SUPPORTED: v = c.vulkan_cig; break;
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED: v = c.gpu_direct_rdma; break;
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED: v = c.gpu_direct_rdma_with_cuda_vmm; break;
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS: v = c.gpu_direct_rdma_flush_writes_options; break;
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING: v = c.gpu_direct_rdma_writes_ordering; break;
    case CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES: v = c.can_flush_remote_writes; break;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1: v = c.stream_mem_ops_v1; break;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS_V1: v = c.stream_mem_ops_64_bit_v1; break;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR_V1: v = c.stream_wait_value_nor_v1; break;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS: v = c.stream_mem_ops_64_bit; break;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR: v = c.stream_wait_value_nor; break;
    // Textures and surfaces.
    case CU_DEVICE_ATTRIBUTE_CAN_TEX2D_GATHER: v = c.can_tex2d_gather; break;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT: v = t.texture_alignment; break;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT: v = t.texture_pitch_alignment; break;
    case CU_DEVICE_ATTRIBUTE_SURFACE_ALIGNMENT: v = t.surface_alignment; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_WIDTH: v = t.texture1d_width; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LINEAR_WIDTH: v = t.texture1d_linear_width; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_MIPMAPPED_WIDTH: v = t.texture1d_mipmapped_width; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LAYERED_WIDTH: v = t.texture1d_layered[0]; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LAYERED_LAYERS: v = t.texture1d_layered[1]; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_WIDTH: v = t.texture2d[0]; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_HEIGHT: v = t.texture2d[1]; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_WIDTH: v = t.texture2d_linear[0]; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_HEIGHT: v = t.texture2d_linear[1]; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_PITCH: v = t.texture2d_linear[2]; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_MIPMAPPED_WIDTH: v = t.texture2d_mipmapped[0]; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_MIPMAPPED_HEIGHT: v = t.texture2d_mipmapped[1]; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_GATHER_WIDTH: v = t.texture2d_gather[0]; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_GATHER_HEIGHT: v = t.texture2d_gather[1]; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_WIDTH: v = t.texture2d_layered[0]; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_HEIGHT: v = t.texture2d_layered[1]; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_LAYERS: v = t.texture2d_layered[2]; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH: v = t.texture3d[0]; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT: v = t.texture3d[1]; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH: v = t.texture3d[2]; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH_ALTERNATE: v = t.texture3d_alternate[0]; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT_ALTERNATE: v = t.texture3d_alternate[1]; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH_ALTERNATE: v = t.texture3d_alternate[2]; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_WIDTH: v = t.texture_cubemap_width; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_LAYERED_WIDTH: v = t.texture_cubemap_layered[0]; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_LAYERED_LAYERS: v = t.texture_cubemap_layered[1]; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_WIDTH: v = t.surface1d_width; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_LAYERED_WIDTH: v = t.surface1d_layered[0]; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_LAYERED_LAYERS: v = t.surface1d_layered[1]; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_WIDTH: v = t.surface2d[0]; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_HEIGHT: v = t.surface2d[1]; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_WIDTH: v = t.surface2d_layered[0]; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_HEIGHT: v = t.surface2d_layered[1]; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_LAYERS: v = t.surface2d_layered[2]; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_WIDTH: v = t.surface3d[0]; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_HEIGHT: v = t.surface3d[1]; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_DEPTH: v = t.surface3d[2]; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_WIDTH: v = t.surface_cubemap_width; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_LAYERED_WIDTH: v = t.surface_cubemap_layered[0]; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_LAYERED_LAYERS: v = t.surface_cubemap_layered[1]; break;
    case CU_DEVICE_ATTRIBUTE_MAX: break;
  }
  if (!v) return CUDA_ERROR_INVALID_VALUE;
  *value = *v;
  return CUDA_SUCCESS;
}

}  // namespace

extern "C" {

PHOS_SIM_API CUresult CUDAAPI cuInit(unsigned int flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  return Driver::Init();
}

PHOS_SIM_API CUresult CUDAAPI cuDriverGetVersion(int* version) {
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *version = CUDA_VERSION;  // the toolkit's cuda.h that simgpu implements
  return CUDA_SUCCESS;
}

PHOS_SIM_API CUresult CUDAAPI cuDeviceGetCount(int* count) {
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver* d = nullptr;
  if (CUresult r = RequireDriver(&d); r != CUDA_SUCCESS) return r;
  *count = d->device_count();
  return CUDA_SUCCESS;
}

PHOS_SIM_API CUresult CUDAAPI cuDeviceGet(CUdevice* device, int ordinal) {
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver* d = nullptr;
  if (CUresult r = RequireDriver(&d); r != CUDA_SUCCESS) return r;
  if (d->device(ordinal) == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

PHOS_SIM_API CUresult CUDAAPI cuDeviceGetName(char* name, int len, CUdevice dev) {
  if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  Driver* d = nullptr;
  if (CUresult r = RequireDriver(&d); r != CUDA_SUCCESS) return r;
  Device* device = d->device(dev);
  if (device == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  std::string_view full = device->profile->device_name;
  size_t n = std::min(full.size(), static_cast<size_t>(len) - 1);
  std::memcpy(name, full.data(), n);
  name[n] = '\0';
  return CUDA_SUCCESS;
}

PHOS_SIM_API CUresult CUDAAPI cuDeviceGetUuid(CUuuid* uuid, CUdevice dev) {
  if (uuid == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver* d = nullptr;
  if (CUresult r = RequireDriver(&d); r != CUDA_SUCCESS) return r;
  Device* device = d->device(dev);
  if (device == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  *uuid = device->uuid;
  return CUDA_SUCCESS;
}

PHOS_SIM_API CUresult CUDAAPI cuDeviceTotalMem(size_t* bytes, CUdevice dev) {
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver* d = nullptr;
  if (CUresult r = RequireDriver(&d); r != CUDA_SUCCESS) return r;
  Device* device = d->device(dev);
  if (device == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = device->capacity;
  return CUDA_SUCCESS;
}

PHOS_SIM_API CUresult CUDAAPI cuDeviceGetAttribute(int* value, CUdevice_attribute attrib, CUdevice dev) {
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver* d = nullptr;
  if (CUresult r = RequireDriver(&d); r != CUDA_SUCCESS) return r;
  Device* device = d->device(dev);
  if (device == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  // Checked before the switch: a value outside the enumeration is not a CUdevice_attribute.
  if (attrib <= 0 || attrib >= CU_DEVICE_ATTRIBUTE_MAX) return CUDA_ERROR_INVALID_VALUE;
  return DeviceAttribute(*device, attrib, value);
}

PHOS_SIM_API CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver* d = nullptr;
  if (CUresult r = RequireDriver(&d); r != CUDA_SUCCESS) return r;
  Device* device = d->device(dev);
  if (device == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  return d->RetainPrimary(device, pctx);
}

PHOS_SIM_API CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev) {
  Driver* d = nullptr;
  if (CUresult r = RequireDriver(&d); r != CUDA_SUCCESS) return r;
  Device* device = d->device(dev);
  if (device == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  return d->ReleasePrimary(device);
}

PHOS_SIM_API CUresult CUDAAPI cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags, int* active) {
  if (flags == nullptr || active == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver* d = nullptr;
  if (CUresult r = RequireDriver(&d); r != CUDA_SUCCESS) return r;
  Device* device = d->device(dev);
  if (device == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard lock(device->primary_mu);
  *flags = 0;
  *active = device->primary_refs > 0 ? 1 : 0;
  return CUDA_SUCCESS;
}

PHOS_SIM_API CUresult CUDAAPI cuGetErrorName(CUresult error, const char** str) {
  if (str == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const ErrorEntry* e = FindError(error);
  if (e == nullptr) {
    *str = nullptr;
    return CUDA_ERROR_INVALID_VALUE;
  }
  *str = e->name;
  return CUDA_SUCCESS;
}

PHOS_SIM_API CUresult CUDAAPI cuGetErrorString(CUresult error, const char** str) {
  if (str == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const ErrorEntry* e = FindError(error);
  if (e == nullptr) {
    *str = nullptr;
    return CUDA_ERROR_INVALID_VALUE;
  }
  *str = e->string;
  return CUDA_SUCCESS;
}

}  // extern "C"
