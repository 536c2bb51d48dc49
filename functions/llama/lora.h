// LoraAdapter: a PEFT LoRA adapter on the device, applied unmerged after the q and v projections.
//
// The base checkpoint's tensors are never modified: the decoder computes y = W x, then Apply adds
// (alpha / r) · B (A x) with two small SGEMMs. The base's device buffers therefore keep the
// checkpoint's bytes exactly, so every fine-tune of one base shares the base's chunks in the
// snapshot store and DRAM tier (docs/design.md D6); only the adapter's buffer differs.
//
//   PHOS_ASSIGN_OR_RETURN(auto adapter, LoraAdapter::Load(adapter_dir, config));
//   ... y = x W_q^T ...
//   PHOS_RETURN_IF_ERROR(adapter->Apply(blas, layer, LoraTarget::kQuery, x, y, tokens));
#pragma once

#include <cublas_v2.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "llama_config.h"
#include "lora_config.h"
#include "phos/base/status.h"

namespace phos::llama {

class LoraAdapter {
 public:
  // Reads adapter_config.json and adapter_model.safetensors from `adapter_dir`, checks them
  // against `model` (lora_config.h says what is refused), and uploads every matrix, as fp32, into
  // ONE device buffer: a request reads all of an adapter, so one buffer costs nothing in restore
  // priority and keeps a small adapter in a few store chunks rather than one per matrix. Also
  // allocates the [max_positions, r] intermediate A x.
  static Result<std::unique_ptr<LoraAdapter>> Load(const std::string& adapter_dir, const LlamaConfig& model);

  LoraAdapter(const LoraAdapter&) = delete;
  LoraAdapter& operator=(const LoraAdapter&) = delete;
  ~LoraAdapter();  // cudaFree

  const LoraConfig& config() const { return config_; }
  // Bytes of the device buffer holding the matrices.
  uint64_t weight_bytes() const { return weight_elements_ * sizeof(float); }

  // y [n, out] += (alpha / r) · (x [n, hidden] A^T) B^T for `target` of `layer`, on `blas`'s
  // stream; nothing when the adapter does not target that projection. x and y must not overlap.
  Status Apply(cublasHandle_t blas, int layer, LoraTarget target, const float* x, float* y, int n);

 private:
  // Where a projection's A and B start in weights_ (elements); kAbsent for an untargeted one.
  struct Offsets {
    uint64_t a = kAbsent;
    uint64_t b = kAbsent;
  };
  static constexpr uint64_t kAbsent = ~uint64_t{0};

  LoraAdapter(LoraConfig config, LlamaConfig model) : config_(config), model_(model) {}
  Offsets& At(int layer, LoraTarget target) { return offsets_[2 * layer + (target == LoraTarget::kValue)]; }

  LoraConfig config_;
  LlamaConfig model_;
  std::vector<Offsets> offsets_;  // [layer][target]
  float* weights_ = nullptr;      // every A and B, row-major, one after another
  uint64_t weight_elements_ = 0;
  float* intermediate_ = nullptr;  // A x: [max_positions, r]
};

}  // namespace phos::llama
