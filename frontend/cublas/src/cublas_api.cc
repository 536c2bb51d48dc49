// The cuBLAS API (cublas_v2.h ABI) a function process calls, executed by phosd through the CUDA
// runtime frontend's session: handles and their settings, the helper copies, versions and status
// names here; the compute routines in cublas_level1_2.cc and cublas_level3.cc. Handles are phosd's
// virtual ids. Arguments cuBLAS refuses at once are refused here; the compute calls are
// asynchronous (a Level 1 reduction in host pointer mode aside), their execution errors
// (including an operand outside the caller's buffers) surfacing at the next synchronising CUDA
// call.
#include <cublas_v2.h>
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <mutex>
#include <set>
#include <string>
#include <unordered_map>

#include "cublas_internal.h"
#include "phos/base/log.h"
#include "phos/frontend/remote_call.h"

namespace phos::frontend::blas {
namespace {

std::mutex g_mu;
std::unordered_map<uint64_t, HandleState> g_handles;

}  // namespace

int Remote(ipc::Op op, const void* args, size_t len, bool reply, void* out, size_t cap) {
  return __phosRemoteCall(static_cast<uint16_t>(op), args, len, reply ? 1 : 0, out, cap);
}

cublasStatus_t HandleStatus(int result) {
  if (result >= 0 && result <= CUBLAS_STATUS_LICENSE_ERROR) return static_cast<cublasStatus_t>(result);
  return CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t QueueStatus(int result) { return result == 0 ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED; }

cublasStatus_t ComputeStatus(int result) {
  switch (result) {
    case CUDA_SUCCESS:
      return CUBLAS_STATUS_SUCCESS;
    case CUDA_ERROR_INVALID_VALUE:
      return CUBLAS_STATUS_INVALID_VALUE;
    case CUDA_ERROR_INVALID_HANDLE:
      return CUBLAS_STATUS_NOT_INITIALIZED;
    // phosd's driver table without cuBLAS answers as for the library's handle calls.
    case CUDA_ERROR_NOT_SUPPORTED:
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return CUBLAS_STATUS_NOT_SUPPORTED;
    default:
      return CUBLAS_STATUS_EXECUTION_FAILED;
  }
}

cublasStatus_t NotSupported(const char* call, const char* why) {
  __phosLogNotSupported(call, why);
  return CUBLAS_STATUS_NOT_SUPPORTED;
}

bool WithHandle(cublasHandle_t handle, const std::function<void(HandleState&)>& change) {
  std::lock_guard lock(g_mu);
  auto it = g_handles.find(Id(handle));
  if (it == g_handles.end()) return false;
  change(it->second);
  return true;
}

bool RememberHandle(cublasHandle_t handle) {
  std::lock_guard lock(g_mu);
  return g_handles.emplace(Id(handle), HandleState{}).second;
}

void ForgetHandle(cublasHandle_t handle) {
  std::lock_guard lock(g_mu);
  g_handles.erase(Id(handle));
}

int32_t PointerMode(cublasHandle_t handle) {
  int32_t mode = CUBLAS_POINTER_MODE_HOST;
  WithHandle(handle, [&](HandleState& s) { mode = s.pointer_mode; });
  return mode;
}

namespace {

// The helpers copy rows of `width` bytes, `pitch` bytes apart on each side, through the CUDA
// runtime's 2D copies; a copy that fails is CUBLAS_STATUS_MAPPING_ERROR, as it is for cuBLAS.
cublasStatus_t Copy2D(void* dst, int64_t dst_pitch, const void* src, int64_t src_pitch, int64_t width,
                      int64_t rows, cudaMemcpyKind kind, cudaStream_t stream, bool async) {
  if (rows < 0) return CUBLAS_STATUS_MAPPING_ERROR;  // cuBLAS passes it on, and the copy fails
  const cudaError_t e =
      async ? cudaMemcpy2DAsync(dst, static_cast<size_t>(dst_pitch), src, static_cast<size_t>(src_pitch),
                                static_cast<size_t>(width), static_cast<size_t>(rows), kind, stream)
            : cudaMemcpy2D(dst, static_cast<size_t>(dst_pitch), src, static_cast<size_t>(src_pitch),
                           static_cast<size_t>(width), static_cast<size_t>(rows), kind);
  return e == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_MAPPING_ERROR;
}

// n elements of elem_size bytes, incx and incy elements apart: a 2D copy of n one-element rows.
cublasStatus_t CopyVector(int64_t n, int64_t elem_size, const void* x, int64_t incx, void* y, int64_t incy,
                          cudaMemcpyKind kind, cudaStream_t stream, bool async) {
  if (elem_size <= 0 || incx <= 0 || incy <= 0) return CUBLAS_STATUS_INVALID_VALUE;
  if (n == 0) return CUBLAS_STATUS_SUCCESS;
  int64_t dst_pitch = 0, src_pitch = 0;
  if (__builtin_mul_overflow(incy, elem_size, &dst_pitch) ||
      __builtin_mul_overflow(incx, elem_size, &src_pitch)) {
    return CUBLAS_STATUS_MAPPING_ERROR;
  }
  return Copy2D(y, dst_pitch, x, src_pitch, elem_size, n, kind, stream, async);
}

// A rows x cols column-major matrix: cols rows of rows * elem_size bytes, lda and ldb elements apart.
cublasStatus_t CopyMatrix(int64_t rows, int64_t cols, int64_t elem_size, const void* a, int64_t lda, void* b,
                          int64_t ldb, cudaMemcpyKind kind, cudaStream_t stream, bool async) {
  if (rows < 0 || cols < 0 || elem_size <= 0 || lda <= 0 || ldb <= 0) return CUBLAS_STATUS_INVALID_VALUE;
  if (rows == 0 || cols == 0) return CUBLAS_STATUS_SUCCESS;
  int64_t width = 0, dst_pitch = 0, src_pitch = 0;
  if (__builtin_mul_overflow(rows, elem_size, &width) || __builtin_mul_overflow(ldb, elem_size, &dst_pitch) ||
      __builtin_mul_overflow(lda, elem_size, &src_pitch)) {
    return CUBLAS_STATUS_MAPPING_ERROR;
  }
  // A leading dimension below the rows makes the copy's pitch smaller than its rows: it fails.
  return Copy2D(b, dst_pitch, a, src_pitch, width, cols, kind, stream, async);
}

// The texts of NVIDIA's libcublas 13.1 (cublasGetStatusString), by status.
struct StatusText {
  cublasStatus_t status;
  const char* name;
  const char* text;
};
constexpr StatusText kStatusTexts[] = {
    {CUBLAS_STATUS_SUCCESS, "CUBLAS_STATUS_SUCCESS", "success"},
    {CUBLAS_STATUS_NOT_INITIALIZED, "CUBLAS_STATUS_NOT_INITIALIZED", "the library was not initialized"},
    {CUBLAS_STATUS_ALLOC_FAILED, "CUBLAS_STATUS_ALLOC_FAILED", "the resource allocation failed"},
    {CUBLAS_STATUS_INVALID_VALUE, "CUBLAS_STATUS_INVALID_VALUE",
     "an unsupported value or parameter was passed to the function"},
    {CUBLAS_STATUS_ARCH_MISMATCH, "CUBLAS_STATUS_ARCH_MISMATCH",
     "the function requires an architectural feature absent from the device"},
    {CUBLAS_STATUS_MAPPING_ERROR, "CUBLAS_STATUS_MAPPING_ERROR", "an access to GPU memory space failed"},
    {CUBLAS_STATUS_EXECUTION_FAILED, "CUBLAS_STATUS_EXECUTION_FAILED",
     "the function failed to launch on the GPU"},
    {CUBLAS_STATUS_INTERNAL_ERROR, "CUBLAS_STATUS_INTERNAL_ERROR", "an internal operation failed"},
    {CUBLAS_STATUS_NOT_SUPPORTED, "CUBLAS_STATUS_NOT_SUPPORTED",
     "the requested functionality is not supported"},
    {CUBLAS_STATUS_LICENSE_ERROR, "CUBLAS_STATUS_LICENSE_ERROR", "the license check failed"},
};
constexpr const char* kUnrecognizedStatus = "unrecognized status";

const StatusText* FindStatus(cublasStatus_t status) {
  const int32_t value = Value(status);
  for (const StatusText& s : kStatusTexts) {
    if (s.status == value) return &s;
  }
  return nullptr;
}

}  // namespace
}  // namespace phos::frontend::blas

using namespace phos::frontend::blas;
namespace ipc = phos::ipc;

extern "C" {

// ---- Handles and their settings --------------------------------------------------------------

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  uint64_t vid = 0;
  cublasStatus_t s = HandleStatus(Remote(ipc::Op::kBlasCreate, nullptr, 0, true, &vid, sizeof(vid)));
  *handle = s == CUBLAS_STATUS_SUCCESS ? reinterpret_cast<cublasHandle_t>(vid) : nullptr;
  if (s == CUBLAS_STATUS_SUCCESS) RememberHandle(*handle);
  return s;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  ipc::HandleArgs a{Id(handle)};
  cublasStatus_t s = HandleStatus(Remote(ipc::Op::kBlasDestroy, &a, sizeof(a), true));
  ForgetHandle(handle);
  return s;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  ipc::StreamEventArgs a{0, Id(handle)};
  // cudaStreamPerThread: the calling thread's default stream, as in the CUDA runtime.
  if (__phosStreamId(stream, &a.stream) != 0) return CUBLAS_STATUS_NOT_INITIALIZED;
  cublasStatus_t s = HandleStatus(Remote(ipc::Op::kBlasSetStream, &a, sizeof(a), true));
  if (s == CUBLAS_STATUS_SUCCESS) WithHandle(handle, [&](HandleState& h) { h.stream = stream; });
  return s;
}

cublasStatus_t cublasGetStream_v2(cublasHandle_t handle, cudaStream_t* stream) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (stream == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *stream = nullptr;
  WithHandle(handle, [&](HandleState& h) { *stream = h.stream; });
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  ipc::BlasModeArgs a{Id(handle), Value(mode), 0};
  cublasStatus_t s = HandleStatus(Remote(ipc::Op::kBlasSetMathMode, &a, sizeof(a), true));
  if (s == CUBLAS_STATUS_SUCCESS) WithHandle(handle, [&](HandleState& h) { h.math_mode = mode; });
  return s;
}

cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t* mode) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (mode == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  return WithHandle(handle, [&](HandleState& h) { *mode = h.math_mode; }) ? CUBLAS_STATUS_SUCCESS
                                                                          : CUBLAS_STATUS_NOT_INITIALIZED;
}

