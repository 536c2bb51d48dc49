#include "nccl/comm.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "nccl/collective.h"
#include "nccl/errors.h"
#include "nccl/p2p.h"

namespace phos::sim::nccl {
namespace {

// ncclUniqueId layout: magic, the creating process's pid, the id number; the rest zero.
constexpr char kIdMagic[8] = {'P', 'H', 'O', 'S', 'N', 'C', 'C', 'L'};
constexpr size_t kPidOffset = 8;
constexpr size_t kKeyOffset = 16;

double CommInitCost(const Binding& binding) {
  return binding.ctx.profile->nccl_comm_init_s;
}

}  // namespace

CommGroup::CommGroup(int n) : nranks(n), next_collective(n, 0), next_split(n, 0) {}

RankComm::~RankComm() {
  if (binding.primary_owner != nullptr) (void)binding.primary_owner->ReleasePrimaryContext(device());
}

ncclResult_t CommRegistry::NewUniqueId(ncclUniqueId* out) {
  if (out == nullptr) return Fail(ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
  std::memset(out->internal, 0, sizeof(out->internal));
  const uint64_t pid = static_cast<uint64_t>(getpid());
  const uint64_t key = ++next_id_;
  std::memcpy(out->internal, kIdMagic, sizeof(kIdMagic));
  std::memcpy(out->internal + kPidOffset, &pid, sizeof(pid));
  std::memcpy(out->internal + kKeyOffset, &key, sizeof(key));
  return ncclSuccess;
}

ncclComm_t CommRegistry::Insert(std::shared_ptr<RankComm> rank) {
  return handles_.Insert(std::move(rank));
}

ncclResult_t CommRegistry::FindAny(ncclComm_t comm, std::shared_ptr<RankComm>* out) const {
  if (comm == nullptr) return Fail(ncclInvalidArgument, "comm is NULL");
  std::shared_ptr<RankComm> found = handles_.Find(comm);
  if (!found) return Fail(ncclInvalidArgument, "comm is not a live communicator");
  *out = std::move(found);
  return ncclSuccess;
}

ncclResult_t CommRegistry::Find(ncclComm_t comm, std::shared_ptr<RankComm>* out) const {
  if (ncclResult_t r = FindAny(comm, out); r != ncclSuccess) return r;
  const Binding& b = (*out)->binding;
  if (!device_.IsLive(b.ctx)) {
    return Fail(ncclUnhandledCudaError, "the communicator's CUDA context was destroyed");
  }
  if (CUresult sticky = b.ctx.exec->sticky_error(); sticky != CUDA_SUCCESS) {
    return Fail(ncclUnhandledCudaError, fmt::format("the communicator's CUDA context failed (CUresult {})",
                                                    static_cast<int>(sticky)));
  }
  if ((*out)->finalized.load()) return Fail(ncclInvalidUsage, "the communicator was finalized");
  return ncclSuccess;
}

ncclResult_t CommRegistry::Destroy(ncclComm_t comm) {
  std::shared_ptr<RankComm> found;
  if (ncclResult_t r = FindAny(comm, &found); r != ncclSuccess) return r;
  handles_.Remove(comm);
  return ncclSuccess;
}

ncclResult_t CommRegistry::Finalize(ncclComm_t comm) {
  std::shared_ptr<RankComm> found;
  if (ncclResult_t r = FindAny(comm, &found); r != ncclSuccess) return r;
  if (found->finalized.exchange(true))
    return Fail(ncclInvalidArgument, "ncclCommFinalize: finalized already");
  return ncclSuccess;
}

ncclResult_t CommRegistry::Abort(ncclComm_t comm) {
  std::shared_ptr<RankComm> found;
  if (ncclResult_t r = FindAny(comm, &found); r != ncclSuccess) return r;
  CommGroup& group = *found->group;
  {
    std::lock_guard lock(mu_);
    bool gave_up = false;
    if (std::shared_ptr<Rendezvous> rv = found->creation.lock(); rv && !rv->complete) {
      rv->aborted = gave_up = true;
    }
    for (auto& [seq, rv] : group.open_splits) rv->aborted = gave_up = true;
    if (gave_up) joined_cv_.notify_all();
  }
  const size_t abandoned = AbandonCollectives(group) + AbandonTransfers(group);
  if (abandoned > 0) {
    ncclResult_t none = ncclSuccess;
    group.async_error.compare_exchange_strong(none, ncclRemoteError);
  }
  handles_.Remove(comm);
  return ncclSuccess;
}

ncclResult_t CommRegistry::BindPrimary(int device, Binding* out) {
  if (CUresult r = device_.RetainPrimaryContext(device, &out->ctx); r != CUDA_SUCCESS) {
    return Fail(ncclUnhandledCudaError, fmt::format("retaining the primary context of device {}: CUresult {}",
                                                    device, static_cast<int>(r)));
  }
  out->primary_owner = &device_;
  return ncclSuccess;
}

ncclResult_t CommRegistry::JoinInit(const ncclUniqueId& id, int nranks, int rank, ncclComm_t* comm,
                                    PendingJoin* pending) {
  if (comm == nullptr) return Fail(ncclInvalidArgument, "ncclCommInitRank: comm is NULL");
  if (nranks < 1) return Fail(ncclInvalidArgument, fmt::format("ncclCommInitRank: nranks {} < 1", nranks));
  if (rank < 0 || rank >= nranks) {
    return Fail(ncclInvalidArgument, fmt::format("ncclCommInitRank: rank {} outside [0, {})", rank, nranks));
  }
  if (std::memcmp(id.internal, kIdMagic, sizeof(kIdMagic)) != 0) {
    return Fail(ncclInvalidArgument, "ncclCommInitRank: commId was not made by ncclGetUniqueId");
  }
  uint64_t pid = 0;
  uint64_t key = 0;
  std::memcpy(&pid, id.internal + kPidOffset, sizeof(pid));
  std::memcpy(&key, id.internal + kKeyOffset, sizeof(key));
  if (pid != static_cast<uint64_t>(getpid())) {
    return Fail(ncclInvalidUsage,
                "ncclCommInitRank: commId comes from another process; simgpu models communicators whose "
                "ranks all live in one process");
  }
  if (key == 0 || key > next_id_.load()) {
    return Fail(ncclInvalidArgument, "ncclCommInitRank: commId was not made by ncclGetUniqueId");
  }
  auto rank_comm = std::make_shared<RankComm>();
  rank_comm->rank = rank;
  if (!device_.HasCurrentContext()) {
    if (ncclResult_t r = BindPrimary(0, &rank_comm->binding); r != ncclSuccess) return r;
  } else if (CUresult r = device_.CurrentContext(&rank_comm->binding.ctx); r != CUDA_SUCCESS) {
    return Fail(ncclUnhandledCudaError,
                fmt::format("ncclCommInitRank: current context unusable (CUresult {})", static_cast<int>(r)));
  }
  return JoinInitRank(key, nranks, std::move(rank_comm), comm, pending);
}

ncclResult_t CommRegistry::JoinInitRank(uint64_t key, int nranks, std::shared_ptr<RankComm> rank_comm,
                                        ncclComm_t* comm, PendingJoin* pending) {
  const int rank = rank_comm->rank;
  {
    std::lock_guard lock(mu_);
    std::shared_ptr<Rendezvous>& rv = inits_[key];
    if (!rv) {
      rv = std::make_shared<Rendezvous>(nranks);
      rv->group = std::make_shared<CommGroup>(nranks);
    }
    if (static_cast<int>(rv->members.size()) != nranks) {
      return Fail(ncclInvalidArgument,
                  fmt::format("ncclCommInitRank: nranks {} differs from the {} other ranks gave", nranks,
                              rv->members.size()));
    }
    if (rv->members[rank].joined) {
      return Fail(ncclInvalidArgument, fmt::format("ncclCommInitRank: rank {} joined twice", rank));
    }
    if (rv->aborted) return Fail(ncclSystemError, "ncclCommInitRank: another rank of the commId was aborted");
    rv->members[rank].joined = true;
    rank_comm->group = rv->group;
    rank_comm->creation = rv;
    pending->rendezvous = rv;
    pending->member = rank;
    pending->cost_s = CommInitCost(rank_comm->binding);
    if (++rv->joined == nranks) {
      rv->complete = true;
      inits_.erase(key);
      joined_cv_.notify_all();
    }
  }
  *comm = Insert(std::move(rank_comm));
  return ncclSuccess;
}

ncclResult_t CommRegistry::InitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  if (comms == nullptr) return Fail(ncclInvalidArgument, "ncclCommInitAll: comm is NULL");
  if (ndev < 1) return Fail(ncclInvalidArgument, fmt::format("ncclCommInitAll: ndev {} < 1", ndev));
  std::vector<int> devices(ndev);
  std::set<int> seen;
  for (int i = 0; i < ndev; ++i) {
    devices[i] = devlist == nullptr ? i : devlist[i];
    if (devices[i] < 0 || devices[i] >= device_.device_count()) {
      return Fail(ncclInvalidArgument, fmt::format("ncclCommInitAll: device {} does not exist ({} devices)",
                                                   devices[i], device_.device_count()));
    }
    if (!seen.insert(devices[i]).second) {
      return Fail(ncclInvalidUsage, fmt::format("ncclCommInitAll: device {} listed twice", devices[i]));
    }
  }
  ncclUniqueId id;
  if (ncclResult_t r = NewUniqueId(&id); r != ncclSuccess) return r;
  uint64_t key = 0;
  std::memcpy(&key, id.internal + kKeyOffset, sizeof(key));
  const int n = static_cast<int>(devices.size());
  std::vector<PendingJoin> joins(n);
  for (int i = 0; i < n; ++i) {
    auto rank_comm = std::make_shared<RankComm>();
    rank_comm->rank = i;
    ncclResult_t r = BindPrimary(devices[i], &rank_comm->binding);
    if (r == ncclSuccess) r = JoinInitRank(key, n, std::move(rank_comm), &comms[i], &joins[i]);
    if (r != ncclSuccess) {
      for (int j = 0; j < i; ++j) (void)Destroy(comms[j]);
      return r;
    }
  }
  return FinishJoins(joins);
}

ncclResult_t CommRegistry::JoinSplit(const std::shared_ptr<RankComm>& parent, int color, int key,
                                     ncclComm_t* newcomm, PendingJoin* pending) {
  if (newcomm == nullptr) return Fail(ncclInvalidArgument, "ncclCommSplit: newcomm is NULL");
  if (color < 0 && color != NCCL_SPLIT_NOCOLOR) {
    return Fail(ncclInvalidArgument, fmt::format("ncclCommSplit: color {} is negative", color));
  }
  *newcomm = nullptr;
  CommGroup& group = *parent->group;
  std::lock_guard lock(mu_);
  const uint64_t seq = group.next_split[parent->rank]++;
  std::shared_ptr<Rendezvous>& rv = group.open_splits[seq];
  if (!rv) rv = std::make_shared<Rendezvous>(group.nranks);
  if (rv->aborted) return Fail(ncclSystemError, "ncclCommSplit: a rank of the communicator was aborted");
  Rendezvous::Member& member = rv->members[parent->rank];
  member.joined = true;
  member.color = color;
  member.key = key;
  member.parent = parent;
  pending->rendezvous = rv;
  pending->member = parent->rank;
  pending->split_out = newcomm;
  pending->cost_s = CommInitCost(parent->binding);
  if (++rv->joined == group.nranks) {
    CompleteSplit(*rv);
    rv->complete = true;
    group.open_splits.erase(seq);
    joined_cv_.notify_all();
  }
  return ncclSuccess;
}

void CommRegistry::CompleteSplit(Rendezvous& rv) {
  std::map<int, std::vector<int>> by_color;  // parent ranks of each color
  for (int r = 0; r < static_cast<int>(rv.members.size()); ++r) {
    if (rv.members[r].color != NCCL_SPLIT_NOCOLOR) by_color[rv.members[r].color].push_back(r);
  }
  for (auto& [color, ranks] : by_color) {
    // New ranks in the order of the keys, ties broken by the old rank (NCCL's documented order).
    std::stable_sort(ranks.begin(), ranks.end(),
                     [&rv](int a, int b) { return rv.members[a].key < rv.members[b].key; });
    auto group = std::make_shared<CommGroup>(static_cast<int>(ranks.size()));
    for (int i = 0; i < static_cast<int>(ranks.size()); ++i) {
      const Binding& parent = rv.members[ranks[i]].parent->binding;
      auto rank_comm = std::make_shared<RankComm>();
      rank_comm->group = group;
      rank_comm->rank = i;
      rank_comm->binding.ctx = parent.ctx;
      // A rank holding the primary context holds its own reference, released with it.
      if (parent.primary_owner != nullptr) {
        ContextRef retained;
        if (device_.RetainPrimaryContext(parent.ctx.device, &retained) == CUDA_SUCCESS) {
          rank_comm->binding.primary_owner = &device_;
        }
      }
      rv.members[ranks[i]].result = std::move(rank_comm);
    }
  }
  for (Rendezvous::Member& m : rv.members) m.parent.reset();
}

ncclResult_t CommRegistry::FinishJoins(const std::vector<PendingJoin>& joins) {
  ncclResult_t result = ncclSuccess;
  double cost = 0;
  {
    std::unique_lock lock(mu_);
    const auto deadline = std::chrono::steady_clock::now() + kJoinTimeout;
    for (const PendingJoin& j : joins) {
      Rendezvous& rv = *j.rendezvous;
      ++join_waiters_;
      const bool ended = joined_cv_.wait_until(lock, deadline, [&rv] { return rv.complete || rv.aborted; });
      --join_waiters_;
      if (!ended) {
        result = Fail(ncclSystemError, fmt::format("communicator creation: {} of {} ranks joined within {} s",
                                                   rv.joined, rv.members.size(), kJoinTimeout.count()));
        continue;
      }
      if (!rv.complete) {
        result = Fail(ncclSystemError, fmt::format("communicator creation: a rank was aborted when {} of {} had joined",
                                                   rv.joined, rv.members.size()));
        continue;
      }
      cost = std::max(cost, j.cost_s);
      if (j.split_out != nullptr) {
        std::shared_ptr<RankComm> created = std::move(rv.members[j.member].result);
        *j.split_out = created ? Insert(std::move(created)) : nullptr;
      }
    }
  }
  if (result == ncclSuccess) device_.PayModelledCost(cost);
  return result;
}

int CommRegistry::join_waiters() const {
  std::lock_guard lock(mu_);
  return join_waiters_;
}

GroupState& ThreadGroup() {
  thread_local GroupState state;
  return state;
}

}  // namespace phos::sim::nccl
