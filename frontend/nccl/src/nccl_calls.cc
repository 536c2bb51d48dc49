// The NCCL frontend's calls through the session, its answers, and the calling thread's group and
// last error (nccl_internal.h).
#include <string>

#include "nccl_internal.h"
#include "phos/frontend/remote_call.h"

namespace phos::frontend::nccl {
namespace {

thread_local std::string last_error;

// An error inside a group is the group's too (ncclGroupEnd returns the first).
void NoteInGroup(ncclResult_t result) {
  ThreadGroup& group = CurrentGroup();
  if (group.depth > 0 && group.error == ncclSuccess) group.error = result;
}

}  // namespace

int Remote(ipc::Op op, const void* args, size_t len, bool reply, void* out, size_t cap) {
  return __phosRemoteCall(static_cast<uint16_t>(op), args, len, reply ? 1 : 0, out, cap);
}

ncclResult_t SyncResult(int result) {
  if (result >= 0 && result < ncclNumResults) return static_cast<ncclResult_t>(result);
  return ncclUnhandledCudaError;
}

ncclResult_t QueueResult(int result) {
  return result == 0 ? ncclSuccess : ncclUnhandledCudaError;
}

ncclResult_t Refuse(ncclResult_t result, const char* call, const std::string& why) {
  last_error = std::string(call) + ": " + why;
  NoteInGroup(result);
  return result;
}

ncclResult_t Answered(ncclResult_t result, const char* call) {
  if (result == ncclSuccess) return result;
  last_error = std::string(call) + ": " + ncclGetErrorString(result) + " (phosd's log says why)";
  NoteInGroup(result);
  return result;
}

const char* LastError() {
  return last_error.c_str();
}

ThreadGroup& CurrentGroup() {
  thread_local ThreadGroup group;
  return group;
}

}  // namespace phos::frontend::nccl
