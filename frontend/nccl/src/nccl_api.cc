// The NCCL communicators functions use (nccl.h ABI), each call executed by phosd through the CUDA
// runtime frontend's session (docs/remoting.md). Communicators are phosd's virtual ids: a
// function deployed with --gpus N gets, from ncclCommInitAll / ncclCommInitRank(Config), the
// communicator of the device group phosd leased to its session, never a communicator of its own.
// Collectives, sends and receives and groups are in nccl_collectives.cc.
//
// Unique ids are made here: they only name a rendezvous of ranks inside this process's session
// (phosd matches ncclCommInitRank calls by id), so no round trip is needed.
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <sys/random.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>

#include "nccl_internal.h"
#include "phos/frontend/remote_call.h"
#include "phos/ipc/nccl_types.h"

namespace phos::frontend::nccl {
namespace {

std::mutex shapes_mu;
std::map<uint64_t, std::pair<int, int>> shapes;  // guarded by shapes_mu: comm -> (nranks, rank)

ncclResult_t IntQuery(ipc::Op op, const char* call, const ncclComm_t comm, int* out) {
  if (comm == nullptr) return Refuse(ncclInvalidArgument, call, "comm is NULL");
  if (out == nullptr) return Refuse(ncclInvalidArgument, call, "the output is NULL");
  ipc::HandleArgs a{Id(comm)};
  int32_t v = 0;
  ncclResult_t r = SyncResult(Remote(op, &a, sizeof(a), true, &v, sizeof(v)));
  if (r == ncclSuccess) *out = v;
  return Answered(r, call);
}

ncclResult_t HandleCall(ipc::Op op, const char* call, ncclComm_t comm) {
  ipc::HandleArgs a{Id(comm)};
  return Answered(SyncResult(Remote(op, &a, sizeof(a), true)), call);
}

ncclResult_t InitRank(const char* call, ncclComm_t* comm, int nranks, const ncclUniqueId& comm_id, int rank,
                      const ncclConfig_t* config) {
  if (comm == nullptr) return Refuse(ncclInvalidArgument, call, "newcomm is NULL");
  *comm = nullptr;
  if (nranks <= 0 || nranks > ipc::kMaxNcclRanks || rank < 0 || rank >= nranks) {
    return Refuse(ncclInvalidArgument, call,
                  "invalid rank requested: " + std::to_string(rank) + "/" + std::to_string(nranks));
  }
  std::string why;
  if (ncclResult_t r = CheckConfig(config, &why); r != ncclSuccess) return Refuse(r, call, why);
  ipc::NcclInitRankArgs a{};
  a.nranks = nranks;
  a.rank = rank;
  static_assert(sizeof(a.id) == sizeof(comm_id.internal));
  std::memcpy(a.id, comm_id.internal, sizeof(a.id));
  uint64_t id = 0;
  ncclResult_t r = SyncResult(Remote(ipc::Op::kNcclCommInitRank, &a, sizeof(a), true, &id, sizeof(id)));
  if (r == ncclSuccess) *comm = reinterpret_cast<ncclComm_t>(id);
  return Answered(r, call);
}

}  // namespace

ncclResult_t CommShape(ncclComm_t comm, int* nranks, int* rank) {
  {
    std::lock_guard lock(shapes_mu);
    if (auto it = shapes.find(Id(comm)); it != shapes.end()) {
      *nranks = it->second.first;
      *rank = it->second.second;
      return ncclSuccess;
    }
  }
  if (ncclResult_t r = IntQuery(ipc::Op::kNcclCommCount, "ncclCommCount", comm, nranks); r != ncclSuccess)
    return r;
  if (ncclResult_t r = IntQuery(ipc::Op::kNcclCommUserRank, "ncclCommUserRank", comm, rank);
      r != ncclSuccess) {
    return r;
  }
  std::lock_guard lock(shapes_mu);
  shapes[Id(comm)] = {*nranks, *rank};
  return ncclSuccess;
}

void ForgetShape(ncclComm_t comm) {
  std::lock_guard lock(shapes_mu);
  shapes.erase(Id(comm));
}

}  // namespace phos::frontend::nccl

using namespace phos::frontend::nccl;
namespace ipc = phos::ipc;

extern "C" {

ncclResult_t ncclGetVersion(int* version) {
  if (version == nullptr) return ncclInvalidArgument;
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

// NCCL 2.28's texts, for every ncclResult_t and anything else.
const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError:
      return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError:
      return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument:
      return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage:
      return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
    default:
      return "unknown result code";
  }
}

// The calling thread's, whatever the communicator (NCCL keeps one per thread too).
const char* ncclGetLastError(ncclComm_t) {
  return LastError();
}

// phos has no NCCL_DEBUG logging to reload.
void ncclResetDebugInit() {}

