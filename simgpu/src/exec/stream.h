// A stream: asynchronous, in-order work on one context (cuStreamCreate and the NULL stream).
// Every method is thread-safe.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <memory>

#include "exec/op.h"

namespace phos::sim {

class Event;
class HeldTask;
class Task;
struct StreamState;

class Stream {
 public:
  // Returns at once: work still pending runs to completion ("resources released once the device
  // has completed all work", cuStreamDestroy). The ExecContext still waits for it.
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  // Queues `op` after everything enqueued on this stream before (and, per the legacy NULL-stream
  // rules, after the context's other streams where they apply). Never blocks on work. Returns the
  // op's sequence number in this stream (1, 2, ...), for Wait(). Thread-safe.
  uint64_t Enqueue(Op op);
  // Queues `op` (or, with `marker`, a point that takes no device time) that also waits for the
  // returned handle's Release(): a party outside this stream decides when it may start (an op)
  // or complete (a marker). The pieces of a cross-stream rendezvous such as simgpu's NCCL
  // collectives. Never blocks on work. Thread-safe.
  std::shared_ptr<HeldTask> EnqueueHeld(Op op, bool marker);

  // CUDA_SUCCESS when everything enqueued so far completed, CUDA_ERROR_NOT_READY otherwise, or
  // the context's sticky error.
  CUresult Query() const;
  // Blocks until everything enqueued before the call completed. Returns the sticky error, or
  // CUDA_SUCCESS.
  CUresult Synchronize() const;
  // Blocks until the op with sequence number `seq` completed (synchronous copies: enqueue on the
  // NULL stream, then wait for that op only). CUDA_ERROR_INVALID_VALUE for a sequence number
  // not issued yet. Returns the sticky error, or CUDA_SUCCESS.
  CUresult Wait(uint64_t seq) const;
  // Later work on this stream waits for the work `event` captured at the time of this call
  // (cuStreamWaitEvent); the host does not block. An event never recorded is a no-op.
  CUresult WaitEvent(const Event& event);

  bool is_null() const;
  bool non_blocking() const;
  // CU_STREAM_DEFAULT or CU_STREAM_NON_BLOCKING.
  unsigned flags() const { return non_blocking() ? CU_STREAM_NON_BLOCKING : CU_STREAM_DEFAULT; }
  // In [kGreatestStreamPriority, kLeastStreamPriority]; the NULL stream's is the default, 0.
  int priority() const;
  uint64_t last_enqueued() const;
  uint64_t last_completed() const;

 private:
  friend class Event;
  friend class ExecContext;
  explicit Stream(std::shared_ptr<StreamState> state);

  std::shared_ptr<StreamState> state_;
};

// A task of Stream::EnqueueHeld, waiting for its release.
class HeldTask {
 public:
  // Releases the task if nobody did: no stream waits forever for a party that is gone.
  ~HeldTask() { Release(); }
  HeldTask(const HeldTask&) = delete;
  HeldTask& operator=(const HeldTask&) = delete;

  // Lets the task start (an op) or complete (a marker) once its stream reached it, not earlier
  // than now on the device timeline. An error becomes the context's sticky error first (work
  // behind the task is then dropped). Only the first call counts. Thread-safe.
  void Release(CUresult result = CUDA_SUCCESS);

 private:
  friend class Stream;
  explicit HeldTask(std::shared_ptr<Task> task) : task_(std::move(task)) {}

  std::shared_ptr<Task> task_;
  std::atomic<bool> released_{false};
};

}  // namespace phos::sim
