// The llama function's host side: the model's shape from a Hugging Face config.json, and the
// JSON of a generate request and its response. No CUDA, so tests use it without a device.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "phos/base/status.h"

namespace phos::llama {

// The LlamaForCausalLM fields of config.json the decoder needs.
struct LlamaConfig {
  int hidden = 0;
  int intermediate = 0;
  int layers = 0;
  int heads = 0;
  int kv_heads = 0;
  int head_dim = 0;
  int vocab = 0;
  int max_positions = 0;  // max_position_embeddings: the KV cache's capacity
  float rms_norm_eps = 1e-5f;
  float rope_theta = 10000.0f;
  bool tie_word_embeddings = false;

  int q_dim() const { return heads * head_dim; }
  int kv_dim() const { return kv_heads * head_dim; }
};

// Parses config.json's text; InvalidArgument names a missing or inconsistent field (sizes
// positive, heads a multiple of kv_heads, head_dim even).
Result<LlamaConfig> ParseConfig(std::string_view json);
Result<LlamaConfig> ReadConfig(const std::string& model_dir);

// {"tokens": [ids...], "max_new_tokens": N, "stream": bool, "scores": bool}
struct GenerateRequest {
  std::vector<int> tokens;
  int max_new_tokens = 0;
  bool stream = false;
  bool scores = false;  // also answer each chosen token's logit (Hugging Face's output_scores)
};

// InvalidArgument for anything but a non-empty prompt of ids in [0, vocab) with
// 0 <= max_new_tokens and prompt + max_new_tokens <= max_positions.
Result<GenerateRequest> ParseRequest(std::string_view body, const LlamaConfig& config);

// {"tokens": [ids...]}, plus "scores": [logits...] when `scores` is not null.
std::string FormatTokens(const std::vector<int>& tokens, const std::vector<float>* scores);

}  // namespace phos::llama
