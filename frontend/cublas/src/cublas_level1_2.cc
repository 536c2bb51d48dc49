// cuBLAS Levels 1 and 2 in S and D, each one kBlasLevel1 or kBlasLevel2 record. A Level 1
// reduction (dot, nrm2, asum, iamax, iamin) in host pointer mode waits for its result, as cuBLAS
// does; everything else is queued.
#include <cublas_v2.h>

#include <algorithm>
#include <type_traits>

#include "cublas_internal.h"

using namespace phos::frontend::blas;
namespace ipc = phos::ipc;

namespace {

template <typename T>
constexpr int32_t kType = std::is_same_v<T, float> ? CUDA_R_32F : CUDA_R_64F;

bool IsReduction(ipc::BlasLevel1 r) {
  return r == ipc::BlasLevel1::kDot || r == ipc::BlasLevel1::kNrm2 || r == ipc::BlasLevel1::kAsum ||
         r == ipc::BlasLevel1::kIamax || r == ipc::BlasLevel1::kIamin;
}

// One Level 1 call: `alpha` (axpy, scal; rot's c) and `beta` (rot's s) when the routine has them,
// `result` for a reduction (of `result_bytes`: the element, or an int for iamax/iamin).
template <typename T>
cublasStatus_t Level1(cublasHandle_t handle, ipc::BlasLevel1 routine, int n, const void* x, int incx,
                      const void* y, int incy, const T* alpha = nullptr, const T* beta = nullptr,
                      void* result = nullptr, size_t result_bytes = 0) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  const int32_t mode = PointerMode(handle);
  ipc::BlasLevel1Args a{};
  a.handle = Id(handle);
  a.routine = static_cast<int32_t>(routine);
  a.type = kType<T>;
  a.pointer_mode = mode;
  a.n = n;
  a.incx = incx;
  a.incy = incy;
  a.x = Id(x);
  a.y = Id(y);
  const bool scaled = routine == ipc::BlasLevel1::kAxpy || routine == ipc::BlasLevel1::kScal ||
                      routine == ipc::BlasLevel1::kRot;
  if (scaled && !Scalar(mode, alpha, sizeof(T), &a.alpha)) return CUBLAS_STATUS_INVALID_VALUE;
  if (routine == ipc::BlasLevel1::kRot && !Scalar(mode, beta, sizeof(T), &a.beta))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (!IsReduction(routine)) return QueueStatus(Remote(ipc::Op::kBlasLevel1, &a, sizeof(a), false));
  if (result == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  if (mode == CUBLAS_POINTER_MODE_DEVICE) {
    a.result = Id(result);
    return QueueStatus(Remote(ipc::Op::kBlasLevel1, &a, sizeof(a), false));
  }
  uint64_t value = 0;
  cublasStatus_t s = ComputeStatus(Remote(ipc::Op::kBlasLevel1, &a, sizeof(a), true, &value, sizeof(value)));
  if (s == CUBLAS_STATUS_SUCCESS) std::memcpy(result, &value, result_bytes);
  return s;
}

template <typename T>
cublasStatus_t Level2(cublasHandle_t handle, ipc::BlasLevel2Args a, const T* alpha, const T* beta) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  const auto routine = static_cast<ipc::BlasLevel2>(a.routine);
  const bool general = routine == ipc::BlasLevel2::kGemv || routine == ipc::BlasLevel2::kGer;
  const bool triangular = routine == ipc::BlasLevel2::kTrsv || routine == ipc::BlasLevel2::kTrmv;
  const int32_t rows = general ? a.m : a.n;
  if (rows < 0 || a.n < 0 || a.lda < std::max(1, rows) || a.incx == 0 || (!triangular && a.incy == 0)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  a.handle = Id(handle);
  a.type = kType<T>;
  a.pointer_mode = PointerMode(handle);
  const bool has_beta = routine == ipc::BlasLevel2::kGemv || routine == ipc::BlasLevel2::kSymv;
  if ((!triangular && !Scalar(a.pointer_mode, alpha, sizeof(T), &a.alpha)) ||
      (has_beta && !Scalar(a.pointer_mode, beta, sizeof(T), &a.beta))) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  return QueueStatus(Remote(ipc::Op::kBlasLevel2, &a, sizeof(a), false));
}

template <typename T>
cublasStatus_t Gemv(cublasHandle_t h, cublasOperation_t trans, int m, int n, const T* alpha, const T* a,
                    int lda, const T* x, int incx, const T* beta, T* y, int incy) {
  if (h != nullptr && !ValidOp(trans)) return CUBLAS_STATUS_INVALID_VALUE;
  ipc::BlasLevel2Args r{};
  r.routine = static_cast<int32_t>(ipc::BlasLevel2::kGemv);
  r.trans = Value(trans);
  r.m = m, r.n = n, r.lda = lda, r.incx = incx, r.incy = incy;
  r.a = Id(a), r.x = Id(x), r.y = Id(y);
  return Level2(h, r, alpha, beta);
}

template <typename T>
cublasStatus_t Ger(cublasHandle_t h, int m, int n, const T* alpha, const T* x, int incx, const T* y, int incy,
                   T* a, int lda) {
  ipc::BlasLevel2Args r{};
  r.routine = static_cast<int32_t>(ipc::BlasLevel2::kGer);
  r.m = m, r.n = n, r.lda = lda, r.incx = incx, r.incy = incy;
  r.a = Id(a), r.x = Id(x), r.y = Id(y);
  return Level2<T>(h, r, alpha, nullptr);
}

template <typename T>
cublasStatus_t Symv(cublasHandle_t h, cublasFillMode_t uplo, int n, const T* alpha, const T* a, int lda,
                    const T* x, int incx, const T* beta, T* y, int incy) {
  if (h != nullptr && !ValidFill(uplo)) return CUBLAS_STATUS_INVALID_VALUE;
  ipc::BlasLevel2Args r{};
  r.routine = static_cast<int32_t>(ipc::BlasLevel2::kSymv);
  r.uplo = Value(uplo);
  r.n = n, r.lda = lda, r.incx = incx, r.incy = incy;
  r.a = Id(a), r.x = Id(x), r.y = Id(y);
  return Level2(h, r, alpha, beta);
}

template <typename T>
cublasStatus_t Triangular(cublasHandle_t h, ipc::BlasLevel2 routine, cublasFillMode_t uplo,
                          cublasOperation_t trans, cublasDiagType_t diag, int n, const T* a, int lda, T* x,
                          int incx) {
  if (h != nullptr && (!ValidFill(uplo) || !ValidOp(trans) || !ValidDiag(diag)))
    return CUBLAS_STATUS_INVALID_VALUE;
  ipc::BlasLevel2Args r{};
  r.routine = static_cast<int32_t>(routine);
  r.uplo = Value(uplo), r.trans = Value(trans), r.diag = Value(diag);
  r.n = n, r.lda = lda, r.incx = incx, r.incy = 1;
  r.a = Id(a), r.x = Id(x);
  return Level2<T>(h, r, nullptr, nullptr);
}

}  // namespace

