#include "collective_watch.h"

#include <algorithm>
#include <utility>

#include "phos/base/log.h"

namespace phos::runtime {
namespace {

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

CollectiveWatch::CollectiveWatch(std::chrono::milliseconds timeout,
                                 std::function<int(const char*)> abort_half_entered)
    : timeout_(timeout), abort_half_entered_(std::move(abort_half_entered)) {}

CollectiveWatch::~CollectiveWatch() {
  Stop();
}

void CollectiveWatch::Arm() {
  std::lock_guard lock(stop_mu_);
  if (timeout_.count() <= 0 || stop_ || thread_.joinable()) return;
  armed_.store(true, std::memory_order_relaxed);
  thread_ = std::thread([this] { Watch(); });
}

void CollectiveWatch::Stop() {
  std::thread watching;
  {
    std::lock_guard lock(stop_mu_);
    stop_ = true;
    watching = std::move(thread_);
  }
  stop_cv_.notify_all();
  if (watching.joinable()) watching.join();
}

// The start is stored before the serial: whoever reads a serial then the start sees that
// record's start or a later one's, never an earlier one.
void CollectiveWatch::BeginRecord() {
  if (!armed_.load(std::memory_order_relaxed)) return;
  began_ns_.store(NowNs(), std::memory_order_relaxed);
  record_.store(++records_, std::memory_order_release);
}

void CollectiveWatch::EndRecord() {
  if (armed_.load(std::memory_order_relaxed)) record_.store(0, std::memory_order_release);
}

int CollectiveWatch::AbortNow(const char* why) {
  Stop();
  std::lock_guard lock(mu_);
  return abort_half_entered_(why);
}

// Wakes when the record running has run for the timeout (or after a timeout's sleep when none
// runs) and, if it still runs, aborts what is half-entered; each record is judged once.
void CollectiveWatch::Watch() {
  const int64_t timeout_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(timeout_).count();
  uint64_t judged = 0;
  std::unique_lock lock(stop_mu_);
  while (!stop_) {
    const uint64_t record = record_.load(std::memory_order_acquire);
    int64_t due = NowNs() + timeout_ns;
    if (record != 0 && record != judged) due = began_ns_.load(std::memory_order_relaxed) + timeout_ns;
    if (record == 0 || record == judged || NowNs() < due) {
      stop_cv_.wait_for(lock, std::chrono::nanoseconds(std::max<int64_t>(due - NowNs(), 0)),
                        [this] { return stop_; });
      continue;
    }
    judged = record;
    lock.unlock();
    int aborted = 0;
    {
      // An NCCL record holds mu_ until it ended: once mu_ is ours, a record still running is none
      // of those, and so a wait.
      std::lock_guard nccl(mu_);
      if (record_.load(std::memory_order_acquire) == record) {
        aborted = abort_half_entered_("a call waited longer than the collective timeout");
      }
    }
    if (aborted > 0) {
      PHOS_LOG(Warn, "runtime",
               "a call waited {} ms with a collective half-entered: {} communicator(s) aborted",
               timeout_.count(), aborted);
    }
    lock.lock();
  }
}

}  // namespace phos::runtime
