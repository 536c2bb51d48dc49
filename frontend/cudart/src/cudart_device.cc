// The devices of the frontend CUDA runtime. Each device's attributes, name, UUID and memory come
// from phosd in one record (kDeviceGetProperties) the first time they are asked for and are kept:
// cudaDeviceGetAttribute, cudaGetDeviceProperties, the PCI bus id calls and cudaChooseDevice answer
// from them. Device flags and limits are kept here per device, as CUDA keeps them per primary
// context; memory information, reset and peer access are remoted.
#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "cudart_internal.h"

namespace ipc = phos::ipc;

namespace phos::frontend {
namespace {

constexpr int kLimitCount = cudaLimitPersistingL2CacheSize + 1;

// The CUDA runtime's limits before cudaDeviceSetLimit.
constexpr std::array<size_t, kLimitCount> kDefaultLimits = {
    1024,     // cudaLimitStackSize, bytes per thread: what NVIDIA's runtime reports on A100 and H100
    1 << 20,  // cudaLimitPrintfFifoSize: 1 MiB, likewise
    8 << 20,  // cudaLimitMallocHeapSize: the programming guide's default heap of 8 MB
    2,        // cudaLimitDevRuntimeSyncDepth: cudaDeviceSetLimit's documentation, two levels of grids
    2048,     // cudaLimitDevRuntimePendingLaunchCount: likewise, 2048 launches
    64,       // cudaLimitMaxL2FetchGranularity, bytes: assumption (a hint the driver may ignore)
    0,        // cudaLimitPersistingL2CacheSize: no L2 set aside
};
// The programming guide's most local memory per thread (compute capability 2.0 and later): a
// larger stack cannot be had.
constexpr size_t kMaxStackBytes = 512 << 10;
// cudaDeviceSetLimit: the device runtime's most nested launches.
constexpr size_t kMaxSyncDepth = 24;

struct DeviceState {
  std::optional<ipc::DeviceProperties> properties;
  unsigned flags = cudaDeviceScheduleAuto;
  std::array<size_t, kLimitCount> limits = kDefaultLimits;
};

std::mutex g_mu;
std::optional<int> g_count;            // the session's devices
std::map<int, DeviceState> g_devices;  // by session device, for valid ordinals only

CUresult CountLocked(int* count) {
  if (!g_count) {
    int n = 0;
    // A query, not a synchronising call: an earlier asynchronous error stays pending.
    CUresult r =
        Client::Get().Call(ipc::Op::kDeviceGetCount, nullptr, 0, nullptr, 0, true, &n, sizeof(n), nullptr,
                           /*take_async_error=*/false);
    if (r != CUDA_SUCCESS) return r;
    g_count = n;
  }
  *count = *g_count;
  return CUDA_SUCCESS;
}

// The state of `device`, or CUDA_ERROR_INVALID_DEVICE for an ordinal the session does not have.
CUresult StateLocked(int device, DeviceState** out) {
  int count = 0;
  if (CUresult r = CountLocked(&count); r != CUDA_SUCCESS) return r;
  if (device < 0 || device >= count) return CUDA_ERROR_INVALID_DEVICE;
  *out = &g_devices[device];
  return CUDA_SUCCESS;
}

CUresult PropertiesLocked(int device, const ipc::DeviceProperties** out) {
  DeviceState* state = nullptr;
  if (CUresult r = StateLocked(device, &state); r != CUDA_SUCCESS) return r;
  if (!state->properties) {
    ipc::DeviceProperties p{};
    ipc::DeviceArgs a{device, 0};
    size_t n = 0;
    CUresult r =
        Client::Get().Call(ipc::Op::kDeviceGetProperties, &a, sizeof(a), nullptr, 0, true, &p, sizeof(p), &n,
                           /*take_async_error=*/false);
    if (r != CUDA_SUCCESS) return r;
    if (n != sizeof(p)) return CUDA_ERROR_UNKNOWN;
    p.name[sizeof(p.name) - 1] = '\0';
    // The frontend serves stream-ordered allocation and the default pool itself (cudart_pools.cc),
    // whatever the driver has: a program that asks before calling cudaMallocAsync gets a yes.
    p.attributes[CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED] = 1;
    p.results[CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED] = CUDA_SUCCESS;
    state->properties = p;
  }
  *out = &*state->properties;
  return CUDA_SUCCESS;
}

// An attribute's value; 0 for one the device did not answer.
int Attribute(const ipc::DeviceProperties& p, CUdevice_attribute attribute) {
  return p.results[attribute] == CUDA_SUCCESS ? p.attributes[attribute] : 0;
}

bool ValidDeviceFlags(unsigned flags) {
  if ((flags & ~static_cast<unsigned>(cudaDeviceMask)) != 0) return false;
  // One scheduling policy at most.
  switch (flags & cudaDeviceScheduleMask) {
    case cudaDeviceScheduleAuto:
    case cudaDeviceScheduleSpin:
    case cudaDeviceScheduleYield:
    case cudaDeviceScheduleBlockingSync:
      return true;
    default:
      return false;
  }
}

void FillProperties(const ipc::DeviceProperties& p, cudaDeviceProp* prop) {
  std::memset(prop, 0, sizeof(*prop));
  static_assert(sizeof(prop->name) == sizeof(p.name) && sizeof(prop->uuid.bytes) == sizeof(p.uuid));
  std::memcpy(prop->name, p.name, sizeof(prop->name));
  std::memcpy(prop->uuid.bytes, p.uuid, sizeof(p.uuid));
  // luid and luidDeviceNodeMask identify Windows adapters; zero elsewhere.
  prop->totalGlobalMem = p.total_memory;
  auto a = [&p](CUdevice_attribute attribute) { return Attribute(p, attribute); };
  auto u = [&p](CUdevice_attribute attribute) { return static_cast<unsigned>(Attribute(p, attribute)); };
  auto bytes = [&p](CUdevice_attribute attribute) {
    return static_cast<size_t>(static_cast<unsigned>(Attribute(p, attribute)));
  };
  prop->sharedMemPerBlock = bytes(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK);
  prop->regsPerBlock = a(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK);
  prop->warpSize = a(CU_DEVICE_ATTRIBUTE_WARP_SIZE);
  prop->memPitch = bytes(CU_DEVICE_ATTRIBUTE_MAX_PITCH);
  prop->maxThreadsPerBlock = a(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  prop->maxThreadsDim[0] = a(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X);
  prop->maxThreadsDim[1] = a(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y);
  prop->maxThreadsDim[2] = a(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z);
  prop->maxGridSize[0] = a(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X);
  prop->maxGridSize[1] = a(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y);
  prop->maxGridSize[2] = a(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z);
  prop->totalConstMem = bytes(CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY);
  prop->major = a(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  prop->minor = a(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  prop->textureAlignment = bytes(CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT);
  prop->texturePitchAlignment = bytes(CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT);
  prop->multiProcessorCount = a(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  prop->integrated = a(CU_DEVICE_ATTRIBUTE_INTEGRATED);
  prop->canMapHostMemory = a(CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY);
  prop->maxTexture1D = a(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_WIDTH);
  prop->maxTexture1DMipmap = a(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_MIPMAPPED_WIDTH);
  prop->maxTexture2D[0] = a(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_WIDTH);
  prop->maxTexture2D[1] = a(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_HEIGHT);
  prop->maxTexture2DMipmap[0] = a(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_MIPMAPPED_WIDTH);
  prop->maxTexture2DMipmap[1] = a(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_MIPMAPPED_HEIGHT);
  prop->maxTexture2DLinear[0] = a(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_WIDTH);
  prop->maxTexture2DLinear[1] = a(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_HEIGHT);
  prop->maxTexture2DLinear[2] = a(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_PITCH);
  prop->maxTexture2DGather[0] = a(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_GATHER_WIDTH);
  prop->maxTexture2DGather[1] = a(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_GATHER_HEIGHT);
  prop->maxTexture3D[0] = a(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH);
  prop->maxTexture3D[1] = a(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT);
  prop->maxTexture3D[2] = a(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH);
  prop->maxTexture3DAlt[0] = a(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH_ALTERNATE);
  prop->maxTexture3DAlt[1] = a(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT_ALTERNATE);
  prop->maxTexture3DAlt[2] = a(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH_ALTERNATE);
  prop->maxTextureCubemap = a(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_WIDTH);
  prop->maxTexture1DLayered[0] = a(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LAYERED_WIDTH);
  prop->maxTexture1DLayered[1] = a(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LAYERED_LAYERS);
  prop->maxTexture2DLayered[0] = a(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_WIDTH);
  prop->maxTexture2DLayered[1] = a(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_HEIGHT);
  prop->maxTexture2DLayered[2] = a(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_LAYERS);
  prop->maxTextureCubemapLayered[0] = a(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_LAYERED_WIDTH);
  prop->maxTextureCubemapLayered[1] = a(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_LAYERED_LAYERS);
  prop->maxSurface1D = a(CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_WIDTH);
  prop->maxSurface2D[0] = a(CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_WIDTH);
  prop->maxSurface2D[1] = a(CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_HEIGHT);
  prop->maxSurface3D[0] = a(CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_WIDTH);
  prop->maxSurface3D[1] = a(CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_HEIGHT);
  prop->maxSurface3D[2] = a(CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_DEPTH);
  prop->maxSurface1DLayered[0] = a(CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_LAYERED_WIDTH);
  prop->maxSurface1DLayered[1] = a(CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_LAYERED_LAYERS);
  prop->maxSurface2DLayered[0] = a(CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_WIDTH);
  prop->maxSurface2DLayered[1] = a(CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_HEIGHT);
  prop->maxSurface2DLayered[2] = a(CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_LAYERS);
  prop->maxSurfaceCubemap = a(CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_WIDTH);
  prop->maxSurfaceCubemapLayered[0] = a(CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_LAYERED_WIDTH);
  prop->maxSurfaceCubemapLayered[1] = a(CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_LAYERED_LAYERS);
  prop->surfaceAlignment = bytes(CU_DEVICE_ATTRIBUTE_SURFACE_ALIGNMENT);
  prop->concurrentKernels = a(CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS);
  prop->ECCEnabled = a(CU_DEVICE_ATTRIBUTE_ECC_ENABLED);
  prop->pciBusID = a(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID);
  prop->pciDeviceID = a(CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID);
  prop->pciDomainID = a(CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID);
  prop->tccDriver = a(CU_DEVICE_ATTRIBUTE_TCC_DRIVER);
  prop->asyncEngineCount = a(CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT);
  prop->unifiedAddressing = a(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING);
  prop->memoryBusWidth = a(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH);
  prop->l2CacheSize = a(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
  prop->persistingL2CacheMaxSize = a(CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE);
  prop->maxThreadsPerMultiProcessor = a(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR);
  prop->streamPrioritiesSupported = a(CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED);
  prop->globalL1CacheSupported = a(CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED);
  prop->localL1CacheSupported = a(CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED);
  prop->sharedMemPerMultiprocessor = bytes(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR);
  prop->regsPerMultiprocessor = a(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR);
  prop->managedMemory = a(CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY);
  prop->isMultiGpuBoard = a(CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD);
  prop->multiGpuBoardGroupID = a(CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD_GROUP_ID);
  prop->hostNativeAtomicSupported = a(CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED);
  prop->pageableMemoryAccess = a(CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS);
  prop->concurrentManagedAccess = a(CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS);
  prop->computePreemptionSupported = a(CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED);
  prop->canUseHostPointerForRegisteredMem = a(CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM);
  prop->cooperativeLaunch = a(CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH);
  prop->sharedMemPerBlockOptin = bytes(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
  prop->pageableMemoryAccessUsesHostPageTables =
      a(CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES);
  prop->directManagedMemAccessFromHost = a(CU_DEVICE_ATTRIBUTE_DIRECT_MANAGED_MEM_ACCESS_FROM_HOST);
  prop->maxBlocksPerMultiProcessor = a(CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR);
  prop->accessPolicyMaxWindowSize = a(CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE);
  prop->reservedSharedMemPerBlock = bytes(CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK);
  prop->hostRegisterSupported = a(CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED);
  prop->sparseCudaArraySupported = a(CU_DEVICE_ATTRIBUTE_SPARSE_CUDA_ARRAY_SUPPORTED);
  prop->hostRegisterReadOnlySupported = a(CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED);
  prop->timelineSemaphoreInteropSupported = a(CU_DEVICE_ATTRIBUTE_TIMELINE_SEMAPHORE_INTEROP_SUPPORTED);
  prop->memoryPoolsSupported = a(CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED);
  prop->gpuDirectRDMASupported = a(CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED);
  prop->gpuDirectRDMAFlushWritesOptions = u(CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS);
  prop->gpuDirectRDMAWritesOrdering = a(CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING);
  prop->memoryPoolSupportedHandleTypes = u(CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES);
  prop->deferredMappingCudaArraySupported = a(CU_DEVICE_ATTRIBUTE_DEFERRED_MAPPING_CUDA_ARRAY_SUPPORTED);
  prop->ipcEventSupported = a(CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED);
  prop->clusterLaunch = a(CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH);
  prop->unifiedFunctionPointers = a(CU_DEVICE_ATTRIBUTE_UNIFIED_FUNCTION_POINTERS);
  prop->deviceNumaConfig = a(CU_DEVICE_ATTRIBUTE_NUMA_CONFIG);
  prop->deviceNumaId = a(CU_DEVICE_ATTRIBUTE_NUMA_ID);
  prop->mpsEnabled = a(CU_DEVICE_ATTRIBUTE_MPS_ENABLED);
  prop->hostNumaId = a(CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID);
  prop->gpuPciDeviceID = u(CU_DEVICE_ATTRIBUTE_GPU_PCI_DEVICE_ID);
  prop->gpuPciSubsystemID = u(CU_DEVICE_ATTRIBUTE_GPU_PCI_SUBSYSTEM_ID);
  prop->hostNumaMultinodeIpcSupported = a(CU_DEVICE_ATTRIBUTE_HOST_NUMA_MULTINODE_IPC_SUPPORTED);
}

// "[domain]:[bus]:[device].[function]", "[domain]:[bus]:[device]" or "[bus]:[device].[function]",
// hexadecimal, as cudaDeviceGetByPCIBusId takes them.
struct PciAddress {
  unsigned domain = 0, bus = 0, device = 0, function = 0;
};
bool ParsePciBusId(const char* text, PciAddress* out) {
  const size_t length = std::strlen(text);
  PciAddress a;
  int end = -1;
  bool parsed = (std::sscanf(text, "%x:%x:%x.%x%n", &a.domain, &a.bus, &a.device, &a.function, &end) == 4 &&
                 static_cast<size_t>(end) == length);
  if (!parsed) {
    a = {};
    end = -1;
    parsed = std::sscanf(text, "%x:%x:%x%n", &a.domain, &a.bus, &a.device, &end) == 3 &&
             static_cast<size_t>(end) == length;
  }
  if (!parsed) {
    a = {};
    end = -1;
    parsed = std::sscanf(text, "%x:%x.%x%n", &a.bus, &a.device, &a.function, &end) == 3 &&
             static_cast<size_t>(end) == length;
  }
  // PCI's field widths: 16-bit domain (as CUDA prints it), 8-bit bus, 5-bit device, 3-bit function.
  if (!parsed || a.domain > 0xffff || a.bus > 0xff || a.device > 0x1f || a.function > 7) return false;
  *out = a;
  return true;
}

// How well `p` answers what `want` asks for (cudaChooseDevice): one point per criterion met.
int MatchScore(const ipc::DeviceProperties& p, const cudaDeviceProp& want) {
  int score = 0;
  if (want.name[0] != '\0' && strncmp(want.name, p.name, sizeof(want.name)) == 0) ++score;
  const int major = Attribute(p, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  const int minor = Attribute(p, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  if (major > want.major || (major == want.major && minor >= want.minor)) ++score;
  if (p.total_memory >= want.totalGlobalMem) ++score;
  if (Attribute(p, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT) >= want.multiProcessorCount) ++score;
  return score;
}

}  // namespace

CUresult SessionDeviceCount(int* count) {
  std::lock_guard lock(g_mu);
  return CountLocked(count);
}

CUresult CopyDeviceProperties(int device, ipc::DeviceProperties* out) {
  std::lock_guard lock(g_mu);
  const ipc::DeviceProperties* p = nullptr;
  if (CUresult r = PropertiesLocked(device, &p); r != CUDA_SUCCESS) return r;
  *out = *p;
  return CUDA_SUCCESS;
}

CUresult DeviceFlags(int device, unsigned* flags) {
  std::lock_guard lock(g_mu);
  DeviceState* state = nullptr;
  if (CUresult r = StateLocked(device, &state); r != CUDA_SUCCESS) return r;
  *flags = state->flags;
  return CUDA_SUCCESS;
}

CUresult SetDeviceFlags(int device, unsigned flags) {
  if (!ValidDeviceFlags(flags)) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(g_mu);
  DeviceState* state = nullptr;
  if (CUresult r = StateLocked(device, &state); r != CUDA_SUCCESS) return r;
  state->flags = flags;
  return CUDA_SUCCESS;
}

CUresult ResetDevice() {
  const int device = ThreadDevice();
  CUresult r = Client::Get().Call(ipc::Op::kDeviceReset, nullptr, 0, nullptr, 0, true);
  if (r != CUDA_SUCCESS) return r;
  ForgetDeviceAllocations(device);
  ForgetDefaultStreams(device);
  std::lock_guard lock(g_mu);
  // Limits belong to the context the reset destroys; flags stay, as the primary context's do.
  if (auto it = g_devices.find(device); it != g_devices.end()) it->second.limits = kDefaultLimits;
  return CUDA_SUCCESS;
}

void ForgetSessionDevices() {
  std::lock_guard lock(g_mu);
  g_count.reset();
  for (auto& [device, state] : g_devices) state.properties.reset();
}

}  // namespace phos::frontend

using phos::frontend::Client;
using phos::frontend::g_mu;
using phos::frontend::Return;
using phos::frontend::ThreadDevice;

extern "C" {

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (value == nullptr) return Return(cudaErrorInvalidValue);
  // cudaDeviceAttr and CUdevice_attribute share their values.
  const int attribute = static_cast<int>(attr);
  if (attribute <= 0 || attribute >= CU_DEVICE_ATTRIBUTE_MAX) return Return(cudaErrorInvalidValue);
  std::lock_guard lock(g_mu);
  const ipc::DeviceProperties* p = nullptr;
  if (CUresult r = phos::frontend::PropertiesLocked(device, &p); r != CUDA_SUCCESS) return Return(r);
  if (p->results[attribute] != CUDA_SUCCESS) return Return(static_cast<CUresult>(p->results[attribute]));
  *value = p->attributes[attribute];
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (prop == nullptr) return Return(cudaErrorInvalidValue);
  std::lock_guard lock(g_mu);
  const ipc::DeviceProperties* p = nullptr;
  if (CUresult r = phos::frontend::PropertiesLocked(device, &p); r != CUDA_SUCCESS) return Return(r);
  phos::frontend::FillProperties(*p, prop);
  return cudaSuccess;
}

cudaError_t cudaDeviceGetPCIBusId(char* pciBusId, int len, int device) {
  if (pciBusId == nullptr || len <= 0) return Return(cudaErrorInvalidValue);
  std::lock_guard lock(g_mu);
  const ipc::DeviceProperties* p = nullptr;
  if (CUresult r = phos::frontend::PropertiesLocked(device, &p); r != CUDA_SUCCESS) return Return(r);
  using phos::frontend::Attribute;
  // NVIDIA's form: four hexadecimal digits of domain, upper case.
  char text[32];
  std::snprintf(text, sizeof(text), "%04X:%02X:%02X.0", Attribute(*p, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID),
                Attribute(*p, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID),
                Attribute(*p, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID));
  const size_t n = std::min(std::strlen(text), static_cast<size_t>(len) - 1);
  std::memcpy(pciBusId, text, n);
  pciBusId[n] = '\0';
  return cudaSuccess;
}

cudaError_t cudaDeviceGetByPCIBusId(int* device, const char* pciBusId) {
  if (device == nullptr || pciBusId == nullptr) return Return(cudaErrorInvalidValue);
  phos::frontend::PciAddress want;
  if (!phos::frontend::ParsePciBusId(pciBusId, &want)) return Return(cudaErrorInvalidValue);
  std::lock_guard lock(g_mu);
  int count = 0;
  if (CUresult r = phos::frontend::CountLocked(&count); r != CUDA_SUCCESS) return Return(r);
  using phos::frontend::Attribute;
  for (int d = 0; d < count; ++d) {
    const ipc::DeviceProperties* p = nullptr;
    if (CUresult r = phos::frontend::PropertiesLocked(d, &p); r != CUDA_SUCCESS) return Return(r);
    if (want.function == 0 &&
        static_cast<unsigned>(Attribute(*p, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID)) == want.domain &&
        static_cast<unsigned>(Attribute(*p, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID)) == want.bus &&
        static_cast<unsigned>(Attribute(*p, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID)) == want.device) {
      *device = d;
      return cudaSuccess;
    }
  }
  return Return(cudaErrorInvalidDevice);
}

// The device scoring most of prop's criteria (name, compute capability at least prop's, memory and
// multiprocessors at least prop's); the lowest ordinal among equals.
cudaError_t cudaChooseDevice(int* device, const cudaDeviceProp* prop) {
  if (device == nullptr || prop == nullptr) return Return(cudaErrorInvalidValue);
  std::lock_guard lock(g_mu);
  int count = 0;
  if (CUresult r = phos::frontend::CountLocked(&count); r != CUDA_SUCCESS) return Return(r);
  int best = -1, best_score = -1;
  for (int d = 0; d < count; ++d) {
    const ipc::DeviceProperties* p = nullptr;
    if (CUresult r = phos::frontend::PropertiesLocked(d, &p); r != CUDA_SUCCESS) return Return(r);
    if (int score = phos::frontend::MatchScore(*p, *prop); score > best_score) {
      best = d;
      best_score = score;
    }
  }
  if (best < 0) return Return(cudaErrorNoDevice);
  *device = best;
  return cudaSuccess;
}

// The device's runtime state is made here; its context, by phosd, on the first call that needs it.
cudaError_t cudaInitDevice(int device, unsigned int deviceFlags, unsigned int flags) {
  if ((flags & ~static_cast<unsigned>(cudaInitDeviceFlagsAreValid)) != 0)
    return Return(cudaErrorInvalidValue);
  const bool set_flags = (flags & cudaInitDeviceFlagsAreValid) != 0;
  if (set_flags && !phos::frontend::ValidDeviceFlags(deviceFlags)) return Return(cudaErrorInvalidValue);
  std::lock_guard lock(g_mu);
  phos::frontend::DeviceState* state = nullptr;
  if (CUresult r = phos::frontend::StateLocked(device, &state); r != CUDA_SUCCESS) return Return(r);
  if (set_flags) state->flags = deviceFlags;
  return cudaSuccess;
}

cudaError_t cudaSetDeviceFlags(unsigned int flags) { return Return(phos::frontend::SetDeviceFlags(ThreadDevice(), flags)); }

// Without cudaDeviceMapHost, which CUDA's runtime adds: phos maps no host memory into the device.
cudaError_t cudaGetDeviceFlags(unsigned int* flags) {
  if (flags == nullptr) return Return(cudaErrorInvalidValue);
  std::lock_guard lock(g_mu);
  phos::frontend::DeviceState* state = nullptr;
  if (CUresult r = phos::frontend::StateLocked(ThreadDevice(), &state); r != CUDA_SUCCESS) return Return(r);
  *flags = state->flags;
  return cudaSuccess;
}

cudaError_t cudaDeviceSetLimit(cudaLimit limit, size_t value) {
  const int index = static_cast<int>(limit);
  if (index < 0 || index >= phos::frontend::kLimitCount) return Return(cudaErrorUnsupportedLimit);
  std::lock_guard lock(g_mu);
  const int device = ThreadDevice();
  const ipc::DeviceProperties* p = nullptr;
  if (CUresult r = phos::frontend::PropertiesLocked(device, &p); r != CUDA_SUCCESS) return Return(r);
  using phos::frontend::Attribute;
  switch (limit) {
    case cudaLimitStackSize:
      if (value > phos::frontend::kMaxStackBytes) return Return(cudaErrorInvalidValue);
      break;
    case cudaLimitPrintfFifoSize:
    case cudaLimitMallocHeapSize:
      // Reserved in device memory: no more than the device has.
      if (value > p->total_memory) return Return(cudaErrorMemoryAllocation);
      break;
    case cudaLimitDevRuntimeSyncDepth:
      // cudaDeviceSetLimit: only below compute capability 9.0, and up to the launch depth of 24.
      if (Attribute(*p, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR) >= 9)
        return Return(cudaErrorUnsupportedLimit);
      if (value > phos::frontend::kMaxSyncDepth) return Return(cudaErrorInvalidValue);
      break;
    case cudaLimitDevRuntimePendingLaunchCount:
      break;
    case cudaLimitMaxL2FetchGranularity:
      value = std::min<size_t>(value, 128);  // "values can range from 0B to 128B": clamped
      break;
    case cudaLimitPersistingL2CacheSize: {
      const auto most = static_cast<size_t>(Attribute(*p, CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE));
      if (most == 0) return Return(cudaErrorUnsupportedLimit);
      value = std::min(value, most);  // clamped, as the driver may
      break;
    }
  }
  phos::frontend::g_devices[device].limits[index] = value;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetLimit(size_t* pValue, cudaLimit limit) {
  if (pValue == nullptr) return Return(cudaErrorInvalidValue);
  const int index = static_cast<int>(limit);
  if (index < 0 || index >= phos::frontend::kLimitCount) return Return(cudaErrorUnsupportedLimit);
  std::lock_guard lock(g_mu);
  const int device = ThreadDevice();
  const ipc::DeviceProperties* p = nullptr;
  if (CUresult r = phos::frontend::PropertiesLocked(device, &p); r != CUDA_SUCCESS) return Return(r);
  if (limit == cudaLimitDevRuntimeSyncDepth &&
      phos::frontend::Attribute(*p, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR) >= 9) {
    return Return(cudaErrorUnsupportedLimit);
  }
  *pValue = phos::frontend::g_devices[device].limits[index];
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  if (free == nullptr || total == nullptr) return Return(cudaErrorInvalidValue);
  ipc::MemInfo info{};
  size_t n = 0;
  CUresult r =
      Client::Get().Call(ipc::Op::kMemGetInfo, nullptr, 0, nullptr, 0, true, &info, sizeof(info), &n);
  if (r == CUDA_SUCCESS && n != sizeof(info)) r = CUDA_ERROR_UNKNOWN;
  if (r != CUDA_SUCCESS) return Return(r);
  *free = info.free_bytes;
  *total = info.total_bytes;
  return cudaSuccess;
}

cudaError_t cudaDeviceReset(void) { return Return(phos::frontend::ResetDevice()); }

// No GPUDirect RDMA peer writes into a session's memory (phos gives no NIC or peer device a way to
// it), so there is never a write to flush: the arguments are checked and the call is done.
cudaError_t cudaDeviceFlushGPUDirectRDMAWrites(cudaFlushGPUDirectRDMAWritesTarget target,
                                               cudaFlushGPUDirectRDMAWritesScope scope) {
  if (target != cudaFlushGPUDirectRDMAWritesTargetCurrentDevice) return Return(cudaErrorInvalidValue);
  if (scope != cudaFlushGPUDirectRDMAWritesToOwner && scope != cudaFlushGPUDirectRDMAWritesToAllDevices) {
    return Return(cudaErrorInvalidValue);
  }
  return cudaSuccess;
}

// The persisting L2 set-aside (cudaLimitPersistingL2CacheSize) is kept by this frontend and never
// given to the device, so no line is ever persisting: there is nothing to reset.
cudaError_t cudaCtxResetPersistingL2Cache(void) {
  int count = 0;
  return Return(phos::frontend::SessionDeviceCount(&count));
}

cudaError_t cudaDeviceCanAccessPeer(int* canAccessPeer, int device, int peerDevice) {
  if (canAccessPeer == nullptr) return Return(cudaErrorInvalidValue);
  ipc::PeerArgs a{device, peerDevice, 0, 0};
  int32_t can = 0;
  CUresult r = Client::Get().Call(ipc::Op::kDeviceCanAccessPeer, &a, sizeof(a), nullptr, 0, true, &can,
                                  sizeof(can), nullptr, /*take_async_error=*/false);
  if (r != CUDA_SUCCESS) return Return(r);
  *canAccessPeer = can;
  return cudaSuccess;
}

cudaError_t cudaDeviceEnablePeerAccess(int peerDevice, unsigned int flags) {
  ipc::PeerArgs a{ThreadDevice(), peerDevice, flags, 0};
  return Return(Client::Get().Call(ipc::Op::kDeviceEnablePeer, &a, sizeof(a), nullptr, 0, true));
}

cudaError_t cudaDeviceDisablePeerAccess(int peerDevice) {
  ipc::PeerArgs a{ThreadDevice(), peerDevice, 0, 0};
  return Return(Client::Get().Call(ipc::Op::kDeviceDisablePeer, &a, sizeof(a), nullptr, 0, true));
}

}  // extern "C"
