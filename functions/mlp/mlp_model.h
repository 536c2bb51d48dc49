// The mlp function's model, shared by the function and by the tests that check it: the shape,
// the deterministic weights and inputs, and a CPU reference forward pass.
//
// Layer l computes Y = act(W_l * X + b_l) with W_l a width x width matrix, X a width x batch
// matrix (column-major, as cuBLAS stores them), act = ReLU except on the last layer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "phos/base/status.h"

namespace phos::mlp {

struct Shape {
  int width = 1024;  // rows and columns of every weight matrix
  int layers = 4;
  int batch = 1;     // input columns per request

  size_t weight_elements() const { return static_cast<size_t>(width) * width; }
  // Bytes of weights and biases on the device.
  size_t model_bytes() const { return static_cast<size_t>(layers) * (weight_elements() + width) * sizeof(float); }
  size_t io_elements() const { return static_cast<size_t>(width) * batch; }
};

// The shape whose weights come closest to `mib` MiB with `layers` layers.
Shape ShapeForSize(size_t mib, int layers, int batch);

// Layer `layer`'s weights (column-major) and bias, uniform in [-1/sqrt(width), 1/sqrt(width)] so
// that activations stay of order one through any number of layers.
void GenerateLayer(uint64_t seed, int layer, const Shape& shape, float* weights, float* bias);
// Rows [first_col, first_col + cols) of layer `layer`'s weights only (for generating large
// models in pinned staging chunks).
void GenerateWeightColumns(uint64_t seed, int layer, const Shape& shape, size_t first_col, size_t cols, float* out);
void GenerateBias(uint64_t seed, int layer, const Shape& shape, float* out);

// The input of request {"seed": n}: uniform in [-1, 1].
std::vector<float> InputFromSeed(uint64_t seed, const Shape& shape);

// The forward pass on the CPU, accumulating in double.
std::vector<float> Reference(uint64_t weight_seed, const Shape& shape, const std::vector<float>& input);

// A parsed request: {"seed": n} or {"input": [...]} (width * batch floats), optional "full".
struct Request {
  std::vector<float> input;
  bool full = false;
};
Result<Request> ParseRequest(std::string_view body, const Shape& shape);

// The response body for `output` (width x batch): {"argmax": [...], "checksum": x[, "output":
// [...]]}. The same output always gives the same bytes.
std::string FormatResponse(const std::vector<float>& output, const Shape& shape, bool full);

}  // namespace phos::mlp
