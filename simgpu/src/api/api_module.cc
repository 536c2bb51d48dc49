// Modules (their variables' storage included), kernel parameter information and kernel launches.
#include <cstring>

#include "api/driver.h"

using namespace phos::sim;

namespace {

// What the device's profile accepts as a launch shape (the attributes cuDeviceGetAttribute reports).
LaunchLimits LimitsOf(const DeviceProfile& p) {
  LaunchLimits limits;
  for (int i = 0; i < 3; ++i) {
    limits.max_block[i] = static_cast<unsigned>(p.max_block_dim[i]);
    limits.max_grid[i] = static_cast<unsigned>(p.max_grid_dim[i]);
  }
  limits.max_threads_per_block = static_cast<unsigned>(p.max_threads_per_block);
  return limits;
}

// Releases a module's variable storage when the module is destroyed: after its handle went
// (cuModuleUnload, context destruction) and its last pending launch completed.
class VariableStorage {
 public:
  VariableStorage(DeviceMemory* memory, CUdeviceptr base) : memory_(memory), base_(base) {}
  ~VariableStorage() { memory_->FreeModuleStorage(base_); }
  VariableStorage(const VariableStorage&) = delete;
  VariableStorage& operator=(const VariableStorage&) = delete;

 private:
  DeviceMemory* memory_;
  CUdeviceptr base_;
};

}  // namespace

namespace phos::sim {

CUresult RegisterModule(Driver& d, const std::shared_ptr<Context>& ctx, std::shared_ptr<Module> module,
                        CUmodule* out) {
  const DeviceProfile& profile = *ctx->device->profile;
  if (module->variable_storage_bytes() != 0) {
    CUdeviceptr base = 0;
    if (CUresult r = d.memory().AllocateModuleStorage(ctx->device->ordinal, module->variable_storage_bytes(), &base);
        r != CUDA_SUCCESS) {
      return r;
    }
    // A fresh linear allocation reads as zeros already; written here all the same, since a
    // module variable without an initialiser is zero by the language's rules, not by chance.
    std::memset(reinterpret_cast<void*>(base), 0, module->variable_storage_bytes());
    module->BindVariables(base, std::make_shared<VariableStorage>(&d.memory(), base));
  }
  // Loading a module costs what it costs on the modelled device.
  d.clock().Pay(profile.module_load_s);
  auto object = std::make_shared<ModuleObject>();
  object->ctx = ctx;
  object->module = std::move(module);
  *out = d.modules.Insert(std::move(object));
  return CUDA_SUCCESS;
}

CUresult EnqueueLaunch(const std::shared_ptr<Context>& ctx, FunctionObject& function,
                       const LaunchGeometry& geometry, unsigned shared_bytes, CUstream stream_handle,
                       void** kernel_params, void** extra) {
  const DeviceProfile& profile = *ctx->device->profile;
  if (CUresult r = CheckLaunchGeometry(geometry, LimitsOf(profile)); r != CUDA_SUCCESS) return r;
  // simgpu kernels cannot declare shared memory (phos/kernel.h rejects it at compile time), so a
  // launch's dynamic shared memory is checked against the function's limit and never used.
  if (shared_bytes > static_cast<unsigned>(function.max_dynamic_shared_bytes.load())) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<Stream> stream;
  if (CUresult r = ResolveStream(ctx, stream_handle, &stream); r != CUDA_SUCCESS) return r;

  auto args = std::make_shared<KernelArgs>();
  if (CUresult r = function.kernel->CaptureArgs(kernel_params, extra, args.get()); r != CUDA_SUCCESS) return r;

  Op op;
  op.engine = Engine::kCompute;
  op.cost_seconds = profile.kernel_launch_s;
  op.blocks = function.kernel->block_count(geometry);
  op.what = function.kernel->name().c_str();
  op.run_blocks = [module = function.module, kernel = function.kernel, geometry, args](uint64_t first, uint64_t end) {
    kernel->RunBlocks(geometry, args->pointers(), first, end);
    return CUDA_SUCCESS;
  };
  stream->Enqueue(std::move(op));
  return CUDA_SUCCESS;
}

}  // namespace phos::sim

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

PHOS_SIM_API CUresult phosSimModuleLoadDataSized(CUmodule* module, const void* image, size_t bytes) {
  if (module == nullptr || image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver* d = nullptr;
  std::shared_ptr<Context> ctx;
  if (CUresult r = RequireContext(&d, &ctx); r != CUDA_SUCCESS) return r;
  std::shared_ptr<Module> loaded;
  if (CUresult r = Module::LoadSized(image, bytes, &loaded); r != CUDA_SUCCESS) return r;
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
    function->max_dynamic_shared_bytes = object->ctx->device->profile->shared_memory_per_block;
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
  return f->kernel->GetParamInfo(paramIndex, paramOffset, paramSize);
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
  return EnqueueLaunch(ctx, *function, geometry, sharedMemBytes, hStream, kernelParams, extra);
}

}  // extern "C"
