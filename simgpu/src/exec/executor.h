// The execution side of one simulated device: its engines, their threads, and their statistics.
//
// Per device: an H2D copy engine and a D2H copy engine (one thread each, FIFO, one op at a time,
// so two H2D copies serialize while an H2D and a D2H overlap each other and kernels), a compute
// engine (a pool of workers running kernels, memsets and device-to-device copies; kernels of
// different streams run concurrently, each split into contiguous block ranges across workers),
// a host-function engine (one thread, cuLaunchHostFunc) and a stream-memory-operation engine (one
// thread, cuStreamWaitValue32 / cuStreamWriteValue32). A pacer thread holds compute ops that
// finished early until their modelled end, so that no worker sleeps.
//
// Pacing: an op started at wall time t ends no earlier than t + clock.ToWall(op.cost_seconds).
// An op whose real work took longer is host-bound: counted (and logged, rate-limited), because a
// benchmark in which many ops are host-bound measures this host rather than the modelled device.
// Kernels are the exception: their cost is the launch overhead and their real run time is
// whatever the CPU takes, so they are not counted as host-bound; their CPU time is in
// kernel_wall_ns instead.
//
// Device work (copy engines and compute) runs under FaultGuard: an access to unmapped or PROT_NONE
// memory fails the op with CUDA_ERROR_ILLEGAL_ADDRESS instead of crashing, unless the memory is a
// guarded range that a guard handler makes resident (exec/access_guard.h). Host functions run
// unguarded: a fault there is a crash of the application's own code.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>

#include "exec/model_clock.h"
#include "exec/op.h"

namespace phos::sim {

class ComputePool;
class ExecContext;
class MemOpEngine;
class Pacer;
class SerialEngine;
class Task;

struct ExecutorOptions {
  // Worker threads of the compute engine. 0: std::thread::hardware_concurrency(), at least 2.
  // Default: 0.
  int compute_workers = 0;
  // Seconds a kernel (an op with blocks) may run before the compute engine stops it between two of
  // its blocks with CUDA_ERROR_LAUNCH_TIMEOUT (SimConfig::kernel_timeout_seconds; timed per block
  // range, ComputePool::RunWatched). 0: no watchdog.
  double kernel_timeout_seconds = 0;
  // The watchdog's clock, nanoseconds: the steady clock when empty; tests give one they advance.
  std::function<int64_t()> watchdog_clock;
};

struct EngineStats {
  uint64_t ops = 0;             // ops run (and paced)
  uint64_t host_bound_ops = 0;  // ops whose real work outlasted their modelled duration
  uint64_t bytes = 0;           // Op::bytes of the ops run
  uint64_t dropped_ops = 0;     // ops not run because their context had a sticky error
  uint64_t busy_wall_ns = 0;    // wall time ops held the engine, pacing included, summed over ops
};

struct ExecutorStats {
  std::array<EngineStats, kEngineCount> engines{};  // indexed by Engine
  uint64_t kernels_run = 0;
  uint64_t kernel_faults = 0;   // kernels that touched unmapped or protected memory
  uint64_t guard_faults = 0;    // touches of guarded ranges served by the guard handler (AccessGuard)
  uint64_t kernel_wall_ns = 0;  // wall time kernels took, first block range start to last end

  const EngineStats& engine(Engine e) const { return engines[static_cast<size_t>(e)]; }
};

// Counters behind ExecutorStats, updated by the engines (internal to exec).
struct ExecCounters {
  struct PerEngine {
    std::atomic<uint64_t> ops{0};
    std::atomic<uint64_t> host_bound_ops{0};
    std::atomic<uint64_t> bytes{0};
    std::atomic<uint64_t> dropped_ops{0};
    std::atomic<uint64_t> busy_wall_ns{0};
  };
  std::array<PerEngine, kEngineCount> engines;
  std::atomic<uint64_t> kernels_run{0};
  std::atomic<uint64_t> kernel_faults{0};
  std::atomic<uint64_t> guard_faults{0};
  std::atomic<uint64_t> kernel_wall_ns{0};

  PerEngine& engine(Engine e) { return engines[static_cast<size_t>(e)]; }
};

class Executor {
 public:
  // Starts the device's threads and installs the fault handler (FaultGuard). `clock` must
  // outlive the executor.
  Executor(int ordinal, const ModelClock& clock, ExecutorOptions options = {});
  // Joins every thread. All ExecContexts of this executor must be destroyed first (their
  // destructors wait for their work); work still queued then is run, and anything it would start
  // on a stopped engine completes with CUDA_ERROR_DEINITIALIZED.
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // The execution state of a new CUDA context on this device: its NULL stream and its streams.
  std::unique_ptr<ExecContext> CreateContext();

  int ordinal() const { return ordinal_; }
  const ModelClock& clock() const { return clock_; }
  int compute_workers() const { return compute_workers_; }
  // 0 when there is no watchdog.
  int64_t kernel_timeout_ns() const { return kernel_timeout_ns_; }
  int64_t WatchdogNowNs() const { return watchdog_clock_(); }
  // A snapshot of the counters; callable at any time from any thread.
  ExecutorStats stats() const;

  // Internal to exec: hands a ready task to its engine.
  void Dispatch(std::shared_ptr<Task> task);
  void CountDropped(Engine engine);
  ExecCounters& counters() { return counters_; }

 private:
  const int ordinal_;
  const ModelClock& clock_;
  const int compute_workers_;
  const int64_t kernel_timeout_ns_;
  const std::function<int64_t()> watchdog_clock_;
  ExecCounters counters_;
  std::unique_ptr<Pacer> pacer_;
  std::unique_ptr<SerialEngine> h2d_;
  std::unique_ptr<SerialEngine> d2h_;
  std::unique_ptr<SerialEngine> host_;
  std::unique_ptr<ComputePool> compute_;
  std::unique_ptr<MemOpEngine> memops_;
};

}  // namespace phos::sim
