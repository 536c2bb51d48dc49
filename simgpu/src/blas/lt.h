// simgpu's cuBLASLt (cublasLt.h ABI): handles, matmul descriptors, matrix layouts and preferences
// as table ids (device/handles.h: a garbage or destroyed one is a failed lookup, never a
// dereference), and cublasLtMatmul on OpenBLAS's sgemm with the epilogues computed here.
//
// What is served: fp32, fp16 and bf16 A and B computing in fp32 (scale type fp32), C and D of the
// inputs' type or fp32, column- or row-major layouts, strided batches, host-mode alpha and beta,
// and the epilogues DEFAULT, RELU, BIAS, RELU_BIAS, GELU and GELU_BIAS (GELU as cuBLASLt computes
// it: the tanh approximation). Any other attribute is CUBLAS_STATUS_NOT_SUPPORTED when set.
#pragma once

#include <cublasLt.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "blas/blas_ops.h"
#include "device/device_access.h"
#include "device/handles.h"
#include "phos/simgpu/blas_lt_attributes.h"

namespace phos::sim::blas {

struct LtHandle {
  ContextRef ctx;  // the context current at cublasLtCreate: its streams run the handle's work
};

// The descriptors, layouts and preferences, and their attributes (phos/simgpu/blas_lt_attributes.h,
// shared with libphos-cublasLt).
using LtMatmulDesc = phos::blaslt::MatmulDesc;
using LtLayout = phos::blaslt::Layout;
using LtPreference = phos::blaslt::Preference;
using phos::blaslt::GetAttribute;
using phos::blaslt::SetAttribute;

// The process's cuBLASLt objects. Only handles reach the devices (through `device`).
class LtRegistry {
 public:
  explicit LtRegistry(DeviceAccess& device) : device_(device) {}
  LtRegistry(const LtRegistry&) = delete;
  LtRegistry& operator=(const LtRegistry&) = delete;

  // cublasLtCreate: needs a current context (CUBLAS_STATUS_NOT_INITIALIZED otherwise).
  cublasStatus_t CreateHandle(cublasLtHandle_t* out);
  // The live handle's context and `stream` resolved in it, as a compute call's target;
  // CUBLAS_STATUS_NOT_INITIALIZED for a handle that is not live (or whose context is gone),
  // CUBLAS_STATUS_EXECUTION_FAILED for a context with a sticky error or a stream not of it.
  cublasStatus_t BeginCall(cublasLtHandle_t handle, cudaStream_t stream, std::shared_ptr<LtHandle>* held,
                           std::shared_ptr<Stream>* resolved);
  DeviceAccess& device() { return device_; }

  HandleTable<LtHandle, cublasLtHandle_t, HandleKind::kBlasLtHandle> handles;
  HandleTable<LtMatmulDesc, cublasLtMatmulDesc_t, HandleKind::kBlasLtMatmulDesc> descs;
  HandleTable<LtLayout, cublasLtMatrixLayout_t, HandleKind::kBlasLtMatrixLayout> layouts;
  HandleTable<LtPreference, cublasLtMatmulPreference_t, HandleKind::kBlasLtPreference> preferences;

 private:
  DeviceAccess& device_;
};

// One cublasLtMatmul, its descriptors copied when the call is made.
struct LtMatmulCall {
  LtMatmulDesc desc;
  LtLayout a, b, c, d;
  const void* alpha = nullptr;  // host fp32
  const void* beta = nullptr;
  const void* pa = nullptr;
  const void* pb = nullptr;
  const void* pc = nullptr;
  void* pd = nullptr;
  void* workspace = nullptr;
  uint64_t workspace_bytes = 0;
};

// Whether the problem is one simgpu computes: CUBLAS_STATUS_INVALID_VALUE for what cuBLASLt
// refuses (shapes, leading dimensions or batch counts that do not agree, a bias epilogue without
// a bias), CUBLAS_STATUS_NOT_SUPPORTED for types, orders and an inner dimension of 0 outside the
// served set. What cublasLtMatmulAlgoGetHeuristic answers by.
cublasStatus_t CheckLtProblem(const LtMatmulDesc& desc, const LtLayout& a, const LtLayout& b, const LtLayout& c,
                              const LtLayout& d);
// CheckLtProblem, the scalars and every operand (CUBLAS_STATUS_INVALID_VALUE for one that is not
// device memory of its extent, a simgpu departure as for cuBLAS), then the work enqueued on the
// target's stream, split by columns of D across the device's compute workers.
cublasStatus_t EnqueueLtMatmul(const BlasTarget& target, const LtMatmulCall& call);

}  // namespace phos::sim::blas
