// The communicator pool (docs/design.md D11, the NCCL part; docs/ctxpool.md): ready **device groups**. A
// group of size N is one pooled context (with its cuBLAS handle) on each of node devices 0..N-1
// and an NCCL communicator over exactly those contexts, rank d on device d — created with
// ncclCommInitRank per rank inside one ncclGroupStart/End, each rank's context current, because a
// communicator is bound to the context current when it is created (so on a GPU, so in simgpu).
// A session that declared N GPUs leases a whole group at open: its contexts ARE the group's, so
// the function's streams and the communicator share contexts and collectives run on them.
//
// Creating a group costs N contexts plus a communicator (tens of seconds on the a100 profile at
// time scale 10), so groups are created by a background refill, never on the lessee's thread:
// Open() returns at once, a Lease() that finds nothing ready waits for the refill. On return a
// group is scrubbed (every context as the context pool scrubs one) before anyone else leases it;
// a group that fails its scrub is destroyed.
//
//   auto pool = CommunicatorPool::Open({}, driver);            // refill starts: one node-wide group
//   Result<DeviceGroupLease> group = (*pool)->Lease(2);        // contexts and ranks on devices 0, 1
//   ... group->context(1), group->comm(1), group->tenant(1).allocations.push_back(...) ...
//   // the lease's destructor returns the group; the pool scrubs it in the background
#pragma once

#include <cublas_v2.h>
#include <cuda.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "phos/base/status.h"
#include "phos/ctxpool/context_pool.h"
#include "phos/driver/driver_table.h"

namespace phos::ctxpool {

struct CommunicatorPoolOptions {
  // Size of the groups the refill starts making at Open (devices 0..size-1); other sizes join
  // when first leased. 0: every device of the node. Default: 0.
  int initial_group_size = 0;
  // Groups of each size in use that the refill keeps ready (groups being scrubbed or created
  // count). Default: 1.
  size_t min_ready = 1;
  // Most groups of one size held at once (ready, leased, scrubbing, being created). Must be >= 1
  // and >= min_ready. Default: 2.
  size_t max_groups = 2;
  // How long a Lease() waits for a group to become ready before failing kUnavailable. Default: 120 s
  // (a100 profile at time scale 10: ~36 s for a 2-device group).
  std::chrono::milliseconds lease_timeout{120000};
  // After a failed creation the refill tries again this much later. Default: 1 s.
  std::chrono::milliseconds refill_retry_interval{1000};
  // Zero every tenant allocation before freeing it on scrub (PoolOptions::zero_on_scrub). Default: true.
  bool zero_on_scrub = true;
};

namespace detail {
struct PooledGroup {
  std::vector<PooledContext> contexts;  // index = node device
  std::vector<ncclComm_t> comms;        // rank d in contexts[d]
  uint64_t id = 0;                      // the pool's serial number, for logs and tests
};
// Keyed by group size; a group's tenant is one TenantResources per device.
using GroupCore = PoolCore<PooledGroup, std::vector<TenantResources>>;
}  // namespace detail

// One leased device group. Move-only; destroying it (or Return()) gives the group back, to be
// scrubbed. The lessee records in tenant(d) what it made in context d (allocations, streams,
// events, modules, extra cuBLAS handles); communicators it split from comm(d) it destroys itself
// before returning. A lease may outlive its pool: the group is then destroyed on return.
class DeviceGroupLease {
 public:
  DeviceGroupLease(DeviceGroupLease&& other) noexcept;
  DeviceGroupLease& operator=(DeviceGroupLease&& other) noexcept;
  DeviceGroupLease(const DeviceGroupLease&) = delete;
  DeviceGroupLease& operator=(const DeviceGroupLease&) = delete;
  ~DeviceGroupLease();

  int size() const { return static_cast<int>(group_.contexts.size()); }
  // Context of node device `device` (0 <= device < size()); current on no thread.
  CUcontext context(int device) const { return group_.contexts[device].context; }
  cublasHandle_t blas_handle(int device) const { return group_.contexts[device].blas; }
  // Rank `rank` of the group's communicator, bound to context(rank).
  ncclComm_t comm(int rank) const { return group_.comms[rank]; }
  TenantResources& tenant(int device) { return tenants_[device]; }
  // The lessee aborted the group's communicator (ncclCommAbort on every rank: its tenant left a
  // collective half-entered): the group is destroyed on return instead of scrubbed, and the
  // refill makes a new one.
  void ForgetCommunicator() { std::fill(group_.comms.begin(), group_.comms.end(), nullptr); }
  uint64_t group_id() const { return group_.id; }
  void Return();
  bool valid() const { return core_ != nullptr; }

 private:
  friend class CommunicatorPool;
  DeviceGroupLease(std::shared_ptr<detail::GroupCore> core, detail::PooledGroup group);

  std::shared_ptr<detail::GroupCore> core_;
  detail::PooledGroup group_;
  std::vector<TenantResources> tenants_;
};

class CommunicatorPool {
 public:
  // Checks the options and starts the refill and scrub threads; does not wait for any group.
  // FailedPrecondition when the driver table has no NCCL; InvalidArgument for bad options or an
  // initial group larger than the node. The pool holds `driver` as long as it uses it (past
  // its own end while a creation it left running finishes, and past every lease). The pool's
  // metrics (phos_devgroup_*, summed over group sizes) are registered in `registry`, or in a
  // registry of the pool's own when it is null.
  static Result<std::unique_ptr<CommunicatorPool>> Open(
      const CommunicatorPoolOptions& options, std::shared_ptr<driver::DriverTable> driver,
      std::shared_ptr<prometheus::Registry> registry = nullptr);
  // Stops the threads and destroys every group held; leases out destroy theirs when returned.
  ~CommunicatorPool();
  CommunicatorPool(const CommunicatorPool&) = delete;
  CommunicatorPool& operator=(const CommunicatorPool&) = delete;

  // A ready group of `size` devices (node devices 0..size-1). When none is ready the refill is
  // asked for one and the call waits, up to lease_timeout (kUnavailable, with the last creation
  // error if there was one) or until `cancel` becomes true (kUnavailable too; polled every 50 ms).
  // InvalidArgument for a size outside 1..node devices. Thread-safe.
  Result<DeviceGroupLease> Lease(int size, const std::atomic<bool>* cancel = nullptr);

  // Blocks until nothing is being scrubbed or created and the refill has nothing to do, or until
  // `timeout`. False on timeout. For tests and benchmarks.
  bool WaitIdle(std::chrono::milliseconds timeout);
  // Blocks until `done` holds for Stats(), re-checked whenever the figures change, or until
  // `timeout`. False on timeout.
  bool WaitUntil(const std::function<bool(const PoolStats&)>& done, std::chrono::milliseconds timeout);
  // Read back from the pool's registered metrics, summed over group sizes.
  PoolStats Stats() const;
  int node_devices() const { return node_devices_; }

 private:
  CommunicatorPool(int node_devices, std::shared_ptr<detail::GroupCore> core);
  const int node_devices_;
  std::shared_ptr<detail::GroupCore> core_;
};

// "ncclInvalidArgument (4)": an ncclResult_t for messages (the driver table has no
// ncclGetErrorString, which simgpu does not export).
std::string NcclResultName(ncclResult_t result);

}  // namespace phos::ctxpool
