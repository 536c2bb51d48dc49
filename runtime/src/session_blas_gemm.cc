// Every GEMM of a session, through cuBLAS's Ex calls: one, a strided batch, or a batch named by
// device arrays of pointers. Those arrays are device memory the function may still be writing, so
// phosd reads them once the context's work is done, checks every matrix they name, and hands cuBLAS
// its own copy of the checked pointers: nothing the function writes later can change what runs.
#include "phos/base/log.h"
#include "phos/driver/context_scope.h"
#include "phos/runtime/blas_operands.h"
#include "session.h"

namespace phos::runtime {

Status Session::ReadGemmPointerArrays(const ipc::GemmArgs& a, BlasPointerArrays* out) {
  const auto count = static_cast<size_t>(a.batch);
  auto read = [&](uint64_t array, std::vector<uint64_t>* entries) -> Status {
    entries->resize(count);
    if (count == 0) return Status::Ok();
    PHOS_RETURN_IF_ERROR(RequireResident(array, count * sizeof(uint64_t)));
    PHOS_CU_RETURN_IF_ERROR(driver_->error_text(),
                            driver_->cuMemcpyDtoH(entries->data(), array, count * sizeof(uint64_t)));
    return Status::Ok();
  };
  // What the function queued before may write the arrays, on any of its streams.
  PHOS_CU_RETURN_IF_ERROR(driver_->error_text(), driver_->cuCtxSynchronize());
  PHOS_RETURN_IF_ERROR(read(a.c, &out->c));
  if (a.k > 0) {
    PHOS_RETURN_IF_ERROR(read(a.a, &out->a));
    PHOS_RETURN_IF_ERROR(read(a.b, &out->b));
  } else {
    out->a.clear();
    out->b.clear();
  }
  return Status::Ok();
}

Result<CUdeviceptr> Session::BlasPointerScratch(uint64_t bytes) {
  BlasScratch& s = blas_scratch_[route_device_];
  if (s.bytes < bytes) {
    // The context was synchronised before the arrays were read: the old scratch is idle.
    if (s.ptr != 0) driver_->cuMemFree(s.ptr);
    s = BlasScratch{};
    PHOS_ASSIGN_OR_RETURN(CUcontext ctx, ContextOn(route_device_));
    CUdeviceptr ptr = 0;
    PHOS_CU_RETURN_IF_ERROR(driver_->error_text(), driver_->cuMemAlloc(&ptr, bytes));
    s = BlasScratch{ctx, ptr, bytes};
  }
  return s.ptr;
}

void Session::ReleaseBlasScratch() {
  for (auto& [device, s] : blas_scratch_) {
    driver::ContextScope scope(*driver_, s.context);
    if (!scope.ok()) continue;  // a context already gone took its memory with it
    driver_->cuCtxSynchronize();
    driver_->cuMemFree(s.ptr);
  }
  blas_scratch_.clear();
}

CUresult Session::GemmPointerBatch(const ipc::GemmArgs& a, cublasHandle_t handle, const void* alpha,
                                   const void* beta, const Call& call) {
  if (a.batch == 0 || a.m == 0 || a.n == 0) return CUDA_SUCCESS;  // cuBLAS returns at once
  if (Status s = ReadGemmPointerArrays(a, &blas_arrays_); !s.ok()) {
    PHOS_LOG_EVERY_SEC(Warn, "runtime", 1, "pid {}: {}: {}", pid_, call.name, s.message());
    return CUDA_ERROR_LAUNCH_FAILED;
  }
  const auto count = static_cast<size_t>(a.batch);
  for (size_t i = 0; i < count; ++i) {
    const uint64_t ai = a.k > 0 ? blas_arrays_.a[i] : 0, bi = a.k > 0 ? blas_arrays_.b[i] : 0;
    if (CUresult r = CheckBlasOperands(GemmEntryOperands(a, ai, bi, blas_arrays_.c[i]), call);
        r != CUDA_SUCCESS) {
      PHOS_LOG_EVERY_SEC(Warn, "runtime", 1, "pid {}: {}: the refused matrix is entry {} of the batch", pid_,
                         call.name, i);
      return r;
    }
  }
  // The checked pointers, in phosd's own device memory: A's, B's, then C's array.
  const uint64_t array_bytes = count * sizeof(uint64_t);
  Result<CUdeviceptr> scratch = BlasPointerScratch(3 * array_bytes);
  if (!scratch.ok()) {
    PHOS_LOG_EVERY_SEC(Warn, "runtime", 1, "pid {}: {}: {}", pid_, call.name, scratch.status().message());
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  const CUdeviceptr arrays[3] = {*scratch, *scratch + array_bytes, *scratch + 2 * array_bytes};
  if (a.k > 0) {
    if (CUresult r = driver_->cuMemcpyHtoD(arrays[0], blas_arrays_.a.data(), array_bytes); r != CUDA_SUCCESS)
      return r;
    if (CUresult r = driver_->cuMemcpyHtoD(arrays[1], blas_arrays_.b.data(), array_bytes); r != CUDA_SUCCESS)
      return r;
  }
  if (CUresult r = driver_->cuMemcpyHtoD(arrays[2], blas_arrays_.c.data(), array_bytes); r != CUDA_SUCCESS)
    return r;
  return BlasFailure(driver_->cublasGemmBatchedEx(
      handle, static_cast<cublasOperation_t>(a.trans_a), static_cast<cublasOperation_t>(a.trans_b), a.m, a.n,
      a.k, alpha, reinterpret_cast<const void* const*>(arrays[0]), static_cast<cudaDataType>(a.a_type), a.lda,
      reinterpret_cast<const void* const*>(arrays[1]), static_cast<cudaDataType>(a.b_type), a.ldb, beta,
      reinterpret_cast<void* const*>(arrays[2]), static_cast<cudaDataType>(a.c_type), a.ldc, a.batch,
      static_cast<cublasComputeType_t>(a.compute_type), static_cast<cublasGemmAlgo_t>(a.algo)));
}

// GEMMs are asynchronous: their failures become the session's sticky error, so they speak
// CUresult (the frontend refused what cuBLAS would refuse at once).
CUresult Session::Gemm(const ipc::GemmArgs& a, const Call& call) {
  if (CUresult r = CheckBlasOperands(GemmOperands(a), call); r != CUDA_SUCCESS) return r;
  Result<cublasHandle_t> h = BlasComputeHandle(a.handle, a.pointer_mode);
  if (!h.ok())
    return h.status().code() == StatusCode::kNotFound ? CUDA_ERROR_INVALID_HANDLE : CUDA_ERROR_LAUNCH_FAILED;
  const void* alpha = BlasScalarArg(a.alpha, a.pointer_mode);
  const void* beta = BlasScalarArg(a.beta, a.pointer_mode);
  const auto ta = static_cast<cublasOperation_t>(a.trans_a), tb = static_cast<cublasOperation_t>(a.trans_b);
  const auto at = static_cast<cudaDataType>(a.a_type), bt = static_cast<cudaDataType>(a.b_type);
  const auto ct = static_cast<cudaDataType>(a.c_type);
  const auto compute = static_cast<cublasComputeType_t>(a.compute_type);
  const auto algo = static_cast<cublasGemmAlgo_t>(a.algo);
  const void* pa = reinterpret_cast<const void*>(a.a);
  const void* pb = reinterpret_cast<const void*>(a.b);
  void* pc = reinterpret_cast<void*>(a.c);
  switch (static_cast<ipc::BlasBatch>(a.batch_kind)) {
    case ipc::BlasBatch::kNone:
      return BlasFailure(driver_->cublasGemmEx(*h, ta, tb, a.m, a.n, a.k, alpha, pa, at, a.lda, pb, bt, a.ldb,
                                               beta, pc, ct, a.ldc, compute, algo));
    case ipc::BlasBatch::kStrided:
      return BlasFailure(driver_->cublasGemmStridedBatchedEx(*h, ta, tb, a.m, a.n, a.k, alpha, pa, at, a.lda,
                                                             a.stride_a, pb, bt, a.ldb, a.stride_b, beta, pc,
                                                             ct, a.ldc, a.stride_c, a.batch, compute, algo));
    case ipc::BlasBatch::kPointers:
      return GemmPointerBatch(a, *h, alpha, beta, call);
  }
  return CUDA_ERROR_INVALID_VALUE;
}

}  // namespace phos::runtime
