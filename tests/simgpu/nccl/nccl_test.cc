// simgpu's NCCL beyond the NCCL contract: communicator creation pays the profile's cost, garbage
// and stale handles are refused without a crash, calls NCCL leaves undefined are refused, and
// hundreds of collectives issued from two threads complete without deadlocking the compute
// pools of a two-core host. Environment: profile ci (nccl_comm_init_s 5 ms), time scale 10,
// two devices.
#include <cuda.h>
#include <gtest/gtest.h>
#include <nccl.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr int kRanks = 2;
// ci's nccl_comm_init_s (5 ms) at time scale 10.
constexpr double kInitWallMs = 50;

double MsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

class SimNcclTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
    for (int r = 0; r < kRanks; ++r) {
      ASSERT_EQ(cuDevicePrimaryCtxRetain(&ctx_[r], r), CUDA_SUCCESS);
      retained_[r] = true;
    }
  }
  void TearDown() override {
    for (int r = 0; r < kRanks; ++r) {
      if (comm_[r] != nullptr) {
        EXPECT_EQ(ncclCommDestroy(comm_[r]), ncclSuccess);
      }
      if (ptr_[r] != 0) {
        EXPECT_EQ(cuCtxSetCurrent(ctx_[r]), CUDA_SUCCESS);
        EXPECT_EQ(cuMemFree(ptr_[r]), CUDA_SUCCESS);
      }
      if (retained_[r]) {
        EXPECT_EQ(cuDevicePrimaryCtxRelease(r), CUDA_SUCCESS);
      }
    }
    EXPECT_EQ(cuCtxSetCurrent(nullptr), CUDA_SUCCESS);
  }
  void InitAll() { ASSERT_EQ(ncclCommInitAll(comm_, kRanks, nullptr), ncclSuccess); }
  // A device buffer of `bytes` on each rank's device.
  void Allocate(size_t bytes) {
    for (int r = 0; r < kRanks; ++r) {
      ASSERT_EQ(cuCtxSetCurrent(ctx_[r]), CUDA_SUCCESS);
      ASSERT_EQ(cuMemAlloc(&ptr_[r], bytes), CUDA_SUCCESS);
    }
  }
  void* ptr(int r) const { return reinterpret_cast<void*>(ptr_[r]); }

  CUcontext ctx_[kRanks] = {};
  bool retained_[kRanks] = {};
  ncclComm_t comm_[kRanks] = {};
  CUdeviceptr ptr_[kRanks] = {};
};

TEST_F(SimNcclTest, InitAllPaysTheCreationCostOnce) {
  const auto start = std::chrono::steady_clock::now();
  InitAll();
  EXPECT_GE(MsSince(start), kInitWallMs * 0.95);
}

TEST_F(SimNcclTest, InitRankInAGroupAndSplitPayTheCreationCost) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  auto start = std::chrono::steady_clock::now();
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_EQ(cuCtxSetCurrent(ctx_[r]), CUDA_SUCCESS);
    ASSERT_EQ(ncclCommInitRank(&comm_[r], kRanks, id, r), ncclSuccess);
  }
  // The cost is paid by ncclGroupEnd, not by the calls inside the group: had they waited for it,
  // the group's end would find the communicators made. (A lower bound: a loaded host only adds.)
  const auto group_end = std::chrono::steady_clock::now();
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  EXPECT_GE(MsSince(group_end), kInitWallMs * 0.95)
      << "the calls inside the group must not wait for the cost";

  ncclComm_t split[kRanks] = {};
  start = std::chrono::steady_clock::now();
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < kRanks; ++r) ASSERT_EQ(ncclCommSplit(comm_[r], 0, r, &split[r], nullptr), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  EXPECT_GE(MsSince(start), kInitWallMs * 0.95);
  for (ncclComm_t c : split) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
}

