// The GPU side of a session that starts from a snapshot (BRIEF D7), prepared as soon as its token
// is issued, while the function's CPU side is still being forked: lease a context, reserve the
// instance's address range at its snapshot base, map every buffer at its address, recreate the
// virtual streams, events and cuBLAS handles under the ids the function holds, and start the
// loader (or, for stop-the-world, copy everything). The session adopts the result when the
// function connects. Private to the API server.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include <cublas_v2.h>
#include <cuda.h>

#include "phos/base/status.h"
#include "phos/ctxpool/context_pool.h"
#include "phos/runtime/api_server.h"
#include "phos/runtime/driver_table.h"
#include "phos/runtime/restore_loader.h"
#include "phos/runtime/va_allocator.h"

namespace phos::runtime {

class RestoreState {
 public:
  using Clock = std::chrono::steady_clock;

  // Starts preparing on a thread of its own when there is a snapshot to restore; a session without
  // one leases its context when the function connects (EnsureStarted), as a process starting from
  // scratch would. `pool` and `driver` must outlive the state.
  // `slot_base`: the arena slot (SessionPlan::va_slot) of `va_bytes` at that address, or 0.
  RestoreState(SessionPlan plan, DriverTable* driver, ctxpool::ContextPool* pool, int device, uint64_t va_bytes,
               CUdeviceptr slot_base);
  // Joins the preparation; whatever was not adopted by a session is released (the lease's scrub).
  ~RestoreState();
  RestoreState(const RestoreState&) = delete;
  RestoreState& operator=(const RestoreState&) = delete;

  // Starts the preparation if it has not started (idempotent).
  void EnsureStarted();
  // Blocks until the preparation finished (or `timeout`: Timeout); its status.
  Status Wait(std::chrono::milliseconds timeout);

  // What a session takes over once Wait() succeeded.
  struct Prepared {
    std::optional<ctxpool::ContextLease> lease;
    std::unique_ptr<InstanceAddressSpace> space;  // null: the session reserves one on its first allocation
    std::unique_ptr<RestoreLoader> loader;        // null for a cold boot
    std::vector<std::pair<uint64_t, uint64_t>> buffers;  // base, bytes: the session's buffer table
    std::unordered_map<uint64_t, CUstream> streams;
    std::unordered_map<uint64_t, unsigned> stream_flags;
    std::unordered_map<uint64_t, CUevent> events;
    std::unordered_map<uint64_t, unsigned> event_flags;
    std::unordered_map<uint64_t, cublasHandle_t> blas;
    uint64_t pooled_blas_vid = 0;
    uint64_t next_handle = 0;
  };
  // Moves the prepared resources out (once).
  Prepared Take();

  const SessionPlan& plan() const { return plan_; }

  // Stage times, filled as they happen (read under the lock).
  struct Times {
    Clock::time_point issued;
    Clock::time_point leased;
    Clock::time_point loading;  // the loader started (its fully_resident_ms counts from here)
    Clock::time_point prepared;
    Clock::time_point connected;
    Clock::time_point first_launch;
  };
  Times times() const;
  void MarkConnected();
  void MarkFirstLaunch();

  // First-touch learning (plan.learn_first_touch): the session notes each buffer a call names,
  // by manifest index, the first time; TakeFirstTouch() stops it and returns rank per buffer
  // (-1: untouched).
  bool learning() const;
  void NoteTouch(int index);
  std::vector<int32_t> TakeFirstTouch();

 private:
  Status Prepare();
  Status MapBuffers(Prepared& out);
  Status RecreateHandles(Prepared& out);

  const SessionPlan plan_;
  DriverTable* driver_;
  ctxpool::ContextPool* pool_;
  int device_;
  uint64_t va_bytes_;
  CUdeviceptr slot_base_;

  mutable std::mutex mu_;
  std::condition_variable done_cv_;
  bool done_ = false;
  Status status_;
  Prepared prepared_;
  Times times_;
  bool learning_ = false;
  std::vector<int32_t> ranks_;
  int32_t next_rank_ = 0;
  std::thread worker_;
};

}  // namespace phos::runtime
