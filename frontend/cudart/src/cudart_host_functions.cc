// Host functions (cudaLaunchHostFunc, cudaStreamAddCallback) are the function's own code, so they
// run here, in the function process, on the frontend's host-function thread and in stream order:
// phosd posts a function's slot to the ring's host-function queue when its stream reached it,
// holds the stream's later work, and lets it go when the thread posts the slot back after the
// function returned (docs/remoting.md "Host functions"). The calling thread does not wait. The
// thread uses only the ring's host-function queues, never the client's mutex, which an application
// thread may hold across a synchronisation that waits for the very stream a function holds up.
// It runs while functions are pending and a moment after; the fork template stops it
// (__phosQuiesce) before it counts its threads.
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

#include "cudart_internal.h"
#include "phos/base/log.h"

using phos::frontend::Client;
using phos::frontend::Return;
namespace ipc = phos::ipc;

namespace phos::frontend {
namespace {

constexpr auto kToFrontend = ipc::HostFnQueueId::kToFrontend;
constexpr auto kToServer = ipc::HostFnQueueId::kToServer;
// How long the thread stays after the last pending function returned: a program that queues a
// function per iteration keeps one thread rather than starting one per function.
constexpr auto kLinger = std::chrono::milliseconds(200);
// How often a waiting thread looks at whether it should leave.
constexpr int kWaitMs = 50;

// A queued function: exactly one of `fn` and `callback` is set.
struct HostFn {
  cudaHostFn_t fn = nullptr;
  cudaStreamCallback_t callback = nullptr;
  void* user_data = nullptr;
  cudaStream_t stream = nullptr;  // as the caller named it: the callback's first argument
};

class HostFunctions {
 public:
  static HostFunctions& Get() {
    // Never destroyed: a static destructor of the application may still queue a function. Its
    // thread is joined at exit, so that the process does not end with a thread nobody joined.
    static auto* functions = [] {
      auto* f = new HostFunctions();
      std::atexit([] { Get().AtExit(); });
      return f;
    }();
    return *functions;
  }

  cudaError_t Launch(cudaStream_t stream, const HostFn& fn);
  // A slot for each of `fns` (a graph launch's host nodes), or none when fewer are free.
  cudaError_t Take(const std::vector<cudaHostNodeParams>& fns, std::vector<uint32_t>* slots);
  // Slots taken whose record was not sent.
  void Return(const std::vector<uint32_t>& slots) {
    std::lock_guard lock(mu_);
    for (uint32_t slot : slots) FreeLocked(slot);
  }
  size_t Quiesce();
  // At exit: the thread is joined once it has nothing pending; a thread with functions still
  // pending (or the one calling exit from a host function) is left to end with the process, as is
  // any thread a later static destructor starts.
  void AtExit();
  void OrderAfterReturned() {
    if (!launched_.load(std::memory_order_relaxed)) return;
    std::lock_guard lock(mu_);
  }
  size_t pending() {
    std::lock_guard lock(mu_);
    return pending_;
  }

 private:
  HostFunctions() : slots_(ipc::kMaxHostFnSlots), in_use_(ipc::kMaxHostFnSlots, false) {
    for (uint32_t i = ipc::kMaxHostFnSlots; i > 0; --i) free_.push_back(i - 1);
  }
  void Loop();
  void FreeLocked(uint32_t slot);
  // Takes a free slot for `fn` and starts the thread if it is not running.
  uint32_t TakeLocked(const HostFn& fn, ipc::Ring* ring);