TEST_F(SimNcclTest, GarbageAndStaleHandlesAreInvalidArguments) {
  InitAll();
  ncclComm_t destroyed = nullptr;
  {
    ncclComm_t comms[kRanks];
    ASSERT_EQ(ncclCommInitAll(comms, kRanks, nullptr), ncclSuccess);
    ASSERT_EQ(ncclCommDestroy(comms[0]), ncclSuccess);
    ASSERT_EQ(ncclCommDestroy(comms[1]), ncclSuccess);
    destroyed = comms[0];
  }
  const ncclComm_t garbage[] = {
      reinterpret_cast<ncclComm_t>(uintptr_t{0x1234}),
      reinterpret_cast<ncclComm_t>(uintptr_t{0xdeadbeef000}),
      reinterpret_cast<ncclComm_t>(uintptr_t{0x41} << 56 | uintptr_t{999999}
                                                               << 4),  // right kind, never issued
      reinterpret_cast<ncclComm_t>(ctx_[0]),                           // a context handle
      destroyed,
  };
  Allocate(64);
  int on_stack = 0;
  std::vector<ncclComm_t> handles(std::begin(garbage), std::end(garbage));
  handles.push_back(reinterpret_cast<ncclComm_t>(&on_stack));  // a real pointer
  for (ncclComm_t c : handles) {
    int value = 0;
    EXPECT_EQ(ncclCommCount(c, &value), ncclInvalidArgument);
    EXPECT_EQ(ncclCommUserRank(c, &value), ncclInvalidArgument);
    EXPECT_EQ(ncclAllReduce(ptr(0), ptr(0), 16, ncclFloat, ncclSum, c, nullptr), ncclInvalidArgument);
    EXPECT_EQ(ncclCommDestroy(c), ncclInvalidArgument);
  }
  EXPECT_NE(std::string(ncclGetLastError(nullptr)), "");
}

// Two threads, one per rank, each issuing hundreds of in-place sums without a group, and a
// memset between some of them: every collective must meet its partner, none may block a worker.
TEST_F(SimNcclTest, ManyCollectivesFromTwoThreadsWithoutDeadlock) {
  InitAll();
  constexpr size_t kCount = 64;
  constexpr int kCollectives = 400;
  Allocate((kCount + 1) * sizeof(double));  // one spare element for the interleaved memsets
  std::vector<std::thread> threads;
  ncclResult_t results[kRanks] = {ncclInternalError, ncclInternalError};
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      if (cuCtxSetCurrent(ctx_[r]) != CUDA_SUCCESS) return;
      CUstream stream = nullptr;
      if (cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) return;
      const std::vector<double> ones(kCount, 1.0);
      cuMemcpyHtoDAsync(ptr_[r], ones.data(), kCount * sizeof(double), stream);
      ncclResult_t result = ncclSuccess;
      for (int i = 0; i < kCollectives && result == ncclSuccess; ++i) {
        // x -> x + x on both ranks: 2^k after k collectives, exact in double.
        result = ncclAllReduce(ptr(r), ptr(r), kCount, ncclDouble, ncclSum, comm_[r],
                               reinterpret_cast<cudaStream_t>(stream));
        if (i % 50 == 0) cuMemsetD8Async(ptr_[r] + kCount * sizeof(double), 0, sizeof(double), stream);
      }
      if (cuStreamSynchronize(stream) != CUDA_SUCCESS) result = ncclUnhandledCudaError;
      cuStreamDestroy(stream);
      results[r] = result;
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_EQ(results[r], ncclSuccess) << "rank " << r;
    std::vector<double> got(kCount);
    ASSERT_EQ(cuCtxSetCurrent(ctx_[r]), CUDA_SUCCESS);
    ASSERT_EQ(cuMemcpyDtoH(got.data(), ptr_[r], kCount * sizeof(double)), CUDA_SUCCESS);
    for (double v : got) ASSERT_EQ(v, std::ldexp(1.0, kCollectives)) << "rank " << r;
  }
}

