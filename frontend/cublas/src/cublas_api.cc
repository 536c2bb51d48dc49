// The cuBLAS subset functions use (cublas_v2.h ABI), each call executed by phosd through the CUDA
// runtime frontend's session. Handles are phosd's virtual ids. Only host pointer mode exists
// (cublasSetPointerMode is not exported): alpha and beta are read here and sent by value.
// Arguments cuBLAS refuses at once are refused here; GEMM and GEMV are asynchronous, their
// execution errors (including a matrix outside the caller's buffers) surface at the next
// synchronising CUDA call.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>

#include "phos/base/log.h"
#include "phos/frontend/remote_call.h"
#include "phos/ipc/wire.h"

namespace ipc = phos::ipc;

namespace {

std::mutex g_mu;
std::unordered_map<uint64_t, cudaStream_t> g_streams;  // handle -> stream set on it

uint64_t Id(const void* p) { return reinterpret_cast<uintptr_t>(p); }

int Remote(ipc::Op op, const void* args, size_t len, bool reply, void* out = nullptr, size_t cap = 0) {
  return __phosRemoteCall(static_cast<uint16_t>(op), args, len, reply ? 1 : 0, out, cap);
}

// Sync handle calls answer with a cublasStatus_t; anything above its range is a session failure.
cublasStatus_t BlasStatus(int result) {
  if (result >= 0 && result <= CUBLAS_STATUS_LICENSE_ERROR) return static_cast<cublasStatus_t>(result);
  return CUBLAS_STATUS_NOT_INITIALIZED;
}

// Async calls answer with a CUresult (only ever a failure to queue).
cublasStatus_t QueueStatus(int result) { return result == 0 ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED; }

// Each use is a row of frontend/surface/refused.tsv (docs/compatibility.md, phos-fn check).
cublasStatus_t NotSupported(const char* call, const char* why) {
  static std::mutex mu;
  static std::set<std::string> logged;
  std::lock_guard lock(mu);
  if (logged.insert(call).second) PHOS_LOG(Warn, "frontend", "{}: not supported: {}", call, why);
  return CUBLAS_STATUS_NOT_SUPPORTED;
}

bool ValidOp(cublasOperation_t op) { return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C; }

cublasStatus_t CheckGemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, int lda, int ldb, int ldc) {
  if (!ValidOp(ta) || !ValidOp(tb) || m < 0 || n < 0 || k < 0) return CUBLAS_STATUS_INVALID_VALUE;
  int rows_a = ta == CUBLAS_OP_N ? m : k;
  int rows_b = tb == CUBLAS_OP_N ? k : n;
  if (lda < std::max(1, rows_a) || ldb < std::max(1, rows_b) || ldc < std::max(1, m)) return CUBLAS_STATUS_INVALID_VALUE;
  return CUBLAS_STATUS_SUCCESS;
}

bool IsFloatCompute(cublasComputeType_t c) {
  return c == CUBLAS_COMPUTE_32F || c == CUBLAS_COMPUTE_32F_PEDANTIC || c == CUBLAS_COMPUTE_32F_FAST_16F ||
         c == CUBLAS_COMPUTE_32F_FAST_16BF || c == CUBLAS_COMPUTE_32F_FAST_TF32;
}

cublasStatus_t SendGemm(cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float* alpha,
                        uint64_t a, cudaDataType at, int lda, int64_t sa, uint64_t b, cudaDataType bt, int ldb, int64_t sb,
                        const float* beta, uint64_t c, cudaDataType ct, int ldc, int64_t sc, cublasComputeType_t compute,
                        int algo, int batch) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (alpha == nullptr || beta == nullptr || batch < 0) return CUBLAS_STATUS_INVALID_VALUE;
  if (cublasStatus_t s = CheckGemm(ta, tb, m, n, k, lda, ldb, ldc); s != CUBLAS_STATUS_SUCCESS) return s;
  ipc::GemmArgs g{};
  g.handle = Id(handle);
  g.trans_a = ta;
  g.trans_b = tb;
  g.m = m;
  g.n = n;
  g.k = k;
  g.lda = lda;
  g.ldb = ldb;
  g.ldc = ldc;
  g.a_type = at;
  g.b_type = bt;
  g.c_type = ct;
  g.compute_type = compute;
  g.algo = algo;
  g.batch = batch;
  g.a = a;
  g.b = b;
  g.c = c;
  g.stride_a = sa;
  g.stride_b = sb;
  g.stride_c = sc;
  g.alpha = *alpha;
  g.beta = *beta;
  return QueueStatus(Remote(ipc::Op::kBlasGemm, &g, sizeof(g), false));
}

}  // namespace

