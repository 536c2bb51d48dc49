// The cuBLAS calls of a session: virtual handles, and the extent of every matrix and vector
// checked against the session's buffers before the library sees a pointer.
#include "phos/base/log.h"
#include "session.h"

namespace phos::runtime {

uint64_t BlasElementBytes(int32_t type) {
  switch (type) {
    case CUDA_R_32F: return 4;
    case CUDA_R_16F:
    case CUDA_R_16BF: return 2;
    default: return 0;
  }
}

namespace {

// A span no buffer can own: what an extent is when the peer's numbers are inconsistent or
// overflow, so the ownership check refuses the call (a record can hold any value).
constexpr uint64_t kNoExtent = UINT64_MAX;

// Bytes `batches` column-major rows x cols matrices with leading dimension ld span, `stride`
// elements apart.
uint64_t MatrixBytes(int64_t rows, int64_t cols, int64_t ld, uint64_t elem, int64_t batches = 1, int64_t stride = 0) {
  if (rows <= 0 || cols <= 0) return 0;
  if (ld < rows || batches < 1 || (batches > 1 && stride < 0)) return kNoExtent;
  uint64_t one = 0, more = 0, span = 0, bytes = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(cols - 1), static_cast<uint64_t>(ld), &one) ||
      __builtin_add_overflow(one, static_cast<uint64_t>(rows), &one) ||
      __builtin_mul_overflow(static_cast<uint64_t>(batches - 1), static_cast<uint64_t>(batches > 1 ? stride : 0), &more) ||
      __builtin_add_overflow(one, more, &span) || __builtin_mul_overflow(span, elem, &bytes)) {
    return kNoExtent;
  }
  return bytes;
}

// Bytes n elements `inc` apart span.
uint64_t VectorBytes(int64_t n, int64_t inc, uint64_t elem) {
  if (n <= 0) return 0;
  uint64_t step = inc < 0 ? 0 - static_cast<uint64_t>(inc) : static_cast<uint64_t>(inc);
  uint64_t span = 0, bytes = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(n - 1), step, &span) || __builtin_add_overflow(span, 1, &span) ||
      __builtin_mul_overflow(span, elem, &bytes)) {
    return kNoExtent;
  }
  return bytes;
}

// The enumerations a record names, checked against cuBLAS's values before they are cast: an
// out-of-range value in the enum type is undefined behaviour, and cuBLAS refuses it anyway.
bool IsBlasOperation(int32_t op) { return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C || op == CUBLAS_OP_CONJG; }
bool IsBlasMathMode(int32_t mode) {
  const int32_t base = mode & ~int32_t{CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION};
  return base >= CUBLAS_DEFAULT_MATH && base <= CUBLAS_TF32_TENSOR_OP_MATH;
}
bool IsBlasComputeType(int32_t type) { return type >= CUBLAS_COMPUTE_16F && type <= CUBLAS_COMPUTE_64F_EMULATED_FIXEDPOINT; }
bool IsBlasGemmAlgo(int32_t algo) {
  return (algo >= CUBLAS_GEMM_DEFAULT && algo <= CUBLAS_GEMM_ALGO23) ||
         (algo >= CUBLAS_GEMM_DEFAULT_TENSOR_OP && algo <= CUBLAS_GEMM_ALGO15_TENSOR_OP);
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
    // next cublasCreate.
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
  return static_cast<CUresult>(driver_->cublasSetStream(it->second.handle, reinterpret_cast<cudaStream_t>(*stream)));
}

CUresult Session::BlasSetMathMode(const ipc::BlasModeArgs& a, const Call&) {
  auto it = blas_.find(a.handle);
  if (it == blas_.end()) return static_cast<CUresult>(CUBLAS_STATUS_NOT_INITIALIZED);
  if (!IsBlasMathMode(a.mode)) return static_cast<CUresult>(CUBLAS_STATUS_INVALID_VALUE);
  return static_cast<CUresult>(driver_->cublasSetMathMode(it->second.handle, static_cast<cublasMath_t>(a.mode)));
}

