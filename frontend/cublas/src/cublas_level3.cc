// cuBLAS Level 3: every GEMM as one kBlasGemm record (one, a strided batch, or a batch named by
// device arrays of pointers), and trsm, syrk, geam and dgmm in S and D as kBlasLevel3 records.
#include <cublas_v2.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdio>
#include <type_traits>

#include "cublas_internal.h"

using namespace phos::frontend::blas;
namespace ipc = phos::ipc;

namespace {

bool Fp32Compute(int32_t c) {
  return c == CUBLAS_COMPUTE_32F || c == CUBLAS_COMPUTE_32F_PEDANTIC || c == CUBLAS_COMPUTE_32F_FAST_16F ||
         c == CUBLAS_COMPUTE_32F_FAST_16BF || c == CUBLAS_COMPUTE_32F_FAST_TF32;
}
bool Fp16Compute(int32_t c) {
  return c == CUBLAS_COMPUTE_16F || c == CUBLAS_COMPUTE_16F_PEDANTIC;
}

// The type combinations the Ex calls serve: fp32; fp16 or bf16 inputs computing in fp32 into fp32
// or their own type; fp16 throughout computing in fp16. (Dgemm, Cgemm and Zgemm have calls of
// their own.)
bool ServedEx(int32_t a, int32_t b, int32_t c, int32_t compute) {
  if (a != b) return false;
  if (Fp16Compute(compute)) return a == CUDA_R_16F && c == CUDA_R_16F;
  if (!Fp32Compute(compute)) return false;
  return (a == CUDA_R_32F && c == CUDA_R_32F) ||
         ((a == CUDA_R_16F || a == CUDA_R_16BF) && (c == CUDA_R_32F || c == a));
}

// The bytes of alpha and beta: the compute type's scalar, complex when C is.
size_t ScalarBytes(int32_t c_type, int32_t compute) {
  if (Fp16Compute(compute)) return 2;
  if (c_type == CUDA_C_64F) return 16;
  if (c_type == CUDA_R_64F || c_type == CUDA_C_32F) return 8;
  return 4;
}

struct Gemm {
  cublasOperation_t ta, tb;
  int m, n, k;
  const void* alpha;
  const void* a;
  int32_t a_type;
  int lda;
  const void* b;
  int32_t b_type;
  int ldb;
  const void* beta;
  const void* c;
  int32_t c_type;
  int ldc;
  int32_t compute;
  int32_t algo = CUBLAS_GEMM_DEFAULT;
  ipc::BlasBatch kind = ipc::BlasBatch::kNone;
  int batch = 1;
  long long stride_a = 0, stride_b = 0, stride_c = 0;
};

cublasStatus_t Send(cublasHandle_t handle, const Gemm& g, const char* call) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!ValidOp(g.ta) || !ValidOp(g.tb) || g.m < 0 || g.n < 0 || g.k < 0 || g.batch < 0) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const int rows_a = Value(g.ta) == CUBLAS_OP_N ? g.m : g.k;
  const int rows_b = Value(g.tb) == CUBLAS_OP_N ? g.k : g.n;
  if (g.lda < std::max(1, rows_a) || g.ldb < std::max(1, rows_b) || g.ldc < std::max(1, g.m)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (g.kind == ipc::BlasBatch::kPointers && g.batch > ipc::kMaxBlasPointerBatch) {
    char why[96];
    std::snprintf(why, sizeof(why), "a batch of %d matrices is over phos's cap of %d", g.batch,
                  ipc::kMaxBlasPointerBatch);
    return NotSupported(call, why);
  }
  if (g.kind != ipc::BlasBatch::kNone && g.batch == 0) return CUBLAS_STATUS_SUCCESS;
  ipc::GemmArgs r{};
  r.handle = Id(handle);
  r.pointer_mode = PointerMode(handle);
  const size_t scalar = ScalarBytes(g.c_type, g.compute);
  if (!Scalar(r.pointer_mode, g.alpha, scalar, &r.alpha) ||
      !Scalar(r.pointer_mode, g.beta, scalar, &r.beta)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  r.trans_a = Value(g.ta), r.trans_b = Value(g.tb);
  r.m = g.m, r.n = g.n, r.k = g.k;
  r.lda = g.lda, r.ldb = g.ldb, r.ldc = g.ldc;
  r.a_type = g.a_type, r.b_type = g.b_type, r.c_type = g.c_type;
  r.compute_type = g.compute;
  r.algo = g.algo;
  r.batch_kind = static_cast<int32_t>(g.kind);
  r.batch = g.kind == ipc::BlasBatch::kNone ? 1 : g.batch;
  r.a = Id(g.a), r.b = Id(g.b), r.c = Id(g.c);
  r.stride_a = g.stride_a, r.stride_b = g.stride_b, r.stride_c = g.stride_c;
  return QueueStatus(Remote(ipc::Op::kBlasGemm, &r, sizeof(r), false));
}

// A typed GEMM (S, D, C, Z, H): its matrices' type and the compute type that goes with it.
template <typename T>
constexpr int32_t kMatrixType = std::is_same_v<T, float>             ? CUDA_R_32F
                                : std::is_same_v<T, double>          ? CUDA_R_64F
                                : std::is_same_v<T, cuComplex>       ? CUDA_C_32F
                                : std::is_same_v<T, cuDoubleComplex> ? CUDA_C_64F
                                                                     : CUDA_R_16F;
template <typename T>
constexpr int32_t kComputeType =
    std::is_same_v<T, __half>                                         ? CUBLAS_COMPUTE_16F
    : std::is_same_v<T, double> || std::is_same_v<T, cuDoubleComplex> ? CUBLAS_COMPUTE_64F
                                                                      : CUBLAS_COMPUTE_32F;

template <typename T>
Gemm Typed(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const T* alpha, const void* a,
           int lda, const void* b, int ldb, const T* beta, const void* c, int ldc) {
  return Gemm{ta,
              tb,
              m,
              n,
              k,
              alpha,
              a,
              kMatrixType<T>,
              lda,
              b,
              kMatrixType<T>,
              ldb,
              beta,
              c,
              kMatrixType<T>,
              ldc,
              kComputeType<T>};
}

Gemm Strided(Gemm g, long long sa, long long sb, long long sc, int batch) {
  g.kind = ipc::BlasBatch::kStrided;
  g.stride_a = sa, g.stride_b = sb, g.stride_c = sc;
  g.batch = batch;
  return g;
}

Gemm Pointers(Gemm g, int batch) {
  g.kind = ipc::BlasBatch::kPointers;
  g.batch = batch;
  return g;
}

// An Ex call with the types and compute type its caller named, refused when they are not served.
cublasStatus_t SendEx(cublasHandle_t handle, Gemm g, cublasComputeType_t compute, cublasGemmAlgo_t algo,
                      const char* call) {
  g.compute = Value(compute);
  g.algo = Value(algo);
  if (handle != nullptr && !ServedEx(g.a_type, g.b_type, g.c_type, g.compute)) {
    return NotSupported(
        call, "types other than fp32, fp16 or bf16 inputs computing in fp32, or fp16 computing in fp16");
  }
  return Send(handle, g, call);
}

template <typename T>
constexpr int32_t kRealType = std::is_same_v<T, float> ? CUDA_R_32F : CUDA_R_64F;

cublasStatus_t SendLevel3(cublasHandle_t handle, ipc::BlasLevel3Args r, const void* alpha, const void* beta,
                          size_t scalar) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  r.handle = Id(handle);
  r.pointer_mode = PointerMode(handle);
  const auto routine = static_cast<ipc::BlasLevel3>(r.routine);
  const bool has_alpha = routine != ipc::BlasLevel3::kDgmm;
  const bool has_beta = routine == ipc::BlasLevel3::kSyrk || routine == ipc::BlasLevel3::kGeam;
  if ((has_alpha && !Scalar(r.pointer_mode, alpha, scalar, &r.alpha)) ||
      (has_beta && !Scalar(r.pointer_mode, beta, scalar, &r.beta))) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  return QueueStatus(Remote(ipc::Op::kBlasLevel3, &r, sizeof(r), false));
}

