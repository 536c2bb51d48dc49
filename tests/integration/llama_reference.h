// A CPU reference of the Llama decoder, written from the architecture (Hugging Face's
// LlamaForCausalLM) independently of the llama function: double precision, no KV cache (every
// step recomputes the whole sequence), config.json read directly.
#pragma once

#include <string>
#include <vector>

namespace phos::testing {

class LlamaReference {
 public:
  // Reads config.json and every tensor of the checkpoint in `dir`; fails the current test on a
  // bad directory (check HasFatalFailure).
  void Load(const std::string& dir);

  // Adds a PEFT LoRA adapter (adapter_config.json, adapter_model.safetensors in `dir`) to the
  // loaded weights the way PEFT's merge_and_unload does, W += (lora_alpha / r) B A for each of
  // q_proj and v_proj it targets: merged, where the function applies it unmerged. Fails the
  // current test on a bad directory.
  void MergeAdapter(const std::string& dir);

  // The logits after the last of `tokens` (at positions 0 .. size - 1).
  std::vector<double> NextLogits(const std::vector<int>& tokens) const;
  int vocab() const { return vocab_; }

 private:
  using Matrix = std::vector<double>;  // row-major [out, in]
  struct Layer {
    Matrix q, k, v, o, gate, up, down, input_norm, post_attention_norm;
  };
  // y [n, out] = x [n, in] W^T.
  static Matrix Linear(const Matrix& w, const Matrix& x, int n, int in, int out);
  Matrix RmsNorm(const Matrix& x, const Matrix& w, int n) const;
  void Rotate(Matrix& x, int n, int heads) const;

  int hidden_ = 0, intermediate_ = 0, heads_ = 0, kv_heads_ = 0, head_dim_ = 0, vocab_ = 0;
  double eps_ = 0, theta_ = 0;
  Matrix embed_, norm_, lm_head_;
  std::vector<Layer> layers_;
};

}  // namespace phos::testing
