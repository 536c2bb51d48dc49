// The function's kernel, written once for nvcc and simgpu (phos/kernel.h says what a kernel may use).
#pragma once

#include "phos/kernel.h"

// y[i] = a * x[i] + b, one element per thread (a grid-stride loop, so any grid covers any n).
PHOS_GLOBAL void axpb(float* y, const float* x, float a, float b, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
    y[i] = a * x[i] + b;
  }
}
PHOS_EXPORT_KERNEL(axpb);
