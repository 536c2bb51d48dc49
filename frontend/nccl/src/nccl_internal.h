// What the NCCL frontend's files share: the call through the CUDA runtime frontend's session, how
// answers become ncclResult_t, the calling thread's group and last error, and each communicator's
// rank and size as phosd reports them. Private to libphos-nccl.
#pragma once

#include <nccl.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "phos/ipc/wire.h"

namespace phos::frontend::nccl {

inline uint64_t Id(const void* p) {
  return reinterpret_cast<uintptr_t>(p);
}

// One record through the session (frontend/include/phos/frontend/remote_call.h).
int Remote(ipc::Op op, const void* args, size_t len, bool reply, void* out = nullptr, size_t cap = 0);

// Sync calls answer with an ncclResult_t; anything outside its range is a session failure.
ncclResult_t SyncResult(int result);
// Async calls answer with a CUresult (only ever a failure to queue).
ncclResult_t QueueResult(int result);

// The thread's last error (ncclGetLastError): `call: why` when the frontend refused, `call:
// <ncclGetErrorString>` when phosd did (its log says why). An error inside a group is also the
// group's (ncclGroupEnd returns it, and phosd runs none of the group). Returns `result`.
ncclResult_t Refuse(ncclResult_t result, const char* call, const std::string& why);
ncclResult_t Answered(ncclResult_t result, const char* call);
const char* LastError();

// ncclGroupStart/End of the calling thread, as NCCL keeps them per thread.
struct ThreadGroup {
  int depth = 0;
  bool p2p = false;                  // a send or receive was issued in it
  ncclResult_t error = ncclSuccess;  // the first call of it the frontend refused
};
ThreadGroup& CurrentGroup();

// The size of `comm` and the caller's rank in it, asked of phosd once per communicator.
ncclResult_t CommShape(ncclComm_t comm, int* nranks, int* rank);
// `comm` is gone (destroyed or aborted): its shape is asked again should phosd reuse its id.
void ForgetShape(ncclComm_t comm);

// ncclConfig_t as NCCL 2.28 reads it (nccl_config.cc): ncclInvalidArgument for a configuration
// NCCL refuses, ncclInvalidUsage for a network it would not find; *why says which field.
ncclResult_t CheckConfig(const ncclConfig_t* config, std::string* why);

}  // namespace phos::frontend::nccl
