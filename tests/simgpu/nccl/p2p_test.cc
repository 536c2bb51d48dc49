// Sends and receives (src/nccl/p2p.h) and the rooted reductions (ncclReduce, pre-multiplied sums)
// over a fake DeviceAccess: matching by peer and order of issue, an all-to-all posted as one group,
// transfers matched across groups, disagreeing ends and abort never leaving a stream waiting, the
// calls NCCL refuses. Expected values are computed here on the CPU from the inputs.
#include "nccl/p2p.h"

#include <gtest/gtest.h>

#include <climits>
#include <cstdint>
#include <vector>

#include "device/fake_device_access.h"
#include "nccl/collective.h"
#include "nccl/comm.h"
#include "nccl/red_op.h"

namespace phos::sim::nccl {
namespace {

using phos::sim::testing::FakeDeviceAccess;

constexpr int kRanks = 4;

DeviceProfile TestProfile() {
  DeviceProfile profile;
  profile.name = "fake";
  return profile;
}

class P2pTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(comms_.InitAll(comms_handles_, kRanks, nullptr), ncclSuccess); }
  void TearDown() override {
    for (ncclComm_t c : comms_handles_) {
      if (c != nullptr) {
        EXPECT_EQ(comms_.Destroy(c), ncclSuccess);
      }
    }
  }

  // A buffer of `count` int32 on rank r's device, holding `values` (zeroes by default).
  std::vector<int32_t>& Buffer(int r, size_t count, std::vector<int32_t> values = {}) {
    values.resize(count);
    auto& b = buffers_.emplace_back(std::make_unique<std::vector<int32_t>>(std::move(values)));
    device_.AddMemory(b->data(), count * sizeof(int32_t), r);
    return *b;
  }
  ncclResult_t Check(int r, bool send, std::vector<int32_t>& buffer, size_t count, int peer, PendingP2p* out,
                     ncclDataType_t type = ncclInt32) {
    return CheckP2p(comms_, comms_handles_[r], {send, buffer.data(), count, type, peer}, nullptr, out);
  }
  // Checks and adds one send or receive to `group`.
  void Add(std::vector<PendingP2p>* group, int r, bool send, std::vector<int32_t>& buffer, size_t count,
           int peer, ncclDataType_t type = ncclInt32) {
    PendingP2p op;
    ASSERT_EQ(Check(r, send, buffer, count, peer, &op, type), ncclSuccess);
    group->push_back(std::move(op));
  }
  std::shared_ptr<RankComm> Rank(int r) {
    std::shared_ptr<RankComm> rank;
    EXPECT_EQ(comms_.FindAny(comms_handles_[r], &rank), ncclSuccess);
    return rank;
  }
  CUresult Sync(int r) { return Rank(r)->binding.ctx.exec->Synchronize(); }
  CUresult Query(int r) { return Rank(r)->binding.ctx.exec->null_stream()->Query(); }

  const DeviceProfile profile_ = TestProfile();
  FakeDeviceAccess device_{kRanks, profile_};
  CommRegistry comms_{device_};
  ncclComm_t comms_handles_[kRanks] = {};
  std::vector<std::unique_ptr<std::vector<int32_t>>> buffers_;
};

// Rank r's j-th value for rank p: distinct for every (r, p, j).
int32_t Value(int r, int p, size_t j) {
  return static_cast<int32_t>(r * 1000 + p * 100 + j);
}

