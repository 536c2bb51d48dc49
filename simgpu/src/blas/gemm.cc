// cublasSgemm, cublasGemmEx and cublasSgemmStridedBatched: one GEMM path.
#include <algorithm>
#include <vector>

#include "blas/blas_internal.h"
#include "blas/blas_ops.h"
#include "blas/half.h"

namespace phos::sim::blas {
namespace {

uint64_t ElementSize(cudaDataType type) {
  return type == CUDA_R_16F ? 2 : 4;
}

cublasStatus_t CheckTypes(const GemmCall& c) {
  if (c.a_type != c.b_type) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (c.a_type == CUDA_R_32F && c.c_type == CUDA_R_32F) return CUBLAS_STATUS_SUCCESS;
  if (c.a_type == CUDA_R_16F && (c.c_type == CUDA_R_32F || c.c_type == CUDA_R_16F))
    return CUBLAS_STATUS_SUCCESS;
  return CUBLAS_STATUS_NOT_SUPPORTED;
}

// The stored shape of op(X) when op(X) is rows x cols.
struct Shape {
  int64_t rows;
  int64_t cols;
};
Shape Stored(cublasOperation_t op, int64_t rows, int64_t cols) {
  return Transposed(op) ? Shape{cols, rows} : Shape{rows, cols};
}

// Stored fp16 matrix (leading dimension ld) to packed fp32 (leading dimension rows), and back.
void Widen(const void* src, Shape s, int64_t ld, std::vector<float>* dst) {
  dst->resize(static_cast<size_t>(s.rows * s.cols));
  const auto* in = static_cast<const uint16_t*>(src);
  for (int64_t j = 0; j < s.cols; ++j) HalfToFloat(in + j * ld, dst->data() + j * s.rows, s.rows);
}
void Narrow(const std::vector<float>& src, Shape s, void* dst, int64_t ld) {
  auto* out = static_cast<uint16_t*>(dst);
  for (int64_t j = 0; j < s.cols; ++j) FloatToHalf(src.data() + j * s.rows, out + j * ld, s.rows);
}

const char* At(const void* base, int64_t elements, uint64_t element_size) {
  return static_cast<const char*>(base) + elements * static_cast<int64_t>(element_size);
}

// C = beta * C on a rows x cols tile at `out`; beta == 0 writes zeros whatever C held (NaN too).
void ScaleTile(const GemmCall& c, char* out, int rows, int cols) {
  for (int64_t j = 0; j < cols; ++j) {
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t at = j * c.ldc + i;
      if (c.c_type == CUDA_R_32F) {
        float& v = reinterpret_cast<float*>(out)[at];
        v = c.beta == 0.0f ? 0.0f : c.beta * v;
      } else {
        uint16_t& v = reinterpret_cast<uint16_t*>(out)[at];
        v = FloatToHalf(c.beta == 0.0f ? 0.0f : c.beta * HalfToFloat(v));
      }
    }
  }
}

// C[i0:i1, j0:j1] of batch entry `entry`: rows i0..i1 of op(A) times columns j0..j1 of op(B).
void RunTile(const GemmCall& c, int64_t entry, int i0, int i1, int j0, int j1) {
  const int rows = i1 - i0;
  const int cols = j1 - j0;
  const uint64_t ea = ElementSize(c.a_type);
  const uint64_t ec = ElementSize(c.c_type);
  // Row i of op(A) is row i of A, or column i of A when transposed; likewise for columns of op(B).
  const char* a = At(c.a, entry * c.stride_a + (Transposed(c.transa) ? int64_t{i0} * c.lda : i0), ea);
  const char* b = At(c.b, entry * c.stride_b + (Transposed(c.transb) ? j0 : int64_t{j0} * c.ldb), ea);
  char* out = const_cast<char*>(At(c.c, entry * c.stride_c + i0 + int64_t{j0} * c.ldc, ec));
  if (c.alpha == 0.0f || c.k == 0) {
    // C = beta * C without reading A or B: OpenBLAS's small-matrix path would read them anyway.
    ScaleTile(c, out, rows, cols);
    return;
  }
  const CBLAS_TRANSPOSE ta = ToCblas(c.transa);
  const CBLAS_TRANSPOSE tb = ToCblas(c.transb);
  if (c.a_type == CUDA_R_32F) {
    // OpenBLAS, like cuBLAS, treats beta == 0 as "C is write-only": NaNs in C do not survive.
    cblas_sgemm(CblasColMajor, ta, tb, rows, cols, c.k, c.alpha, reinterpret_cast<const float*>(a), c.lda,
                reinterpret_cast<const float*>(b), c.ldb, c.beta, reinterpret_cast<float*>(out), c.ldc);
    return;
  }
  const Shape sa = Stored(c.transa, rows, c.k);
  const Shape sb = Stored(c.transb, c.k, cols);
  std::vector<float> wa, wb;
  Widen(a, sa, c.lda, &wa);
  Widen(b, sb, c.ldb, &wb);
  const int lda = static_cast<int>(std::max<int64_t>(1, sa.rows));
  const int ldb = static_cast<int>(std::max<int64_t>(1, sb.rows));
  if (c.c_type == CUDA_R_32F) {
    cblas_sgemm(CblasColMajor, ta, tb, rows, cols, c.k, c.alpha, wa.data(), lda, wb.data(), ldb, c.beta,
                reinterpret_cast<float*>(out), c.ldc);
    return;
  }
  const Shape sc{rows, cols};
  std::vector<float> wc(static_cast<size_t>(rows) * cols, 0.0f);
  if (c.beta != 0.0f) Widen(out, sc, c.ldc, &wc);
  cblas_sgemm(CblasColMajor, ta, tb, rows, cols, c.k, c.alpha, wa.data(), lda, wb.data(), ldb, c.beta,
              wc.data(), std::max(1, rows));
  Narrow(wc, sc, out, c.ldc);
}

}  // namespace

