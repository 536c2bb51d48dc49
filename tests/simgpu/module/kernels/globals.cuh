// Module variables (PHOS_CONSTANT_VARIABLE, PHOS_DEVICE_VARIABLE): storage the loader binds in
// device memory when the module loads, read and written by the module's kernels in every way
// phos/kernel/sim_variable.h offers.
#pragma once

#include "phos/kernel.h"

struct Window {
  int first;
  int count;
};

PHOS_CONSTANT_VARIABLE(float[8], scale_table);
PHOS_CONSTANT_VARIABLE(Window, window);
PHOS_DEVICE_VARIABLE(unsigned long long, hit_count);
PHOS_DEVICE_VARIABLE(int, last_index);
namespace globals {
PHOS_DEVICE_VARIABLE(double, offset);
}  // namespace globals

// For i in the window: out[i] = in[i] * scale_table[i % 8] + offset; counts the elements
// written in hit_count (atomically, through its address) and notes the highest index.
PHOS_GLOBAL void scale_in_window(const float* in, float* out, int n) {
  const Window w = window;
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x) + w.first;
  if (i < n && i < w.first + w.count) {
    out[i] = in[i] * scale_table[i % 8] + static_cast<float>(globals::offset);
    atomicAdd(&hit_count, 1ull);
    atomicMax(&last_index, i);
  }
}
PHOS_EXPORT_KERNEL(scale_in_window);

// Updates in place: offset += step, twice over, and one increment.
PHOS_GLOBAL void bump_offset(double step) {
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    globals::offset += step;
    globals::offset = globals::offset + step;
    ++last_index;
  }
}
PHOS_EXPORT_KERNEL(bump_offset);
