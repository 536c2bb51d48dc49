// llama: greedy text generation with a Llama decoder as a phos function.
//
// Initialisation (before the pre-entry point): config.json and every tensor of the checkpoint in
// --model DIR read, each tensor uploaded as its own fp32 device buffer, the KV cache and scratch
// allocated for max_position_embeddings tokens. A request {"tokens": [ids...],
// "max_new_tokens": N} prefills the prompt in one pass, then decodes one token at a time from the
// KV cache, taking the argmax of the last position's logits each step; it answers
// {"tokens": [generated ids...]}. With "stream": true each token also leaves at once as a line
// {"token": id}; with "scores": true the answer also holds each chosen token's logit. Matrix
// products are cuBLAS SGEMMs, the rest the SDK's decoder kernels (phos/fn/decoder_ops.h); in
// phos both are executed by phosd (docs/design.md D1). With --adapter, a PEFT LoRA adapter is
// added unmerged after the q and v projections (lora.h), leaving the base weights' buffers as the
// checkpoint wrote them.
//
//   llama --model DIR [--adapter ADAPTER_DIR]
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "llama_config.h"
#include "lora.h"
#include "phos/base/log.h"
#include "phos/fn.h"
#include "phos/fn/checkpoint.h"
#include "phos/fn/decoder_ops.h"
#include "phos/fn/device_tensor.h"

namespace {

using phos::Result;
using phos::Status;
using phos::fn::DeviceTensor;
using phos::llama::LlamaConfig;
using phos::llama::LoraTarget;

Status Cuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::Ok();
  return Status::DeviceError(std::string(what) + ": " + cudaGetErrorName(e));
}

Status Blas(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  return Status::DeviceError(std::string(what) + ": cuBLAS status " + std::to_string(static_cast<int>(s)));
}

#define RETURN_IF_CUDA(call) PHOS_RETURN_IF_ERROR(Cuda((call), #call))
#define RETURN_IF_BLAS(call) PHOS_RETURN_IF_ERROR(Blas((call), #call))

struct Layer {
  DeviceTensor q, k, v, o, gate, up, down, input_norm, post_attention_norm;
  float* k_cache = nullptr;
  float* v_cache = nullptr;
};

// A device buffer of fp32 scratch, freed with the decoder.
class DeviceBuffer {
 public:
  ~DeviceBuffer() { cudaFree(data_); }
  Status Allocate(size_t elements) {
    return Cuda(cudaMalloc(reinterpret_cast<void**>(&data_), elements * sizeof(float)), "cudaMalloc");
  }
  float* get() const { return data_; }

 private:
  float* data_ = nullptr;
};

