// CUDA runtime and cuBLAS results as Status, for functions written against those APIs:
//
//   PHOS_FN_RETURN_IF_CUDA(cudaMalloc(&p, bytes));
//   PHOS_FN_RETURN_IF_BLAS(cublasCreate(&handle));
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>
#include <string_view>

#include "phos/base/status.h"

namespace phos::fn {

inline Status CudaStatus(cudaError_t e, std::string_view what) {
  if (e == cudaSuccess) return Status::Ok();
  return Status::DeviceError(std::string(what) + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

inline Status BlasStatus(cublasStatus_t s, std::string_view what) {
  if (s == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  return Status::DeviceError(std::string(what) + ": cuBLAS status " + std::to_string(static_cast<int>(s)));
}

}  // namespace phos::fn

#define PHOS_FN_RETURN_IF_CUDA(call) PHOS_RETURN_IF_ERROR(::phos::fn::CudaStatus((call), #call))
#define PHOS_FN_RETURN_IF_BLAS(call) PHOS_RETURN_IF_ERROR(::phos::fn::BlasStatus((call), #call))
