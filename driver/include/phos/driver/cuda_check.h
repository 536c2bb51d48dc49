// Turns a CUresult into a Status that carries the driver's own error name and string.
//
// The functions that name errors come from whichever driver is in use (NVIDIA's libcuda or
// simgpu, resolved at run time), so callers pass them in as a CuErrorText:
//
//   PHOS_CU_RETURN_IF_ERROR(text, cuMemAlloc(&ptr, bytes));
//   -> DeviceError/OutOfMemory "cuMemAlloc(&ptr, bytes): CUDA_ERROR_OUT_OF_MEMORY (out of memory)"
#pragma once

#include <string_view>

#include <cuda.h>

#include "phos/base/status.h"

namespace phos::driver {

struct CuErrorText {
  CUresult (*get_name)(CUresult, const char**) = nullptr;    // cuGetErrorName
  CUresult (*get_string)(CUresult, const char**) = nullptr;  // cuGetErrorString
};

// OK for CUDA_SUCCESS; otherwise "call: NAME (string)". CUDA_ERROR_OUT_OF_MEMORY maps to
// kOutOfMemory, CUDA_ERROR_INVALID_VALUE to kInvalidArgument, everything else to kDeviceError.
Status CuStatus(CUresult result, std::string_view call, const CuErrorText& text);

}  // namespace phos::driver

#define PHOS_CU_RETURN_IF_ERROR(text, call) \
  PHOS_RETURN_IF_ERROR(::phos::driver::CuStatus((call), #call, (text)))
