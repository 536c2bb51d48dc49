// Must not compile in g++ mode: __shared__ memory.
#include "phos/kernel.h"

PHOS_GLOBAL void uses_shared(float* x) {
  __shared__ float tile[32];
  tile[threadIdx.x] = x[threadIdx.x];
  x[threadIdx.x] = tile[31 - threadIdx.x];
}
PHOS_EXPORT_KERNEL(uses_shared);
