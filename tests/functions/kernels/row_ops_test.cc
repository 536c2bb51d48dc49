// The decoder kernels that work row by row or element by element (phos/fn/decoder_ops.h), each
// checked on simgpu against a double-precision reference written here, on sizes that are and
// are not multiples of the 256-thread block.
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "kernel_test_support.h"
#include "phos/fn/decoder_ops.h"

namespace phos::fn::testing {
namespace {

using RowOpsTest = DecoderKernelTest;

// (rows, row length) pairs: a single element, small odd rows, and rows spanning several blocks'
// worth of elements with more rows than one block holds for the per-row kernels.
const std::vector<std::pair<int, int>> kRowShapes = {{1, 1}, {3, 7}, {5, 257}, {2, 1000}, {300, 3}};

TEST_F(RowOpsTest, RmsNormMatchesReference) {
  unsigned seed = 1;
  for (const auto& [rows, dim] : kRowShapes) {
    const std::vector<float> x = RandomFloats(static_cast<std::size_t>(rows) * dim, seed++);
    const std::vector<float> w = RandomFloats(dim, seed++);
    const float eps = 1e-5f;
    DeviceArray<float> dx(x), dw(w), dy{std::vector<float>(x.size())};
    ASSERT_TRUE(RmsNorm(dx.get(), dw.get(), dy.get(), rows, dim, eps, DefaultStream()).ok());
    std::vector<double> expected(x.size());
    for (int r = 0; r < rows; ++r) {
      double mean_square = 0;
      for (int j = 0; j < dim; ++j) mean_square += double(x[r * dim + j]) * x[r * dim + j];
      mean_square /= dim;
      for (int j = 0; j < dim; ++j) {
        expected[r * dim + j] = x[r * dim + j] / std::sqrt(mean_square + eps) * w[j];
      }
    }
    // The fp32 sum of dim squares is within dim * 2^-24 relative (6e-5 at dim 1000), halved by
    // the square root, plus a few roundings for the products.
    ExpectNear(dy.Read(), expected, 1e-6, 1e-4);
  }
}

TEST_F(RowOpsTest, RmsNormInPlace) {
  const std::vector<float> x = {3.0f, 4.0f};
  DeviceArray<float> dx(x), dw{std::vector<float>{1.0f, 2.0f}};
  ASSERT_TRUE(RmsNorm(dx.get(), dw.get(), dx.get(), 1, 2, 0.0f, DefaultStream()).ok());
  // rms of (3, 4) is sqrt(12.5).
  ExpectNear(dx.Read(), {3 / std::sqrt(12.5), 8 / std::sqrt(12.5)}, 1e-6, 1e-6);
}

std::vector<double> ReferenceSoftmax(const std::vector<float>& x, int rows, int cols) {
  std::vector<double> out(x.size());
  for (int r = 0; r < rows; ++r) {
    double row_max = -std::numeric_limits<double>::infinity();
    for (int j = 0; j < cols; ++j) row_max = std::max(row_max, double(x[r * cols + j]));
    double sum = 0;
    for (int j = 0; j < cols; ++j) sum += std::exp(x[r * cols + j] - row_max);
    for (int j = 0; j < cols; ++j) out[r * cols + j] = std::exp(x[r * cols + j] - row_max) / sum;
  }
  return out;
}

TEST_F(RowOpsTest, SoftmaxMatchesReference) {
  unsigned seed = 10;
  for (const auto& [rows, cols] : kRowShapes) {
    const std::vector<float> x = RandomFloats(static_cast<std::size_t>(rows) * cols, seed++, -8, 8);
    DeviceArray<float> dx(x);
    ASSERT_TRUE(SoftmaxRows(dx.get(), rows, cols, DefaultStream()).ok());
    // expf is within 1 ulp and the fp32 sum of cols terms within cols * 2^-24 relative.
    ExpectNear(dx.Read(), ReferenceSoftmax(x, rows, cols), 1e-7, 1e-4);
  }
}

TEST_F(RowOpsTest, SoftmaxOfLargeValuesDoesNotOverflow) {
  // exp(1e4) overflows fp32: only subtracting the row's max keeps these finite.
  const std::vector<float> x = {1e4f, 1e4f - 1.0f, -1e4f, 3e38f, 3e38f, 0.0f};
  DeviceArray<float> dx(x);
  ASSERT_TRUE(SoftmaxRows(dx.get(), 2, 3, DefaultStream()).ok());
  const double e = std::exp(-1.0);
  ExpectNear(dx.Read(), {1 / (1 + e), e / (1 + e), 0, 0.5, 0.5, 0}, 1e-6, 1e-5);
}

TEST_F(RowOpsTest, SiluMulMatchesReference) {
  unsigned seed = 20;
  for (const int n : {1, 255, 1000, 4097}) {
    std::vector<float> gate = RandomFloats(n, seed++, -10, 10);
    gate[0] = -100.0f;  // exp(100) is +inf in fp32: silu must still be -0, not NaN
    const std::vector<float> up = RandomFloats(n, seed++);
    DeviceArray<float> dg(gate), du(up), dout{std::vector<float>(n)};
    ASSERT_TRUE(SiluMul(dg.get(), du.get(), dout.get(), n, DefaultStream()).ok());
    std::vector<double> expected(n);
    for (int i = 0; i < n; ++i) expected[i] = gate[i] / (1 + std::exp(-double(gate[i]))) * up[i];
    // expf within 1 ulp, then an add, a divide and a multiply, each rounded once.
    ExpectNear(dout.Read(), expected, 1e-7, 1e-5);
  }
}

TEST_F(RowOpsTest, ResidualAddIsExactAndMayWriteInPlace) {
  for (const int n : {1, 256, 1001}) {
    const std::vector<float> a = RandomFloats(n, 30 + n);
    const std::vector<float> b = RandomFloats(n, 40 + n);
    DeviceArray<float> da(a), db(b);
    ASSERT_TRUE(ResidualAdd(da.get(), db.get(), da.get(), n, DefaultStream()).ok());
    const std::vector<float> sum = da.Read();
    // One correctly rounded fp32 add, so the host's fp32 add gives the same bits.
    for (int i = 0; i < n; ++i) ASSERT_EQ(sum[i], a[i] + b[i]) << "element " << i;
  }
}

TEST_F(RowOpsTest, EmbeddingGatherCopiesRowsAndFlagsOutOfRangeIds) {
  const int vocab = 10;
  const int dim = 37;
  const std::vector<float> table = RandomFloats(vocab * dim, 50);
  const std::vector<int> ids = {3, 0, 9, -1, 10, std::numeric_limits<int>::max(), 5};
  const int n_tokens = static_cast<int>(ids.size());
  DeviceArray<float> dtable(table), dout{std::vector<float>(n_tokens * dim, 7.0f)};
  DeviceArray<int> dids(ids), dinvalid{std::vector<int>{0}};
  ASSERT_TRUE(EmbeddingGather(dtable.get(), dids.get(), dout.get(), n_tokens, vocab, dim, dinvalid.get(),
                              DefaultStream())
                  .ok());
  const std::vector<float> out = dout.Read();
  for (int t = 0; t < n_tokens; ++t) {
    const bool valid = ids[t] >= 0 && ids[t] < vocab;
    for (int j = 0; j < dim; ++j) {
      ASSERT_EQ(out[t * dim + j], valid ? table[ids[t] * dim + j] : 0.0f) << "token " << t;
    }
  }
  EXPECT_EQ(dinvalid.Read()[0], 3);
  // Without a counter the bad rows are still zeros.
  ASSERT_TRUE(
      EmbeddingGather(dtable.get(), dids.get(), dout.get(), n_tokens, vocab, dim, nullptr, DefaultStream())
          .ok());
  EXPECT_EQ(dout.Read()[3 * dim], 0.0f);
}

TEST_F(RowOpsTest, ArgmaxTakesTheLowestIndexOnTies) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> x = {1,   5,      5,   2,        // tie: the first 5
                                4,   4,      4,   4,        // all equal: index 0
                                0,   1,      2,   9,        // the last one
                                nan, -1e30f, nan, -2e30f};  // NaN loses to any number
  DeviceArray<float> dx(x);
  DeviceArray<int> dout{std::vector<int>(4, -1)};
  ASSERT_TRUE(ArgmaxRows(dx.get(), 4, 4, dout.get(), DefaultStream()).ok());
  EXPECT_EQ(dout.Read(), (std::vector<int>{1, 0, 3, 1}));
}

TEST_F(RowOpsTest, ArgmaxMatchesReference) {
  unsigned seed = 60;
  for (const auto& [rows, cols] : kRowShapes) {
    const std::vector<float> x = RandomFloats(static_cast<std::size_t>(rows) * cols, seed++);
    DeviceArray<float> dx(x);
    DeviceArray<int> dout{std::vector<int>(rows, -1)};
    ASSERT_TRUE(ArgmaxRows(dx.get(), rows, cols, dout.get(), DefaultStream()).ok());
    const std::vector<int> out = dout.Read();
    for (int r = 0; r < rows; ++r) {
      int best = 0;
      for (int j = 0; j < cols; ++j) best = x[r * cols + j] > x[r * cols + best] ? j : best;
      ASSERT_EQ(out[r], best) << "row " << r;
    }
  }
}

}  // namespace
}  // namespace phos::fn::testing