template <typename T>
cublasStatus_t Trsm(cublasHandle_t h, cublasSideMode_t side, cublasFillMode_t uplo, cublasOperation_t trans,
                    cublasDiagType_t diag, int m, int n, const T* alpha, const T* a, int lda, T* b, int ldb) {
  if (h == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  const int ka = Value(side) == CUBLAS_SIDE_LEFT ? m : n;
  if (!ValidSide(side) || !ValidFill(uplo) || !ValidOp(trans) || !ValidDiag(diag) || m < 0 || n < 0 ||
      lda < std::max(1, ka) || ldb < std::max(1, m)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  ipc::BlasLevel3Args r{};
  r.routine = static_cast<int32_t>(ipc::BlasLevel3::kTrsm);
  r.type = kRealType<T>;
  r.side = Value(side), r.uplo = Value(uplo), r.trans_a = Value(trans), r.diag = Value(diag);
  r.m = m, r.n = n, r.lda = lda, r.ldb = ldb;
  r.a = Id(a), r.b = Id(b);
  return SendLevel3(h, r, alpha, nullptr, sizeof(T));
}

template <typename T>
cublasStatus_t Syrk(cublasHandle_t h, cublasFillMode_t uplo, cublasOperation_t trans, int n, int k,
                    const T* alpha, const T* a, int lda, const T* beta, T* c, int ldc) {
  if (h == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  const int rows_a = Value(trans) == CUBLAS_OP_N ? n : k;
  if (!ValidFill(uplo) || !ValidOp(trans) || n < 0 || k < 0 || lda < std::max(1, rows_a) ||
      ldc < std::max(1, n)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  ipc::BlasLevel3Args r{};
  r.routine = static_cast<int32_t>(ipc::BlasLevel3::kSyrk);
  r.type = kRealType<T>;
  r.uplo = Value(uplo), r.trans_a = Value(trans);
  r.n = n, r.k = k, r.lda = lda, r.ldc = ldc;
  r.a = Id(a), r.c = Id(c);
  return SendLevel3(h, r, alpha, beta, sizeof(T));
}

template <typename T>
cublasStatus_t Geam(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                    const T* alpha, const T* a, int lda, const T* beta, const T* b, int ldb, T* c, int ldc) {
  if (h == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  const bool a_t = Value(ta) != CUBLAS_OP_N, b_t = Value(tb) != CUBLAS_OP_N;
  if (!ValidOp(ta) || !ValidOp(tb) || m < 0 || n < 0 || lda < std::max(1, a_t ? n : m) ||
      ldb < std::max(1, b_t ? n : m) || ldc < std::max(1, m)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  // In place only element for element (cuBLAS): C may be A or B untransposed, at its leading dimension.
  if ((Id(c) == Id(a) && (a_t || lda != ldc)) || (Id(c) == Id(b) && (b_t || ldb != ldc))) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  ipc::BlasLevel3Args r{};
  r.routine = static_cast<int32_t>(ipc::BlasLevel3::kGeam);
  r.type = kRealType<T>;
  r.trans_a = Value(ta), r.trans_b = Value(tb);
  r.m = m, r.n = n, r.lda = lda, r.ldb = ldb, r.ldc = ldc;
  r.a = Id(a), r.b = Id(b), r.c = Id(c);
  return SendLevel3(h, r, alpha, beta, sizeof(T));
}

template <typename T>
cublasStatus_t Dgmm(cublasHandle_t h, cublasSideMode_t side, int m, int n, const T* a, int lda, const T* x,
                    int incx, T* c, int ldc) {
  if (h == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!ValidSide(side) || m < 0 || n < 0 || lda < std::max(1, m) || ldc < std::max(1, m)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  ipc::BlasLevel3Args r{};
  r.routine = static_cast<int32_t>(ipc::BlasLevel3::kDgmm);
  r.type = kRealType<T>;
  r.side = Value(side);
  r.m = m, r.n = n, r.lda = lda, r.ldc = ldc, r.incx = incx;
  r.a = Id(a), r.b = Id(x), r.c = Id(c);
  return SendLevel3(h, r, nullptr, nullptr, sizeof(T));
}

}  // namespace

extern "C" {

// ---- GEMM ------------------------------------------------------------------------------------

cublasStatus_t cublasSgemm_v2(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                              int k, const float* alpha, const float* a, int lda, const float* b, int ldb,
                              const float* beta, float* c, int ldc) {
  return Send(h, Typed(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc), "cublasSgemm_v2");
}
cublasStatus_t cublasDgemm_v2(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                              int k, const double* alpha, const double* a, int lda, const double* b, int ldb,
                              const double* beta, double* c, int ldc) {
  return Send(h, Typed(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc), "cublasDgemm_v2");
}
cublasStatus_t cublasCgemm_v2(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                              int k, const cuComplex* alpha, const cuComplex* a, int lda, const cuComplex* b,
                              int ldb, const cuComplex* beta, cuComplex* c, int ldc) {
  return Send(h, Typed(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc), "cublasCgemm_v2");
}
cublasStatus_t cublasZgemm_v2(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                              int k, const cuDoubleComplex* alpha, const cuDoubleComplex* a, int lda,
                              const cuDoubleComplex* b, int ldb, const cuDoubleComplex* beta,
                              cuDoubleComplex* c, int ldc) {
  return Send(h, Typed(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc), "cublasZgemm_v2");
}
cublasStatus_t cublasHgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                           const __half* alpha, const __half* a, int lda, const __half* b, int ldb,
                           const __half* beta, __half* c, int ldc) {
  return Send(h, Typed(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc), "cublasHgemm");
}

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                                         int n, int k, const float* alpha, const float* a, int lda,
                                         long long int sa, const float* b, int ldb, long long int sb,
                                         const float* beta, float* c, int ldc, long long int sc, int batch) {
  return Send(h, Strided(Typed(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc), sa, sb, sc, batch),
              "cublasSgemmStridedBatched");
}
cublasStatus_t cublasDgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                                         int n, int k, const double* alpha, const double* a, int lda,
                                         long long int sa, const double* b, int ldb, long long int sb,
                                         const double* beta, double* c, int ldc, long long int sc,
                                         int batch) {
  return Send(h, Strided(Typed(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc), sa, sb, sc, batch),
              "cublasDgemmStridedBatched");
}
cublasStatus_t cublasHgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                                         int n, int k, const __half* alpha, const __half* a, int lda,
                                         long long int sa, const __half* b, int ldb, long long int sb,
                                         const __half* beta, __half* c, int ldc, long long int sc,
                                         int batch) {
  return Send(h, Strided(Typed(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc), sa, sb, sc, batch),
              "cublasHgemmStridedBatched");
}
cublasStatus_t cublasCgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                                         int n, int k, const cuComplex* alpha, const cuComplex* a, int lda,
                                         long long int sa, const cuComplex* b, int ldb, long long int sb,
                                         const cuComplex* beta, cuComplex* c, int ldc, long long int sc,
                                         int batch) {
  return Send(h, Strided(Typed(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc), sa, sb, sc, batch),
              "cublasCgemmStridedBatched");
}
cublasStatus_t cublasZgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                                         int n, int k, const cuDoubleComplex* alpha, const cuDoubleComplex* a,
                                         int lda, long long int sa, const cuDoubleComplex* b, int ldb,
                                         long long int sb, const cuDoubleComplex* beta, cuDoubleComplex* c,
                                         int ldc, long long int sc, int batch) {
  return Send(h, Strided(Typed(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc), sa, sb, sc, batch),
              "cublasZgemmStridedBatched");
}

cublasStatus_t cublasSgemmBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                  int k, const float* alpha, const float* const a[], int lda,
                                  const float* const b[], int ldb, const float* beta, float* const c[],
                                  int ldc, int batch) {
  return Send(h, Pointers(Typed(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc), batch),
              "cublasSgemmBatched");
}
cublasStatus_t cublasDgemmBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                  int k, const double* alpha, const double* const a[], int lda,
                                  const double* const b[], int ldb, const double* beta, double* const c[],
                                  int ldc, int batch) {
  return Send(h, Pointers(Typed(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc), batch),
              "cublasDgemmBatched");
}
cublasStatus_t cublasHgemmBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                  int k, const __half* alpha, const __half* const a[], int lda,
                                  const __half* const b[], int ldb, const __half* beta, __half* const c[],
                                  int ldc, int batch) {
  return Send(h, Pointers(Typed(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc), batch),
              "cublasHgemmBatched");
}
cublasStatus_t cublasCgemmBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                  int k, const cuComplex* alpha, const cuComplex* const a[], int lda,
                                  const cuComplex* const b[], int ldb, const cuComplex* beta,
                                  cuComplex* const c[], int ldc, int batch) {
  return Send(h, Pointers(Typed(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc), batch),
              "cublasCgemmBatched");
}
cublasStatus_t cublasZgemmBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                  int k, const cuDoubleComplex* alpha, const cuDoubleComplex* const a[],
                                  int lda, const cuDoubleComplex* const b[], int ldb,
                                  const cuDoubleComplex* beta, cuDoubleComplex* const c[], int ldc,
                                  int batch) {
  return Send(h, Pointers(Typed(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc), batch),
              "cublasZgemmBatched");
}

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void* alpha, const void* a, cudaDataType at, int lda, const void* b,
                            cudaDataType bt, int ldb, const void* beta, void* c, cudaDataType ct, int ldc,
                            cublasComputeType_t compute, cublasGemmAlgo_t algo) {
  Gemm g{ta, tb, m, n, k, alpha, a, Value(at), lda, b, Value(bt), ldb, beta, c, Value(ct), ldc, 0};
  return SendEx(h, g, compute, algo, "cublasGemmEx");
}
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                                          int n, int k, const void* alpha, const void* a, cudaDataType at,
                                          int lda, long long int sa, const void* b, cudaDataType bt, int ldb,
                                          long long int sb, const void* beta, void* c, cudaDataType ct,
                                          int ldc, long long int sc, int batch, cublasComputeType_t compute,
                                          cublasGemmAlgo_t algo) {
  Gemm g{ta, tb, m, n, k, alpha, a, Value(at), lda, b, Value(bt), ldb, beta, c, Value(ct), ldc, 0};
  return SendEx(h, Strided(g, sa, sb, sc, batch), compute, algo, "cublasGemmStridedBatchedEx");
}
cublasStatus_t cublasGemmBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                   int k, const void* alpha, const void* const a[], cudaDataType at, int lda,
                                   const void* const b[], cudaDataType bt, int ldb, const void* beta,
                                   void* const c[], cudaDataType ct, int ldc, int batch,
                                   cublasComputeType_t compute, cublasGemmAlgo_t algo) {
  Gemm g{ta, tb, m, n, k, alpha, a, Value(at), lda, b, Value(bt), ldb, beta, c, Value(ct), ldc, 0};
  return SendEx(h, Pointers(g, batch), compute, algo, "cublasGemmBatchedEx");
}
// cublasSgemmEx: float scalars and an fp32 compute type, its matrices' types as GemmEx's.
cublasStatus_t cublasSgemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                             int k, const float* alpha, const void* a, cudaDataType at, int lda,
                             const void* b, cudaDataType bt, int ldb, const float* beta, void* c,
                             cudaDataType ct, int ldc) {
  Gemm g{ta, tb, m, n, k, alpha, a, Value(at), lda, b, Value(bt), ldb, beta, c, Value(ct), ldc, 0};
  return SendEx(h, g, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT, "cublasSgemmEx");
}

