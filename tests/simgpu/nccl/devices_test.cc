// Communicators over every device of a simgpu with PHOS_TEST_DEVICES devices (4 or 8): the
// collectives' results for that many ranks, an all-to-all of sends and receives in one group, a
// reduce to the last rank, and a split into pairs.
#include <cuda.h>
#include <gtest/gtest.h>
#include <nccl.h>

#include <cstdint>
#include <vector>

namespace {

constexpr int kDevices = PHOS_TEST_DEVICES;
constexpr size_t kCount = 257;

// CTest names tests by suite and case: each device count gets its own suite name
// (NcclDevices4Test, NcclDevices8Test).
#define PHOS_CAT3_(a, b, c) a##b##c
#define PHOS_CAT3(a, b, c) PHOS_CAT3_(a, b, c)
#define NcclDevicesTest PHOS_CAT3(NcclDevices, PHOS_TEST_DEVICES, Test)

class NcclDevicesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
    int count = 0;
    ASSERT_EQ(cuDeviceGetCount(&count), CUDA_SUCCESS);
    ASSERT_EQ(count, kDevices) << "PHOS_SIMGPU_DEVICES should be " << kDevices;
    ctx_.resize(kDevices);
    comm_.resize(kDevices);
    send_.resize(kDevices);
    recv_.resize(kDevices);
    for (int r = 0; r < kDevices; ++r) ASSERT_EQ(cuDevicePrimaryCtxRetain(&ctx_[r], r), CUDA_SUCCESS);
    ASSERT_EQ(ncclCommInitAll(comm_.data(), kDevices, nullptr), ncclSuccess);
    for (int r = 0; r < kDevices; ++r) {
      ASSERT_EQ(cuCtxSetCurrent(ctx_[r]), CUDA_SUCCESS);
      ASSERT_EQ(cuMemAlloc(&send_[r], kDevices * kCount * sizeof(int32_t)), CUDA_SUCCESS);
      ASSERT_EQ(cuMemAlloc(&recv_[r], kDevices * kCount * sizeof(int32_t)), CUDA_SUCCESS);
      const std::vector<int32_t> in = Input(r, kDevices * kCount);
      ASSERT_EQ(cuMemcpyHtoD(send_[r], in.data(), in.size() * sizeof(int32_t)), CUDA_SUCCESS);
    }
  }
  void TearDown() override {
    for (int r = 0; r < static_cast<int>(comm_.size()); ++r) {
      if (comm_[r] != nullptr) {
        EXPECT_EQ(ncclCommDestroy(comm_[r]), ncclSuccess);
      }
      if (ctx_[r] == nullptr) continue;
      EXPECT_EQ(cuCtxSetCurrent(ctx_[r]), CUDA_SUCCESS);
      if (send_[r] != 0) {
        EXPECT_EQ(cuMemFree(send_[r]), CUDA_SUCCESS);
      }
      if (recv_[r] != 0) {
        EXPECT_EQ(cuMemFree(recv_[r]), CUDA_SUCCESS);
      }
      EXPECT_EQ(cuDevicePrimaryCtxRelease(r), CUDA_SUCCESS);
    }
    EXPECT_EQ(cuCtxSetCurrent(nullptr), CUDA_SUCCESS);
  }

  static std::vector<int32_t> Input(int r, size_t count) {
    std::vector<int32_t> v(count);
    for (size_t i = 0; i < count; ++i) v[i] = static_cast<int32_t>((i * 13 + r * 7) % 101) - 50;
    return v;
  }
  std::vector<int32_t> Download(int r, size_t count) {
    std::vector<int32_t> out(count);
    EXPECT_EQ(cuCtxSetCurrent(ctx_[r]), CUDA_SUCCESS);
    EXPECT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
    EXPECT_EQ(cuMemcpyDtoH(out.data(), recv_[r], count * sizeof(int32_t)), CUDA_SUCCESS);
    return out;
  }
  void* send(int r) const { return reinterpret_cast<void*>(send_[r]); }
  void* recv(int r) const { return reinterpret_cast<void*>(recv_[r]); }

  std::vector<CUcontext> ctx_;
  std::vector<ncclComm_t> comm_;
  std::vector<CUdeviceptr> send_;
  std::vector<CUdeviceptr> recv_;
};

TEST_F(NcclDevicesTest, AllReduceSum) {
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < kDevices; ++r) {
    ASSERT_EQ(ncclAllReduce(send(r), recv(r), kCount, ncclInt32, ncclSum, comm_[r], nullptr), ncclSuccess);
  }
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  std::vector<int32_t> sum(kCount, 0);
  for (int r = 0; r < kDevices; ++r) {
    const std::vector<int32_t> in = Input(r, kCount);
    for (size_t i = 0; i < kCount; ++i) sum[i] += in[i];
  }
  for (int r = 0; r < kDevices; ++r) EXPECT_EQ(Download(r, kCount), sum) << "rank " << r;
}

