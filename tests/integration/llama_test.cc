// The llama function end to end: random checkpoints made with scripts/make-checkpoint.py,
// deployed on phosd over simgpu, invoked over HTTP, and the generated tokens checked against an
// independent CPU reference (llama_reference.h).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "decoder_test_support.h"
#include "llama_reference.h"

namespace phos::testing {
namespace {

// Small models; the sizes are odd on purpose.
const ModelShape kMultiHead{"llama-mha", {"--hidden", "48", "--layers", "2", "--heads", "4", "--kv-heads", "4",
                                          "--intermediate", "72", "--vocab", "61", "--dtype", "f32",
                                          "--max-position-embeddings", "24", "--seed", "3"}};
// Grouped-query attention (two query heads per kv head), head_dim 10, tied embeddings, F16 in
// two shards, Llama 3's rope theta.
const ModelShape kGroupedQuery{"llama-gqa", {"--hidden", "40", "--layers", "3", "--heads", "4", "--kv-heads", "2",
                                             "--intermediate", "70", "--vocab", "53", "--dtype", "f16",
                                             "--shards", "2", "--tie-word-embeddings", "--rope-theta", "500000",
                                             "--max-position-embeddings", "24", "--seed", "11"}};

// Four query heads per kv head, head_dim 14 (hidden 112 over 8 heads), BF16 weights.
const ModelShape kWideGroups{"llama-gqa4", {"--hidden", "112", "--layers", "2", "--heads", "8", "--kv-heads", "2",
                                            "--intermediate", "90", "--vocab", "67", "--dtype", "bf16",
                                            "--max-position-embeddings", "24", "--seed", "5"}};

class LlamaTest : public DecoderFunctionTest {
 protected:
  std::string MakeAndDeploy(const ModelShape& shape) {
    return DecoderFunctionTest::MakeAndDeploy(shape, PHOS_LLAMA_FUNCTION);
  }

