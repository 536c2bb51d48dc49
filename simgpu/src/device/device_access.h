// DeviceAccess: how the libraries over the simulated driver, cuBLAS (src/blas) and NCCL
// (src/nccl), reach the devices: the calling thread's current context, primary contexts, streams,
// the device address space and the model clock. The driver (src/api) implements it and gives it
// to them when cuInit creates it; a test gives them a fake, so that they can be tested without
// the driver. The libraries never see the driver's own objects, only ContextRef.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <memory>

#include "device/profile.h"
#include "exec/exec_context.h"
#include "exec/stream.h"
#include "memory/device_memory.h"

namespace phos::sim {

// A context as a library holds it: what it needs to run work in the context and to ask later
// whether the context still lives. Holding one keeps the context's execution state (and what its
// enqueued work refers to) alive after the context is destroyed, never the context's handle.
struct ContextRef {
  CUcontext handle = nullptr;
  // Never reused within a process, unlike the memory a context object lives in.
  uint64_t id = 0;
  int device = -1;
  const DeviceProfile* profile = nullptr;
  std::shared_ptr<ExecContext> exec;
};

class DeviceAccess {
 public:
  virtual ~DeviceAccess() = default;

  // Number of devices; ordinals are 0 .. device_count() - 1.
  virtual int device_count() const = 0;

  // True when the calling thread has a current context, usable or not.
  virtual bool HasCurrentContext() const = 0;
  // The calling thread's current context: CUDA_ERROR_INVALID_CONTEXT when none is current,
  // CUDA_ERROR_CONTEXT_IS_DESTROYED when it was destroyed (on another thread), and its sticky
  // error once work failed in it.
  virtual CUresult CurrentContext(ContextRef* out) = 0;
  // True while the context `ctx` refers to has not been destroyed.
  virtual bool IsLive(const ContextRef& ctx) const = 0;

  // cuDevicePrimaryCtxRetain and cuDevicePrimaryCtxRelease: each successful retain is matched
  // by one release.
  virtual CUresult RetainPrimaryContext(int device, ContextRef* out) = 0;
  virtual CUresult ReleasePrimaryContext(int device) = 0;

  // The stream `handle` names in `ctx`: 0, CU_STREAM_LEGACY and CU_STREAM_PER_THREAD are its
  // NULL stream. CUDA_ERROR_INVALID_HANDLE for a stream that is not live or is of another
  // context.
  virtual CUresult ResolveStream(const ContextRef& ctx, CUstream handle, std::shared_ptr<Stream>* out) = 0;

  // True when [ptr, ptr + bytes) is device memory granting `needed`; its device in *device
  // unless `device` is NULL.
  // Thread-safe: work running on the devices' workers checks its operands again with it.
  virtual bool CheckRange(CUdeviceptr ptr, uint64_t bytes, Access needed, int* device) const = 0;

  // Spends `device_seconds` of modelled device time on the calling thread (a fixed cost such as
  // creating a cuBLAS handle or a communicator).
  virtual void PayModelledCost(double device_seconds) = 0;
};

}  // namespace phos::sim
