// globals_fn's kernel: module globals set before the pre-entry point (a __constant__ table and a
// __device__ counter) and read by every request.
#pragma once

#include "phos/kernel.h"

PHOS_CONSTANT_VARIABLE(float[8], scales);
PHOS_DEVICE_VARIABLE(unsigned int, requests_seen);

// out[i] = x * scales[i % 8] + weights[i]; the first thread counts the request.
PHOS_GLOBAL void scale_and_count(const float* weights, float x, float* out, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) out[i] = x * scales[i % 8] + weights[i];
  if (i == 0) atomicAdd(&requests_seen, 1u);
}
PHOS_EXPORT_KERNEL(scale_and_count);
