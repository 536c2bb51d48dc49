// Must not compile in g++ mode: a block barrier cannot be met by sequentially run threads.
#include "phos/kernel.h"

PHOS_GLOBAL void uses_barrier(float* x) {
  x[threadIdx.x] = 1.0f;
  __syncthreads();
}
PHOS_EXPORT_KERNEL(uses_barrier);
