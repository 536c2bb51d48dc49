// The communicator pool (BRIEF D11, the NCCL part): one NCCL communicator over the node's devices,
// created once at start (ncclCommInitAll through the driver table), and splits of it
// (ncclCommSplit) handed to sessions that ask for a group of devices. Creating a communicator
// costs as much as a context; a split of a live one is cheaper, and a returned split is kept for
// the next session asking for the same devices, so a function's ncclCommInitAll is served without
// creating anything.
//
//   auto pool = CommunicatorPool::Open({}, driver);            // node communicator over every device
//   Result<CommunicatorLease> lease = (*pool)->Lease({0, 1});  // rank i on device i of the list
//   ... lease->comm(0), lease->comm(1) ...
//   // the lease's destructor returns the group to the pool
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nccl.h>

#include "phos/base/status.h"
#include "phos/runtime/driver_table.h"

namespace phos::ctxpool {

struct CommunicatorPoolOptions {
  // Node devices the node communicator spans, rank i on devices[i]; each at most once. Empty:
  // every device the driver reports. Default: empty.
  std::vector<int> devices;
  // Returned groups kept per device list for later leases; more are destroyed. Default: 2.
  size_t max_idle_per_group = 2;
};

struct CommunicatorPoolStats {
  uint64_t leases = 0;  // successful Lease() calls
  uint64_t hits = 0;    // leases served by a kept group (no split)
  uint64_t splits = 0;  // groups created by ncclCommSplit
  size_t idle = 0;      // groups kept now
  size_t leased = 0;    // groups out now
};

class CommunicatorPool;

// A group of communicators: rank i is comm(i), on node device devices()[i]. Move-only; destroying
// it (or Return()) gives the group back. The caller must have no collective in flight on it
// (synchronise the streams first). Must not outlive its pool.
class CommunicatorLease {
 public:
  CommunicatorLease(CommunicatorLease&& other) noexcept;
  CommunicatorLease& operator=(CommunicatorLease&& other) noexcept;
  CommunicatorLease(const CommunicatorLease&) = delete;
  CommunicatorLease& operator=(const CommunicatorLease&) = delete;
  ~CommunicatorLease();

  int size() const { return static_cast<int>(comms_.size()); }
  ncclComm_t comm(int rank) const { return comms_[rank]; }
  const std::vector<int>& devices() const { return devices_; }
  void Return();
  bool valid() const { return pool_ != nullptr; }

 private:
  friend class CommunicatorPool;
  CommunicatorLease(CommunicatorPool* pool, std::vector<int> devices, std::vector<ncclComm_t> comms);

  CommunicatorPool* pool_ = nullptr;
  std::vector<int> devices_;
  std::vector<ncclComm_t> comms_;
};

class CommunicatorPool {
 public:
  // Creates the node communicator (ncclCommInitAll). FailedPrecondition when the driver table has
  // no NCCL; InvalidArgument for a device list with a duplicate or a device the node lacks.
  // `driver` must outlive the pool.
  static Result<std::unique_ptr<CommunicatorPool>> Open(const CommunicatorPoolOptions& options,
                                                        runtime::DriverTable* driver);
  // Destroys the kept groups and the node communicator. Every lease must have been returned.
  ~CommunicatorPool();
  CommunicatorPool(const CommunicatorPool&) = delete;
  CommunicatorPool& operator=(const CommunicatorPool&) = delete;

  // A group over `devices` (node ordinals, distinct, each in the node communicator), rank i on
  // devices[i]: a kept one, or a new split of the node communicator. Thread-safe. The calling
  // thread's current CUDA context may be changed (NCCL sets devices); callers restore their own.
  Result<CommunicatorLease> Lease(const std::vector<int>& devices);
  // The node communicator's devices, rank order.
  const std::vector<int>& devices() const { return devices_; }
  CommunicatorPoolStats stats() const;

 private:
  friend class CommunicatorLease;
  CommunicatorPool(runtime::DriverTable* driver, CommunicatorPoolOptions options);
  Result<std::vector<ncclComm_t>> SplitLocked(const std::vector<int>& devices);
  void Give(std::vector<int> devices, std::vector<ncclComm_t> comms);
  void DestroyGroup(std::vector<ncclComm_t>& comms);

  runtime::DriverTable* driver_;
  CommunicatorPoolOptions options_;
  std::vector<int> devices_;
  std::vector<ncclComm_t> node_;  // rank i on devices_[i]
  mutable std::mutex mu_;
  std::map<std::vector<int>, std::vector<std::vector<ncclComm_t>>> idle_;
  CommunicatorPoolStats stats_;
};

// "ncclInvalidArgument (4)": an ncclResult_t for messages (the driver table has no
// ncclGetErrorString, which simgpu does not export).
std::string NcclResultName(ncclResult_t result);

}  // namespace phos::ctxpool
