// cuBLASLt's host-side objects as its API describes them — matmul descriptors, matrix layouts and
// preferences — and their Set/GetAttribute, written once for both places that keep them: simgpu's
// cuBLASLt (the library phosd calls) and libphos-cublasLt (the library a function process calls,
// which keeps them in the process as NVIDIA's does and sends what they say with each matmul).
//
// A served attribute's value must be of its exact size (CUBLAS_STATUS_INVALID_VALUE otherwise, and
// for a value cuBLASLt refuses); any other attribute, or a value phos does not serve, is
// CUBLAS_STATUS_NOT_SUPPORTED. GetAttribute with `bytes` 0 answers the size only (in *written).
// What is served: docs/remoting.md, "cuBLASLt".
#pragma once

#include <cublasLt.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace phos::blaslt {

struct MatmulDesc {
  int32_t compute_type = CUBLAS_COMPUTE_32F;  // cublasComputeType_t
  int32_t scale_type = CUDA_R_32F;            // cudaDataType of alpha and beta
  int32_t pointer_mode = CUBLASLT_POINTER_MODE_HOST;
  int32_t trans_a = CUBLAS_OP_N;
  int32_t trans_b = CUBLAS_OP_N;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  uint64_t bias = 0;       // const void*, as the attribute holds it
  int32_t bias_type = -1;  // -1: D's type
};

struct Layout {
  uint32_t type = CUDA_R_32F;  // cudaDataType
  int32_t order = CUBLASLT_ORDER_COL;
  uint64_t rows = 0;
  uint64_t cols = 0;
  int64_t ld = 0;
  int32_t batch_count = 1;
  int64_t batch_stride = 0;  // elements
};

struct Preference {
  uint64_t max_workspace_bytes = 0;
};