class LlamaDecoder {
 public:
  // `adapter_dir` empty: the base model alone.
  Status Load(const std::string& model_dir, const std::string& adapter_dir) {
    PHOS_ASSIGN_OR_RETURN(config_, phos::llama::ReadConfig(model_dir));
    PHOS_ASSIGN_OR_RETURN(std::unique_ptr<phos::fn::Checkpoint> checkpoint, phos::fn::Checkpoint::Open(model_dir));
    const LlamaConfig& c = config_;
    const auto upload = [&](const std::string& name, std::vector<uint64_t> shape, DeviceTensor& out) -> Status {
      PHOS_ASSIGN_OR_RETURN(out, DeviceTensor::Upload(*checkpoint, name));
      if (out.shape() != shape) return Status::InvalidArgument(name + " does not have the shape config.json says");
      return Status::Ok();
    };
    const uint64_t h = c.hidden, q = c.q_dim(), kv = c.kv_dim(), inter = c.intermediate, vocab = c.vocab;
    PHOS_RETURN_IF_ERROR(upload("model.embed_tokens.weight", {vocab, h}, embed_));
    layers_.resize(c.layers);
    for (int i = 0; i < c.layers; ++i) {
      const std::string p = "model.layers." + std::to_string(i) + ".";
      Layer& l = layers_[i];
      PHOS_RETURN_IF_ERROR(upload(p + "self_attn.q_proj.weight", {q, h}, l.q));
      PHOS_RETURN_IF_ERROR(upload(p + "self_attn.k_proj.weight", {kv, h}, l.k));
      PHOS_RETURN_IF_ERROR(upload(p + "self_attn.v_proj.weight", {kv, h}, l.v));
      PHOS_RETURN_IF_ERROR(upload(p + "self_attn.o_proj.weight", {h, q}, l.o));
      PHOS_RETURN_IF_ERROR(upload(p + "mlp.gate_proj.weight", {inter, h}, l.gate));
      PHOS_RETURN_IF_ERROR(upload(p + "mlp.up_proj.weight", {inter, h}, l.up));
      PHOS_RETURN_IF_ERROR(upload(p + "mlp.down_proj.weight", {h, inter}, l.down));
      PHOS_RETURN_IF_ERROR(upload(p + "input_layernorm.weight", {h}, l.input_norm));
      PHOS_RETURN_IF_ERROR(upload(p + "post_attention_layernorm.weight", {h}, l.post_attention_norm));
    }
    PHOS_RETURN_IF_ERROR(upload("model.norm.weight", {h}, norm_));
    // Tied embeddings: the logits use the embedding table, as LlamaForCausalLM does.
    if (!c.tie_word_embeddings) PHOS_RETURN_IF_ERROR(upload("lm_head.weight", {vocab, h}, lm_head_));
    if (!adapter_dir.empty()) {
      PHOS_ASSIGN_OR_RETURN(adapter_, phos::llama::LoraAdapter::Load(adapter_dir, c));
    }
    return AllocateWorkspace();
  }

  const LlamaConfig& config() const { return config_; }

  Result<std::string> Handle(std::string_view body, phos::fn::Pieces& out) {
    PHOS_ASSIGN_OR_RETURN(phos::llama::GenerateRequest request, phos::llama::ParseRequest(body, config_));
    std::vector<int> generated;
    std::vector<float> scores;
    std::vector<int> step = request.tokens;  // the tokens of the next forward pass
    int position = 0;
    for (int i = 0; i < request.max_new_tokens; ++i) {
      PHOS_ASSIGN_OR_RETURN(int next, Forward(step, position));
      if (request.scores) {
        float score = 0.0f;
        RETURN_IF_CUDA(cudaMemcpyAsync(&score, logits_.get() + next, sizeof(float), cudaMemcpyDeviceToHost, stream_));
        RETURN_IF_CUDA(cudaStreamSynchronize(stream_));
        scores.push_back(score);
      }
      position += static_cast<int>(step.size());
      generated.push_back(next);
      step = {next};
      if (request.stream) PHOS_RETURN_IF_ERROR(out.Send("{\"token\": " + std::to_string(next) + "}\n"));
    }
    return phos::llama::FormatTokens(generated, request.scores ? &scores : nullptr) + (request.stream ? "\n" : "");
  }

 private:
  Status AllocateWorkspace() {
    const LlamaConfig& c = config_;
    RETURN_IF_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    RETURN_IF_BLAS(cublasCreate(&blas_));
    RETURN_IF_BLAS(cublasSetStream(blas_, stream_));
    const size_t rows = c.max_positions;  // a prefill may be as long as the cache
    const size_t widest = std::max({c.hidden, c.q_dim(), c.intermediate});
    for (Layer& l : layers_) {
      RETURN_IF_CUDA(cudaMalloc(reinterpret_cast<void**>(&l.k_cache), rows * c.kv_dim() * sizeof(float)));
      RETURN_IF_CUDA(cudaMalloc(reinterpret_cast<void**>(&l.v_cache), rows * c.kv_dim() * sizeof(float)));
    }
    PHOS_RETURN_IF_ERROR(x_.Allocate(rows * c.hidden));
    PHOS_RETURN_IF_ERROR(normed_.Allocate(rows * c.hidden));
    PHOS_RETURN_IF_ERROR(q_.Allocate(rows * c.q_dim()));
    PHOS_RETURN_IF_ERROR(k_.Allocate(rows * c.kv_dim()));
    PHOS_RETURN_IF_ERROR(v_.Allocate(rows * c.kv_dim()));
    PHOS_RETURN_IF_ERROR(attention_.Allocate(rows * c.q_dim()));
    PHOS_RETURN_IF_ERROR(gate_.Allocate(rows * widest));
    PHOS_RETURN_IF_ERROR(up_.Allocate(rows * c.intermediate));
    PHOS_RETURN_IF_ERROR(logits_.Allocate(c.vocab));
    RETURN_IF_CUDA(cudaMalloc(reinterpret_cast<void**>(&ids_), rows * sizeof(int)));
    return Status::Ok();
  }

