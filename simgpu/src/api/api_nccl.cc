// The exported NCCL entry points, under the names nccl.h declares (NCCL 2.28 ABI; the pnccl*
// profiling aliases are not provided), over the driver's communicator registry (nccl/comm.h).
// Before cuInit there is none: creating a communicator is ncclUnhandledCudaError, any use of one
// ncclInvalidArgument (no handle can be live).
#include <fmt/format.h>
#include <nccl.h>

#include <vector>

#include "api/driver.h"
#include "nccl/collective.h"
#include "nccl/comm.h"
#include "nccl/errors.h"
#include "nccl/p2p.h"
#include "nccl/red_op.h"

using namespace phos::sim;
using namespace phos::sim::nccl;

namespace {

CommRegistry* Comms() {
  Driver* d = Driver::Get();
  return d == nullptr ? nullptr : &d->nccl_comms();
}

ncclResult_t NotInitialized(const char* call) {
  return Fail(ncclUnhandledCudaError, fmt::format("{}: cuInit not called", call));
}

ncclResult_t NoCommunicator() {
  return Fail(ncclInvalidArgument, "comm is not a live communicator");
}

// A failure inside ncclGroupStart/End is also what ncclGroupEnd returns.
ncclResult_t Record(ncclResult_t result) {
  GroupState& group = ThreadGroup();
  if (result != ncclSuccess && group.depth > 0 && group.first_error == ncclSuccess)
    group.first_error = result;
  return result;
}

// Inside a group the join completes at ncclGroupEnd; outside, now.
ncclResult_t CompleteOrDefer(CommRegistry& comms, PendingJoin join) {
  GroupState& group = ThreadGroup();
  if (group.depth > 0) {
    group.joins.push_back(std::move(join));
    return ncclSuccess;
  }
  return comms.FinishJoins({std::move(join)});
}

// ncclCommCount and the other queries: the live rank `comm` names, whatever its context's state.
ncclResult_t FindAny(ncclComm_t comm, std::shared_ptr<RankComm>* out) {
  CommRegistry* comms = Comms();
  return comms == nullptr ? NoCommunicator() : comms->FindAny(comm, out);
}

ncclResult_t Enqueue(ncclComm_t comm, const CollectiveArgs& args, cudaStream_t stream) {
  CommRegistry* comms = Comms();
  return comms == nullptr ? NoCommunicator() : EnqueueCollective(*comms, comm, args, stream);
}

// Inside a group a send or receive is posted with the group's others at its ncclGroupEnd (so
// that they progress together); outside, at once.
ncclResult_t PointToPoint(ncclComm_t comm, const P2pArgs& args, cudaStream_t stream) {
  CommRegistry* comms = Comms();
  if (comms == nullptr) return NoCommunicator();
  PendingP2p op;
  if (ncclResult_t r = CheckP2p(*comms, comm, args, stream, &op); r != ncclSuccess) return r;
  GroupState& group = ThreadGroup();
  if (group.depth > 0) {
    group.p2p.push_back(std::move(op));
    return ncclSuccess;
  }
  return PostP2p(comms->device(), {std::move(op)});
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
  CommRegistry* comms = Comms();
  return comms == nullptr ? NotInitialized("ncclGetUniqueId") : comms->NewUniqueId(unique_id);
}

PHOS_SIM_API ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId comm_id, int rank) {
  CommRegistry* comms = Comms();
  if (comms == nullptr) return Record(NotInitialized("ncclCommInitRank"));
  PendingJoin join;
  if (ncclResult_t r = comms->JoinInit(comm_id, nranks, rank, comm, &join); r != ncclSuccess) {
    return Record(r);
  }
  return Record(CompleteOrDefer(*comms, std::move(join)));
}

PHOS_SIM_API ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  CommRegistry* registry = Comms();
  if (registry == nullptr) return Record(NotInitialized("ncclCommInitAll"));
  return Record(registry->InitAll(comms, ndev, devlist));
}

PHOS_SIM_API ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                                        ncclConfig_t* /*config*/) {
  CommRegistry* comms = Comms();
  if (comms == nullptr) return Record(NoCommunicator());
  std::shared_ptr<RankComm> parent;
  if (ncclResult_t r = comms->Find(comm, &parent); r != ncclSuccess) return Record(r);
  PendingJoin join;
  if (ncclResult_t r = comms->JoinSplit(parent, color, key, newcomm, &join); r != ncclSuccess) {
    return Record(r);
  }
  return Record(CompleteOrDefer(*comms, std::move(join)));
}

// NCCL 2.28 answers ncclSuccess to a NULL communicator for destroy, abort and finalize.
PHOS_SIM_API ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  CommRegistry* comms = Comms();
  return comms == nullptr ? NoCommunicator() : comms->Destroy(comm);
}

PHOS_SIM_API ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  CommRegistry* comms = Comms();
  return comms == nullptr ? NoCommunicator() : comms->Abort(comm);
}

PHOS_SIM_API ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  CommRegistry* comms = Comms();
  return comms == nullptr ? NoCommunicator() : comms->Finalize(comm);
}

PHOS_SIM_API ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  std::shared_ptr<RankComm> rank;
  if (ncclResult_t r = FindAny(comm, &rank); r != ncclSuccess) return r;
  if (count == nullptr) return Fail(ncclInvalidArgument, "ncclCommCount: count is NULL");
  *count = rank->group->nranks;
  return ncclSuccess;
}

