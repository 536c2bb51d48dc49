// The llama function end to end: random checkpoints made with scripts/make-checkpoint.py,
// deployed on phosd over simgpu, invoked over HTTP, and the generated tokens checked against an
// independent CPU reference (llama_reference.h).
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

TEST_F(LlamaTest, StreamSendsOneLinePerTokenThenTheWhole) {
  MakeAndDeploy(kGroupedQuery);
  ASSERT_FALSE(HasFailure());
  CommandResult plain = CurlPost("/v1/functions/llama-gqa/invoke", R"({"tokens": [4, 8, 15], "max_new_tokens": 4})");
  std::vector<int> expected = GeneratedTokens(plain.out);
  ASSERT_EQ(expected.size(), 4u) << plain.out;
  CommandResult streamed =
      CurlPost("/v1/functions/llama-gqa/invoke", R"({"tokens": [4, 8, 15], "max_new_tokens": 4, "stream": true})");
  ASSERT_EQ(streamed.exit_code, 0);
  std::istringstream lines(streamed.out);
  std::string line;
  std::vector<int> tokens;
  for (int i = 0; i < 4 && std::getline(lines, line); ++i) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    ASSERT_TRUE(j.is_object() && j.contains("token")) << line;
    tokens.push_back(j["token"].get<int>());
  }
  EXPECT_EQ(tokens, expected);
  ASSERT_TRUE(std::getline(lines, line));
  EXPECT_EQ(GeneratedTokens(line), expected);
}

TEST_F(LlamaTest, BadRequestsAreClientErrorsAndTheInstanceKeepsServing) {
  MakeAndDeploy(kMultiHead);
  ASSERT_FALSE(HasFailure());
  const std::vector<std::string> bad = {
      "not json",
      R"([1, 2])",
      R"({"tokens": [], "max_new_tokens": 2})",
      R"({"tokens": [1, "two"], "max_new_tokens": 2})",
      R"({"tokens": [1, 61], "max_new_tokens": 2})",   // vocab is 61
      R"({"tokens": [-1], "max_new_tokens": 2})",
      R"({"tokens": [1, 2]})",
      R"({"tokens": [1, 2], "max_new_tokens": -1})",
      R"({"tokens": [1, 2, 3, 4], "max_new_tokens": 21})",  // 25 > max_position_embeddings 24
      R"({"tokens": [1], "max_new_tokens": 2, "stream": "yes"})",
  };
  for (const std::string& body : bad) EXPECT_EQ(StatusOf("llama-mha", body), "400") << body;
  // The longest request that fits still works after all of them.
  CommandResult good = CurlPost("/v1/functions/llama-mha/invoke", R"({"tokens": [1, 2, 3, 4], "max_new_tokens": 20})");
  EXPECT_EQ(GeneratedTokens(good.out).size(), 20u) << good.out;
}

}  // namespace
}  // namespace phos::testing
