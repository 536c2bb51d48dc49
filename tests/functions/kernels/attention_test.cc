// Rotary embedding and causal grouped-query attention with a KV cache (phos/fn/decoder_ops.h),
// checked on simgpu against double-precision references written here.
#include <cmath>
#include <vector>

#include "kernel_test_support.h"
#include "phos/fn/decoder_ops.h"

namespace phos::fn::testing {
namespace {

using AttentionTest = DecoderKernelTest;

// Hugging Face's rotate-half rotary embedding of one head vector at position pos.
std::vector<double> ReferenceRope(const float* v, int head_dim, long long pos, double theta) {
  const int half = head_dim / 2;
  std::vector<double> out(head_dim);
  for (int i = 0; i < half; ++i) {
    const double angle = pos * std::pow(theta, -2.0 * i / head_dim);
    // q * cos + rotate_half(q) * sin, rotate_half(q) = (-q[half:], q[:half]).
    out[i] = v[i] * std::cos(angle) - v[i + half] * std::sin(angle);
    out[i + half] = v[i + half] * std::cos(angle) + v[i] * std::sin(angle);
  }
  return out;
}

struct RopeCase {
  int n_tokens, n_heads, n_kv_heads, head_dim, start_pos;
  float theta;
};

TEST_F(AttentionTest, RotaryEmbeddingMatchesReference) {
  const std::vector<RopeCase> cases = {{1, 1, 1, 2, 0, 10000.0f},
                                       {3, 6, 2, 18, 5, 10000.0f},
                                       {5, 8, 2, 64, 1000, 500000.0f},
                                       {2, 32, 8, 128, 77, 10000.0f}};
  unsigned seed = 100;
  for (const RopeCase& c : cases) {
    const std::vector<float> q = RandomFloats(std::size_t(c.n_tokens) * c.n_heads * c.head_dim, seed++);
    const std::vector<float> k = RandomFloats(std::size_t(c.n_tokens) * c.n_kv_heads * c.head_dim, seed++);
    DeviceArray<float> dq(q), dk(k);
    ASSERT_TRUE(RotaryEmbedding(dq.get(), dk.get(), c.n_tokens, c.n_heads, c.n_kv_heads, c.head_dim,
                                c.start_pos, c.theta, DefaultStream())
                    .ok());
    std::vector<double> expected_q, expected_k;
    for (int t = 0; t < c.n_tokens; ++t) {
      for (int h = 0; h < c.n_heads; ++h) {
        const auto v =
            ReferenceRope(&q[(t * c.n_heads + h) * c.head_dim], c.head_dim, c.start_pos + t, c.theta);
        expected_q.insert(expected_q.end(), v.begin(), v.end());
      }
      for (int h = 0; h < c.n_kv_heads; ++h) {
        const auto v =
            ReferenceRope(&k[(t * c.n_kv_heads + h) * c.head_dim], c.head_dim, c.start_pos + t, c.theta);
        expected_k.insert(expected_k.end(), v.begin(), v.end());
      }
    }
    // The fp32 angle pos * theta^(-2i/d) is within ~3 ulp of pos (powf, the multiply), so
    // 3 * pos * 2^-24 radians, scaled by |a| + |b| <= 4; Hugging Face computes it in fp32 too.
    const double abs_tol = 1e-5 + 4 * 3 * (c.start_pos + c.n_tokens) * std::ldexp(1.0, -24);
    ExpectNear(dq.Read(), expected_q, abs_tol, 1e-5);
    ExpectNear(dk.Read(), expected_k, abs_tol, 1e-5);
  }
}

// Attention of query head h of one token at position pos over cache rows 0..pos, as
// softmax(q k^T / sqrt(d)) v with kv head h / group.
std::vector<double> ReferenceAttention(const float* q, const std::vector<float>& k_rows,
                                       const std::vector<float>& v_rows, int n_kv_heads, int head_dim,
                                       int kv_head, int pos) {
  std::vector<double> scores(pos + 1);
  double max_score = -INFINITY;
  for (int p = 0; p <= pos; ++p) {
    double dot = 0;
    for (int d = 0; d < head_dim; ++d)
      dot += double(q[d]) * k_rows[(p * n_kv_heads + kv_head) * head_dim + d];
    scores[p] = dot / std::sqrt(double(head_dim));
    max_score = std::max(max_score, scores[p]);
  }
  double sum = 0;
  for (double& s : scores) sum += (s = std::exp(s - max_score));
  std::vector<double> out(head_dim, 0.0);
  for (int p = 0; p <= pos; ++p) {
    for (int d = 0; d < head_dim; ++d) {
      out[d] += scores[p] / sum * v_rows[(p * n_kv_heads + kv_head) * head_dim + d];
    }
  }
  return out;
}

struct AttentionCase {
  int n_heads, n_kv_heads, head_dim;
};

// A prompt of 5 tokens in one step, then 3 decode steps of one token, for GQA ratios 1, 2 and 4:
// every step's output against the reference over all tokens so far, and the cache rows against
// the keys and values appended.
TEST_F(AttentionTest, PrefillThenDecodeMatchesReferenceForEachGqaRatio) {
  const std::vector<AttentionCase> cases = {{4, 4, 16}, {4, 2, 33}, {8, 2, 8}, {4, 1, 7}};
  const int max_seq = 11;
  const std::vector<int> steps = {5, 1, 1, 1};
  unsigned seed = 200;
  for (const AttentionCase& c : cases) {
    SCOPED_TRACE(::testing::Message() << "n_heads " << c.n_heads << " n_kv_heads " << c.n_kv_heads);
    const std::size_t kv_row = std::size_t(c.n_kv_heads) * c.head_dim;
    const std::size_t q_row = std::size_t(c.n_heads) * c.head_dim;
    // Stale values in the cache past the current position must not be read.
    DeviceArray<float> k_cache{std::vector<float>(max_seq * kv_row, 1e30f)};
    DeviceArray<float> v_cache{std::vector<float>(max_seq * kv_row, 1e30f)};
    std::vector<float> k_history, v_history;
    int start_pos = 0;
    for (const int n_tokens : steps) {
      const std::vector<float> q = RandomFloats(n_tokens * q_row, seed++, -1, 1);
      const std::vector<float> k = RandomFloats(n_tokens * kv_row, seed++, -1, 1);
      const std::vector<float> v = RandomFloats(n_tokens * kv_row, seed++, -1, 1);
      k_history.insert(k_history.end(), k.begin(), k.end());
      v_history.insert(v_history.end(), v.begin(), v.end());
      DeviceArray<float> dq(q), dk(k), dv(v), dout{std::vector<float>(n_tokens * q_row)};
      AttentionShape shape;
      shape.n_tokens = n_tokens;
      shape.n_heads = c.n_heads;
      shape.n_kv_heads = c.n_kv_heads;
      shape.head_dim = c.head_dim;
      shape.start_pos = start_pos;
      shape.max_seq = max_seq;
      ASSERT_TRUE(CausalAttention(dq.get(), dk.get(), dv.get(), k_cache.get(), v_cache.get(), dout.get(),
                                  shape, DefaultStream())
                      .ok());
      std::vector<double> expected;
      for (int t = 0; t < n_tokens; ++t) {
        for (int h = 0; h < c.n_heads; ++h) {
          const int kv_head = h / (c.n_heads / c.n_kv_heads);
          const auto o = ReferenceAttention(&q[t * q_row + h * c.head_dim], k_history, v_history,
                                            c.n_kv_heads, c.head_dim, kv_head, start_pos + t);
          expected.insert(expected.end(), o.begin(), o.end());
        }
      }
      // Inputs in [-1, 1]: the fp32 dot of head_dim terms is within ~head_dim * 2^-24 of the
      // exact one, the weights within a few ulp after expf, and the output a convex combination
      // of values of magnitude <= 1.
      ExpectNear(dout.Read(), expected, 1e-5, 1e-5);
      start_pos += n_tokens;
      const std::vector<float> k_cached = k_cache.Read();
      const std::vector<float> v_cached = v_cache.Read();
      ASSERT_EQ(std::vector<float>(k_cached.begin(), k_cached.begin() + start_pos * kv_row), k_history);
      ASSERT_EQ(std::vector<float>(v_cached.begin(), v_cached.begin() + start_pos * kv_row), v_history);
      EXPECT_EQ(k_cached[start_pos * kv_row], 1e30f) << "wrote past the step's positions";
    }
  }
}

TEST_F(AttentionTest, FirstPositionReturnsItsOwnValue) {
  // Position 0 attends only to itself: the output is v exactly, whatever the score.
  const std::vector<float> v = {0.25f, -3.0f, 7.5f};
  DeviceArray<float> dq{std::vector<float>{100, 100, 100}}, dk{std::vector<float>{1, 2, 3}}, dv(v);
  DeviceArray<float> k_cache{std::vector<float>(6)}, v_cache{std::vector<float>(6)},
      dout{std::vector<float>(3)};
  AttentionShape shape;
  shape.n_heads = 1;
  shape.n_kv_heads = 1;
  shape.head_dim = 3;
  shape.max_seq = 2;
  ASSERT_TRUE(CausalAttention(dq.get(), dk.get(), dv.get(), k_cache.get(), v_cache.get(), dout.get(), shape,
                              DefaultStream())
                  .ok());
  EXPECT_EQ(dout.Read(), v);
}

}  // namespace
}  // namespace phos::fn::testing
