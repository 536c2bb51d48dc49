#include "exec/event.h"

#include <chrono>

#include "exec/stream.h"
#include "exec/task_graph.h"

namespace phos::sim {

CUresult Event::Create(unsigned flags, std::shared_ptr<Event>* out) {
  constexpr unsigned kKnown = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
  if (out == nullptr || (flags & ~kKnown) != 0) return CUDA_ERROR_INVALID_VALUE;
  // cuEventCreate: "CU_EVENT_INTERPROCESS must be specified along with CU_EVENT_DISABLE_TIMING".
  if ((flags & CU_EVENT_INTERPROCESS) != 0 && (flags & CU_EVENT_DISABLE_TIMING) == 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *out = std::shared_ptr<Event>(new Event(flags));
  return CUDA_SUCCESS;
}

std::shared_ptr<Task> Event::captured() const {
  std::lock_guard lock(mu_);
  return captured_;
}

bool Event::recorded() const {
  return captured() != nullptr;
}

CUresult Event::Record(Stream& stream) {
  StreamState& state = *stream.state_;
  TaskPtr marker = state.context->Enqueue(stream.state_, Op{}, /*marker=*/true, nullptr);
  std::lock_guard lock(mu_);
  captured_ = std::move(marker);
  return CUDA_SUCCESS;
}

CUresult Event::Query() const {
  TaskPtr task = captured();
  if (task == nullptr) return CUDA_SUCCESS;
  const CUresult sticky = task->context().sticky_error();
  if (sticky != CUDA_SUCCESS) return sticky;
  return task->done() ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult Event::Synchronize() const {
  TaskPtr task = captured();
  if (task == nullptr) return CUDA_SUCCESS;
  task->WaitDone();
  return task->context().sticky_error();
}

CUresult Event::ElapsedTime(const Event& start, const Event& end, float* ms) {
  if (ms == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (start.timing_disabled() || end.timing_disabled()) return CUDA_ERROR_INVALID_HANDLE;
  TaskPtr a = start.captured();
  TaskPtr b = end.captured();
  if (a == nullptr || b == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (!a->done() || !b->done()) return CUDA_ERROR_NOT_READY;
  // Markers of a failed context complete without waiting for their work: no meaningful time.
  if (CUresult sticky = a->context().sticky_error(); sticky != CUDA_SUCCESS) return sticky;
  if (CUresult sticky = b->context().sticky_error(); sticky != CUDA_SUCCESS) return sticky;
  const std::chrono::duration<double, std::milli> wall = b->completed_at() - a->completed_at();
  *ms = static_cast<float>(wall.count() / a->context().time_scale());
  return CUDA_SUCCESS;
}

}  // namespace phos::sim
