// A stream: asynchronous, in-order work on one context (cuStreamCreate and the NULL stream).
// Every method is thread-safe.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <memory>

#include "exec/op.h"

namespace phos::sim {

class Event;
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
  uint64_t last_enqueued() const;
  uint64_t last_completed() const;

 private:
  friend class Event;
  friend class ExecContext;
  explicit Stream(std::shared_ptr<StreamState> state);

  std::shared_ptr<StreamState> state_;
};

}  // namespace phos::sim
