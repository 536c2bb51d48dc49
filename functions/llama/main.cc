// llama: greedy text generation with a Llama decoder as a phos function.
//
// Initialisation (before the pre-entry point): config.json and every tensor of the checkpoint in
// --model DIR read, each tensor uploaded as its own fp32 device buffer, the KV cache and scratch
// allocated for max_position_embeddings tokens. A request {"tokens": [ids...],
// "max_new_tokens": N} prefills the prompt in one pass, then decodes one token at a time from the
// KV cache, taking the argmax of the last position's logits each step; it answers
// {"tokens": [generated ids...]}. With "stream": true each token also leaves at once as a line
// {"token": id}; with "scores": true the answer also holds each chosen token's logit. All but the
// dense MLP is the shared decoder (phos/decoder/decoder.h). With --adapter, a PEFT LoRA adapter
// is added unmerged after the q and v projections (lora.h), leaving the base weights' buffers as
// the checkpoint wrote them.
//
//   llama --model DIR [--adapter ADAPTER_DIR]
#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <vector>

#include "lora.h"
#include "phos/base/log.h"
#include "phos/decoder/decoder.h"
#include "phos/fn.h"
#include "phos/fn/checkpoint.h"
#include "phos/fn/decoder_ops.h"
#include "phos/fn/device_tensor.h"

namespace {

using phos::Result;
using phos::Status;
using phos::decoder::Decoder;
using phos::decoder::DecoderConfig;
using phos::fn::DeviceTensor;

// LlamaMLP: down(silu(gate(x)) * up(x)).
class DenseMlp final : public phos::decoder::FeedForward {
 public:
  Status LoadLayer(const phos::fn::Checkpoint& checkpoint, const DecoderConfig& c, int /*layer*/,
                   const std::string& prefix) override {
    const uint64_t h = c.hidden, inter = c.intermediate;
    Layer& l = layers_.emplace_back();
    PHOS_RETURN_IF_ERROR(
        phos::decoder::UploadTensor(checkpoint, prefix + "mlp.gate_proj.weight", {inter, h}, l.gate));
    PHOS_RETURN_IF_ERROR(
        phos::decoder::UploadTensor(checkpoint, prefix + "mlp.up_proj.weight", {inter, h}, l.up));
    PHOS_RETURN_IF_ERROR(
        phos::decoder::UploadTensor(checkpoint, prefix + "mlp.down_proj.weight", {h, inter}, l.down));
    return Status::Ok();
  }

  Status AllocateWorkspace(const DecoderConfig& c, int rows) override {
    intermediate_ = c.intermediate;
    hidden_ = c.hidden;
    PHOS_RETURN_IF_ERROR(gate_.Allocate(static_cast<size_t>(rows) * c.intermediate));
    return up_.Allocate(static_cast<size_t>(rows) * c.intermediate);
  }

  Status Apply(Decoder& decoder, int layer, const float* x, float* out, int n) override {
    const Layer& l = layers_[layer];
    PHOS_RETURN_IF_ERROR(decoder.Linear(l.gate, x, gate_.get(), n, hidden_, intermediate_));
    PHOS_RETURN_IF_ERROR(decoder.Linear(l.up, x, up_.get(), n, hidden_, intermediate_));
    PHOS_RETURN_IF_ERROR(phos::fn::SiluMul(gate_.get(), up_.get(), gate_.get(),
                                           static_cast<long long>(n) * intermediate_, decoder.stream()));
    return decoder.Linear(l.down, gate_.get(), out, n, intermediate_, hidden_);
  }

 private:
  struct Layer {
    DeviceTensor gate, up, down;
  };
  std::vector<Layer> layers_;
  int hidden_ = 0, intermediate_ = 0;
  phos::decoder::DeviceArray<float> gate_, up_;
};

Result<std::unique_ptr<Decoder>> LoadLlama(const std::string& model_dir, DenseMlp& mlp) {
  PHOS_ASSIGN_OR_RETURN(nlohmann::json json, phos::decoder::ReadConfigJson(model_dir));
  PHOS_ASSIGN_OR_RETURN(DecoderConfig config, phos::decoder::ParseConfig(json));
  PHOS_ASSIGN_OR_RETURN(std::unique_ptr<phos::fn::Checkpoint> checkpoint,
                        phos::fn::Checkpoint::Open(model_dir));
  return Decoder::Load(*checkpoint, config, mlp);
}

// The base, then (with `adapter_dir`) the adapter: it is uploaded after everything the base
// allocates, so every fine-tune of one base lays the base's buffers out alike.
Status Load(const std::string& model_dir, const std::string& adapter_dir, DenseMlp& mlp,
            std::unique_ptr<Decoder>& decoder, std::unique_ptr<phos::llama::LoraAdapter>& adapter) {
  PHOS_ASSIGN_OR_RETURN(decoder, LoadLlama(model_dir, mlp));
  if (adapter_dir.empty()) return Status::Ok();
  PHOS_ASSIGN_OR_RETURN(adapter, phos::llama::LoraAdapter::Load(adapter_dir, decoder->config()));
  decoder->set_projection_adapter(adapter.get());
  return Status::Ok();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"llama: greedy generation with a Llama decoder (a phos function)"};
  std::string model_dir, adapter_dir;
  app.add_option("--model", model_dir, "Hugging Face checkpoint directory (config.json, *.safetensors)")
      ->required();
  app.add_option("--adapter", adapter_dir,
                 "PEFT LoRA adapter directory (adapter_config.json, adapter_model.safetensors)");
  CLI11_PARSE(app, argc, argv);

  // Declared before the decoder, which uses both until it is destroyed.
  DenseMlp mlp;
  std::unique_ptr<phos::llama::LoraAdapter> adapter;
  std::unique_ptr<Decoder> loaded;
  if (Status s = Load(model_dir, adapter_dir, mlp, loaded, adapter); !s.ok()) {
    PHOS_LOG(Error, "llama", "loading {}{} failed: {}", model_dir,
             adapter_dir.empty() ? "" : " with " + adapter_dir, s.ToString());
    return 1;
  }
  Decoder& decoder = *loaded;
  const DecoderConfig& c = decoder.config();
  PHOS_LOG(Info, "llama", "ready: {} layers, hidden {}, {} heads ({} kv), vocab {}, {} positions", c.layers,
           c.hidden, c.heads, c.kv_heads, c.vocab, c.max_positions);
  return phos::fn::Serve(phos::fn::StreamingHandler(
      [&decoder](std::string_view body, phos::fn::Pieces& out) -> Result<std::string> {
        PHOS_ASSIGN_OR_RETURN(phos::decoder::GenerateRequest request,
                              phos::decoder::ParseRequest(body, decoder.config()));
        PHOS_ASSIGN_OR_RETURN(phos::decoder::Generation generation, decoder.Generate(request, out));
        return phos::decoder::ResponseText(phos::decoder::ResponseJson(generation, request), request);
      }));
}
