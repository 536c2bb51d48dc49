#include "phos/driver/driver_table.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include <fmt/core.h>

#include "phos/base/layout.h"
#include "phos/base/log.h"

namespace phos::driver {
namespace {

std::string DefaultSimgpuLibrary() {
  if (const char* env = std::getenv("PHOS_SIMGPU_LIBRARY"); env != nullptr && *env != '\0') return env;
  const std::filesystem::path dir = layout::LibDirOfExecutable();
  if (dir.empty()) return layout::kSimgpuLibrary;
  return (dir / layout::kSimgpuLibrary).string();
}

Result<void*> Load(const std::string& path) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return Status::NotFound(fmt::format("cannot load {}: {}", path, why != nullptr ? why : "unknown error"));
  }
  return handle;
}

}  // namespace

Result<GpuKind> ParseGpuKind(const std::string& name) {
  if (name == "auto") return GpuKind::kAuto;
  if (name == "cuda") return GpuKind::kCuda;
  if (name == "sim") return GpuKind::kSim;
  return Status::InvalidArgument(fmt::format("unknown GPU kind '{}' (expected auto, cuda or sim)", name));
}

const char* GpuKindName(GpuKind kind) {
  switch (kind) {
    case GpuKind::kAuto: return "auto";
    case GpuKind::kCuda: return "cuda";
    case GpuKind::kSim: return "sim";
  }
  return "?";
}

double DriverTable::time_scale() const {
  PhosSimConfig config{};
  if (phosSimGetConfig == nullptr || phosSimGetConfig(&config) != CUDA_SUCCESS || !(config.time_scale > 0)) return 1.0;
  return config.time_scale;
}

DriverTable::~DriverTable() {
  // Never dlclose: driver threads (simgpu's engines, NVIDIA's) may outlive the table's owner.
}

Status DriverTable::Resolve(GpuKind kind, const std::string& driver, const std::string& cublas, bool require_cublas) {
  kind_ = kind;
  driver_path_ = driver;
  PHOS_ASSIGN_OR_RETURN(driver_handle_, Load(driver));
#define PHOS_RESOLVE_DRIVER(name)                                                                      \
  name = reinterpret_cast<decltype(name)>(dlsym(driver_handle_, PHOS_SYM(name)));                      \
  if (name == nullptr) return Status::NotFound(fmt::format("{} has no symbol {}", driver, PHOS_SYM(name)));
  PHOS_DRIVER_ENTRY_POINTS(PHOS_RESOLVE_DRIVER)
#undef PHOS_RESOLVE_DRIVER
#define PHOS_RESOLVE_OPTIONAL(name) name = reinterpret_cast<decltype(name)>(dlsym(driver_handle_, #name));
  PHOS_SIM_GUARD_ENTRY_POINTS(PHOS_RESOLVE_OPTIONAL)
  PHOS_RESOLVE_OPTIONAL(phosSimMemcpyHtoDAsyncGuarded)
  PHOS_RESOLVE_OPTIONAL(phosSimGetConfig)
  PHOS_RESOLVE_OPTIONAL(phosSimGetStats)
  PHOS_RESOLVE_OPTIONAL(phosSimGetEngineStats)
  PHOS_RESOLVE_OPTIONAL(phosSimModuleLoadDataSized)
  PHOS_RESOLVE_OPTIONAL(phosSimGuardRangeWrites)
#undef PHOS_RESOLVE_OPTIONAL
  if (phosSimGuardRange == nullptr || phosSimUnguardRange == nullptr || phosSimSetGuardHandler == nullptr ||
      phosSimWriteGuarded == nullptr) {
#define PHOS_CLEAR_OPTIONAL(name) name = nullptr;
    PHOS_SIM_GUARD_ENTRY_POINTS(PHOS_CLEAR_OPTIONAL)
#undef PHOS_CLEAR_OPTIONAL
    phosSimMemcpyHtoDAsyncGuarded = nullptr;
    phosSimGuardRangeWrites = nullptr;
  }
  error_text_.get_name = cuGetErrorName;
  error_text_.get_string = cuGetErrorString;

  Result<void*> blas = cublas == driver ? Result<void*>(driver_handle_) : Load(cublas);
  if (!blas.ok()) {
    if (require_cublas) return blas.status();
    PHOS_LOG(Warn, "runtime", "cuBLAS unavailable, its calls will be refused: {}", blas.status().message());
    return Status::Ok();
  }
  cublas_handle_ = *blas;
  std::string missing;
#define PHOS_RESOLVE_CUBLAS(name)                                                     \
  name = reinterpret_cast<decltype(name)>(dlsym(cublas_handle_, PHOS_SYM(name)));     \
  if (name == nullptr && missing.empty()) missing = PHOS_SYM(name);
  PHOS_CUBLAS_ENTRY_POINTS(PHOS_RESOLVE_CUBLAS)
  PHOS_RESOLVE_CUBLAS(cublasGemmEx)
  PHOS_RESOLVE_CUBLAS(cublasGemmStridedBatchedEx)
  PHOS_RESOLVE_CUBLAS(cublasGemmBatchedEx)
#undef PHOS_RESOLVE_CUBLAS
  if (!missing.empty()) {
    Status s = Status::NotFound(fmt::format("{} has no symbol {}", cublas, missing));
    if (require_cublas) return s;
    PHOS_LOG(Warn, "runtime", "cuBLAS unavailable, its calls will be refused: {}", s.message());
#define PHOS_CLEAR_CUBLAS(name) name = nullptr;
    PHOS_CUBLAS_ENTRY_POINTS(PHOS_CLEAR_CUBLAS)
    PHOS_CLEAR_CUBLAS(cublasGemmEx)
    PHOS_CLEAR_CUBLAS(cublasGemmStridedBatchedEx)
    PHOS_CLEAR_CUBLAS(cublasGemmBatchedEx)
#undef PHOS_CLEAR_CUBLAS
    return Status::Ok();
  }
  has_cublas_ = true;
  return Status::Ok();
}

