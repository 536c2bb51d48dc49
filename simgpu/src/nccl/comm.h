// NCCL communicators on simgpu: the ncclComm_t handle table, unique ids, and the host-side
// rendezvous behind ncclCommInitRank, ncclCommInitAll, ncclCommSplit and ncclGroupStart/End.
//
// All ranks of a communicator live in this process (in phos: phosd), so a unique id names an
// entry of an in-process rendezvous table; cross-process communicators are not modelled. A rank
// is bound to one context (the one current at ncclCommInitRank) and runs its collectives on
// that context's streams. Like the driver's handles (device/handles.h) an ncclComm_t is a table id,
// never a pointer: garbage, destroyed or NULL handles are ncclInvalidArgument, not a crash. The
// registry reaches the devices only through the DeviceAccess it is given.
#pragma once

#include <nccl.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "device/device_access.h"
#include "device/handles.h"

namespace phos::sim::nccl {

class Collective;
class P2pBatch;
class Transfer;
struct Rendezvous;

// The sends from one rank to another and the receives of the other from it, matched in order of
// issue: the k-th send of `from` to `to` is the k-th receive of `to` from `from` (NCCL's rule).
struct P2pChannel {
  uint64_t sends = 0;  // posted so far
  uint64_t receives = 0;
  // Transfers one side has posted and the other not yet, by their number in the channel.
  std::map<uint64_t, std::shared_ptr<Transfer>> open;
};

// What the ranks of one communicator share.
struct CommGroup {
  explicit CommGroup(int nranks);

  const int nranks;
  std::mutex mu;  // guards the collective bookkeeping below
  // Per rank: the sequence number its next collective gets. The k-th collective of every rank
  // is the same collective, as NCCL requires of its callers.
  std::vector<uint64_t> next_collective;
  // Collectives some but not all ranks have joined, by sequence number.
  std::map<uint64_t, std::shared_ptr<Collective>> open_collectives;
  // Every collective not known to be over: what ncclCommAbort abandons (AbandonCollectives).
  std::vector<std::weak_ptr<Collective>> unfinished;

  // ncclCommSplit, likewise by sequence; guarded by the CommRegistry's mutex.
  std::vector<uint64_t> next_split;
  std::map<uint64_t, std::shared_ptr<Rendezvous>> open_splits;

  // ncclSend / ncclRecv (p2p.h), guarded by `mu`: channels by (sender, receiver), and the
  // batches whose transfers are not all done. The group owns those batches: when its last rank
  // goes, so do they, and with them the gates their streams wait at.
  std::map<std::pair<int, int>, P2pChannel> channels;
  std::vector<std::shared_ptr<P2pBatch>> unfinished_batches;
  // What ncclCommGetAsyncError reports for every rank once a transfer failed (a send and its
  // receive disagreed on count or datatype: ncclInvalidUsage) or a rank was aborted with work of
  // the others in flight (ncclRemoteError); sticky, as NCCL's. The first error stays.
  std::atomic<ncclResult_t> async_error{ncclSuccess};
};

// The context a rank runs on.
struct Binding {
  ContextRef ctx;
  // Set when the binding holds a reference on the device's primary context (ncclCommInitAll,
  // or no context current at ncclCommInitRank), released through it with the rank.
  DeviceAccess* primary_owner = nullptr;
};

// A reduction made by ncclRedOpCreatePreMulSum: each rank's input is multiplied by the rank's
// scalar before the sum. The scalar is the value given (ncclScalarHostImmediate) or is read from
// device memory when the collective runs (ncclScalarDevice).
struct UserRedOp {
  ncclDataType_t type = ncclFloat32;
  ncclScalarResidence_t residence = ncclScalarHostImmediate;
  unsigned char value[8] = {};    // host immediate: the scalar's bytes
  CUdeviceptr device_scalar = 0;  // device: where the scalar is
};

// What one ncclComm_t names: one rank of a communicator.
struct RankComm {
  ~RankComm();

  std::shared_ptr<CommGroup> group;
  int rank = 0;
  Binding binding;
  // ncclCommFinalize was called: no new collective, transfer or split may use the rank.
  std::atomic<bool> finalized{false};
  // The reductions ncclRedOpCreatePreMulSum made on this rank, by their ncclRedOp_t value.
  std::mutex ops_mu;
  std::map<int, UserRedOp> ops;
  // The creation (ncclCommInitRank) the rank joined, until it completes: what an abort of the
  // rank gives up.
  std::weak_ptr<Rendezvous> creation;
  int device() const { return binding.ctx.device; }
};

// A communicator creation (init or split) some ranks have joined; complete once all did.
struct Rendezvous {
  struct Member {
    bool joined = false;
    int color = 0;  // split only
    int key = 0;
    std::shared_ptr<RankComm> parent;  // split: the rank of the communicator being split
    std::shared_ptr<RankComm> result;  // split: the new rank, or null (NCCL_SPLIT_NOCOLOR)
  };
  explicit Rendezvous(int parties) : members(parties) {}