ncclResult_t ncclGetUniqueId(ncclUniqueId* unique_id) {
  if (unique_id == nullptr) return Refuse(ncclInvalidArgument, "ncclGetUniqueId", "uniqueId is NULL");
  size_t got = 0;
  while (got < sizeof(unique_id->internal)) {
    ssize_t n = getrandom(unique_id->internal + got, sizeof(unique_id->internal) - got, 0);
    if (n <= 0) return Refuse(ncclSystemError, "ncclGetUniqueId", "getrandom failed");
    got += static_cast<size_t>(n);
  }
  return ncclSuccess;
}

// Up to phos's own rank limit (what one record carries); whether the session has those devices is
// phosd's to check, from its driver's device count.
ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  constexpr const char* kCall = "ncclCommInitAll";
  if (comms == nullptr) return Refuse(ncclInvalidArgument, kCall, "comms is NULL");
  if (ndev <= 0 || ndev > ipc::kMaxNcclRanks) {
    return Refuse(ncclInvalidArgument, kCall, "invalid device count " + std::to_string(ndev));
  }
  ipc::NcclInitAllArgs a{};
  a.ndev = ndev;
  for (int i = 0; i < ndev; ++i) a.devices[i] = devlist != nullptr ? devlist[i] : i;
  uint64_t ids[ipc::kMaxNcclRanks] = {};
  ncclResult_t r = SyncResult(Remote(ipc::Op::kNcclCommInitAll, &a, sizeof(a), true, ids, sizeof(ids)));
  for (int i = 0; i < ndev; ++i) comms[i] = r == ncclSuccess ? reinterpret_cast<ncclComm_t>(ids[i]) : nullptr;
  return Answered(r, kCall);
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId comm_id, int rank) {
  return InitRank("ncclCommInitRank", comm, nranks, comm_id, rank, nullptr);
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId comm_id, int rank,
                                    ncclConfig_t* config) {
  return InitRank("ncclCommInitRankConfig", comm, nranks, comm_id, rank, config);
}

// Every rank gives the same ids in the same order: the first names the rendezvous (the others
// only spread NCCL's bootstrap over more roots).
ncclResult_t ncclCommInitRankScalable(ncclComm_t* comm, int nranks, int rank, int nid, ncclUniqueId* comm_ids,
                                      ncclConfig_t* config) {
  constexpr const char* kCall = "ncclCommInitRankScalable";
  if (nid <= 0 || nid > nranks) {
    return Refuse(ncclInvalidArgument, kCall, "nId " + std::to_string(nid) + " outside [1, nranks]");
  }
  if (comm_ids == nullptr) return Refuse(ncclInvalidArgument, kCall, "commId is NULL");
  return InitRank(kCall, comm, nranks, comm_ids[0], rank, config);
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) {
  constexpr const char* kCall = "ncclCommSplit";
  if (comm == nullptr) return Refuse(ncclInvalidArgument, kCall, "comm is NULL");
  if (newcomm == nullptr) return Refuse(ncclInvalidArgument, kCall, "newcomm is NULL");
  if (color < 0 && color != NCCL_SPLIT_NOCOLOR) {
    return Refuse(ncclInvalidArgument, kCall, "color " + std::to_string(color) + " is negative");
  }
  std::string why;
  if (ncclResult_t r = CheckConfig(config, &why); r != ncclSuccess) return Refuse(r, kCall, why);
  ipc::NcclSplitArgs a{Id(comm), color, key};
  uint64_t id = 0;
  ncclResult_t r = SyncResult(Remote(ipc::Op::kNcclCommSplit, &a, sizeof(a), true, &id, sizeof(id)));
  *newcomm = r == ncclSuccess ? reinterpret_cast<ncclComm_t>(id) : nullptr;
  return Answered(r, kCall);
}

// NCCL 2.28 answers ncclSuccess for a NULL communicator to finalize, destroy and abort.
ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  return HandleCall(ipc::Op::kNcclCommFinalize, "ncclCommFinalize", comm);
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  ForgetShape(comm);
  return HandleCall(ipc::Op::kNcclCommDestroy, "ncclCommDestroy", comm);
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  ForgetShape(comm);
  return HandleCall(ipc::Op::kNcclCommAbort, "ncclCommAbort", comm);
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  return IntQuery(ipc::Op::kNcclCommCount, "ncclCommCount", comm, count);
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  return IntQuery(ipc::Op::kNcclCommUserRank, "ncclCommUserRank", comm, rank);
}

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  return IntQuery(ipc::Op::kNcclCommCuDevice, "ncclCommCuDevice", comm, device);
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async_error) {
  int state = 0;
  ncclResult_t r = IntQuery(ipc::Op::kNcclCommGetAsyncError, "ncclCommGetAsyncError", comm,
                            async_error == nullptr ? nullptr : &state);
  if (r == ncclSuccess) *async_error = static_cast<ncclResult_t>(state);
  return r;
}

