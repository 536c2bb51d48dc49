// What the tests of simgpu's cuBLAS routines share (level1_test.cc, level2_test.cc, level3_test.cc,
// gemm_test.cc): simgpu configured and initialised once per process, a context and a handle per
// test, device copies of host vectors, and inputs whose products and short sums are exact in fp32
// (quarters in [-2, 2]), so that a reference written as plain loops can be compared exactly where
// the order of additions does not matter, and within a stated tolerance where it does.
#pragma once

#include <cublas_v2.h>
#include <cuda.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "phos/simgpu/simgpu.h"

namespace phos::sim::blas::testing {

class SimgpuEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    PhosSimConfig config{"ci", 1.0, 1, 1ull << 30};
    ASSERT_EQ(phosSimConfigure(&config), CUDA_SUCCESS);
    ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  }
};
inline ::testing::Environment* const kSimgpu = ::testing::AddGlobalTestEnvironment(new SimgpuEnvironment);

// Quarters in [-2, 2], varied by `seed`.
template <typename T>
std::vector<T> Quarters(size_t count, int seed) {
  std::vector<T> v(count);
  for (size_t i = 0; i < count; ++i)
    v[i] = static_cast<T>(static_cast<int>((i * 7 + seed * 3) % 17) - 8) / T{4};
  return v;
}

template <typename T>
void ExpectNear(const std::vector<T>& got, const std::vector<T>& want, double tolerance) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(static_cast<double>(got[i]), static_cast<double>(want[i]), tolerance) << "element " << i;
  }
}

// Element i of a BLAS vector of n elements `inc` apart in `v` (inc < 0: from the end).
inline size_t At(int n, int inc, int i) {
  return inc >= 0 ? static_cast<size_t>(i) * inc : static_cast<size_t>(n - 1 - i) * static_cast<size_t>(-inc);
}

class RoutineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(cuCtxCreate(&ctx_, nullptr, 0, 0), CUDA_SUCCESS);
    ASSERT_EQ(cublasCreate(&handle_), CUBLAS_STATUS_SUCCESS);
  }
  void TearDown() override {
    if (handle_ != nullptr) {
      EXPECT_EQ(cublasDestroy(handle_), CUBLAS_STATUS_SUCCESS);
    }
    for (CUdeviceptr p : buffers_) cuMemFree(p);
    if (ctx_ != nullptr) {
      EXPECT_EQ(cuCtxDestroy(ctx_), CUDA_SUCCESS);
    }
  }

  // A device copy of `host`, freed after the test.
  template <typename T>
  T* Upload(const std::vector<T>& host) {
    CUdeviceptr p = 0;
    EXPECT_EQ(cuMemAlloc(&p, std::max<size_t>(1, host.size()) * sizeof(T)), CUDA_SUCCESS);
    if (!host.empty()) {
      EXPECT_EQ(cuMemcpyHtoD(p, host.data(), host.size() * sizeof(T)), CUDA_SUCCESS);
    }
    buffers_.push_back(p);
    return reinterpret_cast<T*>(p);
  }
  // Waits for the handle's work, then copies `count` elements back.
  template <typename T>
  std::vector<T> Download(const T* device, size_t count) {
    EXPECT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
    std::vector<T> out(count);
    EXPECT_EQ(cuMemcpyDtoH(out.data(), reinterpret_cast<CUdeviceptr>(device), count * sizeof(T)),
              CUDA_SUCCESS);
    return out;
  }

  CUcontext ctx_ = nullptr;
  cublasHandle_t handle_ = nullptr;
  std::vector<CUdeviceptr> buffers_;
};

}  // namespace phos::sim::blas::testing
