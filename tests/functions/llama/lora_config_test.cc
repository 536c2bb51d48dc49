// The LoRA adapter's host side (functions/llama/lora_config.h): what adapter_config.json may say,
// and the tensor checks against a model's shape, on hostile files too.
#include "lora_config.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "phos/fn/safetensors.h"
#include "safetensors_writer.h"

namespace phos::llama {
namespace {

using fn::testing::ScratchDir;

// The fields PEFT writes for a plain LoRA on q_proj and v_proj.
nlohmann::json PlainConfig() {
  return {{"peft_type", "LORA"},
          {"r", 4},
          {"lora_alpha", 16},
          {"target_modules", {"q_proj", "v_proj"}},
          {"bias", "none"},
          {"fan_in_fan_out", false},
          {"use_dora", false},
          {"use_rslora", false},
          {"modules_to_save", nullptr},
          {"layers_to_transform", nullptr},
          {"rank_pattern", nlohmann::json::object()},
          {"alpha_pattern", nlohmann::json::object()},
          {"lora_dropout", 0.05},
          {"task_type", "CAUSAL_LM"}};
}

// hidden 8, q_dim 8, kv_dim 4 (two query heads per kv head), one layer.
decoder::DecoderConfig TinyModel() {
  decoder::DecoderConfig m;
  m.hidden = 8;
  m.intermediate = 16;
  m.layers = 1;
  m.heads = 2;
  m.kv_heads = 1;
  m.head_dim = 4;
  m.vocab = 10;
  m.max_positions = 8;
  return m;
}

TEST(LoraConfigTest, PlainLoraParsesWithPeftScaling) {
  Result<LoraConfig> c = ParseLoraConfig(PlainConfig().dump());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->rank, 4);
  EXPECT_TRUE(c->Targets(LoraTarget::kQuery));
  EXPECT_TRUE(c->Targets(LoraTarget::kValue));
  EXPECT_FLOAT_EQ(c->scale(), 4.0f);

  nlohmann::json only_v = PlainConfig();
  only_v["target_modules"] = {"v_proj"};
  only_v["lora_alpha"] = 3.0;
  c = ParseLoraConfig(only_v.dump());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_FALSE(c->Targets(LoraTarget::kQuery));
  EXPECT_FLOAT_EQ(c->scale(), 0.75f);
}

TEST(LoraConfigTest, MalformedFieldsAreInvalidArguments) {
  const std::pair<std::string, nlohmann::json> cases[] = {
      {"r", 0},
      {"r", -2},
      {"r", 2.5},
      {"r", "8"},
      {"lora_alpha", "16"},
      {"lora_alpha", nullptr},
      {"target_modules", nlohmann::json::array()},
  };
  for (const auto& [key, value] : cases) {
    nlohmann::json j = PlainConfig();
    j[key] = value;
    Result<LoraConfig> c = ParseLoraConfig(j.dump());
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument) << key << " = " << value;
    EXPECT_NE(c.status().message().find(key), std::string::npos) << c.status().message();
  }
  for (const char* key : {"r", "lora_alpha", "target_modules"}) {
    nlohmann::json j = PlainConfig();
    j.erase(key);
    EXPECT_EQ(ParseLoraConfig(j.dump()).status().code(), StatusCode::kInvalidArgument) << key;
  }
  for (const char* text : {"", "not json", "[1, 2]", "{\"r\": 4", "null"}) {
    EXPECT_EQ(ParseLoraConfig(text).status().code(), StatusCode::kInvalidArgument) << text;
  }
}

TEST(LoraConfigTest, FeaturesTheDecoderLacksAreRefusedByName) {
  const std::pair<std::string, nlohmann::json> cases[] = {
      {"use_dora", true},
      {"use_rslora", true},
      {"fan_in_fan_out", true},
      {"lora_bias", true},
      {"bias", "all"},
      {"modules_to_save", {"lm_head"}},
      {"layers_to_transform", {0}},
      {"layer_replication", {{0, 1}}},
      {"rank_pattern", {{"q_proj", 2}}},
      {"alpha_pattern", {{"v_proj", 4}}},
      {"peft_type", "IA3"},
      {"target_modules", {"q_proj", "k_proj"}},
      {"target_modules", ".*proj"},
  };
  for (const auto& [key, value] : cases) {
    nlohmann::json j = PlainConfig();
    j[key] = value;
    Result<LoraConfig> c = ParseLoraConfig(j.dump());
    EXPECT_EQ(c.status().code(), StatusCode::kNotSupported) << key << " = " << value;
    EXPECT_NE(c.status().message().find(key == "target_modules" && value.is_array() ? "k_proj" : key),
              std::string::npos)
        << c.status().message();
  }
}

