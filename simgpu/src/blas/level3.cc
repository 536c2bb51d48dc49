// cuBLAS Level 3 besides GEMM, in S and D: trsm and syrk on OpenBLAS (one block each), geam and
// dgmm (cuBLAS extensions with no BLAS counterpart: plain loops, split across the compute workers
// by columns of C).
#include <algorithm>

#include "blas/blas_internal.h"
#include "blas/cblas_typed.h"
#include "blas/scalar.h"

namespace phos::sim::blas {
namespace {

// Element i of a vector of `count` elements `inc` apart (BLAS: from the lowest address, so that
// for inc < 0 element 0 is the last stored).
template <typename T>
T VectorAt(const T* x, int64_t count, int inc, int64_t i) {
  return inc >= 0 ? x[i * inc] : x[(count - 1 - i) * static_cast<int64_t>(-inc)];
}

cublasStatus_t CheckArguments(const Level3Call& c) {
  if (c.m < 0 || c.n < 0 || c.k < 0) return CUBLAS_STATUS_INVALID_VALUE;
  const bool ta = ValidOperation(c.transa) && Transposed(c.transa);
  switch (c.routine) {
    case Level3::kTrsm: {
      const int ka = EnumValue(c.side) == CUBLAS_SIDE_LEFT ? c.m : c.n;
      if (!ValidSide(c.side) || !ValidFill(c.uplo) || !ValidOperation(c.transa) || !ValidDiag(c.diag) ||
          c.lda < std::max(1, ka) || c.ldb < std::max(1, c.m)) {
        return CUBLAS_STATUS_INVALID_VALUE;
      }
      return CUBLAS_STATUS_SUCCESS;
    }
    case Level3::kSyrk:
      if (!ValidFill(c.uplo) || !ValidOperation(c.transa) || c.lda < std::max(1, ta ? c.k : c.n) ||
          c.ldc < std::max(1, c.n)) {
        return CUBLAS_STATUS_INVALID_VALUE;
      }
      return CUBLAS_STATUS_SUCCESS;
    case Level3::kGeam: {
      const bool tb = ValidOperation(c.transb) && Transposed(c.transb);
      if (!ValidOperation(c.transa) || !ValidOperation(c.transb) || c.lda < std::max(1, ta ? c.n : c.m) ||
          c.ldb < std::max(1, tb ? c.n : c.m) || c.ldc < std::max(1, c.m)) {
        return CUBLAS_STATUS_INVALID_VALUE;
      }
      // In place only element for element: C may be A (or B) untransposed, at its leading dimension.
      if ((c.c == c.a && (ta || c.lda != c.ldc)) || (c.c == c.b && (tb || c.ldb != c.ldc))) {
        return CUBLAS_STATUS_INVALID_VALUE;
      }
      return CUBLAS_STATUS_SUCCESS;
    }
    case Level3::kDgmm:
      if (!ValidSide(c.side) || c.lda < std::max(1, c.m) || c.ldc < std::max(1, c.m))
        return CUBLAS_STATUS_INVALID_VALUE;
      return CUBLAS_STATUS_SUCCESS;
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}

template <typename T>
cublasStatus_t Enqueue(const BlasTarget& target, const Level3Call& c) {
  if (cublasStatus_t s = CheckArguments(c); s != CUBLAS_STATUS_SUCCESS) return s;
  auto ranges = std::make_shared<OperandRanges>();
  ScalarArg alpha, beta;
  const bool has_beta = c.routine == Level3::kSyrk || c.routine == Level3::kGeam;
  if ((c.routine != Level3::kDgmm &&
       !alpha.Take(target.pointer_mode, c.alpha, sizeof(T), "alpha", ranges.get())) ||
      (has_beta && !beta.Take(target.pointer_mode, c.beta, sizeof(T), "beta", ranges.get()))) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const bool alpha_zero = alpha.KnownEqual(T{0});
  const bool ta = Transposed(c.transa);
  const uint64_t e = sizeof(T);
  bool ok = true;
  const char* name = "";
  uint64_t blocks = 1;
  switch (c.routine) {
    case Level3::kTrsm: {
      name = "trsm";
      if (c.m == 0 || c.n == 0) return CUBLAS_STATUS_SUCCESS;
      const int ka = c.side == CUBLAS_SIDE_LEFT ? c.m : c.n;
      ok = (alpha_zero || ranges->AddMatrix("A", c.a, ka, ka, c.lda, e, Access::kRead)) &&
           ranges->AddMatrix("B", c.b, c.m, c.n, c.ldb, e, Access::kReadWrite);
      break;
    }
    case Level3::kSyrk:
      name = "syrk";
      if (c.n == 0 || ((alpha_zero || c.k == 0) && beta.KnownEqual(T{1}))) return CUBLAS_STATUS_SUCCESS;
      ok = (alpha_zero || c.k == 0 ||
            ranges->AddMatrix("A", c.a, ta ? c.k : c.n, ta ? c.n : c.k, c.lda, e, Access::kRead)) &&
           ranges->AddMatrix("C", c.c, c.n, c.n, c.ldc, e, Access::kReadWrite);
      break;
    case Level3::kGeam: {
      name = "geam";
      if (c.m == 0 || c.n == 0) return CUBLAS_STATUS_SUCCESS;
      const bool tb = Transposed(c.transb);
      ok = (alpha_zero ||
            ranges->AddMatrix("A", c.a, ta ? c.n : c.m, ta ? c.m : c.n, c.lda, e, Access::kRead)) &&
           (beta.KnownEqual(T{0}) ||
            ranges->AddMatrix("B", c.b, tb ? c.n : c.m, tb ? c.m : c.n, c.ldb, e, Access::kRead)) &&
           ranges->AddMatrix("C", c.c, c.m, c.n, c.ldc, e, Access::kReadWrite);
      blocks = static_cast<uint64_t>(c.n);
      break;
    }
    case Level3::kDgmm:
      name = "dgmm";
      if (c.m == 0 || c.n == 0) return CUBLAS_STATUS_SUCCESS;
      ok = ranges->AddMatrix("A", c.a, c.m, c.n, c.lda, e, Access::kRead) &&
           ranges->AddVector("x", c.b, c.side == CUBLAS_SIDE_LEFT ? c.m : c.n, c.ldb, e, Access::kRead) &&
           ranges->AddMatrix("C", c.c, c.m, c.n, c.ldc, e, Access::kReadWrite);
      blocks = static_cast<uint64_t>(c.n);
      break;
  }
  if (!ok) return CUBLAS_STATUS_INVALID_VALUE;
  const uint64_t bytes = static_cast<uint64_t>(c.m > 0 ? c.m : c.n) * static_cast<uint64_t>(c.n) * e;
  return EnqueueBlasOp(
      target, name, std::move(ranges), blocks, bytes, [c, alpha, beta](uint64_t first, uint64_t end) {
        const T* a = static_cast<const T*>(c.a);
        T* b = static_cast<T*>(c.b);
        T* out = static_cast<T*>(c.c);
        switch (c.routine) {
          case Level3::kTrsm:
            if (alpha.As<T>() == T{0}) {
              // B = 0 without reading A or B (BLAS), whatever OpenBLAS would look at.
              for (int64_t j = 0; j < c.n; ++j) std::fill_n(b + j * c.ldb, c.m, T{0});
              return;
            }
            cblas::trsm(ToCblas(c.side), ToCblas(c.uplo), ToCblas(c.transa), ToCblas(c.diag), c.m, c.n,
                        alpha.As<T>(), a, c.lda, b, c.ldb);
            return;
          case Level3::kSyrk:
            cblas::syrk(ToCblas(c.uplo), ToCblas(c.transa), c.n, c.k, alpha.As<T>(), a, c.lda, beta.As<T>(),
                        out, c.ldc);
            return;
          case Level3::kGeam: {
            // Neither operand is read when its scalar is 0 (cuBLAS: it may then be any pointer).
            const T av = alpha.As<T>(), bv = beta.As<T>();
            const bool a_transposed = Transposed(c.transa), b_transposed = Transposed(c.transb);
            for (auto j = static_cast<int64_t>(first); j < static_cast<int64_t>(end); ++j) {
              for (int64_t i = 0; i < c.m; ++i) {
                const T from_a =
                    av == T{0} ? T{0} : av * (a_transposed ? a[i * c.lda + j] : a[j * c.lda + i]);
                const T from_b =
                    bv == T{0} ? T{0} : bv * (b_transposed ? b[i * c.ldb + j] : b[j * c.ldb + i]);
                out[j * c.ldc + i] = from_a + from_b;
              }
            }
            return;
          }
          case Level3::kDgmm: {
            const bool left = c.side == CUBLAS_SIDE_LEFT;
            const int64_t count = left ? c.m : c.n;
            for (auto j = static_cast<int64_t>(first); j < static_cast<int64_t>(end); ++j) {
              for (int64_t i = 0; i < c.m; ++i) {
                out[j * c.ldc + i] = a[j * c.lda + i] * VectorAt(b, count, c.ldb, left ? i : j);
              }
            }
            return;
          }
        }
      });
}

}  // namespace

cublasStatus_t EnqueueLevel3(const BlasTarget& target, const Level3Call& call) {
  switch (EnumValue(call.type)) {
    case CUDA_R_32F:
      return Enqueue<float>(target, call);
    case CUDA_R_64F:
      return Enqueue<double>(target, call);
    default:
      return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

}  // namespace phos::sim::blas
