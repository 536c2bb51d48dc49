#include "phos/ctxpool/communicator_pool.h"

#include <algorithm>
#include <set>
#include <utility>

#include <fmt/core.h>

#include "phos/base/log.h"

namespace phos::ctxpool {
namespace {

Status NcclStatus(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return Status::Ok();
  return Status::DeviceError(fmt::format("{}: {}", what, NcclResultName(r)));
}

}  // namespace

std::string NcclResultName(ncclResult_t result) {
  static constexpr const char* kNames[] = {"ncclSuccess",         "ncclUnhandledCudaError", "ncclSystemError",
                                           "ncclInternalError",   "ncclInvalidArgument",    "ncclInvalidUsage",
                                           "ncclRemoteError",     "ncclInProgress"};
  int v = static_cast<int>(result);
  const char* name = v >= 0 && v < ncclNumResults ? kNames[v] : "unknown ncclResult_t";
  return fmt::format("{} ({})", name, v);
}

CommunicatorLease::CommunicatorLease(CommunicatorPool* pool, std::vector<int> devices, std::vector<ncclComm_t> comms)
    : pool_(pool), devices_(std::move(devices)), comms_(std::move(comms)) {}

CommunicatorLease::CommunicatorLease(CommunicatorLease&& other) noexcept
    : pool_(std::exchange(other.pool_, nullptr)), devices_(std::move(other.devices_)), comms_(std::move(other.comms_)) {}

CommunicatorLease& CommunicatorLease::operator=(CommunicatorLease&& other) noexcept {
  if (this != &other) {
    Return();
    pool_ = std::exchange(other.pool_, nullptr);
    devices_ = std::move(other.devices_);
    comms_ = std::move(other.comms_);
  }
  return *this;
}

CommunicatorLease::~CommunicatorLease() { Return(); }

void CommunicatorLease::Return() {
  if (pool_ == nullptr) return;
  std::exchange(pool_, nullptr)->Give(std::move(devices_), std::move(comms_));
  devices_.clear();
  comms_.clear();
}

CommunicatorPool::CommunicatorPool(runtime::DriverTable* driver, CommunicatorPoolOptions options)
    : driver_(driver), options_(std::move(options)) {}

Result<std::unique_ptr<CommunicatorPool>> CommunicatorPool::Open(const CommunicatorPoolOptions& options,
                                                                 runtime::DriverTable* driver) {
  if (driver == nullptr) return Status::InvalidArgument("communicator pool needs a driver table");
  if (!driver->has_nccl()) return Status::FailedPrecondition("communicator pool: the driver table has no NCCL");
  PHOS_CU_RETURN_IF_ERROR(driver->error_text(), driver->cuInit(0));
  int count = 0;
  PHOS_CU_RETURN_IF_ERROR(driver->error_text(), driver->cuDeviceGetCount(&count));
  std::unique_ptr<CommunicatorPool> pool(new CommunicatorPool(driver, options));
  pool->devices_ = options.devices;
  if (pool->devices_.empty()) {
    for (int d = 0; d < count; ++d) pool->devices_.push_back(d);
  }
  std::set<int> seen;
  for (int d : pool->devices_) {
    if (d < 0 || d >= count || !seen.insert(d).second) {
      return Status::InvalidArgument(
          fmt::format("communicator pool: device {} is {} (the node has {} devices)", d, d < 0 || d >= count ? "not on this node" : "listed twice", count));
    }
  }
  if (pool->devices_.empty()) return Status::FailedPrecondition("communicator pool: the node has no device");
  pool->node_.resize(pool->devices_.size());
  PHOS_RETURN_IF_ERROR(NcclStatus(driver->ncclCommInitAll(pool->node_.data(), static_cast<int>(pool->node_.size()),
                                                          pool->devices_.data()),
                                  "ncclCommInitAll (node communicator)"));
  PHOS_LOG(Info, "ctxpool", "node communicator over {} device(s) ready", pool->devices_.size());
  return pool;
}

CommunicatorPool::~CommunicatorPool() {
  std::lock_guard lock(mu_);
  if (stats_.leased != 0) PHOS_LOG(Error, "ctxpool", "communicator pool destroyed with {} group(s) still leased", stats_.leased);
  for (auto& [devices, groups] : idle_) {
    for (auto& group : groups) DestroyGroup(group);
  }
  DestroyGroup(node_);
}

void CommunicatorPool::DestroyGroup(std::vector<ncclComm_t>& comms) {
  for (ncclComm_t c : comms) {
    if (c == nullptr) continue;
    if (ncclResult_t r = driver_->ncclCommDestroy(c); r != ncclSuccess) {
      PHOS_LOG(Warn, "ctxpool", "ncclCommDestroy: {}", NcclResultName(r));
    }
  }
  comms.clear();
}

Result<std::vector<ncclComm_t>> CommunicatorPool::SplitLocked(const std::vector<int>& devices) {
  // ncclCommSplit is collective over the parent: every rank of the node communicator takes part,
  // those outside the group with NCCL_SPLIT_NOCOLOR; key = position in `devices` orders the ranks.
  std::vector<ncclComm_t> out(node_.size(), nullptr);
  ncclResult_t r = driver_->ncclGroupStart();
  for (size_t rank = 0; r == ncclSuccess && rank < node_.size(); ++rank) {
    auto it = std::find(devices.begin(), devices.end(), devices_[rank]);
    int color = it == devices.end() ? NCCL_SPLIT_NOCOLOR : 0;
    int key = it == devices.end() ? 0 : static_cast<int>(it - devices.begin());
    r = driver_->ncclCommSplit(node_[rank], color, key, &out[rank], nullptr);
  }
  ncclResult_t end = driver_->ncclGroupEnd();
  if (r == ncclSuccess) r = end;
  std::vector<ncclComm_t> group(devices.size(), nullptr);
  for (size_t rank = 0; rank < node_.size(); ++rank) {
    auto it = std::find(devices.begin(), devices.end(), devices_[rank]);
    if (it != devices.end()) group[it - devices.begin()] = out[rank];
  }
  if (r != ncclSuccess) {
    DestroyGroup(group);
    return NcclStatus(r, "ncclCommSplit of the node communicator");
  }
  ++stats_.splits;
  return group;
}

Result<CommunicatorLease> CommunicatorPool::Lease(const std::vector<int>& devices) {
  std::set<int> seen;
  for (int d : devices) {
    if (std::find(devices_.begin(), devices_.end(), d) == devices_.end() || !seen.insert(d).second) {
      return Status::InvalidArgument(fmt::format("communicator group: device {} is {}", d,
                                                 seen.count(d) != 0 ? "listed twice" : "not in the node communicator"));
    }
  }
  if (devices.empty()) return Status::InvalidArgument("communicator group: no device");
  std::lock_guard lock(mu_);
  std::vector<ncclComm_t> comms;
  if (auto it = idle_.find(devices); it != idle_.end() && !it->second.empty()) {
    comms = std::move(it->second.back());
    it->second.pop_back();
    --stats_.idle;
    ++stats_.hits;
  } else {
    PHOS_ASSIGN_OR_RETURN(comms, SplitLocked(devices));
  }
  ++stats_.leases;
  ++stats_.leased;
  return CommunicatorLease(this, devices, std::move(comms));
}

void CommunicatorPool::Give(std::vector<int> devices, std::vector<ncclComm_t> comms) {
  std::lock_guard lock(mu_);
  --stats_.leased;
  auto& kept = idle_[devices];
  if (kept.size() >= options_.max_idle_per_group) {
    DestroyGroup(comms);
    return;
  }
  kept.push_back(std::move(comms));
  ++stats_.idle;
}

CommunicatorPoolStats CommunicatorPool::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

}  // namespace phos::ctxpool
