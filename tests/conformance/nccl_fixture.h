// The NCCL conformance tests' fixture (nccl_test.cc, nccl_p2p_test.cc): two ranks on two devices,
// each with its primary context and a stream, and rank inputs exact in every type the tests use.
#pragma once

#include <cuda_fp16.h>
#include <nccl.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <thread>
#include <vector>

#include "conformance.h"

namespace phos::conformance {

#define PHOS_ASSERT_NCCL(expr) ASSERT_EQ((expr), ncclSuccess) << #expr
#define PHOS_EXPECT_NCCL(expr) EXPECT_EQ((expr), ncclSuccess) << #expr

constexpr int kRanks = 2;
constexpr size_t kCount = 1000;  // elements per rank: not a multiple of anything convenient

// Two devices, each with its primary context and a stream; the tests' communicators bind to them.
class NcclTest : public ::testing::Test {
 protected:
  void SetUp() override {
    PHOS_ASSERT_CU(cuInit(0));
    int devices = 0;
    PHOS_ASSERT_CU(cuDeviceGetCount(&devices));
    if (devices < kRanks) GTEST_SKIP() << "needs " << kRanks << " devices, found " << devices;
    for (int r = 0; r < kRanks; ++r) {
      PHOS_ASSERT_CU(cuDevicePrimaryCtxRetain(&ctx_[r], r));
      retained_[r] = true;
      PHOS_ASSERT_CU(cuCtxSetCurrent(ctx_[r]));
      PHOS_ASSERT_CU(cuStreamCreate(&stream_[r], CU_STREAM_NON_BLOCKING));
    }
  }
  void TearDown() override {
    for (int r = 0; r < kRanks; ++r) {
      if (comm_[r] != nullptr) {
        EXPECT_EQ(ncclCommDestroy(comm_[r]), ncclSuccess);
      }
    }
    for (int r = 0; r < kRanks; ++r) {
      if (stream_[r] != nullptr) {
        EXPECT_EQ(cuCtxSetCurrent(ctx_[r]), CUDA_SUCCESS);
        EXPECT_EQ(cuStreamDestroy(stream_[r]), CUDA_SUCCESS);
      }
      buffers_[r].clear();
      if (retained_[r]) {
        EXPECT_EQ(cuDevicePrimaryCtxRelease(r), CUDA_SUCCESS);
      }
    }
    EXPECT_EQ(cuCtxSetCurrent(nullptr), CUDA_SUCCESS);
  }

  // Communicators over devices 0 and 1, rank r on device r.
  void InitAll() {
    const int devs[kRanks] = {0, 1};
    PHOS_ASSERT_NCCL(ncclCommInitAll(comm_, kRanks, devs));
  }

  // A device buffer of rank r holding `host` (or `bytes` of zeroes).
  CUdeviceptr Buffer(int r, size_t bytes, const void* host = nullptr) {
    EXPECT_EQ(cuCtxSetCurrent(ctx_[r]), CUDA_SUCCESS);
    auto& buffer = buffers_[r].emplace_back(std::make_unique<DeviceBuffer>());
    EXPECT_EQ(buffer->Allocate(bytes), CUDA_SUCCESS);
    if (host != nullptr) {
      EXPECT_EQ(cuMemcpyHtoD(buffer->get(), host, bytes), CUDA_SUCCESS);
    } else {
      EXPECT_EQ(cuMemsetD8(buffer->get(), 0, bytes), CUDA_SUCCESS);
      // cuMemsetD8 is asynchronous on the legacy stream, which the non-blocking streams the
      // collectives run on do not wait for: finish it first.
      EXPECT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
    }
    return buffer->get();
  }
  template <typename T>
  CUdeviceptr Buffer(int r, const std::vector<T>& host) {
    return Buffer(r, host.size() * sizeof(T), host.data());
  }
  template <typename T>
  std::vector<T> Download(int r, CUdeviceptr ptr, size_t count) {
    std::vector<T> out(count);
    EXPECT_EQ(cuCtxSetCurrent(ctx_[r]), CUDA_SUCCESS);
    EXPECT_EQ(cuMemcpyDtoH(out.data(), ptr, count * sizeof(T)), CUDA_SUCCESS);
    return out;
  }
  void SyncAll() {
    for (int r = 0; r < kRanks; ++r) {
      EXPECT_EQ(cuCtxSetCurrent(ctx_[r]), CUDA_SUCCESS);
      EXPECT_EQ(cuStreamSynchronize(stream_[r]), CUDA_SUCCESS);
    }
  }
  cudaStream_t stream(int r) const { return reinterpret_cast<cudaStream_t>(stream_[r]); }
  static void* Ptr(CUdeviceptr p) { return reinterpret_cast<void*>(p); }

  CUcontext ctx_[kRanks] = {};
  bool retained_[kRanks] = {};
  CUstream stream_[kRanks] = {};
  ncclComm_t comm_[kRanks] = {};
  std::vector<std::unique_ptr<DeviceBuffer>> buffers_[kRanks];
};

// Rank r's input: distinct per rank and element, small enough to be exact in every type used.
template <typename T>
inline std::vector<T> Input(int r, size_t count) {
  std::vector<T> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = static_cast<T>(static_cast<int>((i * 7 + r * 3) % 23) - 11 + r);
  return v;
}

}  // namespace phos::conformance
