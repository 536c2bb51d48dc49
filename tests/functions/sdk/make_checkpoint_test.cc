// scripts/make-checkpoint.py read back through Checkpoint: LlamaForCausalLM's and
// MixtralForCausalLM's tensor names and shapes, config.json, values independent of sharding and
// fixed by the seed, --size-mib counting every expert.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "phos/base/subprocess.h"
#include "phos/fn/checkpoint.h"
#include "safetensors_writer.h"

namespace phos::fn {
namespace {

using testing::ScratchDir;

// A 2-layer model with grouped-query attention (4 query heads over 2 key/value heads).
constexpr uint64_t kHidden = 64, kHeads = 4, kKvHeads = 2, kIntermediate = 160, kVocab = 97;

class MakeCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string(PHOS_PYTHON3).empty() || access(PHOS_PYTHON3, X_OK) != 0) {
      GTEST_SKIP() << "python3 was not found when the build was configured; the script needs it";
    }
    ASSERT_FALSE(dir_.path().empty()) << "no scratch directory";
  }

  // Runs the script into dir_/name; returns the directory.
  std::string Make(const std::string& name, std::vector<std::string> extra) {
    const std::string out = dir_.File(name);
    SpawnOptions o;
    o.argv = {PHOS_PYTHON3,     PHOS_MAKE_CHECKPOINT_SCRIPT,   "--out",      out,
              "--hidden",       std::to_string(kHidden),       "--layers",   "2",
              "--heads",        std::to_string(kHeads),        "--kv-heads", std::to_string(kKvHeads),
              "--intermediate", std::to_string(kIntermediate), "--vocab",    std::to_string(kVocab)};
    o.argv.insert(o.argv.end(), extra.begin(), extra.end());
    o.stdin_null = true;
    auto child = Subprocess::Spawn(o);
    EXPECT_TRUE(child.ok()) << child.status().ToString();
    if (!child.ok()) return out;
    auto how = child->Wait(std::chrono::seconds(60));
    EXPECT_TRUE(how.ok() && how->success()) << (how.ok() ? how->ToString() : how.status().ToString());
    return out;
  }

  ScratchDir dir_;
};

// Every tensor LlamaForCausalLM has for 2 layers, with its [out, in] shape.
std::vector<std::pair<std::string, std::vector<uint64_t>>> LlamaTensors(bool tied) {
  const uint64_t head_dim = kHidden / kHeads;
  std::vector<std::pair<std::string, std::vector<uint64_t>>> t = {
      {"model.embed_tokens.weight", {kVocab, kHidden}}, {"model.norm.weight", {kHidden}}};
  if (!tied) t.push_back({"lm_head.weight", {kVocab, kHidden}});
  for (int i = 0; i < 2; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    t.push_back({p + "self_attn.q_proj.weight", {kHeads * head_dim, kHidden}});
    t.push_back({p + "self_attn.k_proj.weight", {kKvHeads * head_dim, kHidden}});
    t.push_back({p + "self_attn.v_proj.weight", {kKvHeads * head_dim, kHidden}});
    t.push_back({p + "self_attn.o_proj.weight", {kHidden, kHeads * head_dim}});
    t.push_back({p + "mlp.gate_proj.weight", {kIntermediate, kHidden}});
    t.push_back({p + "mlp.up_proj.weight", {kIntermediate, kHidden}});
    t.push_back({p + "mlp.down_proj.weight", {kHidden, kIntermediate}});
    t.push_back({p + "input_layernorm.weight", {kHidden}});
    t.push_back({p + "post_attention_layernorm.weight", {kHidden}});
  }
  return t;
}

TEST_F(MakeCheckpointTest, WritesLlamaTensorsThatShardingDoesNotChange) {
  const std::string single = Make("single", {"--dtype", "bf16", "--seed", "7"});
  const std::string sharded = Make("sharded", {"--dtype", "bf16", "--seed", "7", "--shards", "3"});
  auto a = Checkpoint::Open(single);
  auto b = Checkpoint::Open(sharded);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  const auto expected = LlamaTensors(/*tied=*/false);
  EXPECT_EQ((*a)->TensorNames().size(), expected.size());
  EXPECT_EQ((*a)->TensorNames(), (*b)->TensorNames());
  for (const auto& [name, shape] : expected) {
    SCOPED_TRACE(name);
    auto tensor = (*a)->Tensor(name);
    ASSERT_TRUE(tensor.ok()) << tensor.status().ToString();
    EXPECT_EQ((*tensor)->dtype, Dtype::kBF16);
    EXPECT_EQ((*tensor)->shape, shape);
    auto va = (*a)->ReadAsFloat32(name);
    auto vb = (*b)->ReadAsFloat32(name);
    ASSERT_TRUE(va.ok() && vb.ok());
    EXPECT_EQ(*va, *vb);
    const bool norm = name.ends_with("norm.weight");
    for (float v : *va) {
      // Matrices between 2^-11 and 2^-3 in magnitude, RMSNorm weights in [0.5, 2).
      ASSERT_TRUE(norm ? (v >= 0.5f && v < 2.0f) : (std::fabs(v) >= 0x1p-11f && std::fabs(v) < 0.125f)) << v;
    }
  }
}

