// The NCCL work of a session: collectives, sends and receives, groups, and the reductions
// ncclRedOpCreatePreMulSum makes. Every record is checked before anything reaches the driver: the
// communicator, its rank's peer or root, the datatype and op, counts whose byte size must not
// wrap, each buffer against the session's own, the stream's device.
//
// Group calls are kept here: what a function issues between ncclGroupStart and the matching
// ncclGroupEnd is queued and run inside one driver group at the end, so that the pool's own group
// calls never nest inside a function's. All ranks of a session run on its one executor thread, so
// a send whose receive is not in the same group could never be matched: NCCL would wait for it
// for ever (a GPU stream holds the send; NVIDIA's ncclGroupEnd connects the two ranks first).
// Sends and receives are therefore served only inside a group, and at its end every send must
// meet its receive (by communicator, peer and order of issue, with the same count and datatype);
// otherwise nothing of the group runs and the group's end answers ncclInvalidUsage, as it does
// when any call of the group was refused (NCCL discards a group with an error).
#include <fmt/format.h>

#include <cstring>
#include <map>
#include <tuple>

#include "phos/base/log.h"
#include "phos/ipc/nccl_types.h"
#include "phos/runtime/speculation.h"
#include "session.h"

namespace phos::runtime {
namespace {

CUresult Answer(ncclResult_t r) {
  return static_cast<CUresult>(r);
}

// Most reductions one rank may hold at once: each is a driver object until destroyed.
constexpr size_t kMaxRedOpsPerRank = 1024;

const char* KindName(ipc::NcclCollectiveKind kind) {
  switch (kind) {
    case ipc::NcclCollectiveKind::kAllReduce:
      return "ncclAllReduce";
    case ipc::NcclCollectiveKind::kBroadcast:
      return "ncclBroadcast";
    case ipc::NcclCollectiveKind::kAllGather:
      return "ncclAllGather";
    case ipc::NcclCollectiveKind::kReduceScatter:
      return "ncclReduceScatter";
    case ipc::NcclCollectiveKind::kReduce:
      return "ncclReduce";
  }
  return "an NCCL collective";
}

}  // namespace

CUresult Session::NcclGroupStart(const NoArgs&, const Call&) {
  ++nccl_group_depth_;
  return CUDA_SUCCESS;
}

CUresult Session::NcclGroupEnd(const NoArgs&, const Call&) {
  if (nccl_group_depth_ == 0) return CUDA_ERROR_INVALID_VALUE;
  if (--nccl_group_depth_ > 0) return CUDA_SUCCESS;
  return NcclFlushGroup() == ncclSuccess ? CUDA_SUCCESS : CUDA_ERROR_LAUNCH_FAILED;
}

CUresult Session::NcclGroupEndSync(const ipc::NcclGroupEndArgs& a, const Call& call) {
  if (nccl_group_depth_ == 0) {
    PHOS_LOG_EVERY_SEC(Warn, "runtime", 1, "pid {}: {} without ncclGroupStart", pid_, call.name);
    return Answer(ncclInvalidUsage);
  }
  // The frontend refused a call of the group: NCCL runs none of it. Any other number the peer
  // sends refuses it too.
  if (a.refused != ncclSuccess)
    PoisonGroup(a.refused > 0 && a.refused < ncclNumResults ? static_cast<ncclResult_t>(a.refused)
                                                            : ncclInvalidUsage);
  if (--nccl_group_depth_ > 0) return Answer(ncclSuccess);
  return Answer(NcclFlushGroup());
}

bool Session::QueueNccl(NcclQueued q, const char* what) {
  if (nccl_queued_.size() >= kMaxQueuedNcclCalls) {
    PHOS_LOG_EVERY_SEC(Warn, "runtime", 1, "pid {}: {} refused: the group holds {} calls, phos's most", pid_,
                       what, nccl_queued_.size());
    PoisonGroup(ncclInvalidUsage);
    return false;
  }
  nccl_queued_.push_back(std::move(q));
  return true;
}

std::string Session::NcclQueuedProblem(const NcclQueued& q) const {
  for (const auto& [vid, comm] : q.needs) {
    auto it = comms_.find(vid);
    if (it == comms_.end() || it->second.comm != comm) {
      return fmt::format("communicator {:#x} was destroyed or aborted before the group's end", vid);
    }
    if (it->second.finalized)
      return fmt::format("communicator {:#x} was finalized before the group's end", vid);
  }
  for (const auto& [ptr, bytes] : q.ranges) {
    if (!buffers_.Check(ptr, bytes, "NCCL buffer").ok()) {
      return fmt::format("device memory {:#x} ({} bytes) was freed before the group's end", ptr, bytes);
    }
  }
  return "";
}

std::string Session::NcclGroupProblem(const std::vector<NcclQueued>& queued) const {
  // By (clique, sender, receiver): the sends and the receives, in the order they were issued.
  std::map<std::tuple<uint64_t, int, int>,
           std::pair<std::vector<const NcclQueued*>, std::vector<const NcclQueued*>>>
      channels;
  for (const NcclQueued& q : queued) {
    if (std::string problem = NcclQueuedProblem(q); !problem.empty()) return problem;
    if (!q.p2p) continue;
    auto& [sends, receives] =
        channels[q.send ? std::tuple{q.clique, q.rank, q.peer} : std::tuple{q.clique, q.peer, q.rank}];
    (q.send ? sends : receives).push_back(&q);
  }
  for (const auto& [channel, ends] : channels) {
    const auto& [clique, from, to] = channel;
    const auto& [sends, receives] = ends;
    if (sends.size() != receives.size()) {
      return fmt::format(
          "rank {} sends {} time(s) to rank {}, which receives {} time(s) from it in the group", from,
          sends.size(), to, receives.size());
    }
    for (size_t k = 0; k < sends.size(); ++k) {
      if (sends[k]->count != receives[k]->count || sends[k]->datatype != receives[k]->datatype) {
        return fmt::format(
            "rank {}'s send #{} to rank {} is {} elements of datatype {}, the receive {} of datatype {}",
            from, k, to, sends[k]->count, sends[k]->datatype, receives[k]->count, receives[k]->datatype);
      }
    }
  }
  return "";
}

ncclResult_t Session::NcclFlushGroup() {
  std::vector<NcclQueued> queued = std::move(nccl_queued_);
  nccl_queued_.clear();
  const ncclResult_t refused = std::exchange(nccl_group_error_, ncclSuccess);
  if (refused != ncclSuccess) {
    PHOS_LOG_EVERY_SEC(Warn, "runtime", 1,
                       "pid {}: NCCL group of {} calls refused whole: a call of it was refused", pid_,
                       queued.size());
    return refused;
  }
  if (queued.empty()) return ncclSuccess;
  if (std::string problem = NcclGroupProblem(queued); !problem.empty()) {
    PHOS_LOG_EVERY_SEC(Warn, "runtime", 1, "pid {}: NCCL group of {} calls refused whole: {}", pid_,
                       queued.size(), problem);
    return ncclInvalidUsage;
  }
  ncclResult_t r = driver_->ncclGroupStart();
  for (NcclQueued& q : queued) {
    if (r != ncclSuccess) break;
    r = q.run();
  }
  ncclResult_t end = driver_->ncclGroupEnd();
  if (r == ncclSuccess) r = end;
  if (r != ncclSuccess) {
    PHOS_LOG_EVERY_SEC(Warn, "runtime", 1, "pid {}: NCCL group failed: {}", pid_, ctxpool::NcclResultName(r));
  }
  return r;
}

void Session::CountCollective(const NcclComm& comm) {
  NcclClique& clique = CliqueOf(comm.clique, comm.nranks);
  ++clique.collectives[comm.rank];
}

CUresult Session::NcclCollective(const ipc::NcclCollectiveArgs& a, const Call& call) {
  // A refusal inside a group refuses the group: its other ranks' parts must not run alone.
  auto refuse = [this](CUresult r) {
    PoisonGroup(ncclInvalidArgument);
    return r;
  };
  auto it = comms_.find(a.comm);
  if (it == comms_.end() || it->second.comm == nullptr) return refuse(CUDA_ERROR_INVALID_HANDLE);
  const uint64_t vid = a.comm;
  const NcclComm comm = it->second;
  const auto kind = static_cast<ipc::NcclCollectiveKind>(a.kind);
  const uint64_t elem = ipc::NcclTypeBytes(a.datatype);
  if (comm.finalized || elem == 0 || a.kind < 0 ||
      a.kind > static_cast<int32_t>(ipc::NcclCollectiveKind::kReduce)) {
    return refuse(CUDA_ERROR_INVALID_VALUE);
  }
  const bool rooted = kind == ipc::NcclCollectiveKind::kBroadcast || kind == ipc::NcclCollectiveKind::kReduce;
  if (rooted && (a.root < 0 || a.root >= comm.nranks)) return refuse(CUDA_ERROR_INVALID_VALUE);
  // A peer's number must not reach the driver as an operation: a built-in one, or one it made.
  NcclOperands operands = NcclCollectiveOperands(a, elem, comm.nranks, comm.rank);
  if (ipc::NcclReduces(a.kind) && !ipc::NcclBuiltInOp(a.op)) {
    auto op = comm.ops.find(a.op);
    if (op == comm.ops.end() || op->second.datatype != a.datatype) {
      PHOS_LOG_EVERY_SEC(Warn, "runtime", 1,
                         "pid {}: {} refused: op {} was not made on the communicator for datatype {}", pid_,
                         KindName(kind), a.op, a.datatype);
      return refuse(CUDA_ERROR_INVALID_VALUE);
    }
    if (op->second.device_scalar != 0) operands.scalar = {op->second.device_scalar, elem, true};
  }
  // count comes from the peer: a product that overflows would shrink the extents checked below.
  if (operands.overflow) {
    PHOS_LOG_EVERY_SEC(Warn, "runtime", 1, "pid {}: {} of {} elements refused: the size overflows", pid_,
                       KindName(kind), a.count);
    return refuse(CUDA_ERROR_INVALID_VALUE);
  }
  if ((operands.send.bytes != 0 && !Owns(a.send, operands.send.bytes, "NCCL send buffer")) ||
      (operands.recv.bytes != 0 && !Owns(a.recv, operands.recv.bytes, "NCCL receive buffer")) ||
      (operands.scalar.bytes != 0 &&
       !Owns(operands.scalar.ptr, operands.scalar.bytes, "NCCL reduction scalar"))) {
    return refuse(CUDA_ERROR_INVALID_VALUE);
  }
  // A stream of another device than the communicator's would run the collective on the wrong GPU.
  int stream_device = HandleDevice(a.stream);
  if (stream_device < 0) stream_device = comm.device;  // the default stream: the communicator's device's
  Result<CUstream> stream = StreamOf(a.stream);
  if (!stream.ok() || stream_device != comm.device) return refuse(CUDA_ERROR_INVALID_HANDLE);
  auto run = [this, a, comm, kind, stream = *stream]() {
    if (Result<CUcontext> ctx = ContextOn(comm.device); ctx.ok()) driver_->cuCtxSetCurrent(*ctx);
    auto s = reinterpret_cast<cudaStream_t>(stream);
    auto type = static_cast<ncclDataType_t>(a.datatype);
    auto op = static_cast<ncclRedOp_t>(a.op);
    const void* send = reinterpret_cast<const void*>(a.send);
    void* recv = reinterpret_cast<void*>(a.recv);
    ncclResult_t r = ncclInvalidArgument;
    switch (kind) {
      case ipc::NcclCollectiveKind::kAllReduce:
        r = driver_->ncclAllReduce(send, recv, a.count, type, op, comm.comm, s);
        break;
      case ipc::NcclCollectiveKind::kBroadcast:
        r = driver_->ncclBroadcast(send, recv, a.count, type, a.root, comm.comm, s);
        break;
      case ipc::NcclCollectiveKind::kAllGather:
        r = driver_->ncclAllGather(send, recv, a.count, type, comm.comm, s);
        break;
      case ipc::NcclCollectiveKind::kReduceScatter:
        r = driver_->ncclReduceScatter(send, recv, a.count, type, op, comm.comm, s);
        break;
      case ipc::NcclCollectiveKind::kReduce:
        r = driver_->ncclReduce(send, recv, a.count, type, op, a.root, comm.comm, s);
        break;
    }
    if (r == ncclSuccess) CountCollective(comm);
    return r;
  };
  if (nccl_group_depth_ > 0) {
    NcclQueued q{.run = std::move(run), .needs = {{vid, comm.comm}}};
    for (const OperandRange& range : {operands.send, operands.recv, operands.scalar}) {
      if (range.bytes != 0) q.ranges.emplace_back(range.ptr, range.bytes);
    }
    return QueueNccl(std::move(q), call.name) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  }
  ncclResult_t r = run();
  if (r != ncclSuccess) {
    PHOS_LOG_EVERY_SEC(Warn, "runtime", 1, "pid {}: {} failed: {}", pid_, KindName(kind),
                       ctxpool::NcclResultName(r));
  }
  return r == ncclSuccess ? CUDA_SUCCESS : CUDA_ERROR_LAUNCH_FAILED;
}

CUresult Session::NcclSend(const ipc::NcclP2pArgs& a, const Call& call) {
  return NcclPointToPoint(a, true, call);
}

CUresult Session::NcclRecv(const ipc::NcclP2pArgs& a, const Call& call) {
  return NcclPointToPoint(a, false, call);
}

CUresult Session::NcclPointToPoint(const ipc::NcclP2pArgs& a, bool send, const Call& call) {
  auto refuse = [this](CUresult r) {
    PoisonGroup(ncclInvalidArgument);
    return r;
  };
  if (nccl_group_depth_ == 0) {
    PHOS_LOG_EVERY_SEC(
        Warn, "runtime", 1,
        "pid {}: {} outside ncclGroupStart/End refused: the session's ranks run on one thread, so "
        "its other end can only be in the same group",
        pid_, call.name);
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto it = comms_.find(a.comm);
  if (it == comms_.end() || it->second.comm == nullptr) return refuse(CUDA_ERROR_INVALID_HANDLE);
  const NcclComm comm = it->second;
  const uint64_t elem = ipc::NcclTypeBytes(a.datatype);
  if (comm.finalized || elem == 0 || a.peer < 0 || a.peer >= comm.nranks)
    return refuse(CUDA_ERROR_INVALID_VALUE);
  const NcclOperands operands = NcclPointToPointOperands(a, send, elem);
  const OperandRange& buffer = send ? operands.send : operands.recv;
  if (operands.overflow) {
    PHOS_LOG_EVERY_SEC(Warn, "runtime", 1, "pid {}: {} of {} elements refused: the size overflows", pid_,
                       call.name, a.count);
    return refuse(CUDA_ERROR_INVALID_VALUE);
  }
  if (buffer.bytes != 0 && !Owns(a.buffer, buffer.bytes, send ? "NCCL send buffer" : "NCCL receive buffer")) {
    return refuse(CUDA_ERROR_INVALID_VALUE);
  }
  int stream_device = HandleDevice(a.stream);
  if (stream_device < 0) stream_device = comm.device;
  Result<CUstream> stream = StreamOf(a.stream);
  if (!stream.ok() || stream_device != comm.device) return refuse(CUDA_ERROR_INVALID_HANDLE);
  auto run = [this, a, send, comm, stream = *stream]() {
    if (Result<CUcontext> ctx = ContextOn(comm.device); ctx.ok()) driver_->cuCtxSetCurrent(*ctx);
    auto s = reinterpret_cast<cudaStream_t>(stream);
    auto type = static_cast<ncclDataType_t>(a.datatype);
    void* buffer = reinterpret_cast<void*>(a.buffer);
    return send ? driver_->ncclSend(buffer, a.count, type, a.peer, comm.comm, s)
                : driver_->ncclRecv(buffer, a.count, type, a.peer, comm.comm, s);
  };
  NcclQueued q{.run = std::move(run),
               .needs = {{a.comm, comm.comm}},
               .ranges = {},
               .p2p = true,
               .send = send,
               .clique = comm.clique,
               .rank = comm.rank,
               .peer = a.peer,
               .count = a.count,
               .datatype = a.datatype};
  if (buffer.bytes != 0) q.ranges.emplace_back(a.buffer, buffer.bytes);
  return QueueNccl(std::move(q), call.name) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult Session::NcclRedOpCreate(const ipc::NcclRedOpArgs& a, const Call& call) {
  auto it = comms_.find(a.comm);
  if (it == comms_.end() || it->second.comm == nullptr) return Answer(ncclInvalidArgument);
  NcclComm& comm = it->second;
  const uint64_t elem = ipc::NcclTypeBytes(a.datatype);
  if (elem == 0) return Answer(ncclInvalidArgument);
  if (comm.ops.size() >= kMaxRedOpsPerRank) {
    PHOS_LOG_EVERY_SEC(Warn, "runtime", 1, "pid {}: {} refused: the rank holds {} reductions, phos's most",
                       pid_, call.name, comm.ops.size());
    return Answer(ncclSystemError);
  }
  // The immediate scalar's bytes travel in the record: NCCL reads them before the call returns.
  uint64_t immediate = a.scalar;
  void* scalar = &immediate;
  if (a.residence == ncclScalarDevice) {
    if (!Owns(a.scalar, elem, "NCCL reduction scalar")) return Answer(ncclInvalidArgument);
    scalar = reinterpret_cast<void*>(a.scalar);
  } else if (a.residence != ncclScalarHostImmediate) {
    return Answer(ncclInvalidArgument);
  }
  if (Result<CUcontext> ctx = ContextOn(comm.device); ctx.ok()) driver_->cuCtxSetCurrent(*ctx);
  ncclRedOp_t op = ncclSum;
  ncclResult_t r =
      driver_->ncclRedOpCreatePreMulSum(&op, scalar, static_cast<ncclDataType_t>(a.datatype),
                                        static_cast<ncclScalarResidence_t>(a.residence), comm.comm);
  if (r != ncclSuccess) return Answer(r);
  comm.ops[op] =
      NcclRedOp{.datatype = a.datatype, .device_scalar = a.residence == ncclScalarDevice ? a.scalar : 0};
  call.Reply(int32_t{op});
  return Answer(ncclSuccess);
}

// NCCL lets an op be destroyed once the calls given it returned, a group's calls included: inside
// a group the destroy follows the group's calls into the driver.
CUresult Session::NcclRedOpDestroy(const ipc::NcclRedOpArgs& a, const Call& call) {
  auto it = comms_.find(a.comm);
  if (it == comms_.end() || it->second.comm == nullptr) return Answer(ncclInvalidArgument);
  NcclComm& comm = it->second;
  if (comm.ops.erase(a.op) == 0) return Answer(ncclInvalidArgument);
  auto destroy = [this, op = static_cast<ncclRedOp_t>(a.op), driver_comm = comm.comm]() {
    return driver_->ncclRedOpDestroy(op, driver_comm);
  };
  if (nccl_group_depth_ > 0) {
    return Answer(QueueNccl({.run = std::move(destroy), .needs = {{a.comm, comm.comm}}}, call.name)
                      ? ncclSuccess
                      : ncclInvalidUsage);
  }
  return Answer(destroy());
}

}  // namespace phos::runtime
