// Kernels of the frontend tests' client program (phos/kernel.h, built for simgpu).
#pragma once

#include "phos/kernel.h"

PHOS_GLOBAL void fill_kernel(float* p, float v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = v;
}
PHOS_EXPORT_KERNEL(fill_kernel);

PHOS_GLOBAL void empty_kernel() {}
PHOS_EXPORT_KERNEL(empty_kernel);
