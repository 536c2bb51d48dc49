// y = a * x + y, written once for nvcc and for simgpu (phos/kernel.h).
#pragma once

#include "phos/kernel.h"

PHOS_GLOBAL void saxpy(float a, const float* x, float* y, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
    y[i] = a * x[i] + y[i];
  }
}
PHOS_EXPORT_KERNEL(saxpy);
