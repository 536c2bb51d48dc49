// The driver table (docs/design.md D2): every CUDA driver API, cuBLAS, cuBLASLt and NCCL entry point the
// daemon calls, resolved once by dlopen/dlsym — from NVIDIA's libcuda.so.1, libcublas.so.13 and
// libcublasLt.so.13, or from libphos-simgpu.so for all — under the names cuda.h and cublas_v2.h map them to (cuMemAlloc ->
// cuMemAlloc_v2). Runtime code calls `table->cuMemAlloc(...)` and never knows which it got.
#pragma once

#include <memory>
#include <string>

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda.h>
#include <nccl.h>

#include "phos/driver/cuda_check.h"
#include "phos/base/status.h"
#include "phos/simgpu/simgpu.h"

namespace phos::driver {

enum class GpuKind { kAuto, kCuda, kSim };

// "auto", "cuda", "sim"; InvalidArgument for anything else.
Result<GpuKind> ParseGpuKind(const std::string& name);
const char* GpuKindName(GpuKind kind);

struct DriverTableOptions {
  // Which driver to load. kAuto: NVIDIA's when libcuda.so.1 loads and cuInit succeeds, else
  // simgpu (logged). Default: kAuto.
  GpuKind gpu = GpuKind::kAuto;
  // libphos-simgpu.so for kSim. Empty: $PHOS_SIMGPU_LIBRARY, else ../lib/phos/libphos-simgpu.so next
  // to the executable. Default: empty.
  std::string simgpu_library;
  // NVIDIA's libraries for kCuda. Default: the sonames, found by the dynamic loader.
  std::string cuda_library = "libcuda.so.1";
  std::string cublas_library = "libcublas.so.13";
  // Whether the cuBLAS entry points must resolve. With false, a library without them still
  // opens and has_cublas() says false (cuBLAS calls are then refused as not supported).
  // Default: true.
  bool require_cublas = true;
  // NVIDIA's cuBLASLt for kCuda (kSim: the simgpu library). Optional: without it has_cublaslt()
  // says false, logged, and cublasLtMatmul is refused as not supported. Default: the soname.
  std::string cublaslt_library = "libcublasLt.so.13";
  // NVIDIA's NCCL for kCuda (kSim: the simgpu library). Default: the soname.
  std::string nccl_library = "libnccl.so.2";
  // Whether the NCCL entry points must resolve. With false, a missing library or symbol is
  // logged, has_nccl() says false and multi-GPU communicators are refused. Default: false.
  bool require_nccl = false;
};

#define PHOS_STR_INNER(x) #x
#define PHOS_STR(x) PHOS_STR_INNER(x)
// The exported name of an API call: the macro expansion cuda.h gives it ("cuMemAlloc_v2").
#define PHOS_SYM(x) PHOS_STR(x)

#define PHOS_DRIVER_ENTRY_POINTS(X)                                                              \
  X(cuInit) X(cuGetErrorName) X(cuGetErrorString) X(cuDriverGetVersion) X(cuDeviceGet)           \
  X(cuDeviceGetCount) X(cuDeviceGetAttribute) X(cuDeviceGetName) X(cuDeviceTotalMem)            \
  X(cuDeviceGetUuid) X(cuDeviceCanAccessPeer) X(cuCtxEnablePeerAccess)                          \
  X(cuCtxDisablePeerAccess)                                                                      \
  X(cuCtxCreate) X(cuCtxDestroy) X(cuCtxSetCurrent) X(cuCtxPushCurrent) X(cuCtxPopCurrent)       \
  X(cuCtxSynchronize) X(cuMemAlloc)                                                              \
  X(cuMemFree) X(cuMemHostAlloc) X(cuMemFreeHost) X(cuMemGetAddressRange) X(cuMemcpyHtoD)       \
  X(cuMemcpyHtoDAsync) X(cuMemcpyDtoH) X(cuMemGetInfo)                                           \
  X(cuMemcpyDtoHAsync) X(cuMemcpyDtoD) X(cuMemcpyDtoDAsync) X(cuMemsetD8) X(cuMemsetD8Async)    \
  X(cuMemsetD16) X(cuMemsetD16Async) X(cuMemsetD32) X(cuMemsetD32Async)                         \
  X(cuMemcpy2D) X(cuMemcpy2DAsync) X(cuMemsetD2D8) X(cuMemsetD2D8Async)                          \
  X(cuStreamCreate) X(cuStreamDestroy) X(cuStreamSynchronize) X(cuStreamQuery)                  \
  X(cuStreamCreateWithPriority) X(cuStreamGetPriority) X(cuStreamGetFlags)                      \
  X(cuCtxGetStreamPriorityRange) X(cuLaunchHostFunc) X(cuStreamWaitValue32) X(cuStreamWriteValue32) \
  X(cuStreamWaitEvent) X(cuEventCreate) X(cuEventDestroy) X(cuEventRecord)                      \
  X(cuEventSynchronize) X(cuEventQuery) X(cuEventElapsedTime) X(cuModuleLoadData)               \
  X(cuModuleUnload) X(cuModuleGetFunction) X(cuFuncGetParamInfo) X(cuLaunchKernel)                \
  X(cuModuleGetGlobal) X(cuFuncGetAttribute) X(cuFuncSetAttribute) X(cuFuncSetCacheConfig)        \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags) X(cuOccupancyAvailableDynamicSMemPerBlock) \
  X(cuLaunchKernelEx)                                                                            \
  X(cuMemAddressReserve) X(cuMemAddressFree) X(cuMemCreate) X(cuMemRelease) X(cuMemMap)          \
  X(cuMemUnmap) X(cuMemSetAccess) X(cuMemGetAllocationGranularity)                               \
  X(cuGraphCreate) X(cuGraphDestroy) X(cuGraphAddKernelNode) X(cuGraphAddMemcpyNode)             \
  X(cuGraphAddMemsetNode) X(cuGraphAddEmptyNode) X(cuGraphAddEventRecordNode)                    \
  X(cuGraphAddEventWaitNode) X(cuGraphInstantiate) X(cuGraphUpload) X(cuGraphLaunch)             \
  X(cuGraphExecDestroy) X(cuGraphExecKernelNodeSetParams) X(cuGraphExecUpdate)

