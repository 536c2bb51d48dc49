// The host side shared by the decoder functions (llama, moe): the model's shape from a Hugging
// Face config.json, and the JSON of a generate request and its response. No CUDA, so tests use
// it without a device.
#pragma once

#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "phos/base/status.h"

namespace phos::decoder {

// The config.json fields every Llama-style decoder needs (LlamaForCausalLM's, which
// MixtralForCausalLM shares; a mixture of experts reads its own fields besides).
struct DecoderConfig {
  int hidden = 0;
  int intermediate = 0;  // the MLP's width; in a mixture of experts, each expert's
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

// config.json of the checkpoint directory, parsed; NotFound or InvalidArgument naming the file.
Result<nlohmann::json> ReadConfigJson(const std::string& model_dir);

// Reads the integer `key` of config.json into `out`; InvalidArgument when it is missing, not an
// integer or outside [1, 2^30].
Status ReadConfigInt(const nlohmann::json& config, const char* key, int& out);

// The decoder's fields of config.json; InvalidArgument names a missing or inconsistent field
// (sizes positive, heads a multiple of kv_heads, head_dim even).
Result<DecoderConfig> ParseConfig(const nlohmann::json& config);

// {"tokens": [ids...], "max_new_tokens": N, "stream": bool, "scores": bool}
struct GenerateRequest {
  std::vector<int> tokens;
  int max_new_tokens = 0;
  bool stream = false;
  bool scores = false;  // also answer each chosen token's logit (Hugging Face's output_scores)
};

// A boolean request field a function adds to the common ones (moe's "report_experts"); the
// value stays as it is when the request leaves the field out.
struct RequestFlag {
  const char* key;
  bool* value;
};

// InvalidArgument for anything but a non-empty prompt of ids in [0, vocab) with
// 0 <= max_new_tokens and prompt + max_new_tokens <= max_positions, or for a flag (the common
// ones and `extra_flags`) that is present but not a boolean.
Result<GenerateRequest> ParseRequest(std::string_view body, const DecoderConfig& config,
                                     std::span<const RequestFlag> extra_flags = {});

// The generated tokens, and each one's logit when the request asked for scores.
struct Generation {
  std::vector<int> tokens;
  std::vector<float> scores;
};

// {"tokens": [ids...]}, plus "scores": [logits...] when the request asked for them; a function
// adds its own fields before ResponseText.
nlohmann::json ResponseJson(const Generation& generation, const GenerateRequest& request);

// The response's last piece: the JSON text, on a line of its own after streamed tokens.
std::string ResponseText(const nlohmann::json& response, const GenerateRequest& request);

}  // namespace phos::decoder
