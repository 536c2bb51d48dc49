// Kernels of the frontend's launch and symbol tests (phos/kernel.h, built for simgpu): a constant
// lookup table and a bias the host sets with cudaMemcpyToSymbol, and a counter the kernel bumps
// and the host reads back with cudaMemcpyFromSymbol.
#pragma once

#include "phos/kernel.h"

PHOS_CONSTANT_VARIABLE(float[16], lut);
PHOS_DEVICE_VARIABLE(unsigned int, processed);
namespace launch_test {
PHOS_DEVICE_VARIABLE(float, bias);
}  // namespace launch_test

// out[i] = lut[i % 16] * in[i] + bias; `processed` counts the elements written.
PHOS_GLOBAL void lookup_scale(const float* in, float* out, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) {
    out[i] = lut[i % 16] * in[i] + launch_test::bias;
    atomicAdd(&processed, 1u);
  }
}
PHOS_EXPORT_KERNEL(lookup_scale);
