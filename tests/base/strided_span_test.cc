// MatrixSpan and VectorSpan against every element's address enumerated one by one, and on sizes
// whose arithmetic overflows.
#include "phos/base/strided_span.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <tuple>

namespace phos {
namespace {

// The lowest byte and one past the highest that entry e's element (i, j) occupies, over all of them.
StridedSpan Enumerated(uint64_t base, int64_t rows, int64_t cols, int64_t ld, uint64_t size, int64_t batch,
                       int64_t stride) {
  uint64_t lo = UINT64_MAX, hi = 0;
  for (int64_t e = 0; e < batch; ++e) {
    for (int64_t j = 0; j < cols; ++j) {
      for (int64_t i = 0; i < rows; ++i) {
        const uint64_t at = base + static_cast<uint64_t>((e * stride + j * ld + i) * static_cast<int64_t>(size));
        lo = std::min(lo, at);
        hi = std::max(hi, at + size);
      }
    }
  }
  return {lo, hi - lo};
}

TEST(StridedSpanTest, SpansFromTheLowestElementToTheHighestOfAnyLayout) {
  const uint64_t base = 1 << 20;
  for (int64_t rows : {1, 3})
    for (int64_t cols : {1, 4})
      for (int64_t ld : {rows, rows + 2})
        for (int64_t batch : {1, 2, 5})
          for (int64_t stride : {-40, -7, 0, 1, 12, 100})
            for (uint64_t size : {2u, 8u}) {
              const std::optional<StridedSpan> got = MatrixSpan(base, rows, cols, ld, size, batch, stride);
              ASSERT_TRUE(got.has_value());
              const StridedSpan want = Enumerated(base, rows, cols, ld, size, batch, stride);
              EXPECT_EQ(got->ptr, want.ptr) << rows << "x" << cols << " ld " << ld << " batch " << batch
                                            << " stride " << stride;
              EXPECT_EQ(got->bytes, want.bytes) << rows << "x" << cols << " ld " << ld << " batch " << batch
                                                << " stride " << stride;
            }
}

TEST(StridedSpanTest, AVectorIsStoredUpFromItsBaseWhateverItsIncrementsSign) {
  for (int64_t inc : {-3, -1, 1, 3}) {
    const std::optional<StridedSpan> got = VectorSpan(4096, 4, inc, 4);
    ASSERT_TRUE(got.has_value());
    EXPECT_EQ(got->ptr, 4096u);
    EXPECT_EQ(got->bytes, (1 + 3 * static_cast<uint64_t>(inc < 0 ? -inc : inc)) * 4) << inc;
  }
  EXPECT_EQ(VectorSpan(4096, 4, 0, 4)->bytes, 4u);  // one element, read 4 times
}

TEST(StridedSpanTest, NothingIsSpannedByAnEmptyOperand) {
  for (auto [rows, cols, batch] : {std::tuple{0, 4, 1}, std::tuple{4, 0, 1}, std::tuple{4, 4, 0}, std::tuple{-1, 4, 1}}) {
    const std::optional<StridedSpan> got = MatrixSpan(4096, rows, cols, 4, 4, batch, 16);
    ASSERT_TRUE(got.has_value());
    EXPECT_EQ(got->ptr, 4096u);
    EXPECT_EQ(got->bytes, 0u);
  }
}

TEST(StridedSpanTest, SpansThatCannotBeMemoryAreNone) {
  EXPECT_FALSE(MatrixSpan(4096, 2, INT64_MAX, INT64_MAX, 4));              // (cols - 1) * ld
  EXPECT_FALSE(MatrixSpan(4096, 16, 16, 16, 4, 3, INT64_MAX));             // (batch - 1) * stride
  EXPECT_FALSE(MatrixSpan(4096, 16, 16, 16, 4, 3, INT64_MAX / 2));         // ... in bytes
  EXPECT_FALSE(MatrixSpan(4096, 16, 16, 16, 4, 2, INT64_MIN));             // |gap| itself
  EXPECT_FALSE(MatrixSpan(4096, 1, 1, 1, 4, 2, -2048));                    // below address 0
  EXPECT_FALSE(MatrixSpan(UINT64_MAX - 8, 4, 1, 4, 4));                    // past 2^64
  EXPECT_FALSE(MatrixSpan(4096, 2, 2, -1, 4));                             // a negative ld
  EXPECT_FALSE(VectorSpan(4096, 3, INT64_MIN, 4));
  EXPECT_FALSE(VectorSpan(4096, INT64_MAX, 2, 8));
  // At the edge: up to the last address.
  const std::optional<StridedSpan> top = MatrixSpan(UINT64_MAX - 16, 4, 1, 4, 4);
  ASSERT_TRUE(top.has_value());
  EXPECT_EQ(top->bytes, 16u);
}

}  // namespace
}  // namespace phos
