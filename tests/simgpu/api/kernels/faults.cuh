// Kernels that misbehave on purpose: simgpu must turn their faults into CUDA errors.
#pragma once

#include "phos/kernel.h"

// Writes through whatever pointer it is given.
PHOS_GLOBAL void store_through(int* p, int value) {
  if (blockIdx.x == 0 && threadIdx.x == 0) *p = value;
}
PHOS_EXPORT_KERNEL(store_through);
