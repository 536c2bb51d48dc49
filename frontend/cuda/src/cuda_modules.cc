// Modules and launches in the driver API. cuModuleLoadData sends the image through the runtime
// frontend's module path (Client::AddModule: chunks, sent again to a forked child's session) from
// a copy this library keeps until cuModuleUnload, and asks phosd how it loaded (kModuleLoadResult).
// phosd loads only images it can run: on simgpu a simgpu module it trusts (docs/design.md D17),
// on NVIDIA's driver a fatbin. Kernels are the runtime's KernelRefs; launches the runtime's
// records, their parameters checked by phosd as every launch's are.
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "cuda_internal.h"
#include "module/elf_image.h"
#include "module/image_file.h"

namespace ipc = phos::ipc;
using phos::frontend::Client;
using phos::frontend::KernelRef;
using phos::frontend::driver::NeedContext;

// A CUmodule: the module's id in the session and the image it was loaded from.
struct CUmod_st {
  uint64_t id = 0;
  std::vector<uint8_t> image;
};

// A CUfunction: a kernel of a module, as the session that resolved it knows it.
struct CUfunc_st {
  CUmod_st* module = nullptr;
  KernelRef kernel;
  uint64_t generation = 0;  // Client::session_generation() when resolved
};

namespace {

// The fatbin header nvcc and the driver lay out (fatbinary_section.h), and the wrapper around it
// that cuModuleLoadFatBinary may be given.
struct FatbinHeader {
  unsigned int magic;
  unsigned short version;
  unsigned short header_size;
  unsigned long long fat_size;
};
struct FatbinWrapper {
  int magic;
  int version;
  const unsigned long long* data;
  void* filename_or_fatbins;
};
constexpr unsigned int kFatbinMagic = 0xba55ed50;
constexpr int kFatbinWrapperMagic = 0x466243b1;

std::mutex g_mu;
std::set<const CUmod_st*> g_modules;
std::set<const CUfunc_st*> g_functions;

bool LiveModule(CUmodule m) {
  std::lock_guard lock(g_mu);
  return g_modules.contains(m);
}

// The image's bytes: a fatbin's size is in its header; any other image must be a simgpu module,
// whose extent its ELF headers give, measured as simgpu's loader measures it.
CUresult CopyImage(const void* image, std::vector<uint8_t>* out, bool* is_fatbin) {
  const auto* wrapper = static_cast<const FatbinWrapper*>(image);
  if (wrapper->magic == kFatbinWrapperMagic && wrapper->data != nullptr) image = wrapper->data;
  const auto* header = static_cast<const FatbinHeader*>(image);
  if (header->magic == kFatbinMagic) {
    const uint64_t size = static_cast<uint64_t>(header->header_size) + header->fat_size;
    if (size > ipc::kMaxModuleBytes) return CUDA_ERROR_INVALID_IMAGE;
    const auto* p = static_cast<const uint8_t*>(image);
    out->assign(p, p + size);
    *is_fatbin = true;
    return CUDA_SUCCESS;
  }
  phos::sim::ImageFile file;
  size_t size = 0;
  if (CUresult r = file.Create(); r != CUDA_SUCCESS) return r;
  if (CUresult r = phos::sim::MeasureElfImage(static_cast<const unsigned char*>(image), 0, &file, &size);
      r != CUDA_SUCCESS) {
    return r;
  }
  const auto* p = static_cast<const uint8_t*>(image);
  out->assign(p, p + size);
  *is_fatbin = false;
  return CUDA_SUCCESS;
}

CUresult HandleCall(ipc::Op op, uint64_t id) {
  ipc::HandleArgs a{id};
  return Client::Get().Call(op, &a, sizeof(a), nullptr, 0, true);
}

CUresult Load(CUmodule* module, const void* image) {
  if (module == nullptr || image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = NeedContext(); r != CUDA_SUCCESS) return r;
  auto m = std::make_unique<CUmod_st>();
  bool is_fatbin = false;
  if (CUresult r = CopyImage(image, &m->image, &is_fatbin); r != CUDA_SUCCESS) return r;
  Client& client = Client::Get();
  m->id = client.AddModule(m->image.data(), m->image.size(), is_fatbin);
  if (CUresult r = client.FlushModules(); r != CUDA_SUCCESS) {
    client.ForgetModule(m->id);
    return r;
  }
  if (CUresult r = HandleCall(ipc::Op::kModuleLoadResult, m->id); r != CUDA_SUCCESS) {
    // Nothing of an image that did not load stays in the session.
    HandleCall(ipc::Op::kModuleUnload, m->id);
    client.ForgetModule(m->id);
    return r;
  }
  std::lock_guard lock(g_mu);
  g_modules.insert(m.get());
  *module = m.release();
  return CUDA_SUCCESS;
}

// The function's kernel in the current session: resolved again by name after a fork, whose
// child's session issued other handles.
CUresult Kernel(CUfunction f, KernelRef* out) {
  {
    std::lock_guard lock(g_mu);
    if (!g_functions.contains(f)) return CUDA_ERROR_INVALID_HANDLE;
  }
  const uint64_t generation = Client::Get().session_generation();
  if (f->generation != generation) {
    if (CUresult r = phos::frontend::FetchKernel(f->module->id, f->kernel.name, &f->kernel); r != CUDA_SUCCESS) return r;
    f->generation = generation;
  }
  *out = f->kernel;
  return CUDA_SUCCESS;
}

// The parameter buffer of `extra` (CU_LAUNCH_PARAM_BUFFER_POINTER and _SIZE, then
// CU_LAUNCH_PARAM_END): exactly the kernel's parameter bytes.
CUresult ExtraBuffer(void** extra, const KernelRef& k, uint8_t* buffer) {
  const void* pointer = nullptr;
  const size_t* size = nullptr;
  for (size_t i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
    if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) {
      pointer = extra[i + 1];
    } else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) {
      size = static_cast<const size_t*>(extra[i + 1]);
    } else {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  if (pointer == nullptr || size == nullptr || *size != k.param_bytes) return CUDA_ERROR_INVALID_VALUE;
  std::memcpy(buffer, pointer, k.param_bytes);
  return CUDA_SUCCESS;
}

}  // namespace

