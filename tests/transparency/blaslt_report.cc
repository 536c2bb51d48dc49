// A cuBLASLt program as its users write one (the toolkit's headers, NVIDIA's libcublasLt and
// libcudart, nothing of phos): matmul descriptors, matrix layouts, a preference with a workspace,
// the heuristic, and matmuls with epilogues — bias and GELU in fp32, fp16 and bf16, a strided
// batch, bias and ReLU — each checked against the program's own loops (GELU as cuBLASLt documents
// it in its epilogue: the tanh approximation). It exits 0 only when every check held.
// transparency_test runs it under `phos-fn run`.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdio>
#include <vector>

namespace {

int g_checks = 0;
int g_failures = 0;

#define CHECK(cond)                                                \
  do {                                                             \
    ++g_checks;                                                    \
    if (!(cond)) {                                                 \
      std::printf("CHECK FAILED: line %d: %s\n", __LINE__, #cond); \
      ++g_failures;                                                \
    }                                                              \
  } while (0)
#define CUDA_OK(call) CHECK((call) == cudaSuccess)
#define LT_OK(call) CHECK((call) == CUBLAS_STATUS_SUCCESS)

std::vector<void*> g_allocations;

void* Alloc(size_t bytes) {
  void* p = nullptr;
  CUDA_OK(cudaMalloc(&p, bytes));
  g_allocations.push_back(p);
  return p;
}

float ToFloat(float v) { return v; }
float ToFloat(__half v) { return __half2float(v); }
float ToFloat(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T>
T FromFloat(float v);
template <>
float FromFloat<float>(float v) { return v; }
template <>
__half FromFloat<__half>(float v) { return __float2half(v); }
template <>
__nv_bfloat16 FromFloat<__nv_bfloat16>(float v) { return __float2bfloat16(v); }

// Quarters in [-2, 2]: their products and short sums are exact in every type used here.
template <typename T>
std::vector<T> Quarters(size_t n, int seed) {
  std::vector<T> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = FromFloat<T>(static_cast<float>(static_cast<int>((i * 5 + seed * 3) % 17) - 8) / 4);
  return v;
}

template <typename T>
T* ToDevice(const std::vector<T>& host) {
  T* p = static_cast<T*>(Alloc(host.size() * sizeof(T)));
  CUDA_OK(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return p;
}
template <typename T>
std::vector<T> ToHost(const T* device, size_t n) {
  std::vector<T> out(n);
  CUDA_OK(cudaMemcpy(out.data(), device, n * sizeof(T), cudaMemcpyDeviceToHost));
  return out;
}

double Gelu(double x) {
  return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

// One matmul: D = epilogue(alpha op(A) op(B) + beta C + bias), column-major, packed, `batch`
// matrices one after another.
struct Matmul {
  int m, n, k;
  bool trans_a;
  cublasLtEpilogue_t epilogue;
  float alpha, beta;
  int batch;
};

template <typename TIn, typename TOut>
void Run(cublasLtHandle_t lt, const Matmul& mm, cudaDataType in_type, cudaDataType out_type, size_t workspace_bytes,
         void* workspace) {
  const size_t a_size = static_cast<size_t>(mm.m) * mm.k, b_size = static_cast<size_t>(mm.k) * mm.n,
               d_size = static_cast<size_t>(mm.m) * mm.n;
  const std::vector<TIn> a = Quarters<TIn>(a_size * mm.batch, 1), b = Quarters<TIn>(b_size * mm.batch, 2);
  const std::vector<TOut> c = Quarters<TOut>(d_size * mm.batch, 3), bias = Quarters<TOut>(mm.m, 4);
  TOut* dd = static_cast<TOut*>(Alloc(d_size * mm.batch * sizeof(TOut)));
  const TOut* dbias = ToDevice(bias);

  cublasLtMatmulDesc_t desc = nullptr;
  LT_OK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = mm.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = CUBLAS_OP_N;
  LT_OK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  LT_OK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  LT_OK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &mm.epilogue, sizeof(mm.epilogue)));
  const bool with_bias = (mm.epilogue & CUBLASLT_EPILOGUE_BIAS) != 0;
  if (with_bias) LT_OK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &dbias, sizeof(dbias)));
  cublasLtEpilogue_t read_back{};
  size_t written = 0;
  LT_OK(cublasLtMatmulDescGetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &read_back, sizeof(read_back), &written));
  CHECK(read_back == mm.epilogue && written == sizeof(read_back));

  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  LT_OK(cublasLtMatrixLayoutCreate(&la, in_type, mm.trans_a ? mm.k : mm.m, mm.trans_a ? mm.m : mm.k,
                                   mm.trans_a ? mm.k : mm.m));
  LT_OK(cublasLtMatrixLayoutCreate(&lb, in_type, mm.k, mm.n, mm.k));
  LT_OK(cublasLtMatrixLayoutCreate(&lc, out_type, mm.m, mm.n, mm.m));
  if (mm.batch > 1) {
    const int64_t strides[3] = {static_cast<int64_t>(a_size), static_cast<int64_t>(b_size),
                                static_cast<int64_t>(d_size)};
    cublasLtMatrixLayout_t layouts[3] = {la, lb, lc};
    for (int i = 0; i < 3; ++i) {
      LT_OK(cublasLtMatrixLayoutSetAttribute(layouts[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &mm.batch,
                                             sizeof(mm.batch)));
      LT_OK(cublasLtMatrixLayoutSetAttribute(layouts[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                             &strides[i], sizeof(strides[i])));
    }
  }
  cublasLtMatmulPreference_t pref = nullptr;
  LT_OK(cublasLtMatmulPreferenceCreate(&pref));
  LT_OK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes,
                                             sizeof(workspace_bytes)));
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  LT_OK(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, lc, pref, 1, &heuristic, &found));
  CHECK(found == 1 && heuristic.state == CUBLAS_STATUS_SUCCESS && heuristic.workspaceSize <= workspace_bytes);

  // C and D are distinct: C keeps its values.
  const TOut* dc = ToDevice(c);
  LT_OK(cublasLtMatmul(lt, desc, &mm.alpha, ToDevice(a), la, ToDevice(b), lb, &mm.beta, dc, lc, dd, lc,
                       found == 1 ? &heuristic.algo : nullptr, workspace, workspace_bytes, nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  const std::vector<TOut> got = ToHost(dd, d_size * mm.batch);
  const double tolerance = sizeof(TOut) == 4 ? 1e-4 : 1e-2;  // D in 16 bits: its own rounding
  for (int e = 0; e < mm.batch; ++e) {
    for (int j = 0; j < mm.n; ++j) {
      for (int i = 0; i < mm.m; ++i) {
        double v = 0;
        for (int p = 0; p < mm.k; ++p) {
          const TIn av = mm.trans_a ? a[e * a_size + i * mm.k + p] : a[e * a_size + p * mm.m + i];
          v += ToFloat(av) * ToFloat(b[e * b_size + j * mm.k + p]);
        }
        v = mm.alpha * v + mm.beta * ToFloat(c[e * d_size + j * mm.m + i]);
        if (with_bias) v += ToFloat(bias[i]);
        if ((mm.epilogue & CUBLASLT_EPILOGUE_RELU) != 0) v = v > 0 ? v : 0;
        if ((mm.epilogue & CUBLASLT_EPILOGUE_GELU) != 0) v = Gelu(v);
        const double d = ToFloat(got[e * d_size + j * mm.m + i]);
        CHECK(std::fabs(d - v) <= tolerance * (1 + std::fabs(v)));
      }
    }
  }
  LT_OK(cublasLtMatmulPreferenceDestroy(pref));
  LT_OK(cublasLtMatrixLayoutDestroy(lc));
  LT_OK(cublasLtMatrixLayoutDestroy(lb));
  LT_OK(cublasLtMatrixLayoutDestroy(la));
  LT_OK(cublasLtMatmulDescDestroy(desc));
}

}  // namespace

