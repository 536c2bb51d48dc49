// The cuBLAS compute routines on simgpu: argument checks as cuBLAS documents them, pointer
// checks against simgpu's device memory, and the work enqueued on a stream as a compute op that
// runs OpenBLAS (column-major, like cuBLAS), split across the device's compute workers where the
// routine allows. Scalars are taken in the handle's pointer mode (blas/scalar.h); a Level 1
// reduction in host pointer mode waits for its work and writes the result before returning, as
// cuBLAS does.
#pragma once

#include <cublas_v2.h>

#include <cstdint>

#include "device/device_access.h"

namespace phos::sim::blas {

// What a routine runs with: the handle's context, the stream its work goes to, and where its
// scalars and results are.
struct BlasTarget {
  DeviceAccess* device = nullptr;
  const ContextRef* ctx = nullptr;
  Stream* stream = nullptr;
  cublasPointerMode_t pointer_mode = CUBLAS_POINTER_MODE_HOST;
};

// C = alpha * op(A) * op(B) + beta * C for each of `batch` entries: entry i at A + i * stride_a
// elements (likewise B and C), or, with `pointer_arrays`, at the device pointers a[i], b[i], c[i]
// (a, b and c then are device arrays of `batch` pointers, read when the work runs). Types (A and
// B alike): CUDA_R_32F, CUDA_R_16F or CUDA_R_16BF with an fp32 compute type (C fp32 or A's type),
// CUDA_R_16F throughout with CUBLAS_COMPUTE_16F (alpha and beta __half), CUDA_R_64F or CUDA_C_64F
// with CUBLAS_COMPUTE_64F, CUDA_C_32F with an fp32 compute type. Half and bfloat16 are widened
// to fp32, computed, and narrowed back with round-to-nearest-even.
struct GemmCall {
  cublasOperation_t transa = CUBLAS_OP_N;
  cublasOperation_t transb = CUBLAS_OP_N;
  int m = 0;
  int n = 0;
  int k = 0;
  const void* alpha = nullptr;  // of the compute type's scalar type, in the handle's pointer mode
  const void* beta = nullptr;
  const void* a = nullptr;
  cudaDataType a_type = CUDA_R_32F;
  int lda = 0;
  long long stride_a = 0;
  const void* b = nullptr;
  cudaDataType b_type = CUDA_R_32F;
  int ldb = 0;
  long long stride_b = 0;
  void* c = nullptr;
  cudaDataType c_type = CUDA_R_32F;
  int ldc = 0;
  long long stride_c = 0;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  int batch = 1;
  bool pointer_arrays = false;
};

// Level 1 in S and D (`type` CUDA_R_32F or CUDA_R_64F): the routine, its vectors and scalars as
// the cuBLAS call names them.
enum class Level1 { kAxpy, kDot, kNrm2, kScal, kAsum, kIamax, kIamin, kCopy, kSwap, kRot };
struct Level1Call {
  Level1 routine = Level1::kAxpy;
  cudaDataType type = CUDA_R_32F;
  int n = 0;
  const void* alpha = nullptr;  // axpy, scal; rot: c
  const void* beta = nullptr;   // rot: s
  void* x = nullptr;
  int incx = 1;
  void* y = nullptr;
  int incy = 1;
  void* result = nullptr;  // dot, nrm2, asum (the element type), iamax, iamin (int, 1-based)
};

// Level 2 in S and D: gemv (A m x n), ger (A m x n, y the second vector), symv, trsv, trmv (A n x n).
enum class Level2 { kGemv, kGer, kSymv, kTrsv, kTrmv };
struct Level2Call {
  Level2 routine = Level2::kGemv;
  cudaDataType type = CUDA_R_32F;
  cublasOperation_t trans = CUBLAS_OP_N;
  cublasFillMode_t uplo = CUBLAS_FILL_MODE_LOWER;
  cublasDiagType_t diag = CUBLAS_DIAG_NON_UNIT;
  int m = 0;
  int n = 0;
  const void* alpha = nullptr;
  const void* beta = nullptr;
  void* a = nullptr;
  int lda = 0;
  void* x = nullptr;
  int incx = 1;
  void* y = nullptr;
  int incy = 1;
};

// trsm (B = alpha op(A)^-1 B or alpha B op(A)^-1, in place), syrk (one triangle of the n x n
// C = alpha op(A) op(A)^T + beta C, op(A) n x k), geam (C = alpha op(A) + beta op(B), m x n),
// dgmm (C = A diag(x) or diag(x) A, m x n), in S and D.
enum class Level3 { kTrsm, kSyrk, kGeam, kDgmm };
struct Level3Call {
  Level3 routine = Level3::kTrsm;
  cudaDataType type = CUDA_R_32F;
  cublasSideMode_t side = CUBLAS_SIDE_LEFT;
  cublasFillMode_t uplo = CUBLAS_FILL_MODE_LOWER;
  cublasOperation_t transa = CUBLAS_OP_N;
  cublasOperation_t transb = CUBLAS_OP_N;
  cublasDiagType_t diag = CUBLAS_DIAG_NON_UNIT;
  int m = 0;
  int n = 0;
  int k = 0;
  const void* alpha = nullptr;
  const void* beta = nullptr;
  const void* a = nullptr;
  int lda = 0;
  void* b = nullptr;  // trsm: B; geam: B (read); dgmm: x
  int ldb = 0;        // dgmm: x's increment
  void* c = nullptr;
  int ldc = 0;
};

// CUBLAS_STATUS_INVALID_VALUE for bad dimensions, leading dimensions, increments, enumerations,
// a null scalar, or a batch count below 0, and (a simgpu departure: a GPU would fault or corrupt
// memory) for an operand that is not device memory of the extent the call implies;
// CUBLAS_STATUS_NOT_SUPPORTED for a type combination outside the subset. Nothing is enqueued on
// error.
cublasStatus_t EnqueueGemm(const BlasTarget& target, const GemmCall& call);
cublasStatus_t EnqueueLevel1(const BlasTarget& target, const Level1Call& call);
cublasStatus_t EnqueueLevel2(const BlasTarget& target, const Level2Call& call);
cublasStatus_t EnqueueLevel3(const BlasTarget& target, const Level3Call& call);

}  // namespace phos::sim::blas
