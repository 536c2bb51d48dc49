#include "nccl/p2p.h"

#include <fmt/format.h>

#include <atomic>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <utility>

#include "nccl/collective.h"
#include "nccl/comm.h"
#include "nccl/errors.h"
#include "nccl/reduce.h"
#include "phos/base/enum_value.h"
#include "phos/base/log.h"

namespace phos::sim::nccl {

// One send and the receive it is matched with. Guarded by its CommGroup's mutex.
class Transfer {
 public:
  static constexpr int kSend = 0;
  static constexpr int kReceive = 1;
  struct End {
    bool posted = false;
    bool arrived = false;  // its batch's stream reached it
    void* buffer = nullptr;
    size_t count = 0;
    ncclDataType_t type = ncclFloat32;
    std::weak_ptr<P2pBatch> batch;  // the group owns the batches (CommGroup::unfinished_batches)
  };

  End ends[2];
  bool failed = false;   // the ends disagree: nothing is moved
  bool claimed = false;  // an arrival is moving the bytes

  bool Agrees() const {
    return ends[kSend].count == ends[kReceive].count && ends[kSend].type == ends[kReceive].type;
  }

  // Copies the send buffer into the receive buffer, both checked again: they may have been freed
  // since the calls. Buffers of one rank may overlap (a send to itself in place).
  CUresult Move(const DeviceAccess& devices) const {
    const size_t bytes = ends[kSend].count * DataTypeSize(ends[kSend].type);
    if (bytes == 0) return CUDA_SUCCESS;
    const auto src = reinterpret_cast<CUdeviceptr>(ends[kSend].buffer);
    const auto dst = reinterpret_cast<CUdeviceptr>(ends[kReceive].buffer);
    if (!devices.CheckRange(src, bytes, Access::kRead, nullptr) ||
        !devices.CheckRange(dst, bytes, Access::kReadWrite, nullptr)) {
      PHOS_LOG_EVERY_SEC(Warn, "simgpu", 1,
                         "nccl: a transfer at run time: a buffer is no longer device memory");
      return CUDA_ERROR_ILLEGAL_ADDRESS;
    }
    std::memmove(ends[kReceive].buffer, ends[kSend].buffer, bytes);
    return CUDA_SUCCESS;
  }
};

// The sends and receives of one rank on one stream in one group: an arrival task and a gate
// (p2p.h). `remaining` counts the transfer ends of the batch that are not done.
class P2pBatch {
 public:
  struct Part {
    std::shared_ptr<Transfer> transfer;
    int end = Transfer::kSend;
  };

  P2pBatch(const DeviceAccess& devices, const std::shared_ptr<CommGroup>& group)
      : devices_(devices), group_(group) {}

  // Set while posting, before the arrival is released; read under the group's mutex after.
  std::vector<Part> parts;
  std::shared_ptr<HeldTask> gate;  // set under the group's mutex
  bool abandoned = false;          // guarded by the group's mutex

  // Posting adds a part: one more end that is not done. Counted as it is added, so that a batch
  // still being posted is never taken for a finished one.
  void AddPart(Part part) {
    parts.push_back(std::move(part));
    remaining_.fetch_add(1);
  }
  bool done() const { return remaining_.load() <= 0; }

  // The batch's stream reached it: each transfer whose other end arrived too is moved here.
  void Arrive() {
    std::shared_ptr<CommGroup> group = group_.lock();
    if (!group) return;  // every rank went: the batch goes too, and its gate opens with it
    std::vector<std::shared_ptr<Transfer>> moves;
    int own = 0;  // ends of failed transfers: done for this batch alone
    {
      std::lock_guard lock(group->mu);
      if (abandoned) {
        gate->Release();
        return;
      }
      for (const Part& p : parts) {
        Transfer& t = *p.transfer;
        t.ends[p.end].arrived = true;
        if (t.failed) {
          ++own;
        } else if (t.ends[Transfer::kSend].arrived && t.ends[Transfer::kReceive].arrived && !t.claimed) {
          t.claimed = true;
          moves.push_back(p.transfer);
        }
      }
    }
    for (const std::shared_ptr<Transfer>& t : moves) {
      const CUresult result = t->Move(devices_);
      std::shared_ptr<P2pBatch> ends[2];
      {
        std::lock_guard lock(group->mu);
        ends[0] = t->ends[Transfer::kSend].batch.lock();
        ends[1] = t->ends[Transfer::kReceive].batch.lock();
      }
      for (const std::shared_ptr<P2pBatch>& b : ends) {
        if (b) b->Finish(1, result);
      }
    }
    if (own > 0) Finish(own, CUDA_SUCCESS);
  }