TEST_F(P2pTest, SendsMeetReceivesInTheOrderEachSideIssuedThem) {
  auto& a = Buffer(0, 3, {1, 2, 3});
  auto& b = Buffer(0, 3, {4, 5, 6});
  auto& first = Buffer(1, 3);
  auto& second = Buffer(1, 3);
  // The receives are posted before the sends, in a group of their own: matching is by order of
  // issue per peer, not by when the calls were made.
  std::vector<PendingP2p> receives, sends;
  Add(&receives, 1, false, first, 3, 0);
  Add(&receives, 1, false, second, 3, 0);
  ASSERT_EQ(PostP2p(device_, receives), ncclSuccess);
  EXPECT_EQ(Query(1), CUDA_ERROR_NOT_READY);  // its stream waits for the sends
  Add(&sends, 0, true, a, 3, 1);
  Add(&sends, 0, true, b, 3, 1);
  ASSERT_EQ(PostP2p(device_, sends), ncclSuccess);
  ASSERT_EQ(Sync(0), CUDA_SUCCESS);
  ASSERT_EQ(Sync(1), CUDA_SUCCESS);
  EXPECT_EQ(first, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(second, (std::vector<int32_t>{4, 5, 6}));
}

TEST_F(P2pTest, AnAllToAllPostedAsOneGroupCompletes) {
  constexpr size_t kSlice = 5;
  std::vector<std::vector<int32_t>*> send(kRanks), recv(kRanks);
  for (int r = 0; r < kRanks; ++r) {
    std::vector<int32_t> in(kRanks * kSlice);
    for (int p = 0; p < kRanks; ++p) {
      for (size_t j = 0; j < kSlice; ++j) in[p * kSlice + j] = Value(r, p, j);
    }
    send[r] = &Buffer(r, kRanks * kSlice, in);
    recv[r] = &Buffer(r, kRanks * kSlice);
  }
  // Every rank sends before it receives, ranks in descending order: ops issued one by one on one
  // stream would wait for each other in a cycle; a group's progress together.
  std::vector<PendingP2p> group;
  for (int r = kRanks - 1; r >= 0; --r) {
    for (int p = 0; p < kRanks; ++p) {
      PendingP2p op;
      ASSERT_EQ(CheckP2p(comms_, comms_handles_[r],
                         {true, send[r]->data() + p * kSlice, kSlice, ncclInt32, p}, nullptr, &op),
                ncclSuccess);
      group.push_back(std::move(op));
    }
    for (int p = 0; p < kRanks; ++p) {
      PendingP2p op;
      ASSERT_EQ(CheckP2p(comms_, comms_handles_[r],
                         {false, recv[r]->data() + p * kSlice, kSlice, ncclInt32, p}, nullptr, &op),
                ncclSuccess);
      group.push_back(std::move(op));
    }
  }
  ASSERT_EQ(PostP2p(device_, group), ncclSuccess);
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_EQ(Sync(r), CUDA_SUCCESS);
    std::vector<int32_t> want(kRanks * kSlice);
    for (int p = 0; p < kRanks; ++p) {
      for (size_t j = 0; j < kSlice; ++j) want[p * kSlice + j] = Value(p, r, j);  // what p sent to r
    }
    EXPECT_EQ(*recv[r], want) << "rank " << r;
  }
}

TEST_F(P2pTest, ASendToItselfAndEmptyTransfersMatchInAGroup) {
  auto& mine = Buffer(2, 2, {7, 8});
  auto& back = Buffer(2, 2);
  auto& nothing = Buffer(3, 1, {42});
  std::vector<PendingP2p> group;
  Add(&group, 2, true, mine, 2, 2);
  Add(&group, 2, false, back, 2, 2);
  Add(&group, 2, true, mine, 0, 3);
  Add(&group, 3, false, nothing, 0, 2);
  ASSERT_EQ(PostP2p(device_, group), ncclSuccess);
  ASSERT_EQ(Sync(2), CUDA_SUCCESS);
  ASSERT_EQ(Sync(3), CUDA_SUCCESS);
  EXPECT_EQ(back, (std::vector<int32_t>{7, 8}));
  EXPECT_EQ(nothing, (std::vector<int32_t>{42}));
}

// A send and its receive that disagree: the call that matched them says so, nothing is moved,
// neither stream is left waiting, and every rank's asynchronous error says ncclInvalidUsage.
TEST_F(P2pTest, EndsThatDisagreeFailTheTransferWithoutHoldingEitherStream) {
  for (bool send_first : {true, false}) {
    auto& from = Buffer(0, 8, {1, 2, 3, 4, 5, 6, 7, 8});
    auto& to = Buffer(1, 8);
    std::vector<PendingP2p> send, receive;
    Add(&send, 0, true, from, 4, 1);
    Add(&receive, 1, false, to, 8, 0);
    ASSERT_EQ(PostP2p(device_, send_first ? send : receive), ncclSuccess);
    EXPECT_EQ(PostP2p(device_, send_first ? receive : send), ncclInvalidUsage);
    ASSERT_EQ(Sync(0), CUDA_SUCCESS);
    ASSERT_EQ(Sync(1), CUDA_SUCCESS);
    EXPECT_EQ(to, std::vector<int32_t>(8, 0)) << "send first: " << send_first;
    EXPECT_EQ(Rank(0)->group->async_error.load(), ncclInvalidUsage);
  }
  // A datatype of the same size disagrees too.
  auto& ints = Buffer(2, 4);
  auto& floats = Buffer(3, 4);
  std::vector<PendingP2p> group;
  Add(&group, 2, true, ints, 4, 3, ncclInt32);
  Add(&group, 3, false, floats, 4, 2, ncclFloat32);
  EXPECT_EQ(PostP2p(device_, group), ncclInvalidUsage);
  ASSERT_EQ(Sync(3), CUDA_SUCCESS);
}

