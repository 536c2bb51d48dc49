#include "module/module.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

#include "module/elf_image.h"
#include "phos/base/log.h"

namespace phos::sim {
namespace {

// Bounds on what a module table may claim, so that a corrupt one is rejected rather than trusted.
// 32764 bytes is CUDA's largest kernel parameter buffer (CUDA 12.1+, Volta and later), so no kernel
// has more parameters than that.
constexpr uint32_t kMaxKernels = 1 << 20;
constexpr uint32_t kMaxParams = 32764;
constexpr size_t kMaxNameLength = 1 << 16;
constexpr uint32_t kMaxVariables = 1 << 20;
// A module's variables together: far beyond any real module's globals, small enough that a
// corrupt table cannot make the loader ask for the whole device.
constexpr uint64_t kMaxVariableBytes = 1ull << 32;
constexpr uint64_t kMaxVariableAlignment = 4096;

CUresult RejectTable(const std::string& why) {
  PHOS_LOG(Warn, "simgpu", "module load: bad simgpu module table: {}", why);
  return CUDA_ERROR_INVALID_IMAGE;
}

}  // namespace

CUresult CheckLaunchGeometry(const LaunchGeometry& geometry, const LaunchLimits& limits) {
  uint64_t threads = 1;
  for (int i = 0; i < 3; ++i) {
    if (geometry.grid[i] == 0 || geometry.block[i] == 0) return CUDA_ERROR_INVALID_VALUE;
    if (geometry.grid[i] > limits.max_grid[i] || geometry.block[i] > limits.max_block[i]) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    threads *= geometry.block[i];
  }
  return threads > limits.max_threads_per_block ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

// ---- Kernel --------------------------------------------------------------------------------

Kernel::Kernel(std::string name, std::vector<KernelParam> params, PhosSimKernelEntry entry)
    : name_(std::move(name)), params_(std::move(params)), param_buffer_size_(0), entry_(entry) {
  for (const KernelParam& p : params_) param_buffer_size_ = std::max(param_buffer_size_, p.offset + p.size);
}

uint64_t Kernel::block_count(const LaunchGeometry& geometry) const {
  return uint64_t{geometry.grid[0]} * geometry.grid[1] * geometry.grid[2];
}

CUresult Kernel::GetParamInfo(size_t index, size_t* offset, size_t* size) const {
  if (offset == nullptr || index >= params_.size()) return CUDA_ERROR_INVALID_VALUE;
  *offset = params_[index].offset;
  if (size != nullptr) *size = params_[index].size;
  return CUDA_SUCCESS;
}

CUresult Kernel::CaptureArgs(void** kernel_params, void** extra, KernelArgs* out) const {
  if (out == nullptr || (kernel_params != nullptr && extra != nullptr)) return CUDA_ERROR_INVALID_VALUE;
  // Where each parameter's bytes are: in the packed `extra` buffer, or behind kernelParams[i].
  std::vector<const unsigned char*> sources(params_.size(), nullptr);
  if (extra != nullptr) {
    const unsigned char* buffer = nullptr;
    const size_t* buffer_size = nullptr;
    for (size_t i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
      if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) {
        buffer = static_cast<const unsigned char*>(extra[i + 1]);
      } else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) {
        buffer_size = static_cast<const size_t*>(extra[i + 1]);
      } else {
        return CUDA_ERROR_INVALID_VALUE;
      }
    }
    // cuda.h: a buffer without its size has no effect; a non-zero size needs its buffer.
    if (buffer_size != nullptr) {
      if (*buffer_size != 0 && buffer == nullptr) return CUDA_ERROR_INVALID_VALUE;
      if (buffer != nullptr) {
        if (*buffer_size < param_buffer_size_) return CUDA_ERROR_INVALID_VALUE;
        for (size_t i = 0; i < params_.size(); ++i) sources[i] = buffer + params_[i].offset;
      }
    }
  } else if (kernel_params != nullptr) {
    for (size_t i = 0; i < params_.size(); ++i)
      sources[i] = static_cast<const unsigned char*>(kernel_params[i]);
  }
  for (const unsigned char* source : sources) {
    if (source == nullptr) return CUDA_ERROR_INVALID_VALUE;  // no value given for a parameter
  }

  const size_t words = (param_buffer_size_ + sizeof(std::max_align_t) - 1) / sizeof(std::max_align_t);
  out->storage_.assign(words, std::max_align_t{});
  out->pointers_.resize(params_.size());
  auto* bytes = reinterpret_cast<unsigned char*>(out->storage_.data());
  for (size_t i = 0; i < params_.size(); ++i) {
    memcpy(bytes + params_[i].offset, sources[i], params_[i].size);
    out->pointers_[i] = bytes + params_[i].offset;
  }
  return CUDA_SUCCESS;
}

