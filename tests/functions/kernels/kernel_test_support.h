// What the decoder kernel tests share: a simgpu context with the kernel module loaded, device
// arrays, and seeded random inputs.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <random>
#include <vector>

#include "runtime_on_simgpu.h"

namespace phos::fn::testing {

// The default stream: launches and the synchronous copies below are ordered on it.
inline cudaStream_t DefaultStream() {
  return nullptr;
}

class DecoderKernelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
    CUdevice device = 0;
    ASSERT_EQ(cuDeviceGet(&device, 0), CUDA_SUCCESS);
    ASSERT_EQ(cuCtxCreate(&context_, nullptr, 0, device), CUDA_SUCCESS);
    ASSERT_EQ(LoadDecoderKernelModule(), CUDA_SUCCESS);
  }
  void TearDown() override {
    EXPECT_EQ(UnloadDecoderKernelModule(), CUDA_SUCCESS);
    if (context_ != nullptr) {
      EXPECT_EQ(cuCtxDestroy(context_), CUDA_SUCCESS);
    }
  }

 private:
  CUcontext context_ = nullptr;
};

// Device memory holding a copy of a host vector; Read() waits for the work before it.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(const std::vector<T>& host) : size_(host.size()) {
    EXPECT_EQ(cuMemAlloc(&ptr_, bytes()), CUDA_SUCCESS);
    EXPECT_EQ(cuMemcpyHtoD(ptr_, host.data(), bytes()), CUDA_SUCCESS);
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() { cuMemFree(ptr_); }

  T* get() const { return reinterpret_cast<T*>(ptr_); }
  std::vector<T> Read() const {
    std::vector<T> host(size_);
    EXPECT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
    EXPECT_EQ(cuMemcpyDtoH(host.data(), ptr_, bytes()), CUDA_SUCCESS);
    return host;
  }

 private:
  std::size_t bytes() const { return size_ * sizeof(T); }
  CUdeviceptr ptr_ = 0;
  std::size_t size_ = 0;
};

// n floats uniform in [lo, hi), the same for a given seed on every run.
inline std::vector<float> RandomFloats(std::size_t n, unsigned seed, float lo = -2.0f, float hi = 2.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Each element of `actual` within abs_tol + rel_tol * |expected| of `expected`.
inline void ExpectNear(const std::vector<float>& actual, const std::vector<double>& expected, double abs_tol,
                       double rel_tol) {
  ASSERT_EQ(actual.size(), expected.size());
  for (std::size_t i = 0; i < actual.size(); ++i) {
    const double tol = abs_tol + rel_tol * std::abs(expected[i]);
    ASSERT_NEAR(actual[i], expected[i], tol) << "element " << i;
  }
}

}  // namespace phos::fn::testing