namespace detail {

// A served attribute: its value checked, copied in whole.
template <typename T, typename Valid>
inline cublasStatus_t Store(T* field, const void* buf, size_t bytes, Valid valid) {
  if (buf == nullptr || bytes != sizeof(T)) return CUBLAS_STATUS_INVALID_VALUE;
  T value;
  std::memcpy(&value, buf, sizeof(T));
  if (cublasStatus_t s = valid(value); s != CUBLAS_STATUS_SUCCESS) return s;
  *field = value;
  return CUBLAS_STATUS_SUCCESS;
}
template <typename T>
inline cublasStatus_t Store(T* field, const void* buf, size_t bytes) {
  return Store(field, buf, bytes, [](T) { return CUBLAS_STATUS_SUCCESS; });
}

// cuBLASLt's GetAttribute: with bytes 0 the size only; a buffer too small for the value, or none,
// is refused.
template <typename T>
inline cublasStatus_t Load(const T& field, void* buf, size_t bytes, size_t* written) {
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

inline cublasStatus_t Operation(int32_t op) {
  return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C ? CUBLAS_STATUS_SUCCESS
                                                                     : CUBLAS_STATUS_INVALID_VALUE;
}

inline cublasStatus_t Epilogue(uint32_t e) {
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

inline cublasStatus_t PointerMode(int32_t mode) {
  if (mode == CUBLASLT_POINTER_MODE_HOST) return CUBLAS_STATUS_SUCCESS;
  return mode >= CUBLASLT_POINTER_MODE_DEVICE && mode <= CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_HOST
             ? CUBLAS_STATUS_NOT_SUPPORTED
             : CUBLAS_STATUS_INVALID_VALUE;
}

inline cublasStatus_t Order(int32_t order) {
  if (order == CUBLASLT_ORDER_COL || order == CUBLASLT_ORDER_ROW) return CUBLAS_STATUS_SUCCESS;
  return order > CUBLASLT_ORDER_ROW && order <= CUBLASLT_ORDER_COL32_2R_4R4 ? CUBLAS_STATUS_NOT_SUPPORTED
                                                                             : CUBLAS_STATUS_INVALID_VALUE;
}

}  // namespace detail

inline cublasStatus_t SetAttribute(MatmulDesc& d, int attribute, const void* buf, size_t bytes) {
  switch (attribute) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE:
      return detail::Store(&d.compute_type, buf, bytes);
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE:
      return detail::Store(&d.scale_type, buf, bytes);
    case CUBLASLT_MATMUL_DESC_POINTER_MODE:
      return detail::Store(&d.pointer_mode, buf, bytes, detail::PointerMode);
    case CUBLASLT_MATMUL_DESC_TRANSA:
      return detail::Store(&d.trans_a, buf, bytes, detail::Operation);
    case CUBLASLT_MATMUL_DESC_TRANSB:
      return detail::Store(&d.trans_b, buf, bytes, detail::Operation);
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
      return detail::Store(&d.epilogue, buf, bytes, detail::Epilogue);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
      return detail::Store(&d.bias, buf, bytes);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
      return detail::Store(&d.bias_type, buf, bytes);
    default:
      return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

inline cublasStatus_t GetAttribute(const MatmulDesc& d, int attribute, void* buf, size_t bytes, size_t* written) {
  switch (attribute) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE:
      return detail::Load(d.compute_type, buf, bytes, written);
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE:
      return detail::Load(d.scale_type, buf, bytes, written);
    case CUBLASLT_MATMUL_DESC_POINTER_MODE:
      return detail::Load(d.pointer_mode, buf, bytes, written);
    case CUBLASLT_MATMUL_DESC_TRANSA:
      return detail::Load(d.trans_a, buf, bytes, written);
    case CUBLASLT_MATMUL_DESC_TRANSB:
      return detail::Load(d.trans_b, buf, bytes, written);
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
      return detail::Load(d.epilogue, buf, bytes, written);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
      return detail::Load(d.bias, buf, bytes, written);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
      return detail::Load(d.bias_type, buf, bytes, written);
    default:
      return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

inline cublasStatus_t SetAttribute(Layout& l, int attribute, const void* buf, size_t bytes) {
  switch (attribute) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE:
      return detail::Store(&l.type, buf, bytes);
    case CUBLASLT_MATRIX_LAYOUT_ORDER:
      return detail::Store(&l.order, buf, bytes, detail::Order);
    case CUBLASLT_MATRIX_LAYOUT_ROWS:
      return detail::Store(&l.rows, buf, bytes);
    case CUBLASLT_MATRIX_LAYOUT_COLS:
      return detail::Store(&l.cols, buf, bytes);
    case CUBLASLT_MATRIX_LAYOUT_LD:
      return detail::Store(&l.ld, buf, bytes);
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT:
      return detail::Store(&l.batch_count, buf, bytes);
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET:
      return detail::Store(&l.batch_stride, buf, bytes);
    default:
      return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

inline cublasStatus_t GetAttribute(const Layout& l, int attribute, void* buf, size_t bytes, size_t* written) {
  switch (attribute) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE:
      return detail::Load(l.type, buf, bytes, written);
    case CUBLASLT_MATRIX_LAYOUT_ORDER:
      return detail::Load(l.order, buf, bytes, written);
    case CUBLASLT_MATRIX_LAYOUT_ROWS:
      return detail::Load(l.rows, buf, bytes, written);
    case CUBLASLT_MATRIX_LAYOUT_COLS:
      return detail::Load(l.cols, buf, bytes, written);
    case CUBLASLT_MATRIX_LAYOUT_LD:
      return detail::Load(l.ld, buf, bytes, written);
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT:
      return detail::Load(l.batch_count, buf, bytes, written);
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET:
      return detail::Load(l.batch_stride, buf, bytes, written);
    default:
      return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

inline cublasStatus_t SetAttribute(Preference& p, int attribute, const void* buf, size_t bytes) {
  if (attribute != CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) return CUBLAS_STATUS_NOT_SUPPORTED;
  return detail::Store(&p.max_workspace_bytes, buf, bytes);
}

inline cublasStatus_t GetAttribute(const Preference& p, int attribute, void* buf, size_t bytes, size_t* written) {
  if (attribute != CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) return CUBLAS_STATUS_NOT_SUPPORTED;
  return detail::Load(p.max_workspace_bytes, buf, bytes, written);
}

}  // namespace phos::blaslt
