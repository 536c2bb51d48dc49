// Kernels that misbehave on purpose: simgpu must turn their faults into CUDA errors.
#pragma once

#include "phos/kernel.h"

// Writes through whatever pointer it is given.
PHOS_GLOBAL void store_through(int* p, int value) {
  if (blockIdx.x == 0 && threadIdx.x == 0) *p = value;
}
PHOS_EXPORT_KERNEL(store_through);

// out[i] = in[i] + 1, one element per thread: reads a buffer directly.
PHOS_GLOBAL void add_one(const int* in, int* out, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) out[i] = in[i] + 1;
}
PHOS_EXPORT_KERNEL(add_one);

// Writes `value` through the pointer stored at *table: an indirect write, which no inspection of
// the launch's parameters can foresee (their one pointer is to memory the kernel only reads).
PHOS_GLOBAL void store_through_table(int* const* table, int value) {
  if (blockIdx.x == 0 && threadIdx.x == 0) **table = value;
}
PHOS_EXPORT_KERNEL(store_through_table);

// *out = the sum of n ints read through the pointer stored at *table: an indirect access, which
// no inspection of the launch's parameters can foresee.
PHOS_GLOBAL void sum_through(const int* const* table, int* out, int n) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  const int* data = *table;
  int sum = 0;
  for (int i = 0; i < n; ++i) sum += data[i];
  *out = sum;
}
PHOS_EXPORT_KERNEL(sum_through);
