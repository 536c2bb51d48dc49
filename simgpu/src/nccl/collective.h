// NCCL collectives on simgpu, executed in stream order across simulated devices.
//
// A collective is a rendezvous of its ranks' streams. On rank r's stream it is two tasks:
//   arrival  a compute op (the profile's kernel launch cost) that runs when the stream reached
//            the collective: it counts rank r in. The last rank to arrive does the whole
//            collective over every rank's device buffers, on its own compute worker, and then
//            releases every rank's
//   gate     a held marker (Stream::EnqueueHeld): work behind the collective on rank r's stream
//            waits for it.
// No worker ever waits for another rank: an arrival that is not the last returns at once, so
// any number of collectives in flight cannot exhaust the compute pool.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstddef>

#include "device/device_access.h"

namespace phos::sim::nccl {

class CommRegistry;

enum class CollectiveKind : int { kAllReduce, kBroadcast, kAllGather, kReduceScatter, kReduce };

struct CollectiveArgs {
  CollectiveKind kind = CollectiveKind::kAllReduce;
  const void* send = nullptr;
  void* recv = nullptr;
  // Elements: per rank for kAllReduce, kBroadcast and kReduce, sent by each rank for kAllGather
  // (sendcount), received by each rank for kReduceScatter (recvcount).
  size_t count = 0;
  ncclDataType_t type = ncclFloat32;
  // kAllReduce, kReduceScatter, kReduce: a built-in op, or one ncclRedOpCreatePreMulSum made on
  // the calling rank for this datatype.
  ncclRedOp_t op = ncclSum;
  int root = 0;  // kBroadcast, kReduce
};

// Checks the call as NCCL does (ncclInvalidArgument for a communicator that is not live in
// `comms`, a bad datatype, op or root, a count whose byte size overflows, a NULL buffer, a buffer
// that is not device memory of the communicator's device for the bytes the collective touches,
// or a stream of another context; ncclInvalidUsage for a finalized communicator) and enqueues
// rank comm's part on `stream`. A count of 0 is a successful no-op. Ranks must call their
// collectives in the same order with the same kind, count, datatype, op (every rank's own
// ncclRedOpCreatePreMulSum op counts as one) and root; a call that disagrees with what another
// rank already gave for the same position is ncclInvalidArgument and enqueues nothing. kReduce
// does not read recvbuff on ranks other than the root (it may be NULL there).
ncclResult_t EnqueueCollective(CommRegistry& comms, ncclComm_t comm, const CollectiveArgs& args,
                               cudaStream_t stream);

// ncclInvalidArgument (naming `call` and the buffer's `name`) unless [ptr, ptr + bytes) is device
// memory of `device` granting `access`.
ncclResult_t CheckDeviceBuffer(const DeviceAccess& devices, const char* call, const char* name,
                               const void* ptr, size_t bytes, Access access, int device);

struct CommGroup;

// Every collective of `group` that has not run is abandoned: its ranks' gates open (work behind
// it on their streams goes on), and an arrival still to come moves nothing. ncclCommAbort.
// Returns how many were abandoned.
size_t AbandonCollectives(CommGroup& group);

}  // namespace phos::sim::nccl
