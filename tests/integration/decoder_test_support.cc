#include "decoder_test_support.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <nlohmann/json.hpp>

namespace phos::testing {

std::string DecoderFunctionTest::MakeCheckpoint(const ModelShape& shape, const std::string& out_option,
                                                const std::string& name,
                                                const std::vector<std::string>& extra) {
  std::string dir = ::testing::TempDir() + "phos-decoder-" + std::to_string(getpid()) + "-" +
                    (name.empty() ? shape.name : name);
  std::vector<std::string> argv = {"python3", PHOS_MAKE_CHECKPOINT, out_option, dir};
  argv.insert(argv.end(), shape.options.begin(), shape.options.end());
  argv.insert(argv.end(), extra.begin(), extra.end());
  CommandResult made = phos::testing::Run(argv);
  EXPECT_EQ(made.exit_code, 0) << made.out;
  return dir;
}

std::string DecoderFunctionTest::MakeAndDeploy(const ModelShape& shape, const std::string& function) {
  std::string dir = MakeCheckpoint(shape);
  CommandResult deployed = PhosFn({"deploy", shape.name, function, "--", "--model", dir});
  EXPECT_EQ(deployed.exit_code, 0) << deployed.out;
  return dir;
}

std::string DecoderFunctionTest::StatusOf(const std::string& function, const std::string& body) {
  return phos::testing::Run({"curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST", "--data",
                             body, endpoint() + "/v1/functions/" + function + "/invoke"})
      .out;
}

std::vector<float> Scores(const std::string& body) {
  nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  if (!j.is_object() || !j.contains("scores") || !j["scores"].is_array()) {
    ADD_FAILURE() << "no scores in: " << body;
    return {};
  }
  return j["scores"].get<std::vector<float>>();
}

std::vector<std::string> BadDecoderRequests() {
  return {
      "not json",
      R"([1, 2])",
      R"({"tokens": [], "max_new_tokens": 2})",
      R"({"tokens": [1, "two"], "max_new_tokens": 2})",
      R"({"tokens": [1, 61], "max_new_tokens": 2})",  // vocab is 61
      R"({"tokens": [-1], "max_new_tokens": 2})",
      R"({"tokens": [1, 2]})",
      R"({"tokens": [1, 2], "max_new_tokens": -1})",
      R"({"tokens": [1, 2, 3, 4], "max_new_tokens": 21})",  // 25 > max_position_embeddings 24
  };
}

StreamedAnswer ParseStreamed(const std::string& out, size_t count) {
  StreamedAnswer answer;
  std::istringstream lines(out);
  std::string line;
  while (answer.tokens.size() < count && std::getline(lines, line)) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    EXPECT_TRUE(j.is_object() && j.contains("token")) << line;
    if (!j.is_object() || !j.contains("token")) return answer;
    answer.tokens.push_back(j["token"].get<int>());
  }
  EXPECT_TRUE(std::getline(lines, answer.last_line)) << "no whole answer after the tokens: " << out;
  return answer;
}

std::vector<int> GeneratedTokens(const std::string& body) {
  nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  if (!j.is_object() || !j.contains("tokens") || !j["tokens"].is_array()) {
    ADD_FAILURE() << "not a generate response: " << body;
    return {};
  }
  return j["tokens"].get<std::vector<int>>();
}

void ExpectGreedyUnderReference(const LlamaReference& reference, std::vector<int> prefix,
                                const std::vector<int>& generated, const std::vector<float>& scores) {
  int exact = 0;
  for (size_t i = 0; i < generated.size(); ++i) {
    SCOPED_TRACE("generated token " + std::to_string(i));
    std::vector<double> logits = reference.NextLogits(prefix);
    const auto best = std::max_element(logits.begin(), logits.end());
    ASSERT_GE(generated[i], 0);
    ASSERT_LT(generated[i], reference.vocab());
    EXPECT_GE(logits[generated[i]], *best - 1e-4 * (1 + std::abs(*best)));
    exact += generated[i] == best - logits.begin();
    if (!scores.empty()) {
      EXPECT_NEAR(scores[i], logits[generated[i]], 1e-5 * (1 + std::abs(logits[generated[i]])));
    }
    prefix.push_back(generated[i]);
  }
  // Near-ties are rare with random weights: most choices match exactly.
  EXPECT_GE(exact * 4, static_cast<int>(generated.size()) * 3);
}

}  // namespace phos::testing
