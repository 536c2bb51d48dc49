#include "blas/status_table.h"

namespace phos::sim::blas {
namespace {

struct StatusEntry {
  cublasStatus_t status;
  const char* name;
  const char* text;
};

// Texts from the cuBLAS documentation's description of cublasStatus_t.
constexpr StatusEntry kStatuses[] = {
    {CUBLAS_STATUS_SUCCESS, "CUBLAS_STATUS_SUCCESS", "the operation completed successfully"},
    {CUBLAS_STATUS_NOT_INITIALIZED, "CUBLAS_STATUS_NOT_INITIALIZED",
     "the cuBLAS library was not initialized"},
    {CUBLAS_STATUS_ALLOC_FAILED, "CUBLAS_STATUS_ALLOC_FAILED",
     "resource allocation failed inside the cuBLAS library"},
    {CUBLAS_STATUS_INVALID_VALUE, "CUBLAS_STATUS_INVALID_VALUE",
     "an unsupported value or parameter was passed to the function"},
    {CUBLAS_STATUS_ARCH_MISMATCH, "CUBLAS_STATUS_ARCH_MISMATCH",
     "the function requires a feature absent from the device architecture"},
    {CUBLAS_STATUS_MAPPING_ERROR, "CUBLAS_STATUS_MAPPING_ERROR", "an access to GPU memory space failed"},
    {CUBLAS_STATUS_EXECUTION_FAILED, "CUBLAS_STATUS_EXECUTION_FAILED", "the GPU program failed to execute"},
    {CUBLAS_STATUS_INTERNAL_ERROR, "CUBLAS_STATUS_INTERNAL_ERROR", "an internal cuBLAS operation failed"},
    {CUBLAS_STATUS_NOT_SUPPORTED, "CUBLAS_STATUS_NOT_SUPPORTED",
     "the functionality requested is not supported"},
    {CUBLAS_STATUS_LICENSE_ERROR, "CUBLAS_STATUS_LICENSE_ERROR",
     "the functionality requested requires some license"},
};

const StatusEntry* Lookup(cublasStatus_t status) {
  for (const StatusEntry& e : kStatuses) {
    if (e.status == status) return &e;
  }
  return nullptr;
}

}  // namespace

const char* StatusName(cublasStatus_t status) {
  const StatusEntry* e = Lookup(status);
  return e != nullptr ? e->name : "CUBLAS_STATUS_UNKNOWN";
}

const char* StatusString(cublasStatus_t status) {
  const StatusEntry* e = Lookup(status);
  return e != nullptr ? e->text : "unknown cuBLAS status";
}

}  // namespace phos::sim::blas
