// The launch helpers the API layer uses for cuLaunchKernel and cuFuncGetParamInfo.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "module/module.h"
#include "test_support.h"

namespace phos::sim {
namespace {

using testing::Geometry;
using testing::GetKernel;

TEST(SimModuleGeometryTest, AcceptsShapesWithinTheDeviceLimits) {
  EXPECT_EQ(CheckLaunchGeometry(Geometry(1, 1, 1, 1, 1, 1)), CUDA_SUCCESS);
  EXPECT_EQ(CheckLaunchGeometry(Geometry(2147483647u, 65535, 65535, 1024, 1, 1)), CUDA_SUCCESS);
  EXPECT_EQ(CheckLaunchGeometry(Geometry(1, 1, 1, 32, 32, 1)), CUDA_SUCCESS);
  EXPECT_EQ(CheckLaunchGeometry(Geometry(1, 1, 1, 1, 16, 64)), CUDA_SUCCESS);
}

TEST(SimModuleGeometryTest, RejectsZeroAndOversizedShapes) {
  for (int dim = 0; dim < 3; ++dim) {
    LaunchGeometry g = Geometry(1, 1, 1, 1, 1, 1);
    g.grid[dim] = 0;
    EXPECT_EQ(CheckLaunchGeometry(g), CUDA_ERROR_INVALID_VALUE) << "grid " << dim;
    g = Geometry(1, 1, 1, 1, 1, 1);
    g.block[dim] = 0;
    EXPECT_EQ(CheckLaunchGeometry(g), CUDA_ERROR_INVALID_VALUE) << "block " << dim;
  }
  EXPECT_EQ(CheckLaunchGeometry(Geometry(2147483648u, 1, 1, 1, 1, 1)), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(CheckLaunchGeometry(Geometry(1, 65536, 1, 1, 1, 1)), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(CheckLaunchGeometry(Geometry(1, 1, 65536, 1, 1, 1)), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(CheckLaunchGeometry(Geometry(1, 1, 1, 1025, 1, 1)), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(CheckLaunchGeometry(Geometry(1, 1, 1, 1, 1, 65)), CUDA_ERROR_INVALID_VALUE);
  // Each extent within its limit, but 2048 threads in the block.
  EXPECT_EQ(CheckLaunchGeometry(Geometry(1, 1, 1, 64, 32, 1)), CUDA_ERROR_INVALID_VALUE);
}

TEST(SimModuleGeometryTest, UsesTheGivenLimits) {
  LaunchLimits small;
  small.max_threads_per_block = 256;
  EXPECT_EQ(CheckLaunchGeometry(Geometry(1, 1, 1, 256, 1, 1), small), CUDA_SUCCESS);
  EXPECT_EQ(CheckLaunchGeometry(Geometry(1, 1, 1, 512, 1, 1), small), CUDA_ERROR_INVALID_VALUE);
}

class SimModuleLaunchTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { module_ = testing::LoadModuleFile(PHOS_TEST_MODULE); }
  static void TearDownTestSuite() { module_.reset(); }
  const Kernel& vec_add() { return *GetKernel(*module_, "_Z7vec_addPKfS0_Pfi"); }

  static std::shared_ptr<Module> module_;
};
std::shared_ptr<Module> SimModuleLaunchTest::module_;

TEST_F(SimModuleLaunchTest, ParamInfo) {
  size_t offset = 0, size = 0;
  EXPECT_EQ(vec_add().GetParamInfo(3, &offset, &size), CUDA_SUCCESS);
  EXPECT_EQ(offset, 24u);
  EXPECT_EQ(size, 4u);
  EXPECT_EQ(vec_add().GetParamInfo(1, &offset, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(offset, 8u);
  EXPECT_EQ(vec_add().GetParamInfo(4, &offset, &size), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(vec_add().GetParamInfo(0, nullptr, &size), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(SimModuleLaunchTest, CapturedArgsOutliveTheCallersStorage) {
  std::vector<float> a = {1, 2, 3}, b = {10, 20, 30}, c(3, 0);
  KernelArgs args;
  {
    const float* pa = a.data();
    const float* pb = b.data();
    float* pc = c.data();
    int n = 3;
    void* params[] = {&pa, &pb, &pc, &n};
    ASSERT_EQ(vec_add().CaptureArgs(params, nullptr, &args), CUDA_SUCCESS);
    n = 0;  // as a caller reusing its storage right after cuLaunchKernel returns
    pc = nullptr;
  }
  KernelArgs moved = std::move(args);
  const LaunchGeometry g = Geometry(1, 1, 1, 4, 1, 1);
  vec_add().RunBlocks(g, moved.pointers(), 0, vec_add().block_count(g));
  EXPECT_EQ(c, (std::vector<float>{11, 22, 33}));
}

TEST_F(SimModuleLaunchTest, ExtraBufferIsUnpackedAtTheParamOffsets) {
  std::vector<float> a = {1, 2}, b = {3, 4}, c(2, 0);
  alignas(16) unsigned char buffer[32] = {};
  const float* pa = a.data();
  const float* pb = b.data();
  float* pc = c.data();
  int n = 2;
  std::memcpy(buffer + 0, &pa, 8);
  std::memcpy(buffer + 8, &pb, 8);
  std::memcpy(buffer + 16, &pc, 8);
  std::memcpy(buffer + 24, &n, 4);
  size_t size = 28;
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buffer, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                   CU_LAUNCH_PARAM_END};
  KernelArgs args;
  ASSERT_EQ(vec_add().CaptureArgs(nullptr, extra, &args), CUDA_SUCCESS);
  EXPECT_EQ(std::memcmp(args.buffer(), buffer, 28), 0);
  const LaunchGeometry g = Geometry(1, 1, 1, 2, 1, 1);
  vec_add().RunBlocks(g, args.pointers(), 0, 1);
  EXPECT_EQ(c, (std::vector<float>{4, 6}));
}

TEST_F(SimModuleLaunchTest, BadArgumentFormsAreInvalidValue) {
  float* p = nullptr;
  int n = 0;
  void* params[] = {&p, &p, &p, &n};
  unsigned char buffer[32] = {};
  size_t size = 28, small = 27;
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buffer, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                   CU_LAUNCH_PARAM_END};
  void* too_small[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buffer, CU_LAUNCH_PARAM_BUFFER_SIZE, &small,
                       CU_LAUNCH_PARAM_END};
  void* no_size[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buffer, CU_LAUNCH_PARAM_END};  // no effect
  void* no_buffer[] = {CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END};
  void* unknown_key[] = {reinterpret_cast<void*>(0x7), buffer, CU_LAUNCH_PARAM_END};
  void* empty[] = {CU_LAUNCH_PARAM_END};
  void* null_param[] = {&p, nullptr, &p, &n};
  KernelArgs args;
  EXPECT_EQ(vec_add().CaptureArgs(params, extra, &args), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(vec_add().CaptureArgs(nullptr, nullptr, &args), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(vec_add().CaptureArgs(nullptr, too_small, &args), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(vec_add().CaptureArgs(nullptr, no_size, &args), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(vec_add().CaptureArgs(nullptr, no_buffer, &args), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(vec_add().CaptureArgs(nullptr, unknown_key, &args), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(vec_add().CaptureArgs(nullptr, empty, &args), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(vec_add().CaptureArgs(null_param, nullptr, &args), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(vec_add().CaptureArgs(params, nullptr, nullptr), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(SimModuleLaunchTest, KernelWithoutParamsNeedsNoArguments) {
  const Kernel& count = *GetKernel(*module_, "_Z12count_launchv");
  EXPECT_EQ(count.param_buffer_size(), 0u);
  KernelArgs args;
  EXPECT_EQ(count.CaptureArgs(nullptr, nullptr, &args), CUDA_SUCCESS);
  unsigned char buffer[8] = {};
  size_t zero = 0;
  void* empty_buffer[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buffer, CU_LAUNCH_PARAM_BUFFER_SIZE, &zero,
                          CU_LAUNCH_PARAM_END};
  void* pointer_only[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buffer, CU_LAUNCH_PARAM_END};
  EXPECT_EQ(count.CaptureArgs(nullptr, empty_buffer, &args), CUDA_SUCCESS);
  EXPECT_EQ(count.CaptureArgs(nullptr, pointer_only, &args), CUDA_SUCCESS);
}

TEST_F(SimModuleLaunchTest, RunBlocksClampsTheRange) {
  std::vector<int> out(8, -1);
  int* p = out.data();
  int base = 5;
  const Kernel& kernel = *GetKernel(*module_, "_Z19param_is_per_threadiPi");
  KernelArgs args;
  void* params[] = {&base, &p};
  ASSERT_EQ(kernel.CaptureArgs(params, nullptr, &args), CUDA_SUCCESS);
  const LaunchGeometry g = Geometry(1, 1, 1, 8, 1, 1);
  kernel.RunBlocks(g, args.pointers(), 1, 1);  // empty
  kernel.RunBlocks(g, args.pointers(), 3, 1);  // reversed
  EXPECT_EQ(out, std::vector<int>(8, -1));
  kernel.RunBlocks(g, args.pointers(), 0, 1000);  // past the grid: only block 0 exists
  EXPECT_EQ(out, (std::vector<int>{5, 6, 7, 8, 9, 10, 11, 12}));
}

}  // namespace
}  // namespace phos::sim
