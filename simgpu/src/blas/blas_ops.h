// The cuBLAS compute routines on simgpu: argument checks as cuBLAS documents them, pointer
// checks against simgpu's device memory, and the work enqueued on a stream as a compute op that
// runs OpenBLAS (column-major, like cuBLAS) split across the device's compute workers.
#pragma once

#include <cublas_v2.h>

#include <cstdint>

#include "device/device_access.h"

namespace phos::sim::blas {

// C = alpha * op(A) * op(B) + beta * C for each of `batch` entries, entry i at A + i * stride_a
// elements (likewise B and C). Types: A and B both CUDA_R_32F (then C CUDA_R_32F) or both
// CUDA_R_16F (C CUDA_R_32F or CUDA_R_16F); fp16 is widened to fp32, computed, and C narrowed
// back with round-to-nearest-even.
struct GemmCall {
  cublasOperation_t transa = CUBLAS_OP_N;
  cublasOperation_t transb = CUBLAS_OP_N;
  int m = 0;
  int n = 0;
  int k = 0;
  float alpha = 1;
  float beta = 0;
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
  int batch = 1;
};

// y = alpha * op(A) * x + beta * y, A m x n (fp32).
struct GemvCall {
  cublasOperation_t trans = CUBLAS_OP_N;
  int m = 0;
  int n = 0;
  float alpha = 1;
  float beta = 0;
  const float* a = nullptr;
  int lda = 0;
  const float* x = nullptr;
  int incx = 1;
  float* y = nullptr;
  int incy = 1;
};

// CUBLAS_STATUS_INVALID_VALUE for bad dimensions, leading dimensions, increments, operations or
// a batch count below 0, and (a simgpu departure: a GPU would fault or corrupt memory) for an
// operand that is not device memory of the extent the call implies; CUBLAS_STATUS_NOT_SUPPORTED
// for a type combination outside the subset. Nothing is enqueued on error.
cublasStatus_t EnqueueGemm(DeviceAccess& device, const ContextRef& ctx, Stream& stream, const GemmCall& call);
cublasStatus_t EnqueueGemv(DeviceAccess& device, const ContextRef& ctx, Stream& stream, const GemvCall& call);

}  // namespace phos::sim::blas
