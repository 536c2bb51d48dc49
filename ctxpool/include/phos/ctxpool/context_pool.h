// The execution-context pool (docs/design.md D11, docs/ctxpool.md): per device, CUDA contexts created
// ahead of time, each with a cuBLAS handle, leased to a tenant in microseconds and scrubbed on a
// background thread when the tenant returns them, before anyone else can lease them.
//
//   auto pool = ContextPool::Open({.device = 0, .min_ready = 2, .max_contexts = 8}, driver);
//   Result<ContextLease> lease = (*pool)->Lease();   // no driver call when a context is ready
//   ... lease->context(), lease->blas_handle() ...
//   lease->tenant().allocations.push_back({ptr, bytes});  // what the scrub must undo
//   // the lease's destructor returns the context; the pool scrubs it in the background
//
// Communicators (the NCCL part of D11) have their own pool beside this one
// (phos/ctxpool/communicator_pool.h); contexts do not depend on it.
#pragma once

#include <cublas_v2.h>
#include <cuda.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "phos/base/status.h"
#include "phos/ctxpool/pool_stats.h"
#include "phos/driver/driver_table.h"

namespace prometheus {
class Registry;
}  // namespace prometheus

namespace phos::ctxpool {

// Loaded modules by the content hash of their image (store::ChunkId bytes).
using ModulesByHash = std::unordered_map<std::string, CUmodule>;

struct PoolOptions {
  // Device ordinal the pool's contexts are created on. Default: 0.
  int device = 0;
  // Contexts the background refill keeps ready to lease (contexts being scrubbed count, as they
  // will be ready soon). 0 disables refill: every context is then created by a missed Lease().
  // Default: 2.
  size_t min_ready = 2;
  // Most contexts the pool holds at once: ready, leased, being scrubbed or being created. At the
  // maximum, a Lease() that finds nothing ready waits for a returned context. Must be >= 1 and
  // >= min_ready. Default: 8.
  size_t max_contexts = 8;
  // How long a Lease() waits at the maximum before failing with kUnavailable. Default: 30 s.
  std::chrono::milliseconds lease_timeout{30000};
  // After a failed creation (out of memory, driver error) the refill tries again this much later;
  // meanwhile the pool serves with what it has. Default: 1 s.
  std::chrono::milliseconds refill_retry_interval{1000};
  // Zero every tenant allocation (cuMemsetD8Async) before freeing it on scrub. NVIDIA's driver
  // may hand freed memory to the next allocation of the same process unzeroed, so this is what
  // keeps one tenant's bytes from the next. simgpu decommits freed linear memory (its pages go
  // back to the kernel, the next allocation gets fresh zero pages; the scrub test checks it with
  // this off), so there it only costs time. Default: true.
  bool zero_on_scrub = true;
};

// What a tenant created in a leased context, so that the scrub can undo it. The API server's
// session fills it from its own buffer table and handle maps when it ends.
struct TenantResources {
  struct Allocation {
    CUdeviceptr base = 0;
    size_t bytes = 0;
  };
  std::vector<Allocation> allocations;
  // VMM memory of an instance address space (the runtime's va_allocator.h): each mapping is zeroed
  // like an allocation, then unmapped and its physical allocation released; the address ranges
  // are freed after every mapping is gone.
  struct Mapping {
    CUdeviceptr base = 0;
    size_t bytes = 0;
    CUmemGenericAllocationHandle handle = 0;
  };
  std::vector<Mapping> mappings;
  // Physical memory of an instance range that was unmapped as its session ended, so that the range
  // could be mapped again at once (a migration's target restores in it): zeroed through an address
  // of the scrub's own, then released.
  struct Unmapped {
    CUmemGenericAllocationHandle handle = 0;
    size_t bytes = 0;
    int device = 0;
  };
  std::vector<Unmapped> unmapped;
  struct AddressRange {
    CUdeviceptr base = 0;
    size_t bytes = 0;
  };
  std::vector<AddressRange> address_ranges;
  std::vector<CUstream> streams;
  std::vector<CUevent> events;
  std::vector<CUmodule> modules;
  // cuBLAS handles the tenant created beyond the lease's own (which is reset, not destroyed).
  std::vector<cublasHandle_t> blas_handles;
};

namespace detail {
template <typename Item, typename Tenant>
class PoolCore;
struct PooledContext {
  CUcontext context = nullptr;
  cublasHandle_t blas = nullptr;
  uint64_t id = 0;  // the pool's own serial number, for logs and tests
  // Modules an earlier tenant left loaded for the next lease of the same owner (a function), so
  // that its restore does not load them again (docs/design.md D11). A lease for any other owner
  // finds them unloaded; destroying the context unloads them.
  std::string modules_owner;
  ModulesByHash kept_modules;
};
using ContextCore = PoolCore<PooledContext, TenantResources>;
}  // namespace detail

// One leased context. Move-only; destroying it (or Return()) gives the context back to its pool,
// which scrubs it. A lease may outlive its ContextPool: the context is then destroyed on return.
class ContextLease {
 public:
  ContextLease(ContextLease&& other) noexcept;
  ContextLease& operator=(ContextLease&& other) noexcept;
  ContextLease(const ContextLease&) = delete;
  ContextLease& operator=(const ContextLease&) = delete;
  ~ContextLease();