extern "C" {

CUresult cuModuleLoadData(CUmodule* module, const void* image) { return Load(module, image); }

// The JIT options concern compiling PTX, which neither a simgpu module nor a fatbin holding the
// device's binary needs: they are read by the driver only where it compiles.
CUresult cuModuleLoadDataEx(CUmodule* module, const void* image, unsigned int count, CUjit_option* options,
                            void** values) {
  if (count != 0 && (options == nullptr || values == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  return Load(module, image);
}

CUresult cuModuleLoadFatBinary(CUmodule* module, const void* fatbin) { return Load(module, fatbin); }

CUresult cuModuleUnload(CUmodule module) {
  if (CUresult r = NeedContext(); r != CUDA_SUCCESS) return r;
  {
    std::lock_guard lock(g_mu);
    if (!g_modules.erase(module)) return CUDA_ERROR_INVALID_HANDLE;
    std::erase_if(g_functions, [module](const CUfunc_st* f) {
      if (f->module != module) return false;
      delete f;
      return true;
    });
  }
  CUresult r = HandleCall(ipc::Op::kModuleUnload, module->id);
  Client::Get().ForgetModule(module->id);
  delete module;
  return r;
}

CUresult cuModuleGetFunction(CUfunction* function, CUmodule module, const char* name) {
  if (function == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = NeedContext(); r != CUDA_SUCCESS) return r;
  if (!LiveModule(module)) return CUDA_ERROR_INVALID_HANDLE;
  auto f = std::make_unique<CUfunc_st>();
  f->module = module;
  f->generation = Client::Get().session_generation();
  if (CUresult r = phos::frontend::FetchKernel(module->id, name, &f->kernel); r != CUDA_SUCCESS) return r;
  std::lock_guard lock(g_mu);
  g_functions.insert(f.get());
  *function = f.release();
  return CUDA_SUCCESS;
}

CUresult cuModuleGetGlobal(CUdeviceptr* address, size_t* bytes, CUmodule module, const char* name) {
  if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = NeedContext(); r != CUDA_SUCCESS) return r;
  if (!LiveModule(module)) return CUDA_ERROR_INVALID_HANDLE;
  const size_t length = std::strlen(name);
  if (length == 0 || length > ipc::kMaxNameBytes) return CUDA_ERROR_INVALID_VALUE;
  ipc::FunctionGetArgs a{module->id, static_cast<uint32_t>(length), 0};
  ipc::GlobalInfo info{};
  size_t got = 0;
  CUresult r = Client::Get().Call(ipc::Op::kModuleGlobalGet, &a, sizeof(a), name, length, true, &info, sizeof(info), &got);
  if (r != CUDA_SUCCESS) return r;
  if (got != sizeof(info)) return CUDA_ERROR_UNKNOWN;
  if (address != nullptr) *address = info.address;
  if (bytes != nullptr) *bytes = info.bytes;
  return CUDA_SUCCESS;
}

CUresult cuFuncGetAttribute(int* value, CUfunction_attribute attribute, CUfunction function) {
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = NeedContext(); r != CUDA_SUCCESS) return r;
  int index = 0;
  std::memcpy(&index, &attribute, sizeof(index));  // any integer a C caller passed
  if (index < 0 || index >= static_cast<int>(ipc::kFunctionAttributeSlots)) return CUDA_ERROR_INVALID_VALUE;
  KernelRef k;
  if (CUresult r = Kernel(function, &k); r != CUDA_SUCCESS) return r;
  ipc::FunctionArgs a{k.function};
  ipc::FunctionAttributes attributes{};
  size_t got = 0;
  CUresult r = Client::Get().Call(ipc::Op::kFuncGetAttributes, &a, sizeof(a), nullptr, 0, true, &attributes,
                                  sizeof(attributes), &got);
  if (r != CUDA_SUCCESS) return r;
  if (got != sizeof(attributes)) return CUDA_ERROR_UNKNOWN;
  if (attributes.results[index] != CUDA_SUCCESS) return static_cast<CUresult>(attributes.results[index]);
  *value = attributes.values[index];
  return CUDA_SUCCESS;
}

CUresult cuLaunchKernel(CUfunction function, unsigned int grid_x, unsigned int grid_y, unsigned int grid_z,
                        unsigned int block_x, unsigned int block_y, unsigned int block_z, unsigned int shared,
                        CUstream stream, void** params, void** extra) {
  if (CUresult r = NeedContext(); r != CUDA_SUCCESS) return r;
  if (grid_x == 0 || grid_y == 0 || grid_z == 0 || block_x == 0 || block_y == 0 || block_z == 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (params != nullptr && extra != nullptr) return CUDA_ERROR_INVALID_VALUE;
  KernelRef k;
  if (CUresult r = Kernel(function, &k); r != CUDA_SUCCESS) return r;
  alignas(16) uint8_t buffer[ipc::kMaxParamBytes];
  if (extra != nullptr) {
    if (CUresult r = ExtraBuffer(extra, k, buffer); r != CUDA_SUCCESS) return r;
  } else if (!phos::frontend::PackArguments(k, params, buffer)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  ipc::LaunchArgs a{k.function, 0, {grid_x, grid_y, grid_z}, {block_x, block_y, block_z}, shared, k.param_bytes};
  if (CUresult r = phos::frontend::driver::StreamId(stream, &a.stream); r != CUDA_SUCCESS) return r;
  return Client::Get().Call(ipc::Op::kLaunch, &a, sizeof(a), buffer, k.param_bytes, false);
}

}  // extern "C"
