// The exported cuBLAS Level 1 and Level 2 routines in S and D, each a Level1Call or Level2Call
// (blas/blas_ops.h) run on its handle's stream in the handle's pointer mode.
#include <cublas_v2.h>

#include "api/blas_calls.h"

using namespace phos::sim;
using namespace phos::sim::blas;

namespace {

template <typename T>
constexpr cudaDataType kType = sizeof(T) == sizeof(float) ? CUDA_R_32F : CUDA_R_64F;

// The vectors cuBLAS takes as const are never written by the routines that take them so.
template <typename T>
T* Vector(const T* p) {
  return const_cast<T*>(p);
}

template <typename T>
cublasStatus_t OneVector(cublasHandle_t h, Level1 routine, int n, const T* alpha, const T* x, int incx,
                         void* result) {
  return RunLevel1(h, {.routine = routine,
                       .type = kType<T>,
                       .n = n,
                       .alpha = alpha,
                       .x = Vector(x),
                       .incx = incx,
                       .result = result});
}

template <typename T>
cublasStatus_t TwoVectors(cublasHandle_t h, Level1 routine, int n, const T* x, int incx, const T* y, int incy,
                          const T* alpha = nullptr, const T* beta = nullptr, void* result = nullptr) {
  return RunLevel1(h, {.routine = routine,
                       .type = kType<T>,
                       .n = n,
                       .alpha = alpha,
                       .beta = beta,
                       .x = Vector(x),
                       .incx = incx,
                       .y = Vector(y),
                       .incy = incy,
                       .result = result});
}

template <typename T>
cublasStatus_t Gemv(cublasHandle_t h, cublasOperation_t trans, int m, int n, const T* alpha, const T* a,
                    int lda, const T* x, int incx, const T* beta, T* y, int incy) {
  return RunLevel2(h, {.routine = Level2::kGemv,
                       .type = kType<T>,
                       .trans = trans,
                       .m = m,
                       .n = n,
                       .alpha = alpha,
                       .beta = beta,
                       .a = Vector(a),
                       .lda = lda,
                       .x = Vector(x),
                       .incx = incx,
                       .y = y,
                       .incy = incy});
}

template <typename T>
cublasStatus_t Ger(cublasHandle_t h, int m, int n, const T* alpha, const T* x, int incx, const T* y, int incy,
                   T* a, int lda) {
  return RunLevel2(h, {.routine = Level2::kGer,
                       .type = kType<T>,
                       .m = m,
                       .n = n,
                       .alpha = alpha,
                       .a = a,
                       .lda = lda,
                       .x = Vector(x),
                       .incx = incx,
                       .y = Vector(y),
                       .incy = incy});
}

template <typename T>
cublasStatus_t Symv(cublasHandle_t h, cublasFillMode_t uplo, int n, const T* alpha, const T* a, int lda,
                    const T* x, int incx, const T* beta, T* y, int incy) {
  return RunLevel2(h, {.routine = Level2::kSymv,
                       .type = kType<T>,
                       .uplo = uplo,
                       .n = n,
                       .alpha = alpha,
                       .beta = beta,
                       .a = Vector(a),
                       .lda = lda,
                       .x = Vector(x),
                       .incx = incx,
                       .y = y,
                       .incy = incy});
}

template <typename T>
cublasStatus_t Triangular(cublasHandle_t h, Level2 routine, cublasFillMode_t uplo, cublasOperation_t trans,
                          cublasDiagType_t diag, int n, const T* a, int lda, T* x, int incx) {
  return RunLevel2(h, {.routine = routine,
                       .type = kType<T>,
                       .trans = trans,
                       .uplo = uplo,
                       .diag = diag,
                       .n = n,
                       .a = Vector(a),
                       .lda = lda,
                       .x = x,
                       .incx = incx});
}

}  // namespace