// A send nobody receives holds its stream, as on a GPU, until the communicator is aborted.
TEST_F(P2pTest, AbortReleasesASendNobodyReceives) {
  auto& from = Buffer(0, 4, {1, 2, 3, 4});
  std::vector<PendingP2p> send;
  Add(&send, 0, true, from, 4, 3);
  ASSERT_EQ(PostP2p(device_, send), ncclSuccess);
  EXPECT_EQ(Query(0), CUDA_ERROR_NOT_READY);
  std::shared_ptr<RankComm> rank = Rank(0);
  ASSERT_EQ(comms_.Abort(comms_handles_[0]), ncclSuccess);
  comms_handles_[0] = nullptr;
  EXPECT_EQ(rank->binding.ctx.exec->Synchronize(), CUDA_SUCCESS);
  // The receive the send waited for comes too late: it is a new transfer, waiting in turn.
  auto& to = Buffer(3, 4);
  std::vector<PendingP2p> receive;
  Add(&receive, 3, false, to, 4, 0);
  ASSERT_EQ(PostP2p(device_, receive), ncclSuccess);
  EXPECT_EQ(Query(3), CUDA_ERROR_NOT_READY);
  rank = Rank(3);
  ASSERT_EQ(comms_.Abort(comms_handles_[3]), ncclSuccess);
  comms_handles_[3] = nullptr;
  EXPECT_EQ(rank->binding.ctx.exec->Synchronize(), CUDA_SUCCESS);
  EXPECT_EQ(to, std::vector<int32_t>(4, 0));
}

TEST_F(P2pTest, CallsNcclRefusesAreRefusedAtTheCall) {
  auto& buffer = Buffer(0, 4);
  auto& elsewhere = Buffer(1, 4);
  PendingP2p op;
  EXPECT_EQ(Check(0, true, buffer, 4, kRanks, &op), ncclInvalidArgument);  // no such peer
  EXPECT_EQ(Check(0, true, buffer, 4, -1, &op), ncclInvalidArgument);
  EXPECT_EQ(Check(0, true, buffer, 4, 1, &op, static_cast<ncclDataType_t>(99)), ncclInvalidArgument);
  EXPECT_EQ(Check(0, true, buffer, 4, 1, &op, ncclFloat8e4m3), ncclInvalidArgument);  // not served
  EXPECT_EQ(Check(0, false, buffer, 5, 1, &op), ncclInvalidArgument);                 // past the buffer
  EXPECT_EQ(Check(0, false, elsewhere, 4, 1, &op), ncclInvalidArgument);              // another device's
  EXPECT_EQ(CheckP2p(comms_, comms_handles_[0], {true, nullptr, 4, ncclInt32, 1}, nullptr, &op),
            ncclInvalidArgument);
  EXPECT_EQ(CheckP2p(comms_, comms_handles_[0], {true, nullptr, 0, ncclInt32, 1}, nullptr, &op), ncclSuccess);
  EXPECT_EQ(
      CheckP2p(comms_, comms_handles_[0], {true, buffer.data(), SIZE_MAX / 2, ncclInt32, 1}, nullptr, &op),
      ncclInvalidArgument);  // its byte size overflows
  ASSERT_EQ(comms_.Finalize(comms_handles_[0]), ncclSuccess);
  EXPECT_EQ(Check(0, true, buffer, 4, 1, &op), ncclInvalidUsage);
  EXPECT_EQ(comms_.Finalize(comms_handles_[0]), ncclInvalidArgument);  // twice
}

// ncclReduce: the root's receive buffer gets the reduction; the other ranks' are not written, and
// may be NULL.
TEST_F(P2pTest, ReduceWritesTheRootOnly) {
  constexpr size_t kCount = 6;
  constexpr int kRoot = 2;
  std::vector<std::vector<int32_t>*> send(kRanks), recv(kRanks);
  std::vector<int32_t> want(kCount, INT32_MIN);
  for (int r = 0; r < kRanks; ++r) {
    std::vector<int32_t> in(kCount);
    for (size_t j = 0; j < kCount; ++j) {
      in[j] = Value(r, 0, j) * (j % 2 == 0 ? 1 : -1);
      if (in[j] > want[j]) want[j] = in[j];
    }
    send[r] = &Buffer(r, kCount, in);
    recv[r] = &Buffer(r, kCount, std::vector<int32_t>(kCount, -7));
  }
  for (int r = 0; r < kRanks; ++r) {
    void* out = r == 1 ? nullptr : recv[r]->data();
    const CollectiveArgs args{
        CollectiveKind::kReduce, send[r]->data(), out, kCount, ncclInt32, ncclMax, kRoot};
    ASSERT_EQ(EnqueueCollective(comms_, comms_handles_[r], args, nullptr), ncclSuccess) << "rank " << r;
  }
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_EQ(Sync(r), CUDA_SUCCESS);
    EXPECT_EQ(*recv[r], r == kRoot ? want : std::vector<int32_t>(kCount, -7)) << "rank " << r;
  }
  // A root outside the communicator, and a NULL receive buffer at the root, are refused.
  const CollectiveArgs bad_root{
      CollectiveKind::kReduce, send[0]->data(), recv[0]->data(), kCount, ncclInt32, ncclSum, kRanks};
  EXPECT_EQ(EnqueueCollective(comms_, comms_handles_[0], bad_root, nullptr), ncclInvalidArgument);
  const CollectiveArgs no_recv{
      CollectiveKind::kReduce, send[kRoot]->data(), nullptr, kCount, ncclInt32, ncclSum, kRoot};
  EXPECT_EQ(EnqueueCollective(comms_, comms_handles_[kRoot], no_recv, nullptr), ncclInvalidArgument);
}