void Kernel::RunBlocks(const LaunchGeometry& geometry, void* const* args, uint64_t first,
                       uint64_t end) const {
  end = std::min(end, block_count(geometry));
  if (first >= end) return;
  PhosSimLaunchGeometry g;
  for (int i = 0; i < 3; ++i) {
    g.grid[i] = geometry.grid[i];
    g.block[i] = geometry.block[i];
  }
  entry_(&g, args, first, end);
}

// ---- Module --------------------------------------------------------------------------------

Module::~Module() {
  kernels_.clear();
  by_name_.clear();
  // Before the image file closes: its descriptor number is the name the object is loaded under.
  if (handle_ != nullptr) dlclose(handle_);
}

CUresult Module::Load(const void* image, std::shared_ptr<Module>* out) {
  if (image == nullptr || out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return LoadImage(static_cast<const unsigned char*>(image), 0, out);
}

CUresult Module::LoadSized(const void* image, size_t size, std::shared_ptr<Module>* out) {
  if (image == nullptr || out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (size == 0 || size > kMaxModuleImageSize) {
    PHOS_LOG(Warn, "simgpu", "module load: an image of {} bytes is not a module", size);
    return CUDA_ERROR_INVALID_IMAGE;
  }
  return LoadImage(static_cast<const unsigned char*>(image), size, out);
}

CUresult Module::LoadFile(const char* path, std::shared_ptr<Module>* out) {
  if (path == nullptr || out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    PHOS_LOG(Warn, "simgpu", "module load: cannot open '{}': {}", path, strerror(errno));
    return CUDA_ERROR_FILE_NOT_FOUND;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    PHOS_LOG(Warn, "simgpu", "module load: '{}' is not a regular file", path);
    return CUDA_ERROR_FILE_NOT_FOUND;
  }
  const auto size = static_cast<size_t>(st.st_size);
  if (size == 0 || size > kMaxModuleImageSize) {
    close(fd);
    PHOS_LOG(Warn, "simgpu", "module load: '{}' has {} bytes, not a module", path, size);
    return CUDA_ERROR_INVALID_IMAGE;
  }
  void* data = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (data == MAP_FAILED) {
    PHOS_LOG(Warn, "simgpu", "module load: cannot map '{}': {}", path, strerror(errno));
    return CUDA_ERROR_OPERATING_SYSTEM;
  }
  const CUresult result = LoadImage(static_cast<const unsigned char*>(data), size, out);
  munmap(data, size);
  return result;
}

CUresult Module::LoadImage(const unsigned char* image, size_t known_size, std::shared_ptr<Module>* out) {
  std::shared_ptr<Module> module(new Module());
  ImageFile& file = module->image_;
  if (CUresult r = file.Create(); r != CUDA_SUCCESS) return r;
  size_t size = 0;
  if (CUresult r = MeasureElfImage(image, known_size, &file, &size); r != CUDA_SUCCESS) return r;
  if (CUresult r = file.CopyIn(image, 0, size); r != CUDA_SUCCESS) return r;
  if (CUresult r = file.Seal(size); r != CUDA_SUCCESS) return r;
  std::string path;
  if (CUresult r = file.UniqueLoadPath(&path); r != CUDA_SUCCESS) return r;

  // RTLD_LOCAL: a module's symbols never serve another object. RTLD_NOW: an unresolved symbol
  // fails the load here, not in the middle of a kernel.
  module->handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (module->handle_ == nullptr) {
    const char* error = dlerror();
    PHOS_LOG(Warn, "simgpu", "module load: dlopen: {}", error != nullptr ? error : "unknown error");
    return CUDA_ERROR_INVALID_IMAGE;
  }
  dlerror();
  auto info_fn = reinterpret_cast<PhosSimModuleInfoFn>(dlsym(module->handle_, PHOS_SIM_MODULE_INFO_SYMBOL));
  if (info_fn == nullptr) {
    PHOS_LOG(Warn, "simgpu", "module load: the image is a shared object without {} (not a simgpu module)",
             PHOS_SIM_MODULE_INFO_SYMBOL);
    return CUDA_ERROR_INVALID_IMAGE;
  }
  if (CUresult r = module->ReadTable(info_fn()); r != CUDA_SUCCESS) return r;
  PHOS_LOG(Debug, "simgpu", "module loaded: {} bytes, {} kernels, {} variables", size, module->kernels_.size(),
           module->variables_.size());
  *out = std::move(module);
  return CUDA_SUCCESS;
}

CUresult Module::ReadTable(const PhosSimModuleInfo* info) {
  if (info == nullptr) return RejectTable("no table");
  if (info->abi_version != PHOS_SIM_MODULE_ABI_VERSION) {
    return RejectTable("ABI version " + std::to_string(info->abi_version) + ", this loader reads " +
                       std::to_string(PHOS_SIM_MODULE_ABI_VERSION));
  }
  if (info->kernel_count > kMaxKernels || (info->kernel_count != 0 && info->kernels == nullptr)) {
    return RejectTable("bad kernel count");
  }
  kernels_.reserve(info->kernel_count);
  for (uint32_t k = 0; k < info->kernel_count; ++k) {
    const PhosSimKernelInfo& in = info->kernels[k];
    const std::string where = "kernel #" + std::to_string(k);
    if (in.name == nullptr) {
      return RejectTable(where + " has no exported symbol (a kernel needs external linkage)");
    }
    const size_t name_length = strnlen(in.name, kMaxNameLength);
    if (name_length == 0 || name_length == kMaxNameLength) return RejectTable(where + " has a bad name");
    if (in.entry == nullptr) return RejectTable(where + " has no entry");
    if (in.param_count > kMaxParams ||
        (in.param_count != 0 && (in.param_offsets == nullptr || in.param_sizes == nullptr))) {
      return RejectTable(where + " has a bad parameter table");
    }
    std::vector<KernelParam> params(in.param_count);
    uint64_t end = 0;
    for (uint32_t i = 0; i < in.param_count; ++i) {
      const uint64_t offset = in.param_offsets[i], size = in.param_sizes[i];
      // In order, not overlapping, inside CUDA's largest parameter buffer.
      if (size == 0 || offset < end || offset > kMaxParams || size > kMaxParams - offset) {
        return RejectTable(where + " has a bad parameter layout");
      }
      params[i] = KernelParam{offset, size};
      end = offset + size;
    }
    kernels_.emplace_back(std::string(in.name, name_length), std::move(params), in.entry);
  }
  for (size_t i = 0; i < kernels_.size(); ++i) {
    if (!by_name_.emplace(kernels_[i].name(), i).second) {
      return RejectTable("kernel '" + kernels_[i].name() + "' is exported twice");
    }
  }
  if (info->variable_count > kMaxVariables || (info->variable_count != 0 && info->variables == nullptr)) {
    return RejectTable("bad variable count");
  }
  variables_.reserve(info->variable_count);
  for (uint32_t v = 0; v < info->variable_count; ++v) {
    const PhosSimVariableInfo& in = info->variables[v];
    const std::string where = "variable #" + std::to_string(v);
    if (in.name == nullptr) return RejectTable(where + " has no exported symbol (a variable needs external linkage)");
    const size_t name_length = strnlen(in.name, kMaxNameLength);
    if (name_length == 0 || name_length == kMaxNameLength) return RejectTable(where + " has a bad name");
    if (in.address == nullptr) return RejectTable(where + " has no address slot");
    if (in.alignment == 0 || (in.alignment & (in.alignment - 1)) != 0 || in.alignment > kMaxVariableAlignment) {
      return RejectTable(where + " has a bad alignment");
    }
    const uint64_t offset = (variable_storage_bytes_ + in.alignment - 1) / in.alignment * in.alignment;
    if (in.size == 0 || in.size > kMaxVariableBytes || offset > kMaxVariableBytes - in.size) {
      return RejectTable(where + " has a bad size");
    }
    variables_.push_back({std::string(in.name, name_length), in.size, offset, in.constant != 0});
    variable_slots_.push_back(in.address);
    variable_storage_bytes_ = offset + in.size;
    if (in.constant != 0) constant_bytes_ += in.size;
  }
  for (size_t i = 0; i < variables_.size(); ++i) {
    if (!variables_by_name_.emplace(variables_[i].name, i).second) {
      return RejectTable("variable '" + variables_[i].name + "' is exported twice");
    }
  }
  return CUDA_SUCCESS;
}

CUresult Module::GetVariable(const char* name, const ModuleVariableInfo** out) const {
  if (name == nullptr || out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const auto it = variables_by_name_.find(name);
  if (it == variables_by_name_.end()) return CUDA_ERROR_NOT_FOUND;
  *out = &variables_[it->second];
  return CUDA_SUCCESS;
}

void Module::BindVariables(uint64_t base, std::shared_ptr<void> keeper) {
  variable_base_ = base;
  variable_storage_ = std::move(keeper);
  for (size_t i = 0; i < variables_.size(); ++i) {
    *variable_slots_[i] = reinterpret_cast<void*>(base + variables_[i].offset);
  }
}

CUresult Module::GetFunction(const char* name, const Kernel** out) const {
  if (name == nullptr || out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const auto it = by_name_.find(name);
  if (it == by_name_.end()) return CUDA_ERROR_NOT_FOUND;
  *out = &kernels_[it->second];
  return CUDA_SUCCESS;
}

}  // namespace phos::sim
