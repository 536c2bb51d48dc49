// The NCCL collectives, sends and receives and groups functions use, each an asynchronous ring
// record executed by phosd (docs/remoting.md "NCCL and device groups"). A call phosd refuses
// outside a group (a buffer outside the caller's allocations, a stream of another device)
// surfaces at the next synchronising CUDA call, as its CUresult; inside a group it refuses the
// whole group, which the group's end reports.
//
// ncclGroupStart/End nest per thread, as NCCL's do. The outermost ncclGroupEnd of a group that
// issued a send or a receive, or that the frontend refused a call of, waits for phosd's answer:
// phosd runs such a group only when each send meets its receive, and the answer is NCCL's
// ncclGroupEnd's. Other group ends stay asynchronous. ncclAlltoAll, ncclGather and ncclScatter
// are groups of sends and receives, as NCCL defines them.
#include <nccl.h>

#include <cstdint>

#include "nccl_internal.h"
#include "phos/frontend/remote_call.h"
#include "phos/ipc/nccl_types.h"

namespace phos::frontend::nccl {
namespace {

ncclResult_t Collective(const char* call, ipc::NcclCollectiveKind kind, const void* send, void* recv,
                        size_t count, ncclDataType_t type, ncclRedOp_t op, int root, ncclComm_t comm,
                        cudaStream_t stream) {
  if (comm == nullptr) return Refuse(ncclInvalidArgument, call, "comm is NULL");
  if (ipc::NcclTypeBytes(type) == 0)
    return Refuse(ncclInvalidArgument, call, "invalid datatype " + std::to_string(type));
  if (root < 0) return Refuse(ncclInvalidArgument, call, "invalid root " + std::to_string(root));
  if (ipc::NcclReduces(static_cast<int32_t>(kind)) && op < 0) {
    return Refuse(ncclInvalidArgument, call, "invalid reduction operation " + std::to_string(op));
  }
  ipc::NcclCollectiveArgs a{Id(comm),
                            0,
                            Id(send),
                            Id(recv),
                            count,
                            static_cast<int32_t>(kind),
                            static_cast<int32_t>(type),
                            static_cast<int32_t>(op),
                            root};
  // cudaStreamPerThread: the calling thread's default stream, as in the CUDA runtime.
  if (__phosStreamId(stream, &a.stream) != 0) return Refuse(ncclUnhandledCudaError, call, "no such stream");
  return Answered(QueueResult(Remote(ipc::Op::kNcclCollective, &a, sizeof(a), false)), call);
}

ncclResult_t PointToPoint(bool send, void* buffer, size_t count, ncclDataType_t type, int peer,
                          ncclComm_t comm, cudaStream_t stream) {
  const char* call = send ? "ncclSend" : "ncclRecv";
  if (comm == nullptr) return Refuse(ncclInvalidArgument, call, "comm is NULL");
  if (ipc::NcclTypeBytes(type) == 0)
    return Refuse(ncclInvalidArgument, call, "invalid datatype " + std::to_string(type));
  if (peer < 0) return Refuse(ncclInvalidArgument, call, "invalid peer " + std::to_string(peer));
  ThreadGroup& group = CurrentGroup();
  if (group.depth == 0) {
    // All of a session's ranks are driven by phosd's one thread for it: the other end of this
    // call can only be met in the same group.
    return Refuse(ncclInvalidUsage, call,
                  "phos serves sends and receives between ncclGroupStart and ncclGroupEnd");
  }
  group.p2p = true;
  ipc::NcclP2pArgs a{Id(comm), 0, Id(buffer), count, static_cast<int32_t>(type), peer};
  if (__phosStreamId(stream, &a.stream) != 0) return Refuse(ncclUnhandledCudaError, call, "no such stream");
  return Answered(QueueResult(Remote(send ? ipc::Op::kNcclSend : ipc::Op::kNcclRecv, &a, sizeof(a), false)),
                  call);
}

// The address of element `index` of `count`-element slices of `type` from `base`; false when it
// does not fit the address space (phosd would refuse the sizes, NCCL would fault).
bool Slice(const void* base, int index, size_t count, ncclDataType_t type, void** out) {
  uint64_t offset = 0, address = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(index), count, &offset) ||
      __builtin_mul_overflow(offset, ipc::NcclTypeBytes(type), &offset) ||
      __builtin_add_overflow(Id(base), offset, &address)) {
    return false;
  }
  *out = reinterpret_cast<void*>(address);
  return true;
}

