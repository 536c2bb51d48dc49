// What a kernel reports and accepts beyond its launch: module variables (cuModuleGetGlobal),
// function attributes and settings, the occupancy calculator, and cuLaunchKernelEx with its
// launch attributes. Figures simgpu answers for its kernels: simgpu/README.md, "Kernels".
#include <cuda_occupancy.h>

#include <climits>
#include <cstring>

#include "api/driver.h"

using namespace phos::sim;

namespace {

// A simgpu kernel has no registers; 32 per thread is what it reports (an ordinary compiled
// kernel's count) and what occupancy is computed with: every block size up to the device's
// limit still fits 2048 threads per SM (65536 registers / 2048 threads).
constexpr int kRegistersPerThread = 32;

CUresult RequireFunction(CUfunction handle, std::shared_ptr<FunctionObject>* out) {
  Driver* d = nullptr;
  if (CUresult r = RequireDriver(&d); r != CUDA_SUCCESS) return r;
  *out = d->functions.Find(handle);
  return *out ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

// PTX and binary versions: the device's compute capability, as major * 10 + minor, which is what
// nvcc targets when it builds for the device alone (sm_80 and compute_80 for an A100).
int ComputeVersion(const DeviceProfile& p) {
  return p.cc_major * 10 + p.cc_minor;
}

cudaOccDeviceProp OccupancyProperties(const DeviceProfile& p) {
  cudaOccDeviceProp props;
  props.computeMajor = p.cc_major;
  props.computeMinor = p.cc_minor;
  props.maxThreadsPerBlock = p.max_threads_per_block;
  props.maxThreadsPerMultiprocessor = p.max_threads_per_sm;
  props.regsPerBlock = p.max_registers_per_block;
  props.regsPerMultiprocessor = p.max_registers_per_sm;
  props.warpSize = p.warp_size;
  props.sharedMemPerBlock = static_cast<size_t>(p.shared_memory_per_block);
  props.sharedMemPerMultiprocessor = static_cast<size_t>(p.shared_memory_per_sm);
  props.numSms = p.sm_count;
  props.sharedMemPerBlockOptin = static_cast<size_t>(p.shared_memory_per_block_optin);
  props.reservedSharedMemPerBlock = static_cast<size_t>(p.reserved_shared_memory_per_block);
  return props;
}

// The function as CUDA's runtime hands it to the calculator (cudaOccFuncAttributes built from
// cudaFuncAttributes: the opt-in limit, one block barrier), and the device state its settings
// make.
cudaOccFuncAttributes OccupancyAttributes(const FunctionObject& f) {
  cudaOccFuncAttributes attributes;
  attributes.maxThreadsPerBlock = f.ctx->device->profile->max_threads_per_block;
  attributes.numRegs = kRegistersPerThread;
  attributes.sharedSizeBytes = 0;
  attributes.partitionedGCConfig = PARTITIONED_GC_OFF;
  attributes.shmemLimitConfig = FUNC_SHMEM_LIMIT_OPTIN;
  attributes.maxDynamicSharedSizeBytes = static_cast<size_t>(f.max_dynamic_shared_bytes.load());
  attributes.numBlockBarriers = 1;
  attributes.virtualResourceCount = 0;
  return attributes;
}

cudaOccDeviceState OccupancyState(const FunctionObject& f) {
  cudaOccDeviceState state;
  state.cacheConfig = static_cast<cudaOccCacheConfig>(f.cache_config.load());
  state.carveoutConfig = f.shared_memory_carveout.load();
  return state;
}

CUresult FromOccupancy(cudaOccError e) {
  return e == CUDA_OCC_SUCCESS ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

// The event a launch attribute names, which must be live in the launch's context and have timing
// disabled (cuLaunchKernelEx: "The event must disable timing"); record flags other than 0 are
// refused (CU_EVENT_RECORD_EXTERNAL is not accepted, and there are no others).
CUresult LaunchEvent(Driver& d, const std::shared_ptr<Context>& ctx, CUevent handle, int flags,
                     std::shared_ptr<EventObject>* out) {
  *out = d.events.Find(handle);
  if (!*out || (*out)->ctx != ctx) return CUDA_ERROR_INVALID_HANDLE;
  if (!(*out)->event->timing_disabled() || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

// Checks one launch attribute against what simgpu honours; an event it names is appended to
// `events`, recorded after the kernel.
CUresult CheckLaunchAttribute(Driver& d, const std::shared_ptr<Context>& ctx, const CUlaunchAttribute& a,
                              std::vector<std::shared_ptr<EventObject>>* events) {
  const DeviceProfile& p = *ctx->device->profile;
  const CUlaunchAttributeValue& v = a.value;
  switch (a.id) {
    case CU_LAUNCH_ATTRIBUTE_IGNORE:
      return CUDA_SUCCESS;
    case CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW: {
      // A hint about L2 residency, which simgpu does not model: checked, then without effect.
      const CUaccessPolicyWindow& w = v.accessPolicyWindow;
      const bool ok = w.num_bytes <= static_cast<size_t>(p.max_access_policy_window_bytes) &&
                      w.hitRatio >= 0.0f && w.hitRatio <= 1.0f && w.hitProp >= CU_ACCESS_PROPERTY_NORMAL &&
                      w.hitProp <= CU_ACCESS_PROPERTY_PERSISTING &&
                      (w.missProp == CU_ACCESS_PROPERTY_NORMAL || w.missProp == CU_ACCESS_PROPERTY_STREAMING);
      return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    }
    case CU_LAUNCH_ATTRIBUTE_COOPERATIVE:
      // The blocks of a launch run in ranges that cannot wait for each other: no grid-wide sync.
      return v.cooperative == 0 || p.caps.cooperative_launch != 0 ? CUDA_SUCCESS : CUDA_ERROR_NOT_SUPPORTED;
    case CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
    case CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION:
      return p.caps.cluster_launch != 0 ? CUDA_SUCCESS : CUDA_ERROR_NOT_SUPPORTED;
    case CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
      return v.clusterSchedulingPolicyPreference >= CU_CLUSTER_SCHEDULING_POLICY_DEFAULT &&
                     v.clusterSchedulingPolicyPreference <= CU_CLUSTER_SCHEDULING_POLICY_LOAD_BALANCING
                 ? CUDA_SUCCESS
                 : CUDA_ERROR_INVALID_VALUE;
    case CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION:
      // Allows overlap with the previous kernel; running after it, as simgpu does, is allowed.
      return CUDA_SUCCESS;
    case CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT:
    case CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT: {
      // Both may trigger as late as the kernel's completion ("dependents are not guaranteed to
      // observe the release precisely"; "B may wait until A is complete"): recorded after it.
      const bool programmatic = a.id == CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT;
      std::shared_ptr<EventObject> event;
      if (CUresult r =
              LaunchEvent(d, ctx, programmatic ? v.programmaticEvent.event : v.launchCompletionEvent.event,
                          programmatic ? v.programmaticEvent.flags : v.launchCompletionEvent.flags, &event);
          r != CUDA_SUCCESS) {
        return r;
      }
      events->push_back(std::move(event));
      return CUDA_SUCCESS;
    }
    case CU_LAUNCH_ATTRIBUTE_PRIORITY:
      // No priorities (CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED is 0): any value runs as the
      // stream's work does.
      return CUDA_SUCCESS;
    case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP:
      return v.memSyncDomainMap.default_ < p.caps.mem_sync_domain_count &&
                     v.memSyncDomainMap.remote < p.caps.mem_sync_domain_count
                 ? CUDA_SUCCESS
                 : CUDA_ERROR_INVALID_VALUE;
    case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN:
      return v.memSyncDomain == CU_LAUNCH_MEM_SYNC_DOMAIN_DEFAULT ||
                     v.memSyncDomain == CU_LAUNCH_MEM_SYNC_DOMAIN_REMOTE
                 ? CUDA_SUCCESS
                 : CUDA_ERROR_INVALID_VALUE;
    case CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
      return v.sharedMemCarveout <= 100 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    case CU_LAUNCH_ATTRIBUTE_NVLINK_UTIL_CENTRIC_SCHEDULING:
      return v.nvlinkUtilCentricScheduling <= 1 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    case CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY:        // a stream's attribute, not a launch's
    case CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE:  // graphs only: no stream capture here
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

}  // namespace

extern "C" {

PHOS_SIM_API CUresult CUDAAPI cuModuleGetGlobal(CUdeviceptr* dptr, size_t* bytes, CUmodule hmod,
                                                const char* name) {
  if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver* d = nullptr;
  if (CUresult r = RequireDriver(&d); r != CUDA_SUCCESS) return r;
  std::shared_ptr<ModuleObject> object = d->modules.Find(hmod);
  if (!object) return CUDA_ERROR_INVALID_HANDLE;
  const ModuleVariableInfo* variable = nullptr;
  if (CUresult r = object->module->GetVariable(name, &variable); r != CUDA_SUCCESS) return r;
  // Either output may be null: that one is not returned.
  if (dptr != nullptr) *dptr = object->module->variable_base() + variable->offset;
  if (bytes != nullptr) *bytes = variable->size;
  return CUDA_SUCCESS;
}

PHOS_SIM_API CUresult CUDAAPI cuFuncGetAttribute(int* pi, CUfunction_attribute attrib, CUfunction hfunc) {
  if (pi == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<FunctionObject> f;
  if (CUresult r = RequireFunction(hfunc, &f); r != CUDA_SUCCESS) return r;
  const DeviceProfile& p = *f->ctx->device->profile;
  switch (attrib) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
      *pi = p.max_threads_per_block;
      return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES:
    case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES:
      *pi = 0;  // simgpu kernels declare no shared memory, and their locals live on the host stack
      return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES:
      *pi = static_cast<int>(f->module->constant_bytes());
      return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_NUM_REGS:
      *pi = kRegistersPerThread;
      return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION:
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION:
      *pi = ComputeVersion(p);
      return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_CACHE_MODE_CA:
      *pi = 0;  // not built with -Xptxas --dlcm=ca
      return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
      *pi = f->max_dynamic_shared_bytes.load();
      return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
      *pi = f->shared_memory_carveout.load();
      return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:
    case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED:
      *pi = 0;  // no clusters (CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH is 0)
      return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
      *pi = f->cluster_scheduling_policy.load();
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

PHOS_SIM_API CUresult CUDAAPI cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value) {
  std::shared_ptr<FunctionObject> f;
  if (CUresult r = RequireFunction(hfunc, &f); r != CUDA_SUCCESS) return r;
  const DeviceProfile& p = *f->ctx->device->profile;
  switch (attrib) {
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
      // Up to the opt-in limit less the static shared memory (none).
      if (value < 0 || value > p.shared_memory_per_block_optin) return CUDA_ERROR_INVALID_VALUE;
      f->max_dynamic_shared_bytes = value;
      return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
      if (value < -1 || value > 100)
        return CUDA_ERROR_INVALID_VALUE;  // CU_SHAREDMEM_CARVEOUT_DEFAULT..MAX_SHARED
      f->shared_memory_carveout = value;
      return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
      if (value < CU_CLUSTER_SCHEDULING_POLICY_DEFAULT ||
          value > CU_CLUSTER_SCHEDULING_POLICY_LOAD_BALANCING) {
        return CUDA_ERROR_INVALID_VALUE;
      }
      f->cluster_scheduling_policy = value;
      return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:
    case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED:
      // Without clusters only "none" can be asked for.
      if (value < 0) return CUDA_ERROR_INVALID_VALUE;
      return value == 0 || p.caps.cluster_launch != 0 ? CUDA_SUCCESS : CUDA_ERROR_NOT_SUPPORTED;
    default:
      return CUDA_ERROR_INVALID_VALUE;  // the read-only attributes, and values outside the enumeration
  }
}

PHOS_SIM_API CUresult CUDAAPI cuFuncSetCacheConfig(CUfunction hfunc, CUfunc_cache config) {
  std::shared_ptr<FunctionObject> f;
  if (CUresult r = RequireFunction(hfunc, &f); r != CUDA_SUCCESS) return r;
  if (config < CU_FUNC_CACHE_PREFER_NONE || config > CU_FUNC_CACHE_PREFER_EQUAL)
    return CUDA_ERROR_INVALID_VALUE;
  // A preference; it counts only in the occupancy calculator's choice of shared memory.
  f->cache_config = config;
  return CUDA_SUCCESS;
}

PHOS_SIM_API CUresult CUDAAPI cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
    int* numBlocks, CUfunction func, int blockSize, size_t dynamicSMemSize, unsigned int flags) {
  if (numBlocks == nullptr) return CUDA_ERROR_INVALID_VALUE;
  // CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE concerns global caching that only compute capability 5.2
  // and 6.x partition; it changes nothing here.
  if ((flags & ~static_cast<unsigned>(CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE)) != 0)
    return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<FunctionObject> f;
  if (CUresult r = RequireFunction(func, &f); r != CUDA_SUCCESS) return r;
  const cudaOccDeviceProp props = OccupancyProperties(*f->ctx->device->profile);
  const cudaOccFuncAttributes attributes = OccupancyAttributes(*f);
  const cudaOccDeviceState state = OccupancyState(*f);
  cudaOccResult result{};
  if (CUresult r = FromOccupancy(cudaOccMaxActiveBlocksPerMultiprocessor(&result, &props, &attributes, &state,
                                                                         blockSize, dynamicSMemSize));
      r != CUDA_SUCCESS) {
    return r;
  }
  *numBlocks = result.activeBlocksPerMultiprocessor;
  return CUDA_SUCCESS;
}

PHOS_SIM_API CUresult CUDAAPI cuOccupancyMaxActiveBlocksPerMultiprocessor(int* numBlocks, CUfunction func,
                                                                          int blockSize,
                                                                          size_t dynamicSMemSize) {
  return cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(numBlocks, func, blockSize, dynamicSMemSize,
                                                              CU_OCCUPANCY_DEFAULT);
}

PHOS_SIM_API CUresult CUDAAPI cuOccupancyAvailableDynamicSMemPerBlock(size_t* dynamicSmemSize,
                                                                      CUfunction func, int numBlocks,
                                                                      int blockSize) {
  if (dynamicSmemSize == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<FunctionObject> f;
  if (CUresult r = RequireFunction(func, &f); r != CUDA_SUCCESS) return r;
  const cudaOccDeviceProp props = OccupancyProperties(*f->ctx->device->profile);
  const cudaOccFuncAttributes attributes = OccupancyAttributes(*f);
  const cudaOccDeviceState state = OccupancyState(*f);
  return FromOccupancy(cudaOccAvailableDynamicSMemPerBlock(dynamicSmemSize, &props, &attributes, &state,
                                                           numBlocks, blockSize));
}

PHOS_SIM_API CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f,
                                               void** kernelParams, void** extra) {
  if (config == nullptr || (config->numAttrs != 0 && config->attrs == nullptr))
    return CUDA_ERROR_INVALID_VALUE;
  Driver* d = nullptr;
  std::shared_ptr<Context> ctx;
  if (CUresult r = RequireContext(&d, &ctx); r != CUDA_SUCCESS) return r;
  std::shared_ptr<FunctionObject> function = d->functions.Find(f);
  if (!function || function->ctx != ctx) return CUDA_ERROR_INVALID_HANDLE;
  std::vector<std::shared_ptr<EventObject>> events;
  for (unsigned i = 0; i < config->numAttrs; ++i) {
    if (CUresult r = CheckLaunchAttribute(*d, ctx, config->attrs[i], &events); r != CUDA_SUCCESS) return r;
  }
  LaunchGeometry geometry{{config->gridDimX, config->gridDimY, config->gridDimZ},
                          {config->blockDimX, config->blockDimY, config->blockDimZ}};
  if (CUresult r = EnqueueLaunch(ctx, *function, geometry, config->sharedMemBytes, config->hStream,
                                 kernelParams, extra);
      r != CUDA_SUCCESS) {
    return r;
  }
  std::shared_ptr<Stream> stream;
  if (CUresult r = ResolveStream(ctx, config->hStream, &stream); r != CUDA_SUCCESS) return r;
  for (const auto& event : events) {
    if (CUresult r = event->event->Record(*stream); r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

}  // extern "C"
