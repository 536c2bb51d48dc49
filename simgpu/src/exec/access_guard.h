// What happens when device work touches a guarded range (memory/guard_table.h): the
// phosSimSetGuardHandler extension.
//
// With no handler set, a touch of a guarded page is a fault like any other: the op fails with a
// sticky CUDA_ERROR_ILLEGAL_ADDRESS. With a handler, the op is held at the faulting access while
// the handler makes the data resident, then the access is executed again.
//
// The fault arrives as SIGSEGV on the engine thread running the op, where almost nothing is
// allowed (no locks, no allocation, no logging), while the handler must be free to take locks
// and copy data. So the signal handler does only async-signal-safe things: it pushes a request
// that lives on its own (alternate) stack onto a lock-free list, posts a semaphore (sem_post is
// async-signal-safe) and waits on a futex in the request. One dedicated thread, started by the
// first SetHandler, pops requests, calls the handler in ordinary thread context, unguards the
// range on RETRY if the handler did not, and wakes the faulting thread: returning from the
// signal handler executes the access again (RETRY), or the fault ends the op as before (FAIL).
// Faults are served one at a time, in arrival order.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>

namespace phos::sim {

enum class GuardDecision { kRetry, kFail };

// Called on the guard thread with the faulting address and what faulted (a kernel's mangled
// name or a description of the copy or memset).
using GuardHandler = std::function<GuardDecision(uintptr_t address, const char* what)>;

// The op a guarded engine thread is running, as FaultGuard::Run hands it to the fault handler.
struct GuardSite {
  int device = -1;
  const char* what = "";                    // lives as long as the op runs
  std::atomic<uint64_t>* faults = nullptr;  // counts this device's guard faults; may be null
};

class AccessGuard {
 public:
  // Sets (or, with an empty fn, clears) the process's handler. Starts the guard thread on first
  // use; it lives as long as the process.
  static void SetHandler(GuardHandler fn);

  // Signal context, on the thread that faulted inside FaultGuard::Run at `address`. True: the
  // access may run again (the range was guarded and a handler decided RETRY, or it may just have
  // been unguarded); false: treat it as an ordinary fault. `unmatched` is per FaultGuard::Run
  // state (initially 0) that bounds the second case to one retry per address.
  // Async-signal-safe; blocks until the handler has decided.
  static bool OnFault(uintptr_t address, const GuardSite* site, uintptr_t* unmatched);
};

}  // namespace phos::sim