TEST_F(MakeCheckpointTest, WritesTheLlamaConfig) {
  const std::string dir =
      Make("config", {"--dtype", "f16", "--tie-word-embeddings", "--rope-theta", "500000"});
  std::ifstream in(dir + "/config.json");
  const nlohmann::json config = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(config.is_object());
  EXPECT_EQ(config["architectures"][0], "LlamaForCausalLM");
  EXPECT_EQ(config["hidden_size"], kHidden);
  EXPECT_EQ(config["intermediate_size"], kIntermediate);
  EXPECT_EQ(config["num_hidden_layers"], 2);
  EXPECT_EQ(config["num_attention_heads"], kHeads);
  EXPECT_EQ(config["num_key_value_heads"], kKvHeads);
  EXPECT_EQ(config["vocab_size"], kVocab);
  EXPECT_EQ(config["rope_theta"], 500000.0);
  EXPECT_EQ(config["rms_norm_eps"], 1e-5);
  EXPECT_EQ(config["max_position_embeddings"], 2048);
  EXPECT_EQ(config["tie_word_embeddings"], true);

  auto ck = Checkpoint::Open(dir);
  ASSERT_TRUE(ck.ok()) << ck.status().ToString();
  EXPECT_FALSE((*ck)->Contains("lm_head.weight"));  // tied: the logits use the embeddings
  EXPECT_EQ((*ck)->TensorNames().size(), LlamaTensors(/*tied=*/true).size());
  auto embed = (*ck)->Tensor("model.embed_tokens.weight");
  ASSERT_TRUE(embed.ok());
  EXPECT_EQ((*embed)->dtype, Dtype::kF16);
}

TEST_F(MakeCheckpointTest, WritesMixtralExpertsInPlaceOfTheMlp) {
  const std::string dir = Make("mixtral", {"--dtype", "f16", "--experts", "3", "--experts-per-token", "2"});
  std::ifstream in(dir + "/config.json");
  const nlohmann::json config = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(config.is_object());
  EXPECT_EQ(config["architectures"][0], "MixtralForCausalLM");
  EXPECT_EQ(config["model_type"], "mixtral");
  EXPECT_EQ(config["num_local_experts"], 3);
  EXPECT_EQ(config["num_experts_per_tok"], 2);
  EXPECT_EQ(config["intermediate_size"], kIntermediate);

  auto ck = Checkpoint::Open(dir);
  ASSERT_TRUE(ck.ok()) << ck.status().ToString();
  std::vector<std::pair<std::string, std::vector<uint64_t>>> expected;
  for (const auto& t : LlamaTensors(/*tied=*/false)) {
    if (t.first.find(".mlp.") == std::string::npos) expected.push_back(t);
  }
  for (int i = 0; i < 2; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".block_sparse_moe.";
    expected.push_back({p + "gate.weight", {3, kHidden}});
    for (int j = 0; j < 3; ++j) {
      const std::string e = p + "experts." + std::to_string(j) + ".";
      expected.push_back({e + "w1.weight", {kIntermediate, kHidden}});
      expected.push_back({e + "w2.weight", {kHidden, kIntermediate}});
      expected.push_back({e + "w3.weight", {kIntermediate, kHidden}});
    }
  }
  EXPECT_EQ((*ck)->TensorNames().size(), expected.size());
  for (const auto& [name, shape] : expected) {
    SCOPED_TRACE(name);
    auto tensor = (*ck)->Tensor(name);
    ASSERT_TRUE(tensor.ok()) << tensor.status().ToString();
    EXPECT_EQ((*tensor)->shape, shape);
  }
  // The attention weights are the Llama checkpoint's: each tensor's values depend on its name.
  auto dense = Checkpoint::Open(Make("dense-f16", {"--dtype", "f16"}));
  ASSERT_TRUE(dense.ok());
  EXPECT_EQ(*(*ck)->ReadAsFloat32("model.layers.1.self_attn.k_proj.weight"),
            *(*dense)->ReadAsFloat32("model.layers.1.self_attn.k_proj.weight"));
}

TEST_F(MakeCheckpointTest, SizeMibCountsEveryExpert) {
  // --size-mib chooses the shape, so the fixed sizes Make passes are replaced.
  const std::string out = dir_.File("sized");
  SpawnOptions o;
  o.argv = {PHOS_PYTHON3, PHOS_MAKE_CHECKPOINT_SCRIPT,
            "--out",      out,
            "--size-mib", "24",
            "--vocab",    "512",
            "--experts",  "8",
            "--dtype",    "bf16"};
  o.stdin_null = true;
  auto child = Subprocess::Spawn(o);
  ASSERT_TRUE(child.ok()) << child.status().ToString();
  auto how = child->Wait(std::chrono::seconds(60));
  ASSERT_TRUE(how.ok() && how->success());
  auto ck = Checkpoint::Open(out);
  ASSERT_TRUE(ck.ok()) << ck.status().ToString();
  uint64_t bytes = 0;
  for (const std::string& name : (*ck)->TensorNames()) bytes += (*(*ck)->Bytes(name)).size();
  // Whole layers of 8 experts, about 8.6 MiB each at hidden 256: within half a layer of the
  // target. Sized without the experts, the model would have 17 layers (146 MiB).
  EXPECT_NEAR(static_cast<double>(bytes) / (1 << 20), 24.0, 4.3);
  EXPECT_TRUE((*ck)->Contains("model.layers.0.block_sparse_moe.experts.7.w2.weight"));
}

