// What a program asks and sets about its kernels: attributes (cuFuncGetAttribute's, in one record),
// settings (cuFuncSetAttribute, cuFuncSetCacheConfig), the occupancy calculator (the driver's,
// remoted), names and parameter layouts (known here). The C++ templates of cuda_runtime.h
// (cudaOccupancyMaxPotentialBlockSize and friends) are built on these and the device attributes.
//
// Settings are remembered per kernel and device: a forked instance's new session receives those
// of a device when it first uses the kernel there (docs/remoting.md, "Kernels").
#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <utility>

#include "cudart_internal.h"
#include "phos/base/log.h"

using phos::frontend::Client;
using phos::frontend::KernelRef;
using phos::frontend::Return;
namespace ipc = phos::ipc;

namespace {

// The settings a program made on one device for one kernel.
struct Settings {
  std::map<int32_t, int32_t> attributes;  // CUfunction_attribute -> value
  int32_t cache_config = -1;              // CUfunc_cache; -1: never set
};

std::mutex g_mu;
std::map<std::pair<const void*, int>, Settings> g_settings;  // (kernel, device)
std::set<std::pair<const void*, int>> g_applied;             // sent in this session
std::atomic<bool> g_any_settings{false};                     // the launch path's fast exit

CUresult SendAttribute(uint64_t function, int32_t attribute, int32_t value) {
  ipc::FuncAttributeArgs a{function, attribute, value};
  return Client::Get().Call(ipc::Op::kFuncSetAttribute, &a, sizeof(a), nullptr, 0, true);
}

CUresult SendCacheConfig(uint64_t function, int32_t config) {
  ipc::FuncCacheConfigArgs a{function, config, 0};
  return Client::Get().Call(ipc::Op::kFuncSetCacheConfig, &a, sizeof(a), nullptr, 0, true);
}

// The attributes of `k` on the calling thread's device.
cudaError_t GetAttributes(const KernelRef& k, ipc::FunctionAttributes* out) {
  ipc::FunctionArgs a{k.function};
  return Return(
      Client::Get().Call(ipc::Op::kFuncGetAttributes, &a, sizeof(a), nullptr, 0, true, out, sizeof(*out)));
}

}  // namespace

namespace phos::frontend {

void ApplyFunctionSettings(const void* func, const KernelRef& kernel) {
  if (!g_any_settings.load(std::memory_order_acquire)) return;
  const std::pair<const void*, int> key{func, ThreadDevice()};
  Settings settings;
  {
    std::lock_guard lock(g_mu);
    auto it = g_settings.find(key);
    if (it == g_settings.end() || !g_applied.insert(key).second) return;
    settings = it->second;
  }
  // What the driver took before takes again: a failure here is the driver's word on this device,
  // logged, and the launch that follows reports what it implies.
  for (const auto& [attribute, value] : settings.attributes) {
    if (CUresult r = SendAttribute(kernel.function, attribute, value); r != CUDA_SUCCESS) {
      PHOS_LOG(Warn, "frontend", "{}: attribute {} = {} not set again in the new session: error {}",
               kernel.name, attribute, value, static_cast<int>(r));
    }
  }
  if (settings.cache_config >= 0) SendCacheConfig(kernel.function, settings.cache_config);
}

void ForgetAppliedSettings() {
  std::lock_guard lock(g_mu);
  g_applied.clear();
}

}  // namespace phos::frontend

extern "C" {

cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attr, const void* func) {
  if (attr == nullptr) return Return(cudaErrorInvalidValue);
  KernelRef k;
  if (cudaError_t e = phos::frontend::ResolveKernel(func, &k); e != cudaSuccess) return Return(e);
  ipc::FunctionAttributes a{};
  if (cudaError_t e = GetAttributes(k, &a); e != cudaSuccess) return e;
  for (int i = 0; i < CU_FUNC_ATTRIBUTE_MAX; ++i) {
    if (a.results[i] != CUDA_SUCCESS) return Return(static_cast<cudaError_t>(a.results[i]));
  }
  auto v = [&a](CUfunction_attribute attribute) { return a.values[attribute]; };
  std::memset(attr, 0, sizeof(*attr));
  attr->sharedSizeBytes = static_cast<size_t>(v(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES));
  attr->constSizeBytes = static_cast<size_t>(v(CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES));
  attr->localSizeBytes = static_cast<size_t>(v(CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES));
  attr->maxThreadsPerBlock = v(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  attr->numRegs = v(CU_FUNC_ATTRIBUTE_NUM_REGS);
  attr->ptxVersion = v(CU_FUNC_ATTRIBUTE_PTX_VERSION);
  attr->binaryVersion = v(CU_FUNC_ATTRIBUTE_BINARY_VERSION);
  attr->cacheModeCA = v(CU_FUNC_ATTRIBUTE_CACHE_MODE_CA);
  attr->maxDynamicSharedSizeBytes = v(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES);
  attr->preferredShmemCarveout = v(CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT);
  attr->clusterDimMustBeSet = v(CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET);
  attr->requiredClusterWidth = v(CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH);
  attr->requiredClusterHeight = v(CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT);
  attr->requiredClusterDepth = v(CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH);
  attr->clusterSchedulingPolicyPreference = v(CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE);
  attr->nonPortableClusterSizeAllowed = v(CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED);
  return cudaSuccess;
}

// cudaFuncAttribute values are CUfunction_attribute's (driver_types.h numbers them so).
cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  KernelRef k;
  if (cudaError_t e = phos::frontend::ResolveKernel(func, &k); e != cudaSuccess) return Return(e);
  if (CUresult r = SendAttribute(k.function, attr, value); r != CUDA_SUCCESS) return Return(r);
  std::lock_guard lock(g_mu);
  const std::pair<const void*, int> key{func, phos::frontend::ThreadDevice()};
  g_settings[key].attributes[attr] = value;
  g_applied.insert(key);
  g_any_settings.store(true, std::memory_order_release);
  return cudaSuccess;
}

