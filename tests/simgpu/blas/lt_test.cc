// simgpu's cuBLASLt against plain loops written here: D = epilogue(alpha op(A) op(B) + beta C + bias)
// in double with the epilogue formulas cuBLASLt documents (RELU: max(x, 0); GELU: the tanh
// approximation), for fp32, fp16 and bf16 inputs, column- and row-major layouts, strided batches;
// the descriptors' attributes, the heuristic's answers and what is refused.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <vector>

#include "routine_test_support.h"

namespace phos::sim::blas::testing {
namespace {

struct Layout {
  cudaDataType type = CUDA_R_32F;
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
  int32_t order = CUBLASLT_ORDER_COL;
  int32_t batch = 1;
  int64_t stride = 0;

  size_t Index(uint64_t i, uint64_t j, int e) const {
    return static_cast<size_t>(e * stride + (order == CUBLASLT_ORDER_ROW ? i * ld + j : j * ld + i));
  }
  size_t Elements() const {
    const uint64_t minor = order == CUBLASLT_ORDER_ROW ? rows : cols;
    return static_cast<size_t>((batch - 1) * stride + (minor - 1) * ld + (order == CUBLASLT_ORDER_ROW ? cols : rows));
  }
};

double GeluTanh(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

// Element storage of a test matrix as doubles, and its bytes in the layout's type.
template <typename T>
T FromDouble(double v) {
  if constexpr (std::is_same_v<T, __half>) {
    return __float2half(static_cast<float>(v));
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __float2bfloat16(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}
template <typename T>
double ToDouble(T v) {
  if constexpr (std::is_same_v<T, __half>) {
    return __half2float(v);
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __bfloat162float(v);
  } else {
    return static_cast<double>(v);
  }
}

struct Problem {
  cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  float alpha = 1.0f, beta = 0.0f;
  Layout a, b, c, d;
};

// D as the loops compute it, from the values the matrices hold (as doubles) and the bias.
std::vector<double> Reference(const Problem& p, const std::vector<double>& a, const std::vector<double>& b,
                              const std::vector<double>& c, const std::vector<double>& bias,
                              std::vector<double> d) {
  const bool ta = p.ta != CUBLAS_OP_N, tb = p.tb != CUBLAS_OP_N;
  const uint64_t m = p.d.rows, n = p.d.cols, k = ta ? p.a.rows : p.a.cols;
  for (int e = 0; e < p.d.batch; ++e) {
    for (uint64_t j = 0; j < n; ++j) {
      for (uint64_t i = 0; i < m; ++i) {
        double sum = 0;
        for (uint64_t q = 0; q < k; ++q)
          sum += a[p.a.Index(ta ? q : i, ta ? i : q, e)] * b[p.b.Index(tb ? j : q, tb ? q : j, e)];
        double v = p.alpha * sum;
        if (p.beta != 0.0f) v += p.beta * c[p.c.Index(i, j, e)];
        if ((p.epilogue & CUBLASLT_EPILOGUE_BIAS) != 0) v += bias[i];
        if ((p.epilogue & CUBLASLT_EPILOGUE_RELU) != 0) v = v > 0 ? v : 0;
        if ((p.epilogue & CUBLASLT_EPILOGUE_GELU) != 0) v = GeluTanh(v);
        d[p.d.Index(i, j, e)] = v;
      }
    }
  }
  return d;
}

class LtTest : public RoutineTest {
 protected:
  void SetUp() override {
    RoutineTest::SetUp();
    ASSERT_EQ(cublasLtCreate(&lt_), CUBLAS_STATUS_SUCCESS);
  }
  void TearDown() override {
    ReleaseDescriptors();
    if (lt_ != nullptr) {
      EXPECT_EQ(cublasLtDestroy(lt_), CUBLAS_STATUS_SUCCESS);
    }
    RoutineTest::TearDown();
  }
  void ReleaseDescriptors() {
    for (cublasLtMatrixLayout_t l : layouts_) EXPECT_EQ(cublasLtMatrixLayoutDestroy(l), CUBLAS_STATUS_SUCCESS);
    layouts_.clear();
    if (desc_ != nullptr) {
      EXPECT_EQ(cublasLtMatmulDescDestroy(desc_), CUBLAS_STATUS_SUCCESS);
    }
    desc_ = nullptr;
  }

  cublasLtMatrixLayout_t MakeLayout(const Layout& l) {
    cublasLtMatrixLayout_t out = nullptr;
    EXPECT_EQ(cublasLtMatrixLayoutCreate(&out, l.type, l.rows, l.cols, l.ld), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatrixLayoutSetAttribute(out, CUBLASLT_MATRIX_LAYOUT_ORDER, &l.order, sizeof(l.order)),
              CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatrixLayoutSetAttribute(out, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &l.batch, sizeof(l.batch)),
              CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatrixLayoutSetAttribute(out, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &l.stride,
                                               sizeof(l.stride)),
              CUBLAS_STATUS_SUCCESS);
    layouts_.push_back(out);
    return out;
  }

  cublasLtMatmulDesc_t MakeDesc(const Problem& p, const void* bias, int32_t bias_type) {
    EXPECT_EQ(cublasLtMatmulDescCreate(&desc_, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSA, &p.ta, sizeof(p.ta)),
              CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSB, &p.tb, sizeof(p.tb)),
              CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_EPILOGUE, &p.epilogue, sizeof(p.epilogue)),
              CUBLAS_STATUS_SUCCESS);
    if (bias != nullptr) {
      EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)),
                CUBLAS_STATUS_SUCCESS);
      EXPECT_EQ(
          cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type)),
          CUBLAS_STATUS_SUCCESS);
    }
    return desc_;
  }

  // Runs problem `p` with inputs of TIn, C and D of TOut, a bias of TBias; checks D against the
  // loops within `tolerance` (relative to max(1, |want|)).
  template <typename TIn, typename TOut, typename TBias = TOut>
  void RunAndCheck(const Problem& p, double tolerance) {
    auto values = [](const Layout& l, int seed) {
      std::vector<double> v = Quarters<double>(l.Elements(), seed);
      return v;
    };
    const std::vector<double> a = values(p.a, 1), b = values(p.b, 2), c = values(p.c, 3),
                              bias = Quarters<double>(p.d.rows, 4);
    std::vector<double> d0(p.d.Elements(), 7.0);  // what D held: the loops keep it between columns
    auto typed = [](const std::vector<double>& v, auto tag) {
      using T = decltype(tag);
      std::vector<T> out(v.size());
      for (size_t i = 0; i < v.size(); ++i) out[i] = FromDouble<T>(v[i]);
      return out;
    };
    const TIn* da = Upload(typed(a, TIn{}));
    const TIn* db = Upload(typed(b, TIn{}));
    const TOut* dc = Upload(typed(c, TOut{}));
    TOut* dd = Upload(typed(d0, TOut{}));
    const TBias* dbias = Upload(typed(bias, TBias{}));
    const bool with_bias = (p.epilogue & CUBLASLT_EPILOGUE_BIAS) != 0;
    const int32_t bias_type = std::is_same_v<TBias, float> ? CUDA_R_32F : p.d.type;
    cublasLtMatmulDesc_t desc = MakeDesc(p, with_bias ? dbias : nullptr, bias_type);
    ASSERT_EQ(cublasLtMatmul(lt_, desc, &p.alpha, da, MakeLayout(p.a), db, MakeLayout(p.b), &p.beta, dc,
                             MakeLayout(p.c), dd, MakeLayout(p.d), nullptr, nullptr, 0, nullptr),
              CUBLAS_STATUS_SUCCESS);
    const std::vector<TOut> got = Download(dd, d0.size());
    const std::vector<double> want = Reference(p, a, b, c, bias, d0);
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_NEAR(ToDouble(got[i]), want[i], tolerance * std::max(1.0, std::fabs(want[i]))) << "element " << i;
    }
  }

  cublasLtHandle_t lt_ = nullptr;
  cublasLtMatmulDesc_t desc_ = nullptr;
  std::vector<cublasLtMatrixLayout_t> layouts_;
};