TEST_F(NcclDevicesTest, AllGatherAndReduceScatter) {
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < kDevices; ++r) {
    ASSERT_EQ(ncclAllGather(send(r), recv(r), kCount, ncclInt32, comm_[r], nullptr), ncclSuccess);
  }
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  std::vector<int32_t> gathered;
  for (int r = 0; r < kDevices; ++r) {
    const std::vector<int32_t> in = Input(r, kCount);
    gathered.insert(gathered.end(), in.begin(), in.end());
  }
  for (int r = 0; r < kDevices; ++r) EXPECT_EQ(Download(r, kDevices * kCount), gathered) << "rank " << r;

  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < kDevices; ++r) {
    ASSERT_EQ(ncclReduceScatter(send(r), recv(r), kCount, ncclInt32, ncclMin, comm_[r], nullptr),
              ncclSuccess);
  }
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  for (int r = 0; r < kDevices; ++r) {
    std::vector<int32_t> want(kCount, INT32_MAX);
    for (int s = 0; s < kDevices; ++s) {
      const std::vector<int32_t> in = Input(s, kDevices * kCount);
      for (size_t i = 0; i < kCount; ++i) want[i] = std::min(want[i], in[r * kCount + i]);
    }
    EXPECT_EQ(Download(r, kCount), want) << "rank " << r;
  }
}

// Every rank sends slice p of its send buffer to rank p and receives rank p's slice for it at
// slice p of its receive buffer, all in one group.
TEST_F(NcclDevicesTest, AllToAllOfSendsAndReceives) {
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < kDevices; ++r) {
    for (int p = 0; p < kDevices; ++p) {
      auto* from = static_cast<int32_t*>(send(r)) + p * kCount;
      auto* into = static_cast<int32_t*>(recv(r)) + p * kCount;
      ASSERT_EQ(ncclSend(from, kCount, ncclInt32, p, comm_[r], nullptr), ncclSuccess);
      ASSERT_EQ(ncclRecv(into, kCount, ncclInt32, p, comm_[r], nullptr), ncclSuccess);
    }
  }
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  for (int r = 0; r < kDevices; ++r) {
    std::vector<int32_t> want;
    for (int p = 0; p < kDevices; ++p) {
      const std::vector<int32_t> in = Input(p, kDevices * kCount);
      want.insert(want.end(), in.begin() + r * kCount, in.begin() + (r + 1) * kCount);
    }
    EXPECT_EQ(Download(r, kDevices * kCount), want) << "rank " << r;
  }
}

TEST_F(NcclDevicesTest, ReduceProductToTheLastRank) {
  constexpr int kRoot = kDevices - 1;
  ASSERT_EQ(cuCtxSetCurrent(ctx_[0]), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD8(recv_[0], 0, kCount * sizeof(int32_t)), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < kDevices; ++r) {
    ASSERT_EQ(ncclReduce(send(r), r == kRoot ? recv(r) : nullptr, kCount, ncclInt32, ncclProd, kRoot,
                         comm_[r], nullptr),
              ncclSuccess);
  }
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  std::vector<int32_t> product(kCount, 1);
  for (int r = 0; r < kDevices; ++r) {
    const std::vector<int32_t> in = Input(r, kCount);
    for (size_t i = 0; i < kCount; ++i) {
      product[i] = static_cast<int32_t>(static_cast<uint32_t>(product[i]) * static_cast<uint32_t>(in[i]));
    }
  }
  EXPECT_EQ(Download(kRoot, kCount), product);
  EXPECT_EQ(Download(0, kCount), std::vector<int32_t>(kCount, 0))
      << "a rank that is not the root receives nothing";
}

// Pairs (color rank / 2): each pair broadcasts from its second member.
TEST_F(NcclDevicesTest, SplitIntoPairsAndBroadcast) {
  std::vector<ncclComm_t> pair(kDevices);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < kDevices; ++r)
    ASSERT_EQ(ncclCommSplit(comm_[r], r / 2, r, &pair[r], nullptr), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < kDevices; ++r) {
    int count = 0, rank = -1;
    ASSERT_EQ(ncclCommCount(pair[r], &count), ncclSuccess);
    ASSERT_EQ(ncclCommUserRank(pair[r], &rank), ncclSuccess);
    EXPECT_EQ(count, 2);
    EXPECT_EQ(rank, r % 2);
    ASSERT_EQ(ncclBroadcast(send(r), recv(r), kCount, ncclInt32, 1, pair[r], nullptr), ncclSuccess);
  }
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  for (int r = 0; r < kDevices; ++r) {
    EXPECT_EQ(Download(r, kCount), Input(r | 1, kCount)) << "rank " << r;
    EXPECT_EQ(ncclCommDestroy(pair[r]), ncclSuccess);
  }
}

}  // namespace
