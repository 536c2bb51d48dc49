// An event: a marker in a stream's work (cuEventCreate/Record/Query/Synchronize/ElapsedTime).
// Every method is thread-safe.
#pragma once

#include <cuda.h>

#include <memory>
#include <mutex>

namespace phos::sim {

class Stream;
class Task;

class Event {
 public:
  // flags: CU_EVENT_DEFAULT, CU_EVENT_BLOCKING_SYNC, CU_EVENT_DISABLE_TIMING and
  // CU_EVENT_INTERPROCESS (which requires CU_EVENT_DISABLE_TIMING); anything else is
  // CUDA_ERROR_INVALID_VALUE.
  static CUresult Create(unsigned flags, std::shared_ptr<Event>* out);

  unsigned flags() const { return flags_; }
  bool timing_disabled() const { return (flags_ & CU_EVENT_DISABLE_TIMING) != 0; }
  bool recorded() const;

  // Captures the work enqueued on `stream` so far (on the NULL stream: the context's work, per
  // the legacy rules). The event completes when that work completed and is stamped then.
  // Re-recording replaces what was captured. The API layer checks that the event and the stream
  // belong to the same context.
  CUresult Record(Stream& stream);
  // CUDA_SUCCESS when the captured work completed (or the event was never recorded),
  // CUDA_ERROR_NOT_READY otherwise, or the sticky error of the context it was recorded in.
  CUresult Query() const;
  // Blocks until the captured work completed. Returns that context's sticky error, or
  // CUDA_SUCCESS.
  CUresult Synchronize() const;

  // Modelled milliseconds between the two events' completions (wall difference / time scale:
  // applications measure device time). CUDA_ERROR_INVALID_VALUE for a null `ms`;
  // CUDA_ERROR_INVALID_HANDLE when either event has timing disabled or was never recorded;
  // CUDA_ERROR_NOT_READY when either has not completed; then the sticky error of a failed context.
  static CUresult ElapsedTime(const Event& start, const Event& end, float* ms);

 private:
  friend class Stream;
  explicit Event(unsigned flags) : flags_(flags) {}
  std::shared_ptr<Task> captured() const;

  const unsigned flags_;
  mutable std::mutex mu_;
  std::shared_ptr<Task> captured_;  // guarded by mu_; null until recorded
};

}  // namespace phos::sim
