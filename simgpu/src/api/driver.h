// The simulated driver's process-wide state: devices, contexts, the handle tables, and the
// per-thread context stack. The exported cu* functions (api_*.cc) are thin: they check their
// arguments and handles here and hand the work to memory/, exec/ and module/. The driver is the
// DeviceAccess of the cuBLAS and NCCL parts, whose registries it creates at cuInit; their
// exports (api_blas.cc, api_nccl.cc) reach them through it.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <cuda.h>

#include "api/config.h"
#include "device/device_access.h"
#include "device/handles.h"
#include "exec/event.h"
#include "exec/exec_context.h"
#include "exec/executor.h"
#include "exec/model_clock.h"
#include "exec/stream.h"
#include "memory/device_memory.h"
#include "memory/host_memory.h"
#include "module/module.h"

// The exported entry points: C linkage (from cuda.h's declarations) and default visibility.
#define PHOS_SIM_API __attribute__((visibility("default")))

namespace phos::sim {
namespace blas {
class HandleRegistry;
class LtRegistry;
}
namespace nccl {
class CommRegistry;
}

struct Context;
struct GraphObject;
struct GraphNodeObject;
struct GraphExecObject;

struct Device {
  int ordinal = 0;
  const DeviceProfile* profile = nullptr;
  uint64_t capacity = 0;
  CUuuid uuid{};
  std::unique_ptr<Executor> executor;
  // What phosSimGetStats reports is the executor's counters minus this baseline, which
  // phosSimResetStats moves.
  std::mutex stats_mu;
  ExecutorStats stats_base;
  uint64_t released_unzeroed_base = 0;  // DeviceMemory::ReleasedUnzeroedBytes at the last reset

  // The primary context (cuDevicePrimaryCtxRetain): created on first retain, destroyed when the
  // last retain is released.
  std::mutex primary_mu;
  CUcontext primary = nullptr;
  int primary_refs = 0;
};

struct Context {
  uint64_t id = 0;  // owner id for memory; never reused
  Device* device = nullptr;
  bool primary = false;
  std::unique_ptr<ExecContext> exec;
  // The peer contexts (by id) whose memory this one enabled access to (cuCtxEnablePeerAccess).
  // Access is not gated on it: every device's memory lies in one address space.
  std::mutex peers_mu;
  std::unordered_set<uint64_t> peers;
};

struct StreamObject {
  std::shared_ptr<Context> ctx;
  std::shared_ptr<Stream> stream;
};

struct EventObject {
  std::shared_ptr<Context> ctx;
  std::shared_ptr<Event> event;
};

struct ModuleObject {
  std::shared_ptr<Context> ctx;
  std::shared_ptr<Module> module;
  // Handles issued by cuModuleGetFunction (the same kernel always gets the same handle); they
  // die with the module.
  std::unordered_map<const Kernel*, CUfunction> functions;
  std::mutex mu;
};

struct FunctionObject {
  std::shared_ptr<Context> ctx;
  std::shared_ptr<Module> module;  // keeps the kernel's code loaded while launches are pending
  const Kernel* kernel = nullptr;
  CUmodule module_handle = nullptr;
  // What cuFuncSetAttribute / cuFuncSetCacheConfig set on this handle (one per kernel and
  // context, as CUDA's): read by launches and cuFuncGetAttribute on other threads.
  std::atomic<int> max_dynamic_shared_bytes{0};  // the device's per-block shared memory at first
  std::atomic<int> shared_memory_carveout{-1};   // CU_SHAREDMEM_CARVEOUT_DEFAULT
  std::atomic<int> cluster_scheduling_policy{0};  // CU_CLUSTER_SCHEDULING_POLICY_DEFAULT
  std::atomic<int> cache_config{0};               // CU_FUNC_CACHE_PREFER_NONE
};


class Driver final : public DeviceAccess {
 public:
  ~Driver() override;

  // Initialises the driver once per process (cuInit). Later calls return the first result.
  static CUresult Init();
  // The driver, or nullptr before a successful Init().
  static Driver* Get() { return instance_.load(std::memory_order_acquire); }
  // Sets the configuration used by Init(); fails once Init() has run.
  static CUresult Configure(const SimConfig& config);

  const SimConfig& config() const { return config_; }
  ModelClock& clock() { return *clock_; }
  DeviceMemory& memory() { return *memory_; }
  HostMemory& host_memory() { return *host_memory_; }
  int device_count() const override { return static_cast<int>(devices_.size()); }
  // nullptr for an invalid ordinal.
  Device* device(CUdevice ordinal) {
    return ordinal >= 0 && ordinal < device_count() ? devices_[ordinal].get() : nullptr;
  }

  // Creates a context on `device` (paying the profile's creation cost) and returns its handle.
  CUresult CreateContext(Device* device, bool primary, CUcontext* out);
  // Waits for the context's work, frees everything it owns and removes its handle.
  CUresult DestroyContext(CUcontext handle);
  // cuDevicePrimaryCtxRetain: creates the device's primary context on the first retain.
  CUresult RetainPrimary(Device* device, CUcontext* out);
  // cuDevicePrimaryCtxRelease: the last release destroys the primary context (its memory and
  // resources are freed). CUDA_ERROR_INVALID_CONTEXT when it is not retained.
  CUresult ReleasePrimary(Device* device);

