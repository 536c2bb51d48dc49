// A session's streams and events: virtual ids (multiples of 16) for the driver's objects, each
// created in the context of the device the call ran on and used there afterwards.
#include "session.h"

namespace phos::runtime {

CUresult Session::DeviceSynchronize(const NoArgs&, const Call&) {
  return driver_->cuCtxSynchronize();
}

CUresult Session::StreamCreate(const ipc::FlagsArgs& a, const Call& call) {
  if (!HandleRoom(call.name)) return CUDA_ERROR_OUT_OF_MEMORY;
  CUstream s = nullptr;
  CUresult r = driver_->cuStreamCreate(&s, a.flags);
  if (r != CUDA_SUCCESS) return r;
  uint64_t vid = NewHandle();
  streams_[vid] = StreamHandle{s, a.flags, route_device_};
  call.Reply(vid);
  return CUDA_SUCCESS;
}

CUresult Session::StreamDestroy(const ipc::HandleArgs& a, const Call&) {
  auto it = streams_.find(a.handle);
  if (it == streams_.end()) return CUDA_ERROR_INVALID_HANDLE;
  CUresult r = driver_->cuStreamDestroy(it->second.stream);
  streams_.erase(it);
  return r;
}

CUresult Session::StreamSynchronize(const ipc::HandleArgs& a, const Call&) {
  Result<CUstream> stream = StreamOf(a.handle);
  if (!stream.ok()) return CUDA_ERROR_INVALID_HANDLE;
  return driver_->cuStreamSynchronize(*stream);
}

CUresult Session::StreamQuery(const ipc::HandleArgs& a, const Call&) {
  Result<CUstream> stream = StreamOf(a.handle);
  if (!stream.ok()) return CUDA_ERROR_INVALID_HANDLE;
  return driver_->cuStreamQuery(*stream);
}

CUresult Session::StreamWaitEvent(const ipc::StreamEventArgs& a, const Call&) {
  Result<CUstream> stream = StreamOf(a.stream);
  if (!stream.ok()) return CUDA_ERROR_INVALID_HANDLE;
  auto it = events_.find(a.event);
  if (it == events_.end()) return CUDA_ERROR_INVALID_HANDLE;
  return driver_->cuStreamWaitEvent(*stream, it->second.event, 0);
}

CUresult Session::EventCreate(const ipc::FlagsArgs& a, const Call& call) {
  if (!HandleRoom(call.name)) return CUDA_ERROR_OUT_OF_MEMORY;
  CUevent e = nullptr;
  CUresult r = driver_->cuEventCreate(&e, a.flags);
  if (r != CUDA_SUCCESS) return r;
  uint64_t vid = NewHandle();
  events_[vid] = EventHandle{e, a.flags, route_device_};
  call.Reply(vid);
  return CUDA_SUCCESS;
}

CUresult Session::EventDestroy(const ipc::HandleArgs& a, const Call&) {
  auto it = events_.find(a.handle);
  if (it == events_.end()) return CUDA_ERROR_INVALID_HANDLE;
  CUresult r = driver_->cuEventDestroy(it->second.event);
  events_.erase(it);
  return r;
}

CUresult Session::EventRecord(const ipc::StreamEventArgs& a, const Call&) {
  Result<CUstream> stream = StreamOf(a.stream);
  if (!stream.ok()) return CUDA_ERROR_INVALID_HANDLE;
  auto it = events_.find(a.event);
  if (it == events_.end()) return CUDA_ERROR_INVALID_HANDLE;
  return driver_->cuEventRecord(it->second.event, *stream);
}

CUresult Session::EventSynchronize(const ipc::HandleArgs& a, const Call&) {
  auto it = events_.find(a.handle);
  if (it == events_.end()) return CUDA_ERROR_INVALID_HANDLE;
  return driver_->cuEventSynchronize(it->second.event);
}

CUresult Session::EventQuery(const ipc::HandleArgs& a, const Call&) {
  auto it = events_.find(a.handle);
  if (it == events_.end()) return CUDA_ERROR_INVALID_HANDLE;
  return driver_->cuEventQuery(it->second.event);
}

// The record's `stream` holds the start event.
CUresult Session::EventElapsedTime(const ipc::StreamEventArgs& a, const Call& call) {
  auto start = events_.find(a.stream);
  auto end = events_.find(a.event);
  if (start == events_.end() || end == events_.end()) return CUDA_ERROR_INVALID_HANDLE;
  float ms = 0;
  CUresult r = driver_->cuEventElapsedTime(&ms, start->second.event, end->second.event);
  call.Reply(ms);
  return r;
}

}  // namespace phos::runtime
