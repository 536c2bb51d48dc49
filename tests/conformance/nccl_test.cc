// NCCL conformance: the subset of nccl.h phos serves (communicator creation and queries,
// AllReduce, Broadcast, AllGather, ReduceScatter, groups), written only against <cuda.h> and
// <nccl.h>, for two ranks on two devices. Expected results are NCCL's documentation's: ranks in
// communicator order, a collective on rank r's stream starts when that stream reaches it and its
// result is visible once the stream is synchronized; in-place when sendbuff == recvbuff (AllGather:
// sendbuff == recvbuff + rank * sendcount; ReduceScatter: sendbuff + rank * recvcount == recvbuff).
#include "nccl_fixture.h"

namespace phos::conformance {
namespace {

TEST_F(NcclTest, VersionAndErrorStrings) {
  int version = 0;
  PHOS_ASSERT_NCCL(ncclGetVersion(&version));
  EXPECT_GE(version, NCCL_VERSION(2, 28, 0));
  EXPECT_STREQ(ncclGetErrorString(ncclSuccess), "no error");
  EXPECT_THAT(ncclGetErrorString(ncclInvalidArgument), ::testing::HasSubstr("invalid argument"));
}

TEST_F(NcclTest, InitAllCountRankDevice) {
  InitAll();
  for (int r = 0; r < kRanks; ++r) {
    int count = 0, rank = -1, device = -1;
    PHOS_ASSERT_NCCL(ncclCommCount(comm_[r], &count));
    PHOS_ASSERT_NCCL(ncclCommUserRank(comm_[r], &rank));
    PHOS_ASSERT_NCCL(ncclCommCuDevice(comm_[r], &device));
    EXPECT_EQ(count, kRanks);
    EXPECT_EQ(rank, r);
    EXPECT_EQ(device, r);
  }
}

TEST_F(NcclTest, AllReduceSumFloat) {
  InitAll();
  CUdeviceptr send[kRanks], recv[kRanks];
  for (int r = 0; r < kRanks; ++r) {
    send[r] = Buffer(r, Input<float>(r, kCount));
    recv[r] = Buffer(r, kCount * sizeof(float));
  }
  PHOS_ASSERT_NCCL(ncclGroupStart());
  for (int r = 0; r < kRanks; ++r) {
    PHOS_ASSERT_NCCL(
        ncclAllReduce(Ptr(send[r]), Ptr(recv[r]), kCount, ncclFloat, ncclSum, comm_[r], stream(r)));
  }
  PHOS_ASSERT_NCCL(ncclGroupEnd());
  SyncAll();
  const std::vector<float> a = Input<float>(0, kCount), b = Input<float>(1, kCount);
  for (int r = 0; r < kRanks; ++r) {
    const std::vector<float> got = Download<float>(r, recv[r], kCount);
    for (size_t i = 0; i < kCount; ++i) ASSERT_EQ(got[i], a[i] + b[i]) << "rank " << r << " element " << i;
    // Out-of-place: the input is untouched.
    EXPECT_EQ(Download<float>(r, send[r], kCount), Input<float>(r, kCount));
  }
}

TEST_F(NcclTest, AllReduceMaxFloatInPlace) {
  InitAll();
  CUdeviceptr buf[kRanks];
  for (int r = 0; r < kRanks; ++r) buf[r] = Buffer(r, Input<float>(r, kCount));
  PHOS_ASSERT_NCCL(ncclGroupStart());
  for (int r = 0; r < kRanks; ++r) {
    PHOS_ASSERT_NCCL(
        ncclAllReduce(Ptr(buf[r]), Ptr(buf[r]), kCount, ncclFloat32, ncclMax, comm_[r], stream(r)));
  }
  PHOS_ASSERT_NCCL(ncclGroupEnd());
  SyncAll();
  const std::vector<float> a = Input<float>(0, kCount), b = Input<float>(1, kCount);
  for (int r = 0; r < kRanks; ++r) {
    const std::vector<float> got = Download<float>(r, buf[r], kCount);
    for (size_t i = 0; i < kCount; ++i) ASSERT_EQ(got[i], std::max(a[i], b[i])) << "element " << i;
  }
}

// int32 under every op NCCL defines (avg: the sum divided by the rank count, truncated).
TEST_F(NcclTest, AllReduceInt32EveryOp) {
  InitAll();
  const std::vector<int32_t> a = Input<int32_t>(0, kCount), b = Input<int32_t>(1, kCount);
  for (ncclRedOp_t op : {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg}) {
    CUdeviceptr send[kRanks], recv[kRanks];
    for (int r = 0; r < kRanks; ++r) {
      send[r] = Buffer(r, r == 0 ? a : b);
      recv[r] = Buffer(r, kCount * sizeof(int32_t));
    }
    PHOS_ASSERT_NCCL(ncclGroupStart());
    for (int r = 0; r < kRanks; ++r) {
      PHOS_ASSERT_NCCL(ncclAllReduce(Ptr(send[r]), Ptr(recv[r]), kCount, ncclInt32, op, comm_[r], stream(r)));
    }
    PHOS_ASSERT_NCCL(ncclGroupEnd());
    SyncAll();
    for (int r = 0; r < kRanks; ++r) {
      const std::vector<int32_t> got = Download<int32_t>(r, recv[r], kCount);
      for (size_t i = 0; i < kCount; ++i) {
        const int32_t want = op == ncclSum    ? a[i] + b[i]
                             : op == ncclProd ? a[i] * b[i]
                             : op == ncclMax  ? std::max(a[i], b[i])
                             : op == ncclMin  ? std::min(a[i], b[i])
                                              : (a[i] + b[i]) / kRanks;
        ASSERT_EQ(got[i], want) << "op " << op << " rank " << r << " element " << i;
      }
    }
  }
}

TEST_F(NcclTest, AllReduceSumHalf) {
  InitAll();
  CUdeviceptr send[kRanks], recv[kRanks];
  std::vector<float> expected(kCount, 0.0f);
  for (int r = 0; r < kRanks; ++r) {
    const std::vector<float> in = Input<float>(r, kCount);
    std::vector<__half> h(kCount);
    for (size_t i = 0; i < kCount; ++i) {
      h[i] = __float2half(in[i] * 0.25f);  // quarters: exact in fp16, sums too
      expected[i] += in[i] * 0.25f;
    }
    send[r] = Buffer(r, h);
    recv[r] = Buffer(r, kCount * sizeof(__half));
  }
  PHOS_ASSERT_NCCL(ncclGroupStart());
  for (int r = 0; r < kRanks; ++r) {
    PHOS_ASSERT_NCCL(
        ncclAllReduce(Ptr(send[r]), Ptr(recv[r]), kCount, ncclHalf, ncclSum, comm_[r], stream(r)));
  }
  PHOS_ASSERT_NCCL(ncclGroupEnd());
  SyncAll();
  for (int r = 0; r < kRanks; ++r) {
    const std::vector<__half> got = Download<__half>(r, recv[r], kCount);
    for (size_t i = 0; i < kCount; ++i) ASSERT_EQ(__half2float(got[i]), expected[i]) << "element " << i;
  }
}

TEST_F(NcclTest, BroadcastFromRootOne) {
  InitAll();
  const std::vector<int64_t> root_data = Input<int64_t>(1, kCount);
  CUdeviceptr send[kRanks], recv[kRanks];
  for (int r = 0; r < kRanks; ++r) {
    send[r] = Buffer(r, Input<int64_t>(r, kCount));
    recv[r] = Buffer(r, kCount * sizeof(int64_t));
  }
  PHOS_ASSERT_NCCL(ncclGroupStart());
  for (int r = 0; r < kRanks; ++r) {
    PHOS_ASSERT_NCCL(ncclBroadcast(Ptr(send[r]), Ptr(recv[r]), kCount, ncclInt64, 1, comm_[r], stream(r)));
  }
  PHOS_ASSERT_NCCL(ncclGroupEnd());
  SyncAll();
  for (int r = 0; r < kRanks; ++r)
    EXPECT_EQ(Download<int64_t>(r, recv[r], kCount), root_data) << "rank " << r;
}

TEST_F(NcclTest, BroadcastInPlace) {
  InitAll();
  CUdeviceptr buf[kRanks];
  for (int r = 0; r < kRanks; ++r) buf[r] = Buffer(r, Input<double>(r, kCount));
  PHOS_ASSERT_NCCL(ncclGroupStart());
  for (int r = 0; r < kRanks; ++r) {
    PHOS_ASSERT_NCCL(ncclBroadcast(Ptr(buf[r]), Ptr(buf[r]), kCount, ncclDouble, 1, comm_[r], stream(r)));
  }
  PHOS_ASSERT_NCCL(ncclGroupEnd());
  SyncAll();
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(Download<double>(r, buf[r], kCount), Input<double>(1, kCount));
}

TEST_F(NcclTest, AllGatherOutOfPlaceAndInPlace) {
  InitAll();
  std::vector<uint8_t> expected;
  for (int r = 0; r < kRanks; ++r) {
    const std::vector<uint8_t> in = Input<uint8_t>(r, kCount);
    expected.insert(expected.end(), in.begin(), in.end());
  }
  CUdeviceptr send[kRanks], recv[kRanks], in_place[kRanks];
  for (int r = 0; r < kRanks; ++r) {
    send[r] = Buffer(r, Input<uint8_t>(r, kCount));
    recv[r] = Buffer(r, kRanks * kCount);
    // In place: rank r's contribution already sits at its slot of the receive buffer.
    std::vector<uint8_t> slot(kRanks * kCount, 0xee);
    const std::vector<uint8_t> in = Input<uint8_t>(r, kCount);
    std::copy(in.begin(), in.end(), slot.begin() + r * kCount);
    in_place[r] = Buffer(r, slot);
  }
  PHOS_ASSERT_NCCL(ncclGroupStart());
  for (int r = 0; r < kRanks; ++r) {
    PHOS_ASSERT_NCCL(ncclAllGather(Ptr(send[r]), Ptr(recv[r]), kCount, ncclUint8, comm_[r], stream(r)));
    PHOS_ASSERT_NCCL(ncclAllGather(Ptr(in_place[r] + r * kCount), Ptr(in_place[r]), kCount, ncclUint8,
                                   comm_[r], stream(r)));
  }
  PHOS_ASSERT_NCCL(ncclGroupEnd());
  SyncAll();
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(Download<uint8_t>(r, recv[r], kRanks * kCount), expected) << "rank " << r;
    EXPECT_EQ(Download<uint8_t>(r, in_place[r], kRanks * kCount), expected) << "rank " << r << " in place";
  }
}

TEST_F(NcclTest, ReduceScatterSumFloat) {
  InitAll();
  CUdeviceptr send[kRanks], recv[kRanks];
  for (int r = 0; r < kRanks; ++r) {
    send[r] = Buffer(r, Input<float>(r, kRanks * kCount));
    recv[r] = Buffer(r, kCount * sizeof(float));
  }
  PHOS_ASSERT_NCCL(ncclGroupStart());
  for (int r = 0; r < kRanks; ++r) {
    PHOS_ASSERT_NCCL(
        ncclReduceScatter(Ptr(send[r]), Ptr(recv[r]), kCount, ncclFloat, ncclSum, comm_[r], stream(r)));
  }
  PHOS_ASSERT_NCCL(ncclGroupEnd());
  SyncAll();
  const std::vector<float> a = Input<float>(0, kRanks * kCount), b = Input<float>(1, kRanks * kCount);
  for (int r = 0; r < kRanks; ++r) {
    const std::vector<float> got = Download<float>(r, recv[r], kCount);
    for (size_t i = 0; i < kCount; ++i) {
      ASSERT_EQ(got[i], a[r * kCount + i] + b[r * kCount + i]) << "rank " << r << " element " << i;
    }
  }
}

// One thread creates both ranks: each ncclCommInitRank with its rank's device current, inside a
// group so that neither waits for the other.
TEST_F(NcclTest, InitRankForBothRanksInOneGroup) {
  ncclUniqueId id;
  PHOS_ASSERT_NCCL(ncclGetUniqueId(&id));
  PHOS_ASSERT_NCCL(ncclGroupStart());
  for (int r = 0; r < kRanks; ++r) {
    PHOS_ASSERT_CU(cuCtxSetCurrent(ctx_[r]));
    PHOS_ASSERT_NCCL(ncclCommInitRank(&comm_[r], kRanks, id, r));
  }
  PHOS_ASSERT_NCCL(ncclGroupEnd());
  CUdeviceptr buf[kRanks];
  for (int r = 0; r < kRanks; ++r) {
    int count = 0, rank = -1, device = -1;
    PHOS_ASSERT_NCCL(ncclCommCount(comm_[r], &count));
    PHOS_ASSERT_NCCL(ncclCommUserRank(comm_[r], &rank));
    PHOS_ASSERT_NCCL(ncclCommCuDevice(comm_[r], &device));
    EXPECT_EQ(count, kRanks);
    EXPECT_EQ(rank, r);
    EXPECT_EQ(device, r);
    buf[r] = Buffer(r, std::vector<int32_t>(kCount, r + 1));
  }
  PHOS_ASSERT_NCCL(ncclGroupStart());
  for (int r = 0; r < kRanks; ++r) {
    PHOS_ASSERT_NCCL(
        ncclAllReduce(Ptr(buf[r]), Ptr(buf[r]), kCount, ncclInt32, ncclSum, comm_[r], stream(r)));
  }
  PHOS_ASSERT_NCCL(ncclGroupEnd());
  SyncAll();
  for (int r = 0; r < kRanks; ++r)
    EXPECT_EQ(Download<int32_t>(r, buf[r], kCount), std::vector<int32_t>(kCount, 3));
}

// The classic layout: one thread per rank, each blocking in ncclCommInitRank until all joined.
TEST_F(NcclTest, InitRankFromOneThreadPerRank) {
  ncclUniqueId id;
  PHOS_ASSERT_NCCL(ncclGetUniqueId(&id));
  ncclResult_t results[kRanks] = {ncclInternalError, ncclInternalError};
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      if (cuCtxSetCurrent(ctx_[r]) != CUDA_SUCCESS) return;
      results[r] = ncclCommInitRank(&comm_[r], kRanks, id, r);
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_EQ(results[r], ncclSuccess) << "rank " << r;
    int rank = -1;
    PHOS_ASSERT_NCCL(ncclCommUserRank(comm_[r], &rank));
    EXPECT_EQ(rank, r);
  }
}