  // The leased context; not current on any thread (the lessee calls cuCtxSetCurrent).
  CUcontext context() const { return pooled_.context; }
  // A cuBLAS handle of that context, stream NULL and default math mode.
  cublasHandle_t blas_handle() const { return pooled_.blas; }
  int device() const { return device_; }
  // The pool's serial number of the context (stable across its leases).
  uint64_t context_id() const { return pooled_.id; }
  // What the tenant made in the context; everything in it is destroyed by the scrub.
  TenantResources& tenant() { return tenant_; }
  // Whom the lease was made for (ContextPool::Lease's `modules_owner`; empty: nobody's).
  const std::string& modules_owner() const { return modules_owner_; }
  // The modules an earlier lease of the same owner kept loaded (KeepModules), moved out: the
  // lessee now holds them, to keep again or to hand to the scrub (tenant().modules).
  ModulesByHash TakeKeptModules();
  // Leaves `modules`, loaded in this context by the tenant, loaded after the return for the next
  // lease made for `owner`, instead of unloading them in the scrub. A module kept is code a
  // function sent; no other owner's lease ever sees it (it is unloaded before such a lease is
  // handed out). With an empty owner, or for an image already kept, the module goes to the scrub.
  void KeepModules(const std::string& owner, ModulesByHash modules);
  // How long the Lease() that made this lease waited for a context: zero when one was ready
  // (phosd reports it as a request's pool-wait stage).
  std::chrono::nanoseconds waited() const { return waited_; }
  // Returns the context now; the lease is empty afterwards.
  void Return();
  bool valid() const { return pooled_.context != nullptr; }

 private:
  friend class ContextPool;
  ContextLease(std::shared_ptr<detail::ContextCore> core, detail::PooledContext pooled, int device,
               std::chrono::nanoseconds waited, std::string modules_owner);

  std::shared_ptr<detail::ContextCore> core_;
  detail::PooledContext pooled_;
  int device_ = 0;
  std::chrono::nanoseconds waited_{0};
  std::string modules_owner_;
  TenantResources tenant_;
};

class ContextPool {
 public:
  // Initialises the driver (cuInit), checks the options and starts the background refill and
  // scrub threads. Open does not wait for the first contexts. The pool holds `driver` as long as
  // it uses it: past its own end while a creation it left running finishes, and past every lease. The pool's metrics (phos_ctxpool_*, labelled device="N") are registered in
  // `registry`, or in a registry of the pool's own when it is null. One pool per device and
  // registry: two pools of one device in one registry would share their series, and each would
  // overwrite the other's held-now gauges.
  static Result<std::unique_ptr<ContextPool>> Open(const PoolOptions& options,
                                                   std::shared_ptr<driver::DriverTable> driver,
                                                   std::shared_ptr<prometheus::Registry> registry = nullptr);
  // Stops refill and scrubbing and destroys every context the pool holds; leases still out
  // destroy theirs when returned.
  ~ContextPool();
  ContextPool(const ContextPool&) = delete;
  ContextPool& operator=(const ContextPool&) = delete;

  // A ready context, without any driver call. When none is ready (a miss): a context on its way
  // (being scrubbed, or created by the refill) that no earlier miss counts on is waited for, as
  // long as that takes; otherwise, below max_contexts, one is created synchronously on the
  // caller's thread (it costs what creation costs), and at the maximum the call waits for a
  // returned context, up to lease_timeout. `cancel` (may be null) ends a wait once it is true.
  // `modules_owner` (a function's name; empty: nobody) picks among ready contexts: first one
  // holding modules kept for that owner, then one holding none; another owner's kept modules are
  // unloaded on the caller's thread before the lease is handed out.
  Result<ContextLease> Lease(const std::atomic<bool>* cancel = nullptr,
                             const std::string& modules_owner = "");
  // A context created now on the caller's thread, whatever is ready and whatever max_contexts says
  // (counted as a miss): what a process without the pool would pay. For the restore modes that
  // measure it (no-pool, stop-the-world, cold-boot). Returned and scrubbed like any lease.
  Result<ContextLease> LeaseFresh();

  // Blocks until nothing is being scrubbed or created and the refill has reached min_ready (or
  // cannot: maximum reached, or a creation failed), or until `timeout`. False on timeout. For
  // tests, benchmarks and orderly shutdown.
  bool WaitIdle(std::chrono::milliseconds timeout);
  // Blocks until `done` holds for Stats(), re-checked whenever the figures change, or until
  // `timeout`. False on timeout. For tests: wait for a count (a miss that waits, a refill that
  // recovered) instead of for time.
  bool WaitUntil(const std::function<bool(const PoolStats&)>& done, std::chrono::milliseconds timeout);

  // Contexts that may be leased at once soon: phosd's instance manager sets it to the instance
  // ranges free for restores, so that the pool's capacity follows what is deployed. The refill
  // keeps max(min_ready, demand) contexts ready or on their way, up to max_contexts (a demand
  // above that is logged). Default: 0.
  void SetDemand(size_t contexts);

  // Read back from the pool's registered metrics.
  PoolStats Stats() const;
  const PoolOptions& options() const { return options_; }

 private:
  ContextPool(const PoolOptions& options, std::shared_ptr<driver::DriverTable> driver,
              std::shared_ptr<detail::ContextCore> core);
  const PoolOptions options_;
  std::shared_ptr<driver::DriverTable> driver_;
  std::shared_ptr<detail::ContextCore> core_;
};

}  // namespace phos::ctxpool
