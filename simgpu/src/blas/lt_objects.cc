// cuBLASLt's handles (blas/lt.h); its descriptors' attributes are phos/simgpu/blas_lt_attributes.h's.
#include "blas/blas_internal.h"
#include "blas/lt.h"

namespace phos::sim::blas {

cublasStatus_t LtRegistry::CreateHandle(cublasLtHandle_t* out) {
  if (out == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  auto handle = std::make_shared<LtHandle>();
  if (CUresult r = device_.CurrentContext(&handle->ctx); r != CUDA_SUCCESS) {
    PHOS_LOG(Warn, "simgpu", "cublasLtCreate: no usable current context (CUresult {})", static_cast<int>(r));
    return CUBLAS_STATUS_NOT_INITIALIZED;
  }
  *out = handles.Insert(std::move(handle));
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t LtRegistry::BeginCall(cublasLtHandle_t handle, cudaStream_t stream, std::shared_ptr<LtHandle>* held,
                                     std::shared_ptr<Stream>* resolved) {
  *held = handles.Find(handle);
  if (*held == nullptr || !device_.IsLive((*held)->ctx)) return CUBLAS_STATUS_NOT_INITIALIZED;
  const ContextRef& ctx = (*held)->ctx;
  if (ctx.exec->sticky_error() != CUDA_SUCCESS) return CUBLAS_STATUS_EXECUTION_FAILED;
  if (device_.ResolveStream(ctx, stream, resolved) != CUDA_SUCCESS) {
    PHOS_LOG_EVERY_SEC(Warn, "simgpu", 1, "cublasLtMatmul: not a stream of the handle's context");
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace phos::sim::blas