TEST(LoraConfigTest, MatricesFollowPeftNamesAndTheModelShape) {
  LoraConfig lora{.rank = 3, .alpha = 6, .query = true, .value = true};
  decoder::DecoderConfig model = TinyModel();
  model.layers = 2;
  std::vector<LoraMatrix> m = LoraMatrices(lora, model);
  ASSERT_EQ(m.size(), 8u);
  EXPECT_EQ(m[0].name, "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight");
  EXPECT_EQ(m[0].shape, (std::vector<uint64_t>{3, 8}));
  EXPECT_EQ(m[1].name, "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight");
  EXPECT_EQ(m[1].shape, (std::vector<uint64_t>{8, 3}));
  EXPECT_EQ(m[3].name, "base_model.model.model.layers.0.self_attn.v_proj.lora_B.weight");
  EXPECT_EQ(m[3].shape, (std::vector<uint64_t>{4, 3}));  // kv_dim
  EXPECT_EQ(m[7].layer, 1);
}

class LoraTensorsTest : public ::testing::Test {
 protected:
  // A safetensors file of F32 tensors {name: shape}, zero-filled.
  std::unique_ptr<fn::SafetensorsFile> Write(
      const std::vector<std::pair<std::string, std::vector<uint64_t>>>& tensors) {
    nlohmann::json header = nlohmann::json::object();
    uint64_t offset = 0;
    for (const auto& [name, shape] : tensors) {
      uint64_t bytes = 4;
      for (uint64_t d : shape) bytes *= d;
      header[name] = {{"dtype", "F32"}, {"shape", shape}, {"data_offsets", {offset, offset + bytes}}};
      offset += bytes;
    }
    const std::string path = dir_.File("adapter_model.safetensors");
    fn::testing::WriteSafetensors(path, header.dump(), std::string(offset, '\0'));
    auto file = fn::SafetensorsFile::Open(path);
    EXPECT_TRUE(file.ok()) << file.status().ToString();
    return file.ok() ? std::move(*file) : nullptr;
  }

  ScratchDir dir_;
  const std::string q_ = "base_model.model.model.layers.0.self_attn.q_proj.";
  const std::string v_ = "base_model.model.model.layers.0.self_attn.v_proj.";
};

TEST_F(LoraTensorsTest, ExactlyTheTargetedMatricesOfTheirShapesPass) {
  LoraConfig lora{.rank = 2, .alpha = 4, .query = true, .value = true};
  auto file = Write({{q_ + "lora_A.weight", {2, 8}},
                     {q_ + "lora_B.weight", {8, 2}},
                     {v_ + "lora_A.weight", {2, 8}},
                     {v_ + "lora_B.weight", {4, 2}}});
  ASSERT_NE(file, nullptr);
  EXPECT_TRUE(CheckLoraTensors(*file, lora, TinyModel()).ok());
}

TEST_F(LoraTensorsTest, MissingExtraAndMisshapenTensorsAreNamed) {
  LoraConfig lora{.rank = 2, .alpha = 4, .query = true, .value = false};
  const decoder::DecoderConfig model = TinyModel();
  struct Case {
    std::vector<std::pair<std::string, std::vector<uint64_t>>> tensors;
    std::string reason;
  };
  const Case cases[] = {
      {{{q_ + "lora_A.weight", {2, 8}}}, "q_proj.lora_B.weight missing"},
      {{{q_ + "lora_A.weight", {2, 8}}, {q_ + "lora_B.weight", {8, 3}}},
       "has shape [8, 3], the model needs [8, 2]"},
      {{{q_ + "lora_A.weight", {2, 6}}, {q_ + "lora_B.weight", {8, 2}}},
       "has shape [2, 6], the model needs [2, 8]"},
      {{{q_ + "lora_A.weight", {16}}, {q_ + "lora_B.weight", {8, 2}}}, "has shape [16]"},
      // v_proj is not in target_modules: its matrices would be silently ignored.
      {{{q_ + "lora_A.weight", {2, 8}}, {q_ + "lora_B.weight", {8, 2}}, {v_ + "lora_A.weight", {2, 8}}},
       "unexpected tensor " + v_ + "lora_A.weight"},
      // A layer the model does not have.
      {{{q_ + "lora_A.weight", {2, 8}},
        {q_ + "lora_B.weight", {8, 2}},
        {"base_model.model.model.layers.1.self_attn.q_proj.lora_A.weight", {2, 8}}},
       "unexpected tensor base_model.model.model.layers.1."},
  };
  for (const Case& c : cases) {
    auto file = Write(c.tensors);
    ASSERT_NE(file, nullptr);
    Status s = CheckLoraTensors(*file, lora, model);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.reason;
    EXPECT_NE(s.message().find(c.reason), std::string::npos) << s.message();
  }
}

}  // namespace
}  // namespace phos::llama
