// Kernels of the simgpu module tests: indexing, parameter layout, templates, namespaces.
#pragma once

#include "phos/kernel.h"

// Grid-stride: correct for any launch shape, including fewer threads than elements.
PHOS_GLOBAL void vec_add(const float* a, const float* b, float* c, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) c[i] = a[i] + b[i];
}
PHOS_EXPORT_KERNEL(vec_add);

// Every simulated thread writes its built-in variables at its linear global index (x fastest):
// threadIdx, blockIdx, blockDim, gridDim, 12 values.
PHOS_GLOBAL void write_coords(unsigned* out) {
  const unsigned block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const unsigned thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  unsigned* o = out + 12 * (block * blockDim.x * blockDim.y * blockDim.z + thread);
  o[0] = threadIdx.x, o[1] = threadIdx.y, o[2] = threadIdx.z;
  o[3] = blockIdx.x, o[4] = blockIdx.y, o[5] = blockIdx.z;
  o[6] = blockDim.x, o[7] = blockDim.y, o[8] = blockDim.z;
  o[9] = gridDim.x, o[10] = gridDim.y, o[11] = gridDim.z;
}
PHOS_EXPORT_KERNEL(write_coords);

struct Vec3 {  // 12 bytes, 4-aligned
  float x, y, z;
};
struct alignas(16) Aligned16 {  // 16 bytes, 16-aligned
  double a;
  int b;
};
// One of each kind of parameter; thread 0 of block 0 writes them all back.
PHOS_GLOBAL void mixed_params(char c, double d, int i, double* out, Vec3 v, Aligned16 s) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  out[0] = c, out[1] = d, out[2] = i, out[3] = v.x, out[4] = v.y, out[5] = v.z, out[6] = s.a, out[7] = s.b;
}
PHOS_EXPORT_KERNEL(mixed_params);

// A parameter each thread modifies: every simulated thread must start from the launch's value.
PHOS_GLOBAL void param_is_per_thread(int base, int* out) {
  base += threadIdx.x;
  out[threadIdx.x] = base;
}
PHOS_EXPORT_KERNEL(param_is_per_thread);

template <typename T>
PHOS_GLOBAL void fill(T* p, T v, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) p[i] = v;
}
// fill<int> and fill<unsigned> compile to the same code; they must keep distinct names.
PHOS_EXPORT_KERNEL(fill<float>);
PHOS_EXPORT_KERNEL(fill<int>);
PHOS_EXPORT_KERNEL(fill<unsigned>);

namespace ops {
PHOS_GLOBAL void relu(float* x, unsigned long long n) {
  const unsigned long long i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = max(x[i], 0.0f);
}
PHOS_EXPORT_KERNEL(relu);
}  // namespace ops
