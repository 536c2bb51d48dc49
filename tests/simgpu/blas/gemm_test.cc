// simgpu's GEMMs beyond Sgemm against plain loops: D, C (conjugate transpose), Z, H, the Ex calls'
// half and bfloat16 combinations, strided and pointer-array batches, device pointer mode, and a
// pointer-array entry that is no device memory failing the work as a kernel's bad address would.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <climits>
#include <complex>
#include <cstdint>
#include <iterator>
#include <type_traits>
#include <vector>

#include "routine_test_support.h"

namespace phos::sim::blas::testing {
namespace {

class GemmTest : public RoutineTest {};

// C = alpha op(A) op(B) + beta C with the loops, column-major, in T's arithmetic (complex for a
// complex T; op C conjugates).
template <typename T, typename S>
std::vector<T> Reference(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, S alpha,
                         const std::vector<T>& a, int lda, const std::vector<T>& b, int ldb, S beta,
                         const std::vector<T>& c, int ldc) {
  auto op = [](const std::vector<T>& x, int ld, cublasOperation_t o, int i, int j) {
    T v = o == CUBLAS_OP_N ? x[static_cast<size_t>(j) * ld + i] : x[static_cast<size_t>(i) * ld + j];
    if constexpr (!std::is_arithmetic_v<T>) {
      if (o == CUBLAS_OP_C) v = std::conj(v);
    }
    return v;
  };
  std::vector<T> out = c;
  for (int j = 0; j < n; ++j) {
    for (int i = 0; i < m; ++i) {
      T sum{};
      for (int p = 0; p < k; ++p) sum += op(a, lda, ta, i, p) * op(b, ldb, tb, p, j);
      out[static_cast<size_t>(j) * ldc + i] = alpha * sum + beta * c[static_cast<size_t>(j) * ldc + i];
    }
  }
  return out;
}

template <typename T>
std::vector<std::complex<T>> ComplexQuarters(size_t count, int seed) {
  const std::vector<T> re = Quarters<T>(count, seed), im = Quarters<T>(count, seed + 11);
  std::vector<std::complex<T>> out(count);
  for (size_t i = 0; i < count; ++i) out[i] = {re[i], im[i]};
  return out;
}

TEST_F(GemmTest, DgemmMatchesTheLoops) {
  const int m = 13, n = 7, k = 5, lda = 6, ldb = 8, ldc = 14;  // A is k x m (T), B k x n (N)
  const std::vector<double> a = Quarters<double>(lda * m, 1), b = Quarters<double>(ldb * n, 2),
                            c = Quarters<double>(ldc * n, 3);
  double* dc = Upload(c);
  const double alpha = 1.25, beta = -0.5;
  ASSERT_EQ(cublasDgemm(handle_, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, Upload(a), lda, Upload(b), ldb,
                        &beta, dc, ldc),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(Download(dc, c.size()),
            Reference(CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc));
}

TEST_F(GemmTest, ComplexGemmsConjugateWithOpC) {
  using CF = std::complex<float>;
  using CD = std::complex<double>;
  const int m = 5, n = 4, k = 3;
  const std::vector<CF> a = ComplexQuarters<float>(k * m, 4), b = ComplexQuarters<float>(n * k, 5),
                        c = ComplexQuarters<float>(m * n, 6);
  const CF alpha{0.5f, 1.0f}, beta{-1.0f, 0.25f};
  auto* dc = Upload(c);
  ASSERT_EQ(
      cublasCgemm(handle_, CUBLAS_OP_C, CUBLAS_OP_T, m, n, k, reinterpret_cast<const cuComplex*>(&alpha),
                  reinterpret_cast<const cuComplex*>(Upload(a)), k,
                  reinterpret_cast<const cuComplex*>(Upload(b)), n, reinterpret_cast<const cuComplex*>(&beta),
                  reinterpret_cast<cuComplex*>(dc), m),
      CUBLAS_STATUS_SUCCESS);
  // Sixteenths and their short sums: exact whatever the order of the additions.
  EXPECT_EQ(Download(dc, c.size()),
            Reference(CUBLAS_OP_C, CUBLAS_OP_T, m, n, k, alpha, a, k, b, n, beta, c, m));

  const std::vector<CD> za = ComplexQuarters<double>(m * k, 7), zb = ComplexQuarters<double>(n * k, 8),
                        zc = ComplexQuarters<double>(m * n, 9);
  const CD zalpha{1.0, -0.5}, zbeta{0.0, 0.0};
  auto* dzc = Upload(zc);
  ASSERT_EQ(cublasZgemm(
                handle_, CUBLAS_OP_N, CUBLAS_OP_C, m, n, k, reinterpret_cast<const cuDoubleComplex*>(&zalpha),
                reinterpret_cast<const cuDoubleComplex*>(Upload(za)), m,
                reinterpret_cast<const cuDoubleComplex*>(Upload(zb)), n,
                reinterpret_cast<const cuDoubleComplex*>(&zbeta), reinterpret_cast<cuDoubleComplex*>(dzc), m),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(Download(dzc, zc.size()),
            Reference(CUBLAS_OP_N, CUBLAS_OP_C, m, n, k, zalpha, za, m, zb, n, zbeta, zc, m));
}

// fp16 and bf16 data whose products and short sums are exact in 16 bits: the results are exact.
TEST_F(GemmTest, HalfAndBfloatCombinations) {
  const int m = 6, n = 5, k = 4;
  const std::vector<float> a = Quarters<float>(m * k, 10), b = Quarters<float>(k * n, 11),
                           c = Quarters<float>(m * n, 12);
  const std::vector<float> want = Reference(CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, 1.0f, a, m, b, k, 0.5f, c, m);
  auto halves = [](const std::vector<float>& v) {
    std::vector<__half> h;
    for (float f : v) h.push_back(__float2half(f));
    return h;
  };
  auto bfloats = [](const std::vector<float>& v) {
    std::vector<__nv_bfloat16> h;
    for (float f : v) h.push_back(__float2bfloat16(f));
    return h;
  };
  const float one = 1.0f, half_beta = 0.5f;
  // Hgemm: fp16 throughout, fp16 scalars.
  const __half h_one = __float2half(1.0f), h_beta = __float2half(0.5f);
  __half* hc = Upload(halves(c));
  ASSERT_EQ(cublasHgemm(handle_, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &h_one, Upload(halves(a)), m,
                        Upload(halves(b)), k, &h_beta, hc, m),
            CUBLAS_STATUS_SUCCESS);
  std::vector<float> got;
  for (__half h : Download(hc, c.size())) got.push_back(__half2float(h));
  EXPECT_EQ(got, want);
  // bf16 inputs into fp32, and into bf16, computing in fp32.
  float* fc = Upload(c);
  ASSERT_EQ(cublasGemmEx(handle_, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, Upload(bfloats(a)), CUDA_R_16BF, m,
                         Upload(bfloats(b)), CUDA_R_16BF, k, &half_beta, fc, CUDA_R_32F, m,
                         CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(Download(fc, c.size()), want);
  __nv_bfloat16* bc = Upload(bfloats(c));
  ASSERT_EQ(cublasGemmEx(handle_, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, Upload(bfloats(a)), CUDA_R_16BF, m,
                         Upload(bfloats(b)), CUDA_R_16BF, k, &half_beta, bc, CUDA_R_16BF, m,
                         CUBLAS_COMPUTE_32F_FAST_16BF, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_SUCCESS);
  got.clear();
  for (__nv_bfloat16 h : Download(bc, c.size())) got.push_back(__bfloat162float(h));
  EXPECT_EQ(got, want);
  // fp16 inputs into fp16 computing in fp32; a strided batch of 3 identical entries.
  const int batch = 3;
  std::vector<__half> ha, hb, hcs;
  for (int e = 0; e < batch; ++e) {
    for (__half h : halves(a)) ha.push_back(h);
    for (__half h : halves(b)) hb.push_back(h);
    for (__half h : halves(c)) hcs.push_back(h);
  }
  __half* dcs = Upload(hcs);
  ASSERT_EQ(
      cublasGemmStridedBatchedEx(handle_, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, Upload(ha), CUDA_R_16F, m,
                                 m * k, Upload(hb), CUDA_R_16F, k, k * n, &half_beta, dcs, CUDA_R_16F, m,
                                 m * n, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
      CUBLAS_STATUS_SUCCESS);
  const std::vector<__half> batched = Download(dcs, hcs.size());
  for (size_t i = 0; i < batched.size(); ++i) EXPECT_EQ(__half2float(batched[i]), want[i % want.size()]) << i;
  // Outside the subset: fp16 A with fp32 B.
  EXPECT_EQ(cublasGemmEx(handle_, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, Upload(halves(a)), CUDA_R_16F, m,
                         fc, CUDA_R_32F, k, &one, fc, CUDA_R_32F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_NOT_SUPPORTED);
}

// Each entry's matrices are where the device arrays say, read when the work runs.
TEST_F(GemmTest, PointerArrayBatchesInEitherPointerMode) {
  const int m = 4, n = 3, k = 2, batch = 3;
  std::vector<std::vector<double>> a, b, c;
  std::vector<const double*> pa, pb;
  std::vector<double*> pc;
  for (int e = 0; e < batch; ++e) {
    a.push_back(Quarters<double>(m * k, 20 + e));
    b.push_back(Quarters<double>(k * n, 30 + e));
    c.push_back(Quarters<double>(m * n, 40 + e));
    pa.push_back(Upload(a.back()));
    pb.push_back(Upload(b.back()));
    pc.push_back(Upload(c.back()));
  }
  auto** dpc = Upload(pc);
  const double alpha = 2.0, beta = 1.0;
  ASSERT_EQ(cublasDgemmBatched(handle_, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, Upload(pa), m, Upload(pb),
                               k, &beta, dpc, m, batch),
            CUBLAS_STATUS_SUCCESS);
  for (int e = 0; e < batch; ++e) {
    EXPECT_EQ(Download(pc[e], c[e].size()),
              Reference(CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, alpha, a[e], m, b[e], k, beta, c[e], m))
        << e;
  }
  // Device pointer mode, fp32 through GemmBatchedEx: alpha and beta read on the device.
  std::vector<float> fa = Quarters<float>(m * k, 50), fb = Quarters<float>(k * n, 51),
                     fc = Quarters<float>(m * n, 52);
  float* dfc = Upload(fc);
  const void* arrays_a[] = {Upload(fa)};
  const void* arrays_b[] = {Upload(fb)};
  void* arrays_c[] = {dfc};
  float* scalars = Upload(std::vector<float>{0.5f, 0.0f});
  ASSERT_EQ(cublasSetPointerMode(handle_, CUBLAS_POINTER_MODE_DEVICE), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasGemmBatchedEx(
                handle_, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, scalars,
                Upload(std::vector<const void*>(std::begin(arrays_a), std::end(arrays_a))), CUDA_R_32F, m,
                Upload(std::vector<const void*>(std::begin(arrays_b), std::end(arrays_b))), CUDA_R_32F, k,
                scalars + 1, Upload(std::vector<void*>(std::begin(arrays_c), std::end(arrays_c))), CUDA_R_32F,
                m, 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(Download(dfc, fc.size()),
            Reference(CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, 0.5f, fa, m, fb, k, 0.0f, fc, m));
}

// A strided batch is checked as one range from its lowest entry to its highest, whatever its count:
// a batch of 2^31 - 1 entries whose last runs past its buffer is refused at once (simgpu once kept
// a range per entry: 200 GB for this call), and a negative stride reaches entries below `base`.
TEST_F(GemmTest, AStridedBatchIsCheckedAsOneRangeWhateverItsCount) {
  const int m = 2, n = 2, k = 2;
  const std::vector<float> one_a = Quarters<float>(4, 1), one_b = Quarters<float>(4, 2);
  float* a = Upload(one_a);
  float* b = Upload(one_b);
  float* c = Upload(std::vector<float>(4, 0.0f));
  const float one = 1.0f, zero = 0.0f;
  EXPECT_EQ(cublasSgemmStridedBatched(handle_, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, a, m, 1, b, k, 0, &zero,
                                      c, m, 0, INT32_MAX),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasSgemmStridedBatched(handle_, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, a, m, INT64_MAX / 2, b,
                                      k, 0, &zero, c, m, 0, 3),
            CUBLAS_STATUS_INVALID_VALUE);  // the extent overflows
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(Download(c, 4), std::vector<float>(4, 0.0f));

  // Entry 0 at the end of three matrices, entry 2 at their start.
  std::vector<float> as, bs;
  for (int e = 2; e >= 0; --e) {
    for (float v : Quarters<float>(4, 10 + e)) as.push_back(v);
    for (float v : Quarters<float>(4, 20 + e)) bs.push_back(v);
  }
  float* cs = Upload(std::vector<float>(12, 0.0f));
  ASSERT_EQ(cublasSgemmStridedBatched(handle_, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, Upload(as) + 8, m, -4,
                                      Upload(bs) + 8, k, -4, &zero, cs, m, 4, 3),
            CUBLAS_STATUS_SUCCESS);
  const std::vector<float> got = Download(cs, 12);
  for (int e = 0; e < 3; ++e) {
    const std::vector<float> want = Reference(CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, 1.0f, Quarters<float>(4, 10 + e),
                                              m, Quarters<float>(4, 20 + e), k, 0.0f, std::vector<float>(4), m);
    EXPECT_EQ(std::vector<float>(got.begin() + 4 * e, got.begin() + 4 * e + 4), want) << "entry " << e;
  }
}

TEST_F(GemmTest, APointerArrayEntryThatIsNoDeviceMemoryFailsTheWork) {
  const int m = 2, n = 2, k = 2;
  float* a = Upload(Quarters<float>(4, 1));
  std::vector<float> host(4, 1.0f);  // host memory: a GPU kernel would fault on it
  const float* entries_a[] = {a, a};
  const float* entries_b[] = {a, a};
  float* entries_c[] = {Upload(std::vector<float>(4, 0.0f)), host.data()};
  const float one = 1.0f, zero = 0.0f;
  ASSERT_EQ(cublasSgemmBatched(
                handle_, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one,
                Upload(std::vector<const float*>(std::begin(entries_a), std::end(entries_a))), m,
                Upload(std::vector<const float*>(std::begin(entries_b), std::end(entries_b))), k, &zero,
                Upload(std::vector<float*>(std::begin(entries_c), std::end(entries_c))), m, 2),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(host, std::vector<float>(4, 1.0f));
}

}  // namespace
}  // namespace phos::sim::blas::testing
