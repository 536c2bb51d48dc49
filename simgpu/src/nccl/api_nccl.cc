// The exported NCCL entry points, under the names nccl.h declares (NCCL 2.28 ABI; the pnccl*
// profiling aliases are not provided). Compiled into libphos-simgpu.so itself (see
// CMakeLists.txt): symbols of the static phos-simgpu-nccl library are hidden there.
#include <fmt/format.h>
#include <nccl.h>

#include <set>
#include <vector>

#include "api/driver.h"
#include "nccl/collective.h"
#include "nccl/comm.h"
#include "nccl/errors.h"

using namespace phos::sim;
using namespace phos::sim::nccl;

namespace {

// A failure inside ncclGroupStart/End is also what ncclGroupEnd returns.
ncclResult_t Record(ncclResult_t result) {
  GroupState& group = ThreadGroup();
  if (result != ncclSuccess && group.depth > 0 && group.first_error == ncclSuccess)
    group.first_error = result;
  return result;
}

// Inside a group the join completes at ncclGroupEnd; outside, now.
ncclResult_t CompleteOrDefer(PendingJoin join) {
  GroupState& group = ThreadGroup();
  if (group.depth > 0) {
    group.joins.push_back(std::move(join));
    return ncclSuccess;
  }
  return CommRegistry::Get().FinishJoins({std::move(join)});
}

}  // namespace

extern "C" {

PHOS_SIM_API ncclResult_t ncclGetVersion(int* version) {
  if (version == nullptr) return Fail(ncclInvalidArgument, "ncclGetVersion: version is NULL");
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

PHOS_SIM_API const char* ncclGetErrorString(ncclResult_t result) {
  return ResultString(result);
}

PHOS_SIM_API const char* ncclGetLastError(ncclComm_t /*comm*/) {
  return LastError();
}

PHOS_SIM_API ncclResult_t ncclGetUniqueId(ncclUniqueId* unique_id) {
  return CommRegistry::Get().NewUniqueId(unique_id);
}

PHOS_SIM_API ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId comm_id, int rank) {
  PendingJoin join;
  if (ncclResult_t r = CommRegistry::Get().JoinInit(comm_id, nranks, rank, comm, &join); r != ncclSuccess) {
    return Record(r);
  }
  return Record(CompleteOrDefer(std::move(join)));
}

PHOS_SIM_API ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  if (comms == nullptr) return Record(Fail(ncclInvalidArgument, "ncclCommInitAll: comm is NULL"));
  if (ndev < 1) return Record(Fail(ncclInvalidArgument, fmt::format("ncclCommInitAll: ndev {} < 1", ndev)));
  Driver* d = nullptr;
  if (RequireDriver(&d) != CUDA_SUCCESS) {
    return Record(Fail(ncclUnhandledCudaError, "ncclCommInitAll: cuInit not called"));
  }
  std::vector<int> devices(ndev);
  std::set<int> seen;
  for (int i = 0; i < ndev; ++i) {
    devices[i] = devlist == nullptr ? i : devlist[i];
    if (d->device(devices[i]) == nullptr) {
      return Record(
          Fail(ncclInvalidArgument, fmt::format("ncclCommInitAll: device {} does not exist ({} devices)",
                                                devices[i], d->device_count())));
    }
    if (!seen.insert(devices[i]).second) {
      return Record(
          Fail(ncclInvalidUsage, fmt::format("ncclCommInitAll: device {} listed twice", devices[i])));
    }
  }
  return Record(CommRegistry::Get().InitAll(devices, comms));
}

PHOS_SIM_API ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                                        ncclConfig_t* /*config*/) {
  std::shared_ptr<RankComm> parent;
  if (ncclResult_t r = CommRegistry::Get().Find(comm, &parent); r != ncclSuccess) return Record(r);
  PendingJoin join;
  if (ncclResult_t r = CommRegistry::Get().JoinSplit(parent, color, key, newcomm, &join); r != ncclSuccess) {
    return Record(r);
  }
  return Record(CompleteOrDefer(std::move(join)));
}