  // The calling thread's current context (RequireContext, once the driver is known).
  CUresult FindCurrentContext(std::shared_ptr<Context>* ctx) const;
  // The stream `handle` names in the context whose execution state is `exec` (ResolveStream).
  CUresult FindStream(const ExecContext& exec, CUstream handle, std::shared_ptr<Stream>* out) const;

  // The process's cuBLAS handles and NCCL communicators, over this driver.
  blas::HandleRegistry& blas_handles() { return *blas_handles_; }
  blas::LtRegistry& blas_lt() { return *blas_lt_; }
  nccl::CommRegistry& nccl_comms() { return *nccl_comms_; }

  // DeviceAccess, for the cuBLAS and NCCL parts.
  bool HasCurrentContext() const override;
  CUresult CurrentContext(ContextRef* out) override;
  bool IsLive(const ContextRef& ctx) const override;
  CUresult RetainPrimaryContext(int device, ContextRef* out) override;
  CUresult ReleasePrimaryContext(int device) override;
  CUresult ResolveStream(const ContextRef& ctx, CUstream handle, std::shared_ptr<Stream>* out) override;
  bool CheckRange(CUdeviceptr ptr, uint64_t bytes, Access needed, int* device) const override;
  void PayModelledCost(double device_seconds) override;

  HandleTable<Context, CUcontext, HandleKind::kContext> contexts;
  HandleTable<StreamObject, CUstream, HandleKind::kStream> streams;
  HandleTable<EventObject, CUevent, HandleKind::kEvent> events;
  HandleTable<ModuleObject, CUmodule, HandleKind::kModule> modules;
  HandleTable<FunctionObject, CUfunction, HandleKind::kFunction> functions;
  // CUDA graphs (api/graph.h): the structures behind these handles are guarded by graph_mu.
  std::mutex graph_mu;
  HandleTable<GraphObject, CUgraph, HandleKind::kGraph> graphs;
  HandleTable<GraphNodeObject, CUgraphNode, HandleKind::kGraphNode> graph_nodes;
  HandleTable<GraphExecObject, CUgraphExec, HandleKind::kGraphExec> graph_execs;

 private:
  Driver() = default;
  CUresult Start(const SimConfig& config);

  static std::atomic<Driver*> instance_;

  SimConfig config_;
  std::unique_ptr<ModelClock> clock_;
  std::unique_ptr<DeviceMemory> memory_;
  std::unique_ptr<HostMemory> host_memory_;
  std::vector<std::unique_ptr<Device>> devices_;
  std::atomic<uint64_t> next_context_id_{0};
  std::unique_ptr<blas::HandleRegistry> blas_handles_;
  std::unique_ptr<blas::LtRegistry> blas_lt_;
  std::unique_ptr<nccl::CommRegistry> nccl_comms_;
};

// ---- Per-call helpers used by every entry point ---------------------------------------------

// The driver, or CUDA_ERROR_NOT_INITIALIZED.
CUresult RequireDriver(Driver** out);

// The calling thread's current context: CUDA_ERROR_NOT_INITIALIZED before cuInit,
// CUDA_ERROR_INVALID_CONTEXT when none is current, CUDA_ERROR_CONTEXT_IS_DESTROYED when the
// current one was destroyed (on another thread), and the context's sticky error once a kernel
// failed in it.
CUresult RequireContext(Driver** driver, std::shared_ptr<Context>* ctx);

// The stream a call names, in the current context: 0 and CU_STREAM_LEGACY are the context's
// NULL stream. CUDA_ERROR_INVALID_HANDLE for a stream that is not live or belongs to another
// context.
CUresult ResolveStream(const std::shared_ptr<Context>& ctx, CUstream handle, std::shared_ptr<Stream>* out);

// The current context and the stream `handle` names in it (RequireContext, then ResolveStream).
CUresult RequireStream(CUstream handle, Driver** driver, std::shared_ptr<Context>* ctx,
                       std::shared_ptr<Stream>* stream);

// The per-thread context stack (cuCtxPushCurrent/PopCurrent/SetCurrent).
std::vector<CUcontext>& ThreadContextStack();

// cuModuleLoadData's last step on every path: the module's variables get their device memory
// on the context's device (zeroed), then the module gets its handle.
CUresult RegisterModule(Driver& d, const std::shared_ptr<Context>& ctx, std::shared_ptr<Module> module,
                        CUmodule* out);
// What cuLaunchKernel and cuLaunchKernelEx share once their arguments are known: the launch
// shape against the device, the dynamic shared memory against the function's limit, the
// stream, the arguments captured; then the kernel is enqueued.
CUresult EnqueueLaunch(const std::shared_ptr<Context>& ctx, FunctionObject& function,
                       const LaunchGeometry& geometry, unsigned shared_bytes, CUstream stream, void** kernel_params,
                       void** extra);

}  // namespace phos::sim
