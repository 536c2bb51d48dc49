// stateful_fn's kernel: each request adds to an accumulator that lives on the device.
#pragma once

#include "phos/kernel.h"

// acc[i] += x * (i % 8 + 1)
PHOS_GLOBAL void accumulate(float* acc, float x, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) acc[i] += x * static_cast<float>(i % 8 + 1);
}
PHOS_EXPORT_KERNEL(accumulate);