  // `ends` transfer ends of the batch are done; the last opens the gate, with the first error.
  void Finish(int ends, CUresult result) {
    if (result != CUDA_SUCCESS) {
      int none = CUDA_SUCCESS;
      result_.compare_exchange_strong(none, result);
    }
    if (remaining_.fetch_sub(ends) == ends) gate->Release(static_cast<CUresult>(result_.load()));
  }

 private:
  const DeviceAccess& devices_;
  const std::weak_ptr<CommGroup> group_;
  std::atomic<int> remaining_{0};
  std::atomic<int> result_{CUDA_SUCCESS};
};

ncclResult_t CheckP2p(CommRegistry& comms, ncclComm_t comm, const P2pArgs& args, cudaStream_t stream,
                      PendingP2p* out) {
  const char* call = args.send ? "ncclSend" : "ncclRecv";
  DeviceAccess& devices = comms.device();
  std::shared_ptr<RankComm> rank;
  if (ncclResult_t r = comms.Find(comm, &rank); r != ncclSuccess) return r;
  const size_t elem = DataTypeSize(args.type);
  if (elem == 0) {
    return Fail(ncclInvalidArgument,
                fmt::format("{}: datatype {} is not served", call, EnumValue(args.type)));
  }
  const int nranks = rank->group->nranks;
  if (args.peer < 0 || args.peer >= nranks) {
    return Fail(ncclInvalidArgument, fmt::format("{}: peer {} outside [0, {})", call, args.peer, nranks));
  }
  if (args.count > std::numeric_limits<size_t>::max() / elem) {
    return Fail(ncclInvalidArgument, fmt::format("{}: count {} overflows the buffer size", call, args.count));
  }
  std::shared_ptr<Stream> s;
  if (devices.ResolveStream(rank->binding.ctx, reinterpret_cast<CUstream>(stream), &s) != CUDA_SUCCESS) {
    return Fail(ncclInvalidArgument,
                fmt::format("{}: stream is not a live stream of the communicator's context", call));
  }
  if (args.count > 0) {
    const Access access = args.send ? Access::kRead : Access::kReadWrite;
    if (ncclResult_t r = CheckDeviceBuffer(devices, call, args.send ? "sendbuff" : "recvbuff", args.buffer,
                                           args.count * elem, access, rank->device());
        r != ncclSuccess) {
      return r;
    }
  }
  *out = PendingP2p{std::move(rank), std::move(s), args};
  return ncclSuccess;
}

ncclResult_t PostP2p(DeviceAccess& devices, const std::vector<PendingP2p>& ops) {
  // One batch per rank and stream, in the order the ops were issued.
  std::map<std::pair<const RankComm*, const Stream*>, std::shared_ptr<P2pBatch>> by_stream;
  std::vector<std::pair<std::shared_ptr<P2pBatch>, const PendingP2p*>> batches;
  ncclResult_t result = ncclSuccess;
  std::vector<std::shared_ptr<P2pBatch>> failed_after_arrival;
  for (const PendingP2p& op : ops) {
    CommGroup& group = *op.rank->group;
    std::shared_ptr<P2pBatch>& batch = by_stream[{op.rank.get(), op.stream.get()}];
    const bool first = batch == nullptr;
    if (first) {
      batch = std::make_shared<P2pBatch>(devices, op.rank->group);
      batches.emplace_back(batch, &op);
    }
    const int self = op.rank->rank;
    const int end = op.args.send ? Transfer::kSend : Transfer::kReceive;
    std::lock_guard lock(group.mu);
    if (first) {
      std::erase_if(group.unfinished_batches, [](const std::shared_ptr<P2pBatch>& b) { return b->done(); });
      group.unfinished_batches.push_back(batch);
    }
    P2pChannel& channel =
        group.channels[op.args.send ? std::pair{self, op.args.peer} : std::pair{op.args.peer, self}];
    const uint64_t number = op.args.send ? channel.sends++ : channel.receives++;
    std::shared_ptr<Transfer>& slot = channel.open[number];
    if (!slot) slot = std::make_shared<Transfer>();
    std::shared_ptr<Transfer> transfer = slot;
    Transfer::End& mine = transfer->ends[end];
    mine.posted = true;
    mine.buffer = op.args.buffer;
    mine.count = op.args.count;
    mine.type = op.args.type;
    mine.batch = batch;
    batch->AddPart({transfer, end});
    const Transfer::End& other = transfer->ends[1 - end];
    if (!other.posted) continue;
    channel.open.erase(number);
    if (transfer->Agrees()) continue;
    transfer->failed = true;
    group.async_error.store(ncclInvalidUsage);
    const Transfer::End& send = transfer->ends[Transfer::kSend];
    const Transfer::End& receive = transfer->ends[Transfer::kReceive];
    result = Fail(
        ncclInvalidUsage,
        fmt::format("ncclSend/ncclRecv: rank {}'s send #{} to rank {} is {} elements of datatype {}, the "
                    "receive {} of datatype {}; nothing is moved",
                    op.args.send ? self : op.args.peer, number, op.args.send ? op.args.peer : self,
                    send.count, static_cast<int>(send.type), receive.count, static_cast<int>(receive.type)));
    // The other end's batch may have reached it already: it waits for nothing now.
    if (other.arrived) {
      if (std::shared_ptr<P2pBatch> b = other.batch.lock()) failed_after_arrival.push_back(std::move(b));
    }
  }
  for (const std::shared_ptr<P2pBatch>& b : failed_after_arrival) b->Finish(1, CUDA_SUCCESS);

  for (const auto& [batch, first_op] : batches) {
    size_t bytes = 0;
    for (const P2pBatch::Part& p : batch->parts) {
      bytes += p.transfer->ends[p.end].count * DataTypeSize(p.transfer->ends[p.end].type);
    }
    const std::shared_ptr<Stream>& stream = first_op->stream;
    Op arrival;
    arrival.engine = Engine::kCompute;
    // Like a kernel's: the launch overhead is modelled, the data movement runs at CPU speed.
    arrival.cost_seconds = first_op->rank->binding.ctx.profile->kernel_launch_s;
    arrival.bytes = bytes;
    arrival.work = [batch = batch] {
      batch->Arrive();
      return CUDA_SUCCESS;
    };
    // The arrival is held until the gate exists, so that every Finish finds it.
    std::shared_ptr<HeldTask> held = stream->EnqueueHeld(std::move(arrival), /*marker=*/false);
    std::shared_ptr<HeldTask> gate = stream->EnqueueHeld(Op{}, /*marker=*/true);
    {
      std::lock_guard lock(first_op->rank->group->mu);
      batch->gate = std::move(gate);
    }
    held->Release();
  }
  return result;
}

size_t AbandonTransfers(CommGroup& group) {
  std::vector<std::shared_ptr<P2pBatch>> batches;
  std::vector<std::shared_ptr<HeldTask>> gates;
  {
    std::lock_guard lock(group.mu);
    batches = std::move(group.unfinished_batches);
    group.unfinished_batches.clear();
    group.channels.clear();
    for (const std::shared_ptr<P2pBatch>& b : batches) {
      b->abandoned = true;  // one whose gate is still to be set opens it at its arrival
      if (!b->done() && b->gate) gates.push_back(b->gate);
    }
  }
  if (!gates.empty()) {
    PHOS_LOG(Warn, "simgpu",
             "nccl: {} batches of sends and receives aborted; what they had not moved is not moved",
             gates.size());
  }
  // Gates open outside the mutex: what completes behind them may be another batch's arrival.
  for (const std::shared_ptr<HeldTask>& gate : gates) gate->Release();
  return gates.size();
}

}  // namespace phos::sim::nccl
