// Modules, kernel parameter information and kernel launches.
#include <cstring>
#include <vector>

#include "api/driver.h"

using namespace phos::sim;

namespace {

// CUDA 12.1+ accepts up to 32764 bytes of kernel parameters.
constexpr size_t kMaxParamBytes = 32764;

CUresult RegisterModule(Driver& d, const std::shared_ptr<Context>& ctx, std::shared_ptr<Module> module,
                        CUmodule* out) {
  // Loading a module costs what it costs on the modelled device.
  d.clock().Pay(ctx->device->profile->module_load_s);
  auto object = std::make_shared<ModuleObject>();
  object->ctx = ctx;
  object->module = std::move(module);
  *out = d.modules.Insert(std::move(object));
  return CUDA_SUCCESS;
}

// A kernel's arguments copied at launch, as CUDA copies them: the caller may reuse its argument
// storage as soon as cuLaunchKernel returns.
struct LaunchArgs {
  std::vector<unsigned char> buffer;
  std::vector<void*> args;
};

CUresult CollectArgs(const Kernel& kernel, void** kernel_params, void** extra, LaunchArgs* out) {
  const auto& params = kernel.params();
  size_t size = kernel.param_buffer_size();
  if (size > kMaxParamBytes) return CUDA_ERROR_INVALID_VALUE;
  out->buffer.assign(size, 0);
  if (kernel_params != nullptr && extra != nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (kernel_params != nullptr) {
    for (size_t i = 0; i < params.size(); ++i) {
      if (kernel_params[i] == nullptr) return CUDA_ERROR_INVALID_VALUE;
      std::memcpy(out->buffer.data() + params[i].offset, kernel_params[i], params[i].size);
    }
  } else if (extra != nullptr) {
    // CU_LAUNCH_PARAM_BUFFER_POINTER, ptr, CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END
    const void* buffer = nullptr;
    const size_t* buffer_size = nullptr;
    for (size_t i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
      if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) {
        buffer = extra[i + 1];
      } else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) {
        buffer_size = static_cast<const size_t*>(extra[i + 1]);
      } else {
        return CUDA_ERROR_INVALID_VALUE;
      }
    }
    if (buffer == nullptr || buffer_size == nullptr || *buffer_size < size) return CUDA_ERROR_INVALID_VALUE;
    std::memcpy(out->buffer.data(), buffer, size);
  } else if (!params.empty()) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  out->args.resize(params.size());
  for (size_t i = 0; i < params.size(); ++i) out->args[i] = out->buffer.data() + params[i].offset;
  return CUDA_SUCCESS;
}

bool ValidGeometry(const LaunchGeometry& g) {
  uint64_t threads = uint64_t{g.block[0]} * g.block[1] * g.block[2];
  return g.grid[0] >= 1 && g.grid[1] >= 1 && g.grid[2] >= 1 && g.grid[0] <= 2147483647u && g.grid[1] <= 65535 &&
         g.grid[2] <= 65535 && g.block[0] >= 1 && g.block[1] >= 1 && g.block[2] >= 1 && g.block[0] <= 1024 &&
         g.block[1] <= 1024 && g.block[2] <= 64 && threads <= 1024;
}

}  // namespace

