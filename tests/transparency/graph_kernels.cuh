// graph_report's kernels, written once (phos/kernel.h): nvcc builds them into the program for a
// GPU, g++ into a simgpu module and into the program's host side (the names cudaLaunchKernel and
// cudaGraphAddKernelNode find). The program itself knows only their declarations.
#pragma once

#include "phos/kernel.h"

// y[i] = a * x[i] + y[i].
PHOS_GLOBAL void graph_axpy(const float* x, float* y, float a, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) y[i] = a * x[i] + y[i];
}
PHOS_EXPORT_KERNEL(graph_axpy);

// x[i] = s * x[i].
PHOS_GLOBAL void graph_scale(float* x, float s, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) x[i] = s * x[i];
}
PHOS_EXPORT_KERNEL(graph_scale);
