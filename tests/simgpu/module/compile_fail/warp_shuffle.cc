// Must not compile in g++ mode: warp intrinsics.
#include "phos/kernel.h"

template <typename T>
PHOS_GLOBAL void warp_sum(T* x) {
  T v = x[threadIdx.x];
  for (int d = 16; d > 0; d /= 2) v += __shfl_down_sync(0xffffffffu, v, d);
  if (threadIdx.x == 0) x[0] = v;
}
PHOS_EXPORT_KERNEL(warp_sum<float>);