  std::vector<Member> members;  // by rank (init) or parent rank (split)
  int joined = 0;
  bool complete = false;
  // A rank of it was aborted first: it never completes; its waiters and later joiners fail
  // (ncclSystemError, as NCCL's bootstrap does when a peer goes away).
  bool aborted = false;
  std::shared_ptr<CommGroup> group;  // init: the communicator being created
};

// A rank's part of a communicator creation that remains to be waited for: at once, or at the
// outermost ncclGroupEnd when the call was made inside a group.
struct PendingJoin {
  std::shared_ptr<Rendezvous> rendezvous;
  int member = 0;
  ncclComm_t* split_out = nullptr;  // split: where the new handle is written
  double cost_s = 0;                // the profile's nccl_comm_init_s
};

class CommRegistry {
 public:
  // `device` outlives the registry and every collective enqueued through it.
  explicit CommRegistry(DeviceAccess& device) : device_(device) {}
  CommRegistry(const CommRegistry&) = delete;
  CommRegistry& operator=(const CommRegistry&) = delete;

  DeviceAccess& device() const { return device_; }

  ncclResult_t NewUniqueId(ncclUniqueId* out);

  // The live rank `comm` names, with its context still alive and without a sticky error, for new
  // work. ncclInvalidArgument for a handle that is not live, ncclUnhandledCudaError for a context
  // that is gone or failed, ncclInvalidUsage for a finalized rank.
  ncclResult_t Find(ncclComm_t comm, std::shared_ptr<RankComm>* out) const;
  // The live rank, whatever its context's state (queries and destroy).
  ncclResult_t FindAny(ncclComm_t comm, std::shared_ptr<RankComm>* out) const;
  ncclResult_t Destroy(ncclComm_t comm);
  // ncclCommFinalize: no new work may use the rank (ncclInvalidUsage); a second finalize is
  // ncclInvalidArgument. What the rank issued before runs on: its streams reach it as they would.
  ncclResult_t Finalize(ncclComm_t comm);
  // ncclCommAbort: abandons every collective and transfer of the communicator that has not run
  // (each rank's stream goes on past it; nothing is moved, logged), gives up the creation the
  // rank joined and the splits of its communicator still waiting for ranks (their waiters wake
  // with ncclSystemError), then destroys the rank. The other ranks stay live: when work of theirs
  // was abandoned, ncclCommGetAsyncError says ncclRemoteError on each ("a remote process exiting
  // prematurely"), so a rank whose peer went away sees an error rather than a hang. A caller
  // ending a communicator whose ranks may be half-way through a collective aborts each of them.
  ncclResult_t Abort(ncclComm_t comm);

  // ncclCommInitRank: binds to the current context (or, with none current, device 0's primary
  // context, which is what the CUDA runtime would use), joins the rendezvous `id` names and
  // writes the new handle. Does not wait: the caller finishes `pending` (FinishJoins).
  ncclResult_t JoinInit(const ncclUniqueId& id, int nranks, int rank, ncclComm_t* comm, PendingJoin* pending);
  // ncclCommInitAll: one rank per device of `devlist` (NULL: devices 0 .. ndev - 1), each on its
  // primary context; complete on return, creation cost paid once. ncclInvalidArgument for a
  // device that does not exist, ncclInvalidUsage for one listed twice.
  ncclResult_t InitAll(ncclComm_t* comms, int ndev, const int* devlist);
  // ncclCommSplit: joins the split of `parent`'s communicator; the new handle is written by
  // FinishJoins.
  ncclResult_t JoinSplit(const std::shared_ptr<RankComm>& parent, int color, int key, ncclComm_t* newcomm,
                         PendingJoin* pending);
  // Waits until every rendezvous of `joins` completed (ncclSystemError after kJoinTimeout, or at
  // once when a rank of it was aborted), writes split handles, and pays the largest creation cost
  // once: ranks initialise in parallel.
  ncclResult_t FinishJoins(const std::vector<PendingJoin>& joins);
  // Threads waiting in FinishJoins now: tests abort a rank once its peer waits.
  int join_waiters() const;

  // How long a rank waits for the others to join a communicator creation. NCCL's bootstrap
  // waits without bound; a stuck daemon is worse than a failed call.
  static constexpr std::chrono::seconds kJoinTimeout{120};

 private:
  ncclComm_t Insert(std::shared_ptr<RankComm> rank);
  // Retains the primary context of `device` for a rank (Binding::primary_owner).
  ncclResult_t BindPrimary(int device, Binding* out);
  // Joins rank `rank_comm->rank` of the rendezvous of unique id number `key`.
  ncclResult_t JoinInitRank(uint64_t key, int nranks, std::shared_ptr<RankComm> rank_comm, ncclComm_t* comm,
                            PendingJoin* pending);
  // Computes a completed split's new communicators. Requires mu_.
  void CompleteSplit(Rendezvous& rendezvous);

  DeviceAccess& device_;
  HandleTable<RankComm, ncclComm_t, HandleKind::kNcclComm> handles_;
  mutable std::mutex mu_;  // every Rendezvous, the init table and the groups' split bookkeeping
  std::condition_variable joined_cv_;
  int join_waiters_ = 0;
  std::map<uint64_t, std::shared_ptr<Rendezvous>> inits_;  // by unique id
  std::atomic<uint64_t> next_id_{0};
};

struct PendingP2p;

// ncclGroupStart/End nesting of the calling thread, and what is deferred to its end: the joins of
// communicator creations and the sends and receives (posted together, p2p.h).
struct GroupState {
  int depth = 0;
  std::vector<PendingJoin> joins;
  std::vector<PendingP2p> p2p;
  ncclResult_t first_error = ncclSuccess;
};
GroupState& ThreadGroup();

}  // namespace phos::sim::nccl
