// Kernel registration and launch. nvcc-built code registers fatbins and host stubs
// (__cudaRegisterFatBinary / __cudaRegisterFunction) and launches through __cudaGetKernel /
// __cudaLaunchKernel (CUDA 13's default) or cudaLaunchKernel; g++-built functions register their
// simgpu module (__phosRegisterSimModule) and launch by host function, whose exported symbol
// names the kernel (dladdr). Parameter layouts come from phosd once per kernel and are cached
// here. cudaLaunchKernelExC carries its launch attributes to phosd, which checks them.
#include <dlfcn.h>

#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "cudart_internal.h"
#include "phos/base/log.h"
#include "phos/frontend/remote_call.h"
#include "phos/frontend/sim_module.h"

using phos::frontend::Client;
using phos::frontend::KernelRef;
using phos::frontend::PackArguments;
using phos::frontend::Return;
using phos::frontend::StreamId;
namespace ipc = phos::ipc;

namespace {

struct Registered {
  uint64_t module_id;
  std::string name;
};

struct FatbinHandle {
  uint64_t module_id;  // 0 when the image was not a fatbin we could size
};

struct CallConfiguration {
  dim3 grid, block;
  size_t shared;
  cudaStream_t stream;
};

std::mutex g_mu;
std::unordered_map<const void*, Registered> g_registered;  // host stub -> device name
std::unordered_map<const void*, KernelRef> g_kernels;      // host function -> server function
thread_local std::vector<CallConfiguration> t_configs;

// The fatbin wrapper nvcc emits (fatbinary_section.h) and the fatbin header it points to.
struct FatbinWrapper {
  int magic;
  int version;
  const unsigned long long* data;
  void* filename_or_fatbins;
};
struct FatbinHeader {
  unsigned int magic;
  unsigned short version;
  unsigned short header_size;
  unsigned long long fat_size;
};
constexpr int kFatbinWrapperMagic = 0x466243b1;
constexpr unsigned int kFatbinMagic = 0xba55ed50;

CUresult Resolve(const void* func, KernelRef* out) {
  {
    std::lock_guard lock(g_mu);
    if (auto it = g_kernels.find(func); it != g_kernels.end()) {
      *out = it->second;
      return CUDA_SUCCESS;
    }
  }
  uint64_t module_id = 0;
  std::string name;
  {
    std::lock_guard lock(g_mu);
    if (auto it = g_registered.find(func); it != g_registered.end()) {
      module_id = it->second.module_id;
      name = it->second.name;
      if (module_id == 0) return CUDA_ERROR_INVALID_IMAGE;
    }
  }
  if (name.empty()) {
    Dl_info info{};
    if (dladdr(func, &info) == 0 || info.dli_sname == nullptr || info.dli_saddr != func) {
      PHOS_LOG_EVERY_SEC(Error, "frontend", 10,
                         "{} is not a registered kernel nor an exported function (link the executable with exported "
                         "symbols)",
                         func);
      return CUDA_ERROR_NOT_FOUND;
    }
    name = info.dli_sname;
  }
  KernelRef k;
  if (CUresult r = phos::frontend::FetchKernel(module_id, name, &k); r != CUDA_SUCCESS) return r;
  std::lock_guard lock(g_mu);
  g_kernels[func] = k;
  *out = std::move(k);
  return CUDA_SUCCESS;
}

bool EmptyShape(dim3 grid, dim3 block) {
  return grid.x == 0 || grid.y == 0 || grid.z == 0 || block.x == 0 || block.y == 0 || block.z == 0;
}

}  // namespace

cudaError_t phos::frontend::ResolveKernel(const void* func, KernelRef* out) {
  if (func == nullptr) return cudaErrorInvalidDeviceFunction;
  CUresult r = Resolve(func, out);
  if (r == CUDA_ERROR_NO_BINARY_FOR_GPU || r == CUDA_ERROR_INVALID_IMAGE) {
    PHOS_LOG_EVERY_SEC(Error, "frontend", 10, "no kernel image for this device (the kernel's module did not load in phosd)");
    return cudaErrorNoKernelImageForDevice;
  }
  if (r == CUDA_ERROR_NOT_FOUND) return cudaErrorInvalidDeviceFunction;
  if (r != CUDA_SUCCESS) return static_cast<cudaError_t>(r);
  ApplyFunctionSettings(func, *out);
  return cudaSuccess;
}

CUresult phos::frontend::FetchKernel(uint64_t module_id, const std::string& name, KernelRef* out) {
  Client& c = Client::Get();
  if (CUresult r = c.FlushModules(); r != CUDA_SUCCESS) return r;
  ipc::FunctionGetArgs a{module_id, static_cast<uint32_t>(name.size()), 0};
  std::vector<uint8_t> reply(sizeof(ipc::FunctionInfo) + ipc::kMaxParams * sizeof(ipc::ParamSlot));
  size_t got = 0;
  CUresult r = c.Call(ipc::Op::kFunctionGet, &a, sizeof(a), name.data(), name.size(), true, reply.data(), reply.size(), &got);
  if (r != CUDA_SUCCESS) return r;
  ipc::FunctionInfo fi;
  std::memcpy(&fi, reply.data(), sizeof(fi));
  if (got != sizeof(fi) + fi.param_count * sizeof(ipc::ParamSlot)) return CUDA_ERROR_UNKNOWN;
  *out = KernelRef{fi.function, fi.param_bytes, std::vector<ipc::ParamSlot>(fi.param_count), name};
  if (fi.param_count != 0) {
    std::memcpy(out->params.data(), reply.data() + sizeof(fi), fi.param_count * sizeof(ipc::ParamSlot));
  }
  return CUDA_SUCCESS;
}

