// cuBLAS conformance: the subset of cublas_v2.h phos serves (handles, Sgemm, GemmEx, strided
// batched Sgemm, Sgemv), written only against <cuda.h> and <cublas_v2.h>. Expected results are
// the cuBLAS documentation's: column-major storage, op(X) = X or X^T, leading dimensions at least
// the stored rows, C = alpha * op(A) * op(B) + beta * C with C's old contents ignored when beta is
// 0, host pointer mode, work in the order of the handle's stream.
#include <cublas_v2.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "conformance.h"

namespace phos::conformance {
namespace {

#define PHOS_ASSERT_BLAS(expr) ASSERT_EQ((expr), CUBLAS_STATUS_SUCCESS) << #expr

// A column-major host matrix, rows x cols with leading dimension ld.
struct HostMatrix {
  int rows = 0;
  int cols = 0;
  int ld = 0;
  std::vector<float> data;

  HostMatrix(int r, int c, int leading, float seed)
      : rows(r), cols(c), ld(leading), data(static_cast<size_t>(leading) * c) {
    // Small integers and quarters: exact in fp16 and in fp32 sums, so results compare exactly.
    for (size_t i = 0; i < data.size(); ++i)
      data[i] = static_cast<float>((i * 7 + static_cast<size_t>(seed * 13)) % 9) * 0.25f - 1.0f;
  }
  float at(int i, int j) const { return data[static_cast<size_t>(j) * ld + i]; }
  size_t bytes() const { return data.size() * sizeof(float); }
};

// op(X)[i][j] for a stored matrix X.
float OpAt(const HostMatrix& x, cublasOperation_t op, int i, int j) {
  return op == CUBLAS_OP_N ? x.at(i, j) : x.at(j, i);
}

// C = alpha * op(A) * op(B) + beta * C, straightforwardly; beta == 0 ignores C.
std::vector<float> ReferenceGemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
                                 const HostMatrix& a, const HostMatrix& b, float beta, const HostMatrix& c) {
  std::vector<float> out = c.data;
  for (int j = 0; j < n; ++j) {
    for (int i = 0; i < m; ++i) {
      double sum = 0;
      for (int p = 0; p < k; ++p) sum += static_cast<double>(OpAt(a, ta, i, p)) * OpAt(b, tb, p, j);
      const double old = beta == 0.0f ? 0.0 : static_cast<double>(beta) * c.at(i, j);
      out[static_cast<size_t>(j) * c.ld + i] = static_cast<float>(alpha * sum + old);
    }
  }
  return out;
}

class CublasTest : public DriverTest {
 protected:
  void SetUp() override {
    DriverTest::SetUp();
    if (HasFatalFailure()) return;
    PHOS_ASSERT_BLAS(cublasCreate(&handle_));
  }
  void TearDown() override {
    if (handle_ != nullptr) {
      EXPECT_EQ(cublasDestroy(handle_), CUBLAS_STATUS_SUCCESS);
    }
    DriverTest::TearDown();
  }

  // Copies `host` into a new device buffer.
  static CUresult Upload(const void* host, size_t bytes, DeviceBuffer* device) {
    if (CUresult r = device->Allocate(bytes); r != CUDA_SUCCESS) return r;
    return cuMemcpyHtoD(device->get(), host, bytes);
  }
  static std::vector<float> DownloadFloats(const DeviceBuffer& device, size_t count) {
    std::vector<float> out(count);
    EXPECT_EQ(cuMemcpyDtoH(out.data(), device.get(), count * sizeof(float)), CUDA_SUCCESS);
    return out;
  }

