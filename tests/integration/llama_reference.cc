#include "llama_reference.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>

#include "phos/fn/checkpoint.h"
#include "phos/fn/safetensors.h"

namespace phos::testing {

void LlamaReference::Load(const std::string& dir) {
  std::ifstream in(dir + "/config.json");
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json c = nlohmann::json::parse(text.str());
  hidden_ = c["hidden_size"];
  intermediate_ = c["intermediate_size"];
  heads_ = c["num_attention_heads"];
  kv_heads_ = c["num_key_value_heads"];
  head_dim_ = hidden_ / heads_;
  vocab_ = c["vocab_size"];
  eps_ = c["rms_norm_eps"];
  theta_ = c["rope_theta"];
  const int layers = c["num_hidden_layers"];
  const bool tied = c.value("tie_word_embeddings", false);
  experts_ = c.value("num_local_experts", 0);
  experts_per_token_ = c.value("num_experts_per_tok", 0);

  auto checkpoint = fn::Checkpoint::Open(dir);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status().ToString();
  auto read = [&](const std::string& name, Matrix& out) {
    auto values = (*checkpoint)->ReadAsFloat32(name);
    ASSERT_TRUE(values.ok()) << name << ": " << values.status().ToString();
    out.assign(values->begin(), values->end());
  };
  read("model.embed_tokens.weight", embed_);
  read("model.norm.weight", norm_);
  if (tied) {
    lm_head_ = embed_;
  } else {
    read("lm_head.weight", lm_head_);
  }
  layers_.resize(layers);
  for (int i = 0; i < layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    Layer& l = layers_[i];
    read(p + "self_attn.q_proj.weight", l.q);
    read(p + "self_attn.k_proj.weight", l.k);
    read(p + "self_attn.v_proj.weight", l.v);
    read(p + "self_attn.o_proj.weight", l.o);
    if (experts_ == 0) {
      read(p + "mlp.gate_proj.weight", l.gate);
      read(p + "mlp.up_proj.weight", l.up);
      read(p + "mlp.down_proj.weight", l.down);
    } else {
      read(p + "block_sparse_moe.gate.weight", l.router);
      l.experts.resize(experts_);
      for (int j = 0; j < experts_; ++j) {
        const std::string e = p + "block_sparse_moe.experts." + std::to_string(j) + ".";
        read(e + "w1.weight", l.experts[j].w1);
        read(e + "w2.weight", l.experts[j].w2);
        read(e + "w3.weight", l.experts[j].w3);
      }
    }
    read(p + "input_layernorm.weight", l.input_norm);
    read(p + "post_attention_layernorm.weight", l.post_attention_norm);
  }
}

void LlamaReference::MergeAdapter(const std::string& dir) {
  std::ifstream in(dir + "/adapter_config.json");
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json c = nlohmann::json::parse(text.str());
  const int r = c["r"];
  const double scale = c["lora_alpha"].get<double>() / r;
  auto file = fn::SafetensorsFile::Open(dir + "/adapter_model.safetensors");
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  for (const std::string target : c["target_modules"]) {
    ASSERT_TRUE(target == "q_proj" || target == "v_proj") << target;
    for (size_t i = 0; i < layers_.size(); ++i) {
      const std::string p = "base_model.model.model.layers." + std::to_string(i) + ".self_attn." + target;
      auto a = (*file)->ReadAsFloat32(p + ".lora_A.weight");  // [r, hidden]
      auto b = (*file)->ReadAsFloat32(p + ".lora_B.weight");  // [out, r]
      ASSERT_TRUE(a.ok() && b.ok()) << p;
      Matrix& w = target == "q_proj" ? layers_[i].q : layers_[i].v;  // [out, hidden]
      const size_t out = w.size() / hidden_;
      ASSERT_EQ(a->size(), static_cast<size_t>(r) * hidden_);
      ASSERT_EQ(b->size(), out * r);
      for (size_t o = 0; o < out; ++o) {
        for (int j = 0; j < hidden_; ++j) {
          double ba = 0;
          for (int k = 0; k < r; ++k) ba += double{(*b)[o * r + k]} * (*a)[static_cast<size_t>(k) * hidden_ + j];
          w[o * hidden_ + j] += scale * ba;
        }
      }
    }
  }
}

LlamaReference::Matrix LlamaReference::Linear(const Matrix& w, const Matrix& x, int n, int in, int out) {
  Matrix y(static_cast<size_t>(n) * out, 0.0);
  for (int t = 0; t < n; ++t) {
    for (int o = 0; o < out; ++o) {
      double sum = 0;
      for (int i = 0; i < in; ++i)
        sum += w[static_cast<size_t>(o) * in + i] * x[static_cast<size_t>(t) * in + i];
      y[static_cast<size_t>(t) * out + o] = sum;
    }
  }
  return y;
}

LlamaReference::Matrix LlamaReference::RmsNorm(const Matrix& x, const Matrix& w, int n) const {
  Matrix y(x.size());
  for (int t = 0; t < n; ++t) {
    double squares = 0;
    for (int j = 0; j < hidden_; ++j) squares += x[t * hidden_ + j] * x[t * hidden_ + j];
    const double scale = 1.0 / std::sqrt(squares / hidden_ + eps_);
    for (int j = 0; j < hidden_; ++j) y[t * hidden_ + j] = x[t * hidden_ + j] * scale * w[j];
  }
  return y;
}

// Hugging Face's rotate_half: x * cos + rotate_half(x) * sin, with rotate_half(x) = (-x2, x1) for
// the halves x1, x2 of each head, and frequency theta^(-2i/head_dim) for pair i.
void LlamaReference::Rotate(Matrix& x, int n, int heads) const {
  const int half = head_dim_ / 2;
  for (int t = 0; t < n; ++t) {
    for (int h = 0; h < heads; ++h) {
      double* v = &x[(static_cast<size_t>(t) * heads + h) * head_dim_];
      for (int i = 0; i < half; ++i) {
        const double angle = t * std::pow(theta_, -2.0 * i / head_dim_);
        const double a = v[i], b = v[i + half];
        v[i] = a * std::cos(angle) - b * std::sin(angle);
        v[i + half] = b * std::cos(angle) + a * std::sin(angle);
      }
    }
  }
}

LlamaReference::Matrix LlamaReference::SwiGlu(const Matrix& gate, const Matrix& up, const Matrix& down,
                                              const Matrix& x, int n) const {
  Matrix g = Linear(gate, x, n, hidden_, intermediate_);
  Matrix u = Linear(up, x, n, hidden_, intermediate_);
  for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
  return Linear(down, g, n, intermediate_, hidden_);
}

// MixtralSparseMoeBlock: routing_weights = softmax(router logits) over all experts, the top k of
// them (torch.topk: the larger first; equal values here to the lower index), divided by their
// sum; the output is the routing-weighted sum of those experts' outputs.
LlamaReference::Matrix LlamaReference::SparseMoe(const Layer& layer, int index, const Matrix& x, int n,
                                                 std::set<std::pair<int, int>>* routed) const {
  Matrix logits = Linear(layer.router, x, n, hidden_, experts_);
  Matrix out(static_cast<size_t>(n) * hidden_, 0.0);
  for (int t = 0; t < n; ++t) {
    const double* row = &logits[static_cast<size_t>(t) * experts_];
    const double top = *std::max_element(row, row + experts_);
    std::vector<double> probabilities(experts_);
    double total = 0;
    for (int e = 0; e < experts_; ++e) total += (probabilities[e] = std::exp(row[e] - top));
    for (double& p : probabilities) p /= total;
    std::vector<int> order(experts_);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return probabilities[a] > probabilities[b]; });
    double chosen = 0;
    for (int j = 0; j < experts_per_token_; ++j) chosen += probabilities[order[j]];
    const Matrix token(x.begin() + static_cast<long>(t) * hidden_,
                       x.begin() + static_cast<long>(t + 1) * hidden_);
    for (int j = 0; j < experts_per_token_; ++j) {
      const Expert& e = layer.experts[order[j]];
      const Matrix y = SwiGlu(e.w1, e.w3, e.w2, token, 1);
      for (int d = 0; d < hidden_; ++d)
        out[static_cast<size_t>(t) * hidden_ + d] += probabilities[order[j]] / chosen * y[d];
      if (routed != nullptr) routed->emplace(index, order[j]);
    }
  }
  return out;
}

