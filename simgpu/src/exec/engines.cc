#include "exec/engines.h"

#include <pthread.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <optional>

#include "exec/executor.h"
#include "exec/fault_guard.h"
#include "phos/base/log.h"

namespace phos::sim {
namespace {

// A copy engine is DMA hardware: on a GPU, nothing the host runs takes its time. Its thread here
// shares the host's cores with the compute workers, the daemon and the function processes, and a
// copy its memcpy finishes late holds up the modelled link (a host-bound op). So it asks for a
// higher priority than theirs, which needs CAP_SYS_NICE; without it, it keeps the default.
constexpr int kCopyEngineNice = -10;

void PreferCopyEngine(Engine kind) {
  if (kind != Engine::kCopyH2D && kind != Engine::kCopyD2H) return;
  if (setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), kCopyEngineNice) != 0) {
    PHOS_LOG(Debug, "simgpu", "{} copy engine keeps its priority: {}", EngineName(kind), std::strerror(errno));
  }
}

void NameThread(const std::string& name) {
  // Linux limits thread names to 15 characters.
  pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
}

uint64_t Ns(WallClock::duration d) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count());
}

void CountHostBound(Executor& executor, Engine kind, WallClock::duration real, WallClock::duration modelled) {
  ExecCounters::PerEngine& counters = executor.counters().engine(kind);
  const uint64_t total = counters.host_bound_ops.fetch_add(1, std::memory_order_relaxed) + 1;
  static log::RateLimiter limiter;
  if (log::Enabled(log::Level::Info, "simgpu") && limiter.Admit(std::chrono::seconds(10))) {
    PHOS_LOG(Info, "simgpu",
             "device {}: {} op host-bound: its work took {:.3f} ms, modelled {:.3f} ms (time scale {}); "
             "{} host-bound ops so far",
             executor.ordinal(), EngineName(kind), std::chrono::duration<double, std::milli>(real).count(),
             std::chrono::duration<double, std::milli>(modelled).count(), executor.clock().time_scale(),
             total);
  }
}

void CountRun(Executor& executor, Engine kind, const Op& op, WallClock::duration held) {
  ExecCounters::PerEngine& counters = executor.counters().engine(kind);
  counters.ops.fetch_add(1, std::memory_order_relaxed);
  counters.bytes.fetch_add(op.bytes, std::memory_order_relaxed);
  counters.busy_wall_ns.fetch_add(Ns(held), std::memory_order_relaxed);
}

// Runs an op's work. Exceptions stop here (none may cross into the C ABI or kill an engine
// thread): the op fails with CUDA_ERROR_UNKNOWN.
template <typename Fn>
CUresult Invoke(Fn&& fn, Executor& executor, Engine kind) {
  try {
    return fn();
  } catch (const std::exception& e) {
    PHOS_LOG(Error, "simgpu", "device {}: {} op threw: {}", executor.ordinal(), EngineName(kind), e.what());
  } catch (...) {
    PHOS_LOG(Error, "simgpu", "device {}: {} op threw a non-standard exception", executor.ordinal(),
             EngineName(kind));
  }
  return CUDA_ERROR_UNKNOWN;
}

// Device work that touches unmapped or protected memory fails like a GPU access would.
CUresult CheckFault(const FaultReport& fault, CUresult result, Executor& executor, Engine kind) {
  if (!fault.faulted) return result;
  static log::RateLimiter limiter;
  if (limiter.Admit(std::chrono::seconds(1))) {
    PHOS_LOG(Warn, "simgpu", "device {}: {} op faulted at address {:#x} (signal {}): illegal address",
             executor.ordinal(), EngineName(kind), fault.address, fault.signal);
  }
  return CUDA_ERROR_ILLEGAL_ADDRESS;
}

GuardSite SiteOf(const Op& op, Executor& executor, Engine kind) {
  return GuardSite{executor.ordinal(), op.what != nullptr ? op.what : EngineName(kind),
                   &executor.counters().guard_faults};
}

}  // namespace

// ---- Pacer -------------------------------------------------------------------------------------

Pacer::Pacer(std::string thread_name) : thread_name_(std::move(thread_name)) {
  thread_ = std::thread([this] { Loop(); });
}

Pacer::~Pacer() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Pacer::Schedule(WallClock::time_point when, TaskPtr task, CUresult result) {
  {
    std::lock_guard lock(mu_);
    entries_.push(Entry{when, next_order_++, std::move(task), result});
  }
  cv_.notify_one();
}

