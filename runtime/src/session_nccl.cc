// The NCCL calls of a session. Only device group sessions (the function declared gpus > 1) have
// communicators: a function's ncclCommInitAll / ncclCommInitRank never creates one, it is given
// the ranks of the group's communicator, created over the group's contexts before the function
// asked (or, for a subset or another order of the devices, a split of it, destroyed with the
// function's ncclCommDestroy or at the end). Communicators are virtual ids; ncclCommInitRank
// calls of one unique id form a rendezvous completed when the last rank arrived (all ranks live in
// this one session).
// Group calls are kept here: collectives and splits issued between ncclGroupStart and the
// matching ncclGroupEnd are queued and run inside one driver group at the end, so that the pool's
// own group calls never nest inside a function's.
#include <algorithm>
#include <cstring>
#include <functional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "phos/base/log.h"
#include "phos/ipc/nccl_types.h"
#include "session.h"

namespace phos::runtime {
namespace {

ncclResult_t FromStatus(const Status& s) {
  if (s.ok()) return ncclSuccess;
  return s.code() == StatusCode::kInvalidArgument ? ncclInvalidArgument : ncclInternalError;
}

CUresult Answer(ncclResult_t r) { return static_cast<CUresult>(r); }

}  // namespace

CUresult Session::NcclCount(const ipc::HandleArgs& a, const Call& call) {
  auto it = comms_.find(a.handle);
  if (it == comms_.end() || it->second.comm == nullptr) return Answer(ncclInvalidArgument);
  int v = 0;
  ncclResult_t r = driver_->ncclCommCount(it->second.comm, &v);
  call.Reply(int32_t{v});
  return Answer(r);
}

CUresult Session::NcclUserRank(const ipc::HandleArgs& a, const Call& call) {
  auto it = comms_.find(a.handle);
  if (it == comms_.end() || it->second.comm == nullptr) return Answer(ncclInvalidArgument);
  int v = 0;
  ncclResult_t r = driver_->ncclCommUserRank(it->second.comm, &v);
  call.Reply(int32_t{v});
  return Answer(r);
}

CUresult Session::NcclGroupStart(const NoArgs&, const Call&) {
  ++nccl_group_depth_;
  return CUDA_SUCCESS;
}

CUresult Session::NcclGroupEnd(const NoArgs&, const Call&) {
  if (nccl_group_depth_ == 0) return CUDA_ERROR_INVALID_VALUE;
  if (--nccl_group_depth_ > 0) return CUDA_SUCCESS;
  return NcclFlushGroup() == ncclSuccess ? CUDA_SUCCESS : CUDA_ERROR_LAUNCH_FAILED;
}

Status Session::GroupComms(const std::vector<int>& devices, std::vector<uint64_t>* vids) {
  const int size = group_->size();
  std::vector<int> position(size, -1);
  for (size_t i = 0; i < devices.size(); ++i) {
    int d = devices[i];
    if (d < 0 || d >= size) return Status::InvalidArgument(fmt::format("device {} is not one of the session's {}", d, size));
    if (position[d] != -1) return Status::InvalidArgument(fmt::format("device {} listed twice", d));
    position[d] = static_cast<int>(i);
  }
  bool whole = static_cast<int>(devices.size()) == size;
  for (int i = 0; whole && i < size; ++i) whole = devices[i] == i;
  std::vector<ncclComm_t> comms(devices.size(), nullptr);
  if (whole) {
    for (int rank = 0; rank < size; ++rank) comms[rank] = group_->comm(rank);
  } else {
    // ncclCommSplit is collective over the group: every rank takes part, those outside with
    // NCCL_SPLIT_NOCOLOR; key = position in `devices` orders the new ranks. Each split rank stays
    // in its parent's context.
    std::vector<ncclComm_t> out(size, nullptr);
    ncclResult_t r = driver_->ncclGroupStart();
    for (int rank = 0; r == ncclSuccess && rank < size; ++rank) {
      driver_->cuCtxSetCurrent(group_->context(rank));
      int color = position[rank] < 0 ? NCCL_SPLIT_NOCOLOR : 0;
      r = driver_->ncclCommSplit(group_->comm(rank), color, std::max(position[rank], 0), &out[rank], nullptr);
    }
    ncclResult_t end = driver_->ncclGroupEnd();
    if (r == ncclSuccess) r = end;
    for (int rank = 0; rank < size; ++rank) {
      if (position[rank] >= 0) comms[position[rank]] = out[rank];
    }
    if (r != ncclSuccess) {
      for (ncclComm_t c : comms) {
        if (c != nullptr) driver_->ncclCommDestroy(c);
      }
      return Status::DeviceError("ncclCommSplit of the device group's communicator: " + ctxpool::NcclResultName(r));
    }
  }
  vids->resize(devices.size());
  for (size_t rank = 0; rank < devices.size(); ++rank) {
    uint64_t vid = (*vids)[rank] != 0 ? (*vids)[rank] : NewHandle();
    comms_[vid] = NcclComm{comms[rank], devices[rank], !whole};
    (*vids)[rank] = vid;
  }
  return Status::Ok();
}

CUresult Session::NcclInitAll(const ipc::NcclInitAllArgs& a, const Call& call) {
  if (a.ndev <= 0 || a.ndev > ipc::kMaxNcclRanks) return Answer(ncclInvalidArgument);
  if (!HandleRoom(call.name)) return Answer(ncclSystemError);
  std::vector<int> devices(a.devices, a.devices + a.ndev);
  std::vector<uint64_t> vids;
  if (Status s = GroupComms(devices, &vids); !s.ok()) {
    PHOS_LOG_EVERY_SEC(Warn, "runtime", 1, "pid {}: {} refused: {}", pid_, call.name, s.message());
    return Answer(FromStatus(s));
  }
  std::memcpy(call.reply, vids.data(), vids.size() * sizeof(uint64_t));
  *call.reply_len = vids.size() * sizeof(uint64_t);
  return CUDA_SUCCESS;
}

CUresult Session::NcclInitRank(const ipc::NcclInitRankArgs& a, const Call& call) {
  if (a.nranks <= 0 || a.nranks > ipc::kMaxNcclRanks || a.rank < 0 || a.rank >= a.nranks)
    return Answer(ncclInvalidArgument);
  // The wire allows phos's limit; the session has the devices of its group.
  if (a.nranks > group_->size()) {
    PHOS_LOG_EVERY_SEC(Warn, "runtime", 1, "pid {}: {} of {} ranks refused: the session has {} devices", pid_,
                       call.name, a.nranks, group_->size());
    return Answer(ncclInvalidArgument);
  }
  if (!HandleRoom(call.name)) return Answer(ncclSystemError);
  std::string key(reinterpret_cast<const char*>(a.id), sizeof(a.id));
  NcclRendezvous& rv = rendezvous_[key];
  if (rv.devices.empty()) {
    rv.devices.assign(a.nranks, -1);
    rv.comms.assign(a.nranks, 0);
  }
  if (static_cast<int>(rv.devices.size()) != a.nranks || rv.devices[a.rank] != -1) {
    PHOS_LOG_EVERY_SEC(Warn, "runtime", 1,
                       "pid {}: {}: rank {} of {} does not fit its unique id's rendezvous", pid_, call.name,
                       a.rank, a.nranks);
    return Answer(ncclInvalidUsage);
  }
  // The rank lives on the caller's current device, as NCCL takes it from cudaGetDevice.
  rv.devices[a.rank] = device_;
  uint64_t vid = NewHandle();
  rv.comms[a.rank] = vid;
  comms_[vid] = NcclComm{nullptr, device_, false};
  call.Reply(vid);
  for (int d : rv.devices) {
    if (d == -1) return CUDA_SUCCESS;  // more ranks to come
  }
  NcclRendezvous done = std::move(rv);
  rendezvous_.erase(key);
  if (Status s = GroupComms(done.devices, &done.comms); !s.ok()) {
    PHOS_LOG_EVERY_SEC(Warn, "runtime", 1, "pid {}: {} refused: {}", pid_, call.name, s.message());
    for (uint64_t c : done.comms) comms_.erase(c);
    return Answer(FromStatus(s));
  }
  return CUDA_SUCCESS;
}

CUresult Session::NcclSplit(const ipc::NcclSplitArgs& a, const Call& call) {
  auto it = comms_.find(a.comm);
  if (it == comms_.end() || it->second.comm == nullptr) return Answer(ncclInvalidArgument);
  if (!HandleRoom(call.name)) return Answer(ncclSystemError);
  ncclComm_t parent = it->second.comm;
  int device = it->second.device;
  uint64_t vid = a.color == NCCL_SPLIT_NOCOLOR ? 0 : NewHandle();
  if (vid != 0) comms_[vid] = NcclComm{nullptr, device, true};
  auto split = [this, parent, device, vid, color = a.color, key = a.key]() {
    if (Result<CUcontext> ctx = ContextOn(device); ctx.ok()) driver_->cuCtxSetCurrent(*ctx);
    ncclComm_t out = nullptr;
    ncclResult_t r = driver_->ncclCommSplit(parent, color, key, &out, nullptr);
    if (vid != 0) {
      if (r == ncclSuccess) {
        comms_[vid].comm = out;
      } else {
        comms_.erase(vid);
      }
    }
    return r;
  };
  call.Reply(vid);
  if (nccl_group_depth_ > 0) {
    nccl_queued_.push_back(std::move(split));
    return CUDA_SUCCESS;
  }
  return Answer(split());
}

CUresult Session::NcclDestroy(const ipc::HandleArgs& a, const Call&) {
  auto it = comms_.find(a.handle);
  if (it == comms_.end()) return Answer(ncclInvalidArgument);
  NcclComm comm = it->second;
  comms_.erase(it);
  // A rank of the group's own communicator stays with the group (scrubbed with it); a split, or a
  // rank of a rendezvous that never completed (null), is the function's.
  if (comm.owned && comm.comm != nullptr) return Answer(driver_->ncclCommDestroy(comm.comm));
  return CUDA_SUCCESS;
}

CUresult Session::NcclCollective(const ipc::NcclCollectiveArgs& a, const Call& call) {
  auto it = comms_.find(a.comm);
  if (it == comms_.end() || it->second.comm == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  NcclComm comm = it->second;
  size_t elem = ipc::NcclTypeBytes(a.datatype);
  if (elem == 0 || a.root < 0) return CUDA_ERROR_INVALID_VALUE;
  // A peer's number must not reach the driver as an operation.
  if (!ipc::NcclReductionAllowed(a.kind, a.op)) return CUDA_ERROR_INVALID_VALUE;
  int nranks = 0, rank = 0;
  if (driver_->ncclCommCount(comm.comm, &nranks) != ncclSuccess || driver_->ncclCommUserRank(comm.comm, &rank) != ncclSuccess) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  auto kind = static_cast<ipc::NcclCollectiveKind>(a.kind);
  // count comes from the peer: a product that overflows would shrink the extents checked below.
  uint64_t bytes = 0, all_ranks = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(a.count), elem, &bytes) ||
      __builtin_mul_overflow(bytes, static_cast<uint64_t>(nranks), &all_ranks)) {
    PHOS_LOG_EVERY_SEC(Warn, "runtime", 1, "pid {}: {} of {} elements refused: the size overflows", pid_,
                       call.name, a.count);
    return CUDA_ERROR_INVALID_VALUE;
  }
  uint64_t send_bytes = bytes, recv_bytes = bytes;
  switch (kind) {
    case ipc::NcclCollectiveKind::kAllReduce:
      break;
    case ipc::NcclCollectiveKind::kBroadcast:
      if (rank != a.root) send_bytes = 0;  // NCCL reads the send buffer on the root only
      break;
    case ipc::NcclCollectiveKind::kAllGather: recv_bytes = all_ranks; break;
    case ipc::NcclCollectiveKind::kReduceScatter: send_bytes = all_ranks; break;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  if ((send_bytes != 0 && !Owns(a.send, send_bytes, "NCCL send buffer")) ||
      (recv_bytes != 0 && !Owns(a.recv, recv_bytes, "NCCL receive buffer"))) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // A stream of another device than the communicator's would run the collective on the wrong GPU.
  int stream_device = HandleDevice(a.stream);
  if (stream_device < 0) stream_device = comm.device;  // the default stream: the communicator's device's
  Result<CUstream> stream = StreamOf(a.stream);
  if (!stream.ok() || stream_device != comm.device) return CUDA_ERROR_INVALID_HANDLE;
  auto enqueue = [this, a, comm, kind, stream = *stream]() {
    if (Result<CUcontext> ctx = ContextOn(comm.device); ctx.ok()) driver_->cuCtxSetCurrent(*ctx);
    auto s = reinterpret_cast<cudaStream_t>(stream);
    auto type = static_cast<ncclDataType_t>(a.datatype);
    auto op = static_cast<ncclRedOp_t>(a.op);
    const void* send = reinterpret_cast<const void*>(a.send);
    void* recv = reinterpret_cast<void*>(a.recv);
    switch (kind) {
      case ipc::NcclCollectiveKind::kAllReduce: return driver_->ncclAllReduce(send, recv, a.count, type, op, comm.comm, s);
      case ipc::NcclCollectiveKind::kBroadcast: return driver_->ncclBroadcast(send, recv, a.count, type, a.root, comm.comm, s);
      case ipc::NcclCollectiveKind::kAllGather: return driver_->ncclAllGather(send, recv, a.count, type, comm.comm, s);
      case ipc::NcclCollectiveKind::kReduceScatter:
        return driver_->ncclReduceScatter(send, recv, a.count, type, op, comm.comm, s);
    }
    return ncclInvalidArgument;
  };
  auto run = [this, enqueue, comm]() {
    ncclResult_t r = enqueue();
    if (r == ncclSuccess) CountCollective(comm.comm);
    return r;
  };
  if (nccl_group_depth_ > 0) {
    nccl_queued_.push_back(std::move(run));
    return CUDA_SUCCESS;
  }
  ncclResult_t r = run();
  if (r != ncclSuccess) PHOS_LOG_EVERY_SEC(Warn, "runtime", 1, "pid {}: {} failed: {}", pid_, call.name, ctxpool::NcclResultName(r));
  return r == ncclSuccess ? CUDA_SUCCESS : CUDA_ERROR_LAUNCH_FAILED;
}

ncclResult_t Session::NcclFlushGroup() {
  std::vector<std::function<ncclResult_t()>> queued = std::move(nccl_queued_);
  nccl_queued_.clear();
  if (queued.empty()) return ncclSuccess;
  ncclResult_t r = driver_->ncclGroupStart();
  for (auto& call : queued) {
    if (r != ncclSuccess) break;
    r = call();
  }
  ncclResult_t end = driver_->ncclGroupEnd();
  if (r == ncclSuccess) r = end;
  if (r != ncclSuccess) PHOS_LOG_EVERY_SEC(Warn, "runtime", 1, "pid {}: NCCL group failed: {}", pid_, ctxpool::NcclResultName(r));
  return r;
}

void Session::CountCollective(ncclComm_t comm) {
  for (int rank = 0; rank < group_->size(); ++rank) {
    if (group_->comm(rank) != comm) continue;
    group_collectives_.resize(group_->size(), 0);
    ++group_collectives_[rank];
  }
}

void Session::ReleaseNccl() {
  if (!group_) return;  // only device group sessions have communicators
  // The function may have left a collective half-entered (some ranks called it, then the process
  // exited): the streams of the ranks that did would wait for the others for ever, and with them
  // this end and the group's scrub. Its own communicators are aborted (a collective that every
  // rank joined runs to its end regardless), and the group's too when its ranks did not call the
  // same number of collectives; only then are the contexts waited for.
  for (auto& [vid, c] : comms_) {
    if (c.owned && c.comm != nullptr) driver_->ncclCommAbort(c.comm);
  }
  const bool uneven = std::adjacent_find(group_collectives_.begin(), group_collectives_.end(),
                                         std::not_equal_to<>()) != group_collectives_.end();
  if (uneven) {
    PHOS_LOG_EVERY_SEC(Warn, "runtime", 1,
                       "pid {}: a collective was left half-entered ({} collectives by rank); device group {}'s "
                       "communicator is aborted and the group made anew",
                       pid_, fmt::join(group_collectives_, "/"), group_->group_id());
    for (int rank = 0; rank < group_->size(); ++rank) driver_->ncclCommAbort(group_->comm(rank));
    group_->ForgetCommunicator();
  }
  group_collectives_.clear();
  for (int d = 0; d < group_->size(); ++d) {
    driver_->cuCtxSetCurrent(group_->context(d));
    driver_->cuCtxSynchronize();
  }
  comms_.clear();
  rendezvous_.clear();
  nccl_queued_.clear();
}

}  // namespace phos::runtime
