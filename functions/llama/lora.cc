#include "lora.h"

#include <cuda_runtime.h>

#include <string>

#include "phos/fn/safetensors.h"

namespace phos::llama {

Result<std::unique_ptr<LoraAdapter>> LoraAdapter::Load(const std::string& adapter_dir,
                                                       const decoder::DecoderConfig& model) {
  const auto in_dir = [&](Status s) { return s.WithContext("adapter " + adapter_dir); };
  Result<LoraConfig> config = ReadLoraConfig(adapter_dir);
  if (!config.ok()) return in_dir(config.status());
  Result<std::unique_ptr<fn::SafetensorsFile>> file =
      fn::SafetensorsFile::Open(adapter_dir + "/" + std::string(kLoraWeightsName));
  if (!file.ok()) return in_dir(file.status());
  if (Status s = CheckLoraTensors(**file, *config, model); !s.ok()) return in_dir(s);

  std::unique_ptr<LoraAdapter> adapter(new LoraAdapter(*config, model));
  adapter->offsets_.resize(2 * static_cast<size_t>(model.layers));
  const std::vector<LoraMatrix> matrices = LoraMatrices(*config, model);
  std::vector<float> host;
  for (const LoraMatrix& m : matrices) {
    Offsets& at = adapter->At(m.layer, m.target);
    (m.matrix == 'A' ? at.a : at.b) = host.size();
    Result<std::vector<float>> values = (*file)->ReadAsFloat32(m.name);
    if (!values.ok()) return in_dir(values.status());
    host.insert(host.end(), values->begin(), values->end());
  }
  adapter->weight_elements_ = host.size();
  const auto on_device = [](Status s) { return s.WithContext("lora adapter"); };
  PHOS_RETURN_IF_ERROR(on_device(adapter->weights_.Allocate(adapter->weight_elements_)));
  PHOS_RETURN_IF_ERROR(on_device(fn::CudaStatus(
      cudaMemcpy(adapter->weights_.get(), host.data(), adapter->weight_bytes(), cudaMemcpyHostToDevice),
      "cudaMemcpy")));
  PHOS_RETURN_IF_ERROR(
      on_device(adapter->intermediate_.Allocate(static_cast<size_t>(model.max_positions) * config->rank)));
  return adapter;
}

Status LoraAdapter::AfterProjection(decoder::Decoder& decoder, int layer, decoder::Projection projection,
                                    const float* x, float* y, int n) {
  const LoraTarget target =
      projection == decoder::Projection::kQuery ? LoraTarget::kQuery : LoraTarget::kValue;
  cublasHandle_t blas = decoder.blas();
  if (layer < 0 || layer >= model_.layers)
    return Status::InvalidArgument("lora adapter: no layer " + std::to_string(layer));
  if (n <= 0 || n > model_.max_positions) return Status::InvalidArgument("lora adapter: bad token count");
  const Offsets at = At(layer, target);
  if (at.a == kAbsent) return Status::Ok();
  const int r = config_.rank, hidden = model_.hidden;
  const int out = target == LoraTarget::kQuery ? model_.q_dim() : model_.kv_dim();
  const float one = 1.0f, zero = 0.0f, scale = config_.scale();
  const float* weights = weights_.get();
  float* intermediate = intermediate_.get();
  // Row-major [rows, cols] is column-major [cols, rows], so a row-major product y = x M^T is
  // cuBLAS's y^T = op_T(M) x^T, as the decoder's projections are computed.
  // intermediate [n, r] = x [n, hidden] A^T, A [r, hidden].
  cublasStatus_t s = cublasSgemm(blas, CUBLAS_OP_T, CUBLAS_OP_N, r, n, hidden, &one, weights + at.a, hidden,
                                 x, hidden, &zero, intermediate, r);
  // y [n, out] += scale · intermediate [n, r] B^T, B [out, r].
  if (s == CUBLAS_STATUS_SUCCESS) {
    s = cublasSgemm(blas, CUBLAS_OP_T, CUBLAS_OP_N, out, n, r, &scale, weights + at.b, r, intermediate, r,
                    &one, y, out);
  }
  return fn::BlasStatus(s, "cublasSgemm").WithContext("lora adapter");
}

}  // namespace phos::llama
