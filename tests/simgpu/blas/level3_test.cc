// simgpu's trsm, syrk, geam and dgmm in S and D against plain loops.
#include <cublas_v2.h>

#include <vector>

#include "routine_test_support.h"

namespace phos::sim::blas::testing {
namespace {

template <typename T>
struct Api;
template <>
struct Api<float> {
  static constexpr auto trsm = &cublasStrsm;
  static constexpr auto syrk = &cublasSsyrk;
  static constexpr auto geam = &cublasSgeam;
  static constexpr auto dgmm = &cublasSdgmm;
};
template <>
struct Api<double> {
  static constexpr auto trsm = &cublasDtrsm;
  static constexpr auto syrk = &cublasDsyrk;
  static constexpr auto geam = &cublasDgeam;
  static constexpr auto dgmm = &cublasDdgmm;
};

template <typename T>
class Level3Test : public RoutineTest {};
using Types = ::testing::Types<float, double>;
TYPED_TEST_SUITE(Level3Test, Types);

template <typename T>
T Elem(const std::vector<T>& a, int ld, int i, int j) {
  return a[static_cast<size_t>(j) * ld + i];
}
// op(X)(i, j) of a stored column-major X.
template <typename T>
T Op(const std::vector<T>& a, int ld, cublasOperation_t op, int i, int j) {
  return op == CUBLAS_OP_N ? Elem(a, ld, i, j) : Elem(a, ld, j, i);
}

// B = alpha op(A)^-1 B (left) or alpha B op(A)^-1 (right): the solution X, multiplied back by
// op(A) with the loops, gives alpha B.
TYPED_TEST(Level3Test, TrsmSolvesOnEitherSide) {
  using T = TypeParam;
  const int m = 9, n = 6, ldb = 10;
  const T alpha = T(2);
  const std::vector<T> b = Quarters<T>(static_cast<size_t>(ldb) * n, 1);
  for (cublasSideMode_t side : {CUBLAS_SIDE_LEFT, CUBLAS_SIDE_RIGHT}) {
    for (cublasFillMode_t uplo : {CUBLAS_FILL_MODE_LOWER, CUBLAS_FILL_MODE_UPPER}) {
      for (cublasOperation_t op : {CUBLAS_OP_N, CUBLAS_OP_T}) {
        const int ka = side == CUBLAS_SIDE_LEFT ? m : n, lda = ka + 1;
        std::vector<T> a(static_cast<size_t>(lda) * ka, T(1000));  // the other triangle: never read
        for (int j = 0; j < ka; ++j)
          for (int i = 0; i < ka; ++i)
            if (uplo == CUBLAS_FILL_MODE_UPPER ? i < j : i > j)
              a[static_cast<size_t>(j) * lda + i] = T((i + 2 * j) % 5 - 2) / T(8);
        for (int j = 0; j < ka; ++j) a[static_cast<size_t>(j) * lda + j] = T(2) + T(j % 3);
        auto tri = [&](int i, int j) {  // op(A)(i, j)
          const int r = op == CUBLAS_OP_N ? i : j, c = op == CUBLAS_OP_N ? j : i;
          const bool in = uplo == CUBLAS_FILL_MODE_UPPER ? r <= c : r >= c;
          return in ? Elem(a, lda, r, c) : T(0);
        };
        T* db = this->Upload(b);
        ASSERT_EQ(Api<T>::trsm(this->handle_, side, uplo, op, CUBLAS_DIAG_NON_UNIT, m, n, &alpha,
                               this->Upload(a), lda, db, ldb),
                  CUBLAS_STATUS_SUCCESS);
        const std::vector<T> x = this->Download(db, b.size());
        for (int j = 0; j < n; ++j) {
          for (int i = 0; i < m; ++i) {
            double sum = 0;
            if (side == CUBLAS_SIDE_LEFT) {
              for (int p = 0; p < m; ++p) sum += static_cast<double>(tri(i, p)) * Elem(x, ldb, p, j);
            } else {
              for (int p = 0; p < n; ++p) sum += static_cast<double>(Elem(x, ldb, i, p)) * tri(p, j);
            }
            EXPECT_NEAR(sum, alpha * Elem(b, ldb, i, j), 1e-4)
                << side << uplo << op << " (" << i << ", " << j << ")";
          }
        }
        // Rows m..ldb of B are not the matrix's: untouched.
        for (int j = 0; j < n; ++j) EXPECT_EQ(Elem(x, ldb, m, j), Elem(b, ldb, m, j));
      }
    }
  }
}

// C = alpha op(A) op(A)^T + beta C on one triangle; the other keeps its values.
TYPED_TEST(Level3Test, SyrkWritesOneTriangle) {
  using T = TypeParam;
  const int n = 7, k = 5, ldc = 8;
  const T alpha = T(0.5), beta = T(2);
  const std::vector<T> c = Quarters<T>(static_cast<size_t>(ldc) * n, 2);
  for (cublasFillMode_t uplo : {CUBLAS_FILL_MODE_LOWER, CUBLAS_FILL_MODE_UPPER}) {
    for (cublasOperation_t op : {CUBLAS_OP_N, CUBLAS_OP_T}) {
      const int lda = op == CUBLAS_OP_N ? n : k;
      const std::vector<T> a = Quarters<T>(static_cast<size_t>(lda) * (op == CUBLAS_OP_N ? k : n), 3);
      T* dc = this->Upload(c);
      ASSERT_EQ(Api<T>::syrk(this->handle_, uplo, op, n, k, &alpha, this->Upload(a), lda, &beta, dc, ldc),
                CUBLAS_STATUS_SUCCESS);
      std::vector<T> want = c;
      for (int j = 0; j < n; ++j) {
        for (int i = 0; i < n; ++i) {
          if (uplo == CUBLAS_FILL_MODE_UPPER ? i > j : i < j) continue;
          T sum = 0;
          for (int p = 0; p < k; ++p) sum += Op(a, lda, op, i, p) * Op(a, lda, op, j, p);
          want[static_cast<size_t>(j) * ldc + i] = alpha * sum + beta * Elem(c, ldc, i, j);
        }
      }
      EXPECT_EQ(this->Download(dc, c.size()), want) << uplo << op;
    }
  }
}

TYPED_TEST(Level3Test, GeamAddsTransposedOperandsAndWorksInPlace) {
  using T = TypeParam;
  const int m = 5, n = 4;
  const T alpha = T(1.5), beta = T(-0.5);
  for (cublasOperation_t ta : {CUBLAS_OP_N, CUBLAS_OP_T}) {
    for (cublasOperation_t tb : {CUBLAS_OP_N, CUBLAS_OP_T}) {
      const int lda = (ta == CUBLAS_OP_N ? m : n) + 1, ldb = (tb == CUBLAS_OP_N ? m : n) + 2, ldc = m + 3;
      const std::vector<T> a = Quarters<T>(static_cast<size_t>(lda) * (ta == CUBLAS_OP_N ? n : m), 4);
      const std::vector<T> b = Quarters<T>(static_cast<size_t>(ldb) * (tb == CUBLAS_OP_N ? n : m), 5);
      const std::vector<T> c(static_cast<size_t>(ldc) * n, T(7));
      T* dc = this->Upload(c);
      ASSERT_EQ(Api<T>::geam(this->handle_, ta, tb, m, n, &alpha, this->Upload(a), lda, &beta,
                             this->Upload(b), ldb, dc, ldc),
                CUBLAS_STATUS_SUCCESS);
      std::vector<T> want = c;
      for (int j = 0; j < n; ++j)
        for (int i = 0; i < m; ++i)
          want[static_cast<size_t>(j) * ldc + i] = alpha * Op(a, lda, ta, i, j) + beta * Op(b, ldb, tb, i, j);
      EXPECT_EQ(this->Download(dc, c.size()), want) << ta << tb;
    }
  }
  // In place: C is A; beta 0 leaves B unread (it may be null).
  const std::vector<T> a = Quarters<T>(m * n, 6);
  T* da = this->Upload(a);
  const T zero = T(0);
  ASSERT_EQ(
      Api<T>::geam(this->handle_, CUBLAS_OP_N, CUBLAS_OP_N, m, n, &alpha, da, m, &zero, nullptr, m, da, m),
      CUBLAS_STATUS_SUCCESS);
  std::vector<T> want = a;
  for (T& v : want) v *= alpha;
  EXPECT_EQ(this->Download(da, a.size()), want);
  // In place with C = A transposed is refused, as cuBLAS refuses it.
  EXPECT_EQ(
      Api<T>::geam(this->handle_, CUBLAS_OP_T, CUBLAS_OP_N, m, m, &alpha, da, m, &zero, nullptr, m, da, m),
      CUBLAS_STATUS_INVALID_VALUE);
}

TYPED_TEST(Level3Test, DgmmScalesRowsOrColumns) {
  using T = TypeParam;
  const int m = 6, n = 5, lda = 7, ldc = 6;
  const std::vector<T> a = Quarters<T>(static_cast<size_t>(lda) * n, 7);
  for (cublasSideMode_t side : {CUBLAS_SIDE_LEFT, CUBLAS_SIDE_RIGHT}) {
    const int count = side == CUBLAS_SIDE_LEFT ? m : n, incx = 2;
    const std::vector<T> x = Quarters<T>(count * incx, 8);
    T* dc = this->Upload(std::vector<T>(static_cast<size_t>(ldc) * n, T(3)));
    ASSERT_EQ(Api<T>::dgmm(this->handle_, side, m, n, this->Upload(a), lda, this->Upload(x), incx, dc, ldc),
              CUBLAS_STATUS_SUCCESS);
    std::vector<T> want(static_cast<size_t>(ldc) * n, T(3));
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < m; ++i)
        want[static_cast<size_t>(j) * ldc + i] =
            Elem(a, lda, i, j) * x[At(count, incx, side == CUBLAS_SIDE_LEFT ? i : j)];
    EXPECT_EQ(this->Download(dc, want.size()), want) << side;
  }
  EXPECT_EQ(Api<T>::dgmm(this->handle_, CUBLAS_SIDE_LEFT, m, n, this->Upload(a), m - 1, this->Upload(a), 1,
                         this->Upload(a), ldc),
            CUBLAS_STATUS_INVALID_VALUE);
}

}  // namespace
}  // namespace phos::sim::blas::testing
