// cuBLAS handles and calls over a fake DeviceAccess (tests/simgpu/device/fake_device_access.h):
// what src/blas asks of the devices, tested without the driver. Creation costs are the recorded
// modelled costs, not wall time.
#include "blas/blas_handle.h"

#include <gtest/gtest.h>

#include <vector>

#include "blas/blas_ops.h"
#include "device/fake_device_access.h"

namespace phos::sim::blas {
namespace {

using phos::sim::testing::FakeDeviceAccess;

DeviceProfile TestProfile() {
  DeviceProfile profile;
  profile.name = "fake";
  profile.blas_handle_create_first_s = 0.5;
  profile.blas_handle_create_s = 0.125;
  return profile;
}

class BlasHandleTest : public ::testing::Test {
 protected:
  // C (2 x 2) = A (2 x 3) * B (3 x 2), column-major, through a handle's call.
  cublasStatus_t Gemm(cublasHandle_t handle, const float* a, const float* b, float* c) {
    BlasCall call;
    if (cublasStatus_t s = handles_.BeginCall(handle, &call); s != CUBLAS_STATUS_SUCCESS) return s;
    static constexpr float kOne = 1.0f, kZero = 0.0f;
    GemmCall gemm;
    gemm.alpha = &kOne;
    gemm.beta = &kZero;
    gemm.m = 2;
    gemm.n = 2;
    gemm.k = 3;
    gemm.a = a;
    gemm.lda = 2;
    gemm.b = b;
    gemm.ldb = 3;
    gemm.c = c;
    gemm.ldc = 2;
    return EnqueueGemm({call.device, &call.handle->ctx, call.stream.get(), call.pointer_mode}, gemm);
  }

  const DeviceProfile profile_ = TestProfile();
  FakeDeviceAccess device_{1, profile_};
  HandleRegistry handles_{device_};
};

TEST_F(BlasHandleTest, CreateNeedsACurrentContext) {
  cublasHandle_t handle = nullptr;
  EXPECT_EQ(handles_.Create(&handle), CUBLAS_STATUS_NOT_INITIALIZED);
  EXPECT_TRUE(device_.paid().empty());
}

TEST_F(BlasHandleTest, FirstHandleOfEachContextPaysTheFirstHandleCost) {
  cublasHandle_t first = nullptr, second = nullptr, other = nullptr;
  device_.CreateCurrentContext(0);
  ASSERT_EQ(handles_.Create(&first), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(handles_.Create(&second), CUBLAS_STATUS_SUCCESS);
  device_.CreateCurrentContext(0);
  ASSERT_EQ(handles_.Create(&other), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(device_.paid(), (std::vector<double>{0.5, 0.125, 0.5}));
  EXPECT_NE(first, second);
  EXPECT_EQ(handles_.Destroy(first), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(handles_.Destroy(first), CUBLAS_STATUS_NOT_INITIALIZED);
}

TEST_F(BlasHandleTest, HandleOfADestroyedContextIsNotInitialized) {
  const ContextRef ctx = device_.CreateCurrentContext(0);
  cublasHandle_t handle = nullptr;
  ASSERT_EQ(handles_.Create(&handle), CUBLAS_STATUS_SUCCESS);
  std::shared_ptr<BlasHandle> found;
  ASSERT_EQ(handles_.Find(handle, &found), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(found->ctx.id, ctx.id);

  device_.DestroyContext(ctx);
  EXPECT_EQ(handles_.Find(handle, &found), CUBLAS_STATUS_NOT_INITIALIZED);
  BlasCall call;
  EXPECT_EQ(handles_.BeginCall(handle, &call), CUBLAS_STATUS_NOT_INITIALIZED);
  EXPECT_EQ(handles_.SetStream(handle, nullptr), CUBLAS_STATUS_NOT_INITIALIZED);
}

TEST_F(BlasHandleTest, SetStreamRefusesAStreamTheContextDoesNotHave) {
  device_.CreateCurrentContext(0);
  cublasHandle_t handle = nullptr;
  ASSERT_EQ(handles_.Create(&handle), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(handles_.SetStream(handle, reinterpret_cast<CUstream>(uintptr_t{0x1230})),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(handles_.SetStream(handle, nullptr), CUBLAS_STATUS_SUCCESS);
}

TEST_F(BlasHandleTest, CallInAFailedContextIsExecutionFailed) {
  const ContextRef ctx = device_.CreateCurrentContext(0);
  cublasHandle_t handle = nullptr;
  ASSERT_EQ(handles_.Create(&handle), CUBLAS_STATUS_SUCCESS);
  Op fault;
  fault.work = [] { return CUDA_ERROR_ILLEGAL_ADDRESS; };
  ctx.exec->null_stream()->Enqueue(std::move(fault));
  ASSERT_EQ(ctx.exec->Synchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);

  BlasCall call;
  EXPECT_EQ(handles_.BeginCall(handle, &call), CUBLAS_STATUS_EXECUTION_FAILED);
}

TEST_F(BlasHandleTest, GemmRunsOnTheMemoryTheDeviceDeclares) {
  const ContextRef ctx = device_.CreateCurrentContext(0);
  cublasHandle_t handle = nullptr;
  ASSERT_EQ(handles_.Create(&handle), CUBLAS_STATUS_SUCCESS);
  const std::vector<float> a = {1, 2, 3, 4, 5, 6};  // [[1 3 5] [2 4 6]]
  const std::vector<float> b = {1, 0, 1, 0, 1, 0};  // [[1 0] [0 1] [1 0]]
  std::vector<float> c(4, -1.0f);
  device_.AddMemory(a.data(), a.size() * sizeof(float), 0);
  device_.AddMemory(b.data(), b.size() * sizeof(float), 0);
  device_.AddMemory(c.data(), c.size() * sizeof(float), 0);

  ASSERT_EQ(Gemm(handle, a.data(), b.data(), c.data()), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(ctx.exec->Synchronize(), CUDA_SUCCESS);
  EXPECT_EQ(c, (std::vector<float>{6, 8, 3, 4}));
}

TEST_F(BlasHandleTest, GemmOperandOutsideDeviceMemoryIsRefusedAndNothingRuns) {
  const ContextRef ctx = device_.CreateCurrentContext(0);
  cublasHandle_t handle = nullptr;
  ASSERT_EQ(handles_.Create(&handle), CUBLAS_STATUS_SUCCESS);
  const std::vector<float> a(6, 1.0f);
  const std::vector<float> b(6, 1.0f);
  std::vector<float> c(4, -1.0f);
  device_.AddMemory(a.data(), a.size() * sizeof(float), 0);
  device_.AddMemory(c.data(), c.size() * sizeof(float), 0);

  EXPECT_EQ(Gemm(handle, a.data(), b.data(), c.data()), CUBLAS_STATUS_INVALID_VALUE);
  ASSERT_EQ(ctx.exec->Synchronize(), CUDA_SUCCESS);
  EXPECT_EQ(c, (std::vector<float>(4, -1.0f)));
}

}  // namespace
}  // namespace phos::sim::blas
