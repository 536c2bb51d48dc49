#include "lora_config.h"

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

namespace phos::llama {
namespace {

std::string ShapeText(const std::vector<uint64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

// `what` is not supported; `instead` says what is.
Status Refuse(const std::string& what, const std::string& instead = "") {
  return Status::NotSupported("adapter_config.json: " + what + " is not supported (" +
                              (instead.empty() ? "" : instead + "; ") + "docs/functions.md)");
}

// A field that PEFT writes with a default meaning "off": absent, null, false, or an empty list or
// object is accepted; anything else is a feature the decoder does not implement.
Status RequireOff(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return Status::Ok();
  if (it->is_boolean() && !it->get<bool>()) return Status::Ok();
  if ((it->is_array() || it->is_object()) && it->empty()) return Status::Ok();
  return Refuse(std::string(key) + " = " + it->dump());
}

}  // namespace

std::string_view LoraTargetName(LoraTarget target) {
  return target == LoraTarget::kQuery ? "q_proj" : "v_proj";
}

Result<LoraConfig> ParseLoraConfig(std::string_view json) {
  nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return Status::InvalidArgument("adapter_config.json is not a JSON object");
  if (auto it = j.find("peft_type"); it != j.end() && *it != "LORA") {
    return Refuse("peft_type " + it->dump(), "LORA is");
  }
  LoraConfig c;
  auto r = j.find("r");
  if (r == j.end() || !r->is_number_integer() || r->get<long long>() <= 0 ||
      r->get<long long>() > (1 << 20)) {
    return Status::InvalidArgument("adapter_config.json: r missing or not a positive integer");
  }
  c.rank = static_cast<int>(r->get<long long>());
  auto alpha = j.find("lora_alpha");
  if (alpha == j.end() || !alpha->is_number() || !std::isfinite(alpha->get<double>())) {
    return Status::InvalidArgument("adapter_config.json: lora_alpha missing or not a finite number");
  }
  c.alpha = alpha->get<double>();
  auto targets = j.find("target_modules");
  if (targets == j.end()) return Status::InvalidArgument("adapter_config.json: target_modules missing");
  // PEFT reads a string as a regular expression over module paths; only explicit names are read here.
  if (!targets->is_array()) return Refuse("target_modules " + targets->dump(), "a list of module names is");
  for (const auto& t : *targets) {
    if (t == "q_proj") {
      c.query = true;
    } else if (t == "v_proj") {
      c.value = true;
    } else {
      return Refuse("target module " + t.dump(), "q_proj and v_proj are");
    }
  }
  if (!c.query && !c.value) return Status::InvalidArgument("adapter_config.json: target_modules is empty");
  for (const char* key : {"use_dora", "use_rslora", "fan_in_fan_out", "lora_bias", "modules_to_save",
                          "layers_to_transform", "layer_replication", "rank_pattern", "alpha_pattern"}) {
    PHOS_RETURN_IF_ERROR(RequireOff(j, key));
  }
  if (auto bias = j.find("bias"); bias != j.end() && *bias != "none") return Refuse("bias " + bias->dump());
  return c;
}

Result<LoraConfig> ReadLoraConfig(const std::string& adapter_dir) {
  const std::string path = adapter_dir + "/" + std::string(kLoraConfigName);
  std::ifstream in(path);
  if (!in) return Status::NotFound("cannot read " + path);
  std::stringstream text;
  text << in.rdbuf();
  return ParseLoraConfig(text.str());
}

std::string LoraTensorName(int layer, LoraTarget target, char matrix) {
  return "base_model.model.model.layers." + std::to_string(layer) + ".self_attn." +
         std::string(LoraTargetName(target)) + ".lora_" + matrix + ".weight";
}

std::vector<LoraMatrix> LoraMatrices(const LoraConfig& lora, const decoder::DecoderConfig& model) {
  std::vector<LoraMatrix> out;
  const uint64_t r = lora.rank, hidden = model.hidden;
  for (int layer = 0; layer < model.layers; ++layer) {
    for (LoraTarget target : kLoraTargets) {
      if (!lora.Targets(target)) continue;
      const uint64_t width = target == LoraTarget::kQuery ? model.q_dim() : model.kv_dim();
      out.push_back({layer, target, 'A', LoraTensorName(layer, target, 'A'), {r, hidden}});
      out.push_back({layer, target, 'B', LoraTensorName(layer, target, 'B'), {width, r}});
    }
  }
  return out;
}

Status CheckLoraTensors(const fn::SafetensorsFile& file, const LoraConfig& lora,
                        const decoder::DecoderConfig& model) {
  std::set<std::string, std::less<>> expected;
  for (const LoraMatrix& m : LoraMatrices(lora, model)) {
    expected.insert(m.name);
    if (!file.Contains(m.name)) {
      return Status::InvalidArgument(file.path() + ": " + m.name + " missing (adapter_config.json targets " +
                                     std::string(LoraTargetName(m.target)) + ", config.json has " +
                                     std::to_string(model.layers) + " layers)");
    }
    PHOS_ASSIGN_OR_RETURN(const fn::TensorInfo* t, file.Tensor(m.name));
    if (t->shape != m.shape) {
      return Status::InvalidArgument(
          file.path() + ": " + m.name + " has shape " + ShapeText(t->shape) + ", the model needs " +
          ShapeText(m.shape) + " (an adapter for another model, or r other than adapter_config.json's)");
    }
  }
  for (const std::string& name : file.TensorNames()) {
    if (!expected.contains(name)) {
      return Status::InvalidArgument(
          file.path() + ": unexpected tensor " + name +
          " (only lora_A and lora_B of the targeted q_proj/v_proj of each layer are applied)");
    }
  }
  return Status::Ok();
}

}  // namespace phos::llama
