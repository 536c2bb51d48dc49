#include "exec/executor.h"

#include <algorithm>
#include <string>
#include <thread>

#include "exec/engines.h"
#include "exec/exec_context.h"
#include "exec/fault_guard.h"
#include "phos/base/log.h"

namespace phos::sim {
namespace {

int ResolveWorkers(int requested) {
  if (requested > 0) return requested;
  // At least 2, so that kernels of two streams can overlap even on a one-core host.
  return std::max(2, static_cast<int>(std::thread::hardware_concurrency()));
}

}  // namespace

const char* EngineName(Engine engine) {
  switch (engine) {
    case Engine::kCopyH2D:
      return "h2d";
    case Engine::kCopyD2H:
      return "d2h";
    case Engine::kCompute:
      return "compute";
    case Engine::kHost:
      return "host";
    case Engine::kMemOp:
      return "memop";
  }
  return "invalid";
}

Executor::Executor(int ordinal, const ModelClock& clock, ExecutorOptions options)
    : ordinal_(ordinal),
      clock_(clock),
      compute_workers_(ResolveWorkers(options.compute_workers)),
      kernel_timeout_ns_(options.kernel_timeout_seconds > 0
                             ? std::max<int64_t>(1, static_cast<int64_t>(options.kernel_timeout_seconds * 1e9))
                             : 0),
      watchdog_clock_(options.watchdog_clock ? std::move(options.watchdog_clock) : WallNowNs) {
  FaultGuard::Install();
  const std::string prefix = "phos" + std::to_string(ordinal) + "-";
  pacer_ = std::make_unique<Pacer>(prefix + "pacer");
  h2d_ = std::make_unique<SerialEngine>(*this, Engine::kCopyH2D, prefix + "h2d", true);
  d2h_ = std::make_unique<SerialEngine>(*this, Engine::kCopyD2H, prefix + "d2h", true);
  host_ = std::make_unique<SerialEngine>(*this, Engine::kHost, prefix + "host", false);
  compute_ = std::make_unique<ComputePool>(*this, compute_workers_, *pacer_, prefix + "cmp");
  memops_ = std::make_unique<MemOpEngine>(*this, prefix + "memop");
  PHOS_LOG(Debug, "simgpu", "device {}: executor started, {} compute workers, time scale {}", ordinal_,
           compute_workers_, clock_.time_scale());
}

Executor::~Executor() {
  // Close every engine before joining any: a draining engine may hand work to another one, which
  // then refuses it (the task completes with CUDA_ERROR_DEINITIALIZED) instead of blocking.
  compute_->Close();
  h2d_->Close();
  d2h_->Close();
  host_->Close();
  memops_->Close();
  compute_->Join();
  h2d_->Join();
  d2h_->Join();
  host_->Join();
  memops_->Join();
  pacer_.reset();
}

std::unique_ptr<ExecContext> Executor::CreateContext() {
  return std::unique_ptr<ExecContext>(new ExecContext(*this));
}

void Executor::Dispatch(std::shared_ptr<Task> task) {
  bool queued = false;
  switch (task->op().engine) {
    case Engine::kCopyH2D:
      queued = h2d_->Submit(task);
      break;
    case Engine::kCopyD2H:
      queued = d2h_->Submit(task);
      break;
    case Engine::kHost:
      queued = host_->Submit(task);
      break;
    case Engine::kCompute:
      queued = compute_->Submit(task);
      break;
    case Engine::kMemOp:
      queued = memops_->Submit(task);
      break;
    default:
      PHOS_LOG(Error, "simgpu", "device {}: op for unknown engine {}", ordinal_,
               static_cast<int>(task->op().engine));
      CompleteTask(std::move(task), CUDA_ERROR_INVALID_VALUE);
      return;
  }
  if (!queued) CompleteTask(std::move(task), CUDA_ERROR_DEINITIALIZED);
}

void Executor::CountDropped(Engine engine) {
  if (static_cast<size_t>(engine) >= counters_.engines.size()) return;
  counters_.engine(engine).dropped_ops.fetch_add(1, std::memory_order_relaxed);
}

ExecutorStats Executor::stats() const {
  ExecutorStats s;
  for (size_t i = 0; i < counters_.engines.size(); ++i) {
    const ExecCounters::PerEngine& c = counters_.engines[i];
    s.engines[i].ops = c.ops.load(std::memory_order_relaxed);
    s.engines[i].host_bound_ops = c.host_bound_ops.load(std::memory_order_relaxed);
    s.engines[i].bytes = c.bytes.load(std::memory_order_relaxed);
    s.engines[i].dropped_ops = c.dropped_ops.load(std::memory_order_relaxed);
    s.engines[i].busy_wall_ns = c.busy_wall_ns.load(std::memory_order_relaxed);
  }
  s.kernels_run = counters_.kernels_run.load(std::memory_order_relaxed);
  s.kernel_faults = counters_.kernel_faults.load(std::memory_order_relaxed);
  s.guard_faults = counters_.guard_faults.load(std::memory_order_relaxed);
  s.kernel_wall_ns = counters_.kernel_wall_ns.load(std::memory_order_relaxed);
  return s;
}

}  // namespace phos::sim
