// The cuBLASLt API (cublasLt.h ABI) a function process calls: handles, versions, status names, matmul
// descriptors, matrix layouts and preferences, all host-side objects answered here with no round
// trip (as NVIDIA's library keeps them on the host); cublasLtMatmul and the heuristic are in
// cublaslt_matmul.cc. Each object is an id this process issued, so a garbage or destroyed one is
// refused rather than dereferenced. Served attributes: docs/remoting.md, "cuBLASLt"; any other is
// CUBLAS_STATUS_NOT_SUPPORTED.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>

#include "cublaslt_internal.h"
#include "phos/base/log.h"
#include "phos/frontend/remote_call.h"

namespace phos::frontend::blaslt {
namespace {

// Ids: a kind in the low 4 bits (never 0, so no id is NULL), a counter above.
enum class Kind : uint64_t { kHandle = 1, kDesc = 2, kLayout = 3, kPreference = 4 };

std::mutex g_mu;
uint64_t g_last = 0;
std::set<uint64_t> g_handles;
std::unordered_map<uint64_t, MatmulDesc> g_descs;
std::unordered_map<uint64_t, Layout> g_layouts;
std::unordered_map<uint64_t, Preference> g_preferences;

uint64_t NewId(Kind kind) {
  return ++g_last << 4 | static_cast<uint64_t>(kind);
}
template <typename T>
uint64_t Id(T* p) {
  return reinterpret_cast<uintptr_t>(p);
}
template <typename T>
T* AsHandle(uint64_t id) {
  return reinterpret_cast<T*>(static_cast<uintptr_t>(id));
}

template <typename Object, typename Handle>
cublasStatus_t Create(std::unordered_map<uint64_t, Object>& table, Kind kind, Handle* out, const Object& object) {
  if (out == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  std::lock_guard lock(g_mu);
  const uint64_t id = NewId(kind);
  table.emplace(id, object);
  *out = reinterpret_cast<Handle>(static_cast<uintptr_t>(id));
  return CUBLAS_STATUS_SUCCESS;
}

// NVIDIA's accept a null descriptor.
template <typename Object, typename Handle>
cublasStatus_t Destroy(std::unordered_map<uint64_t, Object>& table, Handle handle) {
  if (handle == nullptr) return CUBLAS_STATUS_SUCCESS;
  std::lock_guard lock(g_mu);
  return table.erase(Id(handle)) == 1 ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

template <typename Object, typename Handle>
bool Find(const std::unordered_map<uint64_t, Object>& table, Handle handle, Object* out) {
  std::lock_guard lock(g_mu);
  auto it = table.find(Id(handle));
  if (it == table.end()) return false;
  *out = it->second;
  return true;
}

// A refusal logged once per call with what phos serves of it (refused.tsv), the status as is.
constexpr const char* kDescServed =
    "phos serves the compute and scale types, host pointer mode, TRANSA, TRANSB, the epilogues DEFAULT, RELU, BIAS, RELU_BIAS, "
    "GELU and GELU_BIAS, the bias pointer and bias data type";
constexpr const char* kLayoutServed = "phos serves column and row orders, no planar complex or pointer-array batches";
constexpr const char* kPreferenceServed = "phos serves MAX_WORKSPACE_BYTES only";

cublasStatus_t Logged(const char* call, const char* served, cublasStatus_t status) {
  return status == CUBLAS_STATUS_NOT_SUPPORTED ? NotSupported(call, served) : status;
}

}  // namespace

cublasStatus_t NotSupported(const char* call, const char* why) {
  __phosLogNotSupported(call, why);
  return CUBLAS_STATUS_NOT_SUPPORTED;
}

bool KnownHandle(cublasLtHandle_t handle) {
  std::lock_guard lock(g_mu);
  return g_handles.count(Id(handle)) == 1;
}
bool FindDesc(cublasLtMatmulDesc_t id, MatmulDesc* out) {
  return Find(g_descs, id, out);
}
bool FindLayout(cublasLtMatrixLayout_t id, Layout* out) {
  return Find(g_layouts, id, out);
}
bool FindPreference(cublasLtMatmulPreference_t id, Preference* out) {
  return Find(g_preferences, id, out);
}

}  // namespace phos::frontend::blaslt

using namespace phos::frontend::blaslt;

extern "C" {

// ---- Handles, versions, status names ----------------------------------------------------------

// A handle is this process's: phosd runs each matmul on a handle of its own, in the context of the
// matmul's stream.
cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  std::lock_guard lock(g_mu);
  const uint64_t id = NewId(Kind::kHandle);
  g_handles.insert(id);
  *handle = AsHandle<cublasLtContext>(id);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  std::lock_guard lock(g_mu);
  return g_handles.erase(Id(handle)) == 1 ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}

size_t cublasLtGetVersion(void) {
  return CUBLAS_VERSION;
}

size_t cublasLtGetCudartVersion(void) {
  return CUDART_VERSION;
}

cublasStatus_t cublasLtGetProperty(libraryPropertyType type, int* value) {
  return cublasGetProperty(type, value);
}

const char* cublasLtGetStatusName(cublasStatus_t status) {
  return cublasGetStatusName(status);
}

const char* cublasLtGetStatusString(cublasStatus_t status) {
  return cublasGetStatusString(status);
}

// ---- Matmul descriptors -----------------------------------------------------------------------

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                        cudaDataType_t scale) {
  MatmulDesc d;
  std::memcpy(&d.compute_type, &compute, sizeof(d.compute_type));
  std::memcpy(&d.scale_type, &scale, sizeof(d.scale_type));
  return Create(g_descs, Kind::kDesc, desc, d);
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  return Destroy(g_descs, desc);
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t bytes) {
  std::lock_guard lock(g_mu);
  auto it = g_descs.find(Id(desc));
  if (it == g_descs.end()) return CUBLAS_STATUS_INVALID_VALUE;
  return Logged("cublasLtMatmulDescSetAttribute", kDescServed, SetAttribute(it->second, attr, buf, bytes));
}

cublasStatus_t cublasLtMatmulDescGetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                              void* buf, size_t bytes, size_t* written) {
  MatmulDesc d;
  if (!FindDesc(desc, &d)) return CUBLAS_STATUS_INVALID_VALUE;
  return Logged("cublasLtMatmulDescGetAttribute", kDescServed, GetAttribute(d, attr, buf, bytes, written));
}

