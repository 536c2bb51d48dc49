#include "sparse_moe_block.h"

#include "phos/fn/decoder_ops.h"

namespace phos::moe {

Result<MoeConfig> ParseMoeConfig(const nlohmann::json& j) {
  MoeConfig c;
  PHOS_RETURN_IF_ERROR(decoder::ReadConfigInt(j, "num_local_experts", c.experts));
  PHOS_RETURN_IF_ERROR(decoder::ReadConfigInt(j, "num_experts_per_tok", c.experts_per_token));
  if (c.experts_per_token > c.experts) {
    return Status::InvalidArgument("config.json: num_experts_per_tok " + std::to_string(c.experts_per_token) +
                                   " exceeds num_local_experts " + std::to_string(c.experts));
  }
  // MixtralConfig's sliding_window limits attention to that many previous positions; the shared
  // decoder attends to all of them, which is the same only when the window covers the context.
  auto window = j.find("sliding_window");
  if (window != j.end() && !window->is_null()) {
    int max_positions = 0;
    PHOS_RETURN_IF_ERROR(decoder::ReadConfigInt(j, "max_position_embeddings", max_positions));
    if (!window->is_number_integer() || window->get<long long>() < max_positions) {
      return Status::NotSupported(
          "config.json: sliding_window " + window->dump() +
          " shorter than max_position_embeddings (sliding-window attention is not built)");
    }
  }
  return c;
}

Status SparseMoeBlock::LoadLayer(const fn::Checkpoint& checkpoint, const decoder::DecoderConfig& c,
                                 int /*layer*/, const std::string& prefix) {
  const uint64_t h = c.hidden, inter = c.intermediate, experts = config_.experts;
  const std::string block = prefix + "block_sparse_moe.";
  Layer& l = layers_.emplace_back();
  PHOS_RETURN_IF_ERROR(decoder::UploadTensor(checkpoint, block + "gate.weight", {experts, h}, l.router));
  l.experts.resize(experts);
  for (int j = 0; j < config_.experts; ++j) {
    const std::string p = block + "experts." + std::to_string(j) + ".";
    Expert& e = l.experts[j];
    PHOS_RETURN_IF_ERROR(decoder::UploadTensor(checkpoint, p + "w1.weight", {inter, h}, e.w1));
    PHOS_RETURN_IF_ERROR(decoder::UploadTensor(checkpoint, p + "w3.weight", {inter, h}, e.w3));
    PHOS_RETURN_IF_ERROR(decoder::UploadTensor(checkpoint, p + "w2.weight", {h, inter}, e.w2));
  }
  return Status::Ok();
}

Status SparseMoeBlock::AllocateWorkspace(const decoder::DecoderConfig& c, int rows) {
  hidden_ = c.hidden;
  intermediate_ = c.intermediate;
  const size_t n = rows, routed = n * config_.experts_per_token;
  PHOS_RETURN_IF_ERROR(router_logits_.Allocate(n * config_.experts));
  PHOS_RETURN_IF_ERROR(router_choices_.Allocate(routed));
  PHOS_RETURN_IF_ERROR(router_weights_.Allocate(routed));
  PHOS_RETURN_IF_ERROR(routed_rows_.Allocate(routed));
  PHOS_RETURN_IF_ERROR(routed_weights_.Allocate(routed));
  PHOS_RETURN_IF_ERROR(expert_in_.Allocate(n * hidden_));
  PHOS_RETURN_IF_ERROR(gate_.Allocate(n * intermediate_));
  PHOS_RETURN_IF_ERROR(up_.Allocate(n * intermediate_));
  return expert_out_.Allocate(n * hidden_);
}

Status SparseMoeBlock::Apply(decoder::Decoder& decoder, int layer, const float* x, float* out, int n) {
  const Layer& l = layers_[layer];
  const int experts = config_.experts, k = config_.experts_per_token;
  const cudaStream_t stream = decoder.stream();
  PHOS_RETURN_IF_ERROR(decoder.Linear(l.router, x, router_logits_.get(), n, hidden_, experts));
  PHOS_RETURN_IF_ERROR(fn::TopKRouter(router_logits_.get(), n, experts, k, router_choices_.get(),
                                      router_weights_.get(), stream));
  const size_t routed = static_cast<size_t>(n) * k;
  std::vector<int> choices(routed);
  std::vector<float> weights(routed);
  PHOS_FN_RETURN_IF_CUDA(cudaMemcpyAsync(choices.data(), router_choices_.get(), routed * sizeof(int),
                                      cudaMemcpyDeviceToHost, stream));
  PHOS_FN_RETURN_IF_CUDA(cudaMemcpyAsync(weights.data(), router_weights_.get(), routed * sizeof(float),
                                      cudaMemcpyDeviceToHost, stream));
  PHOS_FN_RETURN_IF_CUDA(cudaStreamSynchronize(stream));

  // The (token, weight) pairs grouped by expert, each group in token order: expert j's are at
  // [begin[j], begin[j + 1]).
  std::vector<int> begin(experts + 1, 0);
  for (int j : choices) {
    if (j < 0 || j >= experts) return Status::Internal("the router chose expert " + std::to_string(j));
    ++begin[j + 1];
  }
  for (int j = 0; j < experts; ++j) begin[j + 1] += begin[j];
  std::vector<int> rows(routed);
  std::vector<float> row_weights(routed);
  std::vector<int> next(begin.begin(), begin.end() - 1);
  for (size_t i = 0; i < routed; ++i) {
    const int j = choices[i];
    rows[next[j]] = static_cast<int>(i / k);
    row_weights[next[j]++] = weights[i];
  }
  PHOS_FN_RETURN_IF_CUDA(
      cudaMemcpyAsync(routed_rows_.get(), rows.data(), routed * sizeof(int), cudaMemcpyHostToDevice, stream));
  PHOS_FN_RETURN_IF_CUDA(cudaMemcpyAsync(routed_weights_.get(), row_weights.data(), routed * sizeof(float),
                                      cudaMemcpyHostToDevice, stream));
  PHOS_FN_RETURN_IF_CUDA(cudaMemsetAsync(out, 0, static_cast<size_t>(n) * hidden_ * sizeof(float), stream));

  // Only the chosen experts run, each on its tokens' rows. The routed buffers and the scratch are
  // reused from expert to expert: the stream orders each expert's reads before the next's writes.
  for (int j = 0; j < experts; ++j) {
    const int count = begin[j + 1] - begin[j];
    if (count == 0) continue;
    const Expert& e = l.experts[j];
    const int* expert_rows = routed_rows_.get() + begin[j];
    const float* in = x;
    // Top-k picks distinct experts per token, so an expert every token chose has rows 0..n-1 in
    // order: its input is x itself (always so when decoding one token).
    if (count < n) {
      PHOS_RETURN_IF_ERROR(
          fn::EmbeddingGather(x, expert_rows, expert_in_.get(), count, n, hidden_, nullptr, stream));
      in = expert_in_.get();
    }
    PHOS_RETURN_IF_ERROR(decoder.Linear(e.w1, in, gate_.get(), count, hidden_, intermediate_));
    PHOS_RETURN_IF_ERROR(decoder.Linear(e.w3, in, up_.get(), count, hidden_, intermediate_));
    PHOS_RETURN_IF_ERROR(fn::SiluMul(gate_.get(), up_.get(), gate_.get(),
                                     static_cast<long long>(count) * intermediate_, stream));
    PHOS_RETURN_IF_ERROR(decoder.Linear(e.w2, gate_.get(), expert_out_.get(), count, intermediate_, hidden_));
    PHOS_RETURN_IF_ERROR(fn::ScatterAddRows(expert_out_.get(), expert_rows, routed_weights_.get() + begin[j],
                                            out, count, hidden_, n, stream));
    experts_run_.emplace(layer, j);
  }
  return Status::Ok();
}

}  // namespace phos::moe
