// indirect_fn's kernel, written once for nvcc and simgpu (phos/kernel.h).
#pragma once

#include "phos/kernel.h"

// out[k] = table[index][k] for k < count, one element per thread. The data buffer is reached
// only through the pointer stored in the table, never as a parameter: inspecting the launch's
// parameters finds the table and `out`, not the buffer the kernel really reads.
PHOS_GLOBAL void gather(const float* const* table, int index, int count, float* out) {
  const int k = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (k < count) out[k] = table[index][k];
}
PHOS_EXPORT_KERNEL(gather);