bool phos::frontend::PackArguments(const KernelRef& k, void** args, uint8_t* buffer) {
  if (!k.params.empty() && args == nullptr) return false;
  std::memset(buffer, 0, k.param_bytes);
  for (size_t i = 0; i < k.params.size(); ++i) std::memcpy(buffer + k.params[i].offset, args[i], k.params[i].size);
  return true;
}

uint64_t phos::frontend::FatbinModule(void** handle) {
  return handle == nullptr ? 0 : reinterpret_cast<FatbinHandle*>(handle)->module_id;
}

void phos::frontend::ForgetSessionKernels() {
  {
    std::lock_guard lock(g_mu);
    g_kernels.clear();
  }
  ForgetAppliedSettings();
  ForgetSessionSymbols();
}

extern "C" {

int __phosRegisterSimModule(const void* image, size_t size) {
  Client::Get().AddModule(image, size, false);
  return 0;
}

void** __cudaRegisterFatBinary(void* fat_cubin) {
  auto* handle = new FatbinHandle{0};
  const auto* wrapper = static_cast<const FatbinWrapper*>(fat_cubin);
  if (wrapper != nullptr && wrapper->magic == kFatbinWrapperMagic && wrapper->data != nullptr) {
    const auto* header = reinterpret_cast<const FatbinHeader*>(wrapper->data);
    uint64_t size = static_cast<uint64_t>(header->header_size) + header->fat_size;
    if (header->magic == kFatbinMagic && size <= ipc::kMaxModuleBytes) {
      handle->module_id = Client::Get().AddModule(header, size, true);
    }
  }
  if (handle->module_id == 0) PHOS_LOG(Warn, "frontend", "__cudaRegisterFatBinary: not a fatbin image; its kernels will not launch");
  return reinterpret_cast<void**>(handle);
}

void __cudaRegisterFatBinaryEnd(void** /*handle*/) {}

// nvcc's code asks this before it touches a __managed__ variable (crt/host_runtime.h's
// __nv_init_managed_rt_with_module), so every nvcc-built program imports it: the handle's module
// is made to reach phosd now. 1 when it was a fatbin sent to phosd; 0 otherwise (nothing to load).
char __cudaInitModule(void** handle) {
  auto* h = reinterpret_cast<FatbinHandle*>(handle);
  if (h == nullptr || h->module_id == 0) return 0;
  return Client::Get().FlushModules() == CUDA_SUCCESS ? 1 : 0;
}

void __cudaUnregisterFatBinary(void** handle) {
  auto* h = reinterpret_cast<FatbinHandle*>(handle);
  if (h == nullptr) return;
  std::lock_guard lock(g_mu);
  for (auto it = g_registered.begin(); it != g_registered.end();) {
    if (it->second.module_id == h->module_id) {
      g_kernels.erase(it->first);
      it = g_registered.erase(it);
    } else {
      ++it;
    }
  }
  delete h;
}

void __cudaRegisterFunction(void** handle, const char* host_fun, char* /*device_fun*/, const char* device_name,
                            int /*thread_limit*/, uint3* /*tid*/, uint3* /*bid*/, dim3* /*block*/, dim3* /*grid*/,
                            int* /*warp_size*/) {
  auto* h = reinterpret_cast<FatbinHandle*>(handle);
  if (h == nullptr || host_fun == nullptr || device_name == nullptr) return;
  std::lock_guard lock(g_mu);
  g_registered[host_fun] = Registered{h->module_id, device_name};
}

unsigned __cudaPushCallConfiguration(dim3 grid, dim3 block, size_t shared, struct CUstream_st* stream) {
  t_configs.push_back({grid, block, shared, stream});
  return 0;
}

cudaError_t __cudaPopCallConfiguration(dim3* grid, dim3* block, size_t* shared, void* stream) {
  if (t_configs.empty()) return Return(cudaErrorMissingConfiguration);
  CallConfiguration c = t_configs.back();
  t_configs.pop_back();
  *grid = c.grid;
  *block = c.block;
  *shared = c.shared;
  *static_cast<cudaStream_t*>(stream) = c.stream;
  return cudaSuccess;
}

cudaError_t cudaLaunchKernel(const void* func, dim3 grid, dim3 block, void** args, size_t shared, cudaStream_t stream) {
  if (func == nullptr) return Return(cudaErrorInvalidDeviceFunction);
  if (EmptyShape(grid, block)) return Return(cudaErrorInvalidConfiguration);
  KernelRef k;
  if (cudaError_t e = phos::frontend::ResolveKernel(func, &k); e != cudaSuccess) return Return(e);
  alignas(16) uint8_t buffer[ipc::kMaxParamBytes];
  if (!phos::frontend::PackArguments(k, args, buffer)) return Return(cudaErrorInvalidValue);
  ipc::LaunchArgs a{k.function, 0, {grid.x, grid.y, grid.z}, {block.x, block.y, block.z},
                    static_cast<uint32_t>(shared), k.param_bytes};
  if (CUresult sr = StreamId(stream, &a.stream); sr != CUDA_SUCCESS) return Return(sr);
  return Return(Client::Get().Call(ipc::Op::kLaunch, &a, sizeof(a), buffer, k.param_bytes, false));
}

// CUDA 13's nvcc launches through these (crt/host_runtime.h): the kernel handle is the host stub
// itself, which every other entry point accepts as the kernel.
cudaError_t __cudaGetKernel(cudaKernel_t* kernel, const void* func) {
  if (kernel == nullptr || func == nullptr) return Return(cudaErrorInvalidValue);
  *kernel = reinterpret_cast<cudaKernel_t>(const_cast<void*>(func));
  return cudaSuccess;
}

cudaError_t cudaGetKernel(cudaKernel_t* kernel, const void* func) {
  return __cudaGetKernel(kernel, func);
}

cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 grid, dim3 block, void** args, size_t shared,
                               cudaStream_t stream) {
  return cudaLaunchKernel(reinterpret_cast<const void*>(kernel), grid, block, args, shared, stream);
}

cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t* config, const void* func, void** args) {
  if (config == nullptr || (config->numAttrs != 0 && config->attrs == nullptr)) return Return(cudaErrorInvalidValue);
  if (func == nullptr) return Return(cudaErrorInvalidDeviceFunction);
  if (EmptyShape(config->gridDim, config->blockDim)) return Return(cudaErrorInvalidConfiguration);
  if (config->numAttrs > ipc::kMaxLaunchAttributes) return Return(cudaErrorInvalidValue);
  static_assert(sizeof(cudaLaunchAttribute) == sizeof(ipc::LaunchAttribute));
  for (unsigned i = 0; i < config->numAttrs; ++i) {
    if (config->attrs[i].id == cudaLaunchAttributeCooperative && config->attrs[i].val.cooperative != 0) {
      return phos::frontend::NotSupported("cudaLaunchKernelExC",
                                          "cooperative launches (cudaLaunchAttributeCooperative) are not served");
    }
  }
  KernelRef k;
  if (cudaError_t e = phos::frontend::ResolveKernel(func, &k); e != cudaSuccess) return Return(e);
  // The attributes, then the parameters, as one block after the arguments; the events an
  // attribute names are the session's virtual events already (cudaEvent_t is the virtual id).
  const size_t attribute_bytes = config->numAttrs * sizeof(ipc::LaunchAttribute);
  alignas(16) uint8_t tail[ipc::kMaxLaunchAttributes * sizeof(ipc::LaunchAttribute) + ipc::kMaxParamBytes];
  if (attribute_bytes != 0) std::memcpy(tail, config->attrs, attribute_bytes);
  if (!phos::frontend::PackArguments(k, args, tail + attribute_bytes)) return Return(cudaErrorInvalidValue);
  const dim3 grid = config->gridDim, block = config->blockDim;
  ipc::LaunchExArgs a{{k.function, 0, {grid.x, grid.y, grid.z}, {block.x, block.y, block.z},
                       static_cast<uint32_t>(config->dynamicSmemBytes), k.param_bytes},
                      config->numAttrs,
                      0};
  if (CUresult sr = StreamId(config->stream, &a.launch.stream); sr != CUDA_SUCCESS) return Return(sr);
  return Return(Client::Get().Call(ipc::Op::kLaunchEx, &a, sizeof(a), tail, attribute_bytes + k.param_bytes, false));
}

// Refused (frontend/surface/refused.tsv): a cooperative kernel's grid-wide barrier needs every
// block resident at once, which simgpu's block ranges cannot give, and a function must run the
// same on simgpu as on a GPU.
cudaError_t cudaLaunchCooperativeKernel(const void*, dim3, dim3, void**, size_t, cudaStream_t) {
  return phos::frontend::NotSupported("cudaLaunchCooperativeKernel", "cooperative launches are not served");
}

}  // extern "C"

extern "C" int __phosRemoteCall(uint16_t op, const void* args, size_t args_len, int want_reply, void* reply, size_t reply_cap) {
  if (op == static_cast<uint16_t>(ipc::Op::kPad) || op >= static_cast<uint16_t>(ipc::Op::kOpCount)) return CUDA_ERROR_INVALID_VALUE;
  return static_cast<int>(Client::Get().Call(static_cast<ipc::Op>(op), args, args_len, nullptr, 0, want_reply != 0, reply,
                                             reply_cap, nullptr, /*take_async_error=*/false));
}