cublasStatus_t EnqueueGemm(DeviceAccess& device, const ContextRef& ctx, Stream& stream, const GemmCall& c) {
  if (!ValidOperation(c.transa) || !ValidOperation(c.transb) || c.m < 0 || c.n < 0 || c.k < 0 ||
      c.batch < 0) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const Shape sa = Stored(c.transa, c.m, c.k);
  const Shape sb = Stored(c.transb, c.k, c.n);
  if (c.lda < std::max<int64_t>(1, sa.rows) || c.ldb < std::max<int64_t>(1, sb.rows) ||
      c.ldc < std::max(1, c.m)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (cublasStatus_t s = CheckTypes(c); s != CUBLAS_STATUS_SUCCESS) return s;
  // BLAS quick returns: nothing to compute, or C = 1 * C.
  if (c.m == 0 || c.n == 0 || c.batch == 0 || ((c.alpha == 0.0f || c.k == 0) && c.beta == 1.0f)) {
    return CUBLAS_STATUS_SUCCESS;
  }

  const bool reads_ab = c.k > 0 && c.alpha != 0.0f;
  const uint64_t ea = ElementSize(c.a_type);
  const uint64_t ec = ElementSize(c.c_type);
  auto ranges = std::make_shared<OperandRanges>();
  for (int64_t e = 0; e < c.batch; ++e) {
    bool ok = ranges->AddMatrix("C", c.c, e * c.stride_c, c.m, c.n, c.ldc, ec, Access::kReadWrite);
    if (reads_ab) {
      ok = ok && ranges->AddMatrix("A", c.a, e * c.stride_a, sa.rows, sa.cols, c.lda, ea, Access::kRead) &&
           ranges->AddMatrix("B", c.b, e * c.stride_b, sb.rows, sb.cols, c.ldb, ea, Access::kRead);
    }
    if (!ok) return CUBLAS_STATUS_INVALID_VALUE;
  }

  // Blocks are rows of C when it is at least as tall as wide, else columns: each worker then
  // reads its own slice of the larger operand (an MLP layer's weights) and all of the smaller.
  const bool by_rows = c.m >= c.n;
  const int64_t per_entry = by_rows ? c.m : c.n;
  const uint64_t blocks = static_cast<uint64_t>(per_entry) * static_cast<uint64_t>(c.batch);
  const uint64_t bytes =
      static_cast<uint64_t>(c.m) * static_cast<uint64_t>(c.n) * ec * static_cast<uint64_t>(c.batch);
  return EnqueueBlasOp(
      device, ctx, stream, "gemm", std::move(ranges), blocks, bytes,
      [c, by_rows, per_entry](uint64_t first, uint64_t end) {
        for (auto e = static_cast<int64_t>(first / per_entry); e * per_entry < static_cast<int64_t>(end);
             ++e) {
          const int lo =
              static_cast<int>(std::max<int64_t>(static_cast<int64_t>(first), e * per_entry) - e * per_entry);
          const int hi = static_cast<int>(std::min<int64_t>(static_cast<int64_t>(end), (e + 1) * per_entry) -
                                          e * per_entry);
          if (by_rows) {
            RunTile(c, e, lo, hi, 0, c.n);
          } else {
            RunTile(c, e, 0, c.m, lo, hi);
          }
        }
      });
}

}  // namespace phos::sim::blas