PHOS_SIM_API ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  return CommRegistry::Get().Destroy(comm);
}

PHOS_SIM_API ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  std::shared_ptr<RankComm> rank;
  if (ncclResult_t r = CommRegistry::Get().FindAny(comm, &rank); r != ncclSuccess) return r;
  if (count == nullptr) return Fail(ncclInvalidArgument, "ncclCommCount: count is NULL");
  *count = rank->group->nranks;
  return ncclSuccess;
}

PHOS_SIM_API ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  std::shared_ptr<RankComm> found;
  if (ncclResult_t r = CommRegistry::Get().FindAny(comm, &found); r != ncclSuccess) return r;
  if (rank == nullptr) return Fail(ncclInvalidArgument, "ncclCommUserRank: rank is NULL");
  *rank = found->rank;
  return ncclSuccess;
}

PHOS_SIM_API ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  std::shared_ptr<RankComm> found;
  if (ncclResult_t r = CommRegistry::Get().FindAny(comm, &found); r != ncclSuccess) return r;
  if (device == nullptr) return Fail(ncclInvalidArgument, "ncclCommCuDevice: device is NULL");
  *device = found->device();
  return ncclSuccess;
}

// A failed context is the asynchronous error NCCL would report (its kernels would not run).
PHOS_SIM_API ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async_error) {
  std::shared_ptr<RankComm> found;
  if (ncclResult_t r = CommRegistry::Get().FindAny(comm, &found); r != ncclSuccess) return r;
  if (async_error == nullptr) return Fail(ncclInvalidArgument, "ncclCommGetAsyncError: asyncError is NULL");
  *async_error =
      found->binding.ctx->exec->sticky_error() == CUDA_SUCCESS ? ncclSuccess : ncclUnhandledCudaError;
  return ncclSuccess;
}

PHOS_SIM_API ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                        ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                        cudaStream_t stream) {
  return Record(EnqueueCollective(
      comm, {CollectiveKind::kAllReduce, sendbuff, recvbuff, count, datatype, op, /*root=*/0}, stream));
}

PHOS_SIM_API ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                                        ncclDataType_t datatype, int root, ncclComm_t comm,
                                        cudaStream_t stream) {
  return Record(EnqueueCollective(
      comm, {CollectiveKind::kBroadcast, sendbuff, recvbuff, count, datatype, ncclSum, root}, stream));
}

PHOS_SIM_API ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                        ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  return Record(EnqueueCollective(
      comm, {CollectiveKind::kAllGather, sendbuff, recvbuff, sendcount, datatype, ncclSum, /*root=*/0},
      stream));
}

PHOS_SIM_API ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                            ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                            cudaStream_t stream) {
  return Record(EnqueueCollective(
      comm, {CollectiveKind::kReduceScatter, sendbuff, recvbuff, recvcount, datatype, op, /*root=*/0},
      stream));
}

PHOS_SIM_API ncclResult_t ncclGroupStart() {
  ++ThreadGroup().depth;
  return ncclSuccess;
}

// Collectives inside a group were enqueued by their calls already (they never block); what the
// group defers is the wait of ncclCommInitRank and ncclCommSplit for their other ranks, so that
// one thread can create all ranks of a communicator.
PHOS_SIM_API ncclResult_t ncclGroupEnd() {
  GroupState& group = ThreadGroup();
  if (group.depth == 0) return Fail(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  if (--group.depth > 0) return ncclSuccess;
  std::vector<PendingJoin> joins = std::move(group.joins);
  group.joins.clear();
  ncclResult_t result = group.first_error;
  group.first_error = ncclSuccess;
  if (ncclResult_t r = CommRegistry::Get().FinishJoins(joins); result == ncclSuccess) result = r;
  return result;
}

}  // extern "C"
