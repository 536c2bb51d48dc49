// Modules and launches. phosd loads a function's modules from their bytes, finds kernels by
// mangled name, lays out remoted launch arguments from cuFuncGetParamInfo (docs/design.md D4) and launches
// with either kernelParams or a packed argument buffer.
#include <cstring>
#include <memory>
#include <vector>

#include "conformance.h"
#include "kernel_names.h"
#include "param_pair.h"

namespace phos::conformance {
namespace {

class ModuleTest : public DriverTest {
 protected:
  void SetUp() override {
    DriverTest::SetUp();
    if (HasFatalFailure()) return;
    if (!KernelModule::Available()) GTEST_SKIP() << "this build has no conformance kernel module";
    module_ = std::make_unique<KernelModule>();
    PHOS_ASSERT_CU(module_->Load());
  }

  void TearDown() override {
    module_.reset();
    DriverTest::TearDown();
  }

  CUfunction Get(const char* name) {
    CUfunction function = nullptr;
    EXPECT_EQ(module_->Function(name, &function), CUDA_SUCCESS) << name;
    return function;
  }

  std::unique_ptr<KernelModule> module_;
};

TEST_F(ModuleTest, LoadedModuleHasEveryKernel) {
  for (const char* name : {kVecAdd, kScaleAdd, kRecordThreads, kMixedParams}) {
    EXPECT_NE(Get(name), nullptr) << name;
  }
}

TEST_F(ModuleTest, UnknownNameIsNotFound) {
  CUfunction function = nullptr;
  EXPECT_EQ(module_->Function("no_such_kernel", &function), CUDA_ERROR_NOT_FOUND);
  // The driver knows kernels only by their mangled names.
  EXPECT_EQ(module_->Function("vec_add", &function), CUDA_ERROR_NOT_FOUND);
}

TEST_F(ModuleTest, ParamInfoGivesTheDeviceSideLayout) {
  const CUfunction mixed = Get(kMixedParams);
  ASSERT_NE(mixed, nullptr);
  // mixed_params(char, double, const int*, short, float, ParamPair, long long, long long*): each
  // parameter at the next offset aligned for its type (checked against nvcc's EIATTR_KPARAM_INFO).
  const std::size_t expected_offsets[] = {0, 8, 16, 24, 28, 32, 40, 48};
  const std::size_t expected_sizes[] = {1, 8, 8, 2, 4, sizeof(ParamPair), 8, 8};
  for (std::size_t i = 0; i < 8; ++i) {
    std::size_t offset = 99;
    std::size_t size = 99;
    PHOS_EXPECT_CU(cuFuncGetParamInfo(mixed, i, &offset, &size));
    EXPECT_EQ(offset, expected_offsets[i]) << "parameter " << i;
    EXPECT_EQ(size, expected_sizes[i]) << "parameter " << i;
  }
  // paramSize may be NULL when only the offset is wanted.
  std::size_t offset = 0;
  PHOS_EXPECT_CU(cuFuncGetParamInfo(mixed, 4, &offset, nullptr));
  EXPECT_EQ(offset, 28u);
}

TEST_F(ModuleTest, ParamInfoPastTheLastParameterIsInvalidValue) {
  const CUfunction vec_add = Get(kVecAdd);
  ASSERT_NE(vec_add, nullptr);
  std::size_t offset = 0;
  std::size_t size = 0;
  PHOS_EXPECT_CU(cuFuncGetParamInfo(vec_add, 3, &offset, &size));
  EXPECT_EQ(offset, 24u);
  EXPECT_EQ(size, 4u);
  EXPECT_EQ(cuFuncGetParamInfo(vec_add, 4, &offset, &size), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuFuncGetParamInfo(Get(kMixedParams), 8, &offset, &size), CUDA_ERROR_INVALID_VALUE);
}

// Runs vec_add over n elements with kernelParams or, if `packed`, with an argument buffer laid
// out from cuFuncGetParamInfo, and checks every element.
void CheckVecAdd(CUfunction vec_add, int n, bool packed) {
  const std::size_t bytes = static_cast<std::size_t>(n) * sizeof(float);
  std::vector<float> a(n);
  std::vector<float> b(n);
  for (int i = 0; i < n; ++i) {
    a[i] = static_cast<float>(i);
    b[i] = static_cast<float>(2 * i + 1);
  }
  DeviceBuffer da;
  DeviceBuffer db;
  DeviceBuffer dc;
  PHOS_ASSERT_CU(da.Allocate(bytes));
  PHOS_ASSERT_CU(db.Allocate(bytes));
  PHOS_ASSERT_CU(dc.Allocate(bytes));
  PHOS_ASSERT_CU(cuMemcpyHtoD(da.get(), a.data(), bytes));
  PHOS_ASSERT_CU(cuMemcpyHtoD(db.get(), b.data(), bytes));
  PHOS_ASSERT_CU(cuMemsetD8(dc.get(), 0, bytes));
  CUdeviceptr pa = da.get();
  CUdeviceptr pb = db.get();
  CUdeviceptr pc = dc.get();
  if (packed) {
    unsigned char buffer[64] = {};
    const void* values[] = {&pa, &pb, &pc, &n};
    std::size_t end = 0;
    for (std::size_t i = 0; i < 4; ++i) {
      std::size_t offset = 0;
      std::size_t size = 0;
      PHOS_ASSERT_CU(cuFuncGetParamInfo(vec_add, i, &offset, &size));
      ASSERT_LE(offset + size, sizeof(buffer));
      std::memcpy(buffer + offset, values[i], size);
      end = offset + size;
    }
    void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buffer, CU_LAUNCH_PARAM_BUFFER_SIZE, &end,
                     CU_LAUNCH_PARAM_END};
    PHOS_ASSERT_CU(cuLaunchKernel(vec_add, 64, 1, 1, 128, 1, 1, 0, nullptr, nullptr, extra));
  } else {
    void* args[] = {&pa, &pb, &pc, &n};
    PHOS_ASSERT_CU(cuLaunchKernel(vec_add, 64, 1, 1, 128, 1, 1, 0, nullptr, args, nullptr));
  }
  std::vector<float> c(n);
  PHOS_ASSERT_CU(cuMemcpyDtoH(c.data(), dc.get(), bytes));
  int bad = 0;
  for (int i = 0; i < n; ++i) {
    if (c[i] != a[i] + b[i] && bad++ < 5) ADD_FAILURE() << "c[" << i << "] = " << c[i];
  }
  EXPECT_EQ(bad, 0);
}

TEST_F(ModuleTest, LaunchWithKernelParamsComputesTheResult) {
  // Not a multiple of the grid: the grid-stride loop must cover the ragged end.
  CheckVecAdd(Get(kVecAdd), (1 << 20) + 3, false);
}

TEST_F(ModuleTest, LaunchWithAPackedArgumentBufferComputesTheResult) {
  CheckVecAdd(Get(kVecAdd), 100000, true);
}

TEST_F(ModuleTest, EveryParameterReachesTheKernel) {
  const CUfunction mixed = Get(kMixedParams);
  ASSERT_NE(mixed, nullptr);
  DeviceBuffer src;
  DeviceBuffer out;
  PHOS_ASSERT_CU(src.Allocate(sizeof(int)));
  PHOS_ASSERT_CU(out.Allocate(8 * sizeof(long long)));
  const int source_value = 424242;
  PHOS_ASSERT_CU(cuMemcpyHtoD(src.get(), &source_value, sizeof(source_value)));

  char c = -7;
  double d = 12345.0;
  CUdeviceptr src_ptr = src.get();
  short s = -300;
  float f = 2.0f;
  ParamPair p{-9, 17.0f};
  long long ll = (1LL << 40) + 3;
  CUdeviceptr out_ptr = out.get();
  void* args[] = {&c, &d, &src_ptr, &s, &f, &p, &ll, &out_ptr};
  PHOS_ASSERT_CU(cuLaunchKernel(mixed, 1, 1, 1, 32, 1, 1, 0, nullptr, args, nullptr));
  long long values[8] = {};
  PHOS_ASSERT_CU(cuMemcpyDtoH(values, out.get(), sizeof(values)));
  const long long expected[8] = {-7, 12345, 424242, -300, 2, -9, 17, (1LL << 40) + 3};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(values[i], expected[i]) << "parameter " << i;
}

TEST_F(ModuleTest, ThreeDimensionalGridRunsEveryThreadOnce) {
  const CUfunction record = Get(kRecordThreads);
  ASSERT_NE(record, nullptr);
  constexpr unsigned int kGrid[3] = {3, 2, 2};
  constexpr unsigned int kBlock[3] = {4, 4, 2};
  constexpr unsigned int kThreads = 3 * 2 * 2 * 4 * 4 * 2;
  DeviceBuffer slots;
  DeviceBuffer counter;
  PHOS_ASSERT_CU(slots.Allocate(kThreads * sizeof(unsigned int)));
  PHOS_ASSERT_CU(counter.Allocate(sizeof(unsigned int)));
  PHOS_ASSERT_CU(cuMemsetD32(slots.get(), 0, kThreads));
  PHOS_ASSERT_CU(cuMemsetD32(counter.get(), 0, 1));
  CUdeviceptr slots_ptr = slots.get();
  CUdeviceptr counter_ptr = counter.get();
  void* args[] = {&slots_ptr, &counter_ptr};
  PHOS_ASSERT_CU(cuLaunchKernel(record, kGrid[0], kGrid[1], kGrid[2], kBlock[0], kBlock[1], kBlock[2], 0,
                                nullptr, args, nullptr));
  std::vector<unsigned int> back(kThreads);
  unsigned int count = 0;
  PHOS_ASSERT_CU(cuMemcpyDtoH(back.data(), slots.get(), kThreads * sizeof(unsigned int)));
  PHOS_ASSERT_CU(cuMemcpyDtoH(&count, counter.get(), sizeof(count)));
  EXPECT_EQ(count, kThreads);
  for (unsigned int i = 0; i < kThreads; ++i) EXPECT_EQ(back[i], i + 1) << "slot " << i;
}

TEST_F(ModuleTest, BadLaunchConfigurationIsInvalidValue) {
  const CUfunction record = Get(kRecordThreads);
  ASSERT_NE(record, nullptr);
  DeviceBuffer slots;
  DeviceBuffer counter;
  PHOS_ASSERT_CU(slots.Allocate(4096 * sizeof(unsigned int)));
  PHOS_ASSERT_CU(counter.Allocate(sizeof(unsigned int)));
  PHOS_ASSERT_CU(cuMemsetD32(counter.get(), 0, 1));
  CUdeviceptr slots_ptr = slots.get();
  CUdeviceptr counter_ptr = counter.get();
  void* args[] = {&slots_ptr, &counter_ptr};
  EXPECT_EQ(cuLaunchKernel(record, 0, 1, 1, 32, 1, 1, 0, nullptr, args, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuLaunchKernel(record, 1, 1, 1, 0, 1, 1, 0, nullptr, args, nullptr), CUDA_ERROR_INVALID_VALUE);
  // Over the 1024 threads-per-block limit, in one dimension and in total.
  EXPECT_EQ(cuLaunchKernel(record, 1, 1, 1, 2048, 1, 1, 0, nullptr, args, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuLaunchKernel(record, 1, 1, 1, 1024, 2, 1, 0, nullptr, args, nullptr), CUDA_ERROR_INVALID_VALUE);
  // cuLaunchKernel: parameters given both ways are CUDA_ERROR_INVALID_VALUE.
  std::size_t size = 16;
  unsigned char buffer[16] = {};
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buffer, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                   CU_LAUNCH_PARAM_END};
  EXPECT_EQ(cuLaunchKernel(record, 1, 1, 1, 32, 1, 1, 0, nullptr, args, extra), CUDA_ERROR_INVALID_VALUE);

  // None of the rejected launches ran, and the context is still usable.
  PHOS_ASSERT_CU(cuLaunchKernel(record, 1, 1, 1, 32, 1, 1, 0, nullptr, args, nullptr));
  unsigned int count = 0;
  PHOS_ASSERT_CU(cuMemcpyDtoH(&count, counter.get(), sizeof(count)));
  EXPECT_EQ(count, 32u);
}

// cuModuleLoadData documents CUDA_ERROR_INVALID_PTX, CUDA_ERROR_NO_BINARY_FOR_GPU and
// CUDA_ERROR_INVALID_VALUE among its errors but not which one a malformed image gives; drivers
// answer CUDA_ERROR_INVALID_IMAGE ("the device kernel image is invalid") for a broken binary and
// CUDA_ERROR_INVALID_PTX for text that is not PTX. Any of these is a correct rejection.
TEST_F(ModuleTest, GarbageImageIsRejected) {
  const auto rejected =
      ::testing::AnyOf(CUDA_ERROR_INVALID_IMAGE, CUDA_ERROR_INVALID_PTX, CUDA_ERROR_INVALID_VALUE,
                       CUDA_ERROR_NO_BINARY_FOR_GPU, CUDA_ERROR_UNSUPPORTED_PTX_VERSION);
  CUmodule module = nullptr;
  const char text[] = "this is not a module image";
  EXPECT_THAT(cuModuleLoadData(&module, text), rejected);

  // An ELF header followed by junk: looks like a binary, is not one.
  const unsigned char elf_header[] = {0x7f, 'E', 'L', 'F', 2, 1, 1};
  std::vector<std::uint64_t> words(512, 0x5a5a5a5a5a5a5a5aull);
  std::memcpy(words.data(), elf_header, sizeof(elf_header));
  reinterpret_cast<char*>(words.data())[words.size() * 8 - 1] = '\0';
  EXPECT_THAT(cuModuleLoadData(&module, words.data()), rejected);
}

TEST_F(ModuleTest, UnloadAndLoadAgain) {
  PHOS_EXPECT_CU(module_->Unload());
  // A fresh load of the same image is an independent module with working kernels.
  KernelModule again;
  PHOS_ASSERT_CU(again.Load());
  CUfunction vec_add = nullptr;
  PHOS_ASSERT_CU(again.Function(kVecAdd, &vec_add));
  CheckVecAdd(vec_add, 1000, false);
}

}  // namespace
}  // namespace phos::conformance
