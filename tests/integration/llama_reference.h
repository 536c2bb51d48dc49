// A CPU reference of the Llama decoder, written from the architecture (Hugging Face's
// LlamaForCausalLM) independently of the llama function: double precision, no KV cache (every
// step recomputes the whole sequence), config.json read directly. A Mixtral checkpoint
// (num_local_experts in config.json) gets MixtralForCausalLM's sparse mixture-of-experts block in
// place of the MLP, written from transformers' MixtralSparseMoeBlock independently of the moe
// function.
#pragma once

#include <set>
#include <string>
#include <utility>
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
  // The (layer, expert) pairs the tokens at positions 0 .. size - 1 route to; empty for a dense
  // checkpoint.
  std::set<std::pair<int, int>> RoutedExperts(const std::vector<int>& tokens) const;
  int vocab() const { return vocab_; }
  int layers() const { return static_cast<int>(layers_.size()); }
  int experts_per_token() const { return experts_per_token_; }

 private:
  using Matrix = std::vector<double>;  // row-major [out, in]
  struct Expert {
    Matrix w1, w2, w3;  // gate, down, up
  };
  struct Layer {
    Matrix q, k, v, o, gate, up, down, input_norm, post_attention_norm;
    Matrix router;  // [experts, hidden], and the experts, in a Mixtral checkpoint
    std::vector<Expert> experts;
  };
  // y [n, out] = x [n, in] W^T.
  static Matrix Linear(const Matrix& w, const Matrix& x, int n, int in, int out);
  Matrix RmsNorm(const Matrix& x, const Matrix& w, int n) const;
  void Rotate(Matrix& x, int n, int heads) const;
  // silu(gate x) * (up x), then down: LlamaMLP and each of Mixtral's experts.
  Matrix SwiGlu(const Matrix& gate, const Matrix& up, const Matrix& down, const Matrix& x, int n) const;
  // The Mixtral block of layer `index` on x [n, hidden]; adds the experts it routes to to `routed`.
  Matrix SparseMoe(const Layer& layer, int index, const Matrix& x, int n,
                   std::set<std::pair<int, int>>* routed) const;
  // The final hidden states [n, hidden] of `tokens`.
  Matrix HiddenStates(const std::vector<int>& tokens, std::set<std::pair<int, int>>* routed) const;

  int hidden_ = 0, intermediate_ = 0, heads_ = 0, kv_heads_ = 0, head_dim_ = 0, vocab_ = 0;
  int experts_ = 0, experts_per_token_ = 0;  // 0: a dense checkpoint
  double eps_ = 0, theta_ = 0;
  Matrix embed_, norm_, lm_head_;
  std::vector<Layer> layers_;
};

}  // namespace phos::testing
