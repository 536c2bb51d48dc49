// The mixture-of-experts top-k router and the weighted scatter-add that combines the experts'
// outputs, on simgpu against references written here, and the launcher's shape checks, which
// reject bad arguments before anything is launched.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "kernel_test_support.h"
#include "phos/fn/decoder_ops.h"

namespace phos::fn::testing {
namespace {

using RouterTest = DecoderKernelTest;

struct Routed {
  std::vector<int> indices;
  std::vector<float> weights;
};

Routed Route(const std::vector<float>& logits, int rows, int n_experts, int k) {
  DeviceArray<float> dl(logits), dw{std::vector<float>(rows * k, -1.0f)};
  DeviceArray<int> di{std::vector<int>(rows * k, -1)};
  EXPECT_TRUE(TopKRouter(dl.get(), rows, n_experts, k, di.get(), dw.get(), DefaultStream()).ok());
  return {di.Read(), dw.Read()};
}

// Per row: experts sorted by logit descending (stable, so ties keep the lower index first), the
// first k, and the softmax of their logits.
void ExpectMatchesReference(const std::vector<float>& logits, int rows, int n_experts, int k,
                            const Routed& routed) {
  for (int r = 0; r < rows; ++r) {
    std::vector<int> order(n_experts);
    std::iota(order.begin(), order.end(), 0);
    const float* row = &logits[r * n_experts];
    std::stable_sort(order.begin(), order.end(), [row](int a, int b) { return row[a] > row[b]; });
    double sum = 0;
    for (int j = 0; j < k; ++j) sum += std::exp(double(row[order[j]]) - row[order[0]]);
    for (int j = 0; j < k; ++j) {
      ASSERT_EQ(routed.indices[r * k + j], order[j]) << "row " << r << " pick " << j;
      // expf within 1 ulp, a k-term fp32 sum and one divide.
      const double weight = std::exp(double(row[order[j]]) - row[order[0]]) / sum;
      ASSERT_NEAR(routed.weights[r * k + j], weight, 1e-6 + 1e-5 * weight) << "row " << r;
    }
  }
}

TEST_F(RouterTest, TopKMatchesReference) {
  unsigned seed = 300;
  // (rows, experts, k): Mixtral's 8 choose 2, odd sizes, more rows than one block.
  for (const auto& [rows, n_experts, k] :
       std::vector<std::tuple<int, int, int>>{{1, 8, 2}, {3, 7, 3}, {300, 8, 2}, {2, 64, 6}}) {
    const std::vector<float> logits = RandomFloats(std::size_t(rows) * n_experts, seed++, -5, 5);
    ExpectMatchesReference(logits, rows, n_experts, k, Route(logits, rows, n_experts, k));
  }
}

TEST_F(RouterTest, KEqualToTheRowLengthSortsTheWholeRow) {
  const std::vector<float> logits = {0.5f, -1.0f, 3.0f, 2.0f, 0.0f};
  const Routed routed = Route(logits, 1, 5, 5);
  EXPECT_EQ(routed.indices, (std::vector<int>{2, 3, 0, 4, 1}));
  ExpectMatchesReference(logits, 1, 5, 5, routed);
  EXPECT_NEAR(std::accumulate(routed.weights.begin(), routed.weights.end(), 0.0), 1.0, 1e-6);
}

TEST_F(RouterTest, TiesGoToTheLowerIndexAndEachExpertOnce) {
  const std::vector<float> logits = {1, 3, 3, 0,   // the two 3s, lower first
                                     2, 2, 2, 2};  // equal: 0 then 1, equal weights
  const Routed routed = Route(logits, 2, 4, 2);
  EXPECT_EQ(routed.indices, (std::vector<int>{1, 2, 0, 1}));
  EXPECT_EQ(routed.weights, (std::vector<float>{0.5f, 0.5f, 0.5f, 0.5f}));
}

TEST_F(RouterTest, LargeAndInfiniteLogitsGiveFiniteWeights) {
  const float inf = INFINITY;
  const std::vector<float> logits = {1e30f, 1e30f, -1e30f,  // exp(1e30) overflows: subtract the max
                                     -inf,  -inf,  -inf};   // nothing to prefer: equal weights
  const Routed routed = Route(logits, 2, 3, 2);
  EXPECT_EQ(routed.indices, (std::vector<int>{0, 1, 0, 1}));
  EXPECT_EQ(routed.weights, (std::vector<float>{0.5f, 0.5f, 0.5f, 0.5f}));
}

TEST_F(RouterTest, ScatterAddRowsAddsEachWeightedRowToItsTarget) {
  // 5 expert outputs of width 37 (more elements than one block) into 9 rows already holding
  // values, in an order that is not the targets' order; row 9 is past the end and skipped.
  const int n = 6, dim = 37, out_rows = 9;
  const std::vector<int> rows = {7, 0, 3, 8, 4, 9};
  const std::vector<float> weights = {0.25f, 0.75f, 1.0f, 0.5f, 0.125f, 2.0f};
  const std::vector<float> y = RandomFloats(std::size_t(n) * dim, 41);
  const std::vector<float> before = RandomFloats(std::size_t(out_rows) * dim, 42);
  DeviceArray<float> dy(y), dw(weights), dout(before);
  DeviceArray<int> dr(rows);
  ASSERT_TRUE(
      ScatterAddRows(dy.get(), dr.get(), dw.get(), dout.get(), n, dim, out_rows, DefaultStream()).ok());
  std::vector<double> expected(before.begin(), before.end());
  for (int i = 0; i < n; ++i) {
    if (rows[i] >= out_rows) continue;
    for (int d = 0; d < dim; ++d) expected[rows[i] * dim + d] += double(weights[i]) * y[i * dim + d];
  }
  // One fp32 multiply and add per element, of values below 4 in magnitude.
  ExpectNear(dout.Read(), expected, 1e-6, 1e-6);
}

// Bad shapes are InvalidArgument without a launch; the pointers need not be valid device memory
// because nothing reaches the device.
TEST_F(RouterTest, LauncherRejectsBadShapes) {
  float* f = reinterpret_cast<float*>(0x1000);
  int* i = reinterpret_cast<int*>(0x2000);
  const cudaStream_t s = DefaultStream();
  EXPECT_EQ(TopKRouter(f, 1, 4, 5, i, f, s).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(TopKRouter(f, 1, 4, 0, i, f, s).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(RmsNorm(f, f, f, 0, 4, 1e-5f, s).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(RmsNorm(nullptr, f, f, 1, 4, 1e-5f, s).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(SoftmaxRows(f, 1, -3, s).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(RotaryEmbedding(f, f, 1, 2, 2, 7, 0, 10000.0f, s).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(RotaryEmbedding(f, f, 1, 2, 2, 8, -1, 10000.0f, s).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(EmbeddingGather(f, i, f, 1, 0, 4, nullptr, s).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ArgmaxRows(f, 1, 4, nullptr, s).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ScatterAddRows(f, i, f, f, 0, 4, 2, s).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ScatterAddRows(f, nullptr, f, f, 1, 4, 2, s).code(), StatusCode::kInvalidArgument);
  // A negative element count.
  EXPECT_EQ(SiluMul(f, f, f, -1, s).code(), StatusCode::kInvalidArgument);

  AttentionShape shape;
  shape.n_tokens = 2;
  shape.n_heads = 6;
  shape.n_kv_heads = 4;  // 6 query heads cannot share 4 kv heads evenly
  shape.head_dim = 8;
  shape.start_pos = 0;
  shape.max_seq = 16;
  EXPECT_EQ(CausalAttention(f, f, f, f, f, f, shape, s).code(), StatusCode::kInvalidArgument);
  shape.n_kv_heads = 2;
  shape.start_pos = 15;  // positions 15 and 16 in a cache of 16
  const Status past_end = CausalAttention(f, f, f, f, f, f, shape, s);
  EXPECT_EQ(past_end.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(past_end.message().find("cache of 16"), std::string::npos) << past_end.message();
}

}  // namespace
}  // namespace phos::fn::testing
