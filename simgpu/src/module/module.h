// simgpu modules: what cuModuleLoadData / cuModuleLoad load on simgpu (docs/design.md D4). A module image
// is an ELF shared object built by phos_add_kernel_module() from phos/kernel.h sources, whose
// kernels carry nvcc's mangled names, know their parameter layout and run ranges of blocks.
//
//   std::shared_ptr<Module> module;
//   if (Module::Load(image, &module) != CUDA_SUCCESS) ...
//   const Kernel* k;
//   module->GetFunction("_Z7vec_addPKfS0_Pfi", &k);
//   KernelArgs args;
//   k->CaptureArgs(kernel_params, extra, &args);      // at cuLaunchKernel
//   k->RunBlocks(geometry, args.pointers(), 0, k->block_count(geometry));   // on workers, in ranges
//
// Thread-safety: a loaded Module is immutable; all const methods of Module and Kernel may be
// called from any number of threads. Whoever runs a kernel keeps its Module alive until it is done.
#pragma once

#include <cuda.h>
#include <stddef.h>
#include <stdint.h>

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "module/image_file.h"
#include "phos/kernel/sim_module_abi.h"

namespace phos::sim {

struct KernelParam {
  size_t offset;  // in the kernel's parameter buffer, as cuFuncGetParamInfo reports it
  size_t size;
};

// A launch's grid and block extents, x first.
struct LaunchGeometry {
  unsigned grid[3];
  unsigned block[3];
};

// What a device accepts as a launch shape (cuDeviceGetAttribute MAX_BLOCK_DIM_*, MAX_GRID_DIM_*,
// MAX_THREADS_PER_BLOCK). The defaults are those of every GPU since Volta, A100 and H100 included.
struct LaunchLimits {
  unsigned max_block[3] = {1024, 1024, 64};
  unsigned max_grid[3] = {2147483647u, 65535, 65535};
  unsigned max_threads_per_block = 1024;
};

// cuLaunchKernel's check of the launch shape: a zero extent, an extent over its limit or more
// threads per block than allowed is CUDA_ERROR_INVALID_VALUE.
CUresult CheckLaunchGeometry(const LaunchGeometry& geometry, const LaunchLimits& limits = {});

// A launch's arguments copied out of the caller's storage: cuLaunchKernel returns before the
// kernel runs, and the caller may reuse kernelParams (or the `extra` buffer) at once.
class KernelArgs {
 public:
  // kernelParams-style: pointers()[i] points at parameter i. Stable while this object lives,
  // moves included.
  void* const* pointers() const { return pointers_.data(); }
  // The packed parameter buffer (each parameter at its offset), param_buffer_size() bytes.
  const unsigned char* buffer() const { return reinterpret_cast<const unsigned char*>(storage_.data()); }

 private:
  friend class Kernel;
  std::vector<std::max_align_t> storage_;
  std::vector<void*> pointers_;
};

// One kernel of a loaded module. Owned by its Module.
class Kernel {
 public:
  Kernel(std::string name, std::vector<KernelParam> params, PhosSimKernelEntry entry);

  const std::string& name() const { return name_; }  // mangled, as nvcc names it
  const std::vector<KernelParam>& params() const { return params_; }
  // The end of the last parameter: the size of the buffer `extra` passes to cuLaunchKernel.
  size_t param_buffer_size() const { return param_buffer_size_; }
  uint64_t block_count(const LaunchGeometry& geometry) const;

  // cuFuncGetParamInfo: CUDA_ERROR_INVALID_VALUE when `index` is not a parameter or `offset` is
  // null; `size` may be null.
  CUresult GetParamInfo(size_t index, size_t* offset, size_t* size) const;

  // cuLaunchKernel's arguments, either form: `kernel_params` (one pointer per parameter), or
  // `extra` (CU_LAUNCH_PARAM_BUFFER_POINTER / _SIZE / _END, the size at least
  // param_buffer_size(); a buffer without a size is ignored, as cuda.h says). Both forms given, an
  // unknown `extra` key, a size without a buffer, a buffer too small, or no value for some
  // parameter: CUDA_ERROR_INVALID_VALUE.
  CUresult CaptureArgs(void** kernel_params, void** extra, KernelArgs* out) const;

