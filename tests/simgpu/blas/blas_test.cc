// simgpu's cuBLAS beyond the cuBLAS contract: operand pointers checked against device memory,
// garbage and stale handles refused, handle creation paying the profile's cost, large problems
// split across the compute workers, and the exports under cublas_v2.h's names.
#include <cublas_v2.h>
#include <cuda.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "phos/simgpu/simgpu.h"

namespace {

constexpr double kTimeScale = 10.0;

class SimgpuEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    PhosSimConfig config{"ci", kTimeScale, 2, 4ull << 30};
    ASSERT_EQ(phosSimConfigure(&config), CUDA_SUCCESS);
    ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  }
};
const auto* const kEnvironment = ::testing::AddGlobalTestEnvironment(new SimgpuEnvironment);

double MsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

// Column-major rows x cols, leading dimension ld; exact small values (quarters in [-1, 1]).
std::vector<float> Pattern(int ld, int cols, int seed) {
  std::vector<float> v(static_cast<size_t>(ld) * cols);
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = static_cast<float>((i * 5 + static_cast<size_t>(seed)) % 9) * 0.25f - 1.0f;
  return v;
}

float OpAt(const std::vector<float>& x, int ld, cublasOperation_t op, int i, int j) {
  return op == CUBLAS_OP_N ? x[static_cast<size_t>(j) * ld + i] : x[static_cast<size_t>(i) * ld + j];
}

class BlasTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(cuCtxCreate(&ctx_, nullptr, 0, 0), CUDA_SUCCESS);
    ASSERT_EQ(cublasCreate(&handle_), CUBLAS_STATUS_SUCCESS);
  }
  void TearDown() override {
    if (handle_ != nullptr) cublasDestroy(handle_);
    for (CUdeviceptr p : buffers_) cuMemFree(p);
    if (ctx_ != nullptr) {
      EXPECT_EQ(cuCtxDestroy(ctx_), CUDA_SUCCESS);
    }
  }

  // Device copy of `host` (freed after the test).
  float* Upload(const std::vector<float>& host) {
    CUdeviceptr p = 0;
    EXPECT_EQ(cuMemAlloc(&p, host.size() * sizeof(float)), CUDA_SUCCESS);
    EXPECT_EQ(cuMemcpyHtoD(p, host.data(), host.size() * sizeof(float)), CUDA_SUCCESS);
    buffers_.push_back(p);
    return reinterpret_cast<float*>(p);
  }
  static std::vector<float> Download(const float* device, size_t count) {
    std::vector<float> out(count);
    EXPECT_EQ(cuMemcpyDtoH(out.data(), reinterpret_cast<CUdeviceptr>(device), count * sizeof(float)),
              CUDA_SUCCESS);
    return out;
  }

  // Sgemm on device copies against a straightforward reference, C with beta = 0.5.
  void ExpectSgemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k) {
    const int lda = (ta == CUBLAS_OP_N ? m : k) + 1;
    const int ldb = (tb == CUBLAS_OP_N ? k : n) + 2;
    const int ldc = m + 3;
    const std::vector<float> a = Pattern(lda, ta == CUBLAS_OP_N ? k : m, 1);
    const std::vector<float> b = Pattern(ldb, tb == CUBLAS_OP_N ? n : k, 2);
    const std::vector<float> c = Pattern(ldc, n, 3);
    float* dc = Upload(c);
    const float alpha = 1.0f, beta = 0.5f;
    ASSERT_EQ(cublasSgemm(handle_, ta, tb, m, n, k, &alpha, Upload(a), lda, Upload(b), ldb, &beta, dc, ldc),
              CUBLAS_STATUS_SUCCESS);
    const std::vector<float> got = Download(dc, c.size());
    std::vector<float> want = c;
    for (int j = 0; j < n; ++j) {
      for (int i = 0; i < m; ++i) {
        double sum = 0;
        for (int p = 0; p < k; ++p)
          sum += static_cast<double>(OpAt(a, lda, ta, i, p)) * OpAt(b, ldb, tb, p, j);
        want[static_cast<size_t>(j) * ldc + i] =
            static_cast<float>(sum + 0.5 * c[static_cast<size_t>(j) * ldc + i]);
      }
    }
    EXPECT_EQ(got, want);
  }

  CUcontext ctx_ = nullptr;
  cublasHandle_t handle_ = nullptr;
  std::vector<CUdeviceptr> buffers_;
};

