// Runs code that may touch unmapped or PROT_NONE memory without taking the process down.
//
// simgpu kernels are ordinary g++-compiled functions that dereference device pointers (host
// virtual addresses). On a GPU a bad access fails the kernel with CUDA_ERROR_ILLEGAL_ADDRESS; the
// compute engine runs kernels under FaultGuard::Run to do the same. phos also keeps buffers that
// are not restored yet behind PROT_NONE to validate speculated read sets (docs/design.md D8); this is the
// piece that reports such a touch and where it landed.
//
// One process-wide SIGSEGV/SIGBUS handler (SA_SIGINFO | SA_ONSTACK) is installed on first use.
// A fault raised by the kernel while the faulting thread is inside FaultGuard::Run siglongjmps
// back to Run, which reports it. Every other fault is handed to the handler that was installed
// before, or gets the default action, so real crashes still crash.
//
// Guarded ranges (memory/guard_table.h): a fault on a guarded page first goes to AccessGuard,
// which may have the access run again after a handler made the data resident; only when it does
// not does the fault end Run as above.
//
// What the callable may do: siglongjmp skips every frame between the faulting access and Run, so
// at any point where it may fault the callable must not hold a lock or own an object whose
// destructor matters (kernels and memcpy qualify; a lambda holding a std::lock_guard does not).
#pragma once

#include <signal.h>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <type_traits>

#include "exec/access_guard.h"

namespace phos::sim {

struct FaultReport {
  bool faulted = false;
  int signal = 0;         // SIGSEGV or SIGBUS
  uintptr_t address = 0;  // the faulting address (si_addr)
};

class FaultGuard {
 public:
  // Installs the handlers once per process; later calls do nothing. Thread-safe.
  static void Install();

  // Runs fn() on the calling thread (installing the handlers first if needed). Returns
  // faulted = false when fn returned normally, or the fault that ended it. Calls nest. An
  // exception thrown by fn is carried past the guard's frame and rethrown here. `site` names the
  // op for guard faults (AccessGuard); it must outlive the call. Null: no guard handling.
  template <typename Fn>
  static FaultReport Run(Fn&& fn, const GuardSite* site = nullptr) {
    struct Call {
      std::remove_reference_t<Fn>* fn;
      std::exception_ptr error;
    } call{std::addressof(fn), nullptr};
    const FaultReport report = RunRaw(
        [](void* arg) {
          Call* c = static_cast<Call*>(arg);
          try {
            (*c->fn)();
          } catch (...) {
            c->error = std::current_exception();
          }
        },
        &call, site);
    if (call.error != nullptr) std::rethrow_exception(call.error);
    return report;
  }

 private:
  static FaultReport RunRaw(void (*call)(void*), void* arg, const GuardSite* site);
};

// Gives the calling thread an alternate signal stack while this object lives, so that the
// handler still runs when a guarded call overflowed its own stack. Engine threads hold one.
class AltSignalStack {
 public:
  AltSignalStack();
  ~AltSignalStack();
  AltSignalStack(const AltSignalStack&) = delete;
  AltSignalStack& operator=(const AltSignalStack&) = delete;

  // False when the stack could not be allocated or installed (the thread keeps its old one).
  bool installed() const { return memory_ != nullptr; }

 private:
  void* memory_ = nullptr;
  size_t size_ = 0;
  stack_t previous_{};
};

}  // namespace phos::sim
