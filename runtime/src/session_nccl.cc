// The NCCL communicators of a session. Only device group sessions (the function declared gpus > 1)
// have communicators: a function's ncclCommInitAll / ncclCommInitRank never creates one, it is
// given the ranks of the group's communicator, created over the group's contexts before the
// function asked (or, for a subset or another order of the devices, a split of it, destroyed with
// the function's ncclCommDestroy or at the end). Communicators are virtual ids; each belongs to a
// clique, the session's name for the communicator its ranks form.
//
// Every rank of every communicator lives in this one session and is driven by its one executor
// thread, so a call that NCCL would let block until the other ranks come (a rank of
// ncclCommInitRank, of ncclCommSplit) is never handed to the driver alone: the session holds it
// until the last rank's record arrived, then makes them all in one driver group. Likewise a rank
// whose collectives wait for ranks that have not called them yet is not finalized.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <functional>

#include "phos/base/log.h"
#include "phos/ipc/nccl_types.h"
#include "session.h"

namespace phos::runtime {
namespace {

ncclResult_t FromStatus(const Status& s) {
  if (s.ok()) return ncclSuccess;
  if (s.code() == StatusCode::kInvalidArgument) return ncclInvalidArgument;
  return s.code() == StatusCode::kFailedPrecondition ? ncclInvalidUsage : ncclInternalError;
}

CUresult Answer(ncclResult_t r) {
  return static_cast<CUresult>(r);
}

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

// The session's device ordinal, which is the function's (cudaSetDevice numbers the same devices).
CUresult Session::NcclCuDevice(const ipc::HandleArgs& a, const Call& call) {
  auto it = comms_.find(a.handle);
  if (it == comms_.end() || it->second.lost) return Answer(ncclInvalidArgument);
  call.Reply(int32_t{it->second.device});
  return Answer(ncclSuccess);
}

// A rank still being created is ncclInProgress, as NCCL reports a communicator whose
// initialisation has not completed.
CUresult Session::NcclGetAsyncError(const ipc::HandleArgs& a, const Call& call) {
  auto it = comms_.find(a.handle);
  if (it == comms_.end()) return Answer(ncclInvalidArgument);
  ncclResult_t state = ncclInProgress;
  if (it->second.lost) {
    state = it->second.lost_error;
  } else if (it->second.comm != nullptr) {
    if (ncclResult_t r = driver_->ncclCommGetAsyncError(it->second.comm, &state); r != ncclSuccess)
      return Answer(r);
  }
  call.Reply(int32_t{state});
  return Answer(ncclSuccess);
}

Session::NcclClique& Session::CliqueOf(uint64_t clique, int nranks) {
  NcclClique& c = cliques_[clique];
  if (static_cast<int>(c.collectives.size()) < nranks) {
    c.collectives.resize(nranks, 0);
    c.splits.resize(nranks, 0);
  }
  return c;
}

bool Session::HalfEntered(uint64_t clique, int rank) const {
  auto it = cliques_.find(clique);
  if (it == cliques_.end() || it->second.collectives.empty()) return false;
  const std::vector<uint64_t>& counts = it->second.collectives;
  const uint64_t fewest = *std::min_element(counts.begin(), counts.end());
  return rank < 0 ? fewest != *std::max_element(counts.begin(), counts.end()) : counts[rank] > fewest;
}

Status Session::GroupComms(const std::vector<int>& devices, std::vector<uint64_t>* vids) {
  const int size = group_->size();
  if (group_->comm(0) == nullptr) {
    return Status::FailedPrecondition("the device group's communicator was aborted in this session");
  }
  std::vector<int> position(size, -1);
  for (size_t i = 0; i < devices.size(); ++i) {
    int d = devices[i];
    if (d < 0 || d >= size)
      return Status::InvalidArgument(fmt::format("device {} is not one of the session's {}", d, size));
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
      return Status::DeviceError("ncclCommSplit of the device group's communicator: " +
                                 ctxpool::NcclResultName(r));
    }
  }
  const int nranks = static_cast<int>(devices.size());
  const uint64_t clique = whole ? kGroupClique : NewClique();
  CliqueOf(clique, nranks);
  vids->resize(devices.size());
  for (int rank = 0; rank < nranks; ++rank) {
    uint64_t vid = (*vids)[rank] != 0 ? (*vids)[rank] : NewHandle();
    comms_[vid] = NcclComm{.comm = comms[rank],
                           .device = devices[rank],
                           .owned = !whole,
                           .clique = clique,
                           .rank = rank,
                           .nranks = nranks};
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
  comms_[vid] = NcclComm{.device = device_};
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

// The k-th split of each rank of a communicator is one collective call: the new communicators are
// made once every rank made its k-th split, in one driver group (inside the function's group when
// one is open), whatever order and group the ranks' records came in.
CUresult Session::NcclSplit(const ipc::NcclSplitArgs& a, const Call& call) {
  auto it = comms_.find(a.comm);
  if (it == comms_.end() || it->second.comm == nullptr || it->second.lost) return Answer(ncclInvalidArgument);
  if (it->second.finalized) return Answer(ncclInvalidUsage);
  if (a.color < 0 && a.color != NCCL_SPLIT_NOCOLOR) return Answer(ncclInvalidArgument);
  if (!HandleRoom(call.name)) return Answer(ncclSystemError);
  const NcclComm parent = it->second;
  NcclClique& clique = CliqueOf(parent.clique, parent.nranks);
  const uint64_t number = clique.splits[parent.rank]++;
  uint64_t vid = 0;
  if (a.color != NCCL_SPLIT_NOCOLOR) {
    vid = NewHandle();
    uint64_t& made = clique.split_cliques[{number, a.color}];
    if (made == 0) made = NewClique();
    comms_[vid] = NcclComm{.device = parent.device, .owned = true, .clique = made};
  }
  call.Reply(vid);
  std::vector<NcclSplitMember>& members = clique.open_splits[number];
  members.resize(parent.nranks);
  members[parent.rank] = {.joined = true,
                          .color = a.color,
                          .key = a.key,
                          .vid = vid,
                          .parent_vid = a.comm,
                          .parent = parent.comm,
                          .device = parent.device};
  for (const NcclSplitMember& m : members) {
    if (!m.joined) return CUDA_SUCCESS;  // more ranks to come
  }
  std::vector<NcclSplitMember> all = std::move(members);
  clique.open_splits.erase(number);
  auto split = [this, all]() {
    std::vector<ncclComm_t> out(all.size(), nullptr);
    ncclResult_t r = driver_->ncclGroupStart();
    for (size_t i = 0; r == ncclSuccess && i < all.size(); ++i) {
      if (Result<CUcontext> ctx = ContextOn(all[i].device); ctx.ok()) driver_->cuCtxSetCurrent(*ctx);
      r = driver_->ncclCommSplit(all[i].parent, all[i].color, all[i].key, &out[i], nullptr);
    }
    ncclResult_t end = driver_->ncclGroupEnd();
    if (r == ncclSuccess) r = end;
    for (size_t i = 0; i < all.size(); ++i) {
      auto made = comms_.find(all[i].vid);
      if (r == ncclSuccess && made != comms_.end() && out[i] != nullptr) {
        made->second.comm = out[i];
        driver_->ncclCommUserRank(out[i], &made->second.rank);
        driver_->ncclCommCount(out[i], &made->second.nranks);
        CliqueOf(made->second.clique, made->second.nranks);
        continue;
      }
      if (out[i] != nullptr) driver_->ncclCommDestroy(out[i]);  // destroyed by the function meanwhile
      if (made != comms_.end()) comms_.erase(made);
    }
    return r;
  };
  NcclQueued q{.run = std::move(split)};
  for (const NcclSplitMember& m : all) q.needs.emplace_back(m.parent_vid, m.parent);
  if (nccl_group_depth_ > 0)
    return QueueNccl(std::move(q), call.name) ? CUDA_SUCCESS : Answer(ncclInvalidUsage);
  if (std::string problem = NcclQueuedProblem(q); !problem.empty()) {
    PHOS_LOG_EVERY_SEC(Warn, "runtime", 1, "pid {}: {} refused: {}", pid_, call.name, problem);
    for (const NcclSplitMember& m : all) comms_.erase(m.vid);
    return Answer(ncclInvalidUsage);
  }
  return Answer(q.run());
}

void Session::DestroyRedOps(NcclComm& comm) {
  for (const auto& [op, made] : comm.ops) driver_->ncclRedOpDestroy(static_cast<ncclRedOp_t>(op), comm.comm);
  comm.ops.clear();
}

// A rank of a communicator still being created (its other ranks have not called yet) cannot be
// destroyed or finalized: NCCL would wait for its creation. It can be aborted: its creation is
// given up, for every rank.
void Session::AbandonCreation(uint64_t vid) {
  for (auto it = rendezvous_.begin(); it != rendezvous_.end(); ++it) {
    if (std::find(it->second.comms.begin(), it->second.comms.end(), vid) == it->second.comms.end()) continue;
    for (uint64_t c : it->second.comms) comms_.erase(c);
    rendezvous_.erase(it);
    return;
  }
  for (auto& [id, clique] : cliques_) {
    for (auto s = clique.open_splits.begin(); s != clique.open_splits.end(); ++s) {
      auto member = std::find_if(s->second.begin(), s->second.end(),
                                 [vid](const NcclSplitMember& m) { return m.vid == vid; });
      if (member == s->second.end()) continue;
      for (const NcclSplitMember& m : s->second) comms_.erase(m.vid);
      clique.open_splits.erase(s);
      return;
    }
  }
  comms_.erase(vid);
}

CUresult Session::NcclDestroy(const ipc::HandleArgs& a, const Call& call) {
  auto it = comms_.find(a.handle);
  if (it == comms_.end()) return Answer(ncclInvalidArgument);
  NcclComm& comm = it->second;
  if (comm.comm == nullptr && !comm.lost) {
    PHOS_LOG_EVERY_SEC(Warn, "runtime", 1,
                       "pid {}: {} refused: the communicator's other ranks have not joined", pid_, call.name);
    return Answer(ncclInvalidUsage);
  }
  ncclResult_t r = ncclSuccess;
  if (comm.owned && comm.comm != nullptr) {
    // A rank whose collectives wait for the others would keep NCCL's destroy waiting for ever.
    if (HalfEntered(comm.clique, comm.rank)) {
      PHOS_LOG_EVERY_SEC(Warn, "runtime", 1,
                         "pid {}: {}: a collective of the rank was left half-entered; aborted", pid_,
                         call.name);
      r = driver_->ncclCommAbort(comm.comm);
    } else {
      r = driver_->ncclCommDestroy(comm.comm);
    }
  } else if (comm.comm != nullptr) {
    // A rank of the group's own communicator stays with the group, scrubbed with it.
    DestroyRedOps(comm);
  }
  comms_.erase(it);
  return Answer(r);
}

CUresult Session::NcclFinalize(const ipc::HandleArgs& a, const Call& call) {
  auto it = comms_.find(a.handle);
  if (it == comms_.end() || it->second.lost) return Answer(ncclInvalidArgument);
  NcclComm& comm = it->second;
  if (comm.comm == nullptr) return Answer(ncclInvalidUsage);  // still being created
  if (comm.finalized) return Answer(ncclInvalidArgument);     // NCCL refuses a second finalize
  if (HalfEntered(comm.clique, comm.rank)) {
    PHOS_LOG_EVERY_SEC(
        Warn, "runtime", 1,
        "pid {}: {} refused: the rank entered a collective its other ranks have not called, which "
        "finalizing would wait for",
        pid_, call.name);
    return Answer(ncclInvalidUsage);
  }
  // The group's own communicator serves the next tenant: only the function's view of it ends.
  if (comm.owned) {
    if (ncclResult_t r = driver_->ncclCommFinalize(comm.comm); r != ncclSuccess) return Answer(r);
  }
  comm.finalized = true;
  return Answer(ncclSuccess);
}

CUresult Session::NcclAbort(const ipc::HandleArgs& a, const Call& call) {
  auto it = comms_.find(a.handle);
  if (it == comms_.end()) return Answer(ncclInvalidArgument);
  NcclComm& comm = it->second;
  if (comm.comm == nullptr) {
    if (!comm.lost) AbandonCreation(a.handle);
    comms_.erase(a.handle);
    return Answer(ncclSuccess);
  }
  if (comm.owned) {
    ncclResult_t r = driver_->ncclCommAbort(comm.comm);
    comms_.erase(it);
    return Answer(r);
  }
  if (!HalfEntered(kGroupClique, -1)) {
    DestroyRedOps(comm);
    comms_.erase(it);
    return Answer(ncclSuccess);
  }
  // A collective of the group's communicator is half-entered: its ranks that entered it wait until
  // the communicator is aborted, every rank of it. The group is made anew after the session, and
  // the function's other ranks of it are lost.
  PHOS_LOG_EVERY_SEC(Warn, "runtime", 1, "pid {}: {}: device group {}'s communicator aborted", pid_,
                     call.name, group_->group_id());
  comms_.erase(it);
  AbortClique(kGroupClique, ncclInvalidUsage);
  return Answer(ncclSuccess);
}

void Session::AbortClique(uint64_t clique, ncclResult_t lost_error) {
  if (clique == kGroupClique) {
    // The pool destroys the group on its return and the refill makes it anew.
    for (int rank = 0; rank < group_->size(); ++rank) driver_->ncclCommAbort(group_->comm(rank));
    group_->ForgetCommunicator();
  }
  for (auto& [vid, c] : comms_) {
    if (c.clique != clique || c.comm == nullptr) continue;
    if (c.owned) driver_->ncclCommAbort(c.comm);
    c.comm = nullptr;
    c.lost = true;
    c.lost_error = lost_error;
    c.ops.clear();
  }
  cliques_.erase(clique);
}

int Session::AbortHalfEntered(const char* why) {
  std::vector<uint64_t> half;
  for (const auto& [id, clique] : cliques_) {
    if (HalfEntered(id, -1)) half.push_back(id);
  }
  for (uint64_t id : half) {
    PHOS_LOG_EVERY_SEC(Warn, "runtime", 1,
                       "pid {}: {}: a collective was left half-entered ({} collectives by rank); {} aborted",
                       pid_, why, fmt::join(cliques_[id].collectives, "/"),
                       id == kGroupClique ? fmt::format("device group {}'s communicator", group_->group_id())
                                          : std::string("a communicator the function split"));
    AbortClique(id, ncclSystemError);
  }
  return static_cast<int>(half.size());
}

void Session::ReleaseNccl() {
  if (!group_) return;  // only device group sessions have communicators
  std::unique_lock nccl = watch_.Lock();
  // What was half-entered when the session's end began is aborted already (~Session, before the
  // executor's join); the executor's last record may have left more. Only then are the contexts
  // waited for: the streams of the ranks that entered would wait for the others for ever.
  AbortHalfEntered("the session ended");
  for (auto& [vid, c] : comms_) {
    if (c.comm == nullptr) continue;
    if (c.owned) {
      // The function's own communicators go with it: aborted rather than destroyed, which does
      // nothing more to one whose collectives all ran.
      driver_->ncclCommAbort(c.comm);
    } else {
      // The reductions the function made on the group's ranks would outlive it in the pool.
      DestroyRedOps(c);
    }
  }
  for (int d = 0; d < group_->size(); ++d) {
    driver_->cuCtxSetCurrent(group_->context(d));
    driver_->cuCtxSynchronize();
  }
  comms_.clear();
  rendezvous_.clear();
  cliques_.clear();
  nccl_queued_.clear();
}

}  // namespace phos::runtime
