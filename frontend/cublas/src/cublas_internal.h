// Shared by the cuBLAS frontend's translation units: what the frontend keeps of each handle, the
// record a call travels in, and how answers become cublasStatus_t.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <functional>

#include "phos/ipc/wire.h"

namespace phos::frontend::blas {

inline uint64_t Id(const void* p) {
  return reinterpret_cast<uintptr_t>(p);
}

// One record through the CUDA runtime frontend's session (phos/frontend/remote_call.h).
int Remote(ipc::Op op, const void* args, size_t len, bool reply, void* out = nullptr, size_t cap = 0);

// Sync handle calls answer with a cublasStatus_t; anything above its range is a session failure.
cublasStatus_t HandleStatus(int result);
// An asynchronous compute record answers with a CUresult, only ever a failure to queue.
cublasStatus_t QueueStatus(int result);
// A synchronous compute record (a Level 1 reduction in host pointer mode) answers with the
// CUresult phosd ran it with: its refusals (CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_NOT_SUPPORTED, an
// unknown handle) as cuBLAS names them, any other failure CUBLAS_STATUS_EXECUTION_FAILED.
cublasStatus_t ComputeStatus(int result);

// Logs, once per call, that it cannot be served; returns CUBLAS_STATUS_NOT_SUPPORTED. Each use is
// a row of frontend/surface/refused.tsv (docs/compatibility.md, phos-fn check).
cublasStatus_t NotSupported(const char* call, const char* why);

// What the frontend keeps of a handle: the settings cuBLAS answers from the handle itself.
struct HandleState {
  cudaStream_t stream = nullptr;
  cublasPointerMode_t pointer_mode = CUBLAS_POINTER_MODE_HOST;
  cublasMath_t math_mode = CUBLAS_DEFAULT_MATH;
  cublasAtomicsMode_t atomics = CUBLAS_ATOMICS_NOT_ALLOWED;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};
// Runs `change` on the state of `handle` under the frontend's lock; false when the handle is not
// one this process created (and not destroyed since).
bool WithHandle(cublasHandle_t handle, const std::function<void(HandleState&)>& change);
bool RememberHandle(cublasHandle_t handle);
void ForgetHandle(cublasHandle_t handle);
// The handle's pointer mode; host mode for a handle the frontend does not know (phosd then refuses
// the call by its handle).
int32_t PointerMode(cublasHandle_t handle);

// A scalar argument in the handle's pointer mode: `bytes` bytes copied from `p` (host mode), or
// the device address `p` (device mode). False for a null pointer.
inline bool Scalar(int32_t pointer_mode, const void* p, size_t bytes, ipc::BlasScalar* out) {
  if (p == nullptr) return false;
  *out = {};
  if (pointer_mode == CUBLAS_POINTER_MODE_DEVICE) {
    const uint64_t address = Id(p);
    std::memcpy(out->bytes, &address, sizeof(address));
  } else {
    std::memcpy(out->bytes, p, bytes);
  }
  return true;
}

// An enumeration argument as the integer the caller passed, read through its bytes: a C caller
// may pass any integer, and loading an enum object holding none of its values is undefined.
template <typename Enum>
int32_t Value(const Enum& e) {
  int32_t v = 0;
  static_assert(sizeof(v) == sizeof(e));
  std::memcpy(&v, &e, sizeof(v));
  return v;
}
// The enumerations cuBLAS checks before it does anything.
inline bool ValidOp(const cublasOperation_t& op) {
  const int32_t v = Value(op);
  return v == CUBLAS_OP_N || v == CUBLAS_OP_T || v == CUBLAS_OP_C;
}
inline bool ValidFill(const cublasFillMode_t& uplo) {
  const int32_t v = Value(uplo);
  return v == CUBLAS_FILL_MODE_LOWER || v == CUBLAS_FILL_MODE_UPPER;
}
inline bool ValidDiag(const cublasDiagType_t& diag) {
  const int32_t v = Value(diag);
  return v == CUBLAS_DIAG_NON_UNIT || v == CUBLAS_DIAG_UNIT;
}
inline bool ValidSide(const cublasSideMode_t& side) {
  const int32_t v = Value(side);
  return v == CUBLAS_SIDE_LEFT || v == CUBLAS_SIDE_RIGHT;
}

}  // namespace phos::frontend::blas