// Handles, then Levels 1, 2 and 3 in S and D (GEMM of every type goes through the Ex calls below).
#define PHOS_CUBLAS_ENTRY_POINTS(X)                                                              \
  X(cublasCreate) X(cublasDestroy) X(cublasSetStream) X(cublasGetStream) X(cublasSetMathMode)    \
  X(cublasGetMathMode) X(cublasSetPointerMode)                                                   \
  X(cublasSaxpy) X(cublasDaxpy) X(cublasSdot) X(cublasDdot) X(cublasSnrm2) X(cublasDnrm2)       \
  X(cublasSscal) X(cublasDscal) X(cublasSasum) X(cublasDasum) X(cublasIsamax) X(cublasIdamax)   \
  X(cublasIsamin) X(cublasIdamin) X(cublasScopy) X(cublasDcopy) X(cublasSswap) X(cublasDswap)   \
  X(cublasSrot) X(cublasDrot)                                                                    \
  X(cublasSgemv) X(cublasDgemv) X(cublasSger) X(cublasDger) X(cublasSsymv) X(cublasDsymv)       \
  X(cublasStrsv) X(cublasDtrsv) X(cublasStrmv) X(cublasDtrmv)                                    \
  X(cublasStrsm) X(cublasDtrsm) X(cublasSsyrk) X(cublasDsyrk) X(cublasSgeam) X(cublasDgeam)     \
  X(cublasSdgmm) X(cublasDdgmm)

// What phosd's cublasLtMatmul needs: its own handle per context, and the descriptors it builds from
// a record for each call (the function's own descriptors live in its frontend).
#define PHOS_CUBLASLT_ENTRY_POINTS(X)                                                            \
  X(cublasLtCreate) X(cublasLtDestroy) X(cublasLtMatmulDescCreate) X(cublasLtMatmulDescDestroy)  \
  X(cublasLtMatmulDescSetAttribute) X(cublasLtMatrixLayoutCreate) X(cublasLtMatrixLayoutDestroy)  \
  X(cublasLtMatrixLayoutSetAttribute) X(cublasLtMatmul)

// simgpu's validation extensions (phos/simgpu/simgpu.h: guarded ranges). Optional: resolved when
// the driver library has them (simgpu), null on NVIDIA's driver; has_guards() says which.
// phosSimMemcpyHtoDAsyncGuarded may be missing from an older simgpu even when the rest is there.
#define PHOS_SIM_GUARD_ENTRY_POINTS(X)                                                           \
  X(phosSimGuardRange) X(phosSimUnguardRange) X(phosSimSetGuardHandler) X(phosSimWriteGuarded)

#define PHOS_NCCL_ENTRY_POINTS(X)                                                                \
  X(ncclGetUniqueId) X(ncclCommInitRank) X(ncclCommInitAll) X(ncclCommSplit) X(ncclCommDestroy)  \
  X(ncclCommAbort) X(ncclCommFinalize) X(ncclCommGetAsyncError)                                  \
  X(ncclCommCount) X(ncclCommUserRank) X(ncclAllReduce) X(ncclBroadcast) X(ncclAllGather)         \
  X(ncclReduceScatter) X(ncclReduce) X(ncclSend) X(ncclRecv) X(ncclRedOpCreatePreMulSum)         \
  X(ncclRedOpDestroy) X(ncclGroupStart) X(ncclGroupEnd)

class DriverTable {
 public:
  static Result<std::shared_ptr<DriverTable>> Open(const DriverTableOptions& options);
  ~DriverTable();
  DriverTable(const DriverTable&) = delete;
  DriverTable& operator=(const DriverTable&) = delete;

