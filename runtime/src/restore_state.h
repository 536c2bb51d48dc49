// The GPU side of a session that starts from a plan (SessionPlan), prepared apart from the
// session: for a snapshot as soon as its token is issued, while the function's CPU side is still
// being forked: lease a context (or a device group), reserve the instance's range, map every buffer
// at its address, recreate the virtual streams, events, cuBLAS handles and communicators under the
// ids the function holds, and start the loaders (or, for stop-the-world, copy everything). The
// session adopts the result when the function connects. Private to the API server.
#pragma once

#include <cublas_v2.h>
#include <cuda.h>
#include <nccl.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "phos/base/status.h"
#include "phos/ctxpool/communicator_pool.h"
#include "phos/ctxpool/context_pool.h"
#include "phos/driver/driver_table.h"
#include "phos/runtime/api_server.h"
#include "phos/runtime/restore_loader.h"
#include "phos/runtime/shared_buffers.h"
#include "phos/runtime/va_allocator.h"
#include "phos/store/manifest.h"

namespace phos::runtime {

class RestoreState {
 public:
  using Clock = std::chrono::steady_clock;

  // Starts preparing on a thread of its own when there is a snapshot to restore; a session without
  // one leases its context when the function connects (EnsureStarted), as a process starting from
  // scratch would. `pool`, `groups` (may be null: no sessions of several GPUs) and `driver` must
  // outlive the state. `slot_base`: the arena slot (SessionPlan::va_slot) of `va_bytes` at that
  // address, or 0.
  // `priority` (may be null) orders this restore's copies against the server's other restores.
  // `shares` (may be null: nothing shared) holds the read-only buffers resident on the devices
  // (docs/design.md D14); it must outlive the state and whatever a session takes from it.
  RestoreState(SessionPlan plan, driver::DriverTable* driver, ctxpool::ContextPool* pool,
               ctxpool::CommunicatorPool* groups, LoadPriority* priority, SharedBuffers* shares, int device,
               uint64_t va_bytes, CUdeviceptr slot_base);
  // Joins the preparation; whatever was not adopted by a session is released (the lease's scrub).
  ~RestoreState();
  RestoreState(const RestoreState&) = delete;
  RestoreState& operator=(const RestoreState&) = delete;

  // The node's device the session's device 0 is (single-GPU sessions).
  int device() const { return device_; }
  // Starts the preparation if it has not started (idempotent).
  void EnsureStarted();
  // Blocks until the preparation finished (or `timeout`: Timeout); its status.
  Status Wait(std::chrono::milliseconds timeout);

  // One device's loader, over the snapshot's buffers on that device.
  struct DeviceLoader {
    std::unique_ptr<store::Manifest> manifest;  // the device's buffers (what the loader names)
    std::vector<int> global;                    // loader index -> index in the snapshot
    std::unique_ptr<RestoreLoader> loader;
  };
  // What a session takes over once Wait() succeeded.
  struct Prepared {
    std::optional<ctxpool::ContextLease> lease;      // single-GPU sessions
    std::optional<ctxpool::DeviceGroupLease> group;  // sessions of several GPUs
    // By session device; empty, or null entries: the session reserves a range on its first
    // allocation (single GPU) or allocates with cuMemAlloc.
    std::map<int, std::unique_ptr<InstanceAddressSpace>> spaces;
    std::vector<DeviceLoader> loaders;  // by session device; empty for a session without a snapshot
    struct Buffer {
      uint64_t base = 0;
      uint64_t bytes = 0;
      int device = 0;
    };
    std::vector<Buffer> buffers;  // the session's buffer table
    // Snapshot buffers mapped read-only from a resident shared allocation: no loader loads them.
    std::set<int> shared;
    uint64_t shared_bytes = 0;
    // Snapshot buffers this restore loads into an allocation it registered as shared: mapped
    // read-only and handed out once loaded (StartLoaders' on_ready), unless a call of the session
    // is to write it first (withdrawn: it stays the session's own).
    struct PublishState {
      std::mutex mu;
      bool published = false;
      bool withdrawn = false;
    };
    struct Publish {
      InstanceAddressSpace::ShareableMapping mapping;
      std::string content;
      std::shared_ptr<PublishState> state;
    };
    std::map<int, Publish> publish;
    // Both kinds by address, for the session's copy-on-write (Session::CopySharedOnWrite).
    struct SharedBuffer {
      std::string content;
      int device = 0;                         // the session's device whose space maps it
      int physical = 0;                       // the node's device (SharedBuffers' key)
      CUmemGenericAllocationHandle handle = 0;  // registered by this restore (with `publish`)
      std::shared_ptr<PublishState> publish;  // null: mapped from another instance's allocation
    };
    std::map<uint64_t, SharedBuffer> shared_by_address;
    std::unordered_map<uint64_t, CUstream> streams;
    std::unordered_map<uint64_t, unsigned> stream_flags;
    std::unordered_map<uint64_t, int> stream_priorities;
    std::unordered_map<uint64_t, CUevent> events;
    std::unordered_map<uint64_t, unsigned> event_flags;
    std::unordered_map<uint64_t, cublasHandle_t> blas;
    std::unordered_map<uint64_t, int> handle_devices;  // stream, event, cuBLAS vid -> device (>= 1)
    std::unordered_map<uint64_t, std::pair<ncclComm_t, int>> comms;  // vid -> group rank, device
    // The function's modules in device 0's context, by content hash (ChunkId bytes): kept loaded
    // there by its earlier instance, or the snapshot's loaded while the CPU side forks. The session
    // uses them when the function sends the same images.
    ctxpool::ModulesByHash modules;
    uint64_t pooled_blas_vid = 0;
    uint64_t next_handle = 0;
    CUcontext context(int device) const { return group ? group->context(device) : lease->context(); }
  };
  // Moves the prepared resources out (once).
  Prepared Take();
  // Hands everything `p` holds back to its lease's or group's scrub (borrowed ranges are zeroed and
  // unmapped now: their slot goes to the next instance at once).
  static void Release(driver::DriverTable& driver, Prepared& p);

