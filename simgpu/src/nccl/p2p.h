// NCCL point-to-point on simgpu: ncclSend and ncclRecv, matched as NCCL matches them: the k-th
// send of rank a to rank b is the k-th receive of rank b from rank a, in the order each was
// issued, and both must give the same count and datatype.
//
// The sends and receives one rank issues on one stream between an ncclGroupStart and its
// ncclGroupEnd (or one call outside a group) are one **batch**, two tasks on that stream like a
// collective's (collective.h): an arrival that counts the batch in when the stream reaches it,
// and a gate that holds the stream's later work until every transfer of the batch is done. A
// transfer is done once the batches of both its ends arrived; the later arrival copies the bytes.
// No worker waits for another rank, and the ops of a group progress together, so an all-to-all in
// one group completes whatever order its ranks are issued in; a send whose receive is never
// issued holds its stream, as on a GPU, until the communicator is aborted or its last rank goes.
// A send and a receive that disagree fail the transfer: nothing is moved, both streams go on,
// and ncclCommGetAsyncError says ncclInvalidUsage on every rank from then on.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstddef>
#include <memory>
#include <vector>

#include "device/device_access.h"

namespace phos::sim::nccl {

class CommRegistry;
struct CommGroup;
struct RankComm;

// One ncclSend or ncclRecv as called.
struct P2pArgs {
  bool send = true;
  void* buffer = nullptr;  // sendbuff or recvbuff
  size_t count = 0;
  ncclDataType_t type = ncclFloat32;
  int peer = 0;
};

// A checked send or receive, waiting to be posted.
struct PendingP2p {
  std::shared_ptr<RankComm> rank;
  std::shared_ptr<Stream> stream;
  P2pArgs args;
};

// Checks the call as NCCL does: ncclInvalidArgument for a communicator that is not live, a
// datatype simgpu does not serve, a peer outside the communicator, a count whose byte size
// overflows, a stream of another context, or (count > 0) a buffer that is NULL or not device
// memory of the communicator's device for count elements; ncclInvalidUsage for a finalized one.
ncclResult_t CheckP2p(CommRegistry& comms, ncclComm_t comm, const P2pArgs& args, cudaStream_t stream,
                      PendingP2p* out);

// Posts `ops` (one group's, in the order they were issued) and enqueues their batches.
// ncclInvalidUsage when a send and its receive disagree on count or datatype (each such
// transfer fails as the header says; the rest are posted all the same).
ncclResult_t PostP2p(DeviceAccess& devices, const std::vector<PendingP2p>& ops);

// Every batch of `group` not done opens its gate, and transfers still to come move nothing.
// ncclCommAbort. Returns how many batches were not done.
size_t AbandonTransfers(CommGroup& group);

}  // namespace phos::sim::nccl
