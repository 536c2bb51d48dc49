// The exported cuBLASLt entry points (cublasLt.h ABI) over the driver's cuBLASLt registry
// (blas/lt.h). Before cuInit there is none: every call that creates or names an object is
// CUBLAS_STATUS_NOT_INITIALIZED.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstring>

#include "api/driver.h"
#include "blas/blas_internal.h"
#include "blas/lt.h"
#include "blas/status_table.h"
#include "phos/base/enum_value.h"

using namespace phos::sim;
using namespace phos::sim::blas;

namespace {

LtRegistry* Lt() {
  Driver* d = Driver::Get();
  return d == nullptr ? nullptr : &d->blas_lt();
}

// Adds `object` to `table` and hands out its id through `out`.
template <typename Table, typename Handle, typename Object>
cublasStatus_t Create(Table LtRegistry::* table, Handle* out, Object object) {
  LtRegistry* lt = Lt();
  if (lt == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (out == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *out = (lt->*table).Insert(std::make_shared<Object>(object));
  return CUBLAS_STATUS_SUCCESS;
}

template <typename Table, typename Handle>
cublasStatus_t Destroy(Table LtRegistry::* table, Handle handle) {
  LtRegistry* lt = Lt();
  if (lt == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  // NVIDIA's accept a null descriptor; a live one is removed.
  if (handle == nullptr) return CUBLAS_STATUS_SUCCESS;
  return (lt->*table).Remove(handle) != nullptr ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

// The live object behind `handle`, or null (before cuInit too).
template <typename Table, typename Handle>
auto Find(Table LtRegistry::* table, Handle handle) {
  LtRegistry* lt = Lt();
  using Object = decltype((lt->*table).Find(handle));
  return lt == nullptr ? Object{} : (lt->*table).Find(handle);
}

}  // namespace

extern "C" {

PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasLtCreate(cublasLtHandle_t* handle) {
  LtRegistry* lt = Lt();
  return lt == nullptr ? CUBLAS_STATUS_NOT_INITIALIZED : lt->CreateHandle(handle);
}

PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasLtDestroy(cublasLtHandle_t handle) {
  LtRegistry* lt = Lt();
  if (lt == nullptr || handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  return lt->handles.Remove(handle) != nullptr ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}

PHOS_SIM_API size_t CUBLASWINAPI cublasLtGetVersion(void) {
  return CUBLAS_VERSION;
}

PHOS_SIM_API size_t CUBLASWINAPI cublasLtGetCudartVersion(void) {
  return CUDART_VERSION;
}

// cuBLASLt ships with cuBLAS: the same version.
PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasLtGetProperty(libraryPropertyType type, int* value) {
  return cublasGetProperty(type, value);
}

PHOS_SIM_API const char* CUBLASWINAPI cublasLtGetStatusName(cublasStatus_t status) {
  return StatusName(status);
}

PHOS_SIM_API const char* CUBLASWINAPI cublasLtGetStatusString(cublasStatus_t status) {
  return StatusString(status);
}

PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc,
                                                                  cublasComputeType_t compute, cudaDataType_t scale) {
  LtMatmulDesc d;
  d.compute_type = compute;
  d.scale_type = scale;
  return Create(&LtRegistry::descs, desc, d);
}

PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  return Destroy(&LtRegistry::descs, desc);
}

PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                                                        cublasLtMatmulDescAttributes_t attr,
                                                                        const void* buf, size_t bytes) {
  auto d = Find(&LtRegistry::descs, desc);
  return d == nullptr ? CUBLAS_STATUS_INVALID_VALUE : SetAttribute(*d, phos::EnumValue(attr), buf, bytes);
}

PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasLtMatmulDescGetAttribute(cublasLtMatmulDesc_t desc,
                                                                        cublasLtMatmulDescAttributes_t attr, void* buf,
                                                                        size_t bytes, size_t* written) {
  auto d = Find(&LtRegistry::descs, desc);
  return d == nullptr ? CUBLAS_STATUS_INVALID_VALUE : GetAttribute(*d, phos::EnumValue(attr), buf, bytes, written);
}

PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type,
                                                                    uint64_t rows, uint64_t cols, int64_t ld) {
  LtLayout l;
  l.type = static_cast<uint32_t>(type);
  l.rows = rows;
  l.cols = cols;
  l.ld = ld;
  return Create(&LtRegistry::layouts, layout, l);
}

PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  return Destroy(&LtRegistry::layouts, layout);
}

PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout,
                                                                          cublasLtMatrixLayoutAttribute_t attr,
                                                                          const void* buf, size_t bytes) {
  auto l = Find(&LtRegistry::layouts, layout);
  return l == nullptr ? CUBLAS_STATUS_INVALID_VALUE : SetAttribute(*l, phos::EnumValue(attr), buf, bytes);
}

PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutGetAttribute(cublasLtMatrixLayout_t layout,
                                                                          cublasLtMatrixLayoutAttribute_t attr,
                                                                          void* buf, size_t bytes, size_t* written) {
  auto l = Find(&LtRegistry::layouts, layout);
  return l == nullptr ? CUBLAS_STATUS_INVALID_VALUE : GetAttribute(*l, phos::EnumValue(attr), buf, bytes, written);
}

PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  return Create(&LtRegistry::preferences, pref, LtPreference{});
}

PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  return Destroy(&LtRegistry::preferences, pref);
}

PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                                              cublasLtMatmulPreferenceAttributes_t attr,
                                                                              const void* buf, size_t bytes) {
  auto p = Find(&LtRegistry::preferences, pref);
  return p == nullptr ? CUBLAS_STATUS_INVALID_VALUE : SetAttribute(*p, phos::EnumValue(attr), buf, bytes);
}

PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceGetAttribute(cublasLtMatmulPreference_t pref,
                                                                              cublasLtMatmulPreferenceAttributes_t attr,
                                                                              void* buf, size_t bytes,
                                                                              size_t* written) {
  auto p = Find(&LtRegistry::preferences, pref);
  return p == nullptr ? CUBLAS_STATUS_INVALID_VALUE : GetAttribute(*p, phos::EnumValue(attr), buf, bytes, written);
}

// One algorithm, simgpu's only one, needing no workspace, for a problem simgpu computes; none
// (CUBLAS_STATUS_NOT_SUPPORTED) for any other.
PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
    cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d, cublasLtMatmulPreference_t pref, int requested,
    cublasLtMatmulHeuristicResult_t results[], int* returned) {
  if (Find(&LtRegistry::handles, handle) == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  auto od = Find(&LtRegistry::descs, desc);
  auto la = Find(&LtRegistry::layouts, a), lb = Find(&LtRegistry::layouts, b);
  auto lc = Find(&LtRegistry::layouts, c), ld = Find(&LtRegistry::layouts, d);
  if (od == nullptr || la == nullptr || lb == nullptr || lc == nullptr || ld == nullptr ||
      Find(&LtRegistry::preferences, pref) == nullptr || requested <= 0 || results == nullptr ||
      returned == nullptr) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  *returned = 0;
  if (cublasStatus_t s = CheckLtProblem(*od, *la, *lb, *lc, *ld); s != CUBLAS_STATUS_SUCCESS)
    return s == CUBLAS_STATUS_INVALID_VALUE ? s : CUBLAS_STATUS_NOT_SUPPORTED;
  results[0] = cublasLtMatmulHeuristicResult_t{};
  results[0].workspaceSize = 0;
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.0f;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

// `algo` is not looked at: simgpu has one algorithm.
PHOS_SIM_API cublasStatus_t CUBLASWINAPI cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                                        const void* alpha, const void* a, cublasLtMatrixLayout_t la,
                                                        const void* b, cublasLtMatrixLayout_t lb, const void* beta,
                                                        const void* c, cublasLtMatrixLayout_t lc, void* d,
                                                        cublasLtMatrixLayout_t ld, const cublasLtMatmulAlgo_t*,
                                                        void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  LtRegistry* lt = Lt();
  if (lt == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  auto od = lt->descs.Find(desc);
  auto pa = lt->layouts.Find(la), pb = lt->layouts.Find(lb), pc = lt->layouts.Find(lc), pd = lt->layouts.Find(ld);
  if (od == nullptr || pa == nullptr || pb == nullptr || pc == nullptr || pd == nullptr)
    return CUBLAS_STATUS_INVALID_VALUE;
  std::shared_ptr<LtHandle> held;
  std::shared_ptr<Stream> resolved;
  if (cublasStatus_t s = lt->BeginCall(handle, stream, &held, &resolved); s != CUBLAS_STATUS_SUCCESS) return s;
  LtMatmulCall call{*od, *pa, *pb, *pc, *pd, alpha, beta, a, b, c, d, workspace, workspace_bytes};
  return EnqueueLtMatmul({&lt->device(), &held->ctx, resolved.get(), CUBLAS_POINTER_MODE_HOST}, call);
}

}  // extern "C"
