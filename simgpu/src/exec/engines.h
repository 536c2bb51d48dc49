// The threads behind an Executor (internal to exec): the pacer, the single-threaded engines
// (copy H2D, copy D2H, host functions) and the compute pool.
#pragma once

#include <algorithm>
#include <array>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <queue>
#include <string>
#include <thread>
#include <vector>

#include "exec/task_graph.h"

namespace phos::sim {

// How far behind the moment an engine thread picks an op up the op may start on the device
// timeline (see SerialEngine::Run): the op was ready then, so the modelled device would have run
// it; the thread was late because of wake-up latency, timer slack or the host's scheduler (tens of
// milliseconds on a loaded two-core machine). The bound only keeps an engine held up by slow host
// work (counted as host-bound) from claiming to have run far in the past.
inline constexpr WallClock::duration kMaxStartLag = std::chrono::milliseconds(50);

class Executor;

// A FIFO shared by producer threads and engine threads, in `kLanes` lanes: Pop serves the lowest
// lane that holds an item, each lane in FIFO order.
template <typename T, size_t kLanes = 1>
class BlockingQueue {
 public:
  // False once closed (the item is not queued).
  bool Push(T item, size_t lane = 0) {
    bool wake = false;
    {
      std::lock_guard lock(mu_);
      if (closed_) return false;
      items_[lane].push_back(std::move(item));
      ++count_;
      wake = sleepers_ > 0;
    }
    // Waking costs a system call; a busy consumer finds the item without one.
    if (wake) cv_.notify_one();
    return true;
  }
  bool PushAll(std::vector<T>& items, size_t lane = 0) {
    size_t wake = 0;
    {
      std::lock_guard lock(mu_);
      if (closed_) return false;
      for (T& item : items) items_[lane].push_back(std::move(item));
      count_ += items.size();
      wake = std::min(items.size(), sleepers_);
    }
    if (wake == 1) {
      cv_.notify_one();
    } else if (wake > 1) {
      cv_.notify_all();
    }
    return true;
  }
  // Blocks for the next item. False when closed and drained.
  bool Pop(T* item) {
    std::unique_lock lock(mu_);
    while (!closed_ && count_ == 0) {
      ++sleepers_;
      cv_.wait(lock);
      --sleepers_;
    }
    if (count_ == 0) return false;
    for (std::deque<T>& lane : items_) {
      if (lane.empty()) continue;
      *item = std::move(lane.front());
      lane.pop_front();
      --count_;
      return true;
    }
    return false;
  }
  void Close() {
    {
      std::lock_guard lock(mu_);
      closed_ = true;
    }
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::array<std::deque<T>, kLanes> items_;
  size_t count_ = 0;     // items in all lanes
  size_t sleepers_ = 0;  // consumers blocked in Pop
  bool closed_ = false;
};

// Completes tasks at their modelled end. Compute ops that finished early wait here rather than
// on a worker, so the pool stays free for other kernels.
class Pacer {
 public:
  explicit Pacer(std::string thread_name);
  // Completes whatever is still waiting at once, then joins.
  ~Pacer();
  void Schedule(WallClock::time_point when, TaskPtr task, CUresult result);

 private:
  struct Entry {
    WallClock::time_point when;
    uint64_t order;  // FIFO among equal deadlines
    TaskPtr task;
    CUresult result;
    bool operator>(const Entry& o) const { return when != o.when ? when > o.when : order > o.order; }
  };
  void Loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> entries_;
  uint64_t next_order_ = 0;
  bool stop_ = false;
  std::string thread_name_;
  std::thread thread_;
};

// One thread, FIFO, one op at a time; the thread itself sleeps out each op's modelled duration,
// which is what makes two copies in the same direction serialize.
class SerialEngine {
 public:
  // `guard_faults`: run work under FaultGuard (device engines) or not (host functions).
  SerialEngine(Executor& executor, Engine kind, std::string thread_name, bool guard_faults);
  ~SerialEngine();
  bool Submit(const TaskPtr& task) { return queue_.Push(task); }
  // Stops taking ops; the thread drains its queue and exits. Join() waits for it.
  void Close() { queue_.Close(); }
  void Join();

 private:
  void Loop();
  void Run(TaskPtr task);

  Executor& executor_;
  const Engine kind_;
  const bool guard_faults_;
  const std::string thread_name_;
  BlockingQueue<TaskPtr> queue_;
  WallClock::time_point last_end_{};  // device-timeline end of the last op; engine thread only
  std::thread thread_;
};

// The compute engine: a pool of workers sharing one queue of chunks, a FIFO per stream priority
// with the higher priorities served first (a chunk already running is never preempted: "priorities
// ... do not preempt already-running work", cuStreamCreateWithPriority). A kernel becomes one
// chunk per worker (contiguous block ranges); any other op is one chunk.
class ComputePool {
 public:
  // Threads are named thread_prefix + worker index.
  ComputePool(Executor& executor, int workers, Pacer& pacer, std::string thread_prefix);
  ~ComputePool();
  bool Submit(const TaskPtr& task);
  void Close() { queue_.Close(); }
  void Join();

 private:
  struct Chunk {
    TaskPtr task;
    uint64_t first = 0;
    uint64_t end = 0;
  };
  void Loop(int index);
  void RunChunk(const Chunk& chunk);
  CUresult RunGuarded(Task& task, uint64_t first, uint64_t end);
  // Blocks [first, end) of a kernel, in one call of its run_blocks.
  CUresult RunBlocks(Task& task, uint64_t first, uint64_t end);
  // With a watchdog (Executor::kernel_timeout_ns): blocks in slices, from one block, doubled while
  // a slice takes under kWatchdogSliceNs or a sixteenth of the timeout; between slices, past the
  // timeout counted from the chunk's start, the rest is not run and the chunk fails with
  // CUDA_ERROR_LAUNCH_TIMEOUT. A single block running longer is not interrupted.
  CUresult RunWatched(Task& task, uint64_t first, uint64_t end);
  static constexpr int64_t kWatchdogSliceNs = 10'000'000;
  // Called by the worker that finished an op's last chunk.
  void Finish(TaskPtr task);

  Executor& executor_;
  Pacer& pacer_;
  const uint32_t workers_;
  const std::string thread_prefix_;
  BlockingQueue<Chunk, kStreamPriorityLevels> queue_;
  std::vector<std::thread> threads_;
};

// Stream memory operations (Engine::kMemOp): one thread that runs writes as they come and keeps
// the waits whose condition does not hold yet, polling them (a GPU's front end polls the word
// likewise) every kMemOpPollInterval and at once after each write of its own. A pending wait
// holds up its stream only. Work runs under FaultGuard: a word that is no longer device memory
// fails the op with CUDA_ERROR_ILLEGAL_ADDRESS.
inline constexpr std::chrono::microseconds kMemOpPollInterval{100};

class MemOpEngine {
 public:
  MemOpEngine(Executor& executor, std::string thread_name);
  // Completes the waits still pending with CUDA_ERROR_DEINITIALIZED, then joins.
  ~MemOpEngine();
  bool Submit(const TaskPtr& task);
  void Close();
  void Join();

 private:
  void Loop();
  // Runs `task`'s work once; true when it completed (answered anything but CUDA_ERROR_NOT_READY).
  bool Poll(TaskPtr& task);

  Executor& executor_;
  const std::string thread_name_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<TaskPtr> incoming_;  // guarded by mu_
  bool closed_ = false;            // guarded by mu_
  std::vector<TaskPtr> waiting_;   // engine thread only
  std::thread thread_;
};

}  // namespace phos::sim
