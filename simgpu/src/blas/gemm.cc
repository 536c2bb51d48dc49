// Every GEMM: cublasSgemm, Dgemm, Cgemm, Zgemm, Hgemm, GemmEx and their strided and pointer-array
// batches, on one path.
#include <algorithm>
#include <complex>
#include <vector>

#include "blas/blas_internal.h"
#include "blas/half.h"
#include "blas/scalar.h"

namespace phos::sim::blas {
namespace {

using ComplexFloat = std::complex<float>;
using ComplexDouble = std::complex<double>;

// How the entries are computed: fp32 arithmetic (fp32, fp16 and bf16 matrices), fp64, or complex.
enum class Arith { kFloat, kDouble, kComplexFloat, kComplexDouble };

struct Plan {
  Arith arith = Arith::kFloat;
  uint32_t scalar_bytes = 4;  // of alpha and beta
  bool half_scalars = false;  // CUBLAS_COMPUTE_16F: alpha and beta are __half
};

bool Fp32Compute(int c) {
  return c == CUBLAS_COMPUTE_32F || c == CUBLAS_COMPUTE_32F_PEDANTIC || c == CUBLAS_COMPUTE_32F_FAST_16F ||
         c == CUBLAS_COMPUTE_32F_FAST_16BF || c == CUBLAS_COMPUTE_32F_FAST_TF32;
}

cublasStatus_t PlanTypes(const GemmCall& c, Plan* plan) {
  const int a = EnumValue(c.a_type), b = EnumValue(c.b_type), out = EnumValue(c.c_type);
  const int compute = EnumValue(c.compute);
  if (a != b) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (Fp32Compute(compute)) {
    if ((a == CUDA_R_32F && out == CUDA_R_32F) ||
        ((a == CUDA_R_16F || a == CUDA_R_16BF) && (out == CUDA_R_32F || out == a))) {
      *plan = {Arith::kFloat, 4, false};
      return CUBLAS_STATUS_SUCCESS;
    }
    if (a == CUDA_C_32F && out == CUDA_C_32F) {
      *plan = {Arith::kComplexFloat, 8, false};
      return CUBLAS_STATUS_SUCCESS;
    }
  } else if (compute == CUBLAS_COMPUTE_64F || compute == CUBLAS_COMPUTE_64F_PEDANTIC) {
    if (a == CUDA_R_64F && out == CUDA_R_64F) {
      *plan = {Arith::kDouble, 8, false};
      return CUBLAS_STATUS_SUCCESS;
    }
    if (a == CUDA_C_64F && out == CUDA_C_64F) {
      *plan = {Arith::kComplexDouble, 16, false};
      return CUBLAS_STATUS_SUCCESS;
    }
  } else if ((compute == CUBLAS_COMPUTE_16F || compute == CUBLAS_COMPUTE_16F_PEDANTIC) && a == CUDA_R_16F &&
             out == CUDA_R_16F) {
    *plan = {Arith::kFloat, 2, true};
    return CUBLAS_STATUS_SUCCESS;
  }
  return CUBLAS_STATUS_NOT_SUPPORTED;
}

uint64_t ElementSize(cudaDataType type) {
  switch (type) {
    case CUDA_R_16F:
    case CUDA_R_16BF:
      return 2;
    case CUDA_R_32F:
      return 4;
    case CUDA_C_64F:
      return 16;
    default:
      return 8;  // CUDA_R_64F, CUDA_C_32F
  }
}

// alpha and beta as the arithmetic uses them, read when the work runs.
struct Scalars {
  float f_alpha = 0, f_beta = 0;
  double d_alpha = 0, d_beta = 0;
  ComplexFloat c_alpha, c_beta;
  ComplexDouble z_alpha, z_beta;
  bool alpha_zero = false, beta_zero = false;
};
Scalars Read(const Plan& p, const ScalarArg& alpha, const ScalarArg& beta) {
  Scalars s;
  switch (p.arith) {
    case Arith::kFloat:
      s.f_alpha = p.half_scalars ? HalfToFloat(alpha.As<uint16_t>()) : alpha.As<float>();
      s.f_beta = p.half_scalars ? HalfToFloat(beta.As<uint16_t>()) : beta.As<float>();
      s.alpha_zero = s.f_alpha == 0.0f, s.beta_zero = s.f_beta == 0.0f;
      break;
    case Arith::kDouble:
      s.d_alpha = alpha.As<double>(), s.d_beta = beta.As<double>();
      s.alpha_zero = s.d_alpha == 0.0, s.beta_zero = s.d_beta == 0.0;
      break;
    case Arith::kComplexFloat:
      s.c_alpha = alpha.As<ComplexFloat>(), s.c_beta = beta.As<ComplexFloat>();
      s.alpha_zero = s.c_alpha == ComplexFloat{}, s.beta_zero = s.c_beta == ComplexFloat{};
      break;
    case Arith::kComplexDouble:
      s.z_alpha = alpha.As<ComplexDouble>(), s.z_beta = beta.As<ComplexDouble>();
      s.alpha_zero = s.z_alpha == ComplexDouble{}, s.beta_zero = s.z_beta == ComplexDouble{};
      break;
  }
  return s;
}

// Whether a scalar is known, when the call is made, to equal v (host pointer mode only).
bool Known(const Plan& p, const ScalarArg& s, double v) {
  if (s.on_device()) return false;
  switch (p.arith) {
    case Arith::kFloat:
      return (p.half_scalars ? HalfToFloat(s.As<uint16_t>()) : s.As<float>()) == static_cast<float>(v);
    case Arith::kDouble:
      return s.As<double>() == v;
    case Arith::kComplexFloat:
      return s.As<ComplexFloat>() == ComplexFloat(static_cast<float>(v));
    case Arith::kComplexDouble:
      return s.As<ComplexDouble>() == ComplexDouble(v);
  }
  return false;
}

// The stored shape of op(X) when op(X) is rows x cols.
struct Shape {
  int64_t rows;
  int64_t cols;
};
Shape Stored(cublasOperation_t op, int64_t rows, int64_t cols) {
  return Transposed(op) ? Shape{cols, rows} : Shape{rows, cols};
}

// A stored 16-bit matrix (leading dimension ld) to packed fp32 (leading dimension rows), and back.
void Widen(const void* src, cudaDataType type, Shape s, int64_t ld, std::vector<float>* dst) {
  dst->resize(static_cast<size_t>(s.rows * s.cols));
  for (int64_t j = 0; j < s.cols; ++j) {
    for (int64_t i = 0; i < s.rows; ++i)
      (*dst)[static_cast<size_t>(j * s.rows + i)] = Widen1(src, j * ld + i, type);
  }
}
void Narrow(const std::vector<float>& src, Shape s, void* dst, cudaDataType type, int64_t ld) {
  for (int64_t j = 0; j < s.cols; ++j) {
    for (int64_t i = 0; i < s.rows; ++i)
      Narrow1(src[static_cast<size_t>(j * s.rows + i)], dst, j * ld + i, type);
  }
}

// C = beta * C on a rows x cols tile of T at `out`; beta == 0 writes zeros whatever C held (NaN
// too). Through the elements' bytes, as Widen1: C need not be aligned to T.
template <typename T, typename S>
void ScaleTile(char* out, int64_t ldc, int rows, int cols, S beta, bool beta_zero) {
  for (int64_t j = 0; j < cols; ++j) {
    for (int64_t i = 0; i < rows; ++i) {
      char* at = out + (j * ldc + i) * static_cast<int64_t>(sizeof(T));
      T v{};
      if (!beta_zero) {
        std::memcpy(&v, at, sizeof v);
        v = static_cast<T>(beta * v);
      }
      std::memcpy(at, &v, sizeof v);
    }
  }
}

// Where one batch entry's matrices are.
struct Entry {
  const char* a;
  const char* b;
  char* c;
};

// C[i0:i1, j0:j1] of one entry: rows i0..i1 of op(A) times columns j0..j1 of op(B).
void RunTile(const GemmCall& c, const Scalars& s, Arith arith, const Entry& e, int i0, int i1, int j0,
             int j1) {
  const int rows = i1 - i0;
  const int cols = j1 - j0;
  const uint64_t ea = ElementSize(c.a_type);
  const uint64_t ec = ElementSize(c.c_type);
  char* out = e.c + (i0 + int64_t{j0} * c.ldc) * static_cast<int64_t>(ec);
  // C = beta * C without reading A or B: OpenBLAS's small-matrix path would read them anyway.
  if (s.alpha_zero || c.k == 0) {
    switch (arith) {
      case Arith::kDouble:
        return ScaleTile<double>(out, c.ldc, rows, cols, s.d_beta, s.beta_zero);
      case Arith::kComplexFloat:
        return ScaleTile<ComplexFloat>(out, c.ldc, rows, cols, s.c_beta, s.beta_zero);
      case Arith::kComplexDouble:
        return ScaleTile<ComplexDouble>(out, c.ldc, rows, cols, s.z_beta, s.beta_zero);
      case Arith::kFloat:
        if (c.c_type == CUDA_R_32F)
          return ScaleTile<float>(out, c.ldc, rows, cols, s.f_beta, s.beta_zero);
        for (int64_t j = 0; j < cols; ++j) {
          for (int64_t i = 0; i < rows; ++i) {
            const int64_t at = j * c.ldc + i;
            Narrow1(s.beta_zero ? 0.0f : s.f_beta * Widen1(out, at, c.c_type), out, at, c.c_type);
          }
        }
        return;
    }
  }
  // Row i of op(A) is row i of A, or column i of A when transposed; likewise for columns of op(B).
  const char* a = e.a + (Transposed(c.transa) ? int64_t{i0} * c.lda : i0) * static_cast<int64_t>(ea);
  const char* b = e.b + (Transposed(c.transb) ? j0 : int64_t{j0} * c.ldb) * static_cast<int64_t>(ea);
  const CBLAS_TRANSPOSE ta = ToCblas(c.transa);
  const CBLAS_TRANSPOSE tb = ToCblas(c.transb);
  switch (arith) {
    case Arith::kDouble:
      cblas_dgemm(CblasColMajor, ta, tb, rows, cols, c.k, s.d_alpha, reinterpret_cast<const double*>(a),
                  c.lda, reinterpret_cast<const double*>(b), c.ldb, s.d_beta, reinterpret_cast<double*>(out),
                  c.ldc);
      return;
    case Arith::kComplexFloat:
      cblas_cgemm(CblasColMajor, ta, tb, rows, cols, c.k, &s.c_alpha, a, c.lda, b, c.ldb, &s.c_beta, out,
                  c.ldc);
      return;
    case Arith::kComplexDouble:
      cblas_zgemm(CblasColMajor, ta, tb, rows, cols, c.k, &s.z_alpha, a, c.lda, b, c.ldb, &s.z_beta, out,
                  c.ldc);
      return;
    case Arith::kFloat:
      break;
  }
  if (c.a_type == CUDA_R_32F) {
    // OpenBLAS, like cuBLAS, treats beta == 0 as "C is write-only": NaNs in C do not survive.
    cblas_sgemm(CblasColMajor, ta, tb, rows, cols, c.k, s.f_alpha, reinterpret_cast<const float*>(a), c.lda,
                reinterpret_cast<const float*>(b), c.ldb, s.f_beta, reinterpret_cast<float*>(out), c.ldc);
    return;
  }
  const Shape sc{rows, cols};
  const Shape sa = Stored(c.transa, rows, c.k);
  const Shape sb = Stored(c.transb, c.k, cols);
  std::vector<float> wa, wb;
  Widen(a, c.a_type, sa, c.lda, &wa);
  Widen(b, c.b_type, sb, c.ldb, &wb);
  const int lda = static_cast<int>(std::max<int64_t>(1, sa.rows));
  const int ldb = static_cast<int>(std::max<int64_t>(1, sb.rows));
  if (c.c_type == CUDA_R_32F) {
    cblas_sgemm(CblasColMajor, ta, tb, rows, cols, c.k, s.f_alpha, wa.data(), lda, wb.data(), ldb, s.f_beta,
                reinterpret_cast<float*>(out), c.ldc);
    return;
  }
  std::vector<float> wc(static_cast<size_t>(rows) * cols, 0.0f);
  if (!s.beta_zero) Widen(out, c.c_type, sc, c.ldc, &wc);
  cblas_sgemm(CblasColMajor, ta, tb, rows, cols, c.k, s.f_alpha, wa.data(), lda, wb.data(), ldb, s.f_beta,
              wc.data(), std::max(1, rows));
  Narrow(wc, sc, out, c.c_type, c.ldc);
}

// The matrices of entry `e`. With pointer arrays they are read from device memory now, when the
// work runs, and checked: an entry naming memory that is not device memory of its extent fails
// the op as a kernel's bad address would.
bool EntryAt(const DeviceAccess& device, const GemmCall& c, bool reads_ab, int64_t e, Entry* out) {
  const uint64_t ea = ElementSize(c.a_type), ec = ElementSize(c.c_type);
  if (!c.pointer_arrays) {
    // The enqueue checked each operand's batch (AddBatch), so e * stride stays within it; A and B
    // only when the call reads them (otherwise they were not checked and may be anything).
    out->c = static_cast<char*>(c.c) + e * c.stride_c * static_cast<int64_t>(ec);
    if (reads_ab) {
      out->a = static_cast<const char*>(c.a) + e * c.stride_a * static_cast<int64_t>(ea);
      out->b = static_cast<const char*>(c.b) + e * c.stride_b * static_cast<int64_t>(ea);
    }
    return true;
  }
  out->c = static_cast<char* const*>(c.c)[e];
  OperandRanges ranges;
  bool ok = ranges.AddMatrix("C", out->c, c.m, c.n, c.ldc, ec, Access::kReadWrite);
  if (reads_ab) {
    out->a = static_cast<const char* const*>(c.a)[e];
    out->b = static_cast<const char* const*>(c.b)[e];
    const Shape sa = Stored(c.transa, c.m, c.k), sb = Stored(c.transb, c.k, c.n);
    ok = ok && ranges.AddMatrix("A", out->a, sa.rows, sa.cols, c.lda, ea, Access::kRead) &&
         ranges.AddMatrix("B", out->b, sb.rows, sb.cols, c.ldb, ea, Access::kRead);
  }
  if (const OperandRange* bad = ok ? ranges.FirstInvalid(device) : nullptr; bad != nullptr || !ok) {
    PHOS_LOG_EVERY_SEC(Warn, "simgpu", 1, "batched gemm entry {}: {}: illegal address", e,
                       bad != nullptr ? OperandRanges::Describe(*bad) : std::string("extent overflows"));
    return false;
  }
  return true;
}

}  // namespace

cublasStatus_t EnqueueGemm(const BlasTarget& target, const GemmCall& c) {
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
  Plan plan;
  if (cublasStatus_t s = PlanTypes(c, &plan); s != CUBLAS_STATUS_SUCCESS) return s;
  auto ranges = std::make_shared<OperandRanges>();
  ScalarArg alpha, beta;
  if (!alpha.Take(target.pointer_mode, c.alpha, plan.scalar_bytes, "alpha", ranges.get()) ||
      !beta.Take(target.pointer_mode, c.beta, plan.scalar_bytes, "beta", ranges.get())) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  // BLAS quick returns: nothing to compute, or C = 1 * C.
  const bool alpha_zero = Known(plan, alpha, 0.0);
  if (c.m == 0 || c.n == 0 || c.batch == 0 || ((alpha_zero || c.k == 0) && Known(plan, beta, 1.0))) {
    return CUBLAS_STATUS_SUCCESS;
  }

  const bool reads_ab = c.k > 0 && !alpha_zero;
  const uint64_t ea = ElementSize(c.a_type);
  const uint64_t ec = ElementSize(c.c_type);
  if (c.pointer_arrays) {
    // The arrays now; the matrices they name when the work runs (EntryAt).
    bool ok = ranges->AddVector("C array", c.c, c.batch, 1, sizeof(void*), Access::kRead);
    if (reads_ab) {
      ok = ok && ranges->AddVector("A array", c.a, c.batch, 1, sizeof(void*), Access::kRead) &&
           ranges->AddVector("B array", c.b, c.batch, 1, sizeof(void*), Access::kRead);
    }
    if (!ok) return CUBLAS_STATUS_INVALID_VALUE;
  } else {
    bool ok = ranges->AddBatch("C", c.c, c.batch, c.stride_c, c.m, c.n, c.ldc, ec, Access::kReadWrite);
    if (reads_ab) {
      ok = ok && ranges->AddBatch("A", c.a, c.batch, c.stride_a, sa.rows, sa.cols, c.lda, ea, Access::kRead) &&
           ranges->AddBatch("B", c.b, c.batch, c.stride_b, sb.rows, sb.cols, c.ldb, ea, Access::kRead);
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
  DeviceAccess* device = target.device;
  return EnqueueBlasOp(
      target, "gemm", std::move(ranges), blocks, bytes,
      [c, plan, alpha, beta, device, by_rows, per_entry](uint64_t first, uint64_t end) -> CUresult {
        const Scalars s = Read(plan, alpha, beta);
        const bool reads = c.k > 0 && !s.alpha_zero;
        for (auto e = static_cast<int64_t>(first / per_entry); e * per_entry < static_cast<int64_t>(end);
             ++e) {
          Entry entry{};
          if (!EntryAt(*device, c, reads, e, &entry)) return CUDA_ERROR_ILLEGAL_ADDRESS;
          const int lo =
              static_cast<int>(std::max<int64_t>(static_cast<int64_t>(first), e * per_entry) - e * per_entry);
          const int hi = static_cast<int>(std::min<int64_t>(static_cast<int64_t>(end), (e + 1) * per_entry) -
                                          e * per_entry);
          if (by_rows) {
            RunTile(c, s, plan.arith, entry, lo, hi, 0, c.n);
          } else {
            RunTile(c, s, plan.arith, entry, 0, c.m, lo, hi);
          }
        }
        return CUDA_SUCCESS;
      });
}

}  // namespace phos::sim::blas
