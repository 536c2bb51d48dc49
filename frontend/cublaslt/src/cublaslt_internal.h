// Shared by the cuBLASLt frontend's translation units: the host-side objects cuBLASLt keeps
// (handles, matmul descriptors, matrix layouts, preferences), kept here as they are in NVIDIA's
// library, each named by an id this process issued; and the problem checks cuBLASLt makes at once.
#pragma once

#include <cublasLt.h>

#include <cstdint>
#include <functional>

#include "phos/simgpu/blas_lt_attributes.h"

namespace phos::frontend::blaslt {

// The objects and their attributes, as simgpu's cuBLASLt keeps them too.
using MatmulDesc = phos::blaslt::MatmulDesc;
using Layout = phos::blaslt::Layout;
using Preference = phos::blaslt::Preference;

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