// Colors split the ranks; keys order them (ties by old rank); NCCL_SPLIT_NOCOLOR gets no
// communicator.
TEST_F(NcclTest, SplitByColorAndKey) {
  InitAll();
  ncclComm_t alone[kRanks] = {}, swapped[kRanks] = {}, none[kRanks] = {};
  PHOS_ASSERT_NCCL(ncclGroupStart());
  for (int r = 0; r < kRanks; ++r) PHOS_ASSERT_NCCL(ncclCommSplit(comm_[r], r, 0, &alone[r], nullptr));
  PHOS_ASSERT_NCCL(ncclGroupEnd());
  PHOS_ASSERT_NCCL(ncclGroupStart());
  for (int r = 0; r < kRanks; ++r)
    PHOS_ASSERT_NCCL(ncclCommSplit(comm_[r], 7, kRanks - r, &swapped[r], nullptr));
  PHOS_ASSERT_NCCL(ncclGroupEnd());
  PHOS_ASSERT_NCCL(ncclGroupStart());
  for (int r = 0; r < kRanks; ++r) {
    PHOS_ASSERT_NCCL(ncclCommSplit(comm_[r], r == 0 ? NCCL_SPLIT_NOCOLOR : 1, 0, &none[r], nullptr));
  }
  PHOS_ASSERT_NCCL(ncclGroupEnd());
  for (int r = 0; r < kRanks; ++r) {
    int count = 0, rank = -1;
    PHOS_ASSERT_NCCL(ncclCommCount(alone[r], &count));
    PHOS_ASSERT_NCCL(ncclCommUserRank(alone[r], &rank));
    EXPECT_EQ(count, 1);
    EXPECT_EQ(rank, 0);
    PHOS_ASSERT_NCCL(ncclCommCount(swapped[r], &count));
    PHOS_ASSERT_NCCL(ncclCommUserRank(swapped[r], &rank));
    EXPECT_EQ(count, kRanks);
    EXPECT_EQ(rank, kRanks - 1 - r);
    int device = -1;
    PHOS_ASSERT_NCCL(ncclCommCuDevice(swapped[r], &device));
    EXPECT_EQ(device, r) << "a split rank stays on its parent's device";
  }
  EXPECT_EQ(none[0], nullptr);
  ASSERT_NE(none[1], nullptr);
  int count = 0;
  PHOS_ASSERT_NCCL(ncclCommCount(none[1], &count));
  EXPECT_EQ(count, 1);

  // The swapped communicator gathers in its own rank order: device 1's data first.
  CUdeviceptr send[kRanks], recv[kRanks];
  for (int r = 0; r < kRanks; ++r) {
    send[r] = Buffer(r, std::vector<int32_t>(kCount, 10 + r));
    recv[r] = Buffer(r, kRanks * kCount * sizeof(int32_t));
  }
  PHOS_ASSERT_NCCL(ncclGroupStart());
  for (int r = 0; r < kRanks; ++r) {
    PHOS_ASSERT_NCCL(ncclAllGather(Ptr(send[r]), Ptr(recv[r]), kCount, ncclInt32, swapped[r], stream(r)));
  }
  PHOS_ASSERT_NCCL(ncclGroupEnd());
  SyncAll();
  const std::vector<int32_t> got = Download<int32_t>(0, recv[0], kRanks * kCount);
  EXPECT_EQ(got.front(), 11);
  EXPECT_EQ(got.back(), 10);
  for (int r = 0; r < kRanks; ++r) {
    PHOS_EXPECT_NCCL(ncclCommDestroy(alone[r]));
    PHOS_EXPECT_NCCL(ncclCommDestroy(swapped[r]));
  }
  PHOS_EXPECT_NCCL(ncclCommDestroy(none[1]));
}

