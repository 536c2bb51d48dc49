// The dependency graph behind streams and events (internal to exec).
//
// Every enqueued op, event record and stream wait becomes a Task. A task starts when all tasks it
// depends on completed: the previous task of its stream (streams run in order), the task an event
// captured (cuStreamWaitEvent), and the tails of other streams as the legacy NULL stream demands.
// Event records and waits are markers: they take no engine time and complete as soon as they are
// ready, stamping their completion time (which is what an event's timestamp is).
//
// Ownership: a task owns the tasks waiting for it (successors) until it completes, and its stream
// state; a stream state owns its context state. The two references back (a stream state's tail,
// a context's tails of destroyed streams) are cut explicitly: the tail when the Stream handle is
// destroyed, a destroyed stream's tail once it completed. So a task, stream or context state lives
// as long as something still needs it, whichever handle the API layer releases first.
#pragma once

#include <cuda.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "exec/model_clock.h"
#include "exec/op.h"

namespace phos::sim {

class ContextState;
class Executor;
class Task;
struct StreamState;
using TaskPtr = std::shared_ptr<Task>;

class Task {
 public:
  Task(Op op, bool marker, std::shared_ptr<StreamState> stream, uint64_t seq);
  Task(const Task&) = delete;
  Task& operator=(const Task&) = delete;

  Op& op() { return op_; }
  const Op& op() const { return op_; }
  bool marker() const { return marker_; }
  bool kernel() const { return !marker_ && op_.engine == Engine::kCompute && op_.run_blocks != nullptr; }
  StreamState& stream() const { return *stream_; }
  ContextState& context() const;
  uint64_t seq() const { return seq_; }

  // True once the task completed; its effects are then visible to the caller.
  bool done() const { return done_.load(); }
  // Blocks until done().
  void WaitDone() const;
  // When the task completed on the device timeline; meaningful once done(). For a paced op that
  // is its modelled end (not the moment the engine thread woke up after it), for a marker the
  // completion of the work it waited for.
  WallClock::time_point completed_at() const { return completed_at_; }
  // The earliest time the task could start on the device timeline: when it was enqueued, or the
  // latest completion of the tasks it depends on. Engines start an op at this time rather than
  // when their thread got to it, so that wake-up latency and timer slack between back-to-back
  // ops do not accumulate as idle device time.
  WallClock::time_point ready_at() const { return WallClock::time_point(WallClock::duration(ready_at_ns_.load())); }

  // Run state of an op on the compute pool, where a kernel is split into chunks that finish on
  // different workers: the last chunk to finish completes the op.
  uint32_t chunk_count = 0;  // written before the chunks are queued
  std::atomic<uint32_t> chunks_left{0};
  std::atomic<uint32_t> chunks_skipped{0};  // chunks not run because the context had failed
  std::atomic<int> first_error{CUDA_SUCCESS};
  std::atomic<bool> faulted{false};
  std::atomic<int64_t> started_ns{0};  // steady-clock nanoseconds when the first chunk started

 private:
  friend void AddDependency(Task* pred, const TaskPtr& succ);
  friend void ReleaseHold(TaskPtr task);
  friend void CompleteTask(TaskPtr task, CUresult result, std::optional<WallClock::time_point> at);

  friend class ContextState;
  friend class HeldTask;
  void RaiseReadyAt(WallClock::time_point t);
  // One more release (ReleaseHold) before the task may start; only before the enqueuer's own.
  void AddHold() { pending_.fetch_add(1); }

  Op op_;
  const bool marker_;
  const std::shared_ptr<StreamState> stream_;
  const uint64_t seq_;