Status DriverTable::ResolveNccl(const std::string& library, bool require) {
  Result<void*> lib = library == driver_path_ ? Result<void*>(driver_handle_) : Load(library);
  std::string missing;
  if (lib.ok()) {
    nccl_handle_ = *lib;
#define PHOS_RESOLVE_NCCL(name)                                                    \
  name = reinterpret_cast<decltype(name)>(dlsym(nccl_handle_, PHOS_SYM(name)));    \
  if (name == nullptr && missing.empty()) missing = PHOS_SYM(name);
    PHOS_NCCL_ENTRY_POINTS(PHOS_RESOLVE_NCCL)
#undef PHOS_RESOLVE_NCCL
  }
  Status s = !lib.ok() ? lib.status()
             : missing.empty() ? Status::Ok()
                               : Status::NotFound(fmt::format("{} has no symbol {}", library, missing));
  if (s.ok()) {
    has_nccl_ = true;
    return s;
  }
  if (require) return s;
#define PHOS_CLEAR_NCCL(name) name = nullptr;
  PHOS_NCCL_ENTRY_POINTS(PHOS_CLEAR_NCCL)
#undef PHOS_CLEAR_NCCL
  PHOS_LOG(Warn, "runtime", "NCCL unavailable, multi-GPU communicators will be refused: {}", s.message());
  return Status::Ok();
}

void DriverTable::ResolveCublasLt(const std::string& library) {
  Result<void*> lib = library == driver_path_ ? Result<void*>(driver_handle_) : Load(library);
  std::string missing;
  if (lib.ok()) {
    cublaslt_handle_ = *lib;
#define PHOS_RESOLVE_CUBLASLT(name)                                                    \
  name = reinterpret_cast<decltype(name)>(dlsym(cublaslt_handle_, PHOS_SYM(name)));    \
  if (name == nullptr && missing.empty()) missing = PHOS_SYM(name);
    PHOS_CUBLASLT_ENTRY_POINTS(PHOS_RESOLVE_CUBLASLT)
#undef PHOS_RESOLVE_CUBLASLT
  }
  if (lib.ok() && missing.empty()) {
    has_cublaslt_ = true;
    return;
  }
#define PHOS_CLEAR_CUBLASLT(name) name = nullptr;
  PHOS_CUBLASLT_ENTRY_POINTS(PHOS_CLEAR_CUBLASLT)
#undef PHOS_CLEAR_CUBLASLT
  PHOS_LOG(Warn, "runtime", "cuBLASLt unavailable, cublasLtMatmul will be refused: {}",
           lib.ok() ? fmt::format("{} has no symbol {}", library, missing) : lib.status().message());
}

Result<std::shared_ptr<DriverTable>> DriverTable::Open(const DriverTableOptions& options) {
  std::shared_ptr<DriverTable> table(new DriverTable());
  std::string sim = options.simgpu_library.empty() ? DefaultSimgpuLibrary() : options.simgpu_library;
  if (options.gpu == GpuKind::kCuda) {
    PHOS_RETURN_IF_ERROR(table->Resolve(GpuKind::kCuda, options.cuda_library, options.cublas_library, options.require_cublas)
                             .WithContext("driver table (--gpu=cuda)"));
  } else if (options.gpu == GpuKind::kSim) {
    PHOS_RETURN_IF_ERROR(table->Resolve(GpuKind::kSim, sim, sim, options.require_cublas).WithContext("driver table (--gpu=sim)"));
  } else {
    Status cuda = table->Resolve(GpuKind::kCuda, options.cuda_library, options.cublas_library, options.require_cublas);
    if (cuda.ok()) {
      CUresult r = table->cuInit(0);
      if (r == CUDA_SUCCESS) {
        PHOS_RETURN_IF_ERROR(table->ResolveNccl(options.nccl_library, options.require_nccl).WithContext("driver table (--gpu=auto)"));
        table->ResolveCublasLt(options.cublaslt_library);
        PHOS_LOG(Info, "runtime", "GPU: NVIDIA driver {} (auto)", options.cuda_library);
        return table;
      }
      cuda = CuStatus(r, "cuInit(0)", table->error_text());
    }
    PHOS_LOG(Info, "runtime", "GPU: simgpu {} (auto; no usable NVIDIA driver: {})", sim, cuda.message());
    table.reset(new DriverTable());
    PHOS_RETURN_IF_ERROR(table->Resolve(GpuKind::kSim, sim, sim, options.require_cublas).WithContext("driver table (--gpu=auto)"));
    PHOS_RETURN_IF_ERROR(table->ResolveNccl(sim, options.require_nccl).WithContext("driver table (--gpu=auto)"));
    table->ResolveCublasLt(sim);
    return table;
  }
  const std::string& nccl = table->kind_ == GpuKind::kSim ? sim : options.nccl_library;
  PHOS_RETURN_IF_ERROR(table->ResolveNccl(nccl, options.require_nccl).WithContext("driver table"));
  table->ResolveCublasLt(table->kind_ == GpuKind::kSim ? sim : options.cublaslt_library);
  PHOS_LOG(Info, "runtime", "GPU: {} from {}", GpuKindName(table->kind_), table->driver_path_);
  return table;
}

}  // namespace phos::driver
