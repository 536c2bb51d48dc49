// graph_fn's kernel: the one step its captured graph launches twice.
#pragma once

#include "phos/kernel.h"

// y[i] = a * x[i] + y[i].
PHOS_GLOBAL void graph_fn_axpy(const float* x, float* y, float a, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) y[i] = a * x[i] + y[i];
}
PHOS_EXPORT_KERNEL(graph_fn_axpy);
