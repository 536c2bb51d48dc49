// simgpu's cuBLAS Level 2 in S and D against plain loops: gemv, ger, symv (one triangle read),
// trsv and trmv (one triangle, unit or stored diagonal), with strides and both pointer modes.
#include <cublas_v2.h>

#include <vector>

#include "routine_test_support.h"

namespace phos::sim::blas::testing {
namespace {

template <typename T>
struct Api;
template <>
struct Api<float> {
  static constexpr auto gemv = &cublasSgemv;
  static constexpr auto ger = &cublasSger;
  static constexpr auto symv = &cublasSsymv;
  static constexpr auto trsv = &cublasStrsv;
  static constexpr auto trmv = &cublasStrmv;
};
template <>
struct Api<double> {
  static constexpr auto gemv = &cublasDgemv;
  static constexpr auto ger = &cublasDger;
  static constexpr auto symv = &cublasDsymv;
  static constexpr auto trsv = &cublasDtrsv;
  static constexpr auto trmv = &cublasDtrmv;
};

template <typename T>
class Level2Test : public RoutineTest {};
using Types = ::testing::Types<float, double>;
TYPED_TEST_SUITE(Level2Test, Types);

// Element (i, j) of a column-major matrix with leading dimension ld.
template <typename T>
T& Elem(std::vector<T>& a, int ld, int i, int j) {
  return a[static_cast<size_t>(j) * ld + i];
}

// Whether (i, j) is in the referenced triangle of an n x n matrix stored `uplo`.
bool InTriangle(cublasFillMode_t uplo, int i, int j) {
  return uplo == CUBLAS_FILL_MODE_UPPER ? i <= j : i >= j;
}

TYPED_TEST(Level2Test, GemvEitherWayWithStrides) {
  using T = TypeParam;
  const int m = 23, n = 9, lda = 25;
  std::vector<T> a = Quarters<T>(static_cast<size_t>(lda) * n, 1);
  T* da = this->Upload(a);
  const T alpha = T(1.5), beta = T(0.5);
  for (cublasOperation_t op : {CUBLAS_OP_N, CUBLAS_OP_T}) {
    const bool t = op == CUBLAS_OP_T;
    const int xn = t ? m : n, yn = t ? n : m, incx = -2, incy = 3;
    const std::vector<T> x = Quarters<T>(xn * 2, 2), y = Quarters<T>(yn * 3, 3);
    T* dy = this->Upload(y);
    ASSERT_EQ(Api<T>::gemv(this->handle_, op, m, n, &alpha, da, lda, this->Upload(x), incx, &beta, dy, incy),
              CUBLAS_STATUS_SUCCESS);
    std::vector<T> want = y;
    for (int i = 0; i < yn; ++i) {
      T sum = 0;
      for (int p = 0; p < xn; ++p) sum += (t ? Elem(a, lda, p, i) : Elem(a, lda, i, p)) * x[At(xn, incx, p)];
      want[At(yn, incy, i)] = alpha * sum + beta * y[At(yn, incy, i)];
    }
    EXPECT_EQ(this->Download(dy, y.size()), want) << (t ? "T" : "N");
  }
  // cuBLAS refuses at once: lda below m, an increment of 0.
  EXPECT_EQ(Api<T>::gemv(this->handle_, CUBLAS_OP_N, m, n, &alpha, da, m - 1, da, 1, &beta, da, 1),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(Api<T>::gemv(this->handle_, CUBLAS_OP_N, m, n, &alpha, da, lda, da, 0, &beta, da, 1),
            CUBLAS_STATUS_INVALID_VALUE);
}

TYPED_TEST(Level2Test, GerAddsTheOuterProduct) {
  using T = TypeParam;
  const int m = 11, n = 7, lda = 12;
  const std::vector<T> a = Quarters<T>(static_cast<size_t>(lda) * n, 4), x = Quarters<T>(m, 5),
                       y = Quarters<T>(n * 2, 6);
  T* da = this->Upload(a);
  const T alpha = T(-2);
  ASSERT_EQ(Api<T>::ger(this->handle_, m, n, &alpha, this->Upload(x), 1, this->Upload(y), -2, da, lda),
            CUBLAS_STATUS_SUCCESS);
  std::vector<T> want = a;
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) Elem(want, lda, i, j) += alpha * x[i] * y[At(n, -2, j)];
  EXPECT_EQ(this->Download(da, a.size()), want);
}

// symv reads only its triangle: the other holds values that would change the result if read.
TYPED_TEST(Level2Test, SymvReadsOneTriangle) {
  using T = TypeParam;
  const int n = 13, lda = 13;
  const std::vector<T> x = Quarters<T>(n, 7), y = Quarters<T>(n, 8);
  const T alpha = T(0.5), beta = T(-1);
  for (cublasFillMode_t uplo : {CUBLAS_FILL_MODE_LOWER, CUBLAS_FILL_MODE_UPPER}) {
    std::vector<T> a = Quarters<T>(static_cast<size_t>(lda) * n, 9);
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < n; ++i)
        if (!InTriangle(uplo, i, j)) Elem(a, lda, i, j) = T(1000);
    T* dy = this->Upload(y);
    ASSERT_EQ(
        Api<T>::symv(this->handle_, uplo, n, &alpha, this->Upload(a), lda, this->Upload(x), 1, &beta, dy, 1),
        CUBLAS_STATUS_SUCCESS);
    std::vector<T> want(n);
    for (int i = 0; i < n; ++i) {
      T sum = 0;
      for (int j = 0; j < n; ++j)
        sum += (InTriangle(uplo, i, j) ? Elem(a, lda, i, j) : Elem(a, lda, j, i)) * x[j];
      want[i] = alpha * sum + beta * y[i];
    }
    EXPECT_EQ(this->Download(dy, y.size()), want) << uplo;
  }
  EXPECT_EQ(Api<T>::symv(this->handle_, CUBLAS_FILL_MODE_FULL, n, &alpha, this->Upload(x), n, this->Upload(x),
                         1, &beta, this->Upload(y), 1),
            CUBLAS_STATUS_INVALID_VALUE);
}

// trmv then trsv with the same triangle gives back x; trmv is checked against the loops exactly,
// trsv against x within rounding. The other triangle, and the diagonal of a unit matrix, hold
// values that would change the result if read.
TYPED_TEST(Level2Test, TrmvAndTrsvUseOneTriangle) {
  using T = TypeParam;
  const int n = 12, lda = 14;
  const std::vector<T> x = Quarters<T>(n * 2, 10);
  for (cublasFillMode_t uplo : {CUBLAS_FILL_MODE_LOWER, CUBLAS_FILL_MODE_UPPER}) {
    for (cublasOperation_t op : {CUBLAS_OP_N, CUBLAS_OP_T}) {
      for (cublasDiagType_t diag : {CUBLAS_DIAG_NON_UNIT, CUBLAS_DIAG_UNIT}) {
        std::vector<T> a = Quarters<T>(static_cast<size_t>(lda) * n, 11);
        for (int j = 0; j < n; ++j) {
          for (int i = 0; i < n; ++i) {
            if (!InTriangle(uplo, i, j)) Elem(a, lda, i, j) = T(1000);
            // Small off-diagonal terms keep the solve well conditioned.
            else if (i != j)
              Elem(a, lda, i, j) /= T(8);
          }
          Elem(a, lda, j, j) = diag == CUBLAS_DIAG_UNIT ? T(1000) : T(2);
        }
        auto value = [&](int i, int j) {  // op(A)(i, j) as the routine sees it
          const int r = op == CUBLAS_OP_N ? i : j, c = op == CUBLAS_OP_N ? j : i;
          if (!InTriangle(uplo, r, c)) return T(0);
          return r == c && diag == CUBLAS_DIAG_UNIT ? T(1) : Elem(a, lda, r, c);
        };
        T* da = this->Upload(a);
        T* dx = this->Upload(x);
        ASSERT_EQ(Api<T>::trmv(this->handle_, uplo, op, diag, n, da, lda, dx, 2), CUBLAS_STATUS_SUCCESS);
        std::vector<T> want = x;
        for (int i = 0; i < n; ++i) {
          T sum = 0;
          for (int p = 0; p < n; ++p) sum += value(i, p) * x[At(n, 2, p)];
          want[At(n, 2, i)] = sum;
        }
        EXPECT_EQ(this->Download(dx, x.size()), want) << uplo << op << diag;
        ASSERT_EQ(Api<T>::trsv(this->handle_, uplo, op, diag, n, da, lda, dx, 2), CUBLAS_STATUS_SUCCESS);
        ExpectNear(this->Download(dx, x.size()), x, 1e-4);
      }
    }
  }
  T* d = this->Upload(x);
  EXPECT_EQ(Api<T>::trsv(this->handle_, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N, static_cast<cublasDiagType_t>(5),
                         n, d, n, d, 1),
            CUBLAS_STATUS_INVALID_VALUE);
}

TYPED_TEST(Level2Test, GemvInDevicePointerMode) {
  using T = TypeParam;
  const int m = 6, n = 5;
  const std::vector<T> a = Quarters<T>(m * n, 12), x = Quarters<T>(n, 13), y = Quarters<T>(m, 14);
  T* scalars = this->Upload(std::vector<T>{T(2), T(0)});  // alpha 2, beta 0: y is overwritten
  T* dy = this->Upload(y);
  ASSERT_EQ(cublasSetPointerMode(this->handle_, CUBLAS_POINTER_MODE_DEVICE), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(Api<T>::gemv(this->handle_, CUBLAS_OP_N, m, n, scalars, this->Upload(a), m, this->Upload(x), 1,
                         scalars + 1, dy, 1),
            CUBLAS_STATUS_SUCCESS);
  std::vector<T> want(m);
  for (int i = 0; i < m; ++i) {
    T sum = 0;
    for (int p = 0; p < n; ++p) sum += a[static_cast<size_t>(p) * m + i] * x[p];
    want[i] = T(2) * sum;
  }
  EXPECT_EQ(this->Download(dy, y.size()), want);
}

}  // namespace
}  // namespace phos::sim::blas::testing