  std::mutex mu_;
  std::vector<HostFn> slots_;
  std::vector<bool> in_use_;
  std::vector<uint32_t> free_;  // the lowest slot last, taken first
  size_t pending_ = 0;
  ipc::Ring* ring_ = nullptr;  // the session's, set when the thread starts
  bool running_ = false;       // the thread has not left its loop
  bool leave_ = false;         // Quiesce: leave once nothing is pending
  bool exiting_ = false;       // AtExit ran: a thread started from now on is detached
  std::atomic<bool> launched_{false};  // a function was ever given a slot
  std::thread thread_;
};

cudaError_t HostFunctions::Launch(cudaStream_t stream, const HostFn& fn) {
  ipc::HostFnArgs a{0, 0, 0};
  if (CUresult r = StreamId(stream, &a.stream); r != CUDA_SUCCESS) return phos::frontend::Return(r);
  Client& client = Client::Get();
  ipc::Ring* ring = client.HostFnRing();
  if (ring == nullptr) return phos::frontend::Return(CUDA_ERROR_NO_DEVICE);
  {
    std::lock_guard lock(mu_);
    if (free_.empty()) {
      PHOS_LOG_EVERY_SEC(Warn, "frontend", 10,
                         "cudaLaunchHostFunc: {} host functions are pending already, phos's limit",
                         ipc::kMaxHostFnSlots);
      return phos::frontend::Return(cudaErrorLaunchOutOfResources);
    }
    a.slot = TakeLocked(fn, ring);
  }
  CUresult r = client.Call(ipc::Op::kLaunchHostFunc, &a, sizeof(a), nullptr, 0, false);
  if (r != CUDA_SUCCESS) {
    std::lock_guard lock(mu_);
    FreeLocked(a.slot);
  }
  return phos::frontend::Return(r);
}

cudaError_t HostFunctions::Take(const std::vector<cudaHostNodeParams>& fns, std::vector<uint32_t>* slots) {
  ipc::Ring* ring = Client::Get().HostFnRing();
  if (ring == nullptr) return phos::frontend::Return(CUDA_ERROR_NO_DEVICE);
  std::lock_guard lock(mu_);
  if (free_.size() < fns.size()) {
    PHOS_LOG_EVERY_SEC(Warn, "frontend", 10,
                       "cudaGraphLaunch: {} host nodes, with fewer of phos's {} host-function slots free",
                       fns.size(), ipc::kMaxHostFnSlots);
    return phos::frontend::Return(cudaErrorLaunchOutOfResources);
  }
  slots->clear();
  for (const cudaHostNodeParams& f : fns) slots->push_back(TakeLocked({.fn = f.fn, .user_data = f.userData}, ring));
  return cudaSuccess;
}

uint32_t HostFunctions::TakeLocked(const HostFn& fn, ipc::Ring* ring) {
  const uint32_t slot = free_.back();
  free_.pop_back();
  slots_[slot] = fn;
  in_use_[slot] = true;
  ++pending_;
  // At exit the thread leaves once nothing is pending, whatever is launched meanwhile.
  if (!exiting_) leave_ = false;
  launched_.store(true, std::memory_order_relaxed);
  if (!running_) {
    // A thread that left has nothing more to do than return: joined at once.
    if (thread_.joinable()) thread_.join();
    ring_ = ring;
    running_ = true;
    thread_ = std::thread([this] { Loop(); });
    if (exiting_) thread_.detach();
  }
  return slot;
}

void HostFunctions::FreeLocked(uint32_t slot) {
  if (slot >= in_use_.size() || !in_use_[slot]) return;
  in_use_[slot] = false;
  slots_[slot] = HostFn{};
  free_.push_back(slot);
  --pending_;
}

void HostFunctions::Loop() {
  ipc::Ring* ring = ring_;
  auto idle_since = std::chrono::steady_clock::now();
  std::vector<ipc::HostFnEvent> events(256);
  while (true) {
    ring->WaitHostFnEvents(kToFrontend, kWaitMs);
    while (size_t n = ring->TakeHostFnEvents(kToFrontend, events.data(), events.size())) {
      for (size_t i = 0; i < n; ++i) {
        const ipc::HostFnEvent& e = events[i];
        HostFn fn;
        {
          std::lock_guard lock(mu_);
          if (e.slot >= in_use_.size() || !in_use_[e.slot]) continue;
          fn = slots_[e.slot];
        }
        // A refused function is not run: phosd's refusal is the session's asynchronous error.
        if (e.result == 0) {
          if (fn.fn != nullptr) {
            fn.fn(fn.user_data);
          } else {
            fn.callback(fn.stream, cudaSuccess, fn.user_data);
          }
        }
        std::lock_guard lock(mu_);
        // Posted and freed at once: phosd has the slot back before a Launch can take it again, and
        // once the stream goes on (the post let it) the function no longer counts as pending.
        if (e.result == 0) ring->PostHostFnEvent(kToServer, {e.slot, 0});
        FreeLocked(e.slot);
      }
    }
    std::lock_guard lock(mu_);
    // A session phosd ended reaches none of its functions any more.
    const bool closed = ring->header()->closed.load() != 0;
    if (closed) {
      for (uint32_t slot = 0; slot < in_use_.size(); ++slot) FreeLocked(slot);
    }
    const auto now = std::chrono::steady_clock::now();
    if (pending_ != 0) {
      idle_since = now;
    } else if (leave_ || closed || now - idle_since > kLinger) {
      running_ = false;
      return;
    }
  }
}

size_t HostFunctions::Quiesce() {
  std::thread leaving;
  ipc::Ring* ring = nullptr;
  {
    std::lock_guard lock(mu_);
    if (pending_ != 0) return pending_;
    leave_ = true;
    leaving = std::move(thread_);
    ring = ring_;
  }
  if (leaving.joinable()) {
    ring->InterruptHostFnWait(kToFrontend);
    leaving.join();
  }
  return 0;
}

void HostFunctions::AtExit() {
  {
    std::lock_guard lock(mu_);
    exiting_ = true;
    if (thread_.joinable() && (pending_ != 0 || thread_.get_id() == std::this_thread::get_id())) {
      thread_.detach();
      return;
    }
  }
  Quiesce();  // nothing pending: the thread leaves and is joined, as before a fork
}

}  // namespace

cudaError_t TakeHostFnSlots(const std::vector<cudaHostNodeParams>& fns, std::vector<uint32_t>* slots) {
  return HostFunctions::Get().Take(fns, slots);
}

void ReturnHostFnSlots(const std::vector<uint32_t>& slots) {
  HostFunctions::Get().Return(slots);
}

size_t QuiesceHostFunctions() {
  return HostFunctions::Get().Quiesce();
}

CUresult AwaitHostFunctions(uint64_t stream) {
  // Host memory changes under a copy only by the program itself, by host functions, or by copies
  // to the host, which phos completes before they return: with no host function pending, the
  // bytes are already the ones the copy would read once the stream reached it.
  if (HostFunctions::Get().pending() == 0) return CUDA_SUCCESS;
  // The legacy stream's work also waits for the blocking streams' work, which synchronising the
  // legacy stream alone would not wait for: the device's work is waited for instead.
  if (stream == 0 || stream == reinterpret_cast<uintptr_t>(cudaStreamLegacy)) {
    return Client::Get().Call(ipc::Op::kDeviceSynchronize, nullptr, 0, nullptr, 0, true);
  }
  ipc::HandleArgs a{stream};
  return Client::Get().Call(ipc::Op::kStreamSynchronize, &a, sizeof(a), nullptr, 0, true);
}

void OrderAfterHostFunctions() {
  HostFunctions::Get().OrderAfterReturned();
}

}  // namespace phos::frontend

