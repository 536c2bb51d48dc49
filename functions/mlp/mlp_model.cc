#include "mlp_model.h"

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

namespace phos::mlp {
namespace {

// splitmix64: a fast, well-mixed counter-based generator, so any element of any layer can be
// generated independently (in chunks, in any order) and always gets the same value.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Uniform in [-1, 1) from (seed, stream, index).
float Uniform(uint64_t seed, uint64_t stream, uint64_t index) {
  uint64_t bits = Mix(Mix(seed ^ (stream * 0xd1b54a32d192ed03ull)) + index);
  return static_cast<float>(static_cast<double>(bits >> 11) * 0x1.0p-52 - 1.0);
}

constexpr uint64_t kBiasStream = 1ull << 32;
constexpr uint64_t kInputStream = 1ull << 33;

float Scale(const Shape& shape) { return 1.0f / std::sqrt(static_cast<float>(shape.width)); }

}  // namespace

Shape ShapeForSize(size_t mib, int layers, int batch) {
  Shape s;
  s.layers = std::max(1, layers);
  s.batch = std::max(1, batch);
  double per_layer = static_cast<double>(mib) * (1 << 20) / s.layers / sizeof(float);
  s.width = std::max(16, static_cast<int>(std::sqrt(per_layer)) / 16 * 16);
  return s;
}

void GenerateWeightColumns(uint64_t seed, int layer, const Shape& shape, size_t first_col, size_t cols,
                           float* out) {
  const float scale = Scale(shape);
  const size_t rows = static_cast<size_t>(shape.width);
  for (size_t c = 0; c < cols; ++c) {
    for (size_t r = 0; r < rows; ++r) {
      out[c * rows + r] = scale * Uniform(seed, static_cast<uint64_t>(layer), (first_col + c) * rows + r);
    }
  }
}

void GenerateBias(uint64_t seed, int layer, const Shape& shape, float* out) {
  const float scale = Scale(shape);
  for (int r = 0; r < shape.width; ++r) out[r] = scale * Uniform(seed, kBiasStream + layer, r);
}

void GenerateLayer(uint64_t seed, int layer, const Shape& shape, float* weights, float* bias) {
  GenerateWeightColumns(seed, layer, shape, 0, shape.width, weights);
  GenerateBias(seed, layer, shape, bias);
}

std::vector<float> InputFromSeed(uint64_t seed, const Shape& shape) {
  std::vector<float> input(shape.io_elements());
  for (size_t i = 0; i < input.size(); ++i) input[i] = Uniform(seed, kInputStream, i);
  return input;
}

std::vector<float> Reference(uint64_t weight_seed, const Shape& shape, const std::vector<float>& input) {
  const size_t w = static_cast<size_t>(shape.width);
  std::vector<float> x = input, y(shape.io_elements());
  std::vector<float> weights(shape.weight_elements()), bias(w);
  for (int l = 0; l < shape.layers; ++l) {
    GenerateLayer(weight_seed, l, shape, weights.data(), bias.data());
    const bool relu = l + 1 < shape.layers;
    for (int b = 0; b < shape.batch; ++b) {
      for (size_t r = 0; r < w; ++r) {
        double acc = 0;
        for (size_t k = 0; k < w; ++k) acc += static_cast<double>(weights[k * w + r]) * x[b * w + k];
        float v = static_cast<float>(acc) + bias[r];
        y[b * w + r] = relu && v < 0 ? 0.0f : v;
      }
    }
    x.swap(y);
  }
  return x;
}

Result<Request> ParseRequest(std::string_view body, const Shape& shape) {
  nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Status::InvalidArgument("request is not a JSON object");
  Request request;
  if (auto full = j.find("full"); full != j.end()) {
    if (!full->is_boolean()) return Status::InvalidArgument("\"full\" must be true or false");
    request.full = full->get<bool>();
  }
  auto seed = j.find("seed");
  auto input = j.find("input");
  if ((seed == j.end()) == (input == j.end())) {
    return Status::InvalidArgument("request needs exactly one of \"seed\" and \"input\"");
  }
  if (seed != j.end()) {
    if (!seed->is_number_unsigned() && !seed->is_number_integer()) {
      return Status::InvalidArgument("\"seed\" must be an integer");
    }
    request.input = InputFromSeed(seed->get<uint64_t>(), shape);
    return request;
  }
  if (!input->is_array() || input->size() != shape.io_elements()) {
    return Status::InvalidArgument("\"input\" must be an array of " + std::to_string(shape.io_elements()) +
                                   " numbers (width x batch)");
  }
  request.input.reserve(shape.io_elements());
  for (const auto& v : *input) {
    if (!v.is_number()) return Status::InvalidArgument("\"input\" must hold numbers only");
    request.input.push_back(v.get<float>());
  }
  return request;
}

std::string FormatResponse(const std::vector<float>& output, const Shape& shape, bool full) {
  nlohmann::json j;
  double checksum = 0;
  for (float v : output) checksum += v;
  std::vector<int> argmax;
  for (int b = 0; b < shape.batch; ++b) {
    auto begin = output.begin() + static_cast<ptrdiff_t>(b) * shape.width;
    argmax.push_back(static_cast<int>(std::max_element(begin, begin + shape.width) - begin));
  }
  j["argmax"] = argmax;
  j["checksum"] = checksum;
  if (full) j["output"] = output;
  return j.dump();
}

}  // namespace phos::mlp