// A collective after an asynchronous host-to-device copy on the same stream sees the copied
// data, and rank 1's stream cannot finish the collective before rank 0's stream reached it.
TEST_F(NcclTest, StreamOrderAcrossRanks) {
  InitAll();
  PHOS_ASSERT_CU(cuCtxSetCurrent(ctx_[0]));
  LongCopy copy;
  PHOS_ASSERT_CU(copy.Allocate());
  const std::vector<float> fresh = Input<float>(5, kCount);
  std::memcpy(copy.source(), fresh.data(), kCount * sizeof(float));
  CUdeviceptr other = Buffer(1, Input<float>(1, kCount));
  CUdeviceptr recv[kRanks] = {Buffer(0, kCount * sizeof(float)), Buffer(1, kCount * sizeof(float))};
  PHOS_ASSERT_CU(cuCtxSetCurrent(ctx_[0]));
  PHOS_ASSERT_CU(copy.Enqueue(stream_[0]));
  PHOS_ASSERT_NCCL(ncclGroupStart());
  PHOS_ASSERT_NCCL(
      ncclAllReduce(Ptr(copy.destination()), Ptr(recv[0]), kCount, ncclFloat, ncclSum, comm_[0], stream(0)));
  PHOS_ASSERT_NCCL(ncclAllReduce(Ptr(other), Ptr(recv[1]), kCount, ncclFloat, ncclSum, comm_[1], stream(1)));
  PHOS_ASSERT_NCCL(ncclGroupEnd());
  PHOS_ASSERT_CU(cuCtxSetCurrent(ctx_[1]));
  EXPECT_EQ(cuStreamQuery(stream_[1]), CUDA_ERROR_NOT_READY) << "rank 1 finished before rank 0 arrived";
  SyncAll();
  const std::vector<float> b = Input<float>(1, kCount);
  for (int r = 0; r < kRanks; ++r) {
    const std::vector<float> got = Download<float>(r, recv[r], kCount);
    for (size_t i = 0; i < kCount; ++i)
      ASSERT_EQ(got[i], fresh[i] + b[i]) << "rank " << r << " element " << i;
  }
}