// ---- Operand checks (a departure: on a GPU a bad pointer faults or corrupts memory) ----------

TEST_F(BlasTest, HostPointerOperandIsInvalidValue) {
  std::vector<float> host(16, 1.0f);
  float* dc = Upload(std::vector<float>(16, 7.0f));
  const float one = 1.0f, zero = 0.0f;
  EXPECT_EQ(cublasSgemm(handle_, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, host.data(), 4, host.data(), 4,
                        &zero, dc, 4),
            CUBLAS_STATUS_INVALID_VALUE);
  // Nothing ran: C keeps its contents.
  EXPECT_EQ(Download(dc, 16), std::vector<float>(16, 7.0f));
}

// The extent is (cols - 1) * ld + rows elements: exactly that fits, one more row of ld does not.
TEST_F(BlasTest, OperandExtentComesFromLeadingDimension) {
  const int m = 3, n = 4, ldc = 5;
  const size_t extent = static_cast<size_t>(n - 1) * ldc + m;
  float* a = Upload(Pattern(m, 2, 1));
  float* b = Upload(Pattern(2, n, 2));
  float* c = Upload(std::vector<float>(extent, 0.0f));
  const float one = 1.0f, zero = 0.0f;
  EXPECT_EQ(cublasSgemm(handle_, CUBLAS_OP_N, CUBLAS_OP_N, m, n, 2, &one, a, m, b, 2, &zero, c, ldc),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasSgemm(handle_, CUBLAS_OP_N, CUBLAS_OP_N, m, n, 2, &one, a, m, b, 2, &zero, c, ldc + 1),
            CUBLAS_STATUS_INVALID_VALUE);
  // A transposed A is k x m in memory: with k = 3 it needs more than the 3 x 2 allocated.
  EXPECT_EQ(cublasSgemm(handle_, CUBLAS_OP_T, CUBLAS_OP_N, m, n, 3, &one, a, 3, b, 3, &zero, c, ldc),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
}

// A GPU's kernel would fault on a float that is not 4-byte aligned: refused, nothing runs.
TEST_F(BlasTest, MisalignedOperandIsInvalidValue) {
  float* a = Upload(std::vector<float>(17, 1.0f));
  float* c = Upload(std::vector<float>(16, 7.0f));
  const float one = 1.0f, zero = 0.0f;
  const auto* odd = reinterpret_cast<float*>(reinterpret_cast<char*>(a) + 1);
  EXPECT_EQ(cublasSgemm(handle_, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, odd, 4, a, 4, &zero, c, 4),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasSaxpy(handle_, 4, &one, odd, 1, c, 1), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(Download(c, 16), std::vector<float>(16, 7.0f));
  EXPECT_EQ(cublasSgemm(handle_, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, a + 1, 4, a, 4, &zero, c, 4),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
}

TEST_F(BlasTest, FreedOperandIsInvalidValue) {
  CUdeviceptr freed = 0;
  ASSERT_EQ(cuMemAlloc(&freed, 1 << 20), CUDA_SUCCESS);
  ASSERT_EQ(cuMemFree(freed), CUDA_SUCCESS);
  float* y = Upload(std::vector<float>(8, 0.0f));
  const float one = 1.0f;
  EXPECT_EQ(cublasSgemv(handle_, CUBLAS_OP_N, 8, 8, &one, reinterpret_cast<float*>(freed), 8,
                        reinterpret_cast<float*>(freed), 1, &one, y, 1),
            CUBLAS_STATUS_INVALID_VALUE);
}

// With alpha == 0, A and B are not read (BLAS), so they are not checked either.
TEST_F(BlasTest, OperandsNotReadAreNotChecked) {
  float* c = Upload(std::vector<float>(4, 2.0f));
  const float zero = 0.0f, three = 3.0f;
  EXPECT_EQ(
      cublasSgemm(handle_, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &zero, nullptr, 2, nullptr, 2, &three, c, 2),
      CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(Download(c, 4), std::vector<float>(4, 6.0f));
}

// ---- Handles ---------------------------------------------------------------------------------

TEST_F(BlasTest, GarbageAndStaleHandlesAreNotInitialized) {
  const float one = 1.0f;
  cublasMath_t mode;
  EXPECT_EQ(cublasGetMathMode(reinterpret_cast<cublasHandle_t>(0x1234), &mode),
            CUBLAS_STATUS_NOT_INITIALIZED);
  EXPECT_EQ(cublasGetMathMode(reinterpret_cast<cublasHandle_t>(~0ull), &mode), CUBLAS_STATUS_NOT_INITIALIZED);
  // A driver handle of another kind is not a cuBLAS handle.
  CUstream stream = nullptr;
  ASSERT_EQ(cuStreamCreate(&stream, 0), CUDA_SUCCESS);
  EXPECT_EQ(cublasGetMathMode(reinterpret_cast<cublasHandle_t>(stream), &mode),
            CUBLAS_STATUS_NOT_INITIALIZED);
  ASSERT_EQ(cuStreamDestroy(stream), CUDA_SUCCESS);

  cublasHandle_t destroyed = nullptr;
  ASSERT_EQ(cublasCreate(&destroyed), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasDestroy(destroyed), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasDestroy(destroyed), CUBLAS_STATUS_NOT_INITIALIZED);
  EXPECT_EQ(cublasSgemm(destroyed, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, nullptr, 1, nullptr, 1, &one,
                        nullptr, 1),
            CUBLAS_STATUS_NOT_INITIALIZED);
  EXPECT_EQ(cublasCreate(nullptr), CUBLAS_STATUS_INVALID_VALUE);
}

TEST_F(BlasTest, HandleWhoseContextWasDestroyedIsNotInitialized) {
  CUcontext other = nullptr;
  ASSERT_EQ(cuCtxCreate(&other, nullptr, 0, 0), CUDA_SUCCESS);
  cublasHandle_t orphan = nullptr;
  ASSERT_EQ(cublasCreate(&orphan), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cuCtxDestroy(other), CUDA_SUCCESS);  // ctx_ is current again
  cudaStream_t stream;
  EXPECT_EQ(cublasGetStream(orphan, &stream), CUBLAS_STATUS_NOT_INITIALIZED);
  EXPECT_EQ(cublasDestroy(orphan), CUBLAS_STATUS_SUCCESS);
}

TEST_F(BlasTest, CreateNeedsACurrentContext) {
  CUcontext popped = nullptr;
  ASSERT_EQ(cuCtxPopCurrent(&popped), CUDA_SUCCESS);
  cublasHandle_t handle = nullptr;
  EXPECT_EQ(cublasCreate(&handle), CUBLAS_STATUS_NOT_INITIALIZED);
  ASSERT_EQ(cuCtxPushCurrent(popped), CUDA_SUCCESS);
}

TEST_F(BlasTest, StreamOfAnotherContextIsRefused) {
  CUcontext other = nullptr;
  ASSERT_EQ(cuCtxCreate(&other, nullptr, 0, 0), CUDA_SUCCESS);
  CUstream foreign = nullptr;
  ASSERT_EQ(cuStreamCreate(&foreign, 0), CUDA_SUCCESS);
  CUcontext popped = nullptr;
  ASSERT_EQ(cuCtxPopCurrent(&popped), CUDA_SUCCESS);
  EXPECT_EQ(cublasSetStream(handle_, foreign), CUBLAS_STATUS_INVALID_VALUE);
  ASSERT_EQ(cuCtxDestroy(other), CUDA_SUCCESS);
}

TEST_F(BlasTest, StreamDestroyedAfterSetStreamFailsTheCall) {
  CUstream stream = nullptr;
  ASSERT_EQ(cuStreamCreate(&stream, 0), CUDA_SUCCESS);
  ASSERT_EQ(cublasSetStream(handle_, stream), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cuStreamDestroy(stream), CUDA_SUCCESS);
  float* c = Upload(std::vector<float>(4, 0.0f));
  const float one = 1.0f;
  EXPECT_EQ(cublasSgemm(handle_, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, c, 2, c, 2, &one, c, 2),
            CUBLAS_STATUS_EXECUTION_FAILED);
}

TEST_F(BlasTest, PointerModesAreKeptAndUnknownValuesRefused) {
  cublasPointerMode_t mode = CUBLAS_POINTER_MODE_DEVICE;
  ASSERT_EQ(cublasGetPointerMode(handle_, &mode), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(mode, CUBLAS_POINTER_MODE_HOST);  // a new handle's
  EXPECT_EQ(cublasSetPointerMode(handle_, CUBLAS_POINTER_MODE_DEVICE), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasGetPointerMode(handle_, &mode), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(mode, CUBLAS_POINTER_MODE_DEVICE);
  EXPECT_EQ(cublasSetPointerMode(handle_, static_cast<cublasPointerMode_t>(2)), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasSetPointerMode(handle_, CUBLAS_POINTER_MODE_HOST), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasSetMathMode(handle_, static_cast<cublasMath_t>(5)), CUBLAS_STATUS_INVALID_VALUE);
  // Integer GEMMs are outside the subset.
  const int32_t one = 1;
  EXPECT_EQ(cublasGemmEx(handle_, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, nullptr, CUDA_R_8I, 1, nullptr, CUDA_R_8I,
                         1, &one, nullptr, CUDA_R_32I, 1, CUBLAS_COMPUTE_32I, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_NOT_SUPPORTED);
}

// The first handle of a context pays the profile's first-handle cost (ci: 2.76 ms), later ones
// the steady cost (0.33 ms), both times the time scale.
TEST_F(BlasTest, HandleCreationPaysTheProfileCost) {
  CUcontext fresh = nullptr;
  ASSERT_EQ(cuCtxCreate(&fresh, nullptr, 0, 0), CUDA_SUCCESS);
  cublasHandle_t first = nullptr, second = nullptr;
  auto start = std::chrono::steady_clock::now();
  ASSERT_EQ(cublasCreate(&first), CUBLAS_STATUS_SUCCESS);
  const double first_ms = MsSince(start);
  EXPECT_GE(first_ms, 2.76 * kTimeScale * 0.99);
  // A later handle is timed a few times while the first one lives: each pays at least the steady
  // cost, and the fastest (a loaded host delays any single one) stays below the first-handle cost.
  double fastest_ms = 0;
  for (int attempt = 0; attempt < 3; ++attempt) {
    start = std::chrono::steady_clock::now();
    ASSERT_EQ(cublasCreate(&second), CUBLAS_STATUS_SUCCESS);
    const double second_ms = MsSince(start);
    EXPECT_EQ(cublasDestroy(second), CUBLAS_STATUS_SUCCESS);
    EXPECT_GE(second_ms, 0.33 * kTimeScale * 0.99);
    if (attempt == 0 || second_ms < fastest_ms) fastest_ms = second_ms;
    if (fastest_ms < 2.76 * kTimeScale) break;
  }
  EXPECT_LT(fastest_ms, 2.76 * kTimeScale);
  EXPECT_EQ(cublasDestroy(first), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cuCtxDestroy(fresh), CUDA_SUCCESS);
}

// ---- Work split across compute workers ------------------------------------------------------

TEST_F(BlasTest, TallGemmSplitByRowsMatchesReference) {
  ExpectSgemm(CUBLAS_OP_T, CUBLAS_OP_N, 301, 7, 19);
}
TEST_F(BlasTest, WideGemmSplitByColumnsMatchesReference) {
  ExpectSgemm(CUBLAS_OP_N, CUBLAS_OP_T, 9, 257, 13);
}

// Blocks of a batched GEMM span batch entries: each worker's range may start and end mid-entry.
TEST_F(BlasTest, StridedBatchedSplitAcrossEntriesMatchesReference) {
  const int m = 5, n = 3, k = 4, batch = 7;
  const long long sa = m * k, sb = k * n, sc = m * n;
  const std::vector<float> a = Pattern(static_cast<int>(sa), batch, 4);
  const std::vector<float> b = Pattern(static_cast<int>(sb), batch, 5);
  float* dc = Upload(std::vector<float>(static_cast<size_t>(sc) * batch, 0.0f));
  const float one = 1.0f, zero = 0.0f;
  ASSERT_EQ(cublasSgemmStridedBatched(handle_, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, Upload(a), m, sa,
                                      Upload(b), k, sb, &zero, dc, m, sc, batch),
            CUBLAS_STATUS_SUCCESS);
  const std::vector<float> got = Download(dc, static_cast<size_t>(sc) * batch);
  for (int e = 0; e < batch; ++e) {
    for (int j = 0; j < n; ++j) {
      for (int i = 0; i < m; ++i) {
        double sum = 0;
        for (int p = 0; p < k; ++p) sum += static_cast<double>(a[e * sa + p * m + i]) * b[e * sb + j * k + p];
        ASSERT_EQ(got[e * sc + j * m + i], static_cast<float>(sum)) << e << " " << i << " " << j;
      }
    }
  }
}

// BLAS vectors with negative increments are addressed from their lowest address; each worker's
// part of y must be the right one.
TEST_F(BlasTest, SgemvWithNegativeIncrementsSplitMatchesReference) {
  const int m = 101, n = 6, incx = -1, incy = -2;
  const std::vector<float> a = Pattern(m, n, 6);
  const std::vector<float> x = Pattern(1, n, 7);
  const std::vector<float> y(static_cast<size_t>(m) * 2, 0.5f);
  float* dy = Upload(y);
  const float one = 1.0f;
  ASSERT_EQ(cublasSgemv(handle_, CUBLAS_OP_N, m, n, &one, Upload(a), m, Upload(x), incx, &one, dy, incy),
            CUBLAS_STATUS_SUCCESS);
  const std::vector<float> got = Download(dy, y.size());
  for (int i = 0; i < m; ++i) {
    double sum = 0;
    for (int p = 0; p < n; ++p) sum += static_cast<double>(a[static_cast<size_t>(p) * m + i]) * x[n - 1 - p];
    EXPECT_EQ(got[static_cast<size_t>(m - 1 - i) * 2], static_cast<float>(sum + 0.5)) << i;
  }
}

// An MLP layer (4096 x 4096 fp32 weights, a batch of 8) runs at OpenBLAS speed, not seconds.
TEST_F(BlasTest, MlpLayerTakesTensOfMilliseconds) {
  const int out = 4096, in = 4096, batch = 8;
  CUdeviceptr w = 0, x = 0, y = 0;
  ASSERT_EQ(cuMemAlloc(&w, sizeof(float) * out * in), CUDA_SUCCESS);
  buffers_.push_back(w);
  ASSERT_EQ(cuMemAlloc(&x, sizeof(float) * in * batch), CUDA_SUCCESS);
  buffers_.push_back(x);
  ASSERT_EQ(cuMemAlloc(&y, sizeof(float) * out * batch), CUDA_SUCCESS);
  buffers_.push_back(y);
  const float quarter = 0.25f, half = 0.5f;
  unsigned bits_w = 0, bits_x = 0;
  std::memcpy(&bits_w, &quarter, 4);
  std::memcpy(&bits_x, &half, 4);
  ASSERT_EQ(cuMemsetD32(w, bits_w, static_cast<size_t>(out) * in), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD32(x, bits_x, static_cast<size_t>(in) * batch), CUDA_SUCCESS);
  const float one = 1.0f, zero = 0.0f;
  const auto* pw = reinterpret_cast<const float*>(w);
  const auto* px = reinterpret_cast<const float*>(x);
  auto* py = reinterpret_cast<float*>(y);
  // Warm-up touches every page once; the second run is the steady state.
  ASSERT_EQ(
      cublasSgemm(handle_, CUBLAS_OP_T, CUBLAS_OP_N, out, batch, in, &one, pw, in, px, in, &zero, py, out),
      CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  const auto start = std::chrono::steady_clock::now();
  ASSERT_EQ(
      cublasSgemm(handle_, CUBLAS_OP_T, CUBLAS_OP_N, out, batch, in, &one, pw, in, px, in, &zero, py, out),
      CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  const double ms = MsSince(start);
  RecordProperty("mlp_layer_ms", std::to_string(ms));  // its speed is bench/'s to judge
  std::vector<float> got = Download(py, static_cast<size_t>(out) * batch);
  EXPECT_EQ(got.front(), 0.125f * in);
  EXPECT_EQ(got.back(), 0.125f * in);
}

// ---- Exports ---------------------------------------------------------------------------------

#define PHOS_STRINGIFY(x) #x
#define PHOS_MAPPED(x) PHOS_STRINGIFY(x)

TEST(BlasExportsTest, EveryEntryPointUnderItsCublasV2Name) {
  void* lib = dlopen(PHOS_SIMGPU_LIBRARY, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << dlerror();
  const std::vector<std::string> names = {
      PHOS_MAPPED(cublasCreate), PHOS_MAPPED(cublasDestroy), PHOS_MAPPED(cublasGetVersion),
      PHOS_MAPPED(cublasSetStream), PHOS_MAPPED(cublasGetStream), PHOS_MAPPED(cublasGetPointerMode),
      PHOS_MAPPED(cublasSetPointerMode), PHOS_MAPPED(cublasSetMathMode), PHOS_MAPPED(cublasGetMathMode),
      PHOS_MAPPED(cublasGetStatusName), PHOS_MAPPED(cublasGetStatusString), PHOS_MAPPED(cublasGetProperty),
      // Level 1
      PHOS_MAPPED(cublasSaxpy), PHOS_MAPPED(cublasDaxpy), PHOS_MAPPED(cublasSdot), PHOS_MAPPED(cublasDdot),
      PHOS_MAPPED(cublasSnrm2), PHOS_MAPPED(cublasDnrm2), PHOS_MAPPED(cublasSscal), PHOS_MAPPED(cublasDscal),
      PHOS_MAPPED(cublasSasum), PHOS_MAPPED(cublasDasum), PHOS_MAPPED(cublasIsamax), PHOS_MAPPED(cublasIdamax),
      PHOS_MAPPED(cublasIsamin), PHOS_MAPPED(cublasIdamin), PHOS_MAPPED(cublasScopy), PHOS_MAPPED(cublasDcopy),
      PHOS_MAPPED(cublasSswap), PHOS_MAPPED(cublasDswap), PHOS_MAPPED(cublasSrot), PHOS_MAPPED(cublasDrot),
      // Level 2
      PHOS_MAPPED(cublasSgemv), PHOS_MAPPED(cublasDgemv), PHOS_MAPPED(cublasSger), PHOS_MAPPED(cublasDger),
      PHOS_MAPPED(cublasSsymv), PHOS_MAPPED(cublasDsymv), PHOS_MAPPED(cublasStrsv), PHOS_MAPPED(cublasDtrsv),
      PHOS_MAPPED(cublasStrmv), PHOS_MAPPED(cublasDtrmv),
      // Level 3
      PHOS_MAPPED(cublasSgemm), PHOS_MAPPED(cublasDgemm), PHOS_MAPPED(cublasCgemm), PHOS_MAPPED(cublasZgemm),
      PHOS_MAPPED(cublasHgemm), PHOS_MAPPED(cublasGemmEx), PHOS_MAPPED(cublasGemmStridedBatchedEx),
      PHOS_MAPPED(cublasGemmBatchedEx), PHOS_MAPPED(cublasSgemmStridedBatched),
      PHOS_MAPPED(cublasDgemmStridedBatched), PHOS_MAPPED(cublasHgemmStridedBatched),
      PHOS_MAPPED(cublasSgemmBatched), PHOS_MAPPED(cublasDgemmBatched), PHOS_MAPPED(cublasStrsm),
      PHOS_MAPPED(cublasDtrsm), PHOS_MAPPED(cublasSsyrk), PHOS_MAPPED(cublasDsyrk), PHOS_MAPPED(cublasSgeam),
      PHOS_MAPPED(cublasDgeam), PHOS_MAPPED(cublasSdgmm), PHOS_MAPPED(cublasDdgmm)};
  for (const std::string& name : names) EXPECT_NE(dlsym(lib, name.c_str()), nullptr) << name;
  EXPECT_EQ(std::string(PHOS_MAPPED(cublasSgemm)), "cublasSgemm_v2");
  // Internals stay hidden.
  EXPECT_EQ(dlsym(lib, "_ZN4phos3sim4blas14HandleRegistry3GetEv"), nullptr);
  dlclose(lib);
}

}  // namespace
