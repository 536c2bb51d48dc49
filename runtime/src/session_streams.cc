// A session's streams and events: virtual ids (multiples of 16) for the driver's objects, each
// created in the context of the device the call ran on and used there afterwards; and the host
// functions queued on the streams (host_fn_gates.h).
#include <algorithm>

#include "phos/base/log.h"
#include "session.h"

namespace phos::runtime {

CUresult Session::DeviceSynchronize(const NoArgs&, const Call&) {
  return driver_->cuCtxSynchronize();
}

CUresult Session::StreamCreate(const ipc::FlagsArgs& a, const Call& call) {
  return CreateStream(a.flags, 0, call);
}

CUresult Session::StreamCreateWithPriority(const ipc::StreamCreateArgs& a, const Call& call) {
  return CreateStream(a.flags, a.priority, call);
}

CUresult Session::CreateStream(unsigned flags, int priority, const Call& call) {
  if ((flags & ~unsigned{CU_STREAM_NON_BLOCKING}) != 0) {
    PHOS_LOG_EVERY_SEC(Warn, "runtime", 1, "pid {}: {} refused: flags {:#x}", pid_, call.name, flags);
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (!HandleRoom(call.name)) return CUDA_ERROR_OUT_OF_MEMORY;
  int least = 0, greatest = 0;
  if (CUresult r = driver_->cuCtxGetStreamPriorityRange(&least, &greatest); r != CUDA_SUCCESS) return r;
  priority = std::clamp(priority, greatest, least);
  CUstream s = nullptr;
  CUresult r = driver_->cuStreamCreateWithPriority(&s, flags, priority);
  if (r != CUDA_SUCCESS) return r;
  uint64_t vid = NewHandle();
  streams_[vid] = StreamHandle{s, flags, route_device_, priority};
  call.Reply(vid);
  return CUDA_SUCCESS;
}

// The driver answers for the session's streams; the legacy stream (0, cudaStreamLegacy) and the
// executor's per-thread stream are the current device's, with the default flags and priority.
CUresult Session::StreamGetInfo(const ipc::HandleArgs& a, const Call& call) {
  ipc::StreamInfo info{.flags = CU_STREAM_DEFAULT, .priority = 0, .device = route_device_, .pad = 0, .id = a.handle};
  if (a.handle == 0 || a.handle == 1) {
    info.id = 1;
  } else if (a.handle != 2) {
    auto it = streams_.find(a.handle);
    if (it == streams_.end()) return CUDA_ERROR_INVALID_HANDLE;
    if (CUresult r = driver_->cuStreamGetFlags(it->second.stream, &info.flags); r != CUDA_SUCCESS) return r;
    if (CUresult r = driver_->cuStreamGetPriority(it->second.stream, &info.priority); r != CUDA_SUCCESS) return r;
    info.device = it->second.device;
  }
  call.Reply(info);
  return CUDA_SUCCESS;
}

CUresult Session::StreamPriorityRange(const NoArgs&, const Call& call) {
  ipc::StreamPriorityRange range{};
  if (CUresult r = driver_->cuCtxGetStreamPriorityRange(&range.least, &range.greatest); r != CUDA_SUCCESS) return r;
  call.Reply(range);
  return CUDA_SUCCESS;
}

CUresult Session::LaunchHostFunc(const ipc::HostFnArgs& a, const Call&) {
  Result<CUstream> stream = StreamOf(a.stream);
  if (!stream.ok()) return CUDA_ERROR_INVALID_HANDLE;
  Result<CUcontext> context = ContextOn(route_device_);
  if (!context.ok()) return CUDA_ERROR_INVALID_DEVICE;
  return host_fns_->Launch(*stream, route_device_, *context, a.slot);
}

void Session::RefuseHostFn(const ipc::RecordView& record, CUresult result) {
  ipc::HostFnArgs a{};
  // A record that names no slot, or a captured one's (kCapturedHostFnSlot), leaves nothing waiting.
  if (!DecodeRecord(record, &a) || a.slot == ipc::kCapturedHostFnSlot) return;
  host_fns_->Refuse(a.slot, result);
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
