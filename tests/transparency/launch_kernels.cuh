// launch_report's kernels, written once (phos/kernel.h): nvcc builds them into the program for a
// GPU, g++ into a simgpu module and into the program's host side (the names cudaLaunchKernel and
// cudaMemcpyToSymbol find). The program itself knows only their declarations.
#pragma once

#include "phos/kernel.h"

// A polynomial's coefficients, lowest power first, which the program sets with
// cudaMemcpyToSymbol; and how many points have been evaluated, which it reads back.
PHOS_CONSTANT_VARIABLE(float[16], coefficients);
PHOS_DEVICE_VARIABLE(unsigned long long, evaluated);

// y[i] = sum over k of coefficients[k] * x[i]^k (Horner's scheme, highest power first).
PHOS_GLOBAL void evaluate_polynomial(const float* x, float* y, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) {
    float acc = 0.0f;
    for (int k = 15; k >= 0; --k) acc = acc * x[i] + coefficients[k];
    y[i] = acc;
    atomicAdd(&evaluated, 1ull);
  }
}
PHOS_EXPORT_KERNEL(evaluate_polynomial);
