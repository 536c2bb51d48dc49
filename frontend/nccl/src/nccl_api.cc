// The NCCL subset functions use (nccl.h ABI), each call executed by phosd through the CUDA
// runtime frontend's session (docs/remoting.md). Communicators are phosd's virtual ids: a
// function deployed with --gpus N gets, from ncclCommInitAll / ncclCommInitRank, the
// communicator of the device group phosd leased to its session, never a communicator of its own. Collectives and group calls are asynchronous
// ring records: a collective phosd refuses (a buffer outside the caller's allocations, a stream
// of another device) surfaces at the next synchronising CUDA call, as its CUresult.
//
// Unique ids are made here: they only name a rendezvous of ranks inside this process's session
// (phosd matches ncclCommInitRank calls by id), so no round trip is needed.
#include <nccl.h>

#include <sys/random.h>

#include <cstdint>
#include <cstring>

#include "phos/frontend/remote_call.h"
#include "phos/ipc/nccl_types.h"
#include "phos/ipc/wire.h"

namespace ipc = phos::ipc;

namespace {

uint64_t Id(const void* p) { return reinterpret_cast<uintptr_t>(p); }

int Remote(ipc::Op op, const void* args, size_t len, bool reply, void* out = nullptr, size_t cap = 0) {
  return __phosRemoteCall(static_cast<uint16_t>(op), args, len, reply ? 1 : 0, out, cap);
}

// Sync calls answer with an ncclResult_t; anything outside its range is a session failure.
ncclResult_t SyncResult(int result) {
  if (result >= 0 && result < ncclNumResults) return static_cast<ncclResult_t>(result);
  return ncclUnhandledCudaError;
}

// Async calls answer with a CUresult (only ever a failure to queue).
ncclResult_t QueueResult(int result) { return result == 0 ? ncclSuccess : ncclUnhandledCudaError; }


ncclResult_t Collective(ipc::NcclCollectiveKind kind, const void* send, void* recv, size_t count, ncclDataType_t type,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  if (comm == nullptr) return ncclInvalidArgument;
  if (ipc::NcclTypeBytes(type) == 0 || root < 0) return ncclInvalidArgument;
  if (!ipc::NcclReductionAllowed(static_cast<int32_t>(kind), op)) return ncclInvalidArgument;
  ipc::NcclCollectiveArgs a{Id(comm), 0, Id(send), Id(recv), count, static_cast<int32_t>(kind),
                            static_cast<int32_t>(type), static_cast<int32_t>(op), root};
  // cudaStreamPerThread: the calling thread's default stream, as in the CUDA runtime.
  if (__phosStreamId(stream, &a.stream) != 0) return ncclUnhandledCudaError;
  return QueueResult(Remote(ipc::Op::kNcclCollective, &a, sizeof(a), false));
}

ncclResult_t IntQuery(ipc::Op op, const ncclComm_t comm, int* out) {
  if (comm == nullptr || out == nullptr) return ncclInvalidArgument;
  ipc::HandleArgs a{Id(comm)};
  int32_t v = 0;
  ncclResult_t r = SyncResult(Remote(op, &a, sizeof(a), true, &v, sizeof(v)));
  if (r == ncclSuccess) *out = v;
  return r;
}

}  // namespace

extern "C" {

ncclResult_t ncclGetVersion(int* version) {
  if (version == nullptr) return ncclInvalidArgument;
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* unique_id) {
  if (unique_id == nullptr) return ncclInvalidArgument;
  size_t got = 0;
  while (got < sizeof(unique_id->internal)) {
    ssize_t n = getrandom(unique_id->internal + got, sizeof(unique_id->internal) - got, 0);
    if (n <= 0) return ncclSystemError;
    got += static_cast<size_t>(n);
  }
  return ncclSuccess;
}

// Up to phos's own rank limit (what one record carries); whether the session has those devices is
// phosd's to check, from its driver's device count.
ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  if (comms == nullptr || ndev <= 0 || ndev > ipc::kMaxNcclRanks) return ncclInvalidArgument;
  ipc::NcclInitAllArgs a{};
  a.ndev = ndev;
  for (int i = 0; i < ndev; ++i) a.devices[i] = devlist != nullptr ? devlist[i] : i;
  uint64_t ids[ipc::kMaxNcclRanks] = {};
  ncclResult_t r = SyncResult(Remote(ipc::Op::kNcclCommInitAll, &a, sizeof(a), true, ids, sizeof(ids)));
  for (int i = 0; i < ndev; ++i) comms[i] = r == ncclSuccess ? reinterpret_cast<ncclComm_t>(ids[i]) : nullptr;
  return r;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId comm_id, int rank) {
  if (comm == nullptr || nranks <= 0 || nranks > ipc::kMaxNcclRanks || rank < 0 || rank >= nranks) {
    return ncclInvalidArgument;
  }
  ipc::NcclInitRankArgs a{};
  a.nranks = nranks;
  a.rank = rank;
  static_assert(sizeof(a.id) == sizeof(comm_id.internal));
  std::memcpy(a.id, comm_id.internal, sizeof(a.id));
  uint64_t id = 0;
  ncclResult_t r = SyncResult(Remote(ipc::Op::kNcclCommInitRank, &a, sizeof(a), true, &id, sizeof(id)));
  *comm = r == ncclSuccess ? reinterpret_cast<ncclComm_t>(id) : nullptr;
  return r;
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) {
  if (comm == nullptr || newcomm == nullptr || (color < 0 && color != NCCL_SPLIT_NOCOLOR)) return ncclInvalidArgument;
  // A configuration (blocking, CTAs, ...) would be phosd's to honour on its pooled communicators
  // (a row of frontend/surface/refused.tsv).
  if (config != nullptr) return ncclInvalidUsage;
  ipc::NcclSplitArgs a{Id(comm), color, key};
  uint64_t id = 0;
  ncclResult_t r = SyncResult(Remote(ipc::Op::kNcclCommSplit, &a, sizeof(a), true, &id, sizeof(id)));
  *newcomm = r == ncclSuccess ? reinterpret_cast<ncclComm_t>(id) : nullptr;
  return r;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclInvalidArgument;
  ipc::HandleArgs a{Id(comm)};
  return SyncResult(Remote(ipc::Op::kNcclCommDestroy, &a, sizeof(a), true));
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) { return IntQuery(ipc::Op::kNcclCommCount, comm, count); }

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) { return IntQuery(ipc::Op::kNcclCommUserRank, comm, rank); }

ncclResult_t ncclGroupStart() { return QueueResult(Remote(ipc::Op::kNcclGroupStart, nullptr, 0, false)); }

ncclResult_t ncclGroupEnd() { return QueueResult(Remote(ipc::Op::kNcclGroupEnd, nullptr, 0, false)); }

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  return Collective(ipc::NcclCollectiveKind::kAllReduce, sendbuff, recvbuff, count, datatype, op, 0, comm, stream);
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  return Collective(ipc::NcclCollectiveKind::kBroadcast, sendbuff, recvbuff, count, datatype, ncclSum, root, comm, stream);
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
  return Collective(ipc::NcclCollectiveKind::kAllGather, sendbuff, recvbuff, sendcount, datatype, ncclSum, 0, comm,
                    stream);
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return Collective(ipc::NcclCollectiveKind::kReduceScatter, sendbuff, recvbuff, recvcount, datatype, op, 0, comm,
                    stream);
}

}  // extern "C"