  // y [n, out] = x [n, in] W^T with W row-major [out, in]: in cuBLAS's column-major terms
  // y^T = W x^T, where W's bytes read column-major are W^T, hence OP_T.
  Status Linear(const DeviceTensor& w, const float* x, float* y, int n, int in, int out) {
    const float one = 1.0f, zero = 0.0f;
    RETURN_IF_BLAS(cublasSgemm(blas_, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, &one, w.data(), in, x, in, &zero, y, out));
    return Status::Ok();
  }

  // Runs `tokens` at positions start_pos.. through the decoder (appending to the KV cache) and
  // returns the argmax of the last token's logits.
  Result<int> Forward(const std::vector<int>& tokens, int start_pos) {
    const LlamaConfig& c = config_;
    const int n = static_cast<int>(tokens.size());
    const long long hidden_elements = static_cast<long long>(n) * c.hidden;
    RETURN_IF_CUDA(cudaMemcpyAsync(ids_, tokens.data(), n * sizeof(int), cudaMemcpyHostToDevice, stream_));
    // Ids were range-checked by ParseRequest, so no invalid-id counter is needed.
    PHOS_RETURN_IF_ERROR(phos::fn::EmbeddingGather(embed_.data(), ids_, x_.get(), n, c.vocab, c.hidden, nullptr, stream_));
    phos::fn::AttentionShape shape{n, c.heads, c.kv_heads, c.head_dim, start_pos, c.max_positions};
    for (int i = 0; i < c.layers; ++i) {
      Layer& l = layers_[i];
      PHOS_RETURN_IF_ERROR(phos::fn::RmsNorm(x_.get(), l.input_norm.data(), normed_.get(), n, c.hidden, c.rms_norm_eps, stream_));
      PHOS_RETURN_IF_ERROR(Linear(l.q, normed_.get(), q_.get(), n, c.hidden, c.q_dim()));
      if (adapter_) PHOS_RETURN_IF_ERROR(adapter_->Apply(blas_, i, LoraTarget::kQuery, normed_.get(), q_.get(), n));
      PHOS_RETURN_IF_ERROR(Linear(l.k, normed_.get(), k_.get(), n, c.hidden, c.kv_dim()));
      PHOS_RETURN_IF_ERROR(Linear(l.v, normed_.get(), v_.get(), n, c.hidden, c.kv_dim()));
      if (adapter_) PHOS_RETURN_IF_ERROR(adapter_->Apply(blas_, i, LoraTarget::kValue, normed_.get(), v_.get(), n));
      PHOS_RETURN_IF_ERROR(phos::fn::RotaryEmbedding(q_.get(), k_.get(), n, c.heads, c.kv_heads, c.head_dim, start_pos,
                                                     c.rope_theta, stream_));
      PHOS_RETURN_IF_ERROR(phos::fn::CausalAttention(q_.get(), k_.get(), v_.get(), l.k_cache, l.v_cache,
                                                     attention_.get(), shape, stream_));
      PHOS_RETURN_IF_ERROR(Linear(l.o, attention_.get(), normed_.get(), n, c.q_dim(), c.hidden));
      PHOS_RETURN_IF_ERROR(phos::fn::ResidualAdd(x_.get(), normed_.get(), x_.get(), hidden_elements, stream_));
      PHOS_RETURN_IF_ERROR(phos::fn::RmsNorm(x_.get(), l.post_attention_norm.data(), normed_.get(), n, c.hidden,
                                             c.rms_norm_eps, stream_));
      PHOS_RETURN_IF_ERROR(Linear(l.gate, normed_.get(), gate_.get(), n, c.hidden, c.intermediate));
      PHOS_RETURN_IF_ERROR(Linear(l.up, normed_.get(), up_.get(), n, c.hidden, c.intermediate));
      PHOS_RETURN_IF_ERROR(phos::fn::SiluMul(gate_.get(), up_.get(), gate_.get(),
                                             static_cast<long long>(n) * c.intermediate, stream_));
      PHOS_RETURN_IF_ERROR(Linear(l.down, gate_.get(), normed_.get(), n, c.intermediate, c.hidden));
      PHOS_RETURN_IF_ERROR(phos::fn::ResidualAdd(x_.get(), normed_.get(), x_.get(), hidden_elements, stream_));
    }
    // Only the last position's logits choose the next token.
    float* last = x_.get() + static_cast<long long>(n - 1) * c.hidden;
    PHOS_RETURN_IF_ERROR(phos::fn::RmsNorm(last, norm_.data(), normed_.get(), 1, c.hidden, c.rms_norm_eps, stream_));
    const DeviceTensor& head = c.tie_word_embeddings ? embed_ : lm_head_;
    PHOS_RETURN_IF_ERROR(Linear(head, normed_.get(), logits_.get(), 1, c.hidden, c.vocab));
    PHOS_RETURN_IF_ERROR(phos::fn::ArgmaxRows(logits_.get(), 1, c.vocab, ids_, stream_));
    int next = -1;
    RETURN_IF_CUDA(cudaMemcpyAsync(&next, ids_, sizeof(int), cudaMemcpyDeviceToHost, stream_));
    RETURN_IF_CUDA(cudaStreamSynchronize(stream_));
    return next;
  }

