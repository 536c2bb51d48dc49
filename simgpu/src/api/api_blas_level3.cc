// The exported cuBLAS Level 3 routines: every GEMM (S, D, C, Z, H, the Ex forms, their strided and
// pointer-array batches) as one GemmCall, and trsm, syrk, geam and dgmm in S and D as Level3Calls
// (blas/blas_ops.h), run on the handle's stream in the handle's pointer mode.
#include <cublas_v2.h>

#include "api/blas_calls.h"

using namespace phos::sim;
using namespace phos::sim::blas;

namespace {

// One GEMM (batch 1) of matrices of `type` computed in `compute`; the caller sets batches. `c` is C,
// or for a pointer-array batch the array (itself only read) of the C matrices.
GemmCall Gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void* alpha,
              const void* a, cudaDataType a_type, int lda, const void* b, cudaDataType b_type, int ldb,
              const void* beta, const void* c, cudaDataType c_type, int ldc, cublasComputeType_t compute) {
  GemmCall call;
  call.transa = ta;
  call.transb = tb;
  call.m = m;
  call.n = n;
  call.k = k;
  call.alpha = alpha;
  call.beta = beta;
  call.a = a;
  call.a_type = a_type;
  call.lda = lda;
  call.b = b;
  call.b_type = b_type;
  call.ldb = ldb;
  call.c = const_cast<void*>(c);
  call.c_type = c_type;
  call.ldc = ldc;
  call.compute = compute;
  return call;
}

GemmCall Strided(GemmCall call, long long sa, long long sb, long long sc, int batch) {
  call.stride_a = sa;
  call.stride_b = sb;
  call.stride_c = sc;
  call.batch = batch;
  return call;
}

GemmCall Arrays(GemmCall call, int batch) {
  call.batch = batch;
  call.pointer_arrays = true;
  return call;
}

template <typename T>
constexpr cudaDataType kType = sizeof(T) == sizeof(float) ? CUDA_R_32F : CUDA_R_64F;

template <typename T>
cublasStatus_t Trsm(cublasHandle_t h, cublasSideMode_t side, cublasFillMode_t uplo, cublasOperation_t trans,
                    cublasDiagType_t diag, int m, int n, const T* alpha, const T* a, int lda, T* b, int ldb) {
  return RunLevel3(h, {.routine = Level3::kTrsm,
                       .type = kType<T>,
                       .side = side,
                       .uplo = uplo,
                       .transa = trans,
                       .diag = diag,
                       .m = m,
                       .n = n,
                       .alpha = alpha,
                       .a = a,
                       .lda = lda,
                       .b = b,
                       .ldb = ldb});
}

template <typename T>
cublasStatus_t Syrk(cublasHandle_t h, cublasFillMode_t uplo, cublasOperation_t trans, int n, int k,
                    const T* alpha, const T* a, int lda, const T* beta, T* c, int ldc) {
  return RunLevel3(h, {.routine = Level3::kSyrk,
                       .type = kType<T>,
                       .uplo = uplo,
                       .transa = trans,
                       .n = n,
                       .k = k,
                       .alpha = alpha,
                       .beta = beta,
                       .a = a,
                       .lda = lda,
                       .c = c,
                       .ldc = ldc});
}

template <typename T>
cublasStatus_t Geam(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                    const T* alpha, const T* a, int lda, const T* beta, const T* b, int ldb, T* c, int ldc) {
  return RunLevel3(h, {.routine = Level3::kGeam,
                       .type = kType<T>,
                       .transa = ta,
                       .transb = tb,
                       .m = m,
                       .n = n,
                       .alpha = alpha,
                       .beta = beta,
                       .a = a,
                       .lda = lda,
                       .b = const_cast<T*>(b),
                       .ldb = ldb,
                       .c = c,
                       .ldc = ldc});
}

template <typename T>
cublasStatus_t Dgmm(cublasHandle_t h, cublasSideMode_t side, int m, int n, const T* a, int lda, const T* x,
                    int incx, T* c, int ldc) {
  return RunLevel3(h, {.routine = Level3::kDgmm,
                       .type = kType<T>,
                       .side = side,
                       .m = m,
                       .n = n,
                       .a = a,
                       .lda = lda,
                       .b = const_cast<T*>(x),
                       .ldb = incx,
                       .c = c,
                       .ldc = ldc});
}

}  // namespace