TEST_F(MakeCheckpointTest, TheSeedDecidesTheValues) {
  auto a = Checkpoint::Open(Make("seed1", {"--dtype", "f32", "--seed", "1"}));
  auto again = Checkpoint::Open(Make("seed1-again", {"--dtype", "f32", "--seed", "1"}));
  auto b = Checkpoint::Open(Make("seed2", {"--dtype", "f32", "--seed", "2"}));
  ASSERT_TRUE(a.ok() && again.ok() && b.ok());
  const std::string name = "model.layers.1.mlp.down_proj.weight";
  auto va = (*a)->ReadAsFloat32(name);
  auto vagain = (*again)->ReadAsFloat32(name);
  auto vb = (*b)->ReadAsFloat32(name);
  ASSERT_TRUE(va.ok() && vagain.ok() && vb.ok());
  EXPECT_EQ(*va, *vagain);
  EXPECT_NE(*va, *vb);
}

// --adapter-out: PEFT's files and tensor names for the targets asked, B not zero, and values fixed
// by --adapter-seed alone (fine-tunes of one base differ only in it).
TEST_F(MakeCheckpointTest, WritesAPeftLoraAdapter) {
  const std::string adapter = dir_.File("adapter");
  Make("base", {"--dtype", "f32", "--seed", "1", "--adapter-out", adapter, "--rank", "3", "--alpha", "6", "--targets",
                "v_proj", "--adapter-seed", "5"});
  std::ifstream config_file(adapter + "/adapter_config.json");
  nlohmann::json config = nlohmann::json::parse(config_file, nullptr, false);
  ASSERT_TRUE(config.is_object());
  EXPECT_EQ(config["peft_type"], "LORA");
  EXPECT_EQ(config["r"], 3);
  EXPECT_EQ(config["lora_alpha"], 6.0);
  EXPECT_EQ(config["target_modules"], nlohmann::json({"v_proj"}));
  EXPECT_EQ(config["use_dora"], false);
  auto file = SafetensorsFile::Open(adapter + "/adapter_model.safetensors");
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  const uint64_t kv_dim = kKvHeads * (kHidden / kHeads);
  std::vector<std::string> names;
  for (int i = 0; i < 2; ++i) {
    const std::string p = "base_model.model.model.layers." + std::to_string(i) + ".self_attn.v_proj.";
    names.push_back(p + "lora_A.weight");
    names.push_back(p + "lora_B.weight");
    auto a = (*file)->Tensor(p + "lora_A.weight");
    auto b = (*file)->Tensor(p + "lora_B.weight");
    ASSERT_TRUE(a.ok() && b.ok()) << p;
    EXPECT_EQ((*a)->shape, (std::vector<uint64_t>{3, kHidden}));
    EXPECT_EQ((*b)->shape, (std::vector<uint64_t>{kv_dim, 3}));
    auto values = (*file)->ReadAsFloat32(p + "lora_B.weight");
    ASSERT_TRUE(values.ok());
    EXPECT_TRUE(std::all_of(values->begin(), values->end(), [](float v) { return v != 0.0f; }));
  }
  std::sort(names.begin(), names.end());
  EXPECT_EQ((*file)->TensorNames(), names);

  // Another base seed, the same adapter; another adapter seed, another adapter.
  const std::string same = dir_.File("same-adapter"), other = dir_.File("other-adapter");
  Make("unused-base", {"--dtype", "f32", "--seed", "2", "--adapter-out", same, "--rank", "3", "--alpha", "6",
                       "--targets", "v_proj", "--adapter-seed", "5"});
  Make("unused-base-2", {"--dtype", "f32", "--adapter-out", other, "--rank", "3", "--alpha", "6", "--targets",
                         "v_proj", "--adapter-seed", "6"});
  auto same_file = SafetensorsFile::Open(same + "/adapter_model.safetensors");
  auto other_file = SafetensorsFile::Open(other + "/adapter_model.safetensors");
  ASSERT_TRUE(same_file.ok() && other_file.ok());
  const std::string b0 = "base_model.model.model.layers.0.self_attn.v_proj.lora_B.weight";
  EXPECT_EQ(*(*same_file)->ReadAsFloat32(b0), *(*file)->ReadAsFloat32(b0));
  EXPECT_NE(*(*other_file)->ReadAsFloat32(b0), *(*file)->ReadAsFloat32(b0));
}

}  // namespace
}  // namespace phos::fn
