#include "blas/blas_handle.h"

#include <cblas.h>

#include "phos/base/log.h"

namespace phos::sim::blas {
namespace {

// simgpu's compute workers are the parallelism (a GEMM is split across them like a kernel's
// blocks); OpenBLAS's own threads would only compete with them for the same cores.
void UseSingleThreadedOpenBlas() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

}  // namespace

cublasStatus_t HandleRegistry::Create(cublasHandle_t* out) {
  if (out == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  ContextRef ctx;
  if (CUresult r = device_.CurrentContext(&ctx); r != CUDA_SUCCESS) {
    PHOS_LOG(Warn, "simgpu", "cublasCreate: no usable current context (CUresult {})", static_cast<int>(r));
    return CUBLAS_STATUS_NOT_INITIALIZED;
  }
  UseSingleThreadedOpenBlas();
  bool first = false;
  {
    std::lock_guard lock(mu_);
    first = contexts_with_handles_.insert(ctx.id).second;
  }
  const DeviceProfile& profile = *ctx.profile;
  device_.PayModelledCost(first ? profile.blas_handle_create_first_s : profile.blas_handle_create_s);

  auto handle = std::make_shared<BlasHandle>();
  handle->ctx = std::move(ctx);
  *out = handles_.Insert(std::move(handle));
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t HandleRegistry::Destroy(cublasHandle_t handle) {
  return handles_.Remove(handle) ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t HandleRegistry::Find(cublasHandle_t handle, std::shared_ptr<BlasHandle>* out) const {
  std::shared_ptr<BlasHandle> found = handles_.Find(handle);
  if (!found) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!device_.IsLive(found->ctx)) {
    PHOS_LOG_EVERY_SEC(Warn, "simgpu", 1, "cuBLAS handle used after its context was destroyed");
    return CUBLAS_STATUS_NOT_INITIALIZED;
  }
  *out = std::move(found);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t HandleRegistry::BeginCall(cublasHandle_t handle, BlasCall* out) const {
  if (cublasStatus_t s = Find(handle, &out->handle); s != CUBLAS_STATUS_SUCCESS) return s;
  out->device = &device_;
  const ContextRef& ctx = out->handle->ctx;
  if (ctx.exec->sticky_error() != CUDA_SUCCESS) return CUBLAS_STATUS_EXECUTION_FAILED;
  CUstream stream = nullptr;
  {
    std::lock_guard lock(out->handle->mu);
    stream = out->handle->stream;
    out->pointer_mode = out->handle->pointer_mode;
  }
  if (device_.ResolveStream(ctx, stream, &out->stream) != CUDA_SUCCESS) {
    PHOS_LOG_EVERY_SEC(Warn, "simgpu", 1, "cuBLAS call on a stream that no longer exists");
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t HandleRegistry::SetStream(cublasHandle_t handle, CUstream stream) {
  std::shared_ptr<BlasHandle> h;
  if (cublasStatus_t s = Find(handle, &h); s != CUBLAS_STATUS_SUCCESS) return s;
  std::shared_ptr<Stream> resolved;
  if (device_.ResolveStream(h->ctx, stream, &resolved) != CUDA_SUCCESS) {
    PHOS_LOG_EVERY_SEC(Warn, "simgpu", 1, "cublasSetStream: not a stream of the handle's context");
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  std::lock_guard lock(h->mu);
  h->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace phos::sim::blas
