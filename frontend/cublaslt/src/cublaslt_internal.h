// Shared by the cuBLASLt frontend's translation units: the host-side objects cuBLASLt keeps
// (handles, matmul descriptors, matrix layouts, preferences), kept here as they are in NVIDIA's
// library, each named by an id this process issued; and the problem checks cuBLASLt makes at once.
#pragma once

#include <cublasLt.h>

#include <cstdint>
#include <functional>

namespace phos::frontend::blaslt {

struct MatmulDesc {
  int32_t compute_type = CUBLAS_COMPUTE_32F;
  int32_t scale_type = CUDA_R_32F;
  int32_t pointer_mode = CUBLASLT_POINTER_MODE_HOST;
  int32_t trans_a = CUBLAS_OP_N;
  int32_t trans_b = CUBLAS_OP_N;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  uint64_t bias = 0;
  int32_t bias_type = -1;  // D's type
};

struct Layout {
  uint32_t type = CUDA_R_32F;
  int32_t order = CUBLASLT_ORDER_COL;
  uint64_t rows = 0;
  uint64_t cols = 0;
  int64_t ld = 0;
  int32_t batch_count = 1;
  int64_t batch_stride = 0;
};

struct Preference {
  uint64_t max_workspace_bytes = 0;
};

// Whether `handle` is one cublasLtCreate gave this process (and not destroyed since).
bool KnownHandle(cublasLtHandle_t handle);
// Copies of the objects behind the ids, under the frontend's lock; false for an id that names
// none of that kind.
bool FindDesc(cublasLtMatmulDesc_t id, MatmulDesc* out);
bool FindLayout(cublasLtMatrixLayout_t id, Layout* out);
bool FindPreference(cublasLtMatmulPreference_t id, Preference* out);

// What cuBLASLt answers a problem before computing: CUBLAS_STATUS_INVALID_VALUE for layouts and
// descriptors that do not agree (shapes, batch counts, leading dimensions, a bias epilogue
// without a bias), CUBLAS_STATUS_NOT_SUPPORTED for what phos does not serve (docs/remoting.md).
cublasStatus_t CheckProblem(const MatmulDesc& desc, const Layout& a, const Layout& b, const Layout& c,
                            const Layout& d);

// Logs, once per call, that it cannot be served; returns CUBLAS_STATUS_NOT_SUPPORTED.
cublasStatus_t NotSupported(const char* call, const char* why);

}  // namespace phos::frontend::blaslt
