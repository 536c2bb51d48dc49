#include "phos/decoder/decoder_config.h"

#include <fstream>
#include <sstream>

namespace phos::decoder {

Status ReadConfigInt(const nlohmann::json& j, const char* key, int& out) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) {
    return Status::InvalidArgument(std::string("config.json: ") + key + " missing or not an integer");
  }
  const long long v = it->get<long long>();
  if (v <= 0 || v > (1 << 30))
    return Status::InvalidArgument(std::string("config.json: ") + key + " out of range");
  out = static_cast<int>(v);
  return Status::Ok();
}

Result<DecoderConfig> ParseConfig(const nlohmann::json& j) {
  if (!j.is_object()) return Status::InvalidArgument("config.json is not a JSON object");
  DecoderConfig c;
  PHOS_RETURN_IF_ERROR(ReadConfigInt(j, "hidden_size", c.hidden));
  PHOS_RETURN_IF_ERROR(ReadConfigInt(j, "intermediate_size", c.intermediate));
  PHOS_RETURN_IF_ERROR(ReadConfigInt(j, "num_hidden_layers", c.layers));
  PHOS_RETURN_IF_ERROR(ReadConfigInt(j, "num_attention_heads", c.heads));
  PHOS_RETURN_IF_ERROR(ReadConfigInt(j, "vocab_size", c.vocab));
  PHOS_RETURN_IF_ERROR(ReadConfigInt(j, "max_position_embeddings", c.max_positions));
  c.kv_heads = c.heads;  // Hugging Face's default: no grouping
  if (j.contains("num_key_value_heads"))
    PHOS_RETURN_IF_ERROR(ReadConfigInt(j, "num_key_value_heads", c.kv_heads));
  c.head_dim = c.hidden / c.heads;
  if (j.contains("head_dim") && !j["head_dim"].is_null())
    PHOS_RETURN_IF_ERROR(ReadConfigInt(j, "head_dim", c.head_dim));
  if (j.contains("rms_norm_eps") && j["rms_norm_eps"].is_number())
    c.rms_norm_eps = j["rms_norm_eps"].get<float>();
  if (j.contains("rope_theta") && j["rope_theta"].is_number()) c.rope_theta = j["rope_theta"].get<float>();
  if (j.contains("tie_word_embeddings") && j["tie_word_embeddings"].is_boolean()) {
    c.tie_word_embeddings = j["tie_word_embeddings"].get<bool>();
  }
  if (c.heads % c.kv_heads != 0) {
    return Status::InvalidArgument(
        "config.json: num_attention_heads is not a multiple of num_key_value_heads");
  }
  if (c.head_dim % 2 != 0)
    return Status::InvalidArgument("config.json: head_dim is odd (rotary needs pairs)");
  return c;
}

Result<nlohmann::json> ReadConfigJson(const std::string& model_dir) {
  const std::string path = model_dir + "/config.json";
  std::ifstream in(path);
  if (!in) return Status::NotFound("cannot read " + path);
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return Status::InvalidArgument(path + " is not a JSON object");
  return j;
}

Result<GenerateRequest> ParseRequest(std::string_view body, const DecoderConfig& config,
                                     std::span<const RequestFlag> extra_flags) {
  nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return Status::InvalidArgument("the request is not a JSON object");
  auto tokens = j.find("tokens");
  if (tokens == j.end() || !tokens->is_array() || tokens->empty()) {
    return Status::InvalidArgument("\"tokens\" must be a non-empty array of token ids");
  }
  GenerateRequest r;
  for (const auto& t : *tokens) {
    if (!t.is_number_integer()) return Status::InvalidArgument("\"tokens\" holds a non-integer");
    const long long id = t.get<long long>();
    if (id < 0 || id >= config.vocab) {
      return Status::InvalidArgument("token id " + std::to_string(id) + " outside [0, " +
                                     std::to_string(config.vocab) + ")");
    }
    r.tokens.push_back(static_cast<int>(id));
  }
  auto n = j.find("max_new_tokens");
  if (n == j.end() || !n->is_number_integer())
    return Status::InvalidArgument("\"max_new_tokens\" must be an integer");
  const long long max_new = n->get<long long>();
  if (max_new < 0) return Status::InvalidArgument("\"max_new_tokens\" must not be negative");
  // Compared without adding, so that no max_new_tokens can overflow the sum.
  const long long prompt = static_cast<long long>(r.tokens.size());
  if (max_new > config.max_positions - prompt) {
    return Status::InvalidArgument("prompt (" + std::to_string(prompt) + ") + max_new_tokens (" +
                                   std::to_string(max_new) + ") exceeds max_position_embeddings " +
                                   std::to_string(config.max_positions));
  }
  r.max_new_tokens = static_cast<int>(max_new);
  const RequestFlag common[] = {{"stream", &r.stream}, {"scores", &r.scores}};
  for (std::span<const RequestFlag> flags : {std::span<const RequestFlag>(common), extra_flags}) {
    for (const RequestFlag& flag : flags) {
      auto it = j.find(flag.key);
      if (it == j.end()) continue;
      if (!it->is_boolean())
        return Status::InvalidArgument(std::string("\"") + flag.key + "\" must be a boolean");
      *flag.value = it->get<bool>();
    }
  }
  return r;
}

nlohmann::json ResponseJson(const Generation& generation, const GenerateRequest& request) {
  nlohmann::json j;
  j["tokens"] = generation.tokens;
  if (request.scores) j["scores"] = generation.scores;
  return j;
}

std::string ResponseText(const nlohmann::json& response, const GenerateRequest& request) {
  return response.dump() + (request.stream ? "\n" : "");
}

}  // namespace phos::decoder