void Pacer::Loop() {
  NameThread(thread_name_);
  std::unique_lock lock(mu_);
  while (true) {
    if (entries_.empty()) {
      if (stop_) return;
      cv_.wait(lock);
      continue;
    }
    const WallClock::time_point when = entries_.top().when;
    if (!stop_ && WallClock::now() < when) {
      cv_.wait_until(lock, when);
      continue;
    }
    Entry entry = entries_.top();
    entries_.pop();
    lock.unlock();
    CompleteTask(std::move(entry.task), entry.result, entry.when);
    lock.lock();
  }
}

// ---- SerialEngine ------------------------------------------------------------------------------

SerialEngine::SerialEngine(Executor& executor, Engine kind, std::string thread_name, bool guard_faults)
    : executor_(executor), kind_(kind), guard_faults_(guard_faults), thread_name_(std::move(thread_name)) {
  thread_ = std::thread([this] { Loop(); });
}

SerialEngine::~SerialEngine() {
  Close();
  Join();
}

void SerialEngine::Join() {
  if (thread_.joinable()) thread_.join();
}

void SerialEngine::Loop() {
  NameThread(thread_name_);
  PreferCopyEngine(kind_);
  std::optional<AltSignalStack> alt_stack;
  if (guard_faults_) alt_stack.emplace();
  TaskPtr task;
  while (queue_.Pop(&task)) Run(std::move(task));
}

void SerialEngine::Run(TaskPtr task) {
  if (task->context().sticky_error() != CUDA_SUCCESS) {
    executor_.CountDropped(kind_);
    WallClock::time_point at = task->ready_at();
    CompleteTask(std::move(task), CUDA_SUCCESS, at);
    return;
  }
  const Op& op = task->op();
  const WallClock::time_point real_start = WallClock::now();
  // On the device timeline the op starts when it was ready and the engine was free, which this
  // thread reaches a little later (wake-up latency, timer slack). Starting from there keeps a
  // stream of back-to-back copies at the modelled rate; the lag allowed is bounded so that an
  // engine held up by the host does not pretend to have run in the past.
  const WallClock::time_point start =
      std::clamp(std::max(task->ready_at(), last_end_), real_start - kMaxStartLag, real_start);
  const WallClock::duration cost = executor_.clock().ToWall(op.cost_seconds);
  const WallClock::time_point modelled_end = start + cost;
  CUresult result = CUDA_SUCCESS;
  if (op.work != nullptr) {
    if (guard_faults_) {
      const GuardSite site = SiteOf(op, executor_, kind_);
      const FaultReport fault = FaultGuard::Run([&] { result = Invoke(op.work, executor_, kind_); }, &site);
      result = CheckFault(fault, result, executor_, kind_);
    } else {
      result = Invoke(op.work, executor_, kind_);
    }
  }
  const WallClock::time_point real_end = WallClock::now();
  WallClock::time_point end = modelled_end;
  if (op.work != nullptr && real_end - real_start > cost) {
    // The host's work was slower than the modelled device: the op ends when the work did.
    CountHostBound(executor_, kind_, real_end - real_start, cost);
    end = real_end;
  } else if (real_end < modelled_end) {
    std::this_thread::sleep_until(modelled_end);
  }
  // Otherwise the thread is late (preempted, or catching up after a backdated start): the op
  // still ends at its modelled end on the device timeline.
  last_end_ = end;
  CountRun(executor_, kind_, op, end - start);
  CompleteTask(std::move(task), result, end);
}

// ---- ComputePool -------------------------------------------------------------------------------

ComputePool::ComputePool(Executor& executor, int workers, Pacer& pacer, std::string thread_prefix)
    : executor_(executor),
      pacer_(pacer),
      workers_(static_cast<uint32_t>(workers)),
      thread_prefix_(std::move(thread_prefix)) {
  threads_.reserve(workers_);
  for (uint32_t i = 0; i < workers_; ++i) threads_.emplace_back([this, i] { Loop(static_cast<int>(i)); });
}

ComputePool::~ComputePool() {
  Close();
  Join();
}

void ComputePool::Join() {
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
}

bool ComputePool::Submit(const TaskPtr& task) {
  std::vector<Chunk> chunks;
  if (task->kernel()) {
    const uint64_t blocks = task->op().blocks;
    const uint64_t n = std::min<uint64_t>(blocks, workers_);
    if (n == 0) {
      // A grid without blocks runs nothing but still takes its launch overhead.
      chunks.push_back({task, 0, 0});
    } else {
      const uint64_t base = blocks / n;
      const uint64_t extra = blocks % n;
      uint64_t first = 0;
      for (uint64_t i = 0; i < n; ++i) {
        const uint64_t size = base + (i < extra ? 1 : 0);
        chunks.push_back({task, first, first + size});
        first += size;
      }
    }
  } else {
    chunks.push_back({task, 0, 0});
  }
  task->chunk_count = static_cast<uint32_t>(chunks.size());
  task->chunks_left.store(task->chunk_count);
  // Lane 0 is the greatest priority, served first.
  return queue_.PushAll(chunks, static_cast<size_t>(task->stream().priority - kGreatestStreamPriority));
}

