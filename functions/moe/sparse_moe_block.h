// SparseMoeBlock: the feed-forward half of a Mixtral layer (transformers'
// MixtralSparseMoeBlock) for the shared decoder. A router (block_sparse_moe.gate.weight
// [experts, hidden]) scores every token; each token goes to its k best experts with the softmax
// of the router logits renormalised over those k as weights; the output is the weighted sum of
// the chosen experts' SwiGLU MLPs (w2(silu(w1 x) * w3 x)).
//
// Every expert's three matrices are their own device buffers, and the host decides which experts
// run: the router's choices are copied back, and only the experts some token chose are
// computed, on the rows of the tokens routed to them. A request's calls therefore name only the
// expert buffers its tokens route to — it reads a fraction of the weights, and phos's
// speculation of a call's read set sees exactly which.
#pragma once

#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "phos/base/status.h"
#include "phos/decoder/decoder.h"

namespace phos::moe {

// MixtralForCausalLM's own config.json fields.
struct MoeConfig {
  int experts = 0;            // num_local_experts
  int experts_per_token = 0;  // num_experts_per_tok, 1 <= k <= experts
};

// InvalidArgument naming a missing or inconsistent field; NotSupported for a sliding_window
// shorter than the context.
Result<MoeConfig> ParseMoeConfig(const nlohmann::json& config);

// (layer, expert) pairs, sorted.
using ExpertSet = std::set<std::pair<int, int>>;

class SparseMoeBlock final : public decoder::FeedForward {
 public:
  explicit SparseMoeBlock(const MoeConfig& config) : config_(config) {}

  Status LoadLayer(const fn::Checkpoint& checkpoint, const decoder::DecoderConfig& config, int layer,
                   const std::string& prefix) override;
  Status AllocateWorkspace(const decoder::DecoderConfig& config, int rows) override;
  Status Apply(decoder::Decoder& decoder, int layer, const float* x, float* out, int n) override;

  const MoeConfig& config() const { return config_; }
  // Every expert that ran since the last ClearExpertsRun.
  const ExpertSet& experts_run() const { return experts_run_; }
  void ClearExpertsRun() { experts_run_.clear(); }

 private:
  struct Expert {
    fn::DeviceTensor w1, w3, w2;  // gate [inter, hidden], up [inter, hidden], down [hidden, inter]
  };
  struct Layer {
    fn::DeviceTensor router;  // [experts, hidden]
    std::vector<Expert> experts;
  };

  const MoeConfig config_;
  int hidden_ = 0, intermediate_ = 0;
  std::vector<Layer> layers_;
  ExpertSet experts_run_;
  // The router's logits [rows, experts], choices and weights [rows, k]; the routed tokens' rows
  // and weights grouped by expert [rows * k]; one expert's inputs, hidden and outputs.
  decoder::DeviceArray<float> router_logits_, router_weights_, routed_weights_;
  decoder::DeviceArray<int> router_choices_, routed_rows_;
  decoder::DeviceArray<float> expert_in_, gate_, up_, expert_out_;
};

}  // namespace phos::moe