// Exchanges of large buffers in a group, each read back as soon as the receiving rank's stream is
// synchronized: the stream must not finish before the bytes it receives have all landed, whichever
// rank's worker moves them.
TEST_F(SimNcclTest, ReceivedBytesHaveLandedWhenTheStreamSynchronizes) {
  InitAll();
  constexpr size_t kCount = 1 << 18;
  Allocate(2 * kCount * sizeof(float));  // [data | inbox] on each rank
  CUstream stream[kRanks] = {};
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_EQ(cuCtxSetCurrent(ctx_[r]), CUDA_SUCCESS);
    ASSERT_EQ(cuStreamCreate(&stream[r], CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  }
  std::vector<float> values(kCount), got(kCount);
  for (int round = 0; round < 40; ++round) {
    for (int r = 0; r < kRanks; ++r) {
      for (size_t k = 0; k < kCount; ++k) values[k] = static_cast<float>(round * 10 + r + 1);
      ASSERT_EQ(cuCtxSetCurrent(ctx_[r]), CUDA_SUCCESS);
      ASSERT_EQ(cuMemcpyHtoD(ptr_[r], values.data(), kCount * sizeof(float)), CUDA_SUCCESS);
    }
    ASSERT_EQ(ncclGroupStart(), ncclSuccess);
    for (int r = 0; r < kRanks; ++r) {
      auto* data = static_cast<float*>(ptr(r));
      ASSERT_EQ(ncclSend(data, kCount, ncclFloat, 1 - r, comm_[r], reinterpret_cast<cudaStream_t>(stream[r])),
                ncclSuccess);
      ASSERT_EQ(ncclRecv(data + kCount, kCount, ncclFloat, 1 - r, comm_[r],
                         reinterpret_cast<cudaStream_t>(stream[r])),
                ncclSuccess);
    }
    ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
    for (int r = 0; r < kRanks; ++r) {
      ASSERT_EQ(cuCtxSetCurrent(ctx_[r]), CUDA_SUCCESS);
      ASSERT_EQ(cuStreamSynchronize(stream[r]), CUDA_SUCCESS);
      ASSERT_EQ(cuMemcpyDtoH(got.data(), ptr_[r] + kCount * sizeof(float), kCount * sizeof(float)),
                CUDA_SUCCESS);
      const float want = static_cast<float>(round * 10 + (1 - r) + 1);
      size_t wrong = 0;
      for (float v : got) wrong += v != want;
      ASSERT_EQ(wrong, 0u) << "round " << round << " rank " << r;
    }
  }
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_EQ(cuCtxSetCurrent(ctx_[r]), CUDA_SUCCESS);
    ASSERT_EQ(cuStreamDestroy(stream[r]), CUDA_SUCCESS);
  }
}

