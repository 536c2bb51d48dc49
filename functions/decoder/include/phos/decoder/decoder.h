// Decoder: what the llama and moe functions share — the embeddings, each layer's attention half
// (RMSNorm, q/k/v/o projections, rotary embedding, grouped-query attention over a KV cache,
// residual), the final norm and logits, the workspace, and the greedy token loop. The layer's
// feed-forward half is a FeedForward the function supplies: llama's dense MLP, moe's router
// and experts. A function may also supply a ProjectionAdapter, which changes the q and v
// projections' outputs (llama's LoRA adapter).
//
// Every checkpoint tensor is its own device buffer (DeviceTensor), uploaded before the entry
// point so it is in the snapshot, in the order a forward pass reads them (the embeddings, then
// layer by layer its attention and its feed-forward weights, then the final norm and lm_head).
// Matrix products are cuBLAS SGEMMs, the rest the SDK's decoder kernels (phos/fn/decoder_ops.h);
// in phos both are executed by phosd (docs/design.md D1).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "phos/base/status.h"
#include "phos/decoder/decoder_config.h"
#include "phos/fn.h"
#include "phos/fn/checkpoint.h"
#include "phos/fn/cuda_status.h"
#include "phos/fn/device_tensor.h"

namespace phos::decoder {

using fn::BlasStatus;
using fn::CudaStatus;

// A device array of T (scratch, caches), freed with its owner.
template <typename T>
class DeviceArray {
 public:
  DeviceArray() = default;
  DeviceArray(DeviceArray&& other) noexcept : data_(std::exchange(other.data_, nullptr)) {}
  DeviceArray& operator=(DeviceArray&& other) noexcept {
    std::swap(data_, other.data_);
    return *this;
  }
  ~DeviceArray() { cudaFree(data_); }
  Status Allocate(size_t elements) {
    return CudaStatus(cudaMalloc(reinterpret_cast<void**>(&data_), elements * sizeof(T)), "cudaMalloc");
  }
  T* get() const { return data_; }

 private:
  T* data_ = nullptr;
};

// Uploads tensor `name` of the checkpoint; InvalidArgument when its shape is not `shape` (what
// config.json implies).
Status UploadTensor(const fn::Checkpoint& checkpoint, const std::string& name,
                    const std::vector<uint64_t>& shape, fn::DeviceTensor& out);

class Decoder;

// The feed-forward half of a decoder layer: the part that differs between decoders.
class FeedForward {
 public:
  virtual ~FeedForward() = default;
  // Uploads layer `layer`'s weights, named "{prefix}..." with prefix "model.layers.{layer}.".
  // Decoder::Load calls it once per layer in order, after that layer's attention weights.
  virtual Status LoadLayer(const fn::Checkpoint& checkpoint, const DecoderConfig& config, int layer,
                           const std::string& prefix) = 0;
  // Allocates scratch for up to `rows` tokens at a time; called once, after every layer loaded.
  virtual Status AllocateWorkspace(const DecoderConfig& config, int rows) = 0;
  // out [n, hidden] = the layer's feed-forward network of x [n, hidden], enqueued on
  // decoder.stream(); out does not alias x.
  virtual Status Apply(Decoder& decoder, int layer, const float* x, float* out, int n) = 0;
};

// The attention projections a ProjectionAdapter is called after.
enum class Projection { kQuery, kValue };

// A term a function adds to the q and v projections' outputs without touching their weights
// (llama's LoRA adapter), so the base's device buffers stay the checkpoint's bytes.
class ProjectionAdapter {
 public:
  virtual ~ProjectionAdapter() = default;
  // Called right after the decoder's y = x W^T for `projection` of `layer`, before the rotary
  // embedding: may add to y [n, q_dim or kv_dim] from x [n, hidden], enqueued on
  // decoder.stream(); x and y do not overlap.
  virtual Status AfterProjection(Decoder& decoder, int layer, Projection projection, const float* x, float* y,
                                 int n) = 0;
};

class Decoder {
 public:
  // Uploads the checkpoint's tensors (the feed-forward ones through `feed_forward`, which must
  // outlive the decoder) and allocates the KV cache and the activations for max_positions
  // tokens.
  static Result<std::unique_ptr<Decoder>> Load(const fn::Checkpoint& checkpoint, const DecoderConfig& config,
                                               FeedForward& feed_forward);
  ~Decoder();
  Decoder(const Decoder&) = delete;
  Decoder& operator=(const Decoder&) = delete;

  // `adapter` (which must outlive the decoder; null: none) is applied from the next forward
  // pass on. Set after Load, so what Load allocates lies where it would without one.
  void set_projection_adapter(ProjectionAdapter* adapter) { projection_adapter_ = adapter; }

  const DecoderConfig& config() const { return config_; }
  cudaStream_t stream() const { return stream_; }
  cublasHandle_t blas() const { return blas_; }

  // y [n, out] = x [n, in] W^T with W row-major [out, in], enqueued on stream().
  Status Linear(const fn::DeviceTensor& w, const float* x, float* y, int n, int in, int out);

  // Greedy generation for a parsed request: the prompt prefilled in one pass, then a token per
  // step from the KV cache. With request.stream each token is also sent as a line
  // {"token": id} as soon as it is chosen.
  Result<Generation> Generate(const GenerateRequest& request, fn::Pieces& out);

 private:
  // One layer's attention half and its KV cache.
  struct AttentionLayer {
    fn::DeviceTensor q, k, v, o, input_norm, post_attention_norm;
    DeviceArray<float> k_cache, v_cache;
  };

  Decoder(const DecoderConfig& config, FeedForward& feed_forward)
      : config_(config), feed_forward_(feed_forward) {}
  Status AllocateWorkspace();
  // Runs `tokens` at positions start_pos.. through the decoder (appending to the KV cache) and
  // returns the argmax of the last token's logits.
  Result<int> Forward(const std::vector<int>& tokens, int start_pos);

  const DecoderConfig config_;
  FeedForward& feed_forward_;
  ProjectionAdapter* projection_adapter_ = nullptr;
  fn::DeviceTensor embed_, norm_, lm_head_;
  std::vector<AttentionLayer> layers_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  // Activations for up to max_position_embeddings tokens, [tokens, width] row-major.
  DeviceArray<float> x_, normed_, q_, k_, v_, attention_, feed_forward_out_, logits_;
  DeviceArray<int> ids_;  // the step's token ids, then the chosen token
};

}  // namespace phos::decoder
