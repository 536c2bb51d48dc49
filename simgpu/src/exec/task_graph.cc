#include "exec/task_graph.h"

#include <algorithm>
#include <utility>

#include "exec/executor.h"
#include "phos/base/log.h"

namespace phos::sim {
namespace {

// A task that takes no engine time: a marker, or an op of a context that already failed (its
// work is dropped so that synchronizing returns the error instead of hanging).
bool CompletesInline(Task& task) {
  if (task.marker()) return true;
  if (task.context().sticky_error() == CUDA_SUCCESS) return false;
  task.context().executor().CountDropped(task.op().engine);
  return true;
}

}  // namespace

Task::Task(Op op, bool marker, std::shared_ptr<StreamState> stream, uint64_t seq)
    : op_(std::move(op)), marker_(marker), stream_(std::move(stream)), seq_(seq) {
  ready_at_ns_.store(WallClock::now().time_since_epoch().count());
}

void Task::RaiseReadyAt(WallClock::time_point t) {
  int64_t ns = t.time_since_epoch().count();
  int64_t current = ready_at_ns_.load();
  while (current < ns && !ready_at_ns_.compare_exchange_weak(current, ns)) {
  }
}

ContextState& Task::context() const {
  return *stream_->context;
}

void Task::WaitDone() const {
  context().WaitUntil([this] { return done(); });
}

void AddDependency(Task* pred, const TaskPtr& succ) {
  if (pred == nullptr) return;
  std::lock_guard lock(pred->mu_);
  if (pred->completed_) {
    succ->RaiseReadyAt(pred->completed_at_);
    return;
  }
  pred->successors_.push_back(succ);
  succ->pending_.fetch_add(1);
}

void ReleaseHold(TaskPtr task) {
  if (task->pending_.fetch_sub(1) != 1) return;
  if (CompletesInline(*task)) {
    WallClock::time_point at = task->ready_at();
    CompleteTask(std::move(task), CUDA_SUCCESS, at);
  } else {
    Executor& executor = task->context().executor();
    executor.Dispatch(std::move(task));
  }
}

void CompleteTask(TaskPtr task, CUresult result, std::optional<WallClock::time_point> at) {
  // Iterative, not recursive: a long chain of markers behind a slow op completes in one go.
  // Markers and dropped work complete at their ready time: they take no device time.
  struct Done {
    TaskPtr task;
    CUresult result;
    std::optional<WallClock::time_point> at;
  };
  std::vector<Done> ready;
  ready.push_back({std::move(task), result, at});
  std::vector<TaskPtr> successors;
  while (!ready.empty()) {
    auto [t, r, when] = std::move(ready.back());
    ready.pop_back();
    ContextState& ctx = t->context();
    if (r != CUDA_SUCCESS) ctx.SetStickyError(r);
    // The op's captures (staging buffers, module references) are not needed any more, though
    // the task itself may live on as a stream's tail or an event's capture.
    t->op_.work = nullptr;
    t->op_.run_blocks = nullptr;
    {
      std::lock_guard lock(t->mu_);
      t->completed_ = true;
      t->completed_at_ = when ? *when : (t->marker() ? t->ready_at() : WallClock::now());
      successors.swap(t->successors_);
    }
    // Tasks of a stream complete in sequence order: each one depends on its predecessor.
    t->stream().completed_seq.store(t->seq());
    t->done_.store(true);
    ctx.NotifyCompletion();
    for (TaskPtr& s : successors) {
      s->RaiseReadyAt(t->completed_at_);
      if (s->pending_.fetch_sub(1) != 1) continue;
      if (CompletesInline(*s)) {
        WallClock::time_point ready_at = s->ready_at();
        ready.push_back({std::move(s), CUDA_SUCCESS, ready_at});
      } else {
        Executor& executor = s->context().executor();
        executor.Dispatch(std::move(s));
      }
    }
    successors.clear();
  }
}

void ContextState::SetStickyError(CUresult result) {
  int expected = CUDA_SUCCESS;
  if (sticky_.compare_exchange_strong(expected, result)) {
    PHOS_LOG(Warn, "simgpu", "device {}: context failed with CUresult {}; its pending work is dropped",
             executor_->ordinal(), static_cast<int>(result));
  }
}

TaskPtr ContextState::Enqueue(const std::shared_ptr<StreamState>& stream, Op op, bool marker,
                              const TaskPtr& wait_for, bool held) {
  TaskPtr task;
  {
    std::lock_guard lock(mu_);
    const uint64_t seq = stream->last_seq.load(std::memory_order_relaxed) + 1;
    task = std::make_shared<Task>(std::move(op), marker, stream, seq);
    if (held) task->AddHold();
    AddDependency(stream->tail.get(), task);
    AddDependency(wait_for.get(), task);
    // Legacy default stream: NULL-stream work waits for all blocking streams, and blocking-stream
    // work waits for prior NULL-stream work ("Stream synchronization behavior", driver API).
    if (stream->is_null) {
      for (StreamState* s : streams_) {
        if (s->blocking) AddDependency(s->tail.get(), task);
      }
      PruneRetired();
      for (const RetiredTail& r : retired_) {
        if (r.blocking) AddDependency(r.task.get(), task);
      }
    } else if (stream->blocking && null_ != nullptr) {
      AddDependency(null_->tail.get(), task);
    }
    stream->tail = task;
    stream->last_seq.store(seq);
  }
  ReleaseHold(task);
  return task;
}

void ContextState::Register(StreamState* stream) {
  std::lock_guard lock(mu_);
  if (stream->is_null) {
    null_ = stream;
  } else {
    streams_.push_back(stream);
  }
}

void ContextState::Unregister(StreamState* stream) {
  std::lock_guard lock(mu_);
  if (stream->is_null) {
    if (null_ == stream) null_ = nullptr;
  } else {
    streams_.erase(std::remove(streams_.begin(), streams_.end(), stream), streams_.end());
  }
  // The stream state must not keep its tail: the tail owns the stream state (a cycle).
  TaskPtr tail = std::move(stream->tail);
  if (tail != nullptr && !tail->done()) retired_.push_back({std::move(tail), stream->blocking});
  PruneRetired();
}

void ContextState::WaitAll() {
  std::vector<TaskPtr> tails;
  {
    std::lock_guard lock(mu_);
    if (null_ != nullptr && null_->tail != nullptr) tails.push_back(null_->tail);
    for (StreamState* s : streams_) {
      if (s->tail != nullptr) tails.push_back(s->tail);
    }
    for (const RetiredTail& r : retired_) tails.push_back(r.task);
  }
  // Every task of the context is a tail or precedes one in its stream.
  for (const TaskPtr& t : tails) t->WaitDone();
  std::lock_guard lock(mu_);
  PruneRetired();
}

void ContextState::NotifyCompletion() {
  if (waiters_.load() == 0) return;
  std::lock_guard lock(wait_mu_);
  wait_cv_.notify_all();
}

void ContextState::PruneRetired() {
  retired_.erase(
      std::remove_if(retired_.begin(), retired_.end(), [](const RetiredTail& r) { return r.task->done(); }),
      retired_.end());
}

}  // namespace phos::sim