  std::mutex mu_;
  bool completed_ = false;           // guarded by mu_
  std::vector<TaskPtr> successors_;  // guarded by mu_; tasks waiting for this one
  // Unresolved dependencies, plus one "hold" while the enqueuer is still adding them.
  std::atomic<uint32_t> pending_{1};
  std::atomic<bool> done_{false};
  WallClock::time_point completed_at_{};  // written before done_ is set
  std::atomic<int64_t> ready_at_ns_{0};    // WallClock ticks; only ever raised
};

// Makes `succ` wait for `pred`. No-op when `pred` is null or already complete. Only valid while
// `succ` is still held (between its construction and ReleaseHold).
void AddDependency(Task* pred, const TaskPtr& succ);
// Drops the enqueuer's hold on `task`; starts it if nothing else holds it back.
void ReleaseHold(TaskPtr task);
// Marks `task` complete with `result` (an error puts its context into the sticky error state),
// wakes its waiters and starts the successors it was the last dependency of. Called by engines
// when an op's work and pacing are over.
// Completes `task` with `result` at device time `at` (default: its ready time for markers and
// dropped work, now otherwise), and releases its successors.
void CompleteTask(TaskPtr task, CUresult result, std::optional<WallClock::time_point> at = std::nullopt);

// A stream as the graph sees it. The API-facing handle is Stream (stream.h).
struct StreamState {
  StreamState(std::shared_ptr<ContextState> context, bool is_null, bool blocking, int priority = kLeastStreamPriority)
      : context(std::move(context)), is_null(is_null), blocking(blocking), priority(priority) {}

  const std::shared_ptr<ContextState> context;
  const bool is_null;                      // the context's legacy default stream
  const bool blocking;                     // synchronizes with the NULL stream (not CU_STREAM_NON_BLOCKING)
  const int priority;                      // in [kGreatestStreamPriority, kLeastStreamPriority]
  TaskPtr tail;                            // the last task enqueued; guarded by the context's mutex
  std::atomic<uint64_t> last_seq{0};       // sequence of the last task enqueued
  std::atomic<uint64_t> completed_seq{0};  // sequence of the last task completed (in order)
};

// Per CUDA context: its streams (for the legacy NULL-stream rules), its sticky error, and the
// condition its waiters sleep on. The API-facing handle is ExecContext (exec_context.h).
class ContextState {
 public:
  ContextState(Executor* executor, double time_scale) : executor_(executor), time_scale_(time_scale) {}

  Executor& executor() const { return *executor_; }
  // Copied from the clock at creation: events read it after the executor may be gone.
  double time_scale() const { return time_scale_; }

  CUresult sticky_error() const { return static_cast<CUresult>(sticky_.load()); }
  // The first error wins; later ones are ignored, as CUDA reports the first failure.
  void SetStickyError(CUresult result);

  // Appends a task to `stream`: after the stream's previous task, after `wait_for` (may be null),
  // and after the tails the legacy NULL stream rules require. Never blocks on work. `held`: the
  // task also waits for one ReleaseHold by the caller (a cross-stream rendezvous, HeldTask).
  TaskPtr Enqueue(const std::shared_ptr<StreamState>& stream, Op op, bool marker, const TaskPtr& wait_for,
                  bool held = false);

  void Register(StreamState* stream);
  // The stream's handle is gone. Its pending work still runs; the context keeps its tail so that
  // the NULL stream and Synchronize still wait for it.
  void Unregister(StreamState* stream);

  // Blocks until every task enqueued on this context before the call completed.
  void WaitAll();
  // Blocks until pred() is true; pred must turn true only through a task completion.
  template <typename Pred>
  void WaitUntil(Pred pred) {
    if (pred()) return;
    std::unique_lock lock(wait_mu_);
    waiters_.fetch_add(1);
    wait_cv_.wait(lock, pred);
    waiters_.fetch_sub(1);
  }
  // Wakes waiters after a task of this context completed.
  void NotifyCompletion();

 private:
  struct RetiredTail {
    TaskPtr task;
    bool blocking;
  };
  // Drops retired tails that completed. Requires mu_.
  void PruneRetired();

  Executor* const executor_;
  const double time_scale_;
  std::atomic<int> sticky_{CUDA_SUCCESS};

  std::mutex mu_;  // stream registry and every stream's tail
  StreamState* null_ = nullptr;
  std::vector<StreamState*> streams_;  // created streams whose handle is alive
  std::vector<RetiredTail> retired_;   // tails of destroyed streams still pending

  std::mutex wait_mu_;
  std::condition_variable wait_cv_;
  // Sequentially consistent with the done flags, so a completion either sees a waiter or the
  // waiter sees the completion (no wakeup lost, no lock taken when nobody waits).
  std::atomic<int> waiters_{0};
};

}  // namespace phos::sim