  // Runs Sgemm on device copies of a, b, c and returns the resulting C.
  void RunSgemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
                const HostMatrix& a, const HostMatrix& b, float beta, const HostMatrix& c,
                std::vector<float>* out) {
    DeviceBuffer da, db, dc;
    PHOS_ASSERT_CU(Upload(a.data.data(), a.bytes(), &da));
    PHOS_ASSERT_CU(Upload(b.data.data(), b.bytes(), &db));
    PHOS_ASSERT_CU(Upload(c.data.data(), c.bytes(), &dc));
    PHOS_ASSERT_BLAS(cublasSgemm(handle_, ta, tb, m, n, k, &alpha, reinterpret_cast<const float*>(da.get()),
                                 a.ld, reinterpret_cast<const float*>(db.get()), b.ld, &beta,
                                 reinterpret_cast<float*>(dc.get()), c.ld));
    PHOS_ASSERT_CU(cuCtxSynchronize());
    *out = DownloadFloats(dc, c.data.size());
  }

  cublasHandle_t handle_ = nullptr;
};

struct TransposeCase {
  cublasOperation_t ta;
  cublasOperation_t tb;
  const char* name;
};

class CublasTransposeTest : public CublasTest, public ::testing::WithParamInterface<TransposeCase> {};

// Non-square shapes with leading dimensions larger than the stored rows: the padding rows must be
// neither read into the product nor written.
TEST_P(CublasTransposeTest, SgemmMatchesReference) {
  const auto [ta, tb, name] = GetParam();
  const int m = 5, n = 7, k = 3;
  HostMatrix a = ta == CUBLAS_OP_N ? HostMatrix(m, k, m + 2, 1) : HostMatrix(k, m, k + 3, 1);
  HostMatrix b = tb == CUBLAS_OP_N ? HostMatrix(k, n, k + 1, 2) : HostMatrix(n, k, n + 4, 2);
  HostMatrix c(m, n, m + 3, 3);
  std::vector<float> got;
  RunSgemm(ta, tb, m, n, k, 1.0f, a, b, 0.0f, c, &got);
  EXPECT_EQ(got, ReferenceGemm(ta, tb, m, n, k, 1.0f, a, b, 0.0f, c)) << name;
}

