// The cuBLAS calls of a session: virtual handles, and Levels 1-3 besides GEMM (session_blas_gemm.cc),
// every operand checked against the session's buffers (blas_operands.h) before the library sees a
// pointer.
#include <type_traits>

#include "phos/base/log.h"
#include "phos/runtime/blas_operands.h"
#include "session.h"

namespace phos::runtime {
namespace {

using ipc::BlasLevel1;
using ipc::BlasLevel2;
using ipc::BlasLevel3;

bool IsBlasMathMode(int32_t mode) {
  const int32_t base = mode & ~int32_t{CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION};
  return base >= CUBLAS_DEFAULT_MATH && base <= CUBLAS_TF32_TENSOR_OP_MATH;
}

// The S or D form of a routine, by element type.
template <typename T, typename S, typename D>
auto Pick(S single, D dbl) {
  if constexpr (std::is_same_v<T, float>) {
    return single;
  } else {
    return dbl;
  }
}

template <typename T>
T* As(uint64_t ptr) {
  return reinterpret_cast<T*>(ptr);
}

template <typename T>
cublasStatus_t RunLevel1(const driver::DriverTable& d, cublasHandle_t h, const ipc::BlasLevel1Args& a,
                         const T* alpha, const T* beta, void* result) {
  T* x = As<T>(a.x);
  T* y = As<T>(a.y);
  switch (static_cast<BlasLevel1>(a.routine)) {
    case BlasLevel1::kAxpy:
      return Pick<T>(d.cublasSaxpy, d.cublasDaxpy)(h, a.n, alpha, x, a.incx, y, a.incy);
    case BlasLevel1::kDot:
      return Pick<T>(d.cublasSdot, d.cublasDdot)(h, a.n, x, a.incx, y, a.incy, static_cast<T*>(result));
    case BlasLevel1::kNrm2:
      return Pick<T>(d.cublasSnrm2, d.cublasDnrm2)(h, a.n, x, a.incx, static_cast<T*>(result));
    case BlasLevel1::kScal:
      return Pick<T>(d.cublasSscal, d.cublasDscal)(h, a.n, alpha, x, a.incx);
    case BlasLevel1::kAsum:
      return Pick<T>(d.cublasSasum, d.cublasDasum)(h, a.n, x, a.incx, static_cast<T*>(result));
    case BlasLevel1::kIamax:
      return Pick<T>(d.cublasIsamax, d.cublasIdamax)(h, a.n, x, a.incx, static_cast<int*>(result));
    case BlasLevel1::kIamin:
      return Pick<T>(d.cublasIsamin, d.cublasIdamin)(h, a.n, x, a.incx, static_cast<int*>(result));
    case BlasLevel1::kCopy:
      return Pick<T>(d.cublasScopy, d.cublasDcopy)(h, a.n, x, a.incx, y, a.incy);
    case BlasLevel1::kSwap:
      return Pick<T>(d.cublasSswap, d.cublasDswap)(h, a.n, x, a.incx, y, a.incy);
    case BlasLevel1::kRot:
      return Pick<T>(d.cublasSrot, d.cublasDrot)(h, a.n, x, a.incx, y, a.incy, alpha, beta);
    case BlasLevel1::kCount:
      break;
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}

template <typename T>
cublasStatus_t RunLevel2(const driver::DriverTable& d, cublasHandle_t h, const ipc::BlasLevel2Args& a,
                         const T* alpha, const T* beta) {
  const auto trans = static_cast<cublasOperation_t>(a.trans);
  const auto uplo = static_cast<cublasFillMode_t>(a.uplo);
  const auto diag = static_cast<cublasDiagType_t>(a.diag);
  T* m = As<T>(a.a);
  T* x = As<T>(a.x);
  T* y = As<T>(a.y);
  switch (static_cast<BlasLevel2>(a.routine)) {
    case BlasLevel2::kGemv:
      return Pick<T>(d.cublasSgemv, d.cublasDgemv)(h, trans, a.m, a.n, alpha, m, a.lda, x, a.incx, beta, y,
                                                   a.incy);
    case BlasLevel2::kGer:
      return Pick<T>(d.cublasSger, d.cublasDger)(h, a.m, a.n, alpha, x, a.incx, y, a.incy, m, a.lda);
    case BlasLevel2::kSymv:
      return Pick<T>(d.cublasSsymv, d.cublasDsymv)(h, uplo, a.n, alpha, m, a.lda, x, a.incx, beta, y, a.incy);
    case BlasLevel2::kTrsv:
      return Pick<T>(d.cublasStrsv, d.cublasDtrsv)(h, uplo, trans, diag, a.n, m, a.lda, x, a.incx);
    case BlasLevel2::kTrmv:
      return Pick<T>(d.cublasStrmv, d.cublasDtrmv)(h, uplo, trans, diag, a.n, m, a.lda, x, a.incx);
    case BlasLevel2::kCount:
      break;
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}

template <typename T>
cublasStatus_t RunLevel3(const driver::DriverTable& d, cublasHandle_t h, const ipc::BlasLevel3Args& a,
                         const T* alpha, const T* beta) {
  const auto side = static_cast<cublasSideMode_t>(a.side);
  const auto uplo = static_cast<cublasFillMode_t>(a.uplo);
  const auto ta = static_cast<cublasOperation_t>(a.trans_a);
  const auto tb = static_cast<cublasOperation_t>(a.trans_b);
  const auto diag = static_cast<cublasDiagType_t>(a.diag);
  switch (static_cast<BlasLevel3>(a.routine)) {
    case BlasLevel3::kTrsm:
      return Pick<T>(d.cublasStrsm, d.cublasDtrsm)(h, side, uplo, ta, diag, a.m, a.n, alpha, As<T>(a.a),
                                                   a.lda, As<T>(a.b), a.ldb);
    case BlasLevel3::kSyrk:
      return Pick<T>(d.cublasSsyrk, d.cublasDsyrk)(h, uplo, ta, a.n, a.k, alpha, As<T>(a.a), a.lda, beta,
                                                   As<T>(a.c), a.ldc);
    case BlasLevel3::kGeam:
      return Pick<T>(d.cublasSgeam, d.cublasDgeam)(h, ta, tb, a.m, a.n, alpha, As<T>(a.a), a.lda, beta,
                                                   As<T>(a.b), a.ldb, As<T>(a.c), a.ldc);
    case BlasLevel3::kDgmm:
      return Pick<T>(d.cublasSdgmm, d.cublasDdgmm)(h, side, a.m, a.n, As<T>(a.a), a.lda, As<T>(a.b), a.incx,
                                                   As<T>(a.c), a.ldc);
    case BlasLevel3::kCount:
      break;
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}

}  // namespace

// The first handle is the pooled one, created with the context (docs/design.md D11); later ones
// are created as the function asks. (Device 0's only: the pooled handle of another device's
// context would not serve this one.)
CUresult Session::BlasCreate(const NoArgs&, const Call& call) {
  if (!HandleRoom(call.name)) return static_cast<CUresult>(CUBLAS_STATUS_ALLOC_FAILED);
  cublasHandle_t h = pooled_blas_vid_ == 0 && route_device_ == 0 ? PooledBlas() : nullptr;
  if (h == nullptr) {
    cublasStatus_t s = driver_->cublasCreate(&h);
    if (s != CUBLAS_STATUS_SUCCESS) return static_cast<CUresult>(s);
  }
  uint64_t vid = NewHandle();
  if (h == PooledBlas()) pooled_blas_vid_ = vid;
  blas_[vid] = BlasHandle{h, route_device_};
  call.Reply(vid);
  return CUDA_SUCCESS;
}

CUresult Session::BlasDestroy(const ipc::HandleArgs& a, const Call&) {
  auto it = blas_.find(a.handle);
  if (it == blas_.end()) return static_cast<CUresult>(CUBLAS_STATUS_NOT_INITIALIZED);
  if (it->first == pooled_blas_vid_) {
    // The pooled handle stays with the context; back to a new handle's defaults, it serves the
    // next cublasCreate. (Its pointer mode is set by every call that computes.)
    blas_.erase(it);
    pooled_blas_vid_ = 0;
    cublasStatus_t s = driver_->cublasSetStream(PooledBlas(), nullptr);
    if (s == CUBLAS_STATUS_SUCCESS) s = driver_->cublasSetMathMode(PooledBlas(), CUBLAS_DEFAULT_MATH);
    return static_cast<CUresult>(s);
  }
  cublasStatus_t s = driver_->cublasDestroy(it->second.handle);
  blas_.erase(it);
  return static_cast<CUresult>(s);
}

// The record's `event` holds the cuBLAS handle.
CUresult Session::BlasSetStream(const ipc::StreamEventArgs& a, const Call&) {
  auto it = blas_.find(a.event);
  if (it == blas_.end()) return static_cast<CUresult>(CUBLAS_STATUS_NOT_INITIALIZED);
  Result<CUstream> stream = StreamOf(a.stream);
  if (!stream.ok()) return static_cast<CUresult>(CUBLAS_STATUS_INVALID_VALUE);
  it->second.stream = a.stream;
  return static_cast<CUresult>(driver_->cublasSetStream(it->second.handle, reinterpret_cast<cudaStream_t>(*stream)));
}

CUresult Session::BlasSetMathMode(const ipc::BlasModeArgs& a, const Call&) {
  auto it = blas_.find(a.handle);
  if (it == blas_.end()) return static_cast<CUresult>(CUBLAS_STATUS_NOT_INITIALIZED);
  if (!IsBlasMathMode(a.mode)) return static_cast<CUresult>(CUBLAS_STATUS_INVALID_VALUE);
  return static_cast<CUresult>(driver_->cublasSetMathMode(it->second.handle, static_cast<cublasMath_t>(a.mode)));
}

CUresult Session::BlasFailure(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS:
      return CUDA_SUCCESS;
    case CUBLAS_STATUS_INVALID_VALUE:
      return CUDA_ERROR_INVALID_VALUE;
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return CUDA_ERROR_NOT_SUPPORTED;
    default:
      return CUDA_ERROR_LAUNCH_FAILED;
  }
}

Result<cublasHandle_t> Session::BlasComputeHandle(uint64_t vid, int32_t pointer_mode) {
  auto it = blas_.find(vid);
  if (it == blas_.end()) return Status::NotFound("cuBLAS handle");
  // Set for every call: the mode is the frontend's, per handle, and the handle may be the
  // context's pooled one, which another tenant left in either mode.
  if (driver_->cublasSetPointerMode(it->second.handle, static_cast<cublasPointerMode_t>(pointer_mode)) !=
      CUBLAS_STATUS_SUCCESS) {
    return Status::Internal("cublasSetPointerMode");
  }
  return it->second.handle;
}

CUresult Session::CheckBlasOperands(const BlasOperands& ops, const Call& call) {
  if (!ops.ok()) {
    PHOS_LOG_EVERY_SEC(Warn, "runtime", 1, "pid {}: {} refused: {}", pid_, call.name, ops.refusal());
    return CUDA_ERROR_INVALID_VALUE;
  }
  for (const BlasOperand& op : ops.operands()) {
    if (!buffers_.Contains(op.range.ptr, op.range.bytes)) {
      PHOS_LOG_EVERY_SEC(Warn, "runtime", 1,
                         "pid {}: {} refused: operand {} {:#x}+{} is not inside a buffer of this session",
                         pid_, call.name, op.what, op.range.ptr, op.range.bytes);
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  return CUDA_SUCCESS;
}

// A scalar as cuBLAS takes it in the record's pointer mode: the record's own bytes (host mode; our
// copy of the record outlives the call), or the device address it names.
const void* Session::BlasScalarArg(const ipc::BlasScalar& s, int32_t pointer_mode) {
  if (pointer_mode == CUBLAS_POINTER_MODE_HOST) return s.bytes;
  uint64_t ptr = 0;
  std::memcpy(&ptr, s.bytes, sizeof(ptr));
  return reinterpret_cast<const void*>(ptr);
}

// Level 1: asynchronous, but for a reduction in host pointer mode, whose result is the reply
// (cuBLAS waits for it, and so does the executor).
CUresult Session::BlasLevel1(const ipc::BlasLevel1Args& a, const Call& call) {
  if (CUresult r = CheckBlasOperands(Level1Operands(a), call); r != CUDA_SUCCESS) return r;
  Result<cublasHandle_t> h = BlasComputeHandle(a.handle, a.pointer_mode);
  if (!h.ok())
    return h.status().code() == StatusCode::kNotFound ? CUDA_ERROR_INVALID_HANDLE : CUDA_ERROR_LAUNCH_FAILED;
  const bool device_mode = a.pointer_mode == CUBLAS_POINTER_MODE_DEVICE;
  uint64_t host_result = 0;  // a float, double or int, from its first byte
  void* result = device_mode ? reinterpret_cast<void*>(a.result) : &host_result;
  const void* alpha = BlasScalarArg(a.alpha, a.pointer_mode);
  const void* beta = BlasScalarArg(a.beta, a.pointer_mode);
  cublasStatus_t s = a.type == CUDA_R_32F ? RunLevel1(*driver_, *h, a, static_cast<const float*>(alpha),
                                                      static_cast<const float*>(beta), result)
                                          : RunLevel1(*driver_, *h, a, static_cast<const double*>(alpha),
                                                      static_cast<const double*>(beta), result);
  if (s == CUBLAS_STATUS_SUCCESS && !device_mode) call.Reply(host_result);
  return BlasFailure(s);
}

CUresult Session::BlasLevel2(const ipc::BlasLevel2Args& a, const Call& call) {
  if (CUresult r = CheckBlasOperands(Level2Operands(a), call); r != CUDA_SUCCESS) return r;
  Result<cublasHandle_t> h = BlasComputeHandle(a.handle, a.pointer_mode);
  if (!h.ok())
    return h.status().code() == StatusCode::kNotFound ? CUDA_ERROR_INVALID_HANDLE : CUDA_ERROR_LAUNCH_FAILED;
  const void* alpha = BlasScalarArg(a.alpha, a.pointer_mode);
  const void* beta = BlasScalarArg(a.beta, a.pointer_mode);
  return BlasFailure(
      a.type == CUDA_R_32F
          ? RunLevel2(*driver_, *h, a, static_cast<const float*>(alpha), static_cast<const float*>(beta))
          : RunLevel2(*driver_, *h, a, static_cast<const double*>(alpha), static_cast<const double*>(beta)));
}

CUresult Session::BlasLevel3(const ipc::BlasLevel3Args& a, const Call& call) {
  if (CUresult r = CheckBlasOperands(Level3Operands(a), call); r != CUDA_SUCCESS) return r;
  Result<cublasHandle_t> h = BlasComputeHandle(a.handle, a.pointer_mode);
  if (!h.ok())
    return h.status().code() == StatusCode::kNotFound ? CUDA_ERROR_INVALID_HANDLE : CUDA_ERROR_LAUNCH_FAILED;
  const void* alpha = BlasScalarArg(a.alpha, a.pointer_mode);
  const void* beta = BlasScalarArg(a.beta, a.pointer_mode);
  return BlasFailure(
      a.type == CUDA_R_32F
          ? RunLevel3(*driver_, *h, a, static_cast<const float*>(alpha), static_cast<const float*>(beta))
          : RunLevel3(*driver_, *h, a, static_cast<const double*>(alpha), static_cast<const double*>(beta)));
}

}  // namespace phos::runtime
