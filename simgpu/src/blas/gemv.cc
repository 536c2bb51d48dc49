// cublasSgemv.
#include <algorithm>

#include "blas/blas_internal.h"
#include "blas/blas_ops.h"

namespace phos::sim::blas {
namespace {

// Elements [first, end) of a vector of `count` elements with increment inc, as a vector of their
// own: BLAS addresses a vector with inc < 0 from its lowest address, where its last element is.
float* SubVector(float* base, int64_t count, int inc, int64_t first, int64_t end) {
  return inc > 0 ? base + first * inc : base + (count - end) * static_cast<int64_t>(-inc);
}

}  // namespace

cublasStatus_t EnqueueGemv(DeviceAccess& device, const ContextRef& ctx, Stream& stream, const GemvCall& c) {
  if (!ValidOperation(c.trans) || c.m < 0 || c.n < 0 || c.lda < std::max(1, c.m) || c.incx == 0 ||
      c.incy == 0) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (c.m == 0 || c.n == 0 || (c.alpha == 0.0f && c.beta == 1.0f)) return CUBLAS_STATUS_SUCCESS;

  const bool transposed = Transposed(c.trans);
  const int64_t x_count = transposed ? c.m : c.n;
  const int64_t y_count = transposed ? c.n : c.m;
  auto ranges = std::make_shared<OperandRanges>();
  bool ok = ranges->AddVector("y", c.y, y_count, c.incy, sizeof(float), Access::kReadWrite);
  if (c.alpha != 0.0f) {
    ok = ok && ranges->AddMatrix("A", c.a, 0, c.m, c.n, c.lda, sizeof(float), Access::kRead) &&
         ranges->AddVector("x", c.x, x_count, c.incx, sizeof(float), Access::kRead);
  }
  if (!ok) return CUBLAS_STATUS_INVALID_VALUE;

  // Blocks are elements of y: rows of A, or its columns when transposed.
  const uint64_t blocks = static_cast<uint64_t>(y_count);
  return EnqueueBlasOp(device, ctx, stream, "gemv", std::move(ranges), blocks, y_count * sizeof(float),
                       [c, transposed, y_count](uint64_t first, uint64_t end) {
                         const auto lo = static_cast<int64_t>(first);
                         const auto hi = static_cast<int64_t>(end);
                         const int part = static_cast<int>(hi - lo);
                         float* y = SubVector(c.y, y_count, c.incy, lo, hi);
                         if (c.alpha == 0.0f) {
                           // y = beta * y without reading A or x; beta == 0 overwrites NaNs.
                           const int64_t step = c.incy < 0 ? -c.incy : c.incy;
                           for (int64_t i = 0; i < part; ++i)
                             y[i * step] = c.beta == 0.0f ? 0.0f : c.beta * y[i * step];
                           return;
                         }
                         if (transposed) {
                           cblas_sgemv(CblasColMajor, CblasTrans, c.m, part, c.alpha, c.a + lo * c.lda, c.lda,
                                       c.x, c.incx, c.beta, y, c.incy);
                         } else {
                           cblas_sgemv(CblasColMajor, CblasNoTrans, part, c.n, c.alpha, c.a + lo, c.lda, c.x,
                                       c.incx, c.beta, y, c.incy);
                         }
                       });
}

}  // namespace phos::sim::blas