  // Runs the blocks with linear index in [first, end) (blockIdx.x fastest); `end` is clamped to
  // block_count(). `args` as KernelArgs::pointers(). The geometry must have passed
  // CheckLaunchGeometry. Thread-safe: called concurrently with disjoint ranges of one launch.
  void RunBlocks(const LaunchGeometry& geometry, void* const* args, uint64_t first, uint64_t end) const;

 private:
  std::string name_;
  std::vector<KernelParam> params_;
  size_t param_buffer_size_;
  PhosSimKernelEntry entry_;
};

// A module variable (PHOS_DEVICE_VARIABLE / PHOS_CONSTANT_VARIABLE): its bytes are device memory
// the module is given when it loads in a context (Module::BindVariables).
struct ModuleVariableInfo {
  std::string name;  // the exported symbol, as nvcc names the variable
  size_t size;
  size_t offset;     // in the module's variable storage: aligned to the variable's alignment
  bool constant;     // constant memory (__constant__)
};

class Module {
 public:
  // Loads a module image from memory (cuModuleLoadData). The image's size is not given: it is
  // measured from its ELF headers. NULL `image` or `out`: CUDA_ERROR_INVALID_VALUE. Anything but a
  // simgpu module of this ABI version, including unreadable or truncated memory:
  // CUDA_ERROR_INVALID_IMAGE. Each call loads a separate instance, even of identical bytes.
  static CUresult Load(const void* image, std::shared_ptr<Module>* out);
  // The same for an image of `size` bytes (phosSimModuleLoadDataSized): no part of it the ELF
  // headers name may lie past that size (CUDA_ERROR_INVALID_IMAGE), so nothing beyond the buffer
  // is read.
  static CUresult LoadSized(const void* image, size_t size, std::shared_ptr<Module>* out);
  // Loads a module file (cuModuleLoad). CUDA_ERROR_FILE_NOT_FOUND when it cannot be opened.
  static CUresult LoadFile(const char* path, std::shared_ptr<Module>* out);

  ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // cuModuleGetFunction: CUDA_ERROR_NOT_FOUND for an unknown name, CUDA_ERROR_INVALID_VALUE for
  // null arguments.
  CUresult GetFunction(const char* name, const Kernel** out) const;
  const std::vector<Kernel>& kernels() const { return kernels_; }

  // The module's variables, and the bytes of device memory they take together (each at its
  // offset); 0 when it has none.
  const std::vector<ModuleVariableInfo>& variables() const { return variables_; }
  size_t variable_storage_bytes() const { return variable_storage_bytes_; }
  // The variable named `name` (cuModuleGetGlobal); CUDA_ERROR_NOT_FOUND when there is none,
  // CUDA_ERROR_INVALID_VALUE for a null argument.
  CUresult GetVariable(const char* name, const ModuleVariableInfo** out) const;
  // Before the module is shared (no kernel of it has run): its variables live from `base` on,
  // variable_storage_bytes() of zeroed device memory, which `keeper` owns; the module holds
  // `keeper` as long as it lives (launches still pending hold the module).
  void BindVariables(uint64_t base, std::shared_ptr<void> keeper);
  // Where the variables live: 0 until bound.
  uint64_t variable_base() const { return variable_base_; }
  // The bytes of the module's constant variables (CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES).
  size_t constant_bytes() const { return constant_bytes_; }

  // The bytes the module was loaded from, exactly (sealed; phos hashes modules by content).
  const void* image_data() const { return image_.data(); }
  size_t image_size() const { return image_.size(); }

 private:
  Module() = default;
  static CUresult LoadImage(const unsigned char* image, size_t known_size, std::shared_ptr<Module>* out);
  CUresult ReadTable(const PhosSimModuleInfo* info);

  ImageFile image_;  // kept open while loaded: its descriptor number is part of the load path
  void* handle_ = nullptr;
  std::vector<Kernel> kernels_;
  std::unordered_map<std::string_view, size_t> by_name_;
  std::vector<ModuleVariableInfo> variables_;
  std::vector<void**> variable_slots_;  // where the module's code reads each variable's address
  std::unordered_map<std::string_view, size_t> variables_by_name_;
  size_t variable_storage_bytes_ = 0;
  size_t constant_bytes_ = 0;
  uint64_t variable_base_ = 0;
  std::shared_ptr<void> variable_storage_;  // released after the module's code is unloaded
};

}  // namespace phos::sim