// ncclRedOpCreatePreMulSum: each rank's input times its own scalar, summed; a scalar given by
// value is read at creation, one in device memory when the collective runs.
TEST_F(P2pTest, PreMulSumScalesEachRanksInputByItsOwnScalar) {
  constexpr size_t kCount = 3;
  std::vector<std::vector<int32_t>*> data(kRanks);
  std::vector<ncclRedOp_t> ops(kRanks);
  std::vector<int32_t> want(kCount, 0);
  auto& device_scalar = Buffer(3, 1, {0});
  for (int r = 0; r < kRanks; ++r) {
    std::vector<int32_t> in(kCount);
    for (size_t j = 0; j < kCount; ++j) in[j] = Value(r, 1, j);
    data[r] = &Buffer(r, kCount, in);
    int32_t scalar = r + 2;
    if (r == 3) {
      ASSERT_EQ(
          CreatePreMulSum(device_, *Rank(r), &ops[r], device_scalar.data(), ncclInt32, ncclScalarDevice),
          ncclSuccess);
    } else {
      ASSERT_EQ(CreatePreMulSum(device_, *Rank(r), &ops[r], &scalar, ncclInt32, ncclScalarHostImmediate),
                ncclSuccess);
      scalar = 1000;  // read already: changing it changes nothing
    }
    for (size_t j = 0; j < kCount; ++j) want[j] += (r + 2) * in[j];
  }
  EXPECT_GE(ops[0], ncclNumOps);
  device_scalar[0] = 5;  // 3 + 2, written after the op was made and before the collective runs
  for (int r = 0; r < kRanks; ++r) {
    const CollectiveArgs args{
        CollectiveKind::kAllReduce, data[r]->data(), data[r]->data(), kCount, ncclInt32, ops[r], 0};
    ASSERT_EQ(EnqueueCollective(comms_, comms_handles_[r], args, nullptr), ncclSuccess);
  }
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_EQ(Sync(r), CUDA_SUCCESS);
    EXPECT_EQ(*data[r], want) << "rank " << r;
  }
  // Made for int32: refused for another datatype, and on a rank that did not make it.
  CollectiveArgs wrong{
      CollectiveKind::kAllReduce, data[0]->data(), data[0]->data(), kCount, ncclFloat32, ops[0], 0};
  EXPECT_EQ(EnqueueCollective(comms_, comms_handles_[0], wrong, nullptr), ncclInvalidArgument);
  EXPECT_EQ(DestroyRedOp(*Rank(0), ops[0]), ncclSuccess);
  wrong.type = ncclInt32;
  EXPECT_EQ(EnqueueCollective(comms_, comms_handles_[0], wrong, nullptr), ncclInvalidArgument);
  EXPECT_EQ(DestroyRedOp(*Rank(0), ops[0]), ncclInvalidArgument);   // twice
  EXPECT_EQ(DestroyRedOp(*Rank(1), ncclSum), ncclInvalidArgument);  // built in
  int32_t scalar = 1;
  ncclRedOp_t op;
  EXPECT_EQ(
      CreatePreMulSum(device_, *Rank(0), &op, &scalar, ncclInt32, static_cast<ncclScalarResidence_t>(2)),
      ncclInvalidArgument);
  EXPECT_EQ(CreatePreMulSum(device_, *Rank(0), &op, &scalar, ncclInt32, ncclScalarDevice),
            ncclInvalidArgument);  // host memory is no device scalar
  ASSERT_EQ(CreatePreMulSum(device_, *Rank(0), &op, &scalar, ncclInt32, ncclScalarHostImmediate),
            ncclSuccess);
  EXPECT_EQ(op, ops[0]);  // the value destroyed is handed out again
}

}  // namespace
}  // namespace phos::sim::nccl