// cudaFuncCache values are CUfunc_cache's.
cudaError_t cudaFuncSetCacheConfig(const void* func, cudaFuncCache config) {
  KernelRef k;
  if (cudaError_t e = phos::frontend::ResolveKernel(func, &k); e != cudaSuccess) return Return(e);
  if (CUresult r = SendCacheConfig(k.function, config); r != CUDA_SUCCESS) return Return(r);
  std::lock_guard lock(g_mu);
  const std::pair<const void*, int> key{func, phos::frontend::ThreadDevice()};
  g_settings[key].cache_config = config;
  g_applied.insert(key);
  g_any_settings.store(true, std::memory_order_release);
  return cudaSuccess;
}

// Deprecated in CUDA 13: devices of compute capability 7.0 and later have one shared memory bank
// size, and NVIDIA's runtime accepts every configuration without effect; so does this one, after
// the same checks.
cudaError_t cudaFuncSetSharedMemConfig(const void* func, cudaSharedMemConfig config) {
  if (config < cudaSharedMemBankSizeDefault || config > cudaSharedMemBankSizeEightByte) {
    return Return(cudaErrorInvalidValue);
  }
  KernelRef k;
  return Return(phos::frontend::ResolveKernel(func, &k));
}

cudaError_t cudaFuncGetName(const char** name, const void* func) {
  if (name == nullptr) return Return(cudaErrorInvalidValue);
  KernelRef k;
  if (cudaError_t e = phos::frontend::ResolveKernel(func, &k); e != cudaSuccess) return Return(e);
  // The name outlives the call, as the driver's does: one copy per kernel, kept.
  static std::mutex mu;
  static std::map<const void*, std::string> names;
  std::lock_guard lock(mu);
  *name = names.emplace(func, k.name).first->second.c_str();
  return cudaSuccess;
}

cudaError_t cudaFuncGetParamInfo(const void* func, size_t index, size_t* offset, size_t* size) {
  if (offset == nullptr) return Return(cudaErrorInvalidValue);
  KernelRef k;
  if (cudaError_t e = phos::frontend::ResolveKernel(func, &k); e != cudaSuccess) return Return(e);
  if (index >= k.params.size()) return Return(cudaErrorInvalidValue);
  *offset = k.params[index].offset;
  if (size != nullptr) *size = k.params[index].size;
  return cudaSuccess;
}

cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* blocks, const void* func,
                                                                   int block_size, size_t dynamic_smem,
                                                                   unsigned int flags) {
  if (blocks == nullptr) return Return(cudaErrorInvalidValue);
  KernelRef k;
  if (cudaError_t e = phos::frontend::ResolveKernel(func, &k); e != cudaSuccess) return Return(e);
  ipc::OccupancyArgs a{k.function, dynamic_smem, block_size, flags};
  int32_t out = 0;
  if (CUresult r = Client::Get().Call(ipc::Op::kOccupancyMaxBlocks, &a, sizeof(a), nullptr, 0, true, &out,
                                      sizeof(out));
      r != CUDA_SUCCESS) {
    return Return(r);
  }
  *blocks = out;
  return cudaSuccess;
}

cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, const void* func, int block_size,
                                                          size_t dynamic_smem) {
  return cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(blocks, func, block_size, dynamic_smem,
                                                                cudaOccupancyDefault);
}

cudaError_t cudaOccupancyAvailableDynamicSMemPerBlock(size_t* bytes, const void* func, int blocks,
                                                      int block_size) {
  if (bytes == nullptr) return Return(cudaErrorInvalidValue);
  KernelRef k;
  if (cudaError_t e = phos::frontend::ResolveKernel(func, &k); e != cudaSuccess) return Return(e);
  ipc::OccupancySMemArgs a{k.function, blocks, block_size};
  uint64_t out = 0;
  if (CUresult r = Client::Get().Call(ipc::Op::kOccupancyDynamicSMem, &a, sizeof(a), nullptr, 0, true, &out,
                                      sizeof(out));
      r != CUDA_SUCCESS) {
    return Return(r);
  }
  *bytes = out;
  return cudaSuccess;
}

// Refused (frontend/surface/refused.tsv): thread block clusters are not served (simgpu has none,
// CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH 0), and a function must run alike on simgpu and a GPU.
cudaError_t cudaOccupancyMaxPotentialClusterSize(int* cluster_size, const void*, const cudaLaunchConfig_t*) {
  if (cluster_size != nullptr) *cluster_size = 0;
  return phos::frontend::NotSupported("cudaOccupancyMaxPotentialClusterSize",
                                      "thread block clusters are not served");
}

cudaError_t cudaOccupancyMaxActiveClusters(int* clusters, const void*, const cudaLaunchConfig_t*) {
  if (clusters != nullptr) *clusters = 0;
  return phos::frontend::NotSupported("cudaOccupancyMaxActiveClusters",
                                      "thread block clusters are not served");
}

}  // extern "C"
