// The CUDA runtime calls phos/fn/decoder_ops.h makes (cudaLaunchKernel, cudaGetErrorName),
// implemented in the test on simgpu's driver API, so the launcher's own code runs on simgpu
// without phosd: a kernel's host-side function names its kernel by its exported symbol (dladdr),
// which is looked up in the module loaded by LoadDecoderKernelModule, as the frontend's
// cudaLaunchKernel does with a function's registered module.
#pragma once

#include <cuda.h>

namespace phos::fn::testing {

// Loads the decoder kernels' simgpu module (PHOS_FN_KERNELS_MODULE_PATH) into the current
// context; launches go there until UnloadDecoderKernelModule.
CUresult LoadDecoderKernelModule();
CUresult UnloadDecoderKernelModule();

}  // namespace phos::fn::testing
