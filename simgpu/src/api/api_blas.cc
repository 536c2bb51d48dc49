// The exported cuBLAS handle calls, under the names cublas_v2.h maps them to (cublasCreate ->
// cublasCreate_v2, ...), over the driver's cuBLAS handle registry (blas/blas_handle.h); the
// compute routines are in api_blas_level1_2.cc and api_blas_level3.cc. Before cuInit there is no
// registry, and every call on a handle is CUBLAS_STATUS_NOT_INITIALIZED.
#include <cublas_v2.h>

#include "api/blas_calls.h"
#include "blas/blas_internal.h"
#include "blas/status_table.h"
#include "phos/base/enum_value.h"
#include "phos/base/log.h"

using namespace phos::sim;
using namespace phos::sim::blas;

namespace {

bool ValidMathMode(cublasMath_t mode) {
  switch (static_cast<int>(mode) & ~static_cast<int>(CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)) {
    case CUBLAS_DEFAULT_MATH:
    case CUBLAS_TENSOR_OP_MATH:
    case CUBLAS_PEDANTIC_MATH:
    case CUBLAS_TF32_TENSOR_OP_MATH:
    case CUBLAS_FP32_EMULATED_BF16X9_MATH:
    case CUBLAS_FP64_EMULATED_FIXEDPOINT_MATH:
      return true;
    default:
      return false;
  }
}

}  // namespace

extern "C" {

PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasCreate(cublasHandle_t* handle) {
  HandleRegistry* handles = Handles();
  return handles == nullptr ? CUBLAS_STATUS_NOT_INITIALIZED : handles->Create(handle);
}

PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasDestroy(cublasHandle_t handle) {
  HandleRegistry* handles = Handles();
  return handles == nullptr ? CUBLAS_STATUS_NOT_INITIALIZED : handles->Destroy(handle);
}

PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasGetVersion(cublasHandle_t handle, int* version) {
  std::shared_ptr<BlasHandle> h;
  if (cublasStatus_t s = FindHandle(handle, &h); s != CUBLAS_STATUS_SUCCESS) return s;
  if (version == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *version = CUBLAS_VERSION;
  return CUBLAS_STATUS_SUCCESS;
}

PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasGetProperty(libraryPropertyType type, int* value) {
  if (value == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  switch (type) {
    case MAJOR_VERSION:
      *value = CUBLAS_VER_MAJOR;
      return CUBLAS_STATUS_SUCCESS;
    case MINOR_VERSION:
      *value = CUBLAS_VER_MINOR;
      return CUBLAS_STATUS_SUCCESS;
    case PATCH_LEVEL:
      *value = CUBLAS_VER_PATCH;
      return CUBLAS_STATUS_SUCCESS;
    default:
      return CUBLAS_STATUS_INVALID_VALUE;
  }
}

PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasSetStream(cublasHandle_t handle, cudaStream_t stream) {
  // cudaStream_t and CUstream are the same type.
  HandleRegistry* handles = Handles();
  return handles == nullptr ? CUBLAS_STATUS_NOT_INITIALIZED : handles->SetStream(handle, stream);
}

PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasGetStream(cublasHandle_t handle, cudaStream_t* stream) {
  std::shared_ptr<BlasHandle> h;
  if (cublasStatus_t s = FindHandle(handle, &h); s != CUBLAS_STATUS_SUCCESS) return s;
  if (stream == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  std::lock_guard lock(h->mu);
  *stream = h->stream;
  return CUBLAS_STATUS_SUCCESS;
}

PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasGetPointerMode(cublasHandle_t handle,
                                                              cublasPointerMode_t* mode) {
  std::shared_ptr<BlasHandle> h;
  if (cublasStatus_t s = FindHandle(handle, &h); s != CUBLAS_STATUS_SUCCESS) return s;
  if (mode == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  std::lock_guard lock(h->mu);
  *mode = h->pointer_mode;
  return CUBLAS_STATUS_SUCCESS;
}

PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasSetPointerMode(cublasHandle_t handle,
                                                              cublasPointerMode_t mode) {
  std::shared_ptr<BlasHandle> h;
  if (cublasStatus_t s = FindHandle(handle, &h); s != CUBLAS_STATUS_SUCCESS) return s;
  const int value = phos::EnumValue(mode);
  if (value != CUBLAS_POINTER_MODE_HOST && value != CUBLAS_POINTER_MODE_DEVICE) return CUBLAS_STATUS_INVALID_VALUE;
  std::lock_guard lock(h->mu);
  h->pointer_mode = mode;
  return CUBLAS_STATUS_SUCCESS;
}

PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasGetMathMode(cublasHandle_t handle, cublasMath_t* mode) {
  std::shared_ptr<BlasHandle> h;
  if (cublasStatus_t s = FindHandle(handle, &h); s != CUBLAS_STATUS_SUCCESS) return s;
  if (mode == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  std::lock_guard lock(h->mu);
  *mode = h->math_mode;
  return CUBLAS_STATUS_SUCCESS;
}

PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  std::shared_ptr<BlasHandle> h;
  if (cublasStatus_t s = FindHandle(handle, &h); s != CUBLAS_STATUS_SUCCESS) return s;
  if (!ValidMathMode(mode)) return CUBLAS_STATUS_INVALID_VALUE;
  // Recorded and reported; results are plain fp32 whatever the mode (a departure in precision
  // only: tensor-op modes may round more on a GPU, never less).
  std::lock_guard lock(h->mu);
  h->math_mode = mode;
  return CUBLAS_STATUS_SUCCESS;
}

PHOS_SIM_API const char* CUBLASWINAPI cublasGetStatusName(cublasStatus_t status) {
  return phos::sim::blas::StatusName(status);
}

PHOS_SIM_API const char* CUBLASWINAPI cublasGetStatusString(cublasStatus_t status) {
  return phos::sim::blas::StatusString(status);
}

}  // extern "C"
