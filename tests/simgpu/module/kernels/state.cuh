// Module-level state: each loaded module (each load of one image too) has its own, as each loaded
// CUDA module has its own __device__ variables.
#pragma once

#include "phos/kernel.h"

PHOS_DEVICE unsigned int launch_count;

PHOS_GLOBAL void count_launch() {
  if (blockIdx.x == 0 && threadIdx.x == 0) atomicAdd(&launch_count, 1u);
}
PHOS_EXPORT_KERNEL(count_launch);

PHOS_GLOBAL void read_launch_count(unsigned* out) {
  *out = launch_count;
}
PHOS_EXPORT_KERNEL(read_launch_count);
