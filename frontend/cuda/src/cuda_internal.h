// Shared by the driver API frontend's translation units (libphos-cuda.so). Every call is served by
// the runtime frontend's code (cudart_internal.h) in its one session: a program calling both APIs
// has one session with phosd and sees one context per device, the primary context.
#pragma once

#include <cuda.h>

#include "cudart_internal.h"

namespace phos::frontend::driver {

// Whether cuInit succeeded; every other call but the version and error queries answers
// CUDA_ERROR_NOT_INITIALIZED before (cuda_contexts.cc).
bool Initialized();
// The calling thread's current context: the one it made current with cuCtxSetCurrent or
// cuCtxPushCurrent, or else its device's primary context (the runtime's: phosd holds the session's
// context from the session's start). Null when the thread unbound every context.
CUcontext CurrentContext();
// What a call that works in the current context checks first: CUDA_ERROR_NOT_INITIALIZED before
// cuInit, CUDA_ERROR_INVALID_CONTEXT without a current context, else CUDA_SUCCESS.
CUresult NeedContext();
// The primary context of session device `device` (phos's handle for it); null for an ordinal out
// of phos's range.
CUcontext PrimaryContext(int device);
// The session device of a primary context this library handed out; -1 for any other handle.
int ContextDevice(CUcontext context);

// The virtual id phosd names `stream` by (0 and CU_STREAM_LEGACY: the legacy stream;
// CU_STREAM_PER_THREAD: the thread's default stream).
inline CUresult StreamId(CUstream stream, uint64_t* out) {
  return phos::frontend::StreamId(reinterpret_cast<cudaStream_t>(stream), out);
}

}  // namespace phos::frontend::driver