void ComputePool::Loop(int index) {
  NameThread(thread_prefix_ + std::to_string(index));
  AltSignalStack alt_stack;
  Chunk chunk;
  while (queue_.Pop(&chunk)) {
    RunChunk(chunk);
    chunk = Chunk{};
  }
}

void ComputePool::RunChunk(const Chunk& chunk) {
  Task& task = *chunk.task;
  int64_t not_started = 0;
  task.started_ns.compare_exchange_strong(not_started, WallNowNs());
  CUresult result = CUDA_SUCCESS;
  if (task.context().sticky_error() != CUDA_SUCCESS) {
    task.chunks_skipped.fetch_add(1);
  } else {
    result = RunGuarded(task, chunk.first, chunk.end);
  }
  if (result != CUDA_SUCCESS) {
    int expected = CUDA_SUCCESS;
    task.first_error.compare_exchange_strong(expected, result);
  }
  if (task.chunks_left.fetch_sub(1) == 1) Finish(chunk.task);
}

CUresult ComputePool::RunGuarded(Task& task, uint64_t first, uint64_t end) {
  const Op& op = task.op();
  if (task.kernel()) {
    if (first == end) return CUDA_SUCCESS;
    return executor_.kernel_timeout_ns() > 0 ? RunWatched(task, first, end) : RunBlocks(task, first, end);
  }
  if (op.work == nullptr) return CUDA_SUCCESS;
  CUresult result = CUDA_SUCCESS;
  const GuardSite site = SiteOf(op, executor_, Engine::kCompute);
  const FaultReport fault = FaultGuard::Run([&] { result = Invoke(op.work, executor_, Engine::kCompute); }, &site);
  if (fault.faulted) task.faulted.store(true);
  return CheckFault(fault, result, executor_, Engine::kCompute);
}

CUresult ComputePool::RunBlocks(Task& task, uint64_t first, uint64_t end) {
  const Op& op = task.op();
  CUresult result = CUDA_SUCCESS;
  const GuardSite site = SiteOf(op, executor_, Engine::kCompute);
  const FaultReport fault = FaultGuard::Run(
      [&] { result = Invoke([&] { return op.run_blocks(first, end); }, executor_, Engine::kCompute); }, &site);
  if (fault.faulted) task.faulted.store(true);
  return CheckFault(fault, result, executor_, Engine::kCompute);
}

CUresult ComputePool::RunWatched(Task& task, uint64_t first, uint64_t end) {
  // Timed from this chunk's start: a chunk that waited in the queue behind other work is not
  // charged for the wait.
  const int64_t chunk_start = executor_.WatchdogNowNs();
  const int64_t timeout = executor_.kernel_timeout_ns();
  // A slice grows while it takes under this, so that the checks cost next to nothing, and one
  // whose calls carry a fixed cost of their own (an operand's re-check) grows too.
  const int64_t short_slice = std::max(kWatchdogSliceNs, timeout / 16);
  uint64_t slice = 1;
  for (uint64_t at = first; at < end;) {
    // Another chunk of the kernel, or other work of the context, failed: the rest is not run.
    if (task.first_error.load() != CUDA_SUCCESS || task.context().sticky_error() != CUDA_SUCCESS)
      return CUDA_SUCCESS;
    const int64_t slice_start = executor_.WatchdogNowNs();
    if (slice_start - chunk_start > timeout) {
      PHOS_LOG_EVERY_SEC(Warn, "simgpu", 1,
                         "device {}: {} ran past the {:.3f} s watchdog with {} of its blocks left: launch timeout",
                         executor_.ordinal(), SiteOf(task.op(), executor_, Engine::kCompute).what,
                         static_cast<double>(timeout) / 1e9, end - at);
      return CUDA_ERROR_LAUNCH_TIMEOUT;
    }
    const uint64_t stop = at + std::min(slice, end - at);
    if (CUresult r = RunBlocks(task, at, stop); r != CUDA_SUCCESS) return r;
    at = stop;
    if (executor_.WatchdogNowNs() - slice_start < short_slice) slice = std::min(slice * 2, end - first);
  }
  return CUDA_SUCCESS;
}

