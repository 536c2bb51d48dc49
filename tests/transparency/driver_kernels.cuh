// driver_report's kernels, written once (phos/kernel.h) and built into a module of their own: a
// simgpu module on simgpu, a fatbin for a GPU (phos_add_kernel_module), which the program loads with
// cuModuleLoadData. C linkage, so that cuModuleGetFunction and cuModuleGetGlobal name them as
// written.
#pragma once

#include "phos/kernel.h"

extern "C" {

// What every element is offset by: set by the program through cuModuleGetGlobal.
PHOS_DEVICE_VARIABLE(float, driver_offset);

// y[i] = a * x[i] + y[i] + driver_offset, for i < n.
PHOS_GLOBAL void driver_saxpy(int n, float a, const float* x, float* y) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) y[i] = a * x[i] + y[i] + driver_offset;
}

}  // extern "C"

PHOS_EXPORT_KERNEL(driver_saxpy);
