// Streams and events in the driver API: the runtime's records (cudart_api.cc) with the driver's
// arguments. A CUstream or CUevent is the session's virtual handle, as a cudaStream_t or
// cudaEvent_t is: either API may use a handle the other made.
#include "cuda_internal.h"

namespace ipc = phos::ipc;
using phos::frontend::Client;
using phos::frontend::driver::NeedContext;
using phos::frontend::driver::StreamId;

namespace {

CUresult HandleCall(ipc::Op op, uint64_t handle) {
  if (CUresult r = NeedContext(); r != CUDA_SUCCESS) return r;
  ipc::HandleArgs a{handle};
  return Client::Get().Call(op, &a, sizeof(a), nullptr, 0, true);
}

CUresult StreamCall(ipc::Op op, CUstream stream) {
  if (CUresult r = NeedContext(); r != CUDA_SUCCESS) return r;
  uint64_t sid = 0;
  if (CUresult r = StreamId(stream, &sid); r != CUDA_SUCCESS) return r;
  ipc::HandleArgs a{sid};
  return Client::Get().Call(op, &a, sizeof(a), nullptr, 0, true);
}

CUresult Create(ipc::Op op, unsigned flags, uint64_t* out) {
  if (CUresult r = NeedContext(); r != CUDA_SUCCESS) return r;
  ipc::FlagsArgs a{flags, 0};
  return Client::Get().Call(op, &a, sizeof(a), nullptr, 0, true, out, sizeof(*out));
}

uint64_t Id(const void* handle) { return reinterpret_cast<uintptr_t>(handle); }

}  // namespace

extern "C" {

CUresult cuStreamCreate(CUstream* stream, unsigned int flags) {
  if (stream == nullptr) return CUDA_ERROR_INVALID_VALUE;
  uint64_t vid = 0;
  CUresult r = Create(ipc::Op::kStreamCreate, flags, &vid);
  *stream = r == CUDA_SUCCESS ? reinterpret_cast<CUstream>(vid) : nullptr;
  return r;
}

// The default streams are not the caller's to destroy.
CUresult cuStreamDestroy(CUstream stream) {
  if (stream == nullptr || stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  return HandleCall(ipc::Op::kStreamDestroy, Id(stream));
}

CUresult cuStreamSynchronize(CUstream stream) { return StreamCall(ipc::Op::kStreamSynchronize, stream); }

CUresult cuStreamQuery(CUstream stream) { return StreamCall(ipc::Op::kStreamQuery, stream); }

CUresult cuStreamWaitEvent(CUstream stream, CUevent event, unsigned int flags) {
  if (CUresult r = NeedContext(); r != CUDA_SUCCESS) return r;
  if (flags != CU_EVENT_WAIT_DEFAULT) return CUDA_ERROR_INVALID_VALUE;  // refused.tsv: CU_EVENT_WAIT_EXTERNAL
  ipc::StreamEventArgs a{0, Id(event)};
  if (CUresult r = StreamId(stream, &a.stream); r != CUDA_SUCCESS) return r;
  return Client::Get().Call(ipc::Op::kStreamWaitEvent, &a, sizeof(a), nullptr, 0, false);
}

CUresult cuEventCreate(CUevent* event, unsigned int flags) {
  if (event == nullptr) return CUDA_ERROR_INVALID_VALUE;
  uint64_t vid = 0;
  CUresult r = Create(ipc::Op::kEventCreate, flags, &vid);
  *event = r == CUDA_SUCCESS ? reinterpret_cast<CUevent>(vid) : nullptr;
  return r;
}

CUresult cuEventDestroy(CUevent event) { return HandleCall(ipc::Op::kEventDestroy, Id(event)); }

// Synchronous, so that an unknown event is reported here, as the driver reports it.
CUresult cuEventRecord(CUevent event, CUstream stream) {
  if (CUresult r = NeedContext(); r != CUDA_SUCCESS) return r;
  ipc::StreamEventArgs a{0, Id(event)};
  if (CUresult r = StreamId(stream, &a.stream); r != CUDA_SUCCESS) return r;
  return Client::Get().Call(ipc::Op::kEventRecord, &a, sizeof(a), nullptr, 0, true);
}

CUresult cuEventSynchronize(CUevent event) { return HandleCall(ipc::Op::kEventSynchronize, Id(event)); }

CUresult cuEventQuery(CUevent event) { return HandleCall(ipc::Op::kEventQuery, Id(event)); }

CUresult cuEventElapsedTime(float* ms, CUevent start, CUevent end) {
  if (ms == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = NeedContext(); r != CUDA_SUCCESS) return r;
  ipc::StreamEventArgs a{Id(start), Id(end)};
  return Client::Get().Call(ipc::Op::kEventElapsedTime, &a, sizeof(a), nullptr, 0, true, ms, sizeof(*ms));
}

#undef cuStreamDestroy
#undef cuEventDestroy
#undef cuEventElapsedTime
CUresult cuStreamDestroy(CUstream stream) { return cuStreamDestroy_v2(stream); }
CUresult cuEventDestroy(CUevent event) { return cuEventDestroy_v2(event); }
CUresult cuEventElapsedTime(float* ms, CUevent start, CUevent end) { return cuEventElapsedTime_v2(ms, start, end); }

}  // extern "C"
