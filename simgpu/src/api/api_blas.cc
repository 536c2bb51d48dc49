// The exported cuBLAS entry points, under the names cublas_v2.h maps them to (cublasCreate ->
// cublasCreate_v2, ...), over the driver's cuBLAS handle registry (blas/blas_handle.h). Before
// cuInit there is none, and every call on a handle is CUBLAS_STATUS_NOT_INITIALIZED.
#include <cublas_v2.h>

#include "api/driver.h"
#include "blas/blas_handle.h"
#include "blas/blas_ops.h"
#include "blas/status_table.h"
#include "phos/base/log.h"

using namespace phos::sim;
using namespace phos::sim::blas;

namespace {

HandleRegistry* Handles() {
  Driver* d = Driver::Get();
  return d == nullptr ? nullptr : &d->blas_handles();
}

cublasStatus_t FindHandle(cublasHandle_t handle, std::shared_ptr<BlasHandle>* out) {
  HandleRegistry* handles = Handles();
  return handles == nullptr ? CUBLAS_STATUS_NOT_INITIALIZED : handles->Find(handle, out);
}

cublasStatus_t BeginCall(cublasHandle_t handle, BlasCall* out) {
  HandleRegistry* handles = Handles();
  return handles == nullptr ? CUBLAS_STATUS_NOT_INITIALIZED : handles->BeginCall(handle, out);
}

bool ValidMathMode(cublasMath_t mode) {
  switch (static_cast<int>(mode) & ~static_cast<int>(CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)) {
    case CUBLAS_DEFAULT_MATH:
    case CUBLAS_TENSOR_OP_MATH:
    case CUBLAS_PEDANTIC_MATH:
    case CUBLAS_TF32_TENSOR_OP_MATH:
    case CUBLAS_FP32_EMULATED_BF16X9_MATH:
    case CUBLAS_FP64_EMULATED_FIXEDPOINT_MATH:
      return true;
    default:
      return false;
  }
}

// fp32 accumulation in every variant; simgpu computes all of them in plain fp32.
bool Fp32Compute(cublasComputeType_t type) {
  return type == CUBLAS_COMPUTE_32F || type == CUBLAS_COMPUTE_32F_PEDANTIC ||
         type == CUBLAS_COMPUTE_32F_FAST_16F || type == CUBLAS_COMPUTE_32F_FAST_16BF ||
         type == CUBLAS_COMPUTE_32F_FAST_TF32;
}

cublasStatus_t Gemm(cublasHandle_t handle, GemmCall call, const float* alpha, const float* beta) {
  BlasCall bc;
  if (cublasStatus_t s = BeginCall(handle, &bc); s != CUBLAS_STATUS_SUCCESS) return s;
  // Pointer mode host (the only one served): the scalars are read now, as cuBLAS does.
  if (alpha == nullptr || beta == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  call.alpha = *alpha;
  call.beta = *beta;
  return EnqueueGemm(*bc.device, bc.handle->ctx, *bc.stream, call);
}

}  // namespace

extern "C" {

PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasCreate(cublasHandle_t* handle) {
  HandleRegistry* handles = Handles();
  return handles == nullptr ? CUBLAS_STATUS_NOT_INITIALIZED : handles->Create(handle);
}

PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasDestroy(cublasHandle_t handle) {
  HandleRegistry* handles = Handles();
  return handles == nullptr ? CUBLAS_STATUS_NOT_INITIALIZED : handles->Destroy(handle);
}

PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasGetVersion(cublasHandle_t handle, int* version) {
  std::shared_ptr<BlasHandle> h;
  if (cublasStatus_t s = FindHandle(handle, &h); s != CUBLAS_STATUS_SUCCESS) return s;
  if (version == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *version = CUBLAS_VERSION;
  return CUBLAS_STATUS_SUCCESS;
}

PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasGetProperty(libraryPropertyType type, int* value) {
  if (value == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  switch (type) {
    case MAJOR_VERSION:
      *value = CUBLAS_VER_MAJOR;
      return CUBLAS_STATUS_SUCCESS;
    case MINOR_VERSION:
      *value = CUBLAS_VER_MINOR;
      return CUBLAS_STATUS_SUCCESS;
    case PATCH_LEVEL:
      *value = CUBLAS_VER_PATCH;
      return CUBLAS_STATUS_SUCCESS;
    default:
      return CUBLAS_STATUS_INVALID_VALUE;
  }
}

PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasSetStream(cublasHandle_t handle, cudaStream_t stream) {
  // cudaStream_t and CUstream are the same type.
  HandleRegistry* handles = Handles();
  return handles == nullptr ? CUBLAS_STATUS_NOT_INITIALIZED : handles->SetStream(handle, stream);
}

PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasGetStream(cublasHandle_t handle, cudaStream_t* stream) {
  std::shared_ptr<BlasHandle> h;
  if (cublasStatus_t s = FindHandle(handle, &h); s != CUBLAS_STATUS_SUCCESS) return s;
  if (stream == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  std::lock_guard lock(h->mu);
  *stream = h->stream;
  return CUBLAS_STATUS_SUCCESS;
}

PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasGetPointerMode(cublasHandle_t handle,
                                                              cublasPointerMode_t* mode) {
  std::shared_ptr<BlasHandle> h;
  if (cublasStatus_t s = FindHandle(handle, &h); s != CUBLAS_STATUS_SUCCESS) return s;
  if (mode == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *mode = CUBLAS_POINTER_MODE_HOST;
  return CUBLAS_STATUS_SUCCESS;
}

PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasSetPointerMode(cublasHandle_t handle,
                                                              cublasPointerMode_t mode) {
  std::shared_ptr<BlasHandle> h;
  if (cublasStatus_t s = FindHandle(handle, &h); s != CUBLAS_STATUS_SUCCESS) return s;
  if (mode == CUBLAS_POINTER_MODE_HOST) return CUBLAS_STATUS_SUCCESS;
  if (mode != CUBLAS_POINTER_MODE_DEVICE) return CUBLAS_STATUS_INVALID_VALUE;
  PHOS_LOG_EVERY_SEC(Warn, "simgpu", 1, "cublasSetPointerMode: device pointer mode is not implemented");
  return CUBLAS_STATUS_NOT_SUPPORTED;
}

PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasGetMathMode(cublasHandle_t handle, cublasMath_t* mode) {
  std::shared_ptr<BlasHandle> h;
  if (cublasStatus_t s = FindHandle(handle, &h); s != CUBLAS_STATUS_SUCCESS) return s;
  if (mode == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  std::lock_guard lock(h->mu);
  *mode = h->math_mode;
  return CUBLAS_STATUS_SUCCESS;
}

PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  std::shared_ptr<BlasHandle> h;
  if (cublasStatus_t s = FindHandle(handle, &h); s != CUBLAS_STATUS_SUCCESS) return s;
  if (!ValidMathMode(mode)) return CUBLAS_STATUS_INVALID_VALUE;
  // Recorded and reported; results are plain fp32 whatever the mode (a departure in precision
  // only: tensor-op modes may round more on a GPU, never less).
  std::lock_guard lock(h->mu);
  h->math_mode = mode;
  return CUBLAS_STATUS_SUCCESS;
}

PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasSgemm(cublasHandle_t handle, cublasOperation_t transa,
                                                     cublasOperation_t transb, int m, int n, int k,
                                                     const float* alpha, const float* A, int lda,
                                                     const float* B, int ldb, const float* beta, float* C,
                                                     int ldc) {
  GemmCall call;
  call.transa = transa;
  call.transb = transb;
  call.m = m;
  call.n = n;
  call.k = k;
  call.a = A;
  call.lda = lda;
  call.b = B;
  call.ldb = ldb;
  call.c = C;
  call.ldc = ldc;
  return Gemm(handle, call, alpha, beta);
}

PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                                                      cublasOperation_t transb, int m, int n, int k,
                                                      const void* alpha, const void* A, cudaDataType Atype,
                                                      int lda, const void* B, cudaDataType Btype, int ldb,
                                                      const void* beta, void* C, cudaDataType Ctype, int ldc,
                                                      cublasComputeType_t computeType,
                                                      cublasGemmAlgo_t algo) {
  // The algorithm only selects among a GPU's kernels; simgpu has one.
  (void)algo;
  if (!Fp32Compute(computeType)) {
    PHOS_LOG_EVERY_SEC(Warn, "simgpu", 1, "cublasGemmEx: compute type {} is not implemented",
                       static_cast<int>(computeType));
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  GemmCall call;
  call.transa = transa;
  call.transb = transb;
  call.m = m;
  call.n = n;
  call.k = k;
  call.a = A;
  call.a_type = Atype;
  call.lda = lda;
  call.b = B;
  call.b_type = Btype;
  call.ldb = ldb;
  call.c = C;
  call.c_type = Ctype;
  call.ldc = ldc;
  // With an fp32 compute type alpha and beta are floats.
  return Gemm(handle, call, static_cast<const float*>(alpha), static_cast<const float*>(beta));
}

PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasSgemmStridedBatched(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
    const float* alpha, const float* A, int lda, long long int strideA, const float* B, int ldb,
    long long int strideB, const float* beta, float* C, int ldc, long long int strideC, int batchCount) {
  GemmCall call;
  call.transa = transa;
  call.transb = transb;
  call.m = m;
  call.n = n;
  call.k = k;
  call.a = A;
  call.lda = lda;
  call.stride_a = strideA;
  call.b = B;
  call.ldb = ldb;
  call.stride_b = strideB;
  call.c = C;
  call.ldc = ldc;
  call.stride_c = strideC;
  call.batch = batchCount;
  return Gemm(handle, call, alpha, beta);
}

PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasSgemv(cublasHandle_t handle, cublasOperation_t trans, int m,
                                                     int n, const float* alpha, const float* A, int lda,
                                                     const float* x, int incx, const float* beta, float* y,
                                                     int incy) {
  BlasCall bc;
  if (cublasStatus_t s = BeginCall(handle, &bc); s != CUBLAS_STATUS_SUCCESS) return s;
  if (alpha == nullptr || beta == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  GemvCall call;
  call.trans = trans;
  call.m = m;
  call.n = n;
  call.alpha = *alpha;
  call.beta = *beta;
  call.a = A;
  call.lda = lda;
  call.x = x;
  call.incx = incx;
  call.y = y;
  call.incy = incy;
  return EnqueueGemv(*bc.device, bc.handle->ctx, *bc.stream, call);
}

PHOS_SIM_API const char* CUBLASWINAPI cublasGetStatusName(cublasStatus_t status) {
  return phos::sim::blas::StatusName(status);
}

PHOS_SIM_API const char* CUBLASWINAPI cublasGetStatusString(cublasStatus_t status) {
  return phos::sim::blas::StatusString(status);
}

}  // extern "C"