extern "C" {

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* userData) {
  if (fn == nullptr) return Return(cudaErrorInvalidValue);
  // On a capturing stream the function becomes a host node of the capture's graph.
  bool captured = false;
  if (cudaError_t e = phos::frontend::CaptureHostFunc(stream, {fn, userData}, &captured); e != cudaSuccess || captured)
    return e;
  return phos::frontend::HostFunctions::Get().Launch(stream,
                                                     {.fn = fn, .user_data = userData, .stream = stream});
}

cudaError_t cudaLaunchHostFunc_ptsz(cudaStream_t stream, cudaHostFn_t fn, void* userData) {
  return cudaLaunchHostFunc(phos::frontend::PerThreadDefault(stream), fn, userData);
}

// The callback's status is always cudaSuccess: after a device error the context's work, host
// functions included, is dropped, and the error comes from the next synchronising call. Its stream
// is the one the caller named, 0 included.
cudaError_t cudaStreamAddCallback(cudaStream_t stream, cudaStreamCallback_t callback, void* userData,
                                  unsigned int flags) {
  if (callback == nullptr || flags != 0) return Return(cudaErrorInvalidValue);
  return phos::frontend::HostFunctions::Get().Launch(
      stream, {.callback = callback, .user_data = userData, .stream = stream});
}

cudaError_t cudaStreamAddCallback_ptsz(cudaStream_t stream, cudaStreamCallback_t callback, void* userData,
                                       unsigned int flags) {
  if (callback == nullptr || flags != 0) return Return(cudaErrorInvalidValue);
  return phos::frontend::HostFunctions::Get().Launch(
      phos::frontend::PerThreadDefault(stream),
      {.callback = callback, .user_data = userData, .stream = stream});
}

}  // extern "C"
