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

// A served attribute's value: exactly its size, checked by `valid`, stored whole.
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
// cuBLASLt's GetAttribute: with bytes 0 the size only; a buffer too small, or none, is refused.
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
      return NotSupported("cublasLtMatmulDescSetAttribute", "epilogues other than DEFAULT, RELU, BIAS, RELU_BIAS, "
                                                            "GELU and GELU_BIAS");
  }
}
cublasStatus_t PointerMode(int32_t mode) {
  if (mode == CUBLASLT_POINTER_MODE_HOST) return CUBLAS_STATUS_SUCCESS;
  if (mode < CUBLASLT_POINTER_MODE_DEVICE || mode > CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_HOST)
    return CUBLAS_STATUS_INVALID_VALUE;
  return NotSupported("cublasLtMatmulDescSetAttribute", "pointer modes other than CUBLASLT_POINTER_MODE_HOST");
}
cublasStatus_t Order(int32_t order) {
  if (order == CUBLASLT_ORDER_COL || order == CUBLASLT_ORDER_ROW) return CUBLAS_STATUS_SUCCESS;
  if (order < CUBLASLT_ORDER_COL || order > CUBLASLT_ORDER_COL32_2R_4R4) return CUBLAS_STATUS_INVALID_VALUE;
  return NotSupported("cublasLtMatrixLayoutSetAttribute", "orders other than column and row");
}

}  // namespace

cublasStatus_t NotSupported(const char* call, const char* why) {
  static std::mutex mu;
  static std::set<std::string> logged;
  std::lock_guard lock(mu);
  if (logged.insert(call).second) PHOS_LOG(Warn, "frontend", "{}: not supported: {}", call, why);
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
  MatmulDesc& d = it->second;
  switch (static_cast<int>(attr)) {
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
      return NotSupported("cublasLtMatmulDescSetAttribute", "attributes other than the compute and scale types, "
                                                            "pointer mode, transpositions, epilogue and bias");
  }
}

cublasStatus_t cublasLtMatmulDescGetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                              void* buf, size_t bytes, size_t* written) {
  MatmulDesc d;
  if (!FindDesc(desc, &d)) return CUBLAS_STATUS_INVALID_VALUE;
  switch (static_cast<int>(attr)) {
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
      return NotSupported("cublasLtMatmulDescGetAttribute", "attributes phos does not serve");
  }
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
  Layout& l = it->second;
  switch (static_cast<int>(attr)) {
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
      return NotSupported("cublasLtMatrixLayoutSetAttribute", "planar complex and pointer-array batches");
  }
}

cublasStatus_t cublasLtMatrixLayoutGetAttribute(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attr,
                                                void* buf, size_t bytes, size_t* written) {
  Layout l;
  if (!FindLayout(layout, &l)) return CUBLAS_STATUS_INVALID_VALUE;
  switch (static_cast<int>(attr)) {
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
      return NotSupported("cublasLtMatrixLayoutGetAttribute", "planar complex and pointer-array batches");
  }
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
  if (static_cast<int>(attr) != CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES)
    return NotSupported("cublasLtMatmulPreferenceSetAttribute", "preferences other than the maximum workspace");
  return Store(&it->second.max_workspace_bytes, buf, bytes);
}

cublasStatus_t cublasLtMatmulPreferenceGetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, void* buf,
                                                    size_t bytes, size_t* written) {
  Preference p;
  if (!FindPreference(pref, &p)) return CUBLAS_STATUS_INVALID_VALUE;
  if (static_cast<int>(attr) != CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES)
    return NotSupported("cublasLtMatmulPreferenceGetAttribute", "preferences other than the maximum workspace");
  return Load(p.max_workspace_bytes, buf, bytes, written);
}

}  // extern "C"
