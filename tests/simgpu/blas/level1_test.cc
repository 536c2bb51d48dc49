// simgpu's cuBLAS Level 1 in S and D against plain loops: every routine with positive, negative
// and (where BLAS allows) zero increments, in host and device pointer mode.
#include <cublas_v2.h>

#include <cmath>
#include <utility>
#include <vector>

#include "routine_test_support.h"

namespace phos::sim::blas::testing {
namespace {

template <typename T>
struct Api;
template <>
struct Api<float> {
  static constexpr auto axpy = &cublasSaxpy;
  static constexpr auto dot = &cublasSdot;
  static constexpr auto nrm2 = &cublasSnrm2;
  static constexpr auto scal = &cublasSscal;
  static constexpr auto asum = &cublasSasum;
  static constexpr auto iamax = &cublasIsamax;
  static constexpr auto iamin = &cublasIsamin;
  static constexpr auto copy = &cublasScopy;
  static constexpr auto swap = &cublasSswap;
  static constexpr auto rot = &cublasSrot;
};
template <>
struct Api<double> {
  static constexpr auto axpy = &cublasDaxpy;
  static constexpr auto dot = &cublasDdot;
  static constexpr auto nrm2 = &cublasDnrm2;
  static constexpr auto scal = &cublasDscal;
  static constexpr auto asum = &cublasDasum;
  static constexpr auto iamax = &cublasIdamax;
  static constexpr auto iamin = &cublasIdamin;
  static constexpr auto copy = &cublasDcopy;
  static constexpr auto swap = &cublasDswap;
  static constexpr auto rot = &cublasDrot;
};

template <typename T>
class Level1Test : public RoutineTest {};
using Types = ::testing::Types<float, double>;
TYPED_TEST_SUITE(Level1Test, Types);

TYPED_TEST(Level1Test, AxpyCopyAndScalWithStrides) {
  using T = TypeParam;
  const int n = 37, incx = 2, incy = -3;
  const std::vector<T> x = Quarters<T>(n * incx, 1), y = Quarters<T>(n * 3, 2);
  const T alpha = T(1.5);
  T* dx = this->Upload(x);
  T* dy = this->Upload(y);
  ASSERT_EQ(Api<T>::axpy(this->handle_, n, &alpha, dx, incx, dy, incy), CUBLAS_STATUS_SUCCESS);
  std::vector<T> want = y;
  for (int i = 0; i < n; ++i) want[At(n, incy, i)] += alpha * x[At(n, incx, i)];
  EXPECT_EQ(this->Download(dy, y.size()), want);

  // copy with a negative source increment; the elements between the destination's stay.
  T* dz = this->Upload(std::vector<T>(n * 2, T(9)));
  ASSERT_EQ(Api<T>::copy(this->handle_, n, dx, -incx, dz, 2), CUBLAS_STATUS_SUCCESS);
  std::vector<T> copied(n * 2, T(9));
  for (int i = 0; i < n; ++i) copied[At(n, 2, i)] = x[At(n, -incx, i)];
  EXPECT_EQ(this->Download(dz, copied.size()), copied);

  const T three = T(3);
  ASSERT_EQ(Api<T>::scal(this->handle_, n, &three, dx, incx), CUBLAS_STATUS_SUCCESS);
  std::vector<T> scaled = x;
  for (int i = 0; i < n; ++i) scaled[At(n, incx, i)] *= three;
  EXPECT_EQ(this->Download(dx, x.size()), scaled);
  // scal with incx <= 0 touches nothing (reference BLAS).
  ASSERT_EQ(Api<T>::scal(this->handle_, n, &three, dx, -1), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(this->Download(dx, x.size()), scaled);
}

TYPED_TEST(Level1Test, ReductionsInHostPointerMode) {
  using T = TypeParam;
  const int n = 29;
  std::vector<T> x = Quarters<T>(n * 2, 3), y = Quarters<T>(n * 3, 4);
  x[At(n, 2, 11)] = T(-7);  // the largest magnitude, once
  x[At(n, 2, 4)] = T(0);    // a smallest magnitude
  T* dx = this->Upload(x);
  T* dy = this->Upload(y);
  T dot = 0, nrm2 = 0, asum = 0;
  int imax = 0, imin = 0;
  ASSERT_EQ(Api<T>::dot(this->handle_, n, dx, 2, dy, -3, &dot), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(Api<T>::nrm2(this->handle_, n, dx, 2, &nrm2), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(Api<T>::asum(this->handle_, n, dx, 2, &asum), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(Api<T>::iamax(this->handle_, n, dx, 2, &imax), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(Api<T>::iamin(this->handle_, n, dx, 2, &imin), CUBLAS_STATUS_SUCCESS);
  T want_dot = 0, want_asum = 0;
  double squares = 0;
  int want_min = 0;
  for (int i = 0; i < n; ++i) {
    const T xi = x[At(n, 2, i)];
    want_dot += xi * y[At(n, -3, i)];
    want_asum += std::abs(xi);
    squares += static_cast<double>(xi) * xi;
    if (std::abs(xi) < std::abs(x[At(n, 2, want_min)])) want_min = i;
  }
  // Sixteenths summed: exact in either order.
  EXPECT_EQ(dot, want_dot);
  EXPECT_EQ(asum, want_asum);
  EXPECT_NEAR(nrm2, std::sqrt(squares), 1e-5 * std::sqrt(squares));
  EXPECT_EQ(imax, 12);  // 1-based
  EXPECT_EQ(imin, want_min + 1);
  // Nothing to look at: 0 for every reduction.
  ASSERT_EQ(Api<T>::nrm2(this->handle_, n, dx, 0, &nrm2), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(Api<T>::iamax(this->handle_, 0, dx, 1, &imax), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(nrm2, T(0));
  EXPECT_EQ(imax, 0);
  EXPECT_EQ(Api<T>::dot(this->handle_, n, dx, 2, dy, 1, nullptr), CUBLAS_STATUS_INVALID_VALUE);
}

TYPED_TEST(Level1Test, SwapAndRot) {
  using T = TypeParam;
  const int n = 19;
  const std::vector<T> x = Quarters<T>(n, 5), y = Quarters<T>(n * 2, 6);
  T* dx = this->Upload(x);
  T* dy = this->Upload(y);
  ASSERT_EQ(Api<T>::swap(this->handle_, n, dx, 1, dy, 2), CUBLAS_STATUS_SUCCESS);
  std::vector<T> wx = x, wy = y;
  for (int i = 0; i < n; ++i) std::swap(wx[i], wy[At(n, 2, i)]);
  EXPECT_EQ(this->Download(dx, x.size()), wx);
  EXPECT_EQ(this->Download(dy, y.size()), wy);
  // x' = c x + s y, y' = c y - s x, with c and s exact in binary.
  const T c = T(0.5), s = T(0.75);
  ASSERT_EQ(Api<T>::rot(this->handle_, n, dx, 1, dy, -2, &c, &s), CUBLAS_STATUS_SUCCESS);
  std::vector<T> rx = wx, ry = wy;
  for (int i = 0; i < n; ++i) {
    const T xi = wx[i], yi = wy[At(n, -2, i)];
    rx[i] = c * xi + s * yi;
    ry[At(n, -2, i)] = c * yi - s * xi;
  }
  EXPECT_EQ(this->Download(dx, x.size()), rx);
  EXPECT_EQ(this->Download(dy, y.size()), ry);
}

// Device pointer mode: alpha is read, and results written, on the device, when the work runs
// (after what came before it on the stream).
TYPED_TEST(Level1Test, DevicePointerModeReadsScalarsAndWritesResultsOnTheDevice) {
  using T = TypeParam;
  const int n = 16;
  const std::vector<T> x = Quarters<T>(n, 7), y = Quarters<T>(n, 8);
  T* dx = this->Upload(x);
  T* dy = this->Upload(y);
  T* alpha = this->Upload(std::vector<T>{T(7)});
  T* result = this->Upload(std::vector<T>{T(-1)});
  int* index = this->Upload(std::vector<int>{-1});
  ASSERT_EQ(cublasSetPointerMode(this->handle_, CUBLAS_POINTER_MODE_DEVICE), CUBLAS_STATUS_SUCCESS);
  // alpha is rewritten on the stream before the call runs: the call sees 2, not 7.
  const T two = T(2);
  ASSERT_EQ(cuMemcpyHtoDAsync(reinterpret_cast<CUdeviceptr>(alpha), &two, sizeof(two), nullptr),
            CUDA_SUCCESS);
  ASSERT_EQ(Api<T>::axpy(this->handle_, n, alpha, dx, 1, dy, 1), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(Api<T>::dot(this->handle_, n, dx, 1, dy, 1, result), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(Api<T>::iamax(this->handle_, n, dy, 1, index), CUBLAS_STATUS_SUCCESS);
  std::vector<T> wy = y;
  T want_dot = 0;
  int want_max = 0;
  for (int i = 0; i < n; ++i) wy[i] += two * x[i];
  for (int i = 0; i < n; ++i) {
    want_dot += x[i] * wy[i];
    if (std::abs(wy[i]) > std::abs(wy[want_max])) want_max = i;
  }
  EXPECT_EQ(this->Download(dy, y.size()), wy);
  EXPECT_EQ(this->Download(result, 1), std::vector<T>{want_dot});
  EXPECT_EQ(this->Download(index, 1), std::vector<int>{want_max + 1});
  // A device scalar that is no device memory is refused when the call is made.
  T host_alpha = T(1);
  EXPECT_EQ(Api<T>::axpy(this->handle_, n, &host_alpha, dx, 1, dy, 1), CUBLAS_STATUS_INVALID_VALUE);
}

}  // namespace
}  // namespace phos::sim::blas::testing