extern "C" {

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  uint64_t vid = 0;
  cublasStatus_t s = BlasStatus(Remote(ipc::Op::kBlasCreate, nullptr, 0, true, &vid, sizeof(vid)));
  *handle = s == CUBLAS_STATUS_SUCCESS ? reinterpret_cast<cublasHandle_t>(vid) : nullptr;
  return s;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  ipc::HandleArgs a{Id(handle)};
  cublasStatus_t s = BlasStatus(Remote(ipc::Op::kBlasDestroy, &a, sizeof(a), true));
  std::lock_guard lock(g_mu);
  g_streams.erase(a.handle);
  return s;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  ipc::StreamEventArgs a{0, Id(handle)};
  // cudaStreamPerThread: the calling thread's default stream, as in the CUDA runtime.
  if (__phosStreamId(stream, &a.stream) != 0) return CUBLAS_STATUS_NOT_INITIALIZED;
  cublasStatus_t s = BlasStatus(Remote(ipc::Op::kBlasSetStream, &a, sizeof(a), true));
  if (s == CUBLAS_STATUS_SUCCESS) {
    std::lock_guard lock(g_mu);
    g_streams[Id(handle)] = stream;
  }
  return s;
}

cublasStatus_t cublasGetStream_v2(cublasHandle_t handle, cudaStream_t* stream) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (stream == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  std::lock_guard lock(g_mu);
  auto it = g_streams.find(Id(handle));
  *stream = it == g_streams.end() ? nullptr : it->second;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  ipc::BlasModeArgs a{Id(handle), static_cast<int32_t>(mode), 0};
  return BlasStatus(Remote(ipc::Op::kBlasSetMathMode, &a, sizeof(a), true));
}

cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                              const float* alpha, const float* a, int lda, const float* b, int ldb, const float* beta, float* c,
                              int ldc) {
  return SendGemm(handle, ta, tb, m, n, k, alpha, Id(a), CUDA_R_32F, lda, 0, Id(b), CUDA_R_32F, ldb, 0, beta, Id(c), CUDA_R_32F,
                  ldc, 0, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT, 0);
}

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                         const float* alpha, const float* a, int lda, long long int stride_a, const float* b,
                                         int ldb, long long int stride_b, const float* beta, float* c, int ldc,
                                         long long int stride_c, int batch) {
  if (batch == 0) return CUBLAS_STATUS_SUCCESS;
  return SendGemm(handle, ta, tb, m, n, k, alpha, Id(a), CUDA_R_32F, lda, stride_a, Id(b), CUDA_R_32F, ldb, stride_b, beta, Id(c),
                  CUDA_R_32F, ldc, stride_c, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT, batch);
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void* alpha, const void* a, cudaDataType at, int lda, const void* b, cudaDataType bt, int ldb,
                            const void* beta, void* c, cudaDataType ct, int ldc, cublasComputeType_t compute,
                            cublasGemmAlgo_t algo) {
  if (!IsFloatCompute(compute)) return NotSupported("cublasGemmEx", "only 32-bit float compute types are remoted");
  auto fp = [](cudaDataType t) { return t == CUDA_R_32F || t == CUDA_R_16F || t == CUDA_R_16BF; };
  if (!fp(at) || !fp(bt) || !fp(ct)) return NotSupported("cublasGemmEx", "only fp32, fp16 and bf16 matrices are remoted");
  return SendGemm(handle, ta, tb, m, n, k, static_cast<const float*>(alpha), Id(a), at, lda, 0, Id(b), bt, ldb, 0,
                  static_cast<const float*>(beta), Id(c), ct, ldc, 0, compute, algo, 0);
}

cublasStatus_t cublasSgemv_v2(cublasHandle_t handle, cublasOperation_t trans, int m, int n, const float* alpha, const float* a,
                              int lda, const float* x, int incx, const float* beta, float* y, int incy) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!ValidOp(trans) || m < 0 || n < 0 || lda < std::max(1, m) || incx == 0 || incy == 0 || alpha == nullptr || beta == nullptr) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  ipc::GemvArgs g{Id(handle), trans, m, n, lda, incx, incy, Id(a), Id(x), Id(y), *alpha, *beta};
  return QueueStatus(Remote(ipc::Op::kBlasSgemv, &g, sizeof(g), false));
}

}  // extern "C"