TEST_F(LtTest, GeluBiasFp32MatchesTheLoops) {
  Problem p;
  p.ta = CUBLAS_OP_T;  // A is k x m
  p.epilogue = CUBLASLT_EPILOGUE_GELU_BIAS;
  p.alpha = 0.5f;
  p.beta = -0.25f;
  const uint64_t m = 13, n = 7, k = 5;
  p.a = {CUDA_R_32F, k, m, 6};
  p.b = {CUDA_R_32F, k, n, 8};
  p.c = {CUDA_R_32F, m, n, 14};
  p.d = {CUDA_R_32F, m, n, 15};  // C != D, each with its own leading dimension
  RunAndCheck<float, float>(p, 1e-5);
}

TEST_F(LtTest, EveryEpilogueOnRowMajorMatrices) {
  for (uint32_t epilogue : {CUBLASLT_EPILOGUE_DEFAULT, CUBLASLT_EPILOGUE_RELU, CUBLASLT_EPILOGUE_BIAS,
                            CUBLASLT_EPILOGUE_RELU_BIAS, CUBLASLT_EPILOGUE_GELU, CUBLASLT_EPILOGUE_GELU_BIAS}) {
    SCOPED_TRACE(epilogue);
    Problem p;
    p.tb = CUBLAS_OP_T;  // B is n x k
    p.epilogue = epilogue;
    p.alpha = 1.0f;
    p.beta = 1.0f;
    const uint64_t m = 9, n = 11, k = 6;
    p.a = {CUDA_R_32F, m, k, 7, CUBLASLT_ORDER_ROW};
    p.b = {CUDA_R_32F, n, k, 6, CUBLASLT_ORDER_ROW};
    p.c = {CUDA_R_32F, m, n, 11, CUBLASLT_ORDER_ROW};
    p.d = {CUDA_R_32F, m, n, 12, CUBLASLT_ORDER_ROW};
    RunAndCheck<float, float>(p, 1e-5);
    ReleaseDescriptors();
  }
}