// Kept here and sent with every call that computes: phosd sets it on the library's handle then.
cublasStatus_t cublasSetPointerMode_v2(cublasHandle_t handle, cublasPointerMode_t mode) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  const int32_t v = Value(mode);
  if (v != CUBLAS_POINTER_MODE_HOST && v != CUBLAS_POINTER_MODE_DEVICE) return CUBLAS_STATUS_INVALID_VALUE;
  return WithHandle(handle, [&](HandleState& h) { h.pointer_mode = mode; }) ? CUBLAS_STATUS_SUCCESS
                                                                            : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t cublasGetPointerMode_v2(cublasHandle_t handle, cublasPointerMode_t* mode) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (mode == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  return WithHandle(handle, [&](HandleState& h) { *mode = h.pointer_mode; }) ? CUBLAS_STATUS_SUCCESS
                                                                             : CUBLAS_STATUS_NOT_INITIALIZED;
}

// Kept and answered, not applied: phosd's cuBLAS runs in its default mode, without atomics, which
// is a correct implementation of either (atomics only allow faster, less reproducible sums).
cublasStatus_t cublasSetAtomicsMode(cublasHandle_t handle, cublasAtomicsMode_t mode) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  const int32_t v = Value(mode);
  if (v != CUBLAS_ATOMICS_NOT_ALLOWED && v != CUBLAS_ATOMICS_ALLOWED) return CUBLAS_STATUS_INVALID_VALUE;
  return WithHandle(handle, [&](HandleState& h) { h.atomics = mode; }) ? CUBLAS_STATUS_SUCCESS
                                                                       : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t cublasGetAtomicsMode(cublasHandle_t handle, cublasAtomicsMode_t* mode) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (mode == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  return WithHandle(handle, [&](HandleState& h) { *mode = h.atomics; }) ? CUBLAS_STATUS_SUCCESS
                                                                        : CUBLAS_STATUS_NOT_INITIALIZED;
}

