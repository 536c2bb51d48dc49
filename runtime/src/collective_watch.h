// The way out of a collective a function left half-entered while the session's executor waits
// in it. Every rank of a session's communicators is driven by its one executor thread, so once
// that thread waits (a synchronisation, a blocking copy, a free) on a collective some ranks have
// not entered, only the session's later records could bring the others, and the executor reads
// none of them: nothing but an abort from another thread ends the wait. Two threads abort:
// the one ending the session, before it joins the executor, and, when the session has a
// collective timeout, the watch's own thread once one record has run longer than that with a
// collective half-entered (docs/decisions.md, "A collective timeout in phosd").
//
// The executor holds the watch's lock while it runs an NCCL record, and the abort runs under it:
// the session's NCCL bookkeeping is never read and written at once, and a communicator is never
// aborted in the middle of a call the executor makes on it. A record that waits holds no lock.
// Private to the API server.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>

namespace phos::runtime {

class CollectiveWatch {
 public:
  // `abort_half_entered` aborts every communicator with a collective some of its ranks entered and
  // others did not, and says how many it aborted; it runs with the watch's lock held, on the
  // thread that decided. `timeout` 0: no timeout, only AbortNow.
  CollectiveWatch(std::chrono::milliseconds timeout, std::function<int(const char* why)> abort_half_entered);
  ~CollectiveWatch();
  CollectiveWatch(const CollectiveWatch&) = delete;
  CollectiveWatch& operator=(const CollectiveWatch&) = delete;

  // The session has communicators from now on (a device group): the timeout starts to apply. Only
  // such sessions pay for the watch's thread.
  void Arm();
  // The executor, around a record it runs: when the record began (the timeout counts from there).
  void BeginRecord();
  void EndRecord();
  // The executor, around an NCCL record or its NCCL bookkeeping elsewhere.
  std::unique_lock<std::mutex> Lock() { return std::unique_lock(mu_); }
  // The thread ending the session, before it joins the executor. Stops the watch's thread first.
  int AbortNow(const char* why);

 private:
  void Watch();
  // Stops the watch's thread and waits for it.
  void Stop();

  const std::chrono::milliseconds timeout_;
  const std::function<int(const char*)> abort_half_entered_;
  std::mutex mu_;  // the session's NCCL state; see above
  // What the watch's thread reads of the executor's records, without a lock on the executor's
  // path: the serial of the record running (0 between records) and when it began.
  std::atomic<bool> armed_{false};
  std::atomic<uint64_t> record_{0};
  std::atomic<int64_t> began_ns_{0};
  uint64_t records_ = 0;  // the executor's
  std::mutex stop_mu_;    // stop_ and thread_
  std::condition_variable stop_cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace phos::runtime
