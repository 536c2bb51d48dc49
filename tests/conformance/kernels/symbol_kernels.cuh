// Kernels with module variables, for the conformance suite's symbol, attribute and launch tests:
// a __constant__ table the host fills with cuMemcpyHtoD at cuModuleGetGlobal's address, and a
// __device__ counter the kernel bumps and the host reads back.
#pragma once

#include "phos/kernel.h"

PHOS_CONSTANT_VARIABLE(float[16], coefficients);
PHOS_DEVICE_VARIABLE(unsigned int, applied);

// out[i] = coefficients[i % 16] * in[i]; `applied` counts the elements written.
PHOS_GLOBAL void apply_coefficients(const float* in, float* out, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) {
    out[i] = coefficients[i % 16] * in[i];
    atomicAdd(&applied, 1u);
  }
}
PHOS_EXPORT_KERNEL(apply_coefficients);
