// The last error, versions, the current device, streams, events and synchronisation of the
// frontend CUDA runtime.
#include <mutex>
#include <set>
#include <string>

#include "cudart_internal.h"
#include "phos/base/log.h"
#include "phos/frontend/remote_call.h"

using phos::frontend::Client;
using phos::frontend::Return;
using phos::frontend::StreamId;
namespace ipc = phos::ipc;

namespace phos::frontend {
namespace {

thread_local cudaError_t t_last_error = cudaSuccess;
thread_local int t_device = 0;

}  // namespace

cudaError_t Return(cudaError_t error) {
  if (error != cudaSuccess && error != cudaErrorNotReady) t_last_error = error;
  return error;
}

cudaError_t Return(CUresult result) { return Return(static_cast<cudaError_t>(result)); }

int ThreadDevice() { return t_device; }

CUresult SelectDevice(int device) {
  if (device < 0) return CUDA_ERROR_INVALID_DEVICE;
  // Synchronous, so that an ordinal the node does not have is reported here; phosd creates the
  // session's context on that device if it has none yet.
  ipc::DeviceArgs a{device, 0};
  CUresult r = Client::Get().Call(ipc::Op::kSetDevice, &a, sizeof(a), nullptr, 0, true, nullptr, 0, nullptr, false);
  if (r == CUDA_SUCCESS) t_device = device;
  return r;
}

// Each refusal (and each partial support, below) is a row of frontend/surface/refused.tsv, which
// docs/compatibility.md and phos-fn check read.
cudaError_t NotSupported(const char* call, const char* why) {
  __phosLogNotSupported(call, why);
  return Return(cudaErrorNotSupported);
}

}  // namespace phos::frontend

extern "C" void __phosLogNotSupported(const char* call, const char* why) {
  static std::mutex mu;
  static std::set<std::string> logged;
  std::lock_guard lock(mu);
  if (logged.insert(call).second) PHOS_LOG(Warn, "frontend", "{}: not supported: {}", call, why);
}

namespace {

using phos::frontend::t_device;
using phos::frontend::t_last_error;

CUresult HandleCall(ipc::Op op, uint64_t handle) {
  ipc::HandleArgs a{handle};
  return Client::Get().Call(op, &a, sizeof(a), nullptr, 0, true);
}

CUresult StreamCall(ipc::Op op, cudaStream_t stream) {
  uint64_t sid = 0;
  if (CUresult r = StreamId(stream, &sid); r != CUDA_SUCCESS) return r;
  return HandleCall(op, sid);
}

CUresult CreateHandle(ipc::Op op, unsigned flags, uint64_t* out) {
  ipc::FlagsArgs a{flags, 0};
  return Client::Get().Call(op, &a, sizeof(a), nullptr, 0, true, out, sizeof(*out));
}

}  // namespace

