// The second test module's own kernel.
#pragma once

#include "phos/kernel.h"

PHOS_GLOBAL void scale(float* x, float factor, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) x[i] *= factor;
}
PHOS_EXPORT_KERNEL(scale);