  // POST /v1/functions for llama --model `model` --adapter `adapter`: the answer's body.
  std::string DeployWithAdapter(const std::string& name, const std::string& model, const std::string& adapter) {
    return CurlPost("/v1/functions", nlohmann::json{{"name", name},
                                                    {"executable", PHOS_LLAMA_FUNCTION},
                                                    {"args", {"--model", model, "--adapter", adapter}}}
                                         .dump())
        .out;
  }
};

TEST_F(LlamaTest, GeneratesTheReferenceTokensWithAndWithoutGroupedQueryAttention) {
  for (const ModelShape& shape : {kMultiHead, kGroupedQuery, kWideGroups}) {
    SCOPED_TRACE(shape.name);
    std::string dir = MakeAndDeploy(shape);
    ASSERT_FALSE(HasFailure());
    LlamaReference reference;
    reference.Load(dir);
    ASSERT_FALSE(HasFatalFailure());
    const std::vector<int> prompt = {3, 17, 5, 42, 9, 0, 30};
    CommandResult invoked =
        CurlPost("/v1/functions/" + shape.name + "/invoke", R"({"tokens": [3, 17, 5, 42, 9, 0, 30], "max_new_tokens": 8, "scores": true})");
    ASSERT_EQ(invoked.exit_code, 0);
    std::vector<int> generated = GeneratedTokens(invoked.out);
    ASSERT_EQ(generated.size(), 8u) << invoked.out;
    std::vector<float> scores = Scores(invoked.out);
    ASSERT_EQ(scores.size(), 8u) << invoked.out;
    ExpectGreedyUnderReference(reference, prompt, generated, scores);
    // A one-token prompt decodes from an empty cache, and the same request gives the same tokens.
    CommandResult again = CurlPost("/v1/functions/" + shape.name + "/invoke", R"({"tokens": [1], "max_new_tokens": 5})");
    std::vector<int> short_generated = GeneratedTokens(again.out);
    ASSERT_EQ(short_generated.size(), 5u) << again.out;
    ExpectGreedyUnderReference(reference, {1}, short_generated, {});
    EXPECT_EQ(CurlPost("/v1/functions/" + shape.name + "/invoke", R"({"tokens": [1], "max_new_tokens": 5})").out,
              again.out);
  }
}

// An instance checkpointed in each mode (docs/design.md D10): the instances restored from there
// generate what it did, the reference's tokens.
TEST_F(LlamaTest, ACheckpointedInstanceRestoresToTheSameAnswers) {
  std::string dir = MakeAndDeploy(kGroupedQuery);
  ASSERT_FALSE(HasFailure());
  LlamaReference reference;
  reference.Load(dir);
  ASSERT_FALSE(HasFatalFailure());
  const std::string request = R"({"tokens": [3, 17, 5], "max_new_tokens": 6, "scores": true})";
  CommandResult invoked = CurlPost("/v1/functions/" + kGroupedQuery.name + "/invoke", request);
  ASSERT_EQ(invoked.exit_code, 0);
  ExpectGreedyUnderReference(reference, {3, 17, 5}, GeneratedTokens(invoked.out), Scores(invoked.out));
  ExpectCheckpointsRestoreTheSameAnswers(kGroupedQuery.name, request);
}

TEST_F(LlamaTest, StreamSendsOneLinePerTokenThenTheWhole) {
  MakeAndDeploy(kGroupedQuery);
  ASSERT_FALSE(HasFailure());
  CommandResult plain = CurlPost("/v1/functions/llama-gqa/invoke", R"({"tokens": [4, 8, 15], "max_new_tokens": 4})");
  std::vector<int> expected = GeneratedTokens(plain.out);
  ASSERT_EQ(expected.size(), 4u) << plain.out;
  CommandResult streamed =
      CurlPost("/v1/functions/llama-gqa/invoke", R"({"tokens": [4, 8, 15], "max_new_tokens": 4, "stream": true})");
  ASSERT_EQ(streamed.exit_code, 0);
  const StreamedAnswer answer = ParseStreamed(streamed.out, 4);
  EXPECT_EQ(answer.tokens, expected);
  EXPECT_EQ(GeneratedTokens(answer.last_line), expected);
}

TEST_F(LlamaTest, BadRequestsAreClientErrorsAndTheInstanceKeepsServing) {
  MakeAndDeploy(kMultiHead);
  ASSERT_FALSE(HasFailure());
  std::vector<std::string> bad = BadDecoderRequests();
  bad.insert(bad.end(), {
      R"({"tokens": [1], "max_new_tokens": 2, "stream": "yes"})",
  });
  for (const std::string& body : bad) EXPECT_EQ(StatusOf("llama-mha", body), "400") << body;
  // The longest request that fits still works after all of them.
  CommandResult good = CurlPost("/v1/functions/llama-mha/invoke", R"({"tokens": [1, 2, 3, 4], "max_new_tokens": 20})");
  EXPECT_EQ(GeneratedTokens(good.out).size(), 20u) << good.out;
}

// An adapter per shape: both targets, v_proj alone (F16 adapter on a sharded F16 base with tied
// embeddings, odd rank) and q_proj alone (BF16, four query heads per kv head). The function
// applies each unmerged; the reference merges it into the weights, as PEFT's merge_and_unload.
TEST_F(LlamaTest, LoraAdapterMatchesTheMergedReferenceAndChangesTheBase) {
  const std::pair<ModelShape, std::vector<std::string>> cases[] = {
      {kMultiHead, {"--rank", "4", "--alpha", "8", "--targets", "q_proj,v_proj", "--adapter-seed", "21"}},
      {kGroupedQuery, {"--rank", "3", "--alpha", "12", "--targets", "v_proj", "--adapter-seed", "22"}},
      {kWideGroups, {"--rank", "5", "--alpha", "10", "--targets", "q_proj", "--adapter-seed", "23"}},
  };
  const std::string request = R"({"tokens": [3, 17, 5, 42, 9, 0, 30], "max_new_tokens": 8, "scores": true})";
  const std::vector<int> prompt = {3, 17, 5, 42, 9, 0, 30};
  for (const auto& [shape, adapter_options] : cases) {
    SCOPED_TRACE(shape.name);
    std::string dir = MakeAndDeploy(shape);
    std::string adapter = MakeCheckpoint(shape, "--adapter-out", shape.name + "-lora", adapter_options);
    ASSERT_FALSE(HasFailure());
    std::string deployed = DeployWithAdapter(shape.name + "-lora", dir, adapter);
    ASSERT_EQ(deployed.find("error"), std::string::npos) << deployed;

    LlamaReference tuned;
    tuned.Load(dir);
    tuned.MergeAdapter(adapter);
    ASSERT_FALSE(HasFatalFailure());
    CommandResult invoked = CurlPost("/v1/functions/" + shape.name + "-lora/invoke", request);
    std::vector<int> generated = GeneratedTokens(invoked.out);
    std::vector<float> scores = Scores(invoked.out);
    ASSERT_EQ(generated.size(), 8u) << invoked.out;
    ASSERT_EQ(scores.size(), 8u) << invoked.out;
    ExpectGreedyUnderReference(tuned, prompt, generated, scores);

    // The base function still answers the base model's tokens, and the adapter moved the first
    // chosen logit far beyond the 1e-5 agreement with the reference.
    CommandResult base = CurlPost("/v1/functions/" + shape.name + "/invoke", request);
    std::vector<int> base_generated = GeneratedTokens(base.out);
    std::vector<float> base_scores = Scores(base.out);
    ASSERT_EQ(base_scores.size(), 8u) << base.out;
    LlamaReference untuned;
    untuned.Load(dir);
    ASSERT_FALSE(HasFatalFailure());
    ExpectGreedyUnderReference(untuned, prompt, base_generated, base_scores);
    const std::vector<double> tuned_first = tuned.NextLogits(prompt), base_first = untuned.NextLogits(prompt);
    double moved = 0;
    for (size_t i = 0; i < tuned_first.size(); ++i) moved = std::max(moved, std::abs(tuned_first[i] - base_first[i]));
    EXPECT_GT(moved, 1e-2) << "the adapter barely changes the logits: the test would not tell it was applied";
    EXPECT_TRUE(generated != base_generated || std::abs(scores[0] - base_scores[0]) > 1e-3)
        << "the adapter's answer is the base's: " << invoked.out;
  }
}

// A bad adapter directory fails the function before its entry point, and the deploy answers why.
TEST_F(LlamaTest, LoraBadAdapterFailsTheDeployWithTheReason) {
  const std::string dir = MakeCheckpoint(kMultiHead, "--out", "lora-bad-base", {});
  const std::vector<std::string> plain = {"--rank", "4", "--targets", "q_proj,v_proj"};
  const auto rewrite_config = [](const std::string& adapter, const std::string& key, const nlohmann::json& value) {
    std::ifstream in(adapter + "/adapter_config.json");
    nlohmann::json config = nlohmann::json::parse(in);
    config[key] = value;
    std::ofstream(adapter + "/adapter_config.json") << config.dump();
  };
  std::string dora = MakeCheckpoint(kMultiHead, "--adapter-out", "lora-dora", plain);
  rewrite_config(dora, "use_dora", true);
  std::string key_proj = MakeCheckpoint(kMultiHead, "--adapter-out", "lora-kproj", plain);
  rewrite_config(key_proj, "target_modules", {"q_proj", "k_proj"});
  std::string regex = MakeCheckpoint(kMultiHead, "--adapter-out", "lora-regex", plain);
  rewrite_config(regex, "target_modules", ".*proj");
  std::string rank = MakeCheckpoint(kMultiHead, "--adapter-out", "lora-rank", plain);
  rewrite_config(rank, "r", 6);
  std::string other_shape = MakeCheckpoint(kGroupedQuery, "--adapter-out", "lora-other-shape", plain);
  // The last --layers wins: an adapter for the first layer only.
  std::string one_layer = MakeCheckpoint(kMultiHead, "--adapter-out", "lora-one-layer",
                                         {"--rank", "4", "--layers", "1"});
  std::string truncated = MakeCheckpoint(kMultiHead, "--adapter-out", "lora-truncated", plain);
  std::filesystem::resize_file(truncated + "/adapter_model.safetensors", 200);
  ASSERT_FALSE(HasFailure());
  const std::pair<std::string, std::string> cases[] = {
      {dir + "-no-such-adapter", "cannot read"},
      {dora, "use_dora = true is not supported"},
      {key_proj, "target module \"k_proj\""},
      {regex, "target_modules \".*proj\""},
      {rank, "has shape [4, 48], the model needs [6, 48]"},
      {other_shape, "has shape [4, 40], the model needs [4, 48]"},
      {one_layer, "layers.1.self_attn.q_proj.lora_A.weight missing"},
      {truncated, "adapter_model.safetensors"},
  };
  int i = 0;
  for (const auto& [adapter, reason] : cases) {
    nlohmann::json answer =
        nlohmann::json::parse(DeployWithAdapter("lora-bad-" + std::to_string(i++), dir, adapter), nullptr, false);
    ASSERT_TRUE(answer.is_object() && answer.contains("error")) << answer;
    const std::string error = answer["error"].value("message", "");
    EXPECT_NE(error.find("failed before its entry point"), std::string::npos) << error;
    EXPECT_NE(error.find(reason), std::string::npos) << reason << " not in " << error;
  }
  // The daemon is unharmed: a good adapter deploys and answers.
  std::string good = MakeCheckpoint(kMultiHead, "--adapter-out", "lora-good", plain);
  std::string answer = DeployWithAdapter("lora-good", dir, good);
  ASSERT_EQ(answer.find("error"), std::string::npos) << answer;
  EXPECT_EQ(GeneratedTokens(CurlPost("/v1/functions/lora-good/invoke", R"({"tokens": [1], "max_new_tokens": 3})").out)
                .size(),
            3u);
}

}  // namespace
}  // namespace phos::testing