std::vector<double> LlamaReference::NextLogits(const std::vector<int>& tokens) const {
  Matrix x = HiddenStates(tokens, nullptr);
  Matrix last(x.end() - hidden_, x.end());
  return Linear(lm_head_, RmsNorm(last, norm_, 1), 1, hidden_, vocab_);
}

std::set<std::pair<int, int>> LlamaReference::RoutedExperts(const std::vector<int>& tokens) const {
  std::set<std::pair<int, int>> routed;
  HiddenStates(tokens, &routed);
  return routed;
}

LlamaReference::Matrix LlamaReference::HiddenStates(const std::vector<int>& tokens,
                                                    std::set<std::pair<int, int>>* routed) const {
  const int n = static_cast<int>(tokens.size());
  const int q_dim = heads_ * head_dim_, kv_dim = kv_heads_ * head_dim_;
  Matrix x(static_cast<size_t>(n) * hidden_);
  for (int t = 0; t < n; ++t) {
    for (int j = 0; j < hidden_; ++j)
      x[t * hidden_ + j] = embed_[static_cast<size_t>(tokens[t]) * hidden_ + j];
  }
  for (size_t index = 0; index < layers_.size(); ++index) {
    const Layer& l = layers_[index];
    Matrix normed = RmsNorm(x, l.input_norm, n);
    Matrix q = Linear(l.q, normed, n, hidden_, q_dim);
    Matrix k = Linear(l.k, normed, n, hidden_, kv_dim);
    Matrix v = Linear(l.v, normed, n, hidden_, kv_dim);
    Rotate(q, n, heads_);
    Rotate(k, n, kv_heads_);
    Matrix attention(static_cast<size_t>(n) * q_dim, 0.0);
    for (int t = 0; t < n; ++t) {
      for (int h = 0; h < heads_; ++h) {
        const int g = h / (heads_ / kv_heads_);
        const double* qh = &q[(static_cast<size_t>(t) * heads_ + h) * head_dim_];
        std::vector<double> scores(t + 1);
        double top = -INFINITY;
        for (int s = 0; s <= t; ++s) {
          const double* ks = &k[(static_cast<size_t>(s) * kv_heads_ + g) * head_dim_];
          double dot = 0;
          for (int d = 0; d < head_dim_; ++d) dot += qh[d] * ks[d];
          scores[s] = dot / std::sqrt(static_cast<double>(head_dim_));
          top = std::max(top, scores[s]);
        }
        double total = 0;
        for (double& s : scores) total += (s = std::exp(s - top));
        double* out = &attention[(static_cast<size_t>(t) * heads_ + h) * head_dim_];
        for (int s = 0; s <= t; ++s) {
          const double* vs = &v[(static_cast<size_t>(s) * kv_heads_ + g) * head_dim_];
          for (int d = 0; d < head_dim_; ++d) out[d] += scores[s] / total * vs[d];
        }
      }
    }
    Matrix o = Linear(l.o, attention, n, q_dim, hidden_);
    for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];
    normed = RmsNorm(x, l.post_attention_norm, n);
    const Matrix down = experts_ == 0 ? SwiGlu(l.gate, l.up, l.down, normed, n)
                                      : SparseMoe(l, static_cast<int>(index), normed, n, routed);
    for (size_t i = 0; i < x.size(); ++i) x[i] += down[i];
  }
  return x;
}

}  // namespace phos::testing