extern "C" {

// ---- Level 1 ---------------------------------------------------------------------------------

cublasStatus_t cublasSaxpy_v2(cublasHandle_t h, int n, const float* alpha, const float* x, int incx, float* y,
                              int incy) {
  return Level1(h, ipc::BlasLevel1::kAxpy, n, x, incx, y, incy, alpha);
}
cublasStatus_t cublasDaxpy_v2(cublasHandle_t h, int n, const double* alpha, const double* x, int incx,
                              double* y, int incy) {
  return Level1(h, ipc::BlasLevel1::kAxpy, n, x, incx, y, incy, alpha);
}
cublasStatus_t cublasSdot_v2(cublasHandle_t h, int n, const float* x, int incx, const float* y, int incy,
                             float* result) {
  return Level1<float>(h, ipc::BlasLevel1::kDot, n, x, incx, y, incy, nullptr, nullptr, result,
                       sizeof(float));
}
cublasStatus_t cublasDdot_v2(cublasHandle_t h, int n, const double* x, int incx, const double* y, int incy,
                             double* result) {
  return Level1<double>(h, ipc::BlasLevel1::kDot, n, x, incx, y, incy, nullptr, nullptr, result,
                        sizeof(double));
}
cublasStatus_t cublasSnrm2_v2(cublasHandle_t h, int n, const float* x, int incx, float* result) {
  return Level1<float>(h, ipc::BlasLevel1::kNrm2, n, x, incx, nullptr, 1, nullptr, nullptr, result,
                       sizeof(float));
}
cublasStatus_t cublasDnrm2_v2(cublasHandle_t h, int n, const double* x, int incx, double* result) {
  return Level1<double>(h, ipc::BlasLevel1::kNrm2, n, x, incx, nullptr, 1, nullptr, nullptr, result,
                        sizeof(double));
}
cublasStatus_t cublasSscal_v2(cublasHandle_t h, int n, const float* alpha, float* x, int incx) {
  return Level1(h, ipc::BlasLevel1::kScal, n, x, incx, nullptr, 1, alpha);
}
cublasStatus_t cublasDscal_v2(cublasHandle_t h, int n, const double* alpha, double* x, int incx) {
  return Level1(h, ipc::BlasLevel1::kScal, n, x, incx, nullptr, 1, alpha);
}
cublasStatus_t cublasSasum_v2(cublasHandle_t h, int n, const float* x, int incx, float* result) {
  return Level1<float>(h, ipc::BlasLevel1::kAsum, n, x, incx, nullptr, 1, nullptr, nullptr, result,
                       sizeof(float));
}
cublasStatus_t cublasDasum_v2(cublasHandle_t h, int n, const double* x, int incx, double* result) {
  return Level1<double>(h, ipc::BlasLevel1::kAsum, n, x, incx, nullptr, 1, nullptr, nullptr, result,
                        sizeof(double));
}
cublasStatus_t cublasIsamax_v2(cublasHandle_t h, int n, const float* x, int incx, int* result) {
  return Level1<float>(h, ipc::BlasLevel1::kIamax, n, x, incx, nullptr, 1, nullptr, nullptr, result,
                       sizeof(int));
}
cublasStatus_t cublasIdamax_v2(cublasHandle_t h, int n, const double* x, int incx, int* result) {
  return Level1<double>(h, ipc::BlasLevel1::kIamax, n, x, incx, nullptr, 1, nullptr, nullptr, result,
                        sizeof(int));
}
cublasStatus_t cublasIsamin_v2(cublasHandle_t h, int n, const float* x, int incx, int* result) {
  return Level1<float>(h, ipc::BlasLevel1::kIamin, n, x, incx, nullptr, 1, nullptr, nullptr, result,
                       sizeof(int));
}
cublasStatus_t cublasIdamin_v2(cublasHandle_t h, int n, const double* x, int incx, int* result) {
  return Level1<double>(h, ipc::BlasLevel1::kIamin, n, x, incx, nullptr, 1, nullptr, nullptr, result,
                        sizeof(int));
}
cublasStatus_t cublasScopy_v2(cublasHandle_t h, int n, const float* x, int incx, float* y, int incy) {
  return Level1<float>(h, ipc::BlasLevel1::kCopy, n, x, incx, y, incy);
}
cublasStatus_t cublasDcopy_v2(cublasHandle_t h, int n, const double* x, int incx, double* y, int incy) {
  return Level1<double>(h, ipc::BlasLevel1::kCopy, n, x, incx, y, incy);
}
cublasStatus_t cublasSswap_v2(cublasHandle_t h, int n, float* x, int incx, float* y, int incy) {
  return Level1<float>(h, ipc::BlasLevel1::kSwap, n, x, incx, y, incy);
}
cublasStatus_t cublasDswap_v2(cublasHandle_t h, int n, double* x, int incx, double* y, int incy) {
  return Level1<double>(h, ipc::BlasLevel1::kSwap, n, x, incx, y, incy);
}
cublasStatus_t cublasSrot_v2(cublasHandle_t h, int n, float* x, int incx, float* y, int incy, const float* c,
                             const float* s) {
  return Level1(h, ipc::BlasLevel1::kRot, n, x, incx, y, incy, c, s);
}
cublasStatus_t cublasDrot_v2(cublasHandle_t h, int n, double* x, int incx, double* y, int incy,
                             const double* c, const double* s) {
  return Level1(h, ipc::BlasLevel1::kRot, n, x, incx, y, incy, c, s);
}

// ---- Level 2 ---------------------------------------------------------------------------------

cublasStatus_t cublasSgemv_v2(cublasHandle_t h, cublasOperation_t trans, int m, int n, const float* alpha,
                              const float* a, int lda, const float* x, int incx, const float* beta, float* y,
                              int incy) {
  return Gemv(h, trans, m, n, alpha, a, lda, x, incx, beta, y, incy);
}
cublasStatus_t cublasDgemv_v2(cublasHandle_t h, cublasOperation_t trans, int m, int n, const double* alpha,
                              const double* a, int lda, const double* x, int incx, const double* beta,
                              double* y, int incy) {
  return Gemv(h, trans, m, n, alpha, a, lda, x, incx, beta, y, incy);
}
cublasStatus_t cublasSger_v2(cublasHandle_t h, int m, int n, const float* alpha, const float* x, int incx,
                             const float* y, int incy, float* a, int lda) {
  return Ger(h, m, n, alpha, x, incx, y, incy, a, lda);
}
cublasStatus_t cublasDger_v2(cublasHandle_t h, int m, int n, const double* alpha, const double* x, int incx,
                             const double* y, int incy, double* a, int lda) {
  return Ger(h, m, n, alpha, x, incx, y, incy, a, lda);
}
cublasStatus_t cublasSsymv_v2(cublasHandle_t h, cublasFillMode_t uplo, int n, const float* alpha,
                              const float* a, int lda, const float* x, int incx, const float* beta, float* y,
                              int incy) {
  return Symv(h, uplo, n, alpha, a, lda, x, incx, beta, y, incy);
}
cublasStatus_t cublasDsymv_v2(cublasHandle_t h, cublasFillMode_t uplo, int n, const double* alpha,
                              const double* a, int lda, const double* x, int incx, const double* beta,
                              double* y, int incy) {
  return Symv(h, uplo, n, alpha, a, lda, x, incx, beta, y, incy);
}
cublasStatus_t cublasStrsv_v2(cublasHandle_t h, cublasFillMode_t uplo, cublasOperation_t trans,
                              cublasDiagType_t diag, int n, const float* a, int lda, float* x, int incx) {
  return Triangular(h, ipc::BlasLevel2::kTrsv, uplo, trans, diag, n, a, lda, x, incx);
}
cublasStatus_t cublasDtrsv_v2(cublasHandle_t h, cublasFillMode_t uplo, cublasOperation_t trans,
                              cublasDiagType_t diag, int n, const double* a, int lda, double* x, int incx) {
  return Triangular(h, ipc::BlasLevel2::kTrsv, uplo, trans, diag, n, a, lda, x, incx);
}
cublasStatus_t cublasStrmv_v2(cublasHandle_t h, cublasFillMode_t uplo, cublasOperation_t trans,
                              cublasDiagType_t diag, int n, const float* a, int lda, float* x, int incx) {
  return Triangular(h, ipc::BlasLevel2::kTrmv, uplo, trans, diag, n, a, lda, x, incx);
}
cublasStatus_t cublasDtrmv_v2(cublasHandle_t h, cublasFillMode_t uplo, cublasOperation_t trans,
                              cublasDiagType_t diag, int n, const double* a, int lda, double* x, int incx) {
  return Triangular(h, ipc::BlasLevel2::kTrmv, uplo, trans, diag, n, a, lda, x, incx);
}

}  // extern "C"
