// What the cuBLAS exports (api_blas*.cc) share: the driver's handle registry and how a compute call
// begins on a handle.
#pragma once

#include <cublas_v2.h>

#include <memory>

#include "api/driver.h"
#include "blas/blas_handle.h"
#include "blas/blas_ops.h"

namespace phos::sim::blas {

// The registry; null before cuInit.
inline HandleRegistry* Handles() {
  Driver* d = Driver::Get();
  return d == nullptr ? nullptr : &d->blas_handles();
}

inline cublasStatus_t FindHandle(cublasHandle_t handle, std::shared_ptr<BlasHandle>* out) {
  HandleRegistry* handles = Handles();
  return handles == nullptr ? CUBLAS_STATUS_NOT_INITIALIZED : handles->Find(handle, out);
}

// A compute call on `handle`: its context, stream and pointer mode, held for the call.
class BlasCallScope {
 public:
  explicit BlasCallScope(cublasHandle_t handle) {
    HandleRegistry* handles = Handles();
    status_ = handles == nullptr ? CUBLAS_STATUS_NOT_INITIALIZED : handles->BeginCall(handle, &call_);
  }
  cublasStatus_t status() const { return status_; }
  BlasTarget target() const {
    return {call_.device, &call_.handle->ctx, call_.stream.get(), call_.pointer_mode};
  }

 private:
  BlasCall call_;
  cublasStatus_t status_;
};

inline cublasStatus_t RunGemm(cublasHandle_t handle, const GemmCall& call) {
  BlasCallScope scope(handle);
  return scope.status() != CUBLAS_STATUS_SUCCESS ? scope.status() : EnqueueGemm(scope.target(), call);
}
inline cublasStatus_t RunLevel1(cublasHandle_t handle, const Level1Call& call) {
  BlasCallScope scope(handle);
  return scope.status() != CUBLAS_STATUS_SUCCESS ? scope.status() : EnqueueLevel1(scope.target(), call);
}
inline cublasStatus_t RunLevel2(cublasHandle_t handle, const Level2Call& call) {
  BlasCallScope scope(handle);
  return scope.status() != CUBLAS_STATUS_SUCCESS ? scope.status() : EnqueueLevel2(scope.target(), call);
}
inline cublasStatus_t RunLevel3(cublasHandle_t handle, const Level3Call& call) {
  BlasCallScope scope(handle);
  return scope.status() != CUBLAS_STATUS_SUCCESS ? scope.status() : EnqueueLevel3(scope.target(), call);
}

}  // namespace phos::sim::blas
