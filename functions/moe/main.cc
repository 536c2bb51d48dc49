// moe: greedy text generation with a Mixtral-style mixture-of-experts decoder as a phos
// function.
//
// The checkpoint in --model DIR is MixtralForCausalLM's: Llama's attention and norms, and per
// layer a router and num_local_experts SwiGLU experts of which each token uses
// num_experts_per_tok (sparse_moe_block.h). Every tensor, each expert's included, is its own
// device buffer uploaded before the entry point. Requests and responses are llama's
// ({"tokens": [ids...], "max_new_tokens": N} -> {"tokens": [...]}, "stream", "scores"), plus
// "report_experts": true, which adds "experts": [[layer, expert], ...], every expert that ran
// for the request, sorted, once each, so a client can tell which weights the request read.
//
//   moe --model DIR
#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "phos/base/log.h"
#include "phos/decoder/decoder.h"
#include "phos/fn.h"
#include "phos/fn/checkpoint.h"
#include "sparse_moe_block.h"

namespace {

using phos::Result;
using phos::Status;
using phos::decoder::Decoder;
using phos::decoder::DecoderConfig;
using phos::moe::SparseMoeBlock;

struct Mixtral {
  std::unique_ptr<SparseMoeBlock> moe;
  std::unique_ptr<Decoder> decoder;  // refers to *moe
};

Result<Mixtral> LoadMixtral(const std::string& model_dir) {
  PHOS_ASSIGN_OR_RETURN(nlohmann::json json, phos::decoder::ReadConfigJson(model_dir));
  PHOS_ASSIGN_OR_RETURN(DecoderConfig config, phos::decoder::ParseConfig(json));
  PHOS_ASSIGN_OR_RETURN(phos::moe::MoeConfig moe_config, phos::moe::ParseMoeConfig(json));
  PHOS_ASSIGN_OR_RETURN(std::unique_ptr<phos::fn::Checkpoint> checkpoint,
                        phos::fn::Checkpoint::Open(model_dir));
  Mixtral model;
  model.moe = std::make_unique<SparseMoeBlock>(moe_config);
  PHOS_ASSIGN_OR_RETURN(model.decoder, Decoder::Load(*checkpoint, config, *model.moe));
  return model;
}

Result<std::string> Handle(Mixtral& model, std::string_view body, phos::fn::Pieces& out) {
  bool report_experts = false;
  const phos::decoder::RequestFlag flags[] = {{"report_experts", &report_experts}};
  PHOS_ASSIGN_OR_RETURN(phos::decoder::GenerateRequest request,
                        phos::decoder::ParseRequest(body, model.decoder->config(), flags));
  model.moe->ClearExpertsRun();
  PHOS_ASSIGN_OR_RETURN(phos::decoder::Generation generation, model.decoder->Generate(request, out));
  nlohmann::json response = phos::decoder::ResponseJson(generation, request);
  if (report_experts) {
    response["experts"] = nlohmann::json::array();
    for (const auto& [layer, expert] : model.moe->experts_run())
      response["experts"].push_back({layer, expert});
  }
  return phos::decoder::ResponseText(response, request);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"moe: greedy generation with a Mixtral-style mixture-of-experts decoder (a phos function)"};
  std::string model_dir;
  app.add_option("--model", model_dir,
                 "Hugging Face Mixtral checkpoint directory (config.json, *.safetensors)")
      ->required();
  CLI11_PARSE(app, argc, argv);

  Result<Mixtral> loaded = LoadMixtral(model_dir);
  if (!loaded.ok()) {
    PHOS_LOG(Error, "moe", "loading {} failed: {}", model_dir, loaded.status().ToString());
    return 1;
  }
  Mixtral& model = *loaded;
  const DecoderConfig& c = model.decoder->config();
  PHOS_LOG(
      Info, "moe",
      "ready: {} layers of {} experts ({} per token), hidden {}, {} heads ({} kv), vocab {}, {} positions",
      c.layers, model.moe->config().experts, model.moe->config().experts_per_token, c.hidden, c.heads,
      c.kv_heads, c.vocab, c.max_positions);
  return phos::fn::Serve(phos::fn::StreamingHandler(
      [&model](std::string_view body, phos::fn::Pieces& out) { return Handle(model, body, out); }));
}
