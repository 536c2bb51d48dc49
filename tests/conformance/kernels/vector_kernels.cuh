// Kernels for the conformance suite's launch, stream and event tests (docs/design.md D4: written once,
// compiled by nvcc for GPUs and by g++ into a simgpu module; the tests look them up by the mangled
// names in kernel_names.h).
#pragma once

#include "phos/kernel.h"

// c[i] = a[i] + b[i]; a grid-stride loop, so any launch shape covers all n elements.
PHOS_GLOBAL void vec_add(const float* a, const float* b, float* c, int n) {
  const int stride = static_cast<int>(blockDim.x * gridDim.x);
  for (int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); i < n; i += stride) {
    c[i] = a[i] + b[i];
  }
}
PHOS_EXPORT_KERNEL(vec_add);

// x[i] = a * x[i] + b in place: a read-write parameter, for chains of dependent launches.
PHOS_GLOBAL void scale_add(float* x, float a, float b, int n) {
  const int stride = static_cast<int>(blockDim.x * gridDim.x);
  for (int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); i < n; i += stride) {
    x[i] = a * x[i] + b;
  }
}
PHOS_EXPORT_KERNEL(scale_add);

// Every thread of a 3-D grid of 3-D blocks writes its linear id + 1 into its own slot and bumps
// the counter once: the result shows that each (block, thread) pair ran exactly once.
PHOS_GLOBAL void record_threads(unsigned int* slots, unsigned int* counter) {
  const unsigned int block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const unsigned int thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const unsigned int id = block * (blockDim.x * blockDim.y * blockDim.z) + thread;
  slots[id] = id + 1;
  atomicAdd(counter, 1u);
}
PHOS_EXPORT_KERNEL(record_threads);
