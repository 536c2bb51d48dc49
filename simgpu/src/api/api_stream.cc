// Streams, events and host functions.
#include "api/driver.h"

using namespace phos::sim;

namespace {

// Resolves an event handle in the current context.
CUresult RequireEvent(CUevent handle, std::shared_ptr<EventObject>* out) {
  Driver* d = nullptr;
  std::shared_ptr<Context> ctx;
  if (CUresult r = RequireContext(&d, &ctx); r != CUDA_SUCCESS) return r;
  *out = d->events.Find(handle);
  return *out ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

}  // namespace

extern "C" {

PHOS_SIM_API CUresult CUDAAPI cuStreamCreate(CUstream* phStream, unsigned int flags) {
  if (phStream == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver* d = nullptr;
  std::shared_ptr<Context> ctx;
  if (CUresult r = RequireContext(&d, &ctx); r != CUDA_SUCCESS) return r;
  auto object = std::make_shared<StreamObject>();
  object->ctx = ctx;
  if (CUresult r = ctx->exec->CreateStream(flags, &object->stream); r != CUDA_SUCCESS) return r;
  *phStream = d->streams.Insert(std::move(object));
  return CUDA_SUCCESS;
}

PHOS_SIM_API CUresult CUDAAPI cuStreamDestroy(CUstream hStream) {
  Driver* d = nullptr;
  if (CUresult r = RequireDriver(&d); r != CUDA_SUCCESS) return r;
  // Returns at once, as CUDA does: work still queued on the stream completes (the context waits
  // for it) and the stream goes away when the last reference to it does.
  return d->streams.Remove(hStream) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

PHOS_SIM_API CUresult CUDAAPI cuStreamQuery(CUstream hStream) {
  Driver* d = nullptr;
  std::shared_ptr<Context> ctx;
  std::shared_ptr<Stream> stream;
  if (CUresult r = RequireStream(hStream, &d, &ctx, &stream); r != CUDA_SUCCESS) return r;
  return stream->Query();
}

PHOS_SIM_API CUresult CUDAAPI cuStreamSynchronize(CUstream hStream) {
  Driver* d = nullptr;
  std::shared_ptr<Context> ctx;
  std::shared_ptr<Stream> stream;
  if (CUresult r = RequireStream(hStream, &d, &ctx, &stream); r != CUDA_SUCCESS) return r;
  return stream->Synchronize();
}

PHOS_SIM_API CUresult CUDAAPI cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int flags) {
  if (flags != CU_EVENT_WAIT_DEFAULT && flags != CU_EVENT_WAIT_EXTERNAL) return CUDA_ERROR_INVALID_VALUE;
  Driver* d = nullptr;
  std::shared_ptr<Context> ctx;
  std::shared_ptr<Stream> stream;
  if (CUresult r = RequireStream(hStream, &d, &ctx, &stream); r != CUDA_SUCCESS) return r;
  std::shared_ptr<EventObject> event = d->events.Find(hEvent);
  if (!event) return CUDA_ERROR_INVALID_HANDLE;
  return stream->WaitEvent(*event->event);
}

PHOS_SIM_API CUresult CUDAAPI cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void* userData) {
  if (fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver* d = nullptr;
  std::shared_ptr<Context> ctx;
  std::shared_ptr<Stream> stream;
  if (CUresult r = RequireStream(hStream, &d, &ctx, &stream); r != CUDA_SUCCESS) return r;
  Op op;
  op.engine = Engine::kHost;
  op.work = [fn, userData]() {
    fn(userData);
    return CUDA_SUCCESS;
  };
  stream->Enqueue(std::move(op));
  return CUDA_SUCCESS;
}

PHOS_SIM_API CUresult CUDAAPI cuEventCreate(CUevent* phEvent, unsigned int flags) {
  if (phEvent == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver* d = nullptr;
  std::shared_ptr<Context> ctx;
  if (CUresult r = RequireContext(&d, &ctx); r != CUDA_SUCCESS) return r;
  auto object = std::make_shared<EventObject>();
  object->ctx = ctx;
  if (CUresult r = Event::Create(flags, &object->event); r != CUDA_SUCCESS) return r;
  *phEvent = d->events.Insert(std::move(object));
  return CUDA_SUCCESS;
}

PHOS_SIM_API CUresult CUDAAPI cuEventDestroy(CUevent hEvent) {
  Driver* d = nullptr;
  if (CUresult r = RequireDriver(&d); r != CUDA_SUCCESS) return r;
  // Destroying an event whose recorded work is pending is allowed; the work completes anyway.
  return d->events.Remove(hEvent) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

PHOS_SIM_API CUresult CUDAAPI cuEventRecord(CUevent hEvent, CUstream hStream) {
  std::shared_ptr<EventObject> event;
  if (CUresult r = RequireEvent(hEvent, &event); r != CUDA_SUCCESS) return r;
  std::shared_ptr<Stream> stream;
  if (CUresult r = ResolveStream(event->ctx, hStream, &stream); r != CUDA_SUCCESS) return r;
  return event->event->Record(*stream);
}

PHOS_SIM_API CUresult CUDAAPI cuEventQuery(CUevent hEvent) {
  std::shared_ptr<EventObject> event;
  if (CUresult r = RequireEvent(hEvent, &event); r != CUDA_SUCCESS) return r;
  return event->event->Query();
}

PHOS_SIM_API CUresult CUDAAPI cuEventSynchronize(CUevent hEvent) {
  std::shared_ptr<EventObject> event;
  if (CUresult r = RequireEvent(hEvent, &event); r != CUDA_SUCCESS) return r;
  return event->event->Synchronize();
}

PHOS_SIM_API CUresult CUDAAPI cuEventElapsedTime(float* pMilliseconds, CUevent hStart, CUevent hEnd) {
  if (pMilliseconds == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<EventObject> start, end;
  if (CUresult r = RequireEvent(hStart, &start); r != CUDA_SUCCESS) return r;
  if (CUresult r = RequireEvent(hEnd, &end); r != CUDA_SUCCESS) return r;
  return Event::ElapsedTime(*start->event, *end->event, pMilliseconds);
}

}  // extern "C"
