// A LoRA adapter's host side, in PEFT's layout: adapter_config.json, and the tensors of
// adapter_model.safetensors it implies for a given Llama shape. No CUDA, so tests use it without a
// device; lora.h uploads and applies the adapter.
//
// Supported: target_modules q_proj and/or v_proj, rank r, lora_alpha, scale alpha / r. Refused
// with NotSupported naming the field (docs/functions.md lists them): any other target module or a
// target_modules regex, use_dora, use_rslora, fan_in_fan_out, bias other than "none", lora_bias,
// modules_to_save, layers_to_transform, layer_replication, rank_pattern and alpha_pattern, and a
// peft_type other than LORA.
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "phos/base/status.h"
#include "phos/decoder/decoder_config.h"
#include "phos/fn/safetensors.h"

namespace phos::llama {

inline constexpr std::string_view kLoraConfigName = "adapter_config.json";
inline constexpr std::string_view kLoraWeightsName = "adapter_model.safetensors";

// The projections an adapter may modify; the decoder adds the low-rank term right after each.
enum class LoraTarget { kQuery, kValue };
inline constexpr std::array<LoraTarget, 2> kLoraTargets = {LoraTarget::kQuery, LoraTarget::kValue};

// "q_proj", "v_proj": PEFT's target_modules names.
std::string_view LoraTargetName(LoraTarget target);

struct LoraConfig {
  int rank = 0;        // r
  double alpha = 0;    // lora_alpha
  bool query = false;  // q_proj in target_modules
  bool value = false;  // v_proj in target_modules

  bool Targets(LoraTarget target) const { return target == LoraTarget::kQuery ? query : value; }
  // PEFT's scaling of B A x without rsLoRA.
  float scale() const { return static_cast<float>(alpha / rank); }
};

// Parses adapter_config.json's text: InvalidArgument for a malformed field, NotSupported for a
// PEFT feature this decoder does not implement.
Result<LoraConfig> ParseLoraConfig(std::string_view json);
Result<LoraConfig> ReadLoraConfig(const std::string& adapter_dir);

// PEFT's name of one matrix: base_model.model.model.layers.{layer}.self_attn.{q,v}_proj.lora_{A,B}.weight.
std::string LoraTensorName(int layer, LoraTarget target, char matrix);

// One matrix the adapter must hold, with the shape the model needs: A is [r, hidden], B is
// [out, r] with out the projection's width (q_dim or kv_dim).
struct LoraMatrix {
  int layer = 0;
  LoraTarget target = LoraTarget::kQuery;
  char matrix = 'A';
  std::string name;
  std::vector<uint64_t> shape;
};

// Every matrix the adapter needs for `model`, layer by layer, A before B.
std::vector<LoraMatrix> LoraMatrices(const LoraConfig& lora, const decoder::DecoderConfig& model);

// Checks that `file` holds exactly LoraMatrices(lora, model): none missing, each of its shape,
// no other tensor (an adapter for other modules or layers is refused rather than half applied).
// InvalidArgument names the tensor and, for a shape, both shapes.
Status CheckLoraTensors(const fn::SafetensorsFile& file, const LoraConfig& lora,
                        const decoder::DecoderConfig& model);

}  // namespace phos::llama