extern "C" {

// ---- GEMM ------------------------------------------------------------------------------------

PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasSgemm(cublasHandle_t h, cublasOperation_t ta,
                                                     cublasOperation_t tb, int m, int n, int k,
                                                     const float* alpha, const float* a, int lda,
                                                     const float* b, int ldb, const float* beta, float* c,
                                                     int ldc) {
  return RunGemm(h, Gemm(ta, tb, m, n, k, alpha, a, CUDA_R_32F, lda, b, CUDA_R_32F, ldb, beta, c, CUDA_R_32F,
                         ldc, CUBLAS_COMPUTE_32F));
}
PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasDgemm(cublasHandle_t h, cublasOperation_t ta,
                                                     cublasOperation_t tb, int m, int n, int k,
                                                     const double* alpha, const double* a, int lda,
                                                     const double* b, int ldb, const double* beta, double* c,
                                                     int ldc) {
  return RunGemm(h, Gemm(ta, tb, m, n, k, alpha, a, CUDA_R_64F, lda, b, CUDA_R_64F, ldb, beta, c, CUDA_R_64F,
                         ldc, CUBLAS_COMPUTE_64F));
}
PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasCgemm(cublasHandle_t h, cublasOperation_t ta,
                                                     cublasOperation_t tb, int m, int n, int k,
                                                     const cuComplex* alpha, const cuComplex* a, int lda,
                                                     const cuComplex* b, int ldb, const cuComplex* beta,
                                                     cuComplex* c, int ldc) {
  return RunGemm(h, Gemm(ta, tb, m, n, k, alpha, a, CUDA_C_32F, lda, b, CUDA_C_32F, ldb, beta, c, CUDA_C_32F,
                         ldc, CUBLAS_COMPUTE_32F));
}
PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasZgemm(cublasHandle_t h, cublasOperation_t ta,
                                                     cublasOperation_t tb, int m, int n, int k,
                                                     const cuDoubleComplex* alpha, const cuDoubleComplex* a,
                                                     int lda, const cuDoubleComplex* b, int ldb,
                                                     const cuDoubleComplex* beta, cuDoubleComplex* c,
                                                     int ldc) {
  return RunGemm(h, Gemm(ta, tb, m, n, k, alpha, a, CUDA_C_64F, lda, b, CUDA_C_64F, ldb, beta, c, CUDA_C_64F,
                         ldc, CUBLAS_COMPUTE_64F));
}
PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasHgemm(cublasHandle_t h, cublasOperation_t ta,
                                                     cublasOperation_t tb, int m, int n, int k,
                                                     const __half* alpha, const __half* a, int lda,
                                                     const __half* b, int ldb, const __half* beta, __half* c,
                                                     int ldc) {
  return RunGemm(h, Gemm(ta, tb, m, n, k, alpha, a, CUDA_R_16F, lda, b, CUDA_R_16F, ldb, beta, c, CUDA_R_16F,
                         ldc, CUBLAS_COMPUTE_16F));
}

// The algorithm only selects among a GPU's kernels; simgpu has one.
PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasGemmEx(cublasHandle_t h, cublasOperation_t ta,
                                                      cublasOperation_t tb, int m, int n, int k,
                                                      const void* alpha, const void* a, cudaDataType a_type,
                                                      int lda, const void* b, cudaDataType b_type, int ldb,
                                                      const void* beta, void* c, cudaDataType c_type, int ldc,
                                                      cublasComputeType_t compute, cublasGemmAlgo_t) {
  return RunGemm(h,
                 Gemm(ta, tb, m, n, k, alpha, a, a_type, lda, b, b_type, ldb, beta, c, c_type, ldc, compute));
}

PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasGemmStridedBatchedEx(
    cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void* alpha,
    const void* a, cudaDataType a_type, int lda, long long int stride_a, const void* b, cudaDataType b_type,
    int ldb, long long int stride_b, const void* beta, void* c, cudaDataType c_type, int ldc,
    long long int stride_c, int batch, cublasComputeType_t compute, cublasGemmAlgo_t) {
  return RunGemm(
      h, Strided(Gemm(ta, tb, m, n, k, alpha, a, a_type, lda, b, b_type, ldb, beta, c, c_type, ldc, compute),
                 stride_a, stride_b, stride_c, batch));
}

PHOS_SIM_API cublasStatus_t CUBLASWINAPI
cublasGemmBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                    const void* alpha, const void* const a[], cudaDataType a_type, int lda,
                    const void* const b[], cudaDataType b_type, int ldb, const void* beta, void* const c[],
                    cudaDataType c_type, int ldc, int batch, cublasComputeType_t compute, cublasGemmAlgo_t) {
  return RunGemm(
      h, Arrays(Gemm(ta, tb, m, n, k, alpha, a, a_type, lda, b, b_type, ldb, beta, c, c_type, ldc, compute),
                batch));
}

PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasSgemmStridedBatched(
    cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float* alpha,
    const float* a, int lda, long long int stride_a, const float* b, int ldb, long long int stride_b,
    const float* beta, float* c, int ldc, long long int stride_c, int batch) {
  return RunGemm(h, Strided(Gemm(ta, tb, m, n, k, alpha, a, CUDA_R_32F, lda, b, CUDA_R_32F, ldb, beta, c,
                                 CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F),
                            stride_a, stride_b, stride_c, batch));
}
PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasDgemmStridedBatched(
    cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const double* alpha,
    const double* a, int lda, long long int stride_a, const double* b, int ldb, long long int stride_b,
    const double* beta, double* c, int ldc, long long int stride_c, int batch) {
  return RunGemm(h, Strided(Gemm(ta, tb, m, n, k, alpha, a, CUDA_R_64F, lda, b, CUDA_R_64F, ldb, beta, c,
                                 CUDA_R_64F, ldc, CUBLAS_COMPUTE_64F),
                            stride_a, stride_b, stride_c, batch));
}
PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasHgemmStridedBatched(
    cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const __half* alpha,
    const __half* a, int lda, long long int stride_a, const __half* b, int ldb, long long int stride_b,
    const __half* beta, __half* c, int ldc, long long int stride_c, int batch) {
  return RunGemm(h, Strided(Gemm(ta, tb, m, n, k, alpha, a, CUDA_R_16F, lda, b, CUDA_R_16F, ldb, beta, c,
                                 CUDA_R_16F, ldc, CUBLAS_COMPUTE_16F),
                            stride_a, stride_b, stride_c, batch));
}
PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasSgemmBatched(cublasHandle_t h, cublasOperation_t ta,
                                                            cublasOperation_t tb, int m, int n, int k,
                                                            const float* alpha, const float* const a[],
                                                            int lda, const float* const b[], int ldb,
                                                            const float* beta, float* const c[], int ldc,
                                                            int batch) {
  return RunGemm(h, Arrays(Gemm(ta, tb, m, n, k, alpha, a, CUDA_R_32F, lda, b, CUDA_R_32F, ldb, beta, c,
                                CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F),
                           batch));
}
PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasDgemmBatched(cublasHandle_t h, cublasOperation_t ta,
                                                            cublasOperation_t tb, int m, int n, int k,
                                                            const double* alpha, const double* const a[],
                                                            int lda, const double* const b[], int ldb,
                                                            const double* beta, double* const c[], int ldc,
                                                            int batch) {
  return RunGemm(h, Arrays(Gemm(ta, tb, m, n, k, alpha, a, CUDA_R_64F, lda, b, CUDA_R_64F, ldb, beta, c,
                                CUDA_R_64F, ldc, CUBLAS_COMPUTE_64F),
                           batch));
}

// ---- trsm, syrk, geam, dgmm ------------------------------------------------------------------

PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasStrsm(cublasHandle_t h, cublasSideMode_t side,
                                                     cublasFillMode_t uplo, cublasOperation_t trans,
                                                     cublasDiagType_t diag, int m, int n, const float* alpha,
                                                     const float* a, int lda, float* b, int ldb) {
  return Trsm(h, side, uplo, trans, diag, m, n, alpha, a, lda, b, ldb);
}
PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasDtrsm(cublasHandle_t h, cublasSideMode_t side,
                                                     cublasFillMode_t uplo, cublasOperation_t trans,
                                                     cublasDiagType_t diag, int m, int n, const double* alpha,
                                                     const double* a, int lda, double* b, int ldb) {
  return Trsm(h, side, uplo, trans, diag, m, n, alpha, a, lda, b, ldb);
}
PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasSsyrk(cublasHandle_t h, cublasFillMode_t uplo,
                                                     cublasOperation_t trans, int n, int k,
                                                     const float* alpha, const float* a, int lda,
                                                     const float* beta, float* c, int ldc) {
  return Syrk(h, uplo, trans, n, k, alpha, a, lda, beta, c, ldc);
}
PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasDsyrk(cublasHandle_t h, cublasFillMode_t uplo,
                                                     cublasOperation_t trans, int n, int k,
                                                     const double* alpha, const double* a, int lda,
                                                     const double* beta, double* c, int ldc) {
  return Syrk(h, uplo, trans, n, k, alpha, a, lda, beta, c, ldc);
}
PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasSgeam(cublasHandle_t h, cublasOperation_t ta,
                                                     cublasOperation_t tb, int m, int n, const float* alpha,
                                                     const float* a, int lda, const float* beta,
                                                     const float* b, int ldb, float* c, int ldc) {
  return Geam(h, ta, tb, m, n, alpha, a, lda, beta, b, ldb, c, ldc);
}
PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasDgeam(cublasHandle_t h, cublasOperation_t ta,
                                                     cublasOperation_t tb, int m, int n, const double* alpha,
                                                     const double* a, int lda, const double* beta,
                                                     const double* b, int ldb, double* c, int ldc) {
  return Geam(h, ta, tb, m, n, alpha, a, lda, beta, b, ldb, c, ldc);
}
PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasSdgmm(cublasHandle_t h, cublasSideMode_t side, int m, int n,
                                                     const float* a, int lda, const float* x, int incx,
                                                     float* c, int ldc) {
  return Dgmm(h, side, m, n, a, lda, x, incx, c, ldc);
}
PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasDdgmm(cublasHandle_t h, cublasSideMode_t side, int m, int n,
                                                     const double* a, int lda, const double* x, int incx,
                                                     double* c, int ldc) {
  return Dgmm(h, side, m, n, a, lda, x, incx, c, ldc);
}

}  // extern "C"
