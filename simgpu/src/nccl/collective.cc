#include "nccl/collective.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <vector>

#include "nccl/comm.h"
#include "nccl/errors.h"
#include "nccl/red_op.h"
#include "nccl/reduce.h"
#include "phos/base/enum_value.h"
#include "phos/base/log.h"

namespace phos::sim::nccl {
namespace {

const char* KindName(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllReduce:
      return "ncclAllReduce";
    case CollectiveKind::kBroadcast:
      return "ncclBroadcast";
    case CollectiveKind::kAllGather:
      return "ncclAllGather";
    case CollectiveKind::kReduceScatter:
      return "ncclReduceScatter";
    case CollectiveKind::kReduce:
      return "ncclReduce";
  }
  return "collective";
}

bool Reduces(CollectiveKind kind) {
  return kind == CollectiveKind::kAllReduce || kind == CollectiveKind::kReduceScatter ||
         kind == CollectiveKind::kReduce;
}
bool Rooted(CollectiveKind kind) {
  return kind == CollectiveKind::kBroadcast || kind == CollectiveKind::kReduce;
}

// What ranks must agree on of an op: a built-in one, or "a pre-multiplied sum" (each rank names
// its own, with its own scalar).
constexpr int kPreMulSumClass = -1;
int OpClass(ncclRedOp_t op) {
  return op < ncclNumOps ? static_cast<int>(op) : kPreMulSumClass;
}

// Bytes of rank `rank`'s send and receive buffers the collective touches.
size_t SendBytes(const CollectiveArgs& a, int nranks, int rank, size_t elem) {
  switch (a.kind) {
    case CollectiveKind::kBroadcast:
      return rank == a.root ? a.count * elem : 0;  // other ranks' sendbuff is not read
    case CollectiveKind::kReduceScatter:
      return a.count * nranks * elem;
    default:
      return a.count * elem;
  }
}
size_t RecvBytes(const CollectiveArgs& a, int nranks, int rank, size_t elem) {
  switch (a.kind) {
    case CollectiveKind::kAllGather:
      return a.count * nranks * elem;
    case CollectiveKind::kReduce:
      return rank == a.root ? a.count * elem : 0;  // only the root receives
    default:
      return a.count * elem;
  }
}

}  // namespace

// One collective of a communicator: the ranks' buffers and gates, and the arrival count.
class Collective {
 public:
  struct Part {
    const void* send = nullptr;
    void* recv = nullptr;
    std::shared_ptr<HeldTask> gate;
    UserRedOp scaling;  // a pre-multiplied sum: this rank's scalar
  };

  Collective(DeviceAccess& device, const CollectiveArgs& args, int nranks)
      : device_(device), args_(args), nranks_(nranks), elem_(DataTypeSize(args.type)), parts_(nranks) {}
  // Gates never released (a rank never reached the collective: its context failed, or every
  // rank's communicator was destroyed first) open when their HeldTask goes.
  ~Collective() {
    if (!ran_.load() && !abandoned_.load()) {
      PHOS_LOG(Warn, "simgpu", "nccl: {} abandoned: {} of {} ranks reached it; nothing was moved",
               KindName(args_.kind), arrived_.load(), nranks_);
    }
  }

  bool Matches(const CollectiveArgs& a) const {
    return a.kind == args_.kind && a.count == args_.count && a.type == args_.type &&
           (!Reduces(a.kind) || OpClass(a.op) == OpClass(args_.op)) &&
           (!Rooted(a.kind) || a.root == args_.root);
  }
  Part& part(int rank) { return parts_[rank]; }
  int joined = 0;  // guarded by the CommGroup's mutex

  // Called by each rank's arrival op when its stream reached the collective.
  void Arrive() {
    if (arrived_.fetch_add(1) + 1 < nranks_ || abandoned_.load()) return;
    const CUresult result = Execute();
    ran_.store(true);
    for (Part& p : parts_) p.gate->Release(result);
  }

  bool ran() const { return ran_.load(); }

  // ncclCommAbort: the ranks that reached it, or will, go on without it. A gate a rank's call is
  // still setting (EnqueueCollective sets it after the group's mutex) opens when the collective
  // goes, with the last arrival op that holds it.
  // True when this call abandoned it (it had not run).
  bool Abandon() {
    if (ran_.load() || abandoned_.exchange(true)) return false;
    PHOS_LOG(Warn, "simgpu", "nccl: {} aborted: {} of {} ranks reached it; nothing was moved",
             KindName(args_.kind), arrived_.load(), nranks_);
    for (Part& p : parts_) {
      if (p.gate) p.gate->Release();
    }
    return true;
  }