PHOS_SIM_API ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  std::shared_ptr<RankComm> found;
  if (ncclResult_t r = FindAny(comm, &found); r != ncclSuccess) return r;
  if (rank == nullptr) return Fail(ncclInvalidArgument, "ncclCommUserRank: rank is NULL");
  *rank = found->rank;
  return ncclSuccess;
}

PHOS_SIM_API ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  std::shared_ptr<RankComm> found;
  if (ncclResult_t r = FindAny(comm, &found); r != ncclSuccess) return r;
  if (device == nullptr) return Fail(ncclInvalidArgument, "ncclCommCuDevice: device is NULL");
  *device = found->device();
  return ncclSuccess;
}

// A transfer whose ends disagreed (p2p.h), or a failed context: the asynchronous error NCCL would
// report (its kernels would not run).
PHOS_SIM_API ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async_error) {
  std::shared_ptr<RankComm> found;
  if (ncclResult_t r = FindAny(comm, &found); r != ncclSuccess) return r;
  if (async_error == nullptr) return Fail(ncclInvalidArgument, "ncclCommGetAsyncError: asyncError is NULL");
  *async_error = found->group->async_error.load();
  if (*async_error == ncclSuccess && found->binding.ctx.exec->sticky_error() != CUDA_SUCCESS) {
    *async_error = ncclUnhandledCudaError;
  }
  return ncclSuccess;
}

PHOS_SIM_API ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                                   ncclScalarResidence_t residence, ncclComm_t comm) {
  std::shared_ptr<RankComm> found;
  if (ncclResult_t r = FindAny(comm, &found); r != ncclSuccess) return r;
  return CreatePreMulSum(Comms()->device(), *found, op, scalar, datatype, residence);
}

PHOS_SIM_API ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  std::shared_ptr<RankComm> found;
  if (ncclResult_t r = FindAny(comm, &found); r != ncclSuccess) return r;
  return DestroyRedOp(*found, op);
}

PHOS_SIM_API ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                        ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                        cudaStream_t stream) {
  return Record(Enqueue(
      comm, {CollectiveKind::kAllReduce, sendbuff, recvbuff, count, datatype, op, /*root=*/0}, stream));
}

PHOS_SIM_API ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                                        ncclDataType_t datatype, int root, ncclComm_t comm,
                                        cudaStream_t stream) {
  return Record(Enqueue(
      comm, {CollectiveKind::kBroadcast, sendbuff, recvbuff, count, datatype, ncclSum, root}, stream));
}

PHOS_SIM_API ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                        ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  return Record(Enqueue(
      comm, {CollectiveKind::kAllGather, sendbuff, recvbuff, sendcount, datatype, ncclSum, /*root=*/0},
      stream));
}

PHOS_SIM_API ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                            ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                            cudaStream_t stream) {
  return Record(
      Enqueue(comm, {CollectiveKind::kReduceScatter, sendbuff, recvbuff, recvcount, datatype, op, /*root=*/0},
              stream));
}

PHOS_SIM_API ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count,
                                     ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
                                     cudaStream_t stream) {
  return Record(
      Enqueue(comm, {CollectiveKind::kReduce, sendbuff, recvbuff, count, datatype, op, root}, stream));
}

// The deprecated in-place broadcast.
PHOS_SIM_API ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root,
                                    ncclComm_t comm, cudaStream_t stream) {
  return Record(
      Enqueue(comm, {CollectiveKind::kBroadcast, buff, buff, count, datatype, ncclSum, root}, stream));
}

PHOS_SIM_API ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                                   ncclComm_t comm, cudaStream_t stream) {
  return Record(PointToPoint(comm, {true, const_cast<void*>(sendbuff), count, datatype, peer}, stream));
}

PHOS_SIM_API ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
                                   ncclComm_t comm, cudaStream_t stream) {
  return Record(PointToPoint(comm, {false, recvbuff, count, datatype, peer}, stream));
}

PHOS_SIM_API ncclResult_t ncclGroupStart() {
  ++ThreadGroup().depth;
  return ncclSuccess;
}

// Collectives inside a group were enqueued by their calls already (they never block); what the
// group defers is the wait of ncclCommInitRank and ncclCommSplit for their other ranks, so that
// one thread can create all ranks of a communicator, and the sends and receives, posted together
// so that they progress together (p2p.h).
PHOS_SIM_API ncclResult_t ncclGroupEnd() {
  GroupState& group = ThreadGroup();
  if (group.depth == 0) return Fail(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  if (--group.depth > 0) return ncclSuccess;
  std::vector<PendingJoin> joins = std::move(group.joins);
  group.joins.clear();
  std::vector<PendingP2p> p2p = std::move(group.p2p);
  group.p2p.clear();
  ncclResult_t result = group.first_error;
  group.first_error = ncclSuccess;
  // Joins and sends are only deferred by calls that found the registry, so it exists when there
  // are any.
  if (!joins.empty()) {
    if (ncclResult_t r = Comms()->FinishJoins(joins); result == ncclSuccess) result = r;
  }
  if (!p2p.empty()) {
    if (ncclResult_t r = PostP2p(Comms()->device(), p2p); result == ncclSuccess) result = r;
  }
  return result;
}

}  // extern "C"
