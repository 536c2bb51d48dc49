#include "phos/base/strided_span.h"

#include <algorithm>

namespace phos {

std::optional<StridedSpan> MatrixSpan(uint64_t base, int64_t rows, int64_t cols, int64_t ld, uint64_t element_bytes,
                                      int64_t batch, int64_t stride) {
  if (rows <= 0 || cols <= 0 || batch <= 0) return StridedSpan{base, 0};
  if (ld < 0) return std::nullopt;
  // Elements: (cols - 1) * ld + rows of one matrix, plus |(batch - 1) * stride| from the first
  // entry to the last; then bytes, and the lowest byte, `gap` elements below base when negative.
  int64_t elements = 0;
  int64_t gap = 0;
  if (__builtin_mul_overflow(cols - 1, ld, &elements) || __builtin_add_overflow(elements, rows, &elements) ||
      __builtin_mul_overflow(batch - 1, stride, &gap) || gap == INT64_MIN ||
      __builtin_add_overflow(elements, gap < 0 ? -gap : gap, &elements)) {
    return std::nullopt;
  }
  uint64_t bytes = 0;
  uint64_t below = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(elements), element_bytes, &bytes) ||
      __builtin_mul_overflow(static_cast<uint64_t>(-std::min<int64_t>(gap, 0)), element_bytes, &below) ||
      below > base) {
    return std::nullopt;
  }
  const uint64_t ptr = base - below;
  uint64_t end = 0;
  if (__builtin_add_overflow(ptr, bytes, &end)) return std::nullopt;
  return StridedSpan{ptr, bytes};
}

std::optional<StridedSpan> VectorSpan(uint64_t base, int64_t n, int64_t inc, uint64_t element_bytes) {
  if (inc == INT64_MIN) return std::nullopt;
  return MatrixSpan(base, 1, n, inc < 0 ? -inc : inc, element_bytes);
}

}  // namespace phos