int main() {
  cublasLtHandle_t lt = nullptr;
  if (cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS) {
    std::printf("CHECK FAILED: cublasLtCreate\n");
    return 1;
  }
  CHECK(cublasLtGetVersion() >= 130000);
  const size_t workspace_bytes = 4 << 20;
  void* workspace = Alloc(workspace_bytes);
  Run<float, float>(lt, {24, 16, 12, true, CUBLASLT_EPILOGUE_GELU_BIAS, 1.0f, 0.5f, 1}, CUDA_R_32F, CUDA_R_32F,
                    workspace_bytes, workspace);
  Run<__half, __half>(lt, {32, 8, 16, false, CUBLASLT_EPILOGUE_GELU_BIAS, 0.5f, 0.0f, 1}, CUDA_R_16F, CUDA_R_16F,
                      workspace_bytes, workspace);
  Run<__nv_bfloat16, __nv_bfloat16>(lt, {16, 16, 8, true, CUBLASLT_EPILOGUE_GELU_BIAS, 1.0f, 1.0f, 1}, CUDA_R_16BF,
                                    CUDA_R_16BF, workspace_bytes, workspace);
  Run<float, float>(lt, {8, 8, 8, false, CUBLASLT_EPILOGUE_DEFAULT, 1.0f, -1.0f, 4}, CUDA_R_32F, CUDA_R_32F,
                    workspace_bytes, workspace);
  Run<float, float>(lt, {20, 12, 10, false, CUBLASLT_EPILOGUE_RELU_BIAS, 1.0f, 0.25f, 1}, CUDA_R_32F, CUDA_R_32F,
                    workspace_bytes, workspace);
  // What cuBLASLt refuses before computing: a descriptor attribute of the wrong size.
  cublasLtMatmulDesc_t desc = nullptr;
  LT_OK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const int32_t op = CUBLAS_OP_T;
  CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op, 2) == CUBLAS_STATUS_INVALID_VALUE);
  LT_OK(cublasLtMatmulDescDestroy(desc));
  CUDA_OK(cudaGetLastError());
  LT_OK(cublasLtDestroy(lt));
  for (void* p : g_allocations) CUDA_OK(cudaFree(p));
  std::printf("blaslt report: %d checks, %s\n", g_checks, g_failures == 0 ? "all checks held" : "checks failed");
  return g_failures == 0 ? 0 : 1;
}
