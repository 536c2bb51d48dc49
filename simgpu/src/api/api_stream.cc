// Streams, their priorities, events, host functions and stream memory operations.
#include <algorithm>
#include <atomic>
#include <type_traits>

#include "api/driver.h"

using namespace phos::sim;

namespace {

// cuStreamWaitValue32/64: whether the word `now` satisfies the wait for `value` under `flags`'s
// condition (cuda.h, CUstreamWaitValue_flags).
template <typename Word>
bool WaitHolds(Word now, Word value, unsigned condition) {
  using Signed = std::make_signed_t<Word>;
  switch (condition) {
    case CU_STREAM_WAIT_VALUE_GEQ:
      return static_cast<Signed>(now - value) >= 0;  // wrap-around aware, as cuda.h defines it
    case CU_STREAM_WAIT_VALUE_EQ:
      return now == value;
    case CU_STREAM_WAIT_VALUE_AND:
      return (now & value) != 0;
    default:  // CU_STREAM_WAIT_VALUE_NOR
      return static_cast<Word>(~(now | value)) != 0;
  }
}

// A stream memory operation on the word at `addr` (device memory, aligned to its size): a wait
// until the word satisfies `flags`'s condition for `value`, or a write of `value`. Both run on the
// device's memop engine, in stream order.
template <typename Word>
CUresult EnqueueMemOp(CUstream hStream, CUdeviceptr addr, Word value, unsigned flags, bool wait) {
  constexpr unsigned kConditions = 0x3;  // GEQ, EQ, AND, NOR
  if (wait) {
    // CU_STREAM_WAIT_VALUE_FLUSH needs CAN_FLUSH_REMOTE_WRITES, which simgpu does not have.
    if ((flags & CU_STREAM_WAIT_VALUE_FLUSH) != 0) return CUDA_ERROR_NOT_SUPPORTED;
    if ((flags & ~kConditions) != 0) return CUDA_ERROR_INVALID_VALUE;
  } else if (flags != CU_STREAM_WRITE_VALUE_DEFAULT && flags != CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (addr % sizeof(Word) != 0) return CUDA_ERROR_INVALID_VALUE;
  Driver* d = nullptr;
  std::shared_ptr<Context> ctx;
  std::shared_ptr<Stream> stream;
  if (CUresult r = RequireStream(hStream, &d, &ctx, &stream); r != CUDA_SUCCESS) return r;
  if (!d->CheckRange(addr, sizeof(Word), wait ? Access::kRead : Access::kReadWrite, nullptr)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  Op op;
  op.engine = Engine::kMemOp;
  op.bytes = sizeof(Word);
  // The word is device memory, which simgpu's devices and the host share; the engine runs this
  // under FaultGuard, so a word freed since is an illegal address, as on a GPU.
  auto* word = reinterpret_cast<Word*>(addr);
  if (wait) {
    op.what = "cuStreamWaitValue";
    const unsigned condition = flags & kConditions;
    op.work = [word, value, condition] {
      const Word now = std::atomic_ref<Word>(*word).load(std::memory_order_acquire);
      return WaitHolds(now, value, condition) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
    };
  } else {
    op.what = "cuStreamWriteValue";
    op.work = [word, value] {
      std::atomic_ref<Word>(*word).store(value, std::memory_order_release);
      return CUDA_SUCCESS;
    };
  }
  stream->Enqueue(std::move(op));
  return CUDA_SUCCESS;
}

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

// A priority outside cuCtxGetStreamPriorityRange's is clamped to it, as NVIDIA's driver does.
PHOS_SIM_API CUresult CUDAAPI cuStreamCreateWithPriority(CUstream* phStream, unsigned int flags, int priority) {
  if (phStream == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver* d = nullptr;
  std::shared_ptr<Context> ctx;
  if (CUresult r = RequireContext(&d, &ctx); r != CUDA_SUCCESS) return r;
  auto object = std::make_shared<StreamObject>();
  object->ctx = ctx;
  if (CUresult r = ctx->exec->CreateStream(flags, &object->stream, priority); r != CUDA_SUCCESS) return r;
  *phStream = d->streams.Insert(std::move(object));
  return CUDA_SUCCESS;
}

PHOS_SIM_API CUresult CUDAAPI cuStreamCreate(CUstream* phStream, unsigned int flags) {
  return cuStreamCreateWithPriority(phStream, flags, kLeastStreamPriority);
}

PHOS_SIM_API CUresult CUDAAPI cuStreamGetPriority(CUstream hStream, int* priority) {
  if (priority == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver* d = nullptr;
  std::shared_ptr<Context> ctx;
  std::shared_ptr<Stream> stream;
  if (CUresult r = RequireStream(hStream, &d, &ctx, &stream); r != CUDA_SUCCESS) return r;
  *priority = stream->priority();
  return CUDA_SUCCESS;
}

PHOS_SIM_API CUresult CUDAAPI cuStreamGetFlags(CUstream hStream, unsigned int* flags) {
  if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver* d = nullptr;
  std::shared_ptr<Context> ctx;
  std::shared_ptr<Stream> stream;
  if (CUresult r = RequireStream(hStream, &d, &ctx, &stream); r != CUDA_SUCCESS) return r;
  *flags = stream->flags();
  return CUDA_SUCCESS;
}

PHOS_SIM_API CUresult CUDAAPI cuCtxGetStreamPriorityRange(int* leastPriority, int* greatestPriority) {
  Driver* d = nullptr;
  std::shared_ptr<Context> ctx;
  if (CUresult r = RequireContext(&d, &ctx); r != CUDA_SUCCESS) return r;
  if (leastPriority != nullptr) *leastPriority = kLeastStreamPriority;
  if (greatestPriority != nullptr) *greatestPriority = kGreatestStreamPriority;
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

PHOS_SIM_API CUresult CUDAAPI cuStreamWaitValue32(CUstream stream, CUdeviceptr addr, cuuint32_t value,
                                                     unsigned int flags) {
  return EnqueueMemOp<cuuint32_t>(stream, addr, value, flags, /*wait=*/true);
}

PHOS_SIM_API CUresult CUDAAPI cuStreamWriteValue32(CUstream stream, CUdeviceptr addr, cuuint32_t value,
                                                      unsigned int flags) {
  return EnqueueMemOp<cuuint32_t>(stream, addr, value, flags, /*wait=*/false);
}

PHOS_SIM_API CUresult CUDAAPI cuStreamWaitValue64(CUstream stream, CUdeviceptr addr, cuuint64_t value,
                                                     unsigned int flags) {
  return EnqueueMemOp<cuuint64_t>(stream, addr, value, flags, /*wait=*/true);
}

PHOS_SIM_API CUresult CUDAAPI cuStreamWriteValue64(CUstream stream, CUdeviceptr addr, cuuint64_t value,
                                                      unsigned int flags) {
  return EnqueueMemOp<cuuint64_t>(stream, addr, value, flags, /*wait=*/false);
}

}  // extern "C"