// ---- Matrix layouts ---------------------------------------------------------------------------

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  Layout l;
  std::memcpy(&l.type, &type, sizeof(l.type));
  l.rows = rows;
  l.cols = cols;
  l.ld = ld;
  return Create(g_layouts, Kind::kLayout, layout, l);
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  return Destroy(g_layouts, layout);
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t bytes) {
  std::lock_guard lock(g_mu);
  auto it = g_layouts.find(Id(layout));
  if (it == g_layouts.end()) return CUBLAS_STATUS_INVALID_VALUE;
  return Logged("cublasLtMatrixLayoutSetAttribute", kLayoutServed, SetAttribute(it->second, attr, buf, bytes));
}

cublasStatus_t cublasLtMatrixLayoutGetAttribute(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attr,
                                                void* buf, size_t bytes, size_t* written) {
  Layout l;
  if (!FindLayout(layout, &l)) return CUBLAS_STATUS_INVALID_VALUE;
  return Logged("cublasLtMatrixLayoutGetAttribute", kLayoutServed, GetAttribute(l, attr, buf, bytes, written));
}

// ---- Preferences ------------------------------------------------------------------------------

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  return Create(g_preferences, Kind::kPreference, pref, Preference{});
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  return Destroy(g_preferences, pref);
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t bytes) {
  std::lock_guard lock(g_mu);
  auto it = g_preferences.find(Id(pref));
  if (it == g_preferences.end()) return CUBLAS_STATUS_INVALID_VALUE;
  return Logged("cublasLtMatmulPreferenceSetAttribute", kPreferenceServed, SetAttribute(it->second, attr, buf, bytes));
}

cublasStatus_t cublasLtMatmulPreferenceGetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, void* buf,
                                                    size_t bytes, size_t* written) {
  Preference p;
  if (!FindPreference(pref, &p)) return CUBLAS_STATUS_INVALID_VALUE;
  return Logged("cublasLtMatmulPreferenceGetAttribute", kPreferenceServed, GetAttribute(p, attr, buf, bytes, written));
}

}  // extern "C"