TEST_F(NcclTest, InvalidArguments) {
  InitAll();
  CUdeviceptr buf = Buffer(0, kCount * sizeof(float));
  void* p = Ptr(buf);
  EXPECT_EQ(ncclAllReduce(p, p, kCount, ncclFloat, ncclSum, nullptr, stream(0)), ncclInvalidArgument);
  EXPECT_EQ(ncclBroadcast(p, p, kCount, ncclFloat, kRanks, comm_[0], stream(0)), ncclInvalidArgument);
  EXPECT_EQ(ncclBroadcast(p, p, kCount, ncclFloat, -1, comm_[0], stream(0)), ncclInvalidArgument);
  const size_t overflow = std::numeric_limits<size_t>::max() / 2;
  EXPECT_EQ(ncclAllReduce(p, p, overflow, ncclFloat, ncclSum, comm_[0], stream(0)), ncclInvalidArgument);
  EXPECT_EQ(ncclAllGather(p, p, overflow / 4, ncclFloat, comm_[0], stream(0)), ncclInvalidArgument);
  EXPECT_EQ(ncclAllReduce(nullptr, p, kCount, ncclFloat, ncclSum, comm_[0], stream(0)), ncclInvalidArgument);
  EXPECT_EQ(
      ncclAllReduce(p, p, kCount, static_cast<ncclDataType_t>(ncclNumTypes), ncclSum, comm_[0], stream(0)),
      ncclInvalidArgument);
  EXPECT_EQ(ncclAllReduce(p, p, kCount, ncclFloat, static_cast<ncclRedOp_t>(ncclNumOps), comm_[0], stream(0)),
            ncclInvalidArgument);
  int value = 0;
  EXPECT_EQ(ncclCommCount(nullptr, &value), ncclInvalidArgument);
  EXPECT_EQ(ncclCommUserRank(nullptr, &value), ncclInvalidArgument);
  EXPECT_EQ(ncclCommCount(comm_[0], nullptr), ncclInvalidArgument);
  ncclUniqueId id;
  PHOS_ASSERT_NCCL(ncclGetUniqueId(&id));
  ncclComm_t comm = nullptr;
  EXPECT_EQ(ncclCommInitRank(&comm, kRanks, id, kRanks), ncclInvalidArgument);
  EXPECT_EQ(ncclCommInitRank(&comm, 0, id, 0), ncclInvalidArgument);
  EXPECT_EQ(ncclCommInitRank(nullptr, kRanks, id, 0), ncclInvalidArgument);
  // None of the refused calls was enqueued: the stream is idle.
  PHOS_ASSERT_CU(cuCtxSetCurrent(ctx_[0]));
  EXPECT_EQ(cuStreamQuery(stream_[0]), CUDA_SUCCESS);
}

}  // namespace
}  // namespace phos::conformance