// Checked and kept, not handed to phosd's cuBLAS, which keeps its own workspace: the function's
// buffer given to the library would outlive a cudaFree of it in phosd's hands.
cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void* workspace, size_t bytes) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  // cuBLAS: the workspace must be aligned to at least 256 bytes.
  if (bytes != 0 && (workspace == nullptr || Id(workspace) % 256 != 0)) return CUBLAS_STATUS_INVALID_VALUE;
  return WithHandle(handle,
                    [&](HandleState& h) {
                      h.workspace = workspace;
                      h.workspace_bytes = bytes;
                    })
             ? CUBLAS_STATUS_SUCCESS
             : CUBLAS_STATUS_NOT_INITIALIZED;
}

// ---- Versions and status names (no handle is looked at: NVIDIA's answers the version for any) --

cublasStatus_t cublasGetVersion_v2(cublasHandle_t, int* version) {
  if (version == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *version = CUBLAS_VERSION;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetProperty(libraryPropertyType type, int* value) {
  if (value == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  switch (Value(type)) {
    case MAJOR_VERSION:
      *value = CUBLAS_VER_MAJOR;
      return CUBLAS_STATUS_SUCCESS;
    case MINOR_VERSION:
      *value = CUBLAS_VER_MINOR;
      return CUBLAS_STATUS_SUCCESS;
    case PATCH_LEVEL:
      *value = CUBLAS_VER_PATCH;
      return CUBLAS_STATUS_SUCCESS;
    default:
      return CUBLAS_STATUS_INVALID_VALUE;
  }
}

size_t cublasGetCudartVersion(void) {
  return CUDART_VERSION;
}

const char* cublasGetStatusName(cublasStatus_t status) {
  const StatusText* s = FindStatus(status);
  return s != nullptr ? s->name : kUnrecognizedStatus;
}

const char* cublasGetStatusString(cublasStatus_t status) {
  const StatusText* s = FindStatus(status);
  return s != nullptr ? s->text : kUnrecognizedStatus;
}

// ---- Helpers: strided copies between host and device memory -----------------------------------

cublasStatus_t cublasSetVector(int n, int elem_size, const void* x, int incx, void* y, int incy) {
  return CopyVector(n, elem_size, x, incx, y, incy, cudaMemcpyHostToDevice, nullptr, false);
}
cublasStatus_t cublasGetVector(int n, int elem_size, const void* x, int incx, void* y, int incy) {
  return CopyVector(n, elem_size, x, incx, y, incy, cudaMemcpyDeviceToHost, nullptr, false);
}
cublasStatus_t cublasSetMatrix(int rows, int cols, int elem_size, const void* a, int lda, void* b, int ldb) {
  return CopyMatrix(rows, cols, elem_size, a, lda, b, ldb, cudaMemcpyHostToDevice, nullptr, false);
}
cublasStatus_t cublasGetMatrix(int rows, int cols, int elem_size, const void* a, int lda, void* b, int ldb) {
  return CopyMatrix(rows, cols, elem_size, a, lda, b, ldb, cudaMemcpyDeviceToHost, nullptr, false);
}
cublasStatus_t cublasSetVectorAsync(int n, int elem_size, const void* x, int incx, void* y, int incy,
                                    cudaStream_t stream) {
  return CopyVector(n, elem_size, x, incx, y, incy, cudaMemcpyHostToDevice, stream, true);
}
cublasStatus_t cublasGetVectorAsync(int n, int elem_size, const void* x, int incx, void* y, int incy,
                                    cudaStream_t stream) {
  return CopyVector(n, elem_size, x, incx, y, incy, cudaMemcpyDeviceToHost, stream, true);
}
cublasStatus_t cublasSetMatrixAsync(int rows, int cols, int elem_size, const void* a, int lda, void* b,
                                    int ldb, cudaStream_t stream) {
  return CopyMatrix(rows, cols, elem_size, a, lda, b, ldb, cudaMemcpyHostToDevice, stream, true);
}
cublasStatus_t cublasGetMatrixAsync(int rows, int cols, int elem_size, const void* a, int lda, void* b,
                                    int ldb, cudaStream_t stream) {
  return CopyMatrix(rows, cols, elem_size, a, lda, b, ldb, cudaMemcpyDeviceToHost, stream, true);
}

cublasStatus_t cublasSetVector_64(int64_t n, int64_t elem_size, const void* x, int64_t incx, void* y,
                                  int64_t incy) {
  return CopyVector(n, elem_size, x, incx, y, incy, cudaMemcpyHostToDevice, nullptr, false);
}
cublasStatus_t cublasGetVector_64(int64_t n, int64_t elem_size, const void* x, int64_t incx, void* y,
                                  int64_t incy) {
  return CopyVector(n, elem_size, x, incx, y, incy, cudaMemcpyDeviceToHost, nullptr, false);
}
cublasStatus_t cublasSetMatrix_64(int64_t rows, int64_t cols, int64_t elem_size, const void* a, int64_t lda,
                                  void* b, int64_t ldb) {
  return CopyMatrix(rows, cols, elem_size, a, lda, b, ldb, cudaMemcpyHostToDevice, nullptr, false);
}
cublasStatus_t cublasGetMatrix_64(int64_t rows, int64_t cols, int64_t elem_size, const void* a, int64_t lda,
                                  void* b, int64_t ldb) {
  return CopyMatrix(rows, cols, elem_size, a, lda, b, ldb, cudaMemcpyDeviceToHost, nullptr, false);
}
cublasStatus_t cublasSetVectorAsync_64(int64_t n, int64_t elem_size, const void* x, int64_t incx, void* y,
                                       int64_t incy, cudaStream_t stream) {
  return CopyVector(n, elem_size, x, incx, y, incy, cudaMemcpyHostToDevice, stream, true);
}
cublasStatus_t cublasGetVectorAsync_64(int64_t n, int64_t elem_size, const void* x, int64_t incx, void* y,
                                       int64_t incy, cudaStream_t stream) {
  return CopyVector(n, elem_size, x, incx, y, incy, cudaMemcpyDeviceToHost, stream, true);
}
cublasStatus_t cublasSetMatrixAsync_64(int64_t rows, int64_t cols, int64_t elem_size, const void* a,
                                       int64_t lda, void* b, int64_t ldb, cudaStream_t stream) {
  return CopyMatrix(rows, cols, elem_size, a, lda, b, ldb, cudaMemcpyHostToDevice, stream, true);
}
cublasStatus_t cublasGetMatrixAsync_64(int64_t rows, int64_t cols, int64_t elem_size, const void* a,
                                       int64_t lda, void* b, int64_t ldb, cudaStream_t stream) {
  return CopyMatrix(rows, cols, elem_size, a, lda, b, ldb, cudaMemcpyDeviceToHost, stream, true);
}

}  // extern "C"
