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

// out[k] = data[k] for k < count: the data buffer named as a parameter, read directly, so that
// speculation sees it (a sample request of this kind learns the buffer is read-only).
PHOS_GLOBAL void copy_direct(const float* data, int count, float* out) {
  const int k = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (k < count) out[k] = data[k];
}
PHOS_EXPORT_KERNEL(copy_direct);

// table[index][k] += 1 for k < count: a write through a pointer stored in device memory, which
// speculation cannot see (the table is a read-only parameter).
PHOS_GLOBAL void bump(float* const* table, int index, int count) {
  const int k = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (k < count) table[index][k] += 1.0f;
}
PHOS_EXPORT_KERNEL(bump);

// data[k] += 1 for k < count: a write speculation sees (the buffer is a non-const parameter).
PHOS_GLOBAL void add_one(float* data, int count) {
  const int k = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (k < count) data[k] += 1.0f;
}
PHOS_EXPORT_KERNEL(add_one);
