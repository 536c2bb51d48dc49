// The execution state of one CUDA context: its legacy NULL stream, the streams created in it,
// and its sticky error.
#pragma once

#include <cuda.h>

#include <memory>

#include "exec/op.h"

namespace phos::sim {

class ContextState;
class Executor;
class Stream;

class ExecContext {
 public:
  // Waits for all work of the context, including that of streams already destroyed (CUDA
  // destroys a context only after its work completed).
  ~ExecContext();
  ExecContext(const ExecContext&) = delete;
  ExecContext& operator=(const ExecContext&) = delete;

  // The legacy default stream (CUstream 0 / CU_STREAM_LEGACY). Work on it waits for all prior
  // work of the context's blocking streams, and later work of blocking streams waits for it.
  const std::shared_ptr<Stream>& null_stream() const { return null_stream_; }

  // A new stream. flags: CU_STREAM_DEFAULT (blocking: synchronizes with the NULL stream) or
  // CU_STREAM_NON_BLOCKING; anything else is CUDA_ERROR_INVALID_VALUE. `priority` outside
  // [kGreatestStreamPriority, kLeastStreamPriority] is clamped to it, as the driver does. Releasing
  // the last reference destroys the stream without waiting; its pending work still runs.
  CUresult CreateStream(unsigned flags, std::shared_ptr<Stream>* out, int priority = kLeastStreamPriority);

  // Blocks until all work enqueued on the context before the call completed (cuCtxSynchronize).
  // Returns the sticky error, or CUDA_SUCCESS.
  CUresult Synchronize();

  // CUDA_SUCCESS, or the error of the first failed op (e.g. CUDA_ERROR_ILLEGAL_ADDRESS after a
  // faulting kernel). Once set it stays: the context's pending and later work is dropped, and
  // the API layer returns this from every later call on the context.
  CUresult sticky_error() const;

  Executor& executor() const;

 private:
  friend class Executor;
  explicit ExecContext(Executor& executor);

  std::shared_ptr<ContextState> state_;
  std::shared_ptr<Stream> null_stream_;
};

}  // namespace phos::sim
