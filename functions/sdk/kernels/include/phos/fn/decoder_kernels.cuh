// The function SDK's standard kernels for a transformer decoder, fp32, written once for nvcc and
// simgpu (phos/kernel.h). Functions call them through phos/fn/decoder_ops.h, which validates the
// shapes and picks the launch shape; this header is also what phos_add_function(KERNELS ...)
// compiles into the function's kernel module (PHOS_FN_DECODER_KERNELS).
//
// Every kernel is barrier-free (simgpu runs a block's threads one after another, so it has no
// __syncthreads or __shared__): a reduction over a row is one thread's loop over that row, and
// the other kernels give each thread elements no other thread reads or writes. All matrices are
// row-major: the last dimension named is the contiguous one. Element counts are 64-bit.
#pragma once

#include <math.h>

#include "phos/kernel.h"

namespace phos::fn::kernels {

PHOS_DEVICE inline long long GlobalThreadIndex() {
  return static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
}

// NaN orders below every number (and -inf), so a NaN logit is never chosen over a number.
PHOS_DEVICE inline float OrderKey(float v) { return isnan(v) ? -INFINITY : v; }

// y[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * w; x, y [rows, dim], w [dim]. One thread per
// row; y may alias x.
PHOS_GLOBAL void rms_norm(const float* x, const float* w, float* y, int rows, int dim, float eps) {
  const long long r = GlobalThreadIndex();
  if (r >= rows) return;
  const float* xr = x + r * dim;
  float* yr = y + r * dim;
  float sum_squares = 0.0f;
  for (int j = 0; j < dim; ++j) sum_squares += xr[j] * xr[j];
  const float inv_rms = 1.0f / sqrtf(sum_squares / static_cast<float>(dim) + eps);
  for (int j = 0; j < dim; ++j) yr[j] = xr[j] * inv_rms * w[j];
}
PHOS_EXPORT_KERNEL(rms_norm);

// Rotary embedding in place, Hugging Face "rotate half" convention: within each head vector of
// head_dim, element i < head_dim/2 pairs with i + head_dim/2 at angle pos * theta^(-2i/head_dim),
// and the pair (a, b) becomes (a cos - b sin, b cos + a sin). q [n_tokens, n_heads, head_dim],
// k [n_tokens, n_kv_heads, head_dim]; token t is at position start_pos + t. One thread per pair.
PHOS_GLOBAL void rotary_embedding(float* q, float* k, int n_tokens, int n_heads, int n_kv_heads,
                                  int head_dim, int start_pos, float theta) {
  const int half = head_dim / 2;
  const int heads = n_heads + n_kv_heads;
  const long long idx = GlobalThreadIndex();
  if (idx >= static_cast<long long>(n_tokens) * heads * half) return;
  const int i = static_cast<int>(idx % half);
  const int head = static_cast<int>((idx / half) % heads);
  const long long t = idx / (static_cast<long long>(half) * heads);
  float* v = head < n_heads ? q + (t * n_heads + head) * head_dim
                            : k + (t * n_kv_heads + (head - n_heads)) * head_dim;
  const float inv_freq = powf(theta, -2.0f * static_cast<float>(i) / static_cast<float>(head_dim));
  const float angle = static_cast<float>(start_pos + t) * inv_freq;
  const float c = cosf(angle);
  const float s = sinf(angle);
  const float a = v[i];
  const float b = v[i + half];
  v[i] = a * c - b * s;
  v[i + half] = b * c + a * s;
}
PHOS_EXPORT_KERNEL(rotary_embedding);

// x[r, :] = softmax(x[r, :]) in place, x [rows, cols], stable: exp(x - max) / sum. One thread per
// row.
PHOS_GLOBAL void softmax_rows(float* x, int rows, int cols) {
  const long long r = GlobalThreadIndex();
  if (r >= rows) return;
  float* xr = x + r * cols;
  float row_max = xr[0];
  for (int j = 1; j < cols; ++j) row_max = fmaxf(row_max, xr[j]);
  float sum = 0.0f;
  for (int j = 0; j < cols; ++j) {
    xr[j] = expf(xr[j] - row_max);
    sum += xr[j];
  }
  const float inv_sum = 1.0f / sum;
  for (int j = 0; j < cols; ++j) xr[j] *= inv_sum;
}
PHOS_EXPORT_KERNEL(softmax_rows);

// out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g)); out may alias gate or up.
PHOS_GLOBAL void silu_mul(const float* gate, const float* up, float* out, long long n) {
  const long long i = GlobalThreadIndex();
  if (i >= n) return;
  const float g = gate[i];
  out[i] = g / (1.0f + expf(-g)) * up[i];
}
PHOS_EXPORT_KERNEL(silu_mul);

// out[i] = a[i] + b[i]; out may alias a or b.
PHOS_GLOBAL void residual_add(const float* a, const float* b, float* out, long long n) {
  const long long i = GlobalThreadIndex();
  if (i < n) out[i] = a[i] + b[i];
}
PHOS_EXPORT_KERNEL(residual_add);

// out[t, :] = table[ids[t], :]; table [vocab, dim], out [n_tokens, dim]. An id outside
// [0, vocab) reads nothing: its row of out is zeros and, when invalid_ids is not null, the
// column-0 thread adds 1 to *invalid_ids (so it counts the bad tokens). One thread per element.
PHOS_GLOBAL void embedding_gather(const float* table, const int* ids, float* out, int n_tokens,
                                  int vocab, int dim, int* invalid_ids) {
  const long long idx = GlobalThreadIndex();
  if (idx >= static_cast<long long>(n_tokens) * dim) return;
  const long long t = idx / dim;
  const int j = static_cast<int>(idx % dim);
  const int id = ids[t];
  if (id < 0 || id >= vocab) {
    out[idx] = 0.0f;
    if (j == 0 && invalid_ids != nullptr) atomicAdd(invalid_ids, 1);
    return;
  }
  out[idx] = table[static_cast<long long>(id) * dim + j];
}
PHOS_EXPORT_KERNEL(embedding_gather);

// Writes the new tokens' keys and values into the cache: k, v [n_tokens, n_kv_heads, head_dim]
// go to rows start_pos .. start_pos + n_tokens - 1 of k_cache, v_cache
// [max_seq, n_kv_heads, head_dim]. One thread per element.
PHOS_GLOBAL void kv_cache_append(const float* k, const float* v, float* k_cache, float* v_cache,
                                 int n_tokens, int n_kv_heads, int head_dim, int start_pos) {
  const long long row = static_cast<long long>(n_kv_heads) * head_dim;
  const long long idx = GlobalThreadIndex();
  if (idx >= n_tokens * row) return;
  const long long dst = start_pos * row + idx;
  k_cache[dst] = k[idx];
  v_cache[dst] = v[idx];
}
PHOS_EXPORT_KERNEL(kv_cache_append);

// Causal grouped-query attention over the cache, after kv_cache_append. q, out
// [n_tokens, n_heads, head_dim]; caches [max_seq, n_kv_heads, head_dim]; query head h reads
// kv head h / (n_heads / n_kv_heads) (consecutive query heads share one, as Hugging Face's
// repeat_kv); token t (position start_pos + t) attends over positions 0 .. start_pos + t with
// scores q.k / sqrt(head_dim). One thread per (token, head), with an online softmax (running
// max and sum, rescaling the partial output kept in out) so no scratch memory is needed.
PHOS_GLOBAL void causal_attention(const float* q, const float* k_cache, const float* v_cache,
                                  float* out, int n_tokens, int n_heads, int n_kv_heads,
                                  int head_dim, int start_pos) {
  const long long idx = GlobalThreadIndex();
  if (idx >= static_cast<long long>(n_tokens) * n_heads) return;
  const int h = static_cast<int>(idx % n_heads);
  const long long t = idx / n_heads;
  const int kv_head = h / (n_heads / n_kv_heads);
  const long long cache_row = static_cast<long long>(n_kv_heads) * head_dim;
  const float* qh = q + idx * head_dim;
  float* oh = out + idx * head_dim;
  const float scale = 1.0f / sqrtf(static_cast<float>(head_dim));
  float running_max = -INFINITY;
  float running_sum = 0.0f;
  for (int d = 0; d < head_dim; ++d) oh[d] = 0.0f;
  for (long long p = 0; p <= start_pos + t; ++p) {
    const float* kp = k_cache + p * cache_row + static_cast<long long>(kv_head) * head_dim;
    const float* vp = v_cache + p * cache_row + static_cast<long long>(kv_head) * head_dim;
    float score = 0.0f;
    for (int d = 0; d < head_dim; ++d) score += qh[d] * kp[d];
    score *= scale;
    const float new_max = fmaxf(running_max, score);
    const float rescale = expf(running_max - new_max);  // 0 on the first position
    const float weight = expf(score - new_max);
    running_sum = running_sum * rescale + weight;
    for (int d = 0; d < head_dim; ++d) oh[d] = oh[d] * rescale + weight * vp[d];
    running_max = new_max;
  }
  const float inv_sum = 1.0f / running_sum;
  for (int d = 0; d < head_dim; ++d) oh[d] *= inv_sum;
}
PHOS_EXPORT_KERNEL(causal_attention);

// out[r] = index of the largest x[r, :], the lowest index on ties; x [rows, cols]. One thread
// per row.
PHOS_GLOBAL void argmax_rows(const float* x, int rows, int cols, int* out) {
  const long long r = GlobalThreadIndex();
  if (r >= rows) return;
  const float* xr = x + r * cols;
  int best = 0;
  for (int j = 1; j < cols; ++j) {
    if (OrderKey(xr[j]) > OrderKey(xr[best])) best = j;
  }
  out[r] = best;
}
PHOS_EXPORT_KERNEL(argmax_rows);

// Mixture-of-experts router: for each row of logits [rows, n_experts], the k largest (ties to
// the lower index) in descending order into indices [rows, k], and the softmax of those k logits
// into weights [rows, k]. One thread per row; pick j is the largest logit ordered after pick
// j-1 in (logit descending, index ascending), so no scratch memory is needed.
PHOS_GLOBAL void topk_router(const float* logits, int rows, int n_experts, int k, int* indices,
                             float* weights) {
  const long long r = GlobalThreadIndex();
  if (r >= rows) return;
  const float* lr = logits + r * n_experts;
  int* ir = indices + r * k;
  float* wr = weights + r * k;
  int prev = -1;
  for (int j = 0; j < k; ++j) {
    int pick = -1;
    for (int e = 0; e < n_experts; ++e) {
      const float key = OrderKey(lr[e]);
      if (prev >= 0) {
        const float prev_key = OrderKey(lr[prev]);
        if (key > prev_key || (key == prev_key && e <= prev)) continue;  // already picked
      }
      if (pick < 0 || key > OrderKey(lr[pick])) pick = e;
    }
    ir[j] = pick;
    prev = pick;
  }
  const float top = OrderKey(lr[ir[0]]);
  float sum = 0.0f;
  for (int j = 0; j < k; ++j) {
    // All -inf (or NaN) logits: equal weights rather than 0/0.
    wr[j] = top == -INFINITY ? 1.0f : expf(OrderKey(lr[ir[j]]) - top);
    sum += wr[j];
  }
  for (int j = 0; j < k; ++j) wr[j] /= sum;
}
PHOS_EXPORT_KERNEL(topk_router);

// out[rows[i], :] += weights[i] * y[i, :] for i < n; y [n, dim], out [out_rows, dim]. One thread
// per element of y: the rows must be distinct (each of out's elements has one writer), and a
// row outside [0, out_rows) is skipped rather than written.
PHOS_GLOBAL void scatter_add_rows(const float* y, const int* rows, const float* weights, float* out, int n,
                                  int dim, int out_rows) {
  const long long idx = GlobalThreadIndex();
  if (idx >= static_cast<long long>(n) * dim) return;
  const long long i = idx / dim;
  const int row = rows[i];
  if (row < 0 || row >= out_rows) return;
  out[static_cast<long long>(row) * dim + idx % dim] += weights[i] * y[idx];
}
PHOS_EXPORT_KERNEL(scatter_add_rows);

}  // namespace phos::fn::kernels