// ---- trsm, syrk, geam, dgmm ------------------------------------------------------------------

cublasStatus_t cublasStrsm_v2(cublasHandle_t h, cublasSideMode_t side, cublasFillMode_t uplo,
                              cublasOperation_t trans, cublasDiagType_t diag, int m, int n,
                              const float* alpha, const float* a, int lda, float* b, int ldb) {
  return Trsm(h, side, uplo, trans, diag, m, n, alpha, a, lda, b, ldb);
}
cublasStatus_t cublasDtrsm_v2(cublasHandle_t h, cublasSideMode_t side, cublasFillMode_t uplo,
                              cublasOperation_t trans, cublasDiagType_t diag, int m, int n,
                              const double* alpha, const double* a, int lda, double* b, int ldb) {
  return Trsm(h, side, uplo, trans, diag, m, n, alpha, a, lda, b, ldb);
}
cublasStatus_t cublasSsyrk_v2(cublasHandle_t h, cublasFillMode_t uplo, cublasOperation_t trans, int n, int k,
                              const float* alpha, const float* a, int lda, const float* beta, float* c,
                              int ldc) {
  return Syrk(h, uplo, trans, n, k, alpha, a, lda, beta, c, ldc);
}
cublasStatus_t cublasDsyrk_v2(cublasHandle_t h, cublasFillMode_t uplo, cublasOperation_t trans, int n, int k,
                              const double* alpha, const double* a, int lda, const double* beta, double* c,
                              int ldc) {
  return Syrk(h, uplo, trans, n, k, alpha, a, lda, beta, c, ldc);
}
cublasStatus_t cublasSgeam(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                           const float* alpha, const float* a, int lda, const float* beta, const float* b,
                           int ldb, float* c, int ldc) {
  return Geam(h, ta, tb, m, n, alpha, a, lda, beta, b, ldb, c, ldc);
}
cublasStatus_t cublasDgeam(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                           const double* alpha, const double* a, int lda, const double* beta, const double* b,
                           int ldb, double* c, int ldc) {
  return Geam(h, ta, tb, m, n, alpha, a, lda, beta, b, ldb, c, ldc);
}
cublasStatus_t cublasSdgmm(cublasHandle_t h, cublasSideMode_t side, int m, int n, const float* a, int lda,
                           const float* x, int incx, float* c, int ldc) {
  return Dgmm(h, side, m, n, a, lda, x, incx, c, ldc);
}
cublasStatus_t cublasDdgmm(cublasHandle_t h, cublasSideMode_t side, int m, int n, const double* a, int lda,
                           const double* x, int incx, double* c, int ldc) {
  return Dgmm(h, side, m, n, a, lda, x, incx, c, ldc);
}

}  // extern "C"