// GEMM and GEMV are asynchronous: their failures become the session's sticky error, so they
// speak CUresult (the frontend checked the arguments cuBLAS would refuse at once).
CUresult Session::Gemm(const ipc::GemmArgs& a, const Call&) {
  auto it = blas_.find(a.handle);
  if (it == blas_.end()) return CUDA_ERROR_INVALID_HANDLE;
  cublasHandle_t handle = it->second.handle;
  uint64_t ea = BlasElementBytes(a.a_type), eb = BlasElementBytes(a.b_type), ec = BlasElementBytes(a.c_type);
  if (ea == 0 || eb == 0 || ec == 0 || a.batch < 0 || a.m < 0 || a.n < 0 || a.k < 0 || !IsBlasOperation(a.trans_a) ||
      !IsBlasOperation(a.trans_b) || !IsBlasComputeType(a.compute_type) || !IsBlasGemmAlgo(a.algo)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  bool ta = a.trans_a != CUBLAS_OP_N, tb = a.trans_b != CUBLAS_OP_N;
  int64_t batches = a.batch == 0 ? 1 : a.batch;
  auto extent = [&](int64_t rows, int64_t cols, int64_t ld, int64_t stride, uint64_t elem) {
    return MatrixBytes(rows, cols, ld, elem, batches, stride);
  };
  if (a.m > 0 && a.n > 0 && a.k > 0) {
    if (!Owns(a.a, extent(ta ? a.k : a.m, ta ? a.m : a.k, a.lda, a.stride_a, ea), "GEMM matrix A") ||
        !Owns(a.b, extent(tb ? a.n : a.k, tb ? a.k : a.n, a.ldb, a.stride_b, eb), "GEMM matrix B")) {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  if (a.m > 0 && a.n > 0 && !Owns(a.c, extent(a.m, a.n, a.ldc, a.stride_c, ec), "GEMM matrix C")) return CUDA_ERROR_INVALID_VALUE;
  auto op_a = static_cast<cublasOperation_t>(a.trans_a);
  auto op_b = static_cast<cublasOperation_t>(a.trans_b);
  cublasStatus_t s;
  if (a.batch != 0) {
    s = driver_->cublasSgemmStridedBatched(handle, op_a, op_b, a.m, a.n, a.k, &a.alpha, reinterpret_cast<const float*>(a.a),
                                           a.lda, a.stride_a, reinterpret_cast<const float*>(a.b), a.ldb, a.stride_b, &a.beta,
                                           reinterpret_cast<float*>(a.c), a.ldc, a.stride_c, a.batch);
  } else if (a.compute_type == CUBLAS_COMPUTE_32F && a.a_type == CUDA_R_32F && a.b_type == CUDA_R_32F && a.c_type == CUDA_R_32F &&
             a.algo == -1) {
    s = driver_->cublasSgemm(handle, op_a, op_b, a.m, a.n, a.k, &a.alpha, reinterpret_cast<const float*>(a.a), a.lda,
                             reinterpret_cast<const float*>(a.b), a.ldb, &a.beta, reinterpret_cast<float*>(a.c), a.ldc);
  } else {
    s = driver_->cublasGemmEx(handle, op_a, op_b, a.m, a.n, a.k, &a.alpha, reinterpret_cast<const void*>(a.a),
                              static_cast<cudaDataType>(a.a_type), a.lda, reinterpret_cast<const void*>(a.b),
                              static_cast<cudaDataType>(a.b_type), a.ldb, &a.beta, reinterpret_cast<void*>(a.c),
                              static_cast<cudaDataType>(a.c_type), a.ldc, static_cast<cublasComputeType_t>(a.compute_type),
                              static_cast<cublasGemmAlgo_t>(a.algo));
  }
  return s == CUBLAS_STATUS_SUCCESS ? CUDA_SUCCESS : CUDA_ERROR_LAUNCH_FAILED;
}

CUresult Session::Gemv(const ipc::GemvArgs& a, const Call&) {
  auto it = blas_.find(a.handle);
  if (it == blas_.end()) return CUDA_ERROR_INVALID_HANDLE;
  cublasHandle_t handle = it->second.handle;
  if (a.m < 0 || a.n < 0 || a.incx == 0 || a.incy == 0 || !IsBlasOperation(a.trans)) return CUDA_ERROR_INVALID_VALUE;
  bool t = a.trans != CUBLAS_OP_N;
  int64_t x_len = t ? a.m : a.n, y_len = t ? a.n : a.m;
  if (a.m > 0 && a.n > 0) {
    if (!Owns(a.a, MatrixBytes(a.m, a.n, a.lda, 4), "GEMV matrix A") || !Owns(a.x, VectorBytes(x_len, a.incx, 4), "GEMV vector x") ||
        !Owns(a.y, VectorBytes(y_len, a.incy, 4), "GEMV vector y")) {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  cublasStatus_t s = driver_->cublasSgemv(handle, static_cast<cublasOperation_t>(a.trans), a.m, a.n, &a.alpha,
                                          reinterpret_cast<const float*>(a.a), a.lda, reinterpret_cast<const float*>(a.x), a.incx,
                                          &a.beta, reinterpret_cast<float*>(a.y), a.incy);
  return s == CUBLAS_STATUS_SUCCESS ? CUDA_SUCCESS : CUDA_ERROR_LAUNCH_FAILED;
}

}  // namespace phos::runtime