TEST_F(LtTest, HalfInputsIntoHalfWithAHalfBias) {
  Problem p;
  p.epilogue = CUBLASLT_EPILOGUE_RELU_BIAS;
  p.beta = 0.5f;
  const uint64_t m = 16, n = 10, k = 8;
  p.a = {CUDA_R_16F, m, k, 16};
  p.b = {CUDA_R_16F, k, n, 8};
  p.c = {CUDA_R_16F, m, n, 16};
  p.d = {CUDA_R_16F, m, n, 16};
  RunAndCheck<__half, __half>(p, 1e-3);  // D narrowed once: within half's rounding
}

TEST_F(LtTest, Bfloat16InputsIntoFp32WithAnFp32Bias) {
  Problem p;
  p.ta = CUBLAS_OP_T;
  p.epilogue = CUBLASLT_EPILOGUE_GELU_BIAS;
  p.beta = -1.0f;
  const uint64_t m = 12, n = 5, k = 9;
  p.a = {CUDA_R_16BF, k, m, 9};
  p.b = {CUDA_R_16BF, k, n, 9};
  p.c = {CUDA_R_32F, m, n, 12};
  p.d = {CUDA_R_32F, m, n, 12};
  RunAndCheck<__nv_bfloat16, float, float>(p, 1e-5);
}

TEST_F(LtTest, StridedBatchesWithGaps) {
  Problem p;
  p.epilogue = CUBLASLT_EPILOGUE_RELU;
  p.alpha = 2.0f;
  p.beta = 0.75f;
  const uint64_t m = 5, n = 4, k = 3;
  p.a = {CUDA_R_32F, m, k, 5, CUBLASLT_ORDER_COL, 3, 20};
  p.b = {CUDA_R_32F, k, n, 3, CUBLASLT_ORDER_COL, 3, 16};
  p.c = {CUDA_R_32F, m, n, 5, CUBLASLT_ORDER_COL, 3, 25};
  p.d = {CUDA_R_32F, m, n, 6, CUBLASLT_ORDER_COL, 3, 30};  // D's gaps keep what they held
  RunAndCheck<float, float>(p, 1e-5);
}