  const SessionPlan& plan() const { return plan_; }
  // The function the session runs: the plan's, or its snapshot's (empty: unknown).
  const std::string& function() const;
  SharedBuffers* shares() const { return shares_; }

  // Stage times, filled as they happen (read under the lock).
  struct Times {
    Clock::time_point issued;
    Clock::time_point leased;
    Clock::duration pool_wait{};  // of the lease: zero when a context was ready
    Clock::time_point loading;  // the loaders started (their fully_resident_ms counts from here)
    Clock::time_point prepared;
    Clock::time_point connected;
    Clock::time_point first_launch;
  };
  Times times() const;
  void MarkConnected();
  void MarkFirstLaunch();

  // Modules loaded for the session rather than found kept in its context by the function's
  // earlier instance: by the preload while the CPU side forks, or by the session when the function
  // sent an image that was not there. Each costs the device's module-load time, which a first
  // launch after resume waits for.
  uint64_t modules_loaded() const;
  void NoteModuleLoaded();

  // Learning (plan.learn_first_touch): the session notes each buffer a call names, by snapshot
  // index, and whether the call's speculated write set names it; TakeLearnedUsage() stops it and
  // returns each buffer's first-touch rank and whether any call may have written it.
  bool learning() const;
  void NoteTouch(int index, bool written);
  // A call that could not be analysed ran: it may have written any buffer.
  void NoteEveryBufferWritten();
  LearnedUsage TakeLearnedUsage();

 private:
  Status Prepare();
  Status Lease(Prepared& p);
  Status ReserveSpaces(Prepared& p);
  Status MapBuffers(Prepared& p);
  Status RecreateHandles(Prepared& p);
  Status StartLoaders(Prepared& p);
  // The modules the lease kept loaded for the function, into `p.modules` (single-GPU leases).
  void TakeKeptModules(Prepared& p);
  // The snapshot's modules in device 0's context: those the lease kept for the function, the rest
  // loaded (a module that fails is left to the function's own load). Kept modules the snapshot
  // does not name (an earlier version's) go to the scrub.
  void PreloadModules(Prepared& p);

  const SessionPlan plan_;
  driver::DriverTable* driver_;
  ctxpool::ContextPool* pool_;
  ctxpool::CommunicatorPool* groups_;
  LoadPriority* priority_;
  SharedBuffers* shares_;
  int device_;
  uint64_t va_bytes_;
  CUdeviceptr slot_base_;
  std::atomic<bool> cancel_{false};  // a group lease waiting for the refill gives up

  mutable std::mutex mu_;
  std::condition_variable done_cv_;
  bool done_ = false;
  Status status_;
  Prepared prepared_;
  Times times_;
  uint64_t modules_loaded_ = 0;
  bool learning_ = false;
  std::vector<int32_t> ranks_;
  std::vector<bool> written_;
  int32_t next_rank_ = 0;
  std::thread worker_;
};

}  // namespace phos::runtime