INSTANTIATE_TEST_SUITE_P(AllOps, CublasTransposeTest,
                         ::testing::Values(TransposeCase{CUBLAS_OP_N, CUBLAS_OP_N, "NN"},
                                           TransposeCase{CUBLAS_OP_N, CUBLAS_OP_T, "NT"},
                                           TransposeCase{CUBLAS_OP_T, CUBLAS_OP_N, "TN"},
                                           TransposeCase{CUBLAS_OP_T, CUBLAS_OP_T, "TT"},
                                           TransposeCase{CUBLAS_OP_C, CUBLAS_OP_N, "CN"}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST_F(CublasTest, SgemmAppliesAlphaAndBeta) {
  const int m = 4, n = 3, k = 6;
  HostMatrix a(m, k, m, 4), b(k, n, k, 5), c(m, n, m + 1, 6);
  std::vector<float> got;
  RunSgemm(CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, 2.0f, a, b, -0.5f, c, &got);
  EXPECT_EQ(got, ReferenceGemm(CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, 2.0f, a, b, -0.5f, c));
}

// beta == 0: "C does not have to be a valid input" — NaNs in it must not reach the result.
TEST_F(CublasTest, SgemmBetaZeroIgnoresNanInC) {
  const int m = 6, n = 5, k = 4;
  HostMatrix a(m, k, m, 7), b(k, n, k, 8), c(m, n, m, 9);
  for (float& v : c.data) v = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> got;
  RunSgemm(CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, 1.0f, a, b, 0.0f, c, &got);
  for (float v : got) ASSERT_FALSE(std::isnan(v));
  EXPECT_EQ(got, ReferenceGemm(CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, 1.0f, a, b, 0.0f, c));
}

// k == 0 with beta == 0: C becomes zero (alpha * empty sum + 0 * C).
TEST_F(CublasTest, SgemmWithZeroKScalesC) {
  const int m = 3, n = 2;
  HostMatrix a(m, 1, m, 1), b(1, n, 1, 2), c(m, n, m, 3);
  std::vector<float> got;
  RunSgemm(CUBLAS_OP_N, CUBLAS_OP_N, m, n, 0, 1.0f, a, b, 3.0f, c, &got);
  std::vector<float> want = c.data;
  for (float& v : want) v *= 3.0f;
  EXPECT_EQ(got, want);
}

std::vector<__half> ToHalf(const std::vector<float>& in) {
  std::vector<__half> out(in.size());
  for (size_t i = 0; i < in.size(); ++i) out[i] = __float2half(in[i]);
  return out;
}

TEST_F(CublasTest, GemmExHalfInputsFloatOutput) {
  const int m = 8, n = 5, k = 6;
  HostMatrix a(k, m, k + 1, 10), b(k, n, k, 11), c(m, n, m, 12);
  const std::vector<__half> ha = ToHalf(a.data), hb = ToHalf(b.data);
  DeviceBuffer da, db, dc;
  PHOS_ASSERT_CU(Upload(ha.data(), ha.size() * sizeof(__half), &da));
  PHOS_ASSERT_CU(Upload(hb.data(), hb.size() * sizeof(__half), &db));
  PHOS_ASSERT_CU(Upload(c.data.data(), c.bytes(), &dc));
  const float alpha = 1.5f, beta = 0.5f;
  PHOS_ASSERT_BLAS(cublasGemmEx(
      handle_, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, reinterpret_cast<const void*>(da.get()), CUDA_R_16F,
      a.ld, reinterpret_cast<const void*>(db.get()), CUDA_R_16F, b.ld, &beta,
      reinterpret_cast<void*>(dc.get()), CUDA_R_32F, c.ld, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  PHOS_ASSERT_CU(cuCtxSynchronize());
  EXPECT_EQ(DownloadFloats(dc, c.data.size()),
            ReferenceGemm(CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, alpha, a, b, beta, c));
}

TEST_F(CublasTest, GemmExHalfInputsHalfOutput) {
  const int m = 4, n = 6, k = 5;
  HostMatrix a(m, k, m, 13), b(n, k, n, 14), c(m, n, m, 15);
  const std::vector<__half> ha = ToHalf(a.data), hb = ToHalf(b.data), hc = ToHalf(c.data);
  DeviceBuffer da, db, dc;
  PHOS_ASSERT_CU(Upload(ha.data(), ha.size() * sizeof(__half), &da));
  PHOS_ASSERT_CU(Upload(hb.data(), hb.size() * sizeof(__half), &db));
  PHOS_ASSERT_CU(Upload(hc.data(), hc.size() * sizeof(__half), &dc));
  const float alpha = 1.0f, beta = 1.0f;
  PHOS_ASSERT_BLAS(cublasGemmEx(handle_, CUBLAS_OP_N, CUBLAS_OP_T, m, n, k, &alpha,
                                reinterpret_cast<const void*>(da.get()), CUDA_R_16F, a.ld,
                                reinterpret_cast<const void*>(db.get()), CUDA_R_16F, b.ld, &beta,
                                reinterpret_cast<void*>(dc.get()), CUDA_R_16F, c.ld,
                                CUBLAS_COMPUTE_32F_FAST_16F, CUBLAS_GEMM_DEFAULT_TENSOR_OP));
  PHOS_ASSERT_CU(cuCtxSynchronize());
  std::vector<__half> got(hc.size());
  PHOS_ASSERT_CU(cuMemcpyDtoH(got.data(), dc.get(), got.size() * sizeof(__half)));
  // Sums of quarters below 64 are exact in fp16 too.
  const std::vector<float> want = ReferenceGemm(CUBLAS_OP_N, CUBLAS_OP_T, m, n, k, alpha, a, b, beta, c);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(__half2float(got[i]), want[i]) << "element " << i;
}

TEST_F(CublasTest, GemmExFloatMatchesReference) {
  const int m = 3, n = 4, k = 5;
  HostMatrix a(m, k, m, 16), b(k, n, k, 17), c(m, n, m, 18);
  DeviceBuffer da, db, dc;
  PHOS_ASSERT_CU(Upload(a.data.data(), a.bytes(), &da));
  PHOS_ASSERT_CU(Upload(b.data.data(), b.bytes(), &db));
  PHOS_ASSERT_CU(Upload(c.data.data(), c.bytes(), &dc));
  const float alpha = 1.0f, beta = 0.0f;
  PHOS_ASSERT_BLAS(cublasGemmEx(
      handle_, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, reinterpret_cast<const void*>(da.get()), CUDA_R_32F,
      a.ld, reinterpret_cast<const void*>(db.get()), CUDA_R_32F, b.ld, &beta,
      reinterpret_cast<void*>(dc.get()), CUDA_R_32F, c.ld, CUBLAS_COMPUTE_32F_PEDANTIC, CUBLAS_GEMM_DEFAULT));
  PHOS_ASSERT_CU(cuCtxSynchronize());
  EXPECT_EQ(DownloadFloats(dc, c.data.size()),
            ReferenceGemm(CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, alpha, a, b, beta, c));
}

// "CUBLAS_STATUS_NOT_SUPPORTED: the combination of the parameters Atype, Btype and Ctype ... is
// not supported": fp16 A with fp32 B, and fp32 inputs into an fp16 C.
TEST_F(CublasTest, GemmExUnsupportedTypeCombinationIsNotSupported) {
  DeviceBuffer buffer;
  PHOS_ASSERT_CU(buffer.Allocate(4 * kKiB));
  const auto p = reinterpret_cast<void*>(buffer.get());
  const float alpha = 1.0f, beta = 0.0f;
  EXPECT_EQ(cublasGemmEx(handle_, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &alpha, p, CUDA_R_16F, 2, p, CUDA_R_32F,
                         2, &beta, p, CUDA_R_32F, 2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(cublasGemmEx(handle_, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &alpha, p, CUDA_R_32F, 2, p, CUDA_R_32F,
                         2, &beta, p, CUDA_R_16F, 2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_NOT_SUPPORTED);
}

TEST_F(CublasTest, SgemmStridedBatchedComputesEachEntry) {
  const int m = 3, n = 4, k = 2, batch = 3;
  const long long stride_a = m * k + 5, stride_b = k * n + 1, stride_c = m * n + 7;
  // One buffer per operand holding all entries, with gaps between them that must stay untouched.
  HostMatrix a(static_cast<int>(stride_a), batch, static_cast<int>(stride_a), 19);
  HostMatrix b(static_cast<int>(stride_b), batch, static_cast<int>(stride_b), 20);
  HostMatrix c(static_cast<int>(stride_c), batch, static_cast<int>(stride_c), 21);
  DeviceBuffer da, db, dc;
  PHOS_ASSERT_CU(Upload(a.data.data(), a.bytes(), &da));
  PHOS_ASSERT_CU(Upload(b.data.data(), b.bytes(), &db));
  PHOS_ASSERT_CU(Upload(c.data.data(), c.bytes(), &dc));
  const float alpha = 1.0f, beta = 2.0f;
  PHOS_ASSERT_BLAS(cublasSgemmStridedBatched(handle_, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha,
                                             reinterpret_cast<const float*>(da.get()), m, stride_a,
                                             reinterpret_cast<const float*>(db.get()), k, stride_b, &beta,
                                             reinterpret_cast<float*>(dc.get()), m, stride_c, batch));
  PHOS_ASSERT_CU(cuCtxSynchronize());
  const std::vector<float> got = DownloadFloats(dc, c.data.size());
  std::vector<float> want = c.data;
  for (int e = 0; e < batch; ++e) {
    HostMatrix ae(m, k, m, 0), be(k, n, k, 0), ce(m, n, m, 0);
    std::memcpy(ae.data.data(), a.data.data() + e * stride_a, ae.bytes());
    std::memcpy(be.data.data(), b.data.data() + e * stride_b, be.bytes());
    std::memcpy(ce.data.data(), c.data.data() + e * stride_c, ce.bytes());
    const std::vector<float> entry =
        ReferenceGemm(CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, alpha, ae, be, beta, ce);
    std::memcpy(want.data() + e * stride_c, entry.data(), entry.size() * sizeof(float));
  }
  EXPECT_EQ(got, want);
}

// y = alpha * op(A) * x + beta * y with increments > 1 on both vectors.
void ExpectSgemv(cublasHandle_t handle, cublasOperation_t trans) {
  const int m = 5, n = 3, lda = 7, incx = 2, incy = 3;
  HostMatrix a(m, n, lda, 22);
  const int x_len = trans == CUBLAS_OP_N ? n : m;
  const int y_len = trans == CUBLAS_OP_N ? m : n;
  HostMatrix x(1, x_len, incx, 23), y(1, y_len, incy, 24);
  DeviceBuffer da, dx, dy;
  ASSERT_EQ(da.Allocate(a.bytes()), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyHtoD(da.get(), a.data.data(), a.bytes()), CUDA_SUCCESS);
  ASSERT_EQ(dx.Allocate(x.bytes()), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyHtoD(dx.get(), x.data.data(), x.bytes()), CUDA_SUCCESS);
  ASSERT_EQ(dy.Allocate(y.bytes()), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyHtoD(dy.get(), y.data.data(), y.bytes()), CUDA_SUCCESS);
  const float alpha = 2.0f, beta = -1.0f;
  ASSERT_EQ(cublasSgemv(handle, trans, m, n, &alpha, reinterpret_cast<const float*>(da.get()), lda,
                        reinterpret_cast<const float*>(dx.get()), incx, &beta,
                        reinterpret_cast<float*>(dy.get()), incy),
            CUBLAS_STATUS_SUCCESS);
  std::vector<float> got(y.data.size());
  ASSERT_EQ(cuMemcpyDtoH(got.data(), dy.get(), y.bytes()), CUDA_SUCCESS);
  std::vector<float> want = y.data;
  for (int i = 0; i < y_len; ++i) {
    double sum = 0;
    for (int p = 0; p < x_len; ++p) sum += static_cast<double>(OpAt(a, trans, i, p)) * x.at(0, p);
    want[static_cast<size_t>(i) * incy] = static_cast<float>(alpha * sum + beta * y.at(0, i));
  }
  EXPECT_EQ(got, want);
}

TEST_F(CublasTest, SgemvNoTranspose) {
  ExpectSgemv(handle_, CUBLAS_OP_N);
}
TEST_F(CublasTest, SgemvTranspose) {
  ExpectSgemv(handle_, CUBLAS_OP_T);
}

// Work goes on the handle's stream, in order: a GEMM enqueued behind a long copy and the async
// uploads of its inputs sees the uploaded data, and its result is there for the download queued
// after it.
TEST_F(CublasTest, GemmRunsInStreamOrderAfterAsyncCopies) {
  Stream stream;
  PHOS_ASSERT_CU(stream.Create(CU_STREAM_NON_BLOCKING));
  PHOS_ASSERT_BLAS(cublasSetStream(handle_, stream.get()));
  const int m = 64, n = 32, k = 48;
  HostMatrix a(m, k, m, 25), b(k, n, k, 26), c(m, n, m, 27);
  PinnedBuffer ha, hb, hc;
  PHOS_ASSERT_CU(ha.Allocate(a.bytes()));
  PHOS_ASSERT_CU(hb.Allocate(b.bytes()));
  PHOS_ASSERT_CU(hc.Allocate(c.bytes()));
  std::memcpy(ha.get(), a.data.data(), a.bytes());
  std::memcpy(hb.get(), b.data.data(), b.bytes());
  DeviceBuffer da, db, dc;
  PHOS_ASSERT_CU(da.Allocate(a.bytes()));
  PHOS_ASSERT_CU(db.Allocate(b.bytes()));
  PHOS_ASSERT_CU(dc.Allocate(c.bytes()));
  LongCopy long_copy;
  PHOS_ASSERT_CU(long_copy.Allocate());

  PHOS_ASSERT_CU(long_copy.Enqueue(stream.get()));
  PHOS_ASSERT_CU(cuMemcpyHtoDAsync(da.get(), ha.get(), a.bytes(), stream.get()));
  PHOS_ASSERT_CU(cuMemcpyHtoDAsync(db.get(), hb.get(), b.bytes(), stream.get()));
  const float alpha = 1.0f, beta = 0.0f;
  PHOS_ASSERT_BLAS(cublasSgemm(
      handle_, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, reinterpret_cast<const float*>(da.get()), m,
      reinterpret_cast<const float*>(db.get()), k, &beta, reinterpret_cast<float*>(dc.get()), m));
  PHOS_ASSERT_CU(cuMemcpyDtoHAsync(hc.get(), dc.get(), c.bytes(), stream.get()));
  // Still behind the long copy: the GEMM cannot have run yet.
  EXPECT_EQ(cuStreamQuery(stream.get()), CUDA_ERROR_NOT_READY);
  PHOS_ASSERT_CU(cuStreamSynchronize(stream.get()));
  std::vector<float> got(c.data.size());
  std::memcpy(got.data(), hc.get(), c.bytes());
  EXPECT_EQ(got, ReferenceGemm(CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, alpha, a, b, beta, c));
}

TEST_F(CublasTest, StreamDefaultsToNullAndIsSettable) {
  cudaStream_t current = reinterpret_cast<cudaStream_t>(0x1);
  PHOS_ASSERT_BLAS(cublasGetStream(handle_, &current));
  EXPECT_EQ(current, nullptr);
  Stream stream;
  PHOS_ASSERT_CU(stream.Create(CU_STREAM_DEFAULT));
  PHOS_ASSERT_BLAS(cublasSetStream(handle_, stream.get()));
  PHOS_ASSERT_BLAS(cublasGetStream(handle_, &current));
  EXPECT_EQ(current, stream.get());
  PHOS_ASSERT_BLAS(cublasSetStream(handle_, nullptr));
  PHOS_ASSERT_BLAS(cublasGetStream(handle_, &current));
  EXPECT_EQ(current, nullptr);
}

TEST_F(CublasTest, MathModeDefaultsAndIsSettable) {
  cublasMath_t mode = CUBLAS_PEDANTIC_MATH;
  PHOS_ASSERT_BLAS(cublasGetMathMode(handle_, &mode));
  EXPECT_EQ(mode, CUBLAS_DEFAULT_MATH);
  PHOS_ASSERT_BLAS(cublasSetMathMode(handle_, CUBLAS_TF32_TENSOR_OP_MATH));
  PHOS_ASSERT_BLAS(cublasGetMathMode(handle_, &mode));
  EXPECT_EQ(mode, CUBLAS_TF32_TENSOR_OP_MATH);
  const auto pedantic_strict =
      static_cast<cublasMath_t>(CUBLAS_PEDANTIC_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);
  PHOS_ASSERT_BLAS(cublasSetMathMode(handle_, pedantic_strict));
  PHOS_ASSERT_BLAS(cublasGetMathMode(handle_, &mode));
  EXPECT_EQ(mode, pedantic_strict);
}

TEST_F(CublasTest, PointerModeIsHostByDefault) {
  cublasPointerMode_t mode = CUBLAS_POINTER_MODE_DEVICE;
  PHOS_ASSERT_BLAS(cublasGetPointerMode(handle_, &mode));
  EXPECT_EQ(mode, CUBLAS_POINTER_MODE_HOST);
}

// "CUBLAS_STATUS_INVALID_VALUE: if m < 0 or n < 0 or k < 0 ... or if lda < max(1, m) if
// transa == CUBLAS_OP_N ... or if ldc < max(1, m) or if alpha or beta == NULL".
TEST_F(CublasTest, SgemmInvalidArgumentsAreInvalidValue) {
  DeviceBuffer buffer;
  PHOS_ASSERT_CU(buffer.Allocate(64 * kKiB));
  const auto p = reinterpret_cast<float*>(buffer.get());
  const float one = 1.0f;
  const cublasOperation_t N = CUBLAS_OP_N;
  EXPECT_EQ(cublasSgemm(handle_, N, N, -1, 4, 4, &one, p, 4, p, 4, &one, p, 4), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasSgemm(handle_, N, N, 4, -1, 4, &one, p, 4, p, 4, &one, p, 4), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasSgemm(handle_, N, N, 4, 4, -1, &one, p, 4, p, 4, &one, p, 4), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasSgemm(handle_, N, N, 4, 4, 4, &one, p, 3, p, 4, &one, p, 4), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasSgemm(handle_, CUBLAS_OP_T, N, 4, 4, 6, &one, p, 5, p, 6, &one, p, 4),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasSgemm(handle_, N, N, 4, 4, 6, &one, p, 4, p, 5, &one, p, 4), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasSgemm(handle_, N, N, 4, 4, 4, &one, p, 4, p, 4, &one, p, 3), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasSgemm(handle_, static_cast<cublasOperation_t>(7), N, 4, 4, 4, &one, p, 4, p, 4, &one, p, 4),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasSgemm(handle_, N, N, 4, 4, 4, nullptr, p, 4, p, 4, &one, p, 4),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasSgemmStridedBatched(handle_, N, N, 4, 4, 4, &one, p, 4, 16, p, 4, 16, &one, p, 4, 16, -1),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasSgemv(handle_, N, 4, 4, &one, p, 4, p, 0, &one, p, 1), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasSgemv(handle_, N, 4, 4, &one, p, 3, p, 1, &one, p, 1), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasSgemv(handle_, N, 4, 4, &one, p, 4, p, 1, &one, p, 0), CUBLAS_STATUS_INVALID_VALUE);
  PHOS_EXPECT_CU(cuCtxSynchronize());
}

// A NULL handle is "the library was not initialized".
TEST_F(CublasTest, NullHandleIsNotInitialized) {
  const float one = 1.0f;
  EXPECT_EQ(
      cublasSgemm(nullptr, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, nullptr, 1, nullptr, 1, &one, nullptr, 1),
      CUBLAS_STATUS_NOT_INITIALIZED);
  EXPECT_EQ(cublasSetStream(nullptr, nullptr), CUBLAS_STATUS_NOT_INITIALIZED);
  cublasMath_t mode;
  EXPECT_EQ(cublasGetMathMode(nullptr, &mode), CUBLAS_STATUS_NOT_INITIALIZED);
}

// Empty problems are successful no-ops (BLAS quick return), whatever the pointers.
TEST_F(CublasTest, EmptyProblemIsSuccess) {
  const float one = 1.0f;
  EXPECT_EQ(
      cublasSgemm(handle_, CUBLAS_OP_N, CUBLAS_OP_N, 0, 4, 4, &one, nullptr, 1, nullptr, 4, &one, nullptr, 1),
      CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasSgemv(handle_, CUBLAS_OP_N, 4, 0, &one, nullptr, 4, nullptr, 1, &one, nullptr, 1),
            CUBLAS_STATUS_SUCCESS);
  PHOS_EXPECT_CU(cuCtxSynchronize());
}

TEST_F(CublasTest, VersionAndStatusNames) {
  int version = 0;
  PHOS_ASSERT_BLAS(cublasGetVersion(handle_, &version));
  EXPECT_EQ(version / 10000, CUBLAS_VER_MAJOR);
  EXPECT_STREQ(cublasGetStatusName(CUBLAS_STATUS_INVALID_VALUE), "CUBLAS_STATUS_INVALID_VALUE");
  EXPECT_STREQ(cublasGetStatusName(CUBLAS_STATUS_SUCCESS), "CUBLAS_STATUS_SUCCESS");
  EXPECT_GT(std::strlen(cublasGetStatusString(CUBLAS_STATUS_NOT_INITIALIZED)), 0u);
}

}  // namespace
}  // namespace phos::conformance
