#include "exec/access_guard.h"

#include <linux/futex.h>
#include <pthread.h>
#include <semaphore.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <mutex>
#include <thread>

#include "memory/guard_table.h"
#include "phos/base/log.h"

namespace phos::sim {
namespace {

// One fault waiting for its decision. Lives on the faulting thread's signal stack until `done`.
struct FaultRequest {
  uintptr_t address = 0;
  const GuardSite* site = nullptr;
  FaultRequest* next = nullptr;
  bool retry = false;
  std::atomic<uint32_t> done{0};  // the futex word
};
static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t), "futex word");

long Futex(std::atomic<uint32_t>* word, int op, uint32_t value) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, nullptr, nullptr, 0);
}

struct GuardService {
  std::mutex mu;  // handler, started
  GuardHandler handler;
  bool started = false;
  // Read in signal context: whether faults go to the guard thread at all.
  std::atomic<bool> active{false};
  std::atomic<FaultRequest*> pending{nullptr};
  sem_t wake;
};

// Set once by the first SetHandler and never destroyed: faulting engine threads may still wait
// on it while the process exits. The signal handler only reads the pointer, so it never runs
// the initialisation itself.
std::atomic<GuardService*> g_service{nullptr};

GuardService& Service() {
  static GuardService* const service = [] {
    auto* s = new GuardService;
    sem_init(&s->wake, 0, 0);
    g_service.store(s, std::memory_order_release);
    return s;
  }();
  return *service;
}

void Serve(GuardService& service, FaultRequest* request) {
  const GuardSite& site = *request->site;
  const uint64_t total =
      site.faults != nullptr ? site.faults->fetch_add(1, std::memory_order_relaxed) + 1 : 0;
  GuardHandler handler;
  {
    std::lock_guard lock(service.mu);
    handler = service.handler;
  }
  GuardTable& table = GuardTable::Global();
  uintptr_t start = 0;
  uint64_t bytes = 0;
  if (!table.FindContaining(request->address, &start, &bytes)) {
    // Unguarded since the fault (serving another fault on the same range, or by the
    // application): the access can simply run again. If the page is inaccessible for another
    // reason it faults again, finds no guard and fails as an ordinary fault.
    request->retry = true;
    return;
  }
  if (handler == nullptr) {
    request->retry = false;
    return;
  }
  static log::RateLimiter limiter;
  if (limiter.Admit(std::chrono::seconds(1))) {
    PHOS_LOG(Info, "simgpu",
             "device {}: {} touched guarded range [{:#x}, {:#x}) at {:#x}; {} guard faults so far",
             site.device, site.what, start, start + bytes, request->address, total);
  }
  request->retry = handler(request->address, site.what) == GuardDecision::kRetry;
  if (request->retry) table.UnguardContaining(request->address);
}

void Loop(GuardService& service) {
  pthread_setname_np(pthread_self(), "simgpu-guard");
  while (true) {
    if (sem_wait(&service.wake) != 0) continue;  // EINTR
    FaultRequest* list = service.pending.exchange(nullptr, std::memory_order_acquire);
    // The list is last-in first; serve in arrival order.
    FaultRequest* ordered = nullptr;
    while (list != nullptr) {
      FaultRequest* next = list->next;
      list->next = ordered;
      ordered = list;
      list = next;
    }
    while (ordered != nullptr) {
      FaultRequest* request = ordered;
      // Read before the wake-up: the request's stack frame goes away once done is set.
      ordered = request->next;
      Serve(service, request);
      request->done.store(1, std::memory_order_release);
      Futex(&request->done, FUTEX_WAKE_PRIVATE, 1);
    }
  }
}

}  // namespace

void AccessGuard::SetHandler(GuardHandler fn) {
  GuardService& service = Service();
  std::lock_guard lock(service.mu);
  const bool active = fn != nullptr;
  service.handler = std::move(fn);
  if (active && !service.started) {
    std::thread([&service] { Loop(service); }).detach();
    service.started = true;
  }
  service.active.store(active, std::memory_order_release);
}

bool AccessGuard::OnFault(uintptr_t address, const GuardSite* site, uintptr_t* unmatched) {
  GuardService* const s = g_service.load(std::memory_order_acquire);
  if (s == nullptr || site == nullptr || !s->active.load(std::memory_order_acquire)) return false;
  GuardService& service = *s;
  if (!GuardTable::Global().Contains(address)) {
    // The range may have been unguarded between the fault and this check (another worker's
    // fault on it was just served: Unguard makes the pages accessible, then clears the slot).
    // Running the access once more settles it: if it faults again at the same address, with
    // still no guard there, it is an ordinary fault.
    if (*unmatched == address) return false;
    *unmatched = address;
    return true;
  }
  *unmatched = 0;
  const int saved_errno = errno;
  FaultRequest request;
  request.address = address;
  request.site = site;
  FaultRequest* head = service.pending.load(std::memory_order_relaxed);
  do {
    request.next = head;
  } while (!service.pending.compare_exchange_weak(head, &request, std::memory_order_release,
                                                  std::memory_order_relaxed));
  sem_post(&service.wake);
  while (request.done.load(std::memory_order_acquire) == 0) Futex(&request.done, FUTEX_WAIT_PRIVATE, 0);
  errno = saved_errno;
  return request.retry;
}

}  // namespace phos::sim