 private:
  // Every rank's buffers are checked again: they may have been freed since the call.
  bool BuffersValid() const {
    for (int r = 0; r < nranks_; ++r) {
      const size_t send = SendBytes(args_, nranks_, r, elem_);
      if (send > 0 && !device_.CheckRange(reinterpret_cast<CUdeviceptr>(parts_[r].send), send, Access::kRead,
                                          /*device=*/nullptr)) {
        return false;
      }
      const size_t recv = RecvBytes(args_, nranks_, r, elem_);
      if (recv > 0 &&
          !device_.CheckRange(reinterpret_cast<CUdeviceptr>(parts_[r].recv), recv, Access::kReadWrite,
                              /*device=*/nullptr)) {
        return false;
      }
    }
    return true;
  }

  // The result is built in a staging buffer before any rank's receive buffer is written, so
  // in-place calls (and buffers that overlap across ranks) read only original data.
  CUresult Execute() {
    if (!BuffersValid()) {
      PHOS_LOG_EVERY_SEC(Warn, "simgpu", 1,
                         "nccl: {} at run time: a rank's buffer is no longer device memory",
                         KindName(args_.kind));
      return CUDA_ERROR_ILLEGAL_ADDRESS;
    }
    std::vector<const void*> scalars;
    if (OpClass(args_.op) == kPreMulSumClass && !Scalars(&scalars)) {
      PHOS_LOG_EVERY_SEC(Warn, "simgpu", 1,
                         "nccl: {} at run time: a rank's scalar is no longer device memory",
                         KindName(args_.kind));
      return CUDA_ERROR_ILLEGAL_ADDRESS;
    }
    const size_t chunk = args_.count * elem_;
    const size_t staged = args_.kind == CollectiveKind::kReduceScatter ? chunk * nranks_
                          : args_.kind == CollectiveKind::kAllGather   ? chunk * nranks_
                                                                       : chunk;
    std::unique_ptr<std::byte[]> result(new std::byte[staged]);
    std::vector<const void*> inputs(nranks_);
    auto reduce = [&](void* out) {
      if (scalars.empty()) {
        Reduce(args_.type, args_.op, inputs.data(), nranks_, out, args_.count);
      } else {
        ReducePreMulSum(args_.type, inputs.data(), scalars.data(), nranks_, out, args_.count);
      }
    };
    switch (args_.kind) {
      case CollectiveKind::kAllReduce:
      case CollectiveKind::kReduce:
        for (int r = 0; r < nranks_; ++r) inputs[r] = parts_[r].send;
        reduce(result.get());
        break;
      case CollectiveKind::kBroadcast:
        std::memcpy(result.get(), parts_[args_.root].send, chunk);
        break;
      case CollectiveKind::kAllGather:
        for (int r = 0; r < nranks_; ++r) std::memcpy(result.get() + r * chunk, parts_[r].send, chunk);
        break;
      case CollectiveKind::kReduceScatter:
        for (int segment = 0; segment < nranks_; ++segment) {
          for (int r = 0; r < nranks_; ++r)
            inputs[r] = static_cast<const std::byte*>(parts_[r].send) + segment * chunk;
          reduce(result.get() + segment * chunk);
        }
        break;
    }
    for (int r = 0; r < nranks_; ++r) {
      const std::byte* from = result.get();
      if (args_.kind == CollectiveKind::kReduceScatter) from += r * chunk;
      const size_t recv = RecvBytes(args_, nranks_, r, elem_);
      if (recv > 0) std::memcpy(parts_[r].recv, from, recv);
    }
    return CUDA_SUCCESS;
  }

  // Each rank's scalar of a pre-multiplied sum: its immediate value, or the device memory it is
  // read from now (checked again: it may have been freed since the call).
  bool Scalars(std::vector<const void*>* out) const {
    for (const Part& p : parts_) {
      if (p.scaling.residence == ncclScalarHostImmediate) {
        out->push_back(p.scaling.value);
        continue;
      }
      if (!device_.CheckRange(p.scaling.device_scalar, elem_, Access::kRead, /*device=*/nullptr))
        return false;
      out->push_back(reinterpret_cast<const void*>(p.scaling.device_scalar));
    }
    return true;
  }

  DeviceAccess& device_;
  const CollectiveArgs args_;
  const int nranks_;
  const size_t elem_;
  std::vector<Part> parts_;  // written by each rank's call before its arrival op is released
  std::atomic<int> arrived_{0};
  std::atomic<bool> ran_{false};
  std::atomic<bool> abandoned_{false};
};

size_t AbandonCollectives(CommGroup& group) {
  std::lock_guard lock(group.mu);
  size_t abandoned = 0;
  for (const std::weak_ptr<Collective>& weak : group.unfinished) {
    if (std::shared_ptr<Collective> c = weak.lock(); c && c->Abandon()) ++abandoned;
  }
  group.unfinished.clear();
  group.open_collectives.clear();
  return abandoned;
}