extern "C" {

PHOS_SIM_API CUresult CUDAAPI cuModuleLoadData(CUmodule* module, const void* image) {
  if (module == nullptr || image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver* d = nullptr;
  std::shared_ptr<Context> ctx;
  if (CUresult r = RequireContext(&d, &ctx); r != CUDA_SUCCESS) return r;
  std::shared_ptr<Module> loaded;
  if (CUresult r = Module::Load(image, &loaded); r != CUDA_SUCCESS) return r;
  return RegisterModule(*d, ctx, std::move(loaded), module);
}

PHOS_SIM_API CUresult CUDAAPI cuModuleLoad(CUmodule* module, const char* fname) {
  if (module == nullptr || fname == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver* d = nullptr;
  std::shared_ptr<Context> ctx;
  if (CUresult r = RequireContext(&d, &ctx); r != CUDA_SUCCESS) return r;
  std::shared_ptr<Module> loaded;
  if (CUresult r = Module::LoadFile(fname, &loaded); r != CUDA_SUCCESS) return r;
  return RegisterModule(*d, ctx, std::move(loaded), module);
}

PHOS_SIM_API CUresult CUDAAPI cuModuleUnload(CUmodule hmod) {
  Driver* d = nullptr;
  if (CUresult r = RequireDriver(&d); r != CUDA_SUCCESS) return r;
  std::shared_ptr<ModuleObject> object = d->modules.Remove(hmod);
  if (!object) return CUDA_ERROR_INVALID_HANDLE;
  std::lock_guard lock(object->mu);
  for (const auto& [kernel, function] : object->functions) d->functions.Remove(function);
  // Launches still pending hold the module's code alive until they complete.
  return CUDA_SUCCESS;
}

PHOS_SIM_API CUresult CUDAAPI cuModuleGetFunction(CUfunction* hfunc, CUmodule hmod, const char* name) {
  if (hfunc == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver* d = nullptr;
  std::shared_ptr<Context> ctx;
  if (CUresult r = RequireContext(&d, &ctx); r != CUDA_SUCCESS) return r;
  std::shared_ptr<ModuleObject> object = d->modules.Find(hmod);
  if (!object) return CUDA_ERROR_INVALID_HANDLE;
  const Kernel* kernel = nullptr;
  if (CUresult r = object->module->GetFunction(name, &kernel); r != CUDA_SUCCESS) return r;
  std::lock_guard lock(object->mu);
  auto [it, inserted] = object->functions.try_emplace(kernel, nullptr);
  if (inserted) {
    auto function = std::make_shared<FunctionObject>();
    function->ctx = object->ctx;
    function->module = object->module;
    function->kernel = kernel;
    function->module_handle = hmod;
    it->second = d->functions.Insert(std::move(function));
  }
  *hfunc = it->second;
  return CUDA_SUCCESS;
}

PHOS_SIM_API CUresult CUDAAPI cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t* paramOffset,
                                                 size_t* paramSize) {
  Driver* d = nullptr;
  if (CUresult r = RequireDriver(&d); r != CUDA_SUCCESS) return r;
  std::shared_ptr<FunctionObject> f = d->functions.Find(func);
  if (!f) return CUDA_ERROR_INVALID_HANDLE;
  const auto& params = f->kernel->params();
  if (paramIndex >= params.size()) return CUDA_ERROR_INVALID_VALUE;
  if (paramOffset != nullptr) *paramOffset = params[paramIndex].offset;
  if (paramSize != nullptr) *paramSize = params[paramIndex].size;
  return CUDA_SUCCESS;
}

PHOS_SIM_API CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                             unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                             unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                             void** kernelParams, void** extra) {
  Driver* d = nullptr;
  std::shared_ptr<Context> ctx;
  if (CUresult r = RequireContext(&d, &ctx); r != CUDA_SUCCESS) return r;
  std::shared_ptr<FunctionObject> function = d->functions.Find(f);
  if (!function || function->ctx != ctx) return CUDA_ERROR_INVALID_HANDLE;
  LaunchGeometry geometry{{gridDimX, gridDimY, gridDimZ}, {blockDimX, blockDimY, blockDimZ}};
  if (!ValidGeometry(geometry)) return CUDA_ERROR_INVALID_VALUE;
  // Kernels compiled for simgpu cannot use shared memory (phos/kernel.h), so a launch that asks
  // for dynamic shared memory cannot be served.
  if (sharedMemBytes > 0) return CUDA_ERROR_NOT_SUPPORTED;
  std::shared_ptr<Stream> stream;
  if (CUresult r = ResolveStream(ctx, hStream, &stream); r != CUDA_SUCCESS) return r;

  auto args = std::make_shared<LaunchArgs>();
  if (CUresult r = CollectArgs(*function->kernel, kernelParams, extra, args.get()); r != CUDA_SUCCESS) return r;

  Op op;
  op.engine = Engine::kCompute;
  op.cost_seconds = ctx->device->profile->kernel_launch_s;
  op.blocks = function->kernel->block_count(geometry);
  op.run_blocks = [module = function->module, kernel = function->kernel, geometry, args](uint64_t first,
                                                                                          uint64_t end) {
    kernel->RunBlocks(geometry, args->args.data(), first, end);
    return CUDA_SUCCESS;
  };
  stream->Enqueue(std::move(op));
  return CUDA_SUCCESS;
}

}  // extern "C"