extern "C" {

// ---- Level 1 ---------------------------------------------------------------------------------

PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasSaxpy(cublasHandle_t h, int n, const float* alpha,
                                                     const float* x, int incx, float* y, int incy) {
  return TwoVectors(h, Level1::kAxpy, n, x, incx, y, incy, alpha);
}
PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasDaxpy(cublasHandle_t h, int n, const double* alpha,
                                                     const double* x, int incx, double* y, int incy) {
  return TwoVectors(h, Level1::kAxpy, n, x, incx, y, incy, alpha);
}
PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasSdot(cublasHandle_t h, int n, const float* x, int incx,
                                                    const float* y, int incy, float* result) {
  return TwoVectors<float>(h, Level1::kDot, n, x, incx, y, incy, nullptr, nullptr, result);
}
PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasDdot(cublasHandle_t h, int n, const double* x, int incx,
                                                    const double* y, int incy, double* result) {
  return TwoVectors<double>(h, Level1::kDot, n, x, incx, y, incy, nullptr, nullptr, result);
}
PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasSnrm2(cublasHandle_t h, int n, const float* x, int incx,
                                                     float* result) {
  return OneVector<float>(h, Level1::kNrm2, n, nullptr, x, incx, result);
}
PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasDnrm2(cublasHandle_t h, int n, const double* x, int incx,
                                                     double* result) {
  return OneVector<double>(h, Level1::kNrm2, n, nullptr, x, incx, result);
}
PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasSscal(cublasHandle_t h, int n, const float* alpha, float* x,
                                                     int incx) {
  return OneVector<float>(h, Level1::kScal, n, alpha, x, incx, nullptr);
}
PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasDscal(cublasHandle_t h, int n, const double* alpha, double* x,
                                                     int incx) {
  return OneVector<double>(h, Level1::kScal, n, alpha, x, incx, nullptr);
}
PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasSasum(cublasHandle_t h, int n, const float* x, int incx,
                                                     float* result) {
  return OneVector<float>(h, Level1::kAsum, n, nullptr, x, incx, result);
}
PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasDasum(cublasHandle_t h, int n, const double* x, int incx,
                                                     double* result) {
  return OneVector<double>(h, Level1::kAsum, n, nullptr, x, incx, result);
}
PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasIsamax(cublasHandle_t h, int n, const float* x, int incx,
                                                      int* result) {
  return OneVector<float>(h, Level1::kIamax, n, nullptr, x, incx, result);
}
PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasIdamax(cublasHandle_t h, int n, const double* x, int incx,
                                                      int* result) {
  return OneVector<double>(h, Level1::kIamax, n, nullptr, x, incx, result);
}
PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasIsamin(cublasHandle_t h, int n, const float* x, int incx,
                                                      int* result) {
  return OneVector<float>(h, Level1::kIamin, n, nullptr, x, incx, result);
}
PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasIdamin(cublasHandle_t h, int n, const double* x, int incx,
                                                      int* result) {
  return OneVector<double>(h, Level1::kIamin, n, nullptr, x, incx, result);
}
PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasScopy(cublasHandle_t h, int n, const float* x, int incx,
                                                     float* y, int incy) {
  return TwoVectors<float>(h, Level1::kCopy, n, x, incx, y, incy);
}
PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasDcopy(cublasHandle_t h, int n, const double* x, int incx,
                                                     double* y, int incy) {
  return TwoVectors<double>(h, Level1::kCopy, n, x, incx, y, incy);
}
PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasSswap(cublasHandle_t h, int n, float* x, int incx, float* y,
                                                     int incy) {
  return TwoVectors<float>(h, Level1::kSwap, n, x, incx, y, incy);
}
PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasDswap(cublasHandle_t h, int n, double* x, int incx, double* y,
                                                     int incy) {
  return TwoVectors<double>(h, Level1::kSwap, n, x, incx, y, incy);
}
PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasSrot(cublasHandle_t h, int n, float* x, int incx, float* y,
                                                    int incy, const float* c, const float* s) {
  return TwoVectors<float>(h, Level1::kRot, n, x, incx, y, incy, c, s);
}
PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasDrot(cublasHandle_t h, int n, double* x, int incx, double* y,
                                                    int incy, const double* c, const double* s) {
  return TwoVectors<double>(h, Level1::kRot, n, x, incx, y, incy, c, s);
}

// ---- Level 2 ---------------------------------------------------------------------------------

PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasSgemv(cublasHandle_t h, cublasOperation_t trans, int m, int n,
                                                     const float* alpha, const float* a, int lda,
                                                     const float* x, int incx, const float* beta, float* y,
                                                     int incy) {
  return Gemv(h, trans, m, n, alpha, a, lda, x, incx, beta, y, incy);
}
PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasDgemv(cublasHandle_t h, cublasOperation_t trans, int m, int n,
                                                     const double* alpha, const double* a, int lda,
                                                     const double* x, int incx, const double* beta, double* y,
                                                     int incy) {
  return Gemv(h, trans, m, n, alpha, a, lda, x, incx, beta, y, incy);
}
PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasSger(cublasHandle_t h, int m, int n, const float* alpha,
                                                    const float* x, int incx, const float* y, int incy,
                                                    float* a, int lda) {
  return Ger(h, m, n, alpha, x, incx, y, incy, a, lda);
}
PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasDger(cublasHandle_t h, int m, int n, const double* alpha,
                                                    const double* x, int incx, const double* y, int incy,
                                                    double* a, int lda) {
  return Ger(h, m, n, alpha, x, incx, y, incy, a, lda);
}
PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasSsymv(cublasHandle_t h, cublasFillMode_t uplo, int n,
                                                     const float* alpha, const float* a, int lda,
                                                     const float* x, int incx, const float* beta, float* y,
                                                     int incy) {
  return Symv(h, uplo, n, alpha, a, lda, x, incx, beta, y, incy);
}
PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasDsymv(cublasHandle_t h, cublasFillMode_t uplo, int n,
                                                     const double* alpha, const double* a, int lda,
                                                     const double* x, int incx, const double* beta, double* y,
                                                     int incy) {
  return Symv(h, uplo, n, alpha, a, lda, x, incx, beta, y, incy);
}
PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasStrsv(cublasHandle_t h, cublasFillMode_t uplo,
                                                     cublasOperation_t trans, cublasDiagType_t diag, int n,
                                                     const float* a, int lda, float* x, int incx) {
  return Triangular(h, Level2::kTrsv, uplo, trans, diag, n, a, lda, x, incx);
}
PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasDtrsv(cublasHandle_t h, cublasFillMode_t uplo,
                                                     cublasOperation_t trans, cublasDiagType_t diag, int n,
                                                     const double* a, int lda, double* x, int incx) {
  return Triangular(h, Level2::kTrsv, uplo, trans, diag, n, a, lda, x, incx);
}
PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasStrmv(cublasHandle_t h, cublasFillMode_t uplo,
                                                     cublasOperation_t trans, cublasDiagType_t diag, int n,
                                                     const float* a, int lda, float* x, int incx) {
  return Triangular(h, Level2::kTrmv, uplo, trans, diag, n, a, lda, x, incx);
}
PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasDtrmv(cublasHandle_t h, cublasFillMode_t uplo,
                                                     cublasOperation_t trans, cublasDiagType_t diag, int n,
                                                     const double* a, int lda, double* x, int incx) {
  return Triangular(h, Level2::kTrmv, uplo, trans, diag, n, a, lda, x, incx);
}

}  // extern "C"
