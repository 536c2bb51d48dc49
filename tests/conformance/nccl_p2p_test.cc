// NCCL conformance, point-to-point and lifecycle: ncclSend / ncclRecv in a group (an exchange and a
// send to oneself), ncclReduce and the deprecated ncclBcast, pre-multiplied sums, ncclCommFinalize
// before ncclCommDestroy, ncclCommAbort, ncclCommGetAsyncError, and what NCCL 2.28 answers for a
// NULL communicator. Expected values are computed here from the ranks' inputs.
#include "nccl_fixture.h"

namespace phos::conformance {
namespace {

// Each rank sends its input to the other and receives the other's, both in one group: the
// receives make progress together with the sends.
TEST_F(NcclTest, SendRecvExchangeInAGroup) {
  InitAll();
  CUdeviceptr send[kRanks], recv[kRanks];
  for (int r = 0; r < kRanks; ++r) {
    send[r] = Buffer(r, Input<int32_t>(r, kCount));
    recv[r] = Buffer(r, kCount * sizeof(int32_t));
  }
  PHOS_ASSERT_NCCL(ncclGroupStart());
  for (int r = 0; r < kRanks; ++r) {
    const int peer = 1 - r;
    PHOS_ASSERT_NCCL(ncclSend(Ptr(send[r]), kCount, ncclInt32, peer, comm_[r], stream(r)));
    PHOS_ASSERT_NCCL(ncclRecv(Ptr(recv[r]), kCount, ncclInt32, peer, comm_[r], stream(r)));
  }
  PHOS_ASSERT_NCCL(ncclGroupEnd());
  SyncAll();
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(Download<int32_t>(r, recv[r], kCount), Input<int32_t>(1 - r, kCount)) << "rank " << r;
    EXPECT_EQ(Download<int32_t>(r, send[r], kCount), Input<int32_t>(r, kCount)) << "rank " << r << " send";
  }
}

// Two sends to the same peer arrive in the order they were issued.
TEST_F(NcclTest, SendsToOnePeerArriveInOrderAndToOneself) {
  InitAll();
  const std::vector<float> first = Input<float>(3, kCount), second = Input<float>(4, kCount);
  CUdeviceptr a = Buffer(0, first), b = Buffer(0, second);
  CUdeviceptr got_a = Buffer(1, kCount * sizeof(float)), got_b = Buffer(1, kCount * sizeof(float));
  CUdeviceptr self = Buffer(1, Input<float>(5, kCount)), back = Buffer(1, kCount * sizeof(float));
  PHOS_ASSERT_NCCL(ncclGroupStart());
  PHOS_ASSERT_NCCL(ncclSend(Ptr(a), kCount, ncclFloat, 1, comm_[0], stream(0)));
  PHOS_ASSERT_NCCL(ncclSend(Ptr(b), kCount, ncclFloat, 1, comm_[0], stream(0)));
  PHOS_ASSERT_NCCL(ncclRecv(Ptr(got_a), kCount, ncclFloat, 0, comm_[1], stream(1)));
  PHOS_ASSERT_NCCL(ncclRecv(Ptr(got_b), kCount, ncclFloat, 0, comm_[1], stream(1)));
  PHOS_ASSERT_NCCL(ncclSend(Ptr(self), kCount, ncclFloat, 1, comm_[1], stream(1)));
  PHOS_ASSERT_NCCL(ncclRecv(Ptr(back), kCount, ncclFloat, 1, comm_[1], stream(1)));
  PHOS_ASSERT_NCCL(ncclGroupEnd());
  SyncAll();
  EXPECT_EQ(Download<float>(1, got_a, kCount), first);
  EXPECT_EQ(Download<float>(1, got_b, kCount), second);
  EXPECT_EQ(Download<float>(1, back, kCount), Input<float>(5, kCount));
}

TEST_F(NcclTest, SendToAPeerOutsideTheCommunicatorIsRefused) {
  InitAll();
  void* p = Ptr(Buffer(0, kCount * sizeof(float)));
  EXPECT_EQ(ncclSend(p, kCount, ncclFloat, kRanks, comm_[0], stream(0)), ncclInvalidArgument);
  EXPECT_EQ(ncclRecv(p, kCount, ncclFloat, -1, comm_[0], stream(0)), ncclInvalidArgument);
  EXPECT_EQ(ncclSend(p, kCount, ncclFloat, 1, nullptr, stream(0)), ncclInvalidArgument);
}

// ncclReduce: the root receives the reduction; the other rank's receive buffer may be NULL.
TEST_F(NcclTest, ReduceToRootOne) {
  InitAll();
  CUdeviceptr send[kRanks];
  for (int r = 0; r < kRanks; ++r) send[r] = Buffer(r, Input<double>(r, kCount));
  CUdeviceptr recv = Buffer(1, kCount * sizeof(double));
  PHOS_ASSERT_NCCL(ncclGroupStart());
  PHOS_ASSERT_NCCL(ncclReduce(Ptr(send[0]), nullptr, kCount, ncclDouble, ncclMin, 1, comm_[0], stream(0)));
  PHOS_ASSERT_NCCL(ncclReduce(Ptr(send[1]), Ptr(recv), kCount, ncclDouble, ncclMin, 1, comm_[1], stream(1)));
  PHOS_ASSERT_NCCL(ncclGroupEnd());
  SyncAll();
  const std::vector<double> a = Input<double>(0, kCount), b = Input<double>(1, kCount);
  const std::vector<double> got = Download<double>(1, recv, kCount);
  for (size_t i = 0; i < kCount; ++i) ASSERT_EQ(got[i], std::min(a[i], b[i])) << "element " << i;
}

// The deprecated in-place broadcast.
TEST_F(NcclTest, BcastInPlace) {
  InitAll();
  CUdeviceptr buf[kRanks];
  for (int r = 0; r < kRanks; ++r) buf[r] = Buffer(r, Input<int64_t>(r, kCount));
  PHOS_ASSERT_NCCL(ncclGroupStart());
  for (int r = 0; r < kRanks; ++r)
    PHOS_ASSERT_NCCL(ncclBcast(Ptr(buf[r]), kCount, ncclInt64, 0, comm_[r], stream(r)));
  PHOS_ASSERT_NCCL(ncclGroupEnd());
  SyncAll();
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(Download<int64_t>(r, buf[r], kCount), Input<int64_t>(0, kCount));
}

// Rank 0's input times 2 plus rank 1's times 3, each rank naming its own scalar.
TEST_F(NcclTest, PreMulSumAllReduce) {
  InitAll();
  CUdeviceptr buf[kRanks];
  ncclRedOp_t op[kRanks];
  for (int r = 0; r < kRanks; ++r) {
    buf[r] = Buffer(r, Input<float>(r, kCount));
    float scalar = 2.0f + r;
    PHOS_ASSERT_NCCL(ncclRedOpCreatePreMulSum(&op[r], &scalar, ncclFloat, ncclScalarHostImmediate, comm_[r]));
  }
  PHOS_ASSERT_NCCL(ncclGroupStart());
  for (int r = 0; r < kRanks; ++r) {
    PHOS_ASSERT_NCCL(ncclAllReduce(Ptr(buf[r]), Ptr(buf[r]), kCount, ncclFloat, op[r], comm_[r], stream(r)));
  }
  PHOS_ASSERT_NCCL(ncclGroupEnd());
  SyncAll();
  const std::vector<float> a = Input<float>(0, kCount), b = Input<float>(1, kCount);
  for (int r = 0; r < kRanks; ++r) {
    const std::vector<float> got = Download<float>(r, buf[r], kCount);
    for (size_t i = 0; i < kCount; ++i)
      ASSERT_EQ(got[i], 2 * a[i] + 3 * b[i]) << "rank " << r << " element " << i;
    PHOS_EXPECT_NCCL(ncclRedOpDestroy(op[r], comm_[r]));
  }
}

// Finalize, then destroy; the asynchronous error of a healthy communicator is ncclSuccess.
TEST_F(NcclTest, FinalizeThenDestroy) {
  InitAll();
  CUdeviceptr buf[kRanks];
  for (int r = 0; r < kRanks; ++r) buf[r] = Buffer(r, std::vector<int32_t>(kCount, r + 1));
  PHOS_ASSERT_NCCL(ncclGroupStart());
  for (int r = 0; r < kRanks; ++r) {
    PHOS_ASSERT_NCCL(
        ncclAllReduce(Ptr(buf[r]), Ptr(buf[r]), kCount, ncclInt32, ncclSum, comm_[r], stream(r)));
  }
  PHOS_ASSERT_NCCL(ncclGroupEnd());
  for (int r = 0; r < kRanks; ++r) {
    ncclResult_t async = ncclInternalError;
    PHOS_ASSERT_NCCL(ncclCommGetAsyncError(comm_[r], &async));
    EXPECT_EQ(async, ncclSuccess);
    PHOS_ASSERT_NCCL(ncclCommFinalize(comm_[r]));
  }
  SyncAll();
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(Download<int32_t>(r, buf[r], kCount), std::vector<int32_t>(kCount, 3));
    PHOS_ASSERT_NCCL(ncclCommDestroy(comm_[r]));
    comm_[r] = nullptr;
  }
}

// NCCL 2.28 answers ncclSuccess when there is no communicator to destroy, abort or finalize.
TEST_F(NcclTest, NullCommunicatorLifecycleCallsSucceed) {
  PHOS_EXPECT_NCCL(ncclCommDestroy(nullptr));
  PHOS_EXPECT_NCCL(ncclCommAbort(nullptr));
  PHOS_EXPECT_NCCL(ncclCommFinalize(nullptr));
}

TEST_F(NcclTest, AbortEndsTheCommunicators) {
  InitAll();
  for (int r = 0; r < kRanks; ++r) {
    PHOS_ASSERT_NCCL(ncclCommAbort(comm_[r]));
    comm_[r] = nullptr;
  }
}

}  // namespace
}  // namespace phos::conformance