  GpuKind kind() const { return kind_; }        // kCuda or kSim, never kAuto
  const std::string& driver_path() const { return driver_path_; }
  bool has_cublas() const { return has_cublas_; }
  bool has_nccl() const { return has_nccl_; }
  bool has_cublaslt() const { return has_cublaslt_; }
  // The driver can guard device ranges (simgpu): the PHOS_SIM_GUARD_ENTRY_POINTS are set.
  bool has_guards() const { return phosSimGuardRange != nullptr; }
  // Wall time per unit of device time: simgpu's time scale (every modelled cost runs that many
  // times slower than the device it models), 1 on a real GPU. Deadlines for work the device does
  // are multiplied by it (docs/design.md D16). Needs cuInit first on simgpu; 1 before.
  double time_scale() const;
  const CuErrorText& error_text() const { return error_text_; }

#define PHOS_DECLARE_ENTRY(name) decltype(&::name) name = nullptr;
  PHOS_DRIVER_ENTRY_POINTS(PHOS_DECLARE_ENTRY)
  PHOS_CUBLAS_ENTRY_POINTS(PHOS_DECLARE_ENTRY)
  PHOS_NCCL_ENTRY_POINTS(PHOS_DECLARE_ENTRY)
  PHOS_CUBLASLT_ENTRY_POINTS(PHOS_DECLARE_ENTRY)
  PHOS_SIM_GUARD_ENTRY_POINTS(PHOS_DECLARE_ENTRY)
#undef PHOS_DECLARE_ENTRY
  // cublas_api.h overloads the GEMM Ex calls in C++ (inline wrappers taking a cudaDataType compute
  // type), so their types are spelled out: the exported C functions'. Every GEMM phosd runs is
  // one of these three, whatever its types (Sgemm, Dgemm, Cgemm, Zgemm and Hgemm included).
  using CublasGemmExFn = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                            const void*, const void*, cudaDataType, int, const void*, cudaDataType, int,
                                            const void*, void*, cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
  CublasGemmExFn cublasGemmEx = nullptr;
  using CublasGemmStridedBatchedExFn =
      cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*, const void*,
                         cudaDataType, int, long long int, const void*, cudaDataType, int, long long int, const void*,
                         void*, cudaDataType, int, long long int, int, cublasComputeType_t, cublasGemmAlgo_t);
  CublasGemmStridedBatchedExFn cublasGemmStridedBatchedEx = nullptr;
  using CublasGemmBatchedExFn = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                                   const void*, const void* const[], cudaDataType, int,
                                                   const void* const[], cudaDataType, int, const void*, void* const[],
                                                   cudaDataType, int, int, cublasComputeType_t, cublasGemmAlgo_t);
  CublasGemmBatchedExFn cublasGemmBatchedEx = nullptr;
  // A stream-ordered, paced host-to-device copy that may write guarded ranges without faulting
  // (simgpu only; null elsewhere): how a restore loads a buffer that stays guarded until ready.
  using SimMemcpyHtoDAsyncGuardedFn = CUresult (*)(CUdeviceptr dst, const void* src, size_t bytes, CUstream stream);
  SimMemcpyHtoDAsyncGuardedFn phosSimMemcpyHtoDAsyncGuarded = nullptr;
  // cuModuleLoadData told the image's size (simgpu only; null elsewhere): what the API server
  // loads a received simgpu image with, so the ELF reader never reads past it.
  using SimModuleLoadDataSizedFn = CUresult (*)(CUmodule* module, const void* image, size_t bytes);
  SimModuleLoadDataSizedFn phosSimModuleLoadDataSized = nullptr;
  // A guard of writes only (simgpu only, with the guard entry points; null elsewhere): how a soft
  // checkpoint catches a write to a buffer it has not copied yet.
  decltype(&::phosSimGuardRangeWrites) phosSimGuardRangeWrites = nullptr;
  // simgpu's configuration (phos/simgpu/simgpu.h); null on NVIDIA's driver.
  decltype(&::phosSimGetConfig) phosSimGetConfig = nullptr;
  // simgpu's device counters (phos/simgpu/simgpu.h); null on NVIDIA's driver.
  decltype(&::phosSimGetStats) phosSimGetStats = nullptr;
  decltype(&::phosSimGetEngineStats) phosSimGetEngineStats = nullptr;

 private:
  DriverTable() = default;
  Status Resolve(GpuKind kind, const std::string& driver, const std::string& cublas, bool require_cublas);
  // Optional unless `require`: a library without NCCL leaves has_nccl() false, logged.
  Status ResolveNccl(const std::string& library, bool require);
  // Always optional: a library without cuBLASLt leaves has_cublaslt() false, logged.
  void ResolveCublasLt(const std::string& library);

  GpuKind kind_ = GpuKind::kSim;
  std::string driver_path_;
  void* driver_handle_ = nullptr;
  void* cublas_handle_ = nullptr;
  bool has_cublas_ = false;
  void* nccl_handle_ = nullptr;
  bool has_nccl_ = false;
  void* cublaslt_handle_ = nullptr;
  bool has_cublaslt_ = false;
  CuErrorText error_text_;
};

}  // namespace phos::driver
