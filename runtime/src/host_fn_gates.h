// One session's host functions (cudaLaunchHostFunc, cudaStreamAddCallback; docs/decisions.md
// "Host functions run in the function process"). The function is the tenant's code, so it runs in
// the function process; phosd only keeps it in its stream's order:
//
//   Launch (the executor): cuLaunchHostFunc of OnReached, then cuStreamWaitValue32 on the slot's
//     gate word (device memory of phosd's) for the slot's next generation: the stream's later
//     work waits for the word.
//   OnReached (the driver's callback thread): the stream reached the slot. Posts it to the
//     frontend's host-function queue; it neither waits nor calls the driver, so a function that
//     never returns holds up its own stream only, never the callback thread other sessions share.
//   the release thread (one per session, from its first host function): takes the slots the
//     frontend posts back once their function returned, checks that each was reached and not yet
//     released, and writes its generation to its gate word with cuStreamWriteValue32 on a stream
//     of its own. Not the executor: it may be blocked in a synchronisation that waits for that
//     very stream, and the frontend's callback thread cannot send a record while an application
//     thread waits for a reply.
//   OpenAll (the session's end, before its executor is joined): opens every gate, so that an
//     executor blocked in a synchronisation behind one returns, and refuses later launches.
//   Close (the session's end, once the executor stopped): stops the thread, waits for the
//     contexts with gates, frees the words. A callback the driver still runs finds them closed.
//
// Everything the frontend posts is checked: a slot out of range, never queued, not yet reached or
// already released is ignored (logged); a slot that is still pending cannot be queued again.
// Private to the API server.
#pragma once

#include <cuda.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "phos/base/status.h"
#include "phos/driver/driver_table.h"
#include "phos/ipc/ring.h"

namespace phos::runtime {

class HostFnGates : public std::enable_shared_from_this<HostFnGates> {
 public:
  // `ring` must outlive Close().
  static std::shared_ptr<HostFnGates> Create(driver::DriverTable* driver, ipc::Ring* ring, int pid);
  // The session calls Close() before it lets go: the release thread is joined there.
  ~HostFnGates() = default;
  HostFnGates(const HostFnGates&) = delete;
  HostFnGates& operator=(const HostFnGates&) = delete;

  // Queues slot `slot`'s host function on `stream` of session device `device`, whose context
  // `context` is current. CUDA_ERROR_INVALID_VALUE for a slot out of range or still pending.
  CUresult Launch(CUstream stream, int device, CUcontext context, uint32_t slot);
  // Whether Launch would take each of `slots`: in range, distinct, and none still pending (a
  // graph launch checks its host nodes' slots before it runs anything).
  bool Available(std::span<const uint32_t> slots);
  // Tells the frontend that the kLaunchHostFunc of `slot` was refused with `result`.
  void Refuse(uint32_t slot, CUresult result);
  // Slots queued whose function has not returned yet.
  size_t pending() const;
  // Opens every gate and refuses later launches. Any thread, any number of times.
  void OpenAll();
  // Once no Launch can come any more: stops the release thread, opens every gate, waits for the
  // contexts that have gates and frees their words. Later calls do nothing.
  void Close();

 private:
  enum class SlotState : uint8_t { kFree, kQueued, kReached, kReleasing };
  struct Slot {
    SlotState state = SlotState::kFree;
    int device = 0;
    uint32_t generation = 0;  // what the gate word holds once the slot's current use is released
  };
  // Per session device: its context, the gate words (one u32 per slot) and the stream that writes
  // them, which waits for nothing of the tenant's (CU_STREAM_NON_BLOCKING).
  struct DeviceGates {
    CUcontext context = nullptr;
    CUdeviceptr words = 0;
    CUstream release = nullptr;
  };
  // What the driver's callback gets: the gates outlive the session while a callback is in flight.
  struct Reach {
    std::shared_ptr<HostFnGates> gates;
    uint32_t slot;
    uint32_t generation;
  };

  HostFnGates(driver::DriverTable* driver, ipc::Ring* ring, int pid);
  static void CUDA_CB OnReached(void* reach);
  void Reached(uint32_t slot, uint32_t generation);
  // Takes the slots the frontend posted back and releases each one reached. Called by the release
  // thread, and by the executor before a Launch, so that a slot the frontend freed is free here too.
  void ReleaseReturned();
  // The gates of `device`, made on its first host function (executor only).
  Result<DeviceGates> GatesOn(int device, CUcontext context);
  // Writes `generation` to `slot`'s gate word on `gates`' release stream; false when it failed.
  bool Open(const DeviceGates& gates, uint32_t slot, uint32_t generation);
  void ReleaseLoop();

  driver::DriverTable* const driver_;
  ipc::Ring* const queue_ring_;  // the release thread waits on it without the lock
  const int pid_;
  mutable std::mutex mu_;
  std::condition_variable slot_freed_;  // a kReleasing slot became free
  ipc::Ring* ring_;                     // guarded by mu_; null once closed
  std::vector<Slot> slots_;             // guarded by mu_
  std::map<int, DeviceGates> devices_;  // guarded by mu_
  bool closing_ = false;                // guarded by mu_; OpenAll was called
  std::atomic<bool> stop_{false};
  std::thread release_thread_;  // started by the executor's first Launch
};

}  // namespace phos::runtime