// Buffer registration only speeds NCCL's transfers up; NCCL itself registers nothing when local
// registration is off, handing out a NULL handle, which is what phos does.
ncclResult_t ncclCommRegister(const ncclComm_t comm, void*, size_t, void** handle) {
  if (comm == nullptr) return Refuse(ncclInvalidArgument, "ncclCommRegister", "comm is NULL");
  if (handle == nullptr) return Refuse(ncclInvalidArgument, "ncclCommRegister", "handle is NULL");
  *handle = nullptr;
  return ncclSuccess;
}

ncclResult_t ncclCommDeregister(const ncclComm_t comm, void* handle) {
  if (comm == nullptr) return Refuse(ncclInvalidArgument, "ncclCommDeregister", "comm is NULL");
  if (handle != nullptr) return Refuse(ncclInvalidArgument, "ncclCommDeregister", "no buffer was registered");
  return ncclSuccess;
}

// Symmetric windows likewise: NCCL 2.28 hands out a NULL window where the devices cannot map
// each other's memory, and collectives on the buffer run as they always do.
ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int) {
  if (comm == nullptr) return Refuse(ncclInvalidArgument, "ncclCommWindowRegister", "comm is NULL");
  if (win == nullptr) return Refuse(ncclInvalidArgument, "ncclCommWindowRegister", "win is NULL");
  if (buff == nullptr || size == 0) return Refuse(ncclInvalidArgument, "ncclCommWindowRegister", "no buffer");
  *win = nullptr;
  return ncclSuccess;
}

ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
  if (comm == nullptr) return Refuse(ncclInvalidArgument, "ncclCommWindowDeregister", "comm is NULL");
  if (win != nullptr)
    return Refuse(ncclInvalidArgument, "ncclCommWindowDeregister", "no window was registered");
  return ncclSuccess;
}

// NCCL's allocation for its optimisations is cudaMalloc where the devices offer nothing better: a
// buffer of the session like any other.
ncclResult_t ncclMemAlloc(void** ptr, size_t size) {
  if (cudaMalloc(ptr, size) != cudaSuccess)
    return Refuse(ncclUnhandledCudaError, "ncclMemAlloc", "cudaMalloc failed");
  return ncclSuccess;
}

ncclResult_t ncclMemFree(void* ptr) {
  if (cudaFree(ptr) != cudaSuccess) return Refuse(ncclUnhandledCudaError, "ncclMemFree", "cudaFree failed");
  return ncclSuccess;
}

ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                      ncclScalarResidence_t residence, ncclComm_t comm) {
  constexpr const char* kCall = "ncclRedOpCreatePreMulSum";
  if (comm == nullptr) return Refuse(ncclInvalidArgument, kCall, "comm is NULL");
  if (op == nullptr || scalar == nullptr) return Refuse(ncclInvalidArgument, kCall, "op or scalar is NULL");
  const uint64_t bytes = ipc::NcclTypeBytes(datatype);
  if (bytes == 0) return Refuse(ncclInvalidArgument, kCall, "invalid datatype " + std::to_string(datatype));
  ipc::NcclRedOpArgs a{.comm = Id(comm), .scalar = Id(scalar), .datatype = datatype, .residence = residence};
  // An immediate scalar is read now, as NCCL reads it before returning; its bytes ride in the record.
  if (residence == ncclScalarHostImmediate) {
    a.scalar = 0;
    std::memcpy(&a.scalar, scalar, bytes);
  }
  int32_t made = 0;
  ncclResult_t r = SyncResult(Remote(ipc::Op::kNcclRedOpCreate, &a, sizeof(a), true, &made, sizeof(made)));
  if (r == ncclSuccess) *op = static_cast<ncclRedOp_t>(made);
  return Answered(r, kCall);
}

ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  if (comm == nullptr) return Refuse(ncclInvalidArgument, "ncclRedOpDestroy", "comm is NULL");
  ipc::NcclRedOpArgs a{.comm = Id(comm), .op = op};
  return Answered(SyncResult(Remote(ipc::Op::kNcclRedOpDestroy, &a, sizeof(a), true)), "ncclRedOpDestroy");
}

// Refused (frontend/surface/refused.tsv): a shrink is made by the remaining ranks only, and
// phosd's communicators are splits every rank of which takes part; a revoke would stop the pooled
// communicator's work under the next tenant.
ncclResult_t ncclCommShrink(ncclComm_t, int*, int, ncclComm_t* newcomm, ncclConfig_t*, int) {
  if (newcomm != nullptr) *newcomm = nullptr;
  return Refuse(ncclInvalidUsage, "ncclCommShrink", "not served by phos");
}

ncclResult_t ncclCommRevoke(ncclComm_t, int) {
  return Refuse(ncclInvalidUsage, "ncclCommRevoke", "not served by phos");
}

}  // extern "C"