void ComputePool::Finish(TaskPtr task) {
  const WallClock::time_point now = WallClock::now();
  if (task->chunks_skipped.load() == task->chunk_count) {
    executor_.CountDropped(Engine::kCompute);
    WallClock::time_point at = task->ready_at();
    CompleteTask(std::move(task), CUDA_SUCCESS, at);
    return;
  }
  const Op& op = task->op();
  const CUresult result = static_cast<CUresult>(task->first_error.load());
  const WallClock::time_point real_start{WallClock::duration(task->started_ns.load())};
  // As on the copy engines: the op starts on the device timeline when it was ready, within a
  // bounded lag of when a worker picked it up.
  const WallClock::time_point start = std::clamp(task->ready_at(), real_start - kMaxStartLag, real_start);
  const WallClock::time_point modelled_end = start + executor_.clock().ToWall(op.cost_seconds);
  ExecCounters& counters = executor_.counters();
  if (task->kernel()) {
    counters.kernels_run.fetch_add(1, std::memory_order_relaxed);
    counters.kernel_wall_ns.fetch_add(Ns(now - start), std::memory_order_relaxed);
    if (task->faulted.load()) counters.kernel_faults.fetch_add(1, std::memory_order_relaxed);
  } else if (op.work != nullptr && now - real_start > modelled_end - start) {
    CountHostBound(executor_, Engine::kCompute, now - real_start, modelled_end - start);
  }
  CountRun(executor_, Engine::kCompute, op, std::max(now, modelled_end) - start);
  if (now < modelled_end) {
    pacer_.Schedule(modelled_end, std::move(task), result);
  } else {
    CompleteTask(std::move(task), result, now);
  }
}

// ---- MemOpEngine -------------------------------------------------------------------------------

MemOpEngine::MemOpEngine(Executor& executor, std::string thread_name)
    : executor_(executor), thread_name_(std::move(thread_name)) {
  thread_ = std::thread([this] { Loop(); });
}

MemOpEngine::~MemOpEngine() {
  Close();
  Join();
}

bool MemOpEngine::Submit(const TaskPtr& task) {
  {
    std::lock_guard lock(mu_);
    if (closed_) return false;
    incoming_.push_back(task);
  }
  cv_.notify_one();
  return true;
}

void MemOpEngine::Close() {
  {
    std::lock_guard lock(mu_);
    closed_ = true;
  }
  cv_.notify_one();
}

void MemOpEngine::Join() {
  if (thread_.joinable()) thread_.join();
}

void MemOpEngine::Loop() {
  NameThread(thread_name_);
  AltSignalStack alt_stack;
  bool closing = false;
  while (!closing) {
    {
      std::unique_lock lock(mu_);
      auto news = [this] { return closed_ || !incoming_.empty(); };
      if (waiting_.empty()) {
        cv_.wait(lock, news);
      } else {
        cv_.wait_for(lock, kMemOpPollInterval, news);
      }
      for (TaskPtr& task : incoming_) waiting_.push_back(std::move(task));
      incoming_.clear();
      closing = closed_;
    }
    // A write may satisfy a wait polled before it: poll again as long as something completes.
    for (bool progress = true; progress;) {
      progress = false;
      for (auto it = waiting_.begin(); it != waiting_.end();) {
        if (Poll(*it)) {
          it = waiting_.erase(it);
          progress = true;
        } else {
          ++it;
        }
      }
    }
  }
  // Nobody is left to satisfy a wait: it fails rather than holding its stream forever.
  for (TaskPtr& task : waiting_) CompleteTask(std::move(task), CUDA_ERROR_DEINITIALIZED);
  waiting_.clear();
}

bool MemOpEngine::Poll(TaskPtr& task) {
  if (task->context().sticky_error() != CUDA_SUCCESS) {
    executor_.CountDropped(Engine::kMemOp);
    WallClock::time_point at = task->ready_at();
    CompleteTask(std::move(task), CUDA_SUCCESS, at);
    return true;
  }
  const Op& op = task->op();
  CUresult result = CUDA_SUCCESS;
  if (op.work != nullptr) {
    const GuardSite site = SiteOf(op, executor_, Engine::kMemOp);
    const FaultReport fault = FaultGuard::Run([&] { result = Invoke(op.work, executor_, Engine::kMemOp); }, &site);
    result = CheckFault(fault, result, executor_, Engine::kMemOp);
  }
  if (result == CUDA_ERROR_NOT_READY) return false;
  CountRun(executor_, Engine::kMemOp, op, WallClock::duration::zero());
  CompleteTask(std::move(task), result);
  return true;
}

}  // namespace phos::sim