ncclResult_t CheckDeviceBuffer(const DeviceAccess& devices, const char* call, const char* name,
                               const void* ptr, size_t bytes, Access access, int device) {
  if (ptr == nullptr) return Fail(ncclInvalidArgument, fmt::format("{}: {} is NULL", call, name));
  int owner = -1;
  if (!devices.CheckRange(reinterpret_cast<CUdeviceptr>(ptr), bytes, access, &owner)) {
    return Fail(ncclInvalidArgument,
                fmt::format("{}: {} {} is not device memory of {} bytes", call, name, ptr, bytes));
  }
  if (owner != device) {
    return Fail(ncclInvalidArgument, fmt::format("{}: {} {} is memory of device {}, the communicator's is {}",
                                                 call, name, ptr, owner, device));
  }
  return ncclSuccess;
}

ncclResult_t EnqueueCollective(CommRegistry& comms, ncclComm_t comm, const CollectiveArgs& args,
                               cudaStream_t stream) {
  const char* call = KindName(args.kind);
  DeviceAccess& devices = comms.device();
  std::shared_ptr<RankComm> rank_comm;
  if (ncclResult_t r = comms.Find(comm, &rank_comm); r != ncclSuccess) return r;
  const size_t elem = DataTypeSize(args.type);
  if (elem == 0) {
    return Fail(ncclInvalidArgument,
                fmt::format("{}: datatype {} is not served", call, EnumValue(args.type)));
  }
  UserRedOp scaling;
  if (Reduces(args.kind) && !ValidRedOp(args.op)) {
    if (ncclResult_t r = FindUserOp(*rank_comm, call, args.op, args.type, &scaling); r != ncclSuccess)
      return r;
  }
  CommGroup& group = *rank_comm->group;
  const int nranks = group.nranks;
  const int rank = rank_comm->rank;
  if (Rooted(args.kind) && (args.root < 0 || args.root >= nranks)) {
    return Fail(ncclInvalidArgument, fmt::format("{}: root {} outside [0, {})", call, args.root, nranks));
  }
  if (args.count > std::numeric_limits<size_t>::max() / elem / static_cast<size_t>(nranks)) {
    return Fail(ncclInvalidArgument, fmt::format("{}: count {} overflows the buffer size", call, args.count));
  }
  std::shared_ptr<Stream> s;
  if (devices.ResolveStream(rank_comm->binding.ctx, reinterpret_cast<CUstream>(stream), &s) != CUDA_SUCCESS) {
    return Fail(ncclInvalidArgument,
                fmt::format("{}: stream is not a live stream of the communicator's context", call));
  }
  if (args.count == 0) return ncclSuccess;
  const int device = rank_comm->device();
  if (const size_t send = SendBytes(args, nranks, rank, elem); send > 0) {
    if (ncclResult_t r = CheckDeviceBuffer(devices, call, "sendbuff", args.send, send, Access::kRead, device);
        r != ncclSuccess) {
      return r;
    }
  }
  const size_t recv = RecvBytes(args, nranks, rank, elem);
  if (recv > 0) {
    if (ncclResult_t r =
            CheckDeviceBuffer(devices, call, "recvbuff", args.recv, recv, Access::kReadWrite, device);
        r != ncclSuccess) {
      return r;
    }
  }

  std::shared_ptr<Collective> collective;
  {
    std::lock_guard lock(group.mu);
    const uint64_t seq = group.next_collective[rank];
    std::shared_ptr<Collective>& open = group.open_collectives[seq];
    if (!open) {
      open = std::make_shared<Collective>(devices, args, nranks);
      // Those that are over leave the list as new ones join it: it stays as long as what is in flight.
      std::erase_if(group.unfinished, [](const std::weak_ptr<Collective>& w) {
        std::shared_ptr<Collective> c = w.lock();
        return c == nullptr || c->ran();
      });
      group.unfinished.push_back(open);
    } else if (!open->Matches(args)) {
      return Fail(
          ncclInvalidArgument,
          fmt::format("{}: rank {}'s collective #{} differs from what other ranks called there (kind, "
                      "count, datatype, op or root)",
                      call, rank, seq));
    }
    collective = open;
    collective->part(rank).send = args.send;
    collective->part(rank).recv = args.recv;
    collective->part(rank).scaling = scaling;
    ++group.next_collective[rank];
    if (++collective->joined == nranks) group.open_collectives.erase(seq);
  }

  Op arrival;
  arrival.engine = Engine::kCompute;
  // Like a kernel's: the launch overhead is modelled, the data movement runs at CPU speed.
  arrival.cost_seconds = rank_comm->binding.ctx.profile->kernel_launch_s;
  arrival.bytes = std::max(recv, args.count * elem);
  arrival.work = [collective] {
    collective->Arrive();
    return CUDA_SUCCESS;
  };
  // The arrival is held until the gate exists, so that the last arrival finds every gate.
  std::shared_ptr<HeldTask> held = s->EnqueueHeld(std::move(arrival), /*marker=*/false);
  collective->part(rank).gate = s->EnqueueHeld(Op{}, /*marker=*/true);
  held->Release();
  return ncclSuccess;
}

}  // namespace phos::sim::nccl
