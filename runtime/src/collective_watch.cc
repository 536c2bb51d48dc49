#include "collective_watch.h"

#include <utility>

#include "phos/base/log.h"

namespace phos::runtime {

CollectiveWatch::CollectiveWatch(std::chrono::milliseconds timeout, std::function<int(const char*)> abort_half_entered)
    : timeout_(timeout), abort_half_entered_(std::move(abort_half_entered)) {}

CollectiveWatch::~CollectiveWatch() {
  Stop();
}

void CollectiveWatch::Arm() {
  std::lock_guard lock(record_mu_);
  if (timeout_.count() <= 0 || stop_ || thread_.joinable()) return;
  thread_ = std::thread([this] { Watch(); });
}

void CollectiveWatch::Stop() {
  std::thread watching;
  {
    std::lock_guard lock(record_mu_);
    stop_ = true;
    watching = std::move(thread_);
  }
  record_cv_.notify_all();
  if (watching.joinable()) watching.join();
}

void CollectiveWatch::BeginRecord() {
  {
    std::lock_guard lock(record_mu_);
    record_ = ++records_;
    record_began_ = std::chrono::steady_clock::now();
  }
  record_cv_.notify_all();
}

void CollectiveWatch::EndRecord() {
  std::lock_guard lock(record_mu_);
  record_ = 0;
}

int CollectiveWatch::AbortNow(const char* why) {
  Stop();
  std::lock_guard lock(mu_);
  return abort_half_entered_(why);
}

uint64_t CollectiveWatch::timeouts() const {
  std::lock_guard lock(record_mu_);
  return timeouts_;
}

// Sleeps until the record running now has run for the timeout (woken early only to stop), then,
// if it is still the one running, aborts what is half-entered; each record is judged once.
void CollectiveWatch::Watch() {
  std::unique_lock lock(record_mu_);
  uint64_t judged = 0;
  while (!stop_) {
    if (record_ == 0 || record_ == judged) {
      record_cv_.wait(lock, [&] { return stop_ || (record_ != 0 && record_ != judged); });
      continue;
    }
    const uint64_t record = record_;
    if (record_cv_.wait_until(lock, record_began_ + timeout_, [&] { return stop_ || record_ != record; })) continue;
    judged = record;
    lock.unlock();
    int aborted = 0;
    {
      // An NCCL record holds mu_ until it ended: once it is ours, the record is still running only
      // if it is not one of those, and it is then a wait.
      std::lock_guard nccl(mu_);
      std::unique_lock still(record_mu_);
      if (record_ == record) {
        still.unlock();
        aborted = abort_half_entered_("a call waited longer than the collective timeout");
      }
    }
    lock.lock();
    if (aborted > 0) {
      ++timeouts_;
      PHOS_LOG(Warn, "runtime", "a call waited {} ms with a collective half-entered: {} communicator(s) aborted",
               timeout_.count(), aborted);
    }
  }
}

}  // namespace phos::runtime