extern "C" {

cudaError_t cudaGetLastError(void) {
  cudaError_t e = t_last_error;
  t_last_error = cudaSuccess;
  CUresult pending = Client::Get().AsyncError(true);
  return e != cudaSuccess ? e : static_cast<cudaError_t>(pending);
}

cudaError_t cudaPeekAtLastError(void) {
  if (t_last_error != cudaSuccess) return t_last_error;
  return static_cast<cudaError_t>(Client::Get().AsyncError(false));
}

cudaError_t cudaDriverGetVersion(int* version) {
  if (version == nullptr) return Return(cudaErrorInvalidValue);
  return Return(Client::Get().Call(ipc::Op::kDriverGetVersion, nullptr, 0, nullptr, 0, true, version, sizeof(*version)));
}

cudaError_t cudaRuntimeGetVersion(int* version) {
  if (version == nullptr) return Return(cudaErrorInvalidValue);
  *version = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceCount(int* count) {
  if (count == nullptr) return Return(cudaErrorInvalidValue);
  *count = 0;
  // A session sees the node's devices, its device 0 being the one phosd chose for it.
  return Return(phos::frontend::SessionDeviceCount(count));
}

cudaError_t cudaGetDevice(int* device) {
  if (device == nullptr) return Return(cudaErrorInvalidValue);
  *device = t_device;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  CUresult r = phos::frontend::SelectDevice(device);
  return Return(r == CUDA_ERROR_INVALID_DEVICE ? cudaErrorInvalidDevice : static_cast<cudaError_t>(r));
}

cudaError_t cudaDeviceSynchronize(void) {
  return Return(Client::Get().Call(ipc::Op::kDeviceSynchronize, nullptr, 0, nullptr, 0, true));
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  if (stream == nullptr) return Return(cudaErrorInvalidValue);
  uint64_t vid = 0;
  CUresult r = CreateHandle(ipc::Op::kStreamCreate, flags, &vid);
  *stream = reinterpret_cast<cudaStream_t>(vid);
  return Return(r);
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, cudaStreamDefault); }

// The default streams (0, cudaStreamLegacy, cudaStreamPerThread) are not the caller's to destroy.
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (stream == cudaStreamPerThread) return Return(cudaErrorInvalidResourceHandle);
  return Return(HandleCall(ipc::Op::kStreamDestroy, reinterpret_cast<uintptr_t>(stream)));
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) { return Return(StreamCall(ipc::Op::kStreamSynchronize, stream)); }

cudaError_t cudaStreamQuery(cudaStream_t stream) { return Return(StreamCall(ipc::Op::kStreamQuery, stream)); }

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  if (flags != 0) return Return(cudaErrorInvalidValue);  // refused.tsv: cudaEventWaitExternal
  ipc::StreamEventArgs a{0, reinterpret_cast<uintptr_t>(event)};
  if (CUresult r = StreamId(stream, &a.stream); r != CUDA_SUCCESS) return Return(r);
  return Return(Client::Get().Call(ipc::Op::kStreamWaitEvent, &a, sizeof(a), nullptr, 0, false));
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  if (event == nullptr) return Return(cudaErrorInvalidValue);
  uint64_t vid = 0;
  CUresult r = CreateHandle(ipc::Op::kEventCreate, flags, &vid);
  *event = reinterpret_cast<cudaEvent_t>(vid);
  return Return(r);
}

cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  return Return(HandleCall(ipc::Op::kEventDestroy, reinterpret_cast<uintptr_t>(event)));
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  ipc::StreamEventArgs a{0, reinterpret_cast<uintptr_t>(event)};
  if (CUresult r = StreamId(stream, &a.stream); r != CUDA_SUCCESS) return Return(r);
  // Synchronous, so that an unknown event is reported here as CUDA reports it.
  return Return(Client::Get().Call(ipc::Op::kEventRecord, &a, sizeof(a), nullptr, 0, true));
}

// cudaEventRecordExternal makes an external event node of a record inside a stream capture, which
// phos does not serve.
cudaError_t cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream, unsigned int flags) {
  if (flags == cudaEventRecordDefault) return cudaEventRecord(event, stream);
  if (flags == cudaEventRecordExternal) {
    return phos::frontend::NotSupported("cudaEventRecordWithFlags", "cudaEventRecordExternal: external event nodes in a capture are not served");
  }
  return Return(cudaErrorInvalidValue);
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  return Return(HandleCall(ipc::Op::kEventSynchronize, reinterpret_cast<uintptr_t>(event)));
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  return Return(HandleCall(ipc::Op::kEventQuery, reinterpret_cast<uintptr_t>(event)));
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (ms == nullptr) return Return(cudaErrorInvalidValue);
  ipc::StreamEventArgs a{reinterpret_cast<uintptr_t>(start), reinterpret_cast<uintptr_t>(end)};
  return Return(Client::Get().Call(ipc::Op::kEventElapsedTime, &a, sizeof(a), nullptr, 0, true, ms, sizeof(*ms)));
}

}  // extern "C"
