// Kernels of the simgpu graph tests: an element-wise update whose result depends on the order of
// the updates, and a one-thread kernel that appends its id to a log, so that a test reads the
// order in which a graph's nodes ran.
#pragma once

#include "phos/kernel.h"

// x[i] = x[i] * a + b.
PHOS_GLOBAL void scale_add(float* x, float a, float b, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) x[i] = x[i] * a + b;
}
PHOS_EXPORT_KERNEL(scale_add);

// log[(*cursor)++] = id, by one thread.
PHOS_GLOBAL void append_id(int* log, int* cursor, int id) {
  if (blockIdx.x == 0 && threadIdx.x == 0) log[atomicAdd(cursor, 1)] = id;
}
PHOS_EXPORT_KERNEL(append_id);
