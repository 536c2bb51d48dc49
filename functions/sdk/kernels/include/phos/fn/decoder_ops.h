// The launcher API of the SDK's decoder kernels (phos/fn/decoder_kernels.cuh): what a Llama or
// mixture-of-experts function calls between its cuBLAS matrix products. All tensors are fp32
// device memory, row-major (the last dimension named is contiguous); every call enqueues on
// `stream` and returns once enqueued. A function that uses these lists PHOS_FN_DECODER_KERNELS in
// phos_add_function(KERNELS ...) and links phos-fn-kernels.
//
// Each call checks its sizes first (positive, consistent, 64-bit element counts) and returns
// InvalidArgument naming the bad one without launching; a launch failure is DeviceError with the
// runtime's error name. Pointers are not checked beyond being non-null: they must hold the
// elements the shape says.
#pragma once

#include <cuda_runtime.h>

#include "phos/base/status.h"

namespace phos::fn {

// y = x / sqrt(mean(x^2) + eps) * weight per row. x, y [rows, dim] (y may be x); weight [dim].
Status RmsNorm(const float* x, const float* weight, float* y, int rows, int dim, float eps,
               cudaStream_t stream);

// Rotary position embedding in place on q [n_tokens, n_heads, head_dim] and
// k [n_tokens, n_kv_heads, head_dim], Hugging Face "rotate half" convention: element i of the
// first half of a head pairs with i + head_dim/2 at angle pos * theta^(-2i/head_dim), where token
// t is at position start_pos + t. head_dim must be even; theta is the model's rope_theta
// (10000 for Llama 2, 500000 for Llama 3).
Status RotaryEmbedding(float* q, float* k, int n_tokens, int n_heads, int n_kv_heads, int head_dim,
                       int start_pos, float theta, cudaStream_t stream);

// x = softmax(x) per row in place, x [rows, cols]; subtracts each row's max first, so large
// logits do not overflow.
Status SoftmaxRows(float* x, int rows, int cols, cudaStream_t stream);

// out = silu(gate) * up elementwise over n elements (the Llama MLP's gating); out may be gate or
// up.
Status SiluMul(const float* gate, const float* up, float* out, long long n, cudaStream_t stream);

// out = a + b elementwise over n elements; out may be a or b.
Status ResidualAdd(const float* a, const float* b, float* out, long long n, cudaStream_t stream);

// out[t, :] = table[ids[t], :]; table [vocab, dim], ids [n_tokens] (device), out [n_tokens, dim].
// Token ids come from clients, so an id outside [0, vocab) is flagged, never clamped or read: its
// row of out is zeros and, when invalid_ids (a device int the caller zeroes) is not null, it is
// incremented once per such token. A function checks it and rejects the request.
Status EmbeddingGather(const float* table, const int* ids, float* out, int n_tokens, int vocab, int dim,
                       int* invalid_ids, cudaStream_t stream);

// The shape of one layer's causal grouped-query attention step. Token t of this step is at
// position start_pos + t; start_pos + n_tokens must not exceed max_seq (the cache's capacity).
// n_heads must be a multiple of n_kv_heads: query head h uses kv head h / (n_heads / n_kv_heads).
struct AttentionShape {
  int n_tokens = 1;  // tokens in this step: 1 when decoding, the prompt length when prefilling
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int start_pos = 0;  // position of the step's first token = tokens already in the cache
  int max_seq = 0;
};

// Appends k, v [n_tokens, n_kv_heads, head_dim] to the caches [max_seq, n_kv_heads, head_dim] at
// rows start_pos.., then writes out [n_tokens, n_heads, head_dim] = softmax(q k^T / sqrt(head_dim))
// v over positions 0 .. start_pos + t for each token t and head (causal). q [n_tokens, n_heads,
// head_dim]; out must not alias q or the caches.
Status CausalAttention(const float* q, const float* k, const float* v, float* k_cache, float* v_cache,
                       float* out, const AttentionShape& shape, cudaStream_t stream);

// out[r] = index of the largest x[r, :] (the lowest index on ties; NaN is below every number);
// x [rows, cols], out [rows] int. Greedy sampling of the next token.
Status ArgmaxRows(const float* x, int rows, int cols, int* out, cudaStream_t stream);

// Mixture-of-experts routing per row of logits [rows, n_experts]: indices [rows, k] gets the k
// largest logits' experts in descending order (ties to the lower index), weights [rows, k] the
// softmax over those k logits (equal to Mixtral's softmax over all experts renormalised over the
// chosen k). 1 <= k <= n_experts.
Status TopKRouter(const float* logits, int rows, int n_experts, int k, int* indices, float* weights,
                  cudaStream_t stream);

// out[rows[i], :] += weights[i] * y[i, :] for each of the n rows of y [n, dim] into
// out [out_rows, dim]: how a mixture of experts adds an expert's outputs for the tokens routed to
// it, each scaled by its router weight. rows [n] and weights [n] are device memory; the rows must
// be distinct, and one outside [0, out_rows) is skipped (never written).
Status ScatterAddRows(const float* y, const int* rows, const float* weights, float* out, int n, int dim,
                      int out_rows, cudaStream_t stream);

}  // namespace phos::fn
