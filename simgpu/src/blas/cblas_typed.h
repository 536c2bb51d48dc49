// OpenBLAS's cblas routines by element type, so that each cuBLAS routine is written once for its
// S and D forms.
#pragma once

#include <cblas.h>

#include <cstddef>

namespace phos::sim::blas::cblas {

inline void axpy(int n, float a, const float* x, int incx, float* y, int incy) {
  cblas_saxpy(n, a, x, incx, y, incy);
}
inline void axpy(int n, double a, const double* x, int incx, double* y, int incy) {
  cblas_daxpy(n, a, x, incx, y, incy);
}
inline float dot(int n, const float* x, int incx, const float* y, int incy) {
  return cblas_sdot(n, x, incx, y, incy);
}
inline double dot(int n, const double* x, int incx, const double* y, int incy) {
  return cblas_ddot(n, x, incx, y, incy);
}
inline float nrm2(int n, const float* x, int incx) {
  return cblas_snrm2(n, x, incx);
}
inline double nrm2(int n, const double* x, int incx) {
  return cblas_dnrm2(n, x, incx);
}
inline float asum(int n, const float* x, int incx) {
  return cblas_sasum(n, x, incx);
}
inline double asum(int n, const double* x, int incx) {
  return cblas_dasum(n, x, incx);
}
inline void scal(int n, float a, float* x, int incx) {
  cblas_sscal(n, a, x, incx);
}
inline void scal(int n, double a, double* x, int incx) {
  cblas_dscal(n, a, x, incx);
}
inline size_t iamax(int n, const float* x, int incx) {
  return cblas_isamax(n, x, incx);
}
inline size_t iamax(int n, const double* x, int incx) {
  return cblas_idamax(n, x, incx);
}
inline size_t iamin(int n, const float* x, int incx) {
  return cblas_isamin(n, x, incx);
}
inline size_t iamin(int n, const double* x, int incx) {
  return cblas_idamin(n, x, incx);
}
inline void copy(int n, const float* x, int incx, float* y, int incy) {
  cblas_scopy(n, x, incx, y, incy);
}
inline void copy(int n, const double* x, int incx, double* y, int incy) {
  cblas_dcopy(n, x, incx, y, incy);
}
inline void swap(int n, float* x, int incx, float* y, int incy) {
  cblas_sswap(n, x, incx, y, incy);
}
inline void swap(int n, double* x, int incx, double* y, int incy) {
  cblas_dswap(n, x, incx, y, incy);
}
inline void rot(int n, float* x, int incx, float* y, int incy, float c, float s) {
  cblas_srot(n, x, incx, y, incy, c, s);
}
inline void rot(int n, double* x, int incx, double* y, int incy, double c, double s) {
  cblas_drot(n, x, incx, y, incy, c, s);
}

inline void gemv(CBLAS_TRANSPOSE t, int m, int n, float alpha, const float* a, int lda, const float* x,
                 int incx, float beta, float* y, int incy) {
  cblas_sgemv(CblasColMajor, t, m, n, alpha, a, lda, x, incx, beta, y, incy);
}
inline void gemv(CBLAS_TRANSPOSE t, int m, int n, double alpha, const double* a, int lda, const double* x,
                 int incx, double beta, double* y, int incy) {
  cblas_dgemv(CblasColMajor, t, m, n, alpha, a, lda, x, incx, beta, y, incy);
}
inline void ger(int m, int n, float alpha, const float* x, int incx, const float* y, int incy, float* a,
                int lda) {
  cblas_sger(CblasColMajor, m, n, alpha, x, incx, y, incy, a, lda);
}
inline void ger(int m, int n, double alpha, const double* x, int incx, const double* y, int incy, double* a,
                int lda) {
  cblas_dger(CblasColMajor, m, n, alpha, x, incx, y, incy, a, lda);
}
inline void symv(CBLAS_UPLO u, int n, float alpha, const float* a, int lda, const float* x, int incx,
                 float beta, float* y, int incy) {
  cblas_ssymv(CblasColMajor, u, n, alpha, a, lda, x, incx, beta, y, incy);
}
inline void symv(CBLAS_UPLO u, int n, double alpha, const double* a, int lda, const double* x, int incx,
                 double beta, double* y, int incy) {
  cblas_dsymv(CblasColMajor, u, n, alpha, a, lda, x, incx, beta, y, incy);
}
inline void trsv(CBLAS_UPLO u, CBLAS_TRANSPOSE t, CBLAS_DIAG d, int n, const float* a, int lda, float* x,
                 int incx) {
  cblas_strsv(CblasColMajor, u, t, d, n, a, lda, x, incx);
}
inline void trsv(CBLAS_UPLO u, CBLAS_TRANSPOSE t, CBLAS_DIAG d, int n, const double* a, int lda, double* x,
                 int incx) {
  cblas_dtrsv(CblasColMajor, u, t, d, n, a, lda, x, incx);
}
inline void trmv(CBLAS_UPLO u, CBLAS_TRANSPOSE t, CBLAS_DIAG d, int n, const float* a, int lda, float* x,
                 int incx) {
  cblas_strmv(CblasColMajor, u, t, d, n, a, lda, x, incx);
}
inline void trmv(CBLAS_UPLO u, CBLAS_TRANSPOSE t, CBLAS_DIAG d, int n, const double* a, int lda, double* x,
                 int incx) {
  cblas_dtrmv(CblasColMajor, u, t, d, n, a, lda, x, incx);
}

inline void trsm(CBLAS_SIDE side, CBLAS_UPLO u, CBLAS_TRANSPOSE t, CBLAS_DIAG d, int m, int n, float alpha,
                 const float* a, int lda, float* b, int ldb) {
  cblas_strsm(CblasColMajor, side, u, t, d, m, n, alpha, a, lda, b, ldb);
}
inline void trsm(CBLAS_SIDE side, CBLAS_UPLO u, CBLAS_TRANSPOSE t, CBLAS_DIAG d, int m, int n, double alpha,
                 const double* a, int lda, double* b, int ldb) {
  cblas_dtrsm(CblasColMajor, side, u, t, d, m, n, alpha, a, lda, b, ldb);
}
inline void syrk(CBLAS_UPLO u, CBLAS_TRANSPOSE t, int n, int k, float alpha, const float* a, int lda,
                 float beta, float* c, int ldc) {
  cblas_ssyrk(CblasColMajor, u, t, n, k, alpha, a, lda, beta, c, ldc);
}
inline void syrk(CBLAS_UPLO u, CBLAS_TRANSPOSE t, int n, int k, double alpha, const double* a, int lda,
                 double beta, double* c, int ldc) {
  cblas_dsyrk(CblasColMajor, u, t, n, k, alpha, a, lda, beta, c, ldc);
}

}  // namespace phos::sim::blas::cblas