// Ends the thread's group: phosd's answer when it must be waited for, else queued.
ncclResult_t EndGroup(ThreadGroup& group) {
  const bool wait = group.p2p || group.error != ncclSuccess;
  const ncclResult_t refused = group.error;
  group = ThreadGroup{};
  if (!wait) return QueueResult(Remote(ipc::Op::kNcclGroupEnd, nullptr, 0, false));
  ipc::NcclGroupEndArgs a{.refused = refused};
  ncclResult_t r = SyncResult(Remote(ipc::Op::kNcclGroupEndSync, &a, sizeof(a), true));
  return refused != ncclSuccess ? refused : r;
}

}  // namespace
}  // namespace phos::frontend::nccl

using namespace phos::frontend::nccl;
namespace ipc = phos::ipc;

extern "C" {

ncclResult_t ncclGroupStart() {
  ThreadGroup& group = CurrentGroup();
  ++group.depth;
  return Answered(QueueResult(Remote(ipc::Op::kNcclGroupStart, nullptr, 0, false)), "ncclGroupStart");
}

ncclResult_t ncclGroupEnd() {
  ThreadGroup& group = CurrentGroup();
  if (group.depth == 0) return Refuse(ncclInvalidUsage, "ncclGroupEnd", "not in a group call");
  if (--group.depth > 0)
    return Answered(QueueResult(Remote(ipc::Op::kNcclGroupEnd, nullptr, 0, false)), "ncclGroupEnd");
  return Answered(EndGroup(group), "ncclGroupEnd");
}

// Refused (frontend/surface/refused.tsv): the simulation needs NCCL's tuning model. It still ends
// the group, which runs nothing.
ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t*) {
  constexpr const char* kCall = "ncclGroupSimulateEnd";
  ThreadGroup& group = CurrentGroup();
  if (group.depth == 0) return Refuse(ncclInvalidUsage, kCall, "not in a group call");
  Refuse(ncclInvalidUsage, kCall, "not served by phos");
  while (group.depth > 1) {
    --group.depth;
    Remote(ipc::Op::kNcclGroupEnd, nullptr, 0, false);
  }
  return EndGroup(group);
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return Collective("ncclAllReduce", ipc::NcclCollectiveKind::kAllReduce, sendbuff, recvbuff, count, datatype,
                    op, 0, comm, stream);
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                           int root, ncclComm_t comm, cudaStream_t stream) {
  return Collective("ncclBroadcast", ipc::NcclCollectiveKind::kBroadcast, sendbuff, recvbuff, count, datatype,
                    ncclSum, root, comm, stream);
}

// The deprecated in-place broadcast.
ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                       cudaStream_t stream) {
  return Collective("ncclBcast", ipc::NcclCollectiveKind::kBroadcast, buff, buff, count, datatype, ncclSum,
                    root, comm, stream);
}

ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  return Collective("ncclReduce", ipc::NcclCollectiveKind::kReduce, sendbuff, recvbuff, count, datatype, op,
                    root, comm, stream);
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
  return Collective("ncclAllGather", ipc::NcclCollectiveKind::kAllGather, sendbuff, recvbuff, sendcount,
                    datatype, ncclSum, 0, comm, stream);
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream) {
  return Collective("ncclReduceScatter", ipc::NcclCollectiveKind::kReduceScatter, sendbuff, recvbuff,
                    recvcount, datatype, op, 0, comm, stream);
}

ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  return PointToPoint(true, const_cast<void*>(sendbuff), count, datatype, peer, comm, stream);
}

ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  return PointToPoint(false, recvbuff, count, datatype, peer, comm, stream);
}

