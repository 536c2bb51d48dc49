// cuBLAS handles (cublasCreate ... cublasDestroy) on simgpu.
//
// A handle is tied to the context current at cublasCreate, as in cuBLAS; its work runs on that
// context's streams. Like the driver's handles (device/handles.h) a cublasHandle_t is a table id,
// never a pointer, so a garbage, destroyed or NULL handle is CUBLAS_STATUS_NOT_INITIALIZED rather
// than a crash. The registry reaches the devices only through the DeviceAccess it is given.
#pragma once

#include <cublas_v2.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_set>

#include "device/device_access.h"
#include "device/handles.h"

namespace phos::sim::blas {

struct BlasHandle {
  ContextRef ctx;  // the context current at creation

  std::mutex mu;              // guards the settings below
  CUstream stream = nullptr;  // as given to cublasSetStream; NULL = the context's NULL stream
  cublasMath_t math_mode = CUBLAS_DEFAULT_MATH;
  // Where the scalars (alpha, beta) and Level 1 results of the handle's calls are: host memory
  // (read and written when the call is made) or device memory (when its work runs).
  cublasPointerMode_t pointer_mode = CUBLAS_POINTER_MODE_HOST;
};

// What a compute call runs with: the handle's live context and the stream it names now.
struct BlasCall {
  DeviceAccess* device = nullptr;
  std::shared_ptr<BlasHandle> handle;
  std::shared_ptr<Stream> stream;
  cublasPointerMode_t pointer_mode = CUBLAS_POINTER_MODE_HOST;  // the handle's, when the call began
};

class HandleRegistry {
 public:
  // `device` outlives the registry and every op enqueued through it.
  explicit HandleRegistry(DeviceAccess& device) : device_(device) {}
  HandleRegistry(const HandleRegistry&) = delete;
  HandleRegistry& operator=(const HandleRegistry&) = delete;

  // cublasCreate: needs a current context (CUBLAS_STATUS_NOT_INITIALIZED otherwise);
  // pays the profile's creation cost, the first-handle cost for the context's first handle.
  cublasStatus_t Create(cublasHandle_t* out);
  // CUBLAS_STATUS_NOT_INITIALIZED for a handle that is not live. Work already enqueued through
  // the handle still runs: it holds everything it needs.
  cublasStatus_t Destroy(cublasHandle_t handle);
  // The live handle, or CUBLAS_STATUS_NOT_INITIALIZED (also when its context was destroyed).
  cublasStatus_t Find(cublasHandle_t handle, std::shared_ptr<BlasHandle>* out) const;
  // Find, plus the stream and pointer mode the handle names. A context with a sticky error, or a stream destroyed
  // since cublasSetStream, is CUBLAS_STATUS_EXECUTION_FAILED: the launch would fail on a GPU.
  cublasStatus_t BeginCall(cublasHandle_t handle, BlasCall* out) const;
  // cublasSetStream: CUBLAS_STATUS_INVALID_VALUE for a stream that is not a live stream of the
  // handle's context (cuBLAS leaves that undefined: the handle's work could never run there).
  cublasStatus_t SetStream(cublasHandle_t handle, CUstream stream);

 private:
  DeviceAccess& device_;
  HandleTable<BlasHandle, cublasHandle_t, HandleKind::kBlasHandle> handles_;
  std::mutex mu_;
  std::unordered_set<uint64_t> contexts_with_handles_;  // context ids, never reused
};

}  // namespace phos::sim::blas
