// The decoder functions' host side (phos/decoder/decoder_config.h): config.json fields and their
// checks, generate requests (every field a client sends is checked), and the response JSON.
#include "phos/decoder/decoder_config.h"

#include <gtest/gtest.h>

#include <string>

namespace phos::decoder {
namespace {

nlohmann::json LlamaConfigJson() {
  return nlohmann::json::parse(R"({"hidden_size": 48, "intermediate_size": 72, "num_hidden_layers": 2,
                                   "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 61,
                                   "max_position_embeddings": 24, "rope_theta": 500000.0,
                                   "rms_norm_eps": 1e-6, "tie_word_embeddings": true})");
}

TEST(DecoderConfigTest, ReadsLlamaFields) {
  Result<DecoderConfig> c = ParseConfig(LlamaConfigJson());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->hidden, 48);
  EXPECT_EQ(c->intermediate, 72);
  EXPECT_EQ(c->layers, 2);
  EXPECT_EQ(c->heads, 4);
  EXPECT_EQ(c->kv_heads, 2);
  EXPECT_EQ(c->head_dim, 12);  // hidden / heads when config.json has no head_dim
  EXPECT_EQ(c->q_dim(), 48);
  EXPECT_EQ(c->kv_dim(), 24);
  EXPECT_EQ(c->vocab, 61);
  EXPECT_EQ(c->max_positions, 24);
  EXPECT_FLOAT_EQ(c->rope_theta, 500000.0f);
  EXPECT_FLOAT_EQ(c->rms_norm_eps, 1e-6f);
  EXPECT_TRUE(c->tie_word_embeddings);
}

TEST(DecoderConfigTest, RejectsMissingAndInconsistentFields) {
  nlohmann::json missing = LlamaConfigJson();
  missing.erase("vocab_size");
  const Status s = ParseConfig(missing).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("vocab_size"), std::string::npos) << s.message();

  nlohmann::json groups = LlamaConfigJson();
  groups["num_key_value_heads"] = 3;  // 4 query heads cannot share 3 kv heads
  EXPECT_EQ(ParseConfig(groups).status().code(), StatusCode::kInvalidArgument);

  nlohmann::json odd = LlamaConfigJson();
  odd["head_dim"] = 7;  // rotary pairs need an even head_dim
  EXPECT_EQ(ParseConfig(odd).status().code(), StatusCode::kInvalidArgument);

  nlohmann::json negative = LlamaConfigJson();
  negative["hidden_size"] = -48;
  EXPECT_EQ(ParseConfig(negative).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseConfig(nlohmann::json::array()).status().code(), StatusCode::kInvalidArgument);

  int experts = 0;
  EXPECT_EQ(ReadConfigInt(LlamaConfigJson(), "num_local_experts", experts).code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(ReadConfigInt(LlamaConfigJson(), "num_hidden_layers", experts).ok());
  EXPECT_EQ(experts, 2);
}

TEST(DecoderConfigTest, ParsesRequestsWithTheFunctionsOwnFlags) {
  const DecoderConfig config = *ParseConfig(LlamaConfigJson());
  bool report = false;
  const RequestFlag flags[] = {{"report", &report}};
  Result<GenerateRequest> r = ParseRequest(
      R"({"tokens": [0, 60], "max_new_tokens": 22, "stream": true, "report": true})", config, flags);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->tokens, (std::vector<int>{0, 60}));
  EXPECT_EQ(r->max_new_tokens, 22);
  EXPECT_TRUE(r->stream);
  EXPECT_FALSE(r->scores);
  EXPECT_TRUE(report);

  // A flag the function did not declare is ignored; one it declared must be a boolean.
  report = false;
  EXPECT_TRUE(ParseRequest(R"({"tokens": [1], "max_new_tokens": 1, "report": true})", config).ok());
  EXPECT_EQ(
      ParseRequest(R"({"tokens": [1], "max_new_tokens": 1, "report": "yes"})", config, flags).status().code(),
      StatusCode::kInvalidArgument);
  EXPECT_FALSE(report);
}

TEST(DecoderConfigTest, RejectsBadRequests) {
  const DecoderConfig config = *ParseConfig(LlamaConfigJson());
  for (const char* body : {
           "not json",
           R"([1])",
           R"({"tokens": [], "max_new_tokens": 1})",
           R"({"tokens": [61], "max_new_tokens": 1})",  // vocab is 61
           R"({"tokens": [-1], "max_new_tokens": 1})",
           R"({"tokens": [1.5], "max_new_tokens": 1})",
           R"({"tokens": [1]})",
           R"({"tokens": [1], "max_new_tokens": -1})",
           R"({"tokens": [1, 2], "max_new_tokens": 23})",  // 25 > max_position_embeddings 24
           R"({"tokens": [1, 2], "max_new_tokens": 9223372036854775807})",  // the sum would overflow
           R"({"tokens": [1], "max_new_tokens": 18446744073709551615})",
           R"({"tokens": [1], "max_new_tokens": 1, "scores": 1})",
       }) {
    EXPECT_EQ(ParseRequest(body, config).status().code(), StatusCode::kInvalidArgument) << body;
  }
}

TEST(DecoderConfigTest, ResponseHoldsScoresWhenAskedAndEndsItsLineWhenStreamed) {
  GenerateRequest request;
  const Generation generation{{5, 7}, {1.5f, -2.0f}};
  EXPECT_EQ(ResponseText(ResponseJson(generation, request), request), R"({"tokens":[5,7]})");
  request.scores = true;
  request.stream = true;
  EXPECT_EQ(ResponseText(ResponseJson(generation, request), request),
            "{\"scores\":[1.5,-2.0],\"tokens\":[5,7]}\n");
}

}  // namespace
}  // namespace phos::decoder
