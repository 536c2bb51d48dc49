// cublasGetStatusName / cublasGetStatusString.
#pragma once

#include <cublas_v2.h>

namespace phos::sim::blas {

// "CUBLAS_STATUS_INVALID_VALUE"; "CUBLAS_STATUS_UNKNOWN" for a value that is not a status.
const char* StatusName(cublasStatus_t status);
// The meaning cuBLAS's documentation gives each status, e.g. "an unsupported value or parameter
// was passed to the function"; "unknown cuBLAS status" otherwise.
const char* StatusString(cublasStatus_t status);

}  // namespace phos::sim::blas