  LlamaConfig config_;
  DeviceTensor embed_, norm_, lm_head_;
  std::vector<Layer> layers_;
  std::unique_ptr<phos::llama::LoraAdapter> adapter_;  // null: no --adapter
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  // Activations for up to max_position_embeddings tokens, [tokens, width] row-major.
  DeviceBuffer x_, normed_, q_, k_, v_, attention_, gate_, up_, logits_;
  int* ids_ = nullptr;  // the step's token ids, then the chosen token
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"llama: greedy generation with a Llama decoder (a phos function)"};
  std::string model_dir, adapter_dir;
  app.add_option("--model", model_dir, "Hugging Face checkpoint directory (config.json, *.safetensors)")->required();
  app.add_option("--adapter", adapter_dir, "PEFT LoRA adapter directory (adapter_config.json, adapter_model.safetensors)");
  CLI11_PARSE(app, argc, argv);

  LlamaDecoder decoder;
  if (Status s = decoder.Load(model_dir, adapter_dir); !s.ok()) {
    PHOS_LOG(Error, "llama", "loading {}{} failed: {}", model_dir, adapter_dir.empty() ? "" : " with " + adapter_dir,
             s.ToString());
    return 1;
  }
  const LlamaConfig& c = decoder.config();
  PHOS_LOG(Info, "llama", "ready: {} layers, hidden {}, {} heads ({} kv), vocab {}, {} positions", c.layers, c.hidden,
           c.heads, c.kv_heads, c.vocab, c.max_positions);
  return phos::fn::Serve(phos::fn::StreamingHandler(
      [&decoder](std::string_view request, phos::fn::Pieces& out) { return decoder.Handle(request, out); }));
}