TEST_F(LtTest, BetaZeroReadsNoC) {
  const int m = 3, n = 2, k = 2;
  std::vector<float> a = {1, 2, 3, 4, 5, 6}, b = {1, 0, 0, 1};
  const std::vector<float> nan_c(m * n, std::nanf(""));
  float* dd = Upload(std::vector<float>(m * n, 0));
  Problem p;
  p.a = {CUDA_R_32F, m, k, m};
  p.b = {CUDA_R_32F, k, n, k};
  p.c = p.d = {CUDA_R_32F, m, n, m};
  cublasLtMatmulDesc_t desc = MakeDesc(p, nullptr, 0);
  ASSERT_EQ(cublasLtMatmul(lt_, desc, &p.alpha, Upload(a), MakeLayout(p.a), Upload(b), MakeLayout(p.b), &p.beta,
                           Upload(nan_c), MakeLayout(p.c), dd, MakeLayout(p.d), nullptr, nullptr, 0, nullptr),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(Download(dd, a.size()), a);  // A times the identity
}

// A workspace is a byte count, not elements: any size at a 16-byte aligned address is taken, and
// the operands' own alignment is still checked.
// A batched layout is checked as one range, whatever its count: 2^31 - 1 entries of A one element
// apart run past A's buffer, and the call is refused before anything runs.
TEST_F(LtTest, AStridedBatchIsCheckedAsOneRange) {
  const int m = 2, n = 2, k = 2;
  Problem p;
  p.a = {CUDA_R_32F, m, k, m, CUBLASLT_ORDER_COL, INT32_MAX, 1};
  p.b = {CUDA_R_32F, k, n, k, CUBLASLT_ORDER_COL, INT32_MAX, 0};
  p.c = p.d = {CUDA_R_32F, m, n, m, CUBLASLT_ORDER_COL, INT32_MAX, 0};
  p.beta = 0.0f;
  cublasLtMatmulDesc_t desc = MakeDesc(p, nullptr, 0);
  float* dd = Upload(std::vector<float>(m * n, 0));
  EXPECT_EQ(cublasLtMatmul(lt_, desc, &p.alpha, Upload(std::vector<float>(m * k, 1)), MakeLayout(p.a),
                           Upload(std::vector<float>(k * n, 1)), MakeLayout(p.b), &p.beta, dd, MakeLayout(p.c), dd,
                           MakeLayout(p.d), nullptr, nullptr, 0, nullptr),
            CUBLAS_STATUS_INVALID_VALUE);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(Download(dd, m * n), std::vector<float>(m * n, 0));
}

TEST_F(LtTest, AWorkspaceOfAnySizeIsTakenAndMisalignedOperandsAreNot) {
  const int m = 3, n = 2, k = 2;
  std::vector<float> a = {1, 2, 3, 4, 5, 6}, b = {1, 0, 0, 1};
  float* dd = Upload(std::vector<float>(m * n, 0));
  float* workspace = Upload(std::vector<float>(256, 0));
  Problem p;
  p.a = {CUDA_R_32F, m, k, m};
  p.b = {CUDA_R_32F, k, n, k};
  p.c = p.d = {CUDA_R_32F, m, n, m};
  p.beta = 0.0f;
  cublasLtMatmulDesc_t desc = MakeDesc(p, nullptr, 0);
  float* da = Upload(a);
  ASSERT_EQ(cublasLtMatmul(lt_, desc, &p.alpha, da, MakeLayout(p.a), Upload(b), MakeLayout(p.b), &p.beta, dd,
                           MakeLayout(p.c), dd, MakeLayout(p.d), nullptr, workspace + 4, 1000, nullptr),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(Download(dd, a.size()), a);  // A times the identity
  const auto* odd = reinterpret_cast<const float*>(reinterpret_cast<const char*>(da) + 2);
  EXPECT_EQ(cublasLtMatmul(lt_, desc, &p.alpha, odd, MakeLayout(p.a), Upload(b), MakeLayout(p.b), &p.beta, dd,
                           MakeLayout(p.c), dd, MakeLayout(p.d), nullptr, nullptr, 0, nullptr),
            CUBLAS_STATUS_INVALID_VALUE);
}

TEST_F(LtTest, DescriptorAttributesAsCublasLtTakesThem) {
  cublasLtMatmulDesc_t desc = nullptr;
  ASSERT_EQ(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
  desc_ = desc;
  size_t written = 0;
  int32_t compute = 0;
  EXPECT_EQ(cublasLtMatmulDescGetAttribute(desc, CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, nullptr, 0, &written),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(written, sizeof(int32_t));
  EXPECT_EQ(cublasLtMatmulDescGetAttribute(desc, CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, &compute, sizeof(compute),
                                           &written),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(compute, CUBLAS_COMPUTE_32F);
  uint32_t epilogue = CUBLASLT_EPILOGUE_GELU_BIAS, read = 0;
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasLtMatmulDescGetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &read, sizeof(read), nullptr),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(read, epilogue);
  // A value of the wrong size, an operation that is none, and what simgpu does not serve.
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, 8),
            CUBLAS_STATUS_INVALID_VALUE);
  const int32_t bad_op = 7;
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &bad_op, sizeof(bad_op)),
            CUBLAS_STATUS_INVALID_VALUE);
  const uint32_t aux = CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &aux, sizeof(aux)),
            CUBLAS_STATUS_NOT_SUPPORTED);
  const int32_t device_mode = CUBLASLT_POINTER_MODE_DEVICE;
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_POINTER_MODE, &device_mode, sizeof(device_mode)),
            CUBLAS_STATUS_NOT_SUPPORTED);
  const int64_t stride = 4;
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, &stride, sizeof(stride)),
            CUBLAS_STATUS_NOT_SUPPORTED);
  cublasLtMatmulPreference_t pref = nullptr;
  ASSERT_EQ(cublasLtMatmulPreferenceCreate(&pref), CUBLAS_STATUS_SUCCESS);
  const uint64_t workspace = 1 << 20;
  uint64_t got = 0;
  EXPECT_EQ(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                                 sizeof(workspace)),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasLtMatmulPreferenceGetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &got, sizeof(got),
                                                 nullptr),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(got, workspace);
  EXPECT_EQ(cublasLtMatmulPreferenceDestroy(pref), CUBLAS_STATUS_SUCCESS);
}

