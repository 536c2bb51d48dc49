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

namespace phos::sim::blas {

struct LtHandle {
  ContextRef ctx;  // the context current at cublasLtCreate: its streams run the handle's work
};

struct LtMatmulDesc {
  int32_t compute_type = CUBLAS_COMPUTE_32F;  // cublasComputeType_t
  int32_t scale_type = CUDA_R_32F;            // cudaDataType of alpha and beta
  int32_t pointer_mode = CUBLASLT_POINTER_MODE_HOST;
  int32_t trans_a = CUBLAS_OP_N;
  int32_t trans_b = CUBLAS_OP_N;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  uint64_t bias = 0;       // const void*, as the attribute holds it
  int32_t bias_type = -1;  // -1: D's type
};

struct LtLayout {
  uint32_t type = CUDA_R_32F;  // cudaDataType
  int32_t order = CUBLASLT_ORDER_COL;
  uint64_t rows = 0;
  uint64_t cols = 0;
  int64_t ld = 0;
  int32_t batch_count = 1;
  int64_t batch_stride = 0;  // elements
};

struct LtPreference {
  uint64_t max_workspace_bytes = 0;
};

// The attributes of each object as cublasLt*SetAttribute / GetAttribute take them: a served
// attribute's value of the exact size (CUBLAS_STATUS_INVALID_VALUE otherwise, and for a value
// cuBLASLt refuses), CUBLAS_STATUS_NOT_SUPPORTED for any other attribute or a value simgpu does not
// serve. GetAttribute with `bytes` 0 answers the size only (in *written).
cublasStatus_t SetAttribute(LtMatmulDesc& desc, int attribute, const void* buf, size_t bytes);
cublasStatus_t GetAttribute(const LtMatmulDesc& desc, int attribute, void* buf, size_t bytes, size_t* written);
cublasStatus_t SetAttribute(LtLayout& layout, int attribute, const void* buf, size_t bytes);
cublasStatus_t GetAttribute(const LtLayout& layout, int attribute, void* buf, size_t bytes, size_t* written);
cublasStatus_t SetAttribute(LtPreference& pref, int attribute, const void* buf, size_t bytes);
cublasStatus_t GetAttribute(const LtPreference& pref, int attribute, void* buf, size_t bytes, size_t* written);

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