TEST_F(SimNcclTest, MismatchedCollectiveIsRefused) {
  InitAll();
  Allocate(1024);
  ASSERT_EQ(cuCtxSetCurrent(ctx_[0]), CUDA_SUCCESS);
  ASSERT_EQ(ncclAllReduce(ptr(0), ptr(0), 16, ncclFloat, ncclSum, comm_[0], nullptr), ncclSuccess);
  ASSERT_EQ(cuCtxSetCurrent(ctx_[1]), CUDA_SUCCESS);
  EXPECT_EQ(ncclAllReduce(ptr(1), ptr(1), 32, ncclFloat, ncclSum, comm_[1], nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclAllReduce(ptr(1), ptr(1), 16, ncclFloat, ncclMax, comm_[1], nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclBroadcast(ptr(1), ptr(1), 16, ncclFloat, 0, comm_[1], nullptr), ncclInvalidArgument);
  // The matching call completes the collective on both ranks.
  ASSERT_EQ(ncclAllReduce(ptr(1), ptr(1), 16, ncclFloat, ncclSum, comm_[1], nullptr), ncclSuccess);
  EXPECT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSetCurrent(ctx_[0]), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
}

TEST_F(SimNcclTest, BuffersAndStreamsOfTheWrongDeviceAreRefused) {
  InitAll();
  Allocate(1024);
  // Rank 0's communicator with device 1's memory, or with a pointer past an allocation's end.
  EXPECT_EQ(ncclAllReduce(ptr(1), ptr(1), 16, ncclFloat, ncclSum, comm_[0], nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclAllReduce(ptr(0), ptr(0), 1024, ncclFloat, ncclSum, comm_[0], nullptr), ncclInvalidArgument);
  std::vector<float> host(16);
  EXPECT_EQ(ncclAllReduce(host.data(), ptr(0), 16, ncclFloat, ncclSum, comm_[0], nullptr),
            ncclInvalidArgument);
  // AllGather's receive buffer holds nranks * sendcount elements.
  EXPECT_EQ(ncclAllGather(ptr(0), ptr(0), 1024 / sizeof(float) / kRanks + 1, ncclFloat, comm_[0], nullptr),
            ncclInvalidArgument);
  ASSERT_EQ(cuCtxSetCurrent(ctx_[1]), CUDA_SUCCESS);
  CUstream other = nullptr;
  ASSERT_EQ(cuStreamCreate(&other, CU_STREAM_DEFAULT), CUDA_SUCCESS);
  EXPECT_EQ(
      ncclAllReduce(ptr(0), ptr(0), 16, ncclFloat, ncclSum, comm_[0], reinterpret_cast<cudaStream_t>(other)),
      ncclInvalidArgument);
  EXPECT_EQ(cuStreamDestroy(other), CUDA_SUCCESS);
  // Count 0 is a no-op, even with NULL buffers.
  EXPECT_EQ(ncclAllReduce(nullptr, nullptr, 0, ncclFloat, ncclSum, comm_[0], nullptr), ncclSuccess);
}

TEST_F(SimNcclTest, UsageErrors) {
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidUsage);
  const int twice[] = {1, 1};
  ncclComm_t comms[kRanks] = {};
  EXPECT_EQ(ncclCommInitAll(comms, kRanks, twice), ncclInvalidUsage);
  const int missing[] = {0, 2};
  EXPECT_EQ(ncclCommInitAll(comms, kRanks, missing), ncclInvalidArgument);
  // A unique id of another process: communicators across processes are not modelled.
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  id.internal[8] ^= 0x5a;
  ncclComm_t comm = nullptr;
  EXPECT_EQ(ncclCommInitRank(&comm, 1, id, 0), ncclInvalidUsage);
  std::memset(id.internal, 0x11, sizeof(id.internal));
  EXPECT_EQ(ncclCommInitRank(&comm, 1, id, 0), ncclInvalidArgument);
  // A split color below NCCL_SPLIT_NOCOLOR.
  InitAll();
  ncclComm_t split = nullptr;
  EXPECT_EQ(ncclCommSplit(comm_[0], -2, 0, &split, nullptr), ncclInvalidArgument);
}

// A single-rank communicator needs no partner: its collectives are local copies.
TEST_F(SimNcclTest, SingleRankCommunicator) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ASSERT_EQ(cuCtxSetCurrent(ctx_[1]), CUDA_SUCCESS);
  ASSERT_EQ(ncclCommInitRank(&comm_[1], 1, id, 0), ncclSuccess);
  int device = -1;
  ASSERT_EQ(ncclCommCuDevice(comm_[1], &device), ncclSuccess);
  EXPECT_EQ(device, 1) << "bound to the context current at ncclCommInitRank";
  Allocate(64);
  const std::vector<int32_t> in = {1, 2, 3, 4};
  ASSERT_EQ(cuCtxSetCurrent(ctx_[1]), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyHtoD(ptr_[1], in.data(), 16), CUDA_SUCCESS);
  ASSERT_EQ(
      ncclAllReduce(ptr(1), reinterpret_cast<char*>(ptr(1)) + 16, 4, ncclInt32, ncclProd, comm_[1], nullptr),
      ncclSuccess);
  std::vector<int32_t> out(4);
  ASSERT_EQ(cuMemcpyDtoH(out.data(), ptr_[1] + 16, 16), CUDA_SUCCESS);
  EXPECT_EQ(out, in);
}

// A communicator whose context is gone reports it instead of touching freed state.
TEST_F(SimNcclTest, DestroyedContextIsAnUnhandledCudaError) {
  CUcontext own[kRanks] = {};
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_EQ(cuCtxCreate(&own[r], nullptr, 0, r), CUDA_SUCCESS);
    ASSERT_EQ(ncclCommInitRank(&comm_[r], kRanks, id, r), ncclSuccess);
    ASSERT_EQ(cuCtxPopCurrent(nullptr), CUDA_SUCCESS);
  }
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  ASSERT_EQ(cuCtxDestroy(own[0]), CUDA_SUCCESS);
  Allocate(64);
  EXPECT_EQ(ncclAllReduce(ptr(0), ptr(0), 4, ncclFloat, ncclSum, comm_[0], nullptr), ncclUnhandledCudaError);
  int count = 0;
  EXPECT_EQ(ncclCommCount(comm_[0], &count), ncclSuccess) << "queries still answer";
  EXPECT_EQ(ncclCommDestroy(comm_[0]), ncclSuccess);
  comm_[0] = nullptr;
  EXPECT_EQ(ncclCommDestroy(comm_[1]), ncclSuccess);
  comm_[1] = nullptr;
  ASSERT_EQ(cuCtxDestroy(own[1]), CUDA_SUCCESS);
}

}  // namespace