// Slice j of sendbuff to rank j, slice i of recvbuff from rank i.
ncclResult_t ncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                          ncclComm_t comm, cudaStream_t stream) {
  constexpr const char* kCall = "ncclAlltoAll";
  int nranks = 0, rank = 0;
  if (comm == nullptr) return Refuse(ncclInvalidArgument, kCall, "comm is NULL");
  if (ipc::NcclTypeBytes(datatype) == 0) return Refuse(ncclInvalidArgument, kCall, "invalid datatype");
  if (ncclResult_t r = CommShape(comm, &nranks, &rank); r != ncclSuccess) return r;
  ncclGroupStart();
  for (int peer = 0; peer < nranks; ++peer) {
    void *from = nullptr, *into = nullptr;
    if (!Slice(sendbuff, peer, count, datatype, &from) || !Slice(recvbuff, peer, count, datatype, &into)) {
      CurrentGroup().error = Refuse(ncclInvalidArgument, kCall, "count overflows the buffers");
      break;
    }
    ncclSend(from, count, datatype, peer, comm, stream);
    ncclRecv(into, count, datatype, peer, comm, stream);
  }
  return ncclGroupEnd();
}

// Every rank's sendbuff to the root, at slice i of the root's recvbuff for rank i.
ncclResult_t ncclGather(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                        ncclComm_t comm, cudaStream_t stream) {
  constexpr const char* kCall = "ncclGather";
  int nranks = 0, rank = 0;
  if (comm == nullptr) return Refuse(ncclInvalidArgument, kCall, "comm is NULL");
  if (ipc::NcclTypeBytes(datatype) == 0) return Refuse(ncclInvalidArgument, kCall, "invalid datatype");
  if (ncclResult_t r = CommShape(comm, &nranks, &rank); r != ncclSuccess) return r;
  if (root < 0 || root >= nranks)
    return Refuse(ncclInvalidArgument, kCall, "invalid root " + std::to_string(root));
  ncclGroupStart();
  ncclSend(sendbuff, count, datatype, root, comm, stream);
  for (int peer = 0; rank == root && peer < nranks; ++peer) {
    void* into = nullptr;
    if (!Slice(recvbuff, peer, count, datatype, &into)) {
      CurrentGroup().error = Refuse(ncclInvalidArgument, kCall, "count overflows the receive buffer");
      break;
    }
    ncclRecv(into, count, datatype, peer, comm, stream);
  }
  return ncclGroupEnd();
}

// Slice i of the root's sendbuff to rank i's recvbuff.
ncclResult_t ncclScatter(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                         int root, ncclComm_t comm, cudaStream_t stream) {
  constexpr const char* kCall = "ncclScatter";
  int nranks = 0, rank = 0;
  if (comm == nullptr) return Refuse(ncclInvalidArgument, kCall, "comm is NULL");
  if (ipc::NcclTypeBytes(datatype) == 0) return Refuse(ncclInvalidArgument, kCall, "invalid datatype");
  if (ncclResult_t r = CommShape(comm, &nranks, &rank); r != ncclSuccess) return r;
  if (root < 0 || root >= nranks)
    return Refuse(ncclInvalidArgument, kCall, "invalid root " + std::to_string(root));
  ncclGroupStart();
  for (int peer = 0; rank == root && peer < nranks; ++peer) {
    void* from = nullptr;
    if (!Slice(sendbuff, peer, count, datatype, &from)) {
      CurrentGroup().error = Refuse(ncclInvalidArgument, kCall, "count overflows the send buffer");
      break;
    }
    ncclSend(from, count, datatype, peer, comm, stream);
  }
  ncclRecv(recvbuff, count, datatype, root, comm, stream);
  return ncclGroupEnd();
}

}  // extern "C"
