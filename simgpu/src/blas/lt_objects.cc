// cuBLASLt's descriptors' attributes, and its handles (blas/lt.h).
#include <cstring>

#include "blas/blas_internal.h"
#include "blas/lt.h"

namespace phos::sim::blas {
namespace {

// A served attribute: its value checked, copied in whole.
template <typename T, typename Valid>
cublasStatus_t Store(T* field, const void* buf, size_t bytes, Valid valid) {
  if (buf == nullptr || bytes != sizeof(T)) return CUBLAS_STATUS_INVALID_VALUE;
  T value;
  std::memcpy(&value, buf, sizeof(T));
  if (cublasStatus_t s = valid(value); s != CUBLAS_STATUS_SUCCESS) return s;
  *field = value;
  return CUBLAS_STATUS_SUCCESS;
}
template <typename T>
cublasStatus_t Store(T* field, const void* buf, size_t bytes) {
  return Store(field, buf, bytes, [](T) { return CUBLAS_STATUS_SUCCESS; });
}

// cuBLASLt's GetAttribute: with bytes 0 the size only; a buffer too small for the value, or none,
// is refused.
template <typename T>
cublasStatus_t Load(const T& field, void* buf, size_t bytes, size_t* written) {
  if (bytes == 0) {
    if (written == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
    *written = sizeof(T);
    return CUBLAS_STATUS_SUCCESS;
  }
  if (buf == nullptr || bytes < sizeof(T)) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(buf, &field, sizeof(T));
  if (written != nullptr) *written = sizeof(T);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t Operation(int32_t op) {
  return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C ? CUBLAS_STATUS_SUCCESS
                                                                     : CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t Epilogue(uint32_t e) {
  switch (e) {
    case CUBLASLT_EPILOGUE_DEFAULT:
    case CUBLASLT_EPILOGUE_RELU:
    case CUBLASLT_EPILOGUE_BIAS:
    case CUBLASLT_EPILOGUE_RELU_BIAS:
    case CUBLASLT_EPILOGUE_GELU:
    case CUBLASLT_EPILOGUE_GELU_BIAS:
      return CUBLAS_STATUS_SUCCESS;
    default:
      return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

cublasStatus_t PointerMode(int32_t mode) {
  if (mode == CUBLASLT_POINTER_MODE_HOST) return CUBLAS_STATUS_SUCCESS;
  return mode >= CUBLASLT_POINTER_MODE_DEVICE && mode <= CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_HOST
             ? CUBLAS_STATUS_NOT_SUPPORTED
             : CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t Order(int32_t order) {
  if (order == CUBLASLT_ORDER_COL || order == CUBLASLT_ORDER_ROW) return CUBLAS_STATUS_SUCCESS;
  return order > CUBLASLT_ORDER_ROW && order <= CUBLASLT_ORDER_COL32_2R_4R4 ? CUBLAS_STATUS_NOT_SUPPORTED
                                                                             : CUBLAS_STATUS_INVALID_VALUE;
}

}  // namespace

cublasStatus_t SetAttribute(LtMatmulDesc& d, int attribute, const void* buf, size_t bytes) {
  switch (attribute) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE:
      return Store(&d.compute_type, buf, bytes);
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE:
      return Store(&d.scale_type, buf, bytes);
    case CUBLASLT_MATMUL_DESC_POINTER_MODE:
      return Store(&d.pointer_mode, buf, bytes, PointerMode);
    case CUBLASLT_MATMUL_DESC_TRANSA:
      return Store(&d.trans_a, buf, bytes, Operation);
    case CUBLASLT_MATMUL_DESC_TRANSB:
      return Store(&d.trans_b, buf, bytes, Operation);
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
      return Store(&d.epilogue, buf, bytes, Epilogue);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
      return Store(&d.bias, buf, bytes);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
      return Store(&d.bias_type, buf, bytes);
    default:
      return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

cublasStatus_t GetAttribute(const LtMatmulDesc& d, int attribute, void* buf, size_t bytes, size_t* written) {
  switch (attribute) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE:
      return Load(d.compute_type, buf, bytes, written);
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE:
      return Load(d.scale_type, buf, bytes, written);
    case CUBLASLT_MATMUL_DESC_POINTER_MODE:
      return Load(d.pointer_mode, buf, bytes, written);
    case CUBLASLT_MATMUL_DESC_TRANSA:
      return Load(d.trans_a, buf, bytes, written);
    case CUBLASLT_MATMUL_DESC_TRANSB:
      return Load(d.trans_b, buf, bytes, written);
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
      return Load(d.epilogue, buf, bytes, written);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
      return Load(d.bias, buf, bytes, written);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
      return Load(d.bias_type, buf, bytes, written);
    default:
      return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

cublasStatus_t SetAttribute(LtLayout& l, int attribute, const void* buf, size_t bytes) {
  switch (attribute) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE:
      return Store(&l.type, buf, bytes);
    case CUBLASLT_MATRIX_LAYOUT_ORDER:
      return Store(&l.order, buf, bytes, Order);
    case CUBLASLT_MATRIX_LAYOUT_ROWS:
      return Store(&l.rows, buf, bytes);
    case CUBLASLT_MATRIX_LAYOUT_COLS:
      return Store(&l.cols, buf, bytes);
    case CUBLASLT_MATRIX_LAYOUT_LD:
      return Store(&l.ld, buf, bytes);
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT:
      return Store(&l.batch_count, buf, bytes);
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET:
      return Store(&l.batch_stride, buf, bytes);
    default:
      return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

cublasStatus_t GetAttribute(const LtLayout& l, int attribute, void* buf, size_t bytes, size_t* written) {
  switch (attribute) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE:
      return Load(l.type, buf, bytes, written);
    case CUBLASLT_MATRIX_LAYOUT_ORDER:
      return Load(l.order, buf, bytes, written);
    case CUBLASLT_MATRIX_LAYOUT_ROWS:
      return Load(l.rows, buf, bytes, written);
    case CUBLASLT_MATRIX_LAYOUT_COLS:
      return Load(l.cols, buf, bytes, written);
    case CUBLASLT_MATRIX_LAYOUT_LD:
      return Load(l.ld, buf, bytes, written);
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT:
      return Load(l.batch_count, buf, bytes, written);
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET:
      return Load(l.batch_stride, buf, bytes, written);
    default:
      return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

cublasStatus_t SetAttribute(LtPreference& p, int attribute, const void* buf, size_t bytes) {
  if (attribute != CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) return CUBLAS_STATUS_NOT_SUPPORTED;
  return Store(&p.max_workspace_bytes, buf, bytes);
}

cublasStatus_t GetAttribute(const LtPreference& p, int attribute, void* buf, size_t bytes, size_t* written) {
  if (attribute != CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) return CUBLAS_STATUS_NOT_SUPPORTED;
  return Load(p.max_workspace_bytes, buf, bytes, written);
}

cublasStatus_t LtRegistry::CreateHandle(cublasLtHandle_t* out) {
  if (out == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  auto handle = std::make_shared<LtHandle>();
  if (CUresult r = device_.CurrentContext(&handle->ctx); r != CUDA_SUCCESS) {
    PHOS_LOG(Warn, "simgpu", "cublasLtCreate: no usable current context (CUresult {})", static_cast<int>(r));
    return CUBLAS_STATUS_NOT_INITIALIZED;
  }
  *out = handles.Insert(std::move(handle));
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t LtRegistry::BeginCall(cublasLtHandle_t handle, cudaStream_t stream, std::shared_ptr<LtHandle>* held,
                                     std::shared_ptr<Stream>* resolved) {
  *held = handles.Find(handle);
  if (*held == nullptr || !device_.IsLive((*held)->ctx)) return CUBLAS_STATUS_NOT_INITIALIZED;
  const ContextRef& ctx = (*held)->ctx;
  if (ctx.exec->sticky_error() != CUDA_SUCCESS) return CUBLAS_STATUS_EXECUTION_FAILED;
  if (device_.ResolveStream(ctx, stream, resolved) != CUDA_SUCCESS) {
    PHOS_LOG_EVERY_SEC(Warn, "simgpu", 1, "cublasLtMatmul: not a stream of the handle's context");
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace phos::sim::blas
