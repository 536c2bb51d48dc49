// The mlp function's kernel, written once for nvcc and simgpu (phos/kernel.h).
#pragma once

#include "phos/kernel.h"

// y = act(y + bias) over a rows x cols column-major matrix, one element per thread; act is ReLU
// when `relu` is non-zero and the identity otherwise.
PHOS_GLOBAL void bias_activation(float* y, const float* bias, int rows, int cols, int relu) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < rows * cols) {
    float v = y[i] + bias[i % rows];
    y[i] = (relu != 0 && v < 0.0f) ? 0.0f : v;
  }
}
PHOS_EXPORT_KERNEL(bias_activation);
