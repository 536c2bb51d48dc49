#include "exec/stream.h"

#include "exec/event.h"
#include "exec/task_graph.h"

namespace phos::sim {

Stream::Stream(std::shared_ptr<StreamState> state) : state_(std::move(state)) {}

Stream::~Stream() {
  state_->context->Unregister(state_.get());
}

uint64_t Stream::Enqueue(Op op) {
  return state_->context->Enqueue(state_, std::move(op), /*marker=*/false, nullptr)->seq();
}

std::shared_ptr<HeldTask> Stream::EnqueueHeld(Op op, bool marker) {
  TaskPtr task = state_->context->Enqueue(state_, std::move(op), marker, nullptr, /*held=*/true);
  return std::shared_ptr<HeldTask>(new HeldTask(std::move(task)));
}

void HeldTask::Release(CUresult result) {
  if (released_.exchange(true)) return;
  if (result != CUDA_SUCCESS) task_->context().SetStickyError(result);
  task_->RaiseReadyAt(WallClock::now());
  ReleaseHold(std::move(task_));
}

CUresult Stream::Query() const {
  const CUresult sticky = state_->context->sticky_error();
  if (sticky != CUDA_SUCCESS) return sticky;
  return state_->completed_seq.load() >= state_->last_seq.load() ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult Stream::Synchronize() const {
  return Wait(state_->last_seq.load());
}

CUresult Stream::Wait(uint64_t seq) const {
  if (seq > state_->last_seq.load()) return CUDA_ERROR_INVALID_VALUE;
  StreamState& state = *state_;
  state.context->WaitUntil([&state, seq] { return state.completed_seq.load() >= seq; });
  return state.context->sticky_error();
}

CUresult Stream::WaitEvent(const Event& event) {
  TaskPtr captured = event.captured();
  if (captured == nullptr) return CUDA_SUCCESS;
  // A wait on the NULL stream is itself NULL-stream work (it orders the blocking streams), so it
  // is enqueued even when the event already completed.
  if (captured->done() && !state_->is_null) return CUDA_SUCCESS;
  state_->context->Enqueue(state_, Op{}, /*marker=*/true, captured);
  return CUDA_SUCCESS;
}

bool Stream::is_null() const {
  return state_->is_null;
}
bool Stream::non_blocking() const {
  return !state_->blocking;
}
int Stream::priority() const {
  return state_->priority;
}
uint64_t Stream::last_enqueued() const {
  return state_->last_seq.load();
}
uint64_t Stream::last_completed() const {
  return state_->completed_seq.load();
}

}  // namespace phos::sim
