#include "exec/fault_guard.h"

#include <setjmp.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <mutex>

#include "phos/base/log.h"

namespace phos::sim {
namespace {

struct GuardFrame {
  sigjmp_buf env;
  GuardFrame* previous = nullptr;
  volatile int signal = 0;
  volatile uintptr_t address = 0;
  const GuardSite* site = nullptr;
  uintptr_t unmatched = 0;  // AccessGuard::OnFault's state
};

// The innermost FaultGuard::Run of this thread, read by the signal handler. initial-exec: the
// handler must not go through __tls_get_addr, which may allocate on a thread's first access.
thread_local GuardFrame* t_frame __attribute__((tls_model("initial-exec"))) = nullptr;

std::once_flag g_install_once;
struct sigaction g_previous_segv;
struct sigaction g_previous_bus;

void ChainToPrevious(int sig, siginfo_t* info, void* ucontext) {
  const struct sigaction& previous = sig == SIGBUS ? g_previous_bus : g_previous_segv;
  if ((previous.sa_flags & SA_SIGINFO) != 0 && previous.sa_sigaction != nullptr) {
    previous.sa_sigaction(sig, info, ucontext);
    return;
  }
  if ((previous.sa_flags & SA_SIGINFO) == 0 && previous.sa_handler != SIG_DFL &&
      previous.sa_handler != SIG_IGN) {
    previous.sa_handler(sig);
    return;
  }
  // Default action (an ignored SIGSEGV from a real fault is fatal too: the kernel forces it).
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  sigemptyset(&default_action.sa_mask);
  sigaction(sig, &default_action, nullptr);
  // A fault re-executes the faulting instruction on return and dies of it there, which keeps the
  // core dump pointing at the culprit; a signal sent by kill() has to be raised again (it stays
  // pending while this handler runs and is delivered on return).
  if (info == nullptr || info->si_code <= 0) raise(sig);
}

void HandleFault(int sig, siginfo_t* info, void* ucontext) {
  GuardFrame* frame = t_frame;
  // si_code > 0: raised by the kernel for an access of this thread, not sent by kill().
  if (frame != nullptr && info != nullptr && info->si_code > 0) {
    const auto address = reinterpret_cast<uintptr_t>(info->si_addr);
    // A guarded page made resident: returning executes the access again.
    if (AccessGuard::OnFault(address, frame->site, &frame->unmatched)) return;
    frame->signal = sig;
    frame->address = address;
    siglongjmp(frame->env, 1);
  }
  ChainToPrevious(sig, info, ucontext);
}

}  // namespace

void FaultGuard::Install() {
  std::call_once(g_install_once, [] {
    struct sigaction action {};
    action.sa_sigaction = HandleFault;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    if (sigaction(SIGSEGV, &action, &g_previous_segv) != 0 ||
        sigaction(SIGBUS, &action, &g_previous_bus) != 0) {
      PHOS_LOG(Error, "simgpu", "cannot install the fault handler; kernel faults will crash");
    }
  });
}

FaultReport FaultGuard::RunRaw(void (*call)(void*), void* arg, const GuardSite* site) {
  Install();
  GuardFrame frame;
  frame.previous = t_frame;
  frame.site = site;
  // savemask = 1: the handler runs with the signal blocked; the jump back must unblock it, or
  // the next fault on this thread would kill the process.
  if (sigsetjmp(frame.env, 1) != 0) {
    t_frame = frame.previous;
    return FaultReport{true, frame.signal, frame.address};
  }
  t_frame = &frame;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  call(arg);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  t_frame = frame.previous;
  return FaultReport{};
}

AltSignalStack::AltSignalStack() {
  // 64 KiB: room for the handler and whatever a chained handler (a sanitizer's) needs.
  size_ = std::max<size_t>(size_t{64} * 1024, static_cast<size_t>(sysconf(_SC_SIGSTKSZ)));
  void* memory = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) {
    PHOS_LOG(Warn, "simgpu", "cannot allocate an alternate signal stack");
    return;
  }
  stack_t stack{};
  stack.ss_sp = memory;
  stack.ss_size = size_;
  if (sigaltstack(&stack, &previous_) != 0) {
    PHOS_LOG(Warn, "simgpu", "cannot install an alternate signal stack");
    munmap(memory, size_);
    return;
  }
  memory_ = memory;
}

AltSignalStack::~AltSignalStack() {
  if (memory_ == nullptr) return;
  sigaltstack(&previous_, nullptr);
  munmap(memory_, size_);
}

}  // namespace phos::sim