TEST_F(LtTest, TheHeuristicAnswersServedProblemsOnly) {
  Problem p;
  p.a = {CUDA_R_16F, 8, 4, 8};
  p.b = {CUDA_R_16F, 4, 6, 4};
  p.c = p.d = {CUDA_R_16F, 8, 6, 8};
  cublasLtMatmulDesc_t desc = MakeDesc(p, nullptr, 0);
  cublasLtMatmulPreference_t pref = nullptr;
  ASSERT_EQ(cublasLtMatmulPreferenceCreate(&pref), CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulHeuristicResult_t results[4] = {};
  int returned = -1;
  ASSERT_EQ(cublasLtMatmulAlgoGetHeuristic(lt_, desc, MakeLayout(p.a), MakeLayout(p.b), MakeLayout(p.c),
                                           MakeLayout(p.d), pref, 4, results, &returned),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(returned, 1);
  EXPECT_EQ(results[0].state, CUBLAS_STATUS_SUCCESS);
  // fp64 matrices: no algorithm.
  const Layout f64{CUDA_R_64F, 8, 8, 8};
  EXPECT_EQ(cublasLtMatmulAlgoGetHeuristic(lt_, desc, MakeLayout(f64), MakeLayout(f64), MakeLayout(f64),
                                           MakeLayout(f64), pref, 4, results, &returned),
            CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(returned, 0);
  EXPECT_EQ(cublasLtMatmulAlgoGetHeuristic(lt_, desc, MakeLayout(p.a), MakeLayout(p.b), MakeLayout(p.c),
                                           MakeLayout(p.d), pref, 0, results, &returned),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasLtMatmulPreferenceDestroy(pref), CUBLAS_STATUS_SUCCESS);
}

TEST_F(LtTest, MismatchedShapesAndOperandsOutsideMemoryAreRefused) {
  Problem p;
  p.a = {CUDA_R_32F, 4, 3, 4};
  p.b = {CUDA_R_32F, 5, 2, 5};  // k of B is 5, of A 3
  p.c = p.d = {CUDA_R_32F, 4, 2, 4};
  const float* a = Upload(std::vector<float>(12, 1));
  float* d = Upload(std::vector<float>(8, 0));
  cublasLtMatmulDesc_t desc = MakeDesc(p, nullptr, 0);
  EXPECT_EQ(cublasLtMatmul(lt_, desc, &p.alpha, a, MakeLayout(p.a), a, MakeLayout(p.b), &p.beta, d, MakeLayout(p.c),
                           d, MakeLayout(p.d), nullptr, nullptr, 0, nullptr),
            CUBLAS_STATUS_INVALID_VALUE);
  // Shapes that agree, but B reaches past its allocation: refused before anything runs.
  const Layout b{CUDA_R_32F, 3, 2, 3};
  EXPECT_EQ(cublasLtMatmul(lt_, desc, &p.alpha, a, MakeLayout(p.a), a + 8, MakeLayout(b), &p.beta, d,
                           MakeLayout(p.c), d, MakeLayout(p.d), nullptr, nullptr, 0, nullptr),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(Download(d, 8), std::vector<float>(8, 0));
}

}  // namespace
}  // namespace phos::sim::blas::testing
