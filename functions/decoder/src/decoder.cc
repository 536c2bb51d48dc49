#include "phos/decoder/decoder.h"

#include <string>

#include "phos/fn/decoder_ops.h"

namespace phos::decoder {

using fn::DeviceTensor;

Status UploadTensor(const fn::Checkpoint& checkpoint, const std::string& name,
                    const std::vector<uint64_t>& shape, DeviceTensor& out) {
  PHOS_ASSIGN_OR_RETURN(out, DeviceTensor::Upload(checkpoint, name));
  if (out.shape() != shape)
    return Status::InvalidArgument(name + " does not have the shape config.json says");
  return Status::Ok();
}

Result<std::unique_ptr<Decoder>> Decoder::Load(const fn::Checkpoint& checkpoint, const DecoderConfig& c,
                                               FeedForward& feed_forward) {
  std::unique_ptr<Decoder> d(new Decoder(c, feed_forward));
  const uint64_t h = c.hidden, q = c.q_dim(), kv = c.kv_dim(), vocab = c.vocab;
  PHOS_RETURN_IF_ERROR(UploadTensor(checkpoint, "model.embed_tokens.weight", {vocab, h}, d->embed_));
  d->layers_.resize(c.layers);
  for (int i = 0; i < c.layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    AttentionLayer& l = d->layers_[i];
    PHOS_RETURN_IF_ERROR(UploadTensor(checkpoint, p + "self_attn.q_proj.weight", {q, h}, l.q));
    PHOS_RETURN_IF_ERROR(UploadTensor(checkpoint, p + "self_attn.k_proj.weight", {kv, h}, l.k));
    PHOS_RETURN_IF_ERROR(UploadTensor(checkpoint, p + "self_attn.v_proj.weight", {kv, h}, l.v));
    PHOS_RETURN_IF_ERROR(UploadTensor(checkpoint, p + "self_attn.o_proj.weight", {h, q}, l.o));
    PHOS_RETURN_IF_ERROR(UploadTensor(checkpoint, p + "input_layernorm.weight", {h}, l.input_norm));
    PHOS_RETURN_IF_ERROR(
        UploadTensor(checkpoint, p + "post_attention_layernorm.weight", {h}, l.post_attention_norm));
    PHOS_RETURN_IF_ERROR(feed_forward.LoadLayer(checkpoint, c, i, p));
  }
  PHOS_RETURN_IF_ERROR(UploadTensor(checkpoint, "model.norm.weight", {h}, d->norm_));
  // Tied embeddings: the logits use the embedding table, as LlamaForCausalLM does.
  if (!c.tie_word_embeddings)
    PHOS_RETURN_IF_ERROR(UploadTensor(checkpoint, "lm_head.weight", {vocab, h}, d->lm_head_));
  PHOS_RETURN_IF_ERROR(d->AllocateWorkspace());
  PHOS_RETURN_IF_ERROR(feed_forward.AllocateWorkspace(c, c.max_positions));
  return d;
}

Decoder::~Decoder() {
  if (blas_ != nullptr) cublasDestroy(blas_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

Status Decoder::AllocateWorkspace() {
  const DecoderConfig& c = config_;
  PHOS_FN_RETURN_IF_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  PHOS_FN_RETURN_IF_BLAS(cublasCreate(&blas_));
  PHOS_FN_RETURN_IF_BLAS(cublasSetStream(blas_, stream_));
  const size_t rows = c.max_positions;  // a prefill may be as long as the cache
  for (AttentionLayer& l : layers_) {
    PHOS_RETURN_IF_ERROR(l.k_cache.Allocate(rows * c.kv_dim()));
    PHOS_RETURN_IF_ERROR(l.v_cache.Allocate(rows * c.kv_dim()));
  }
  PHOS_RETURN_IF_ERROR(x_.Allocate(rows * c.hidden));
  PHOS_RETURN_IF_ERROR(normed_.Allocate(rows * c.hidden));
  PHOS_RETURN_IF_ERROR(q_.Allocate(rows * c.q_dim()));
  PHOS_RETURN_IF_ERROR(k_.Allocate(rows * c.kv_dim()));
  PHOS_RETURN_IF_ERROR(v_.Allocate(rows * c.kv_dim()));
  PHOS_RETURN_IF_ERROR(attention_.Allocate(rows * c.q_dim()));
  PHOS_RETURN_IF_ERROR(feed_forward_out_.Allocate(rows * c.hidden));
  PHOS_RETURN_IF_ERROR(logits_.Allocate(c.vocab));
  PHOS_RETURN_IF_ERROR(ids_.Allocate(rows));
  return Status::Ok();
}

// In cuBLAS's column-major terms y^T = W x^T, where W's bytes read column-major are W^T, hence
// OP_T.
Status Decoder::Linear(const DeviceTensor& w, const float* x, float* y, int n, int in, int out) {
  const float one = 1.0f, zero = 0.0f;
  PHOS_FN_RETURN_IF_BLAS(
      cublasSgemm(blas_, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, &one, w.data(), in, x, in, &zero, y, out));
  return Status::Ok();
}

Result<Generation> Decoder::Generate(const GenerateRequest& request, fn::Pieces& out) {
  Generation generation;
  std::vector<int> step = request.tokens;  // the tokens of the next forward pass
  int position = 0;
  for (int i = 0; i < request.max_new_tokens; ++i) {
    PHOS_ASSIGN_OR_RETURN(int next, Forward(step, position));
    if (request.scores) {
      float score = 0.0f;
      PHOS_FN_RETURN_IF_CUDA(
          cudaMemcpyAsync(&score, logits_.get() + next, sizeof(float), cudaMemcpyDeviceToHost, stream_));
      PHOS_FN_RETURN_IF_CUDA(cudaStreamSynchronize(stream_));
      generation.scores.push_back(score);
    }
    position += static_cast<int>(step.size());
    generation.tokens.push_back(next);
    step = {next};
    if (request.stream) PHOS_RETURN_IF_ERROR(out.Send("{\"token\": " + std::to_string(next) + "}\n"));
  }
  return generation;
}

Result<int> Decoder::Forward(const std::vector<int>& tokens, int start_pos) {
  const DecoderConfig& c = config_;
  const int n = static_cast<int>(tokens.size());
  const long long hidden_elements = static_cast<long long>(n) * c.hidden;
  PHOS_FN_RETURN_IF_CUDA(
      cudaMemcpyAsync(ids_.get(), tokens.data(), n * sizeof(int), cudaMemcpyHostToDevice, stream_));
  // Ids were range-checked by ParseRequest, so no invalid-id counter is needed.
  PHOS_RETURN_IF_ERROR(
      fn::EmbeddingGather(embed_.data(), ids_.get(), x_.get(), n, c.vocab, c.hidden, nullptr, stream_));
  fn::AttentionShape shape{n, c.heads, c.kv_heads, c.head_dim, start_pos, c.max_positions};
  for (int i = 0; i < c.layers; ++i) {
    AttentionLayer& l = layers_[i];
    PHOS_RETURN_IF_ERROR(
        fn::RmsNorm(x_.get(), l.input_norm.data(), normed_.get(), n, c.hidden, c.rms_norm_eps, stream_));
    PHOS_RETURN_IF_ERROR(Linear(l.q, normed_.get(), q_.get(), n, c.hidden, c.q_dim()));
    if (projection_adapter_ != nullptr) {
      PHOS_RETURN_IF_ERROR(
          projection_adapter_->AfterProjection(*this, i, Projection::kQuery, normed_.get(), q_.get(), n));
    }
    PHOS_RETURN_IF_ERROR(Linear(l.k, normed_.get(), k_.get(), n, c.hidden, c.kv_dim()));
    PHOS_RETURN_IF_ERROR(Linear(l.v, normed_.get(), v_.get(), n, c.hidden, c.kv_dim()));
    if (projection_adapter_ != nullptr) {
      PHOS_RETURN_IF_ERROR(
          projection_adapter_->AfterProjection(*this, i, Projection::kValue, normed_.get(), v_.get(), n));
    }
    PHOS_RETURN_IF_ERROR(fn::RotaryEmbedding(q_.get(), k_.get(), n, c.heads, c.kv_heads, c.head_dim,
                                             start_pos, c.rope_theta, stream_));
    PHOS_RETURN_IF_ERROR(fn::CausalAttention(q_.get(), k_.get(), v_.get(), l.k_cache.get(), l.v_cache.get(),
                                             attention_.get(), shape, stream_));
    PHOS_RETURN_IF_ERROR(Linear(l.o, attention_.get(), normed_.get(), n, c.q_dim(), c.hidden));
    PHOS_RETURN_IF_ERROR(fn::ResidualAdd(x_.get(), normed_.get(), x_.get(), hidden_elements, stream_));
    PHOS_RETURN_IF_ERROR(fn::RmsNorm(x_.get(), l.post_attention_norm.data(), normed_.get(), n, c.hidden,
                                     c.rms_norm_eps, stream_));
    PHOS_RETURN_IF_ERROR(feed_forward_.Apply(*this, i, normed_.get(), feed_forward_out_.get(), n));
    PHOS_RETURN_IF_ERROR(
        fn::ResidualAdd(x_.get(), feed_forward_out_.get(), x_.get(), hidden_elements, stream_));
  }
  // Only the last position's logits choose the next token.
  float* last = x_.get() + static_cast<long long>(n - 1) * c.hidden;
  PHOS_RETURN_IF_ERROR(fn::RmsNorm(last, norm_.data(), normed_.get(), 1, c.hidden, c.rms_norm_eps, stream_));
  const DeviceTensor& head = c.tie_word_embeddings ? embed_ : lm_head_;
  PHOS_RETURN_IF_ERROR(Linear(head, normed_.get(), logits_.get(), 1, c.hidden, c.vocab));
  PHOS_RETURN_IF_ERROR(fn::ArgmaxRows(logits_.get(), 1, c.vocab, ids_.get(), stream_));
  int next = -1;
  PHOS_FN_RETURN_IF_CUDA(cudaMemcpyAsync(&next, ids_.get(), sizeof(int), cudaMemcpyDeviceToHost, stream_));
  PHOS_FN_RETURN_IF_CUDA(cudaStreamSynchronize(stream_));
  return next;
}

}  // namespace phos::decoder
