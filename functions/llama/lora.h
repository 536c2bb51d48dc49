// LoraAdapter: a PEFT LoRA adapter on the device, applied unmerged after the q and v projections.
//
// The base checkpoint's tensors are never modified: the shared decoder computes y = W x, then
// calls the adapter (a phos::decoder::ProjectionAdapter), which adds (alpha / r) · B (A x) with
// two small SGEMMs. The base's device buffers therefore keep the checkpoint's bytes exactly, so
// every fine-tune of one base shares the base's chunks in the snapshot store and DRAM tier
// (docs/design.md D6); only the adapter's buffers differ.
//
//   PHOS_ASSIGN_OR_RETURN(auto adapter, LoraAdapter::Load(adapter_dir, decoder->config()));
//   decoder->set_projection_adapter(adapter.get());
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lora_config.h"
#include "phos/base/status.h"
#include "phos/decoder/decoder.h"

namespace phos::llama {

class LoraAdapter final : public decoder::ProjectionAdapter {
 public:
  // Reads adapter_config.json and adapter_model.safetensors from `adapter_dir`, checks them
  // against `model` (lora_config.h says what is refused), and uploads every matrix, as fp32, into
  // ONE device buffer: a request reads all of an adapter, so one buffer costs nothing in restore
  // priority and keeps a small adapter in a few store chunks rather than one per matrix. Also
  // allocates the [max_positions, r] intermediate A x.
  static Result<std::unique_ptr<LoraAdapter>> Load(const std::string& adapter_dir,
                                                   const decoder::DecoderConfig& model);

  LoraAdapter(const LoraAdapter&) = delete;
  LoraAdapter& operator=(const LoraAdapter&) = delete;

  const LoraConfig& config() const { return config_; }
  // Bytes of the device buffer holding the matrices.
  uint64_t weight_bytes() const { return weight_elements_ * sizeof(float); }

  // y [n, out] += (alpha / r) · (x [n, hidden] A^T) B^T for `projection` of `layer`, on the
  // decoder's stream; nothing when the adapter does not target that projection. InvalidArgument
  // for a layer or token count outside the model the adapter was loaded for.
  Status AfterProjection(decoder::Decoder& decoder, int layer, decoder::Projection projection, const float* x,
                         float* y, int n) override;

 private:
  // Where a projection's A and B start in weights_ (elements); kAbsent for an untargeted one.
  struct Offsets {
    uint64_t a = kAbsent;
    uint64_t b = kAbsent;
  };
  static constexpr uint64_t kAbsent = ~uint64_t{0};

  LoraAdapter(LoraConfig config, decoder::DecoderConfig model) : config_(config), model_(model) {}
  Offsets& At(int layer, LoraTarget target) { return offsets_[2 * layer + (target == LoraTarget::kValue)]; }

  LoraConfig config_;
  decoder::DecoderConfig model_;
  std::vector<Offsets> offsets_;         // [layer][target]
  decoder::DeviceArray<float> weights_;  // every A and B, row-major, one after another
  uint64_t weight_elements_ = 0;
  decoder::DeviceArray<float> intermediate_;  // A x: [max_positions, r]
};

}  // namespace phos::llama
