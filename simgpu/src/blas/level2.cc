// cuBLAS Level 2 in S and D: gemv (split across the compute workers by elements of y), ger, symv,
// trsv and trmv (one block each: a triangular solve is sequential).
#include <algorithm>

#include "blas/blas_internal.h"
#include "blas/cblas_typed.h"
#include "blas/scalar.h"

namespace phos::sim::blas {
namespace {

cublasStatus_t CheckArguments(const Level2Call& c) {
  const bool general = c.routine == Level2::kGemv || c.routine == Level2::kGer;
  const bool triangular = c.routine == Level2::kTrsv || c.routine == Level2::kTrmv;
  const int rows = general ? c.m : c.n;
  if (rows < 0 || c.n < 0 || c.lda < std::max(1, rows) || c.incx == 0 || (!triangular && c.incy == 0)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if ((c.routine == Level2::kGemv || triangular) && !ValidOperation(c.trans))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (!general && !ValidFill(c.uplo)) return CUBLAS_STATUS_INVALID_VALUE;
  if (triangular && !ValidDiag(c.diag)) return CUBLAS_STATUS_INVALID_VALUE;
  return CUBLAS_STATUS_SUCCESS;
}

// y = alpha op(A) x + beta y, blocks being elements of y: rows of A, or its columns when transposed.
template <typename T>
cublasStatus_t Gemv(const BlasTarget& target, const Level2Call& c, std::shared_ptr<OperandRanges> ranges,
                    const ScalarArg& alpha, const ScalarArg& beta) {
  const bool transposed = Transposed(c.trans);
  const int64_t x_count = transposed ? c.m : c.n;
  const int64_t y_count = transposed ? c.n : c.m;
  const bool alpha_zero = alpha.KnownEqual(T{0});
  if (alpha_zero && beta.KnownEqual(T{1})) return CUBLAS_STATUS_SUCCESS;
  bool ok = ranges->AddVector("y", c.y, y_count, c.incy, sizeof(T), Access::kReadWrite);
  if (!alpha_zero) {
    ok = ok && ranges->AddMatrix("A", c.a, c.m, c.n, c.lda, sizeof(T), Access::kRead) &&
         ranges->AddVector("x", c.x, x_count, c.incx, sizeof(T), Access::kRead);
  }
  if (!ok) return CUBLAS_STATUS_INVALID_VALUE;
  return EnqueueBlasOp(
      target, "gemv", std::move(ranges), static_cast<uint64_t>(y_count), y_count * sizeof(T),
      [c, transposed, y_count, alpha, beta](uint64_t first, uint64_t end) {
        const auto lo = static_cast<int64_t>(first);
        const int part = static_cast<int>(static_cast<int64_t>(end) - lo);
        const T a_value = alpha.As<T>(), b_value = beta.As<T>();
        const T* a = static_cast<const T*>(c.a);
        T* y = SubVector(static_cast<T*>(c.y), y_count, c.incy, lo, static_cast<int64_t>(end));
        if (a_value == T{0}) {
          // y = beta * y without reading A or x; beta == 0 overwrites NaNs.
          const int64_t step = c.incy < 0 ? -c.incy : c.incy;
          for (int64_t i = 0; i < part; ++i) y[i * step] = b_value == T{0} ? T{0} : b_value * y[i * step];
          return;
        }
        const T* x = static_cast<const T*>(c.x);
        if (transposed) {
          cblas::gemv(CblasTrans, c.m, part, a_value, a + lo * c.lda, c.lda, x, c.incx, b_value, y, c.incy);
        } else {
          cblas::gemv(CblasNoTrans, part, c.n, a_value, a + lo, c.lda, x, c.incx, b_value, y, c.incy);
        }
      });
}

template <typename T>
cublasStatus_t Enqueue(const BlasTarget& target, const Level2Call& c) {
  if (cublasStatus_t s = CheckArguments(c); s != CUBLAS_STATUS_SUCCESS) return s;
  const bool general = c.routine == Level2::kGemv || c.routine == Level2::kGer;
  auto ranges = std::make_shared<OperandRanges>();
  ScalarArg alpha, beta;
  const bool has_alpha =
      c.routine == Level2::kGemv || c.routine == Level2::kGer || c.routine == Level2::kSymv;
  const bool has_beta = c.routine == Level2::kGemv || c.routine == Level2::kSymv;
  if ((has_alpha && !alpha.Take(target.pointer_mode, c.alpha, sizeof(T), "alpha", ranges.get())) ||
      (has_beta && !beta.Take(target.pointer_mode, c.beta, sizeof(T), "beta", ranges.get()))) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if ((general ? c.m : c.n) == 0 || c.n == 0) return CUBLAS_STATUS_SUCCESS;
  if (c.routine == Level2::kGemv) return Gemv<T>(target, c, std::move(ranges), alpha, beta);
  const int n = c.n;
  bool ok = true;
  switch (c.routine) {
    case Level2::kGer:
      if (alpha.KnownEqual(T{0})) return CUBLAS_STATUS_SUCCESS;
      ok = ranges->AddVector("x", c.x, c.m, c.incx, sizeof(T), Access::kRead) &&
           ranges->AddVector("y", c.y, n, c.incy, sizeof(T), Access::kRead) &&
           ranges->AddMatrix("A", c.a, c.m, n, c.lda, sizeof(T), Access::kReadWrite);
      break;
    case Level2::kSymv:
      if (alpha.KnownEqual(T{0}) && beta.KnownEqual(T{1})) return CUBLAS_STATUS_SUCCESS;
      ok = ranges->AddMatrix("A", c.a, n, n, c.lda, sizeof(T), Access::kRead) &&
           ranges->AddVector("x", c.x, n, c.incx, sizeof(T), Access::kRead) &&
           ranges->AddVector("y", c.y, n, c.incy, sizeof(T), Access::kReadWrite);
      break;
    default:  // trsv, trmv
      ok = ranges->AddMatrix("A", c.a, n, n, c.lda, sizeof(T), Access::kRead) &&
           ranges->AddVector("x", c.x, n, c.incx, sizeof(T), Access::kReadWrite);
      break;
  }
  if (!ok) return CUBLAS_STATUS_INVALID_VALUE;
  const char* name = c.routine == Level2::kGer    ? "ger"
                     : c.routine == Level2::kSymv ? "symv"
                     : c.routine == Level2::kTrsv ? "trsv"
                                                  : "trmv";
  const uint64_t bytes = static_cast<uint64_t>(c.routine == Level2::kGer ? c.m : n) * n * sizeof(T);
  return EnqueueBlasOp(target, name, std::move(ranges), 1, bytes, [c, alpha, beta](uint64_t, uint64_t) {
    T* a = static_cast<T*>(c.a);
    T* x = static_cast<T*>(c.x);
    T* y = static_cast<T*>(c.y);
    switch (c.routine) {
      case Level2::kGer:
        cblas::ger(c.m, c.n, alpha.As<T>(), x, c.incx, y, c.incy, a, c.lda);
        break;
      case Level2::kSymv:
        cblas::symv(ToCblas(c.uplo), c.n, alpha.As<T>(), a, c.lda, x, c.incx, beta.As<T>(), y, c.incy);
        break;
      case Level2::kTrsv:
        cblas::trsv(ToCblas(c.uplo), ToCblas(c.trans), ToCblas(c.diag), c.n, a, c.lda, x, c.incx);
        break;
      case Level2::kTrmv:
        cblas::trmv(ToCblas(c.uplo), ToCblas(c.trans), ToCblas(c.diag), c.n, a, c.lda, x, c.incx);
        break;
      case Level2::kGemv:
        break;
    }
  });
}

}  // namespace

cublasStatus_t EnqueueLevel2(const BlasTarget& target, const Level2Call& call) {
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
