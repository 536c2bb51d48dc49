// The moe function end to end: random Mixtral checkpoints made with scripts/make-checkpoint.py
// --experts, deployed on phosd over simgpu, invoked over HTTP, and the generated tokens and the
// experts that ran checked against the CPU reference's sparse mixture-of-experts block
// (llama_reference.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "decoder_test_support.h"
#include "llama_reference.h"

namespace phos::testing {
namespace {

using ExpertSet = std::set<std::pair<int, int>>;

// Small models; the sizes are odd on purpose. (clang-format would put each option on its own
// line; as option-value pairs they read better packed.)
// clang-format off
// Four experts, two per token, two query heads per kv head, F32.
const ModelShape kFourExperts{"moe-e4", {"--experts", "4", "--experts-per-token", "2", "--hidden", "48",
                                         "--layers", "2", "--heads", "4", "--kv-heads", "2", "--intermediate", "36",
                                         "--vocab", "61", "--dtype", "f32", "--max-position-embeddings", "24",
                                         "--seed", "7"}};
// Eight experts, two per token, BF16 in two shards, tied embeddings, three layers.
const ModelShape kEightExperts{"moe-e8", {"--experts", "8", "--experts-per-token", "2", "--hidden", "40",
                                          "--layers", "3", "--heads", "4", "--kv-heads", "2", "--intermediate", "30",
                                          "--vocab", "53", "--dtype", "bf16", "--shards", "2",
                                          "--tie-word-embeddings", "--max-position-embeddings", "24", "--seed", "13"}};
// Six experts, three per token, F16, no grouping.
const ModelShape kThreeOfSix{"moe-e6k3", {"--experts", "6", "--experts-per-token", "3", "--hidden", "36",
                                          "--layers", "2", "--heads", "3", "--kv-heads", "3", "--intermediate", "26",
                                          "--vocab", "47", "--dtype", "f16", "--max-position-embeddings", "24",
                                          "--seed", "17"}};
// clang-format on

class MoeTest : public DecoderFunctionTest {
 protected:
  std::string MakeAndDeploy(const ModelShape& shape) {
    return DecoderFunctionTest::MakeAndDeploy(shape, PHOS_MOE_FUNCTION);
  }
};

// The response's "experts" as (layer, expert) pairs, checking that they come sorted and once each.
ExpertSet ReportedExperts(const std::string& body) {
  nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  if (!j.is_object() || !j.contains("experts") || !j["experts"].is_array()) {
    ADD_FAILURE() << "no experts in: " << body;
    return {};
  }
  const auto pairs = j["experts"].get<std::vector<std::pair<int, int>>>();
  EXPECT_TRUE(std::is_sorted(pairs.begin(), pairs.end())) << body;
  ExpertSet experts(pairs.begin(), pairs.end());
  EXPECT_EQ(experts.size(), pairs.size()) << "an expert reported twice: " << body;
  return experts;
}

TEST_F(MoeTest, GeneratesTheReferenceTokensAndRunsTheExpertsTheReferenceRoutesTo) {
  for (const ModelShape& shape : {kFourExperts, kEightExperts, kThreeOfSix}) {
    SCOPED_TRACE(shape.name);
    std::string dir = MakeAndDeploy(shape);
    ASSERT_FALSE(HasFailure());
    LlamaReference reference;
    reference.Load(dir);
    ASSERT_FALSE(HasFatalFailure());
    const std::vector<int> prompt = {3, 17, 5, 42, 9, 0, 30};
    CommandResult invoked =
        CurlPost("/v1/functions/" + shape.name + "/invoke",
                 R"({"tokens": [3, 17, 5, 42, 9, 0, 30], "max_new_tokens": 8, "scores": true,
                                         "report_experts": true})");
    ASSERT_EQ(invoked.exit_code, 0);
    std::vector<int> generated = GeneratedTokens(invoked.out);
    ASSERT_EQ(generated.size(), 8u) << invoked.out;
    std::vector<float> scores = Scores(invoked.out);
    ASSERT_EQ(scores.size(), 8u) << invoked.out;
    ExpectGreedyUnderReference(reference, prompt, generated, scores);
    // The model ran on the prompt and every generated token but the last.
    std::vector<int> forwarded = prompt;
    forwarded.insert(forwarded.end(), generated.begin(), generated.end() - 1);
    EXPECT_EQ(ReportedExperts(invoked.out), reference.RoutedExperts(forwarded));

    // One token through the model runs exactly k experts per layer: a fraction of the weights.
    CommandResult one = CurlPost("/v1/functions/" + shape.name + "/invoke",
                                 R"({"tokens": [1], "max_new_tokens": 1, "report_experts": true})");
    const ExpertSet experts = ReportedExperts(one.out);
    EXPECT_EQ(experts, reference.RoutedExperts({1}));
    EXPECT_EQ(experts.size(), static_cast<size_t>(reference.layers() * reference.experts_per_token()))
        << one.out;
    ExpectGreedyUnderReference(reference, {1}, GeneratedTokens(one.out), {});
    // Without the flag there is no "experts" field, and the same request gives the same tokens.
    CommandResult plain =
        CurlPost("/v1/functions/" + shape.name + "/invoke", R"({"tokens": [1], "max_new_tokens": 1})");
    EXPECT_EQ(nlohmann::json::parse(plain.out, nullptr, false).contains("experts"), false) << plain.out;
    EXPECT_EQ(GeneratedTokens(plain.out), GeneratedTokens(one.out));
  }
}

TEST_F(MoeTest, StreamSendsOneLinePerTokenThenTheWholeWithItsExperts) {
  MakeAndDeploy(kFourExperts);
  ASSERT_FALSE(HasFailure());
  CommandResult plain = CurlPost("/v1/functions/moe-e4/invoke",
                                 R"({"tokens": [4, 8, 15], "max_new_tokens": 4, "report_experts": true})");
  std::vector<int> expected = GeneratedTokens(plain.out);
  ASSERT_EQ(expected.size(), 4u) << plain.out;
  CommandResult streamed =
      CurlPost("/v1/functions/moe-e4/invoke",
               R"({"tokens": [4, 8, 15], "max_new_tokens": 4, "stream": true, "report_experts": true})");
  ASSERT_EQ(streamed.exit_code, 0);
  const StreamedAnswer answer = ParseStreamed(streamed.out, 4);
  EXPECT_EQ(answer.tokens, expected);
  EXPECT_EQ(GeneratedTokens(answer.last_line), expected);
  EXPECT_EQ(ReportedExperts(answer.last_line), ReportedExperts(plain.out));
}

TEST_F(MoeTest, BadRequestsAreClientErrorsAndTheInstanceKeepsServing) {
  MakeAndDeploy(kFourExperts);
  ASSERT_FALSE(HasFailure());
  std::vector<std::string> bad = BadDecoderRequests();
  bad.insert(bad.end(), {
      R"({"tokens": [1], "max_new_tokens": 2, "report_experts": "yes"})",
      R"({"tokens": [1], "max_new_tokens": 2, "report_experts": 1})",
  });
  for (const std::string& body : bad) EXPECT_EQ(StatusOf("moe-e4", body), "400") << body;
  // The longest request that fits still works after all of them, through every position.
  CommandResult good = CurlPost("/v1/functions/moe-e4/invoke",
                                R"({"tokens": [1, 2, 3, 4], "max_new_tokens": 20, "report_experts": true})");
  EXPECT_EQ(GeneratedTokens(good.out).size(), 20u) << good.out;
  EXPECT_FALSE(ReportedExperts(good.out).empty());
}

// A dense Llama checkpoint is not a mixture of experts, and a sliding attention window shorter
// than the context is not what the decoder computes: the deploy fails (the function exits before
// its entry point) rather than serving something else.
TEST_F(MoeTest, DeployOfACheckpointItCannotComputeFails) {
  const ModelShape dense{"moe-dense",
                         {"--hidden", "32", "--layers", "1", "--heads", "2", "--kv-heads", "2",
                          "--intermediate", "20", "--vocab", "17", "--max-position-embeddings", "8"}};
  std::string dir = MakeCheckpoint(dense);
  ASSERT_FALSE(HasFailure());
  CommandResult deployed = PhosFn({"deploy", dense.name, PHOS_MOE_FUNCTION, "--", "--model", dir});
  EXPECT_NE(deployed.exit_code, 0) << deployed.out;

  ModelShape windowed = dense;
  windowed.name = "moe-windowed";
  windowed.options.insert(windowed.options.end(), {"--experts", "2"});
  dir = MakeCheckpoint(windowed);
  ASSERT_FALSE(HasFailure());
  const std::string config_path = dir + "/config.json";
  std::ifstream in(config_path);
  nlohmann::json config = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(config.is_object());
  config["sliding_window"] = nullptr;  // null: no window, as Mixtral 8x7B's config.json says
  std::ofstream(config_path) << config.dump();
  deployed = PhosFn({"deploy", windowed.name, PHOS_MOE_FUNCTION, "--", "--model", dir});
  EXPECT_EQ(deployed.exit_code, 0) << deployed.out;
  config["sliding_window"] = 4;  // shorter than the 8 positions
  std::ofstream(config_path) << config.dump();
  deployed = PhosFn({"deploy", windowed.name + "-4", PHOS_MOE_FUNCTION, "--", "--model", dir});
  EXPECT_NE(deployed.exit_code, 0) << deployed.out;
}

}  // namespace
}  // namespace phos::testing
