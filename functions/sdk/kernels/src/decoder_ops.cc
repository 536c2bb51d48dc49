// Shape checks and launch shapes for the decoder kernels (phos/fn/decoder_ops.h).
#include "phos/fn/decoder_ops.h"

#include <climits>
#include <string>
#include <tuple>
#include <utility>

#include "phos/fn/decoder_kernels.cuh"

namespace phos::fn {
namespace {

// Threads per block: a multiple of the warp size that every device accepts. The kernels give each
// thread independent work, so the block size changes only occupancy, never results.
constexpr long long kBlockThreads = 256;

Status CheckPositive(long long value, const char* op, const char* name) {
  if (value > 0) return Status::Ok();
  return Status::InvalidArgument(std::string(op) + ": " + name + " must be positive, got " +
                                 std::to_string(value));
}

Status CheckNotNull(const void* p, const char* op, const char* name) {
  if (p != nullptr) return Status::Ok();
  return Status::InvalidArgument(std::string(op) + ": " + name + " is null");
}

// a * b, or InvalidArgument if it does not fit the kernels' 64-bit element counts.
Status CheckedProduct(long long a, long long b, const char* op, long long* product) {
  if (a > LLONG_MAX / b) return Status::InvalidArgument(std::string(op) + ": tensor too large");
  *product = a * b;
  return Status::Ok();
}

// Launches `kernel` with one thread per unit of `threads` work on `stream`.
template <typename... Params, typename... Args>
Status Launch(void (*kernel)(Params...), long long threads, const char* op, cudaStream_t stream,
              Args... args) {
  const long long blocks = (threads + kBlockThreads - 1) / kBlockThreads;
  if (blocks > INT_MAX) return Status::InvalidArgument(std::string(op) + ": tensor too large");
  // The parameters converted to the kernel's exact types, so each pointer in `slots` addresses
  // an object of the size the kernel reads.
  std::tuple<Params...> values(args...);
  void* slots[sizeof...(Params)];
  std::apply(
      [&slots](auto&... v) {
        int i = 0;
        ((slots[i++] = &v), ...);
      },
      values);
  const cudaError_t e =
      cudaLaunchKernel(reinterpret_cast<const void*>(kernel), dim3(static_cast<unsigned>(blocks)),
                       dim3(static_cast<unsigned>(kBlockThreads)), slots, 0, stream);
  if (e == cudaSuccess) return Status::Ok();
  return Status::DeviceError(std::string(op) + ": launch: " + cudaGetErrorName(e));
}

}  // namespace

using kernels::argmax_rows;
using kernels::causal_attention;
using kernels::embedding_gather;
using kernels::kv_cache_append;
using kernels::residual_add;
using kernels::rms_norm;
using kernels::rotary_embedding;
using kernels::scatter_add_rows;
using kernels::silu_mul;
using kernels::softmax_rows;
using kernels::topk_router;

Status RmsNorm(const float* x, const float* weight, float* y, int rows, int dim, float eps,
               cudaStream_t stream) {
  constexpr const char* kOp = "RmsNorm";
  PHOS_RETURN_IF_ERROR(CheckPositive(rows, kOp, "rows"));
  PHOS_RETURN_IF_ERROR(CheckPositive(dim, kOp, "dim"));
  if (!(eps >= 0.0f)) return Status::InvalidArgument("RmsNorm: eps must be >= 0");
  PHOS_RETURN_IF_ERROR(CheckNotNull(x, kOp, "x"));
  PHOS_RETURN_IF_ERROR(CheckNotNull(weight, kOp, "weight"));
  PHOS_RETURN_IF_ERROR(CheckNotNull(y, kOp, "y"));
  long long elements = 0;
  PHOS_RETURN_IF_ERROR(CheckedProduct(rows, dim, kOp, &elements));
  return Launch(&rms_norm, rows, kOp, stream, x, weight, y, rows, dim, eps);
}

Status RotaryEmbedding(float* q, float* k, int n_tokens, int n_heads, int n_kv_heads, int head_dim,
                       int start_pos, float theta, cudaStream_t stream) {
  constexpr const char* kOp = "RotaryEmbedding";
  PHOS_RETURN_IF_ERROR(CheckPositive(n_tokens, kOp, "n_tokens"));
  PHOS_RETURN_IF_ERROR(CheckPositive(n_heads, kOp, "n_heads"));
  PHOS_RETURN_IF_ERROR(CheckPositive(n_kv_heads, kOp, "n_kv_heads"));
  PHOS_RETURN_IF_ERROR(CheckPositive(head_dim, kOp, "head_dim"));
  if (!(theta > 0.0f)) return Status::InvalidArgument("RotaryEmbedding: theta must be positive");
  if (head_dim % 2 != 0) return Status::InvalidArgument("RotaryEmbedding: head_dim must be even");
  if (start_pos < 0 || start_pos > INT_MAX - n_tokens) {
    return Status::InvalidArgument("RotaryEmbedding: positions out of range");
  }
  PHOS_RETURN_IF_ERROR(CheckNotNull(q, kOp, "q"));
  PHOS_RETURN_IF_ERROR(CheckNotNull(k, kOp, "k"));
  long long pairs = 0;
  PHOS_RETURN_IF_ERROR(CheckedProduct(n_tokens, static_cast<long long>(n_heads) + n_kv_heads, kOp, &pairs));
  PHOS_RETURN_IF_ERROR(CheckedProduct(pairs, head_dim / 2, kOp, &pairs));
  return Launch(&rotary_embedding, pairs, kOp, stream, q, k, n_tokens, n_heads, n_kv_heads, head_dim,
                start_pos, theta);
}

Status SoftmaxRows(float* x, int rows, int cols, cudaStream_t stream) {
  constexpr const char* kOp = "SoftmaxRows";
  PHOS_RETURN_IF_ERROR(CheckPositive(rows, kOp, "rows"));
  PHOS_RETURN_IF_ERROR(CheckPositive(cols, kOp, "cols"));
  PHOS_RETURN_IF_ERROR(CheckNotNull(x, kOp, "x"));
  return Launch(&softmax_rows, rows, kOp, stream, x, rows, cols);
}

Status SiluMul(const float* gate, const float* up, float* out, long long n, cudaStream_t stream) {
  constexpr const char* kOp = "SiluMul";
  PHOS_RETURN_IF_ERROR(CheckPositive(n, kOp, "n"));
  PHOS_RETURN_IF_ERROR(CheckNotNull(gate, kOp, "gate"));
  PHOS_RETURN_IF_ERROR(CheckNotNull(up, kOp, "up"));
  PHOS_RETURN_IF_ERROR(CheckNotNull(out, kOp, "out"));
  return Launch(&silu_mul, n, kOp, stream, gate, up, out, n);
}

Status ResidualAdd(const float* a, const float* b, float* out, long long n, cudaStream_t stream) {
  constexpr const char* kOp = "ResidualAdd";
  PHOS_RETURN_IF_ERROR(CheckPositive(n, kOp, "n"));
  PHOS_RETURN_IF_ERROR(CheckNotNull(a, kOp, "a"));
  PHOS_RETURN_IF_ERROR(CheckNotNull(b, kOp, "b"));
  PHOS_RETURN_IF_ERROR(CheckNotNull(out, kOp, "out"));
  return Launch(&residual_add, n, kOp, stream, a, b, out, n);
}

Status EmbeddingGather(const float* table, const int* ids, float* out, int n_tokens, int vocab, int dim,
                       int* invalid_ids, cudaStream_t stream) {
  constexpr const char* kOp = "EmbeddingGather";
  PHOS_RETURN_IF_ERROR(CheckPositive(n_tokens, kOp, "n_tokens"));
  PHOS_RETURN_IF_ERROR(CheckPositive(vocab, kOp, "vocab"));
  PHOS_RETURN_IF_ERROR(CheckPositive(dim, kOp, "dim"));
  PHOS_RETURN_IF_ERROR(CheckNotNull(table, kOp, "table"));
  PHOS_RETURN_IF_ERROR(CheckNotNull(ids, kOp, "ids"));
  PHOS_RETURN_IF_ERROR(CheckNotNull(out, kOp, "out"));
  long long elements = 0;
  PHOS_RETURN_IF_ERROR(CheckedProduct(n_tokens, dim, kOp, &elements));
  PHOS_RETURN_IF_ERROR(CheckedProduct(vocab, dim, kOp, &elements));
  return Launch(&embedding_gather, static_cast<long long>(n_tokens) * dim, kOp, stream, table, ids, out,
                n_tokens, vocab, dim, invalid_ids);
}

Status CausalAttention(const float* q, const float* k, const float* v, float* k_cache, float* v_cache,
                       float* out, const AttentionShape& shape, cudaStream_t stream) {
  constexpr const char* kOp = "CausalAttention";
  PHOS_RETURN_IF_ERROR(CheckPositive(shape.n_tokens, kOp, "n_tokens"));
  PHOS_RETURN_IF_ERROR(CheckPositive(shape.n_heads, kOp, "n_heads"));
  PHOS_RETURN_IF_ERROR(CheckPositive(shape.n_kv_heads, kOp, "n_kv_heads"));
  PHOS_RETURN_IF_ERROR(CheckPositive(shape.head_dim, kOp, "head_dim"));
  PHOS_RETURN_IF_ERROR(CheckPositive(shape.max_seq, kOp, "max_seq"));
  if (shape.n_heads % shape.n_kv_heads != 0) {
    return Status::InvalidArgument("CausalAttention: n_heads " + std::to_string(shape.n_heads) +
                                   " is not a multiple of n_kv_heads " + std::to_string(shape.n_kv_heads));
  }
  if (shape.start_pos < 0 || shape.start_pos > shape.max_seq - shape.n_tokens) {
    return Status::InvalidArgument(
        "CausalAttention: positions " + std::to_string(shape.start_pos) + ".." +
        std::to_string(static_cast<long long>(shape.start_pos) + shape.n_tokens - 1) +
        " do not fit a cache of " + std::to_string(shape.max_seq));
  }
  for (const auto& [p, name] : {std::pair<const void*, const char*>{q, "q"},
                                {k, "k"},
                                {v, "v"},
                                {k_cache, "k_cache"},
                                {v_cache, "v_cache"},
                                {out, "out"}}) {
    PHOS_RETURN_IF_ERROR(CheckNotNull(p, kOp, name));
  }
  long long cache_elements = 0;
  PHOS_RETURN_IF_ERROR(CheckedProduct(shape.max_seq, shape.n_kv_heads, kOp, &cache_elements));
  PHOS_RETURN_IF_ERROR(CheckedProduct(cache_elements, shape.head_dim, kOp, &cache_elements));
  long long q_elements = 0;
  PHOS_RETURN_IF_ERROR(CheckedProduct(shape.n_tokens, shape.n_heads, kOp, &q_elements));
  PHOS_RETURN_IF_ERROR(CheckedProduct(q_elements, shape.head_dim, kOp, &q_elements));
  const long long new_kv = static_cast<long long>(shape.n_tokens) * shape.n_kv_heads * shape.head_dim;
  // Same stream: the attention launch starts after every new key and value is in the cache.
  PHOS_RETURN_IF_ERROR(Launch(&kv_cache_append, new_kv, kOp, stream, k, v, k_cache, v_cache, shape.n_tokens,
                              shape.n_kv_heads, shape.head_dim, shape.start_pos));
  return Launch(&causal_attention, static_cast<long long>(shape.n_tokens) * shape.n_heads, kOp, stream, q,
                k_cache, v_cache, out, shape.n_tokens, shape.n_heads, shape.n_kv_heads, shape.head_dim,
                shape.start_pos);
}

Status ArgmaxRows(const float* x, int rows, int cols, int* out, cudaStream_t stream) {
  constexpr const char* kOp = "ArgmaxRows";
  PHOS_RETURN_IF_ERROR(CheckPositive(rows, kOp, "rows"));
  PHOS_RETURN_IF_ERROR(CheckPositive(cols, kOp, "cols"));
  PHOS_RETURN_IF_ERROR(CheckNotNull(x, kOp, "x"));
  PHOS_RETURN_IF_ERROR(CheckNotNull(out, kOp, "out"));
  return Launch(&argmax_rows, rows, kOp, stream, x, rows, cols, out);
}

Status TopKRouter(const float* logits, int rows, int n_experts, int k, int* indices, float* weights,
                  cudaStream_t stream) {
  constexpr const char* kOp = "TopKRouter";
  PHOS_RETURN_IF_ERROR(CheckPositive(rows, kOp, "rows"));
  PHOS_RETURN_IF_ERROR(CheckPositive(n_experts, kOp, "n_experts"));
  PHOS_RETURN_IF_ERROR(CheckPositive(k, kOp, "k"));
  if (k > n_experts) {
    return Status::InvalidArgument("TopKRouter: k " + std::to_string(k) + " exceeds n_experts " +
                                   std::to_string(n_experts));
  }
  PHOS_RETURN_IF_ERROR(CheckNotNull(logits, kOp, "logits"));
  PHOS_RETURN_IF_ERROR(CheckNotNull(indices, kOp, "indices"));
  PHOS_RETURN_IF_ERROR(CheckNotNull(weights, kOp, "weights"));
  return Launch(&topk_router, rows, kOp, stream, logits, rows, n_experts, k, indices, weights);
}

Status ScatterAddRows(const float* y, const int* rows, const float* weights, float* out, int n, int dim,
                      int out_rows, cudaStream_t stream) {
  constexpr const char* kOp = "ScatterAddRows";
  PHOS_RETURN_IF_ERROR(CheckPositive(n, kOp, "n"));
  PHOS_RETURN_IF_ERROR(CheckPositive(dim, kOp, "dim"));
  PHOS_RETURN_IF_ERROR(CheckPositive(out_rows, kOp, "out_rows"));
  PHOS_RETURN_IF_ERROR(CheckNotNull(y, kOp, "y"));
  PHOS_RETURN_IF_ERROR(CheckNotNull(rows, kOp, "rows"));
  PHOS_RETURN_IF_ERROR(CheckNotNull(weights, kOp, "weights"));
  PHOS_RETURN_IF_ERROR(CheckNotNull(out, kOp, "out"));
  long long elements = 0;
  PHOS_RETURN_IF_ERROR(CheckedProduct(n, dim, kOp, &elements));
  PHOS_RETURN_IF_ERROR(CheckedProduct(out_rows, dim, kOp, &elements));
  return Launch(&scatter_add_rows, static_cast<long long>(n) * dim, kOp, stream, y, rows, weights, out, n,
                dim, out_rows);
}

}  // namespace phos::fn
