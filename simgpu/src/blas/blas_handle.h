// cuBLAS handles (cublasCreate ... cublasDestroy) on simgpu.
//
// A handle is tied to the context current at cublasCreate, as in cuBLAS; its work runs on that
// context's streams. Like the driver's handles (api/handles.h) a cublasHandle_t is a table id,
// never a pointer, so a garbage, destroyed or NULL handle is CUBLAS_STATUS_NOT_INITIALIZED rather
// than a crash.
#pragma once

#include <cublas_v2.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_set>

#include "api/driver.h"

namespace phos::sim::blas {

// Outside the driver's HandleKind values, so that no driver handle decodes as a cuBLAS handle.
inline constexpr HandleKind kBlasHandleKind = static_cast<HandleKind>(0x40);

struct BlasHandle {
  // The context current at creation: its handle (to tell whether it still lives) and object.
  CUcontext context_handle = nullptr;
  std::shared_ptr<Context> ctx;

  std::mutex mu;              // guards the settings below
  CUstream stream = nullptr;  // as given to cublasSetStream; NULL = the context's NULL stream
  cublasMath_t math_mode = CUBLAS_DEFAULT_MATH;
};

// What a compute call runs with: the handle's live context and the stream it names now.
struct BlasCall {
  Driver* driver = nullptr;
  std::shared_ptr<BlasHandle> handle;
  std::shared_ptr<Stream> stream;
};

class HandleRegistry {
 public:
  static HandleRegistry& Get();

  // cublasCreate: needs cuInit and a current context (CUBLAS_STATUS_NOT_INITIALIZED otherwise);
  // pays the profile's creation cost, the first-handle cost for the context's first handle.
  cublasStatus_t Create(cublasHandle_t* out);
  // CUBLAS_STATUS_NOT_INITIALIZED for a handle that is not live. Work already enqueued through
  // the handle still runs: it holds everything it needs.
  cublasStatus_t Destroy(cublasHandle_t handle);
  // The live handle, or CUBLAS_STATUS_NOT_INITIALIZED (also when its context was destroyed).
  cublasStatus_t Find(cublasHandle_t handle, std::shared_ptr<BlasHandle>* out) const;
  // Find, plus the stream the handle names. A context with a sticky error, or a stream destroyed
  // since cublasSetStream, is CUBLAS_STATUS_EXECUTION_FAILED: the launch would fail on a GPU.
  cublasStatus_t BeginCall(cublasHandle_t handle, BlasCall* out) const;

 private:
  HandleRegistry() = default;

  HandleTable<BlasHandle, cublasHandle_t, kBlasHandleKind> handles_;
  std::mutex mu_;
  std::unordered_set<uint64_t> contexts_with_handles_;  // context ids, never reused
};

}  // namespace phos::sim::blas
