// simgpu's answers for its kernels beyond what the conformance suite pins down for every driver:
// module variables live in device memory that only their module releases, the figures
// cuFuncGetAttribute reports (simgpu/README.md, "Kernels"), occupancy from the profile's limits,
// and which launch attributes it honours and which it refuses with the driver's error.
#include <cuda.h>
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

#include "phos/simgpu/simgpu.h"

namespace {

constexpr const char* kScaleInWindow = "_Z15scale_in_windowPKfPfi";
constexpr const char* kBumpOffset = "_Z11bump_offsetd";

class SimgpuEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    PhosSimConfig config{"ci", 1.0, 1, 4ull << 30};
    ASSERT_EQ(phosSimConfigure(&config), CUDA_SUCCESS);
    ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  }
};
const auto* const kEnvironment = ::testing::AddGlobalTestEnvironment(new SimgpuEnvironment);

class SimgpuFunctionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(cuCtxCreate(&ctx_, nullptr, 0, 0), CUDA_SUCCESS);
    std::ifstream f(PHOS_GLOBALS_MODULE, std::ios::binary);
    image_.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    ASSERT_FALSE(image_.empty());
    ASSERT_EQ(cuModuleLoadData(&module_, image_.data()), CUDA_SUCCESS);
    ASSERT_EQ(cuModuleGetFunction(&scale_, module_, kScaleInWindow), CUDA_SUCCESS);
  }
  void TearDown() override {
    if (ctx_ != nullptr) {
      EXPECT_EQ(cuCtxDestroy(ctx_), CUDA_SUCCESS);
    }
  }
  int Attribute(CUfunction_attribute attribute) {
    int value = -12345;
    EXPECT_EQ(cuFuncGetAttribute(&value, attribute, scale_), CUDA_SUCCESS) << attribute;
    return value;
  }
  // A one-block launch of bump_offset with `attrs`.
  CUresult LaunchWith(std::vector<CUlaunchAttribute> attrs, CUstream stream = nullptr) {
    CUfunction bump = nullptr;
    EXPECT_EQ(cuModuleGetFunction(&bump, module_, kBumpOffset), CUDA_SUCCESS);
    CUlaunchConfig config{};
    config.gridDimX = config.gridDimY = config.gridDimZ = 1;
    config.blockDimX = config.blockDimY = config.blockDimZ = 1;
    config.hStream = stream;
    config.attrs = attrs.data();
    config.numAttrs = static_cast<unsigned>(attrs.size());
    double step = 1.0;
    void* args[] = {&step};
    return cuLaunchKernelEx(&config, bump, args, nullptr);
  }
  static CUlaunchAttribute Attr(CUlaunchAttributeID id) {
    CUlaunchAttribute a;
    std::memset(&a, 0, sizeof(a));
    a.id = id;
    return a;
  }

  CUcontext ctx_ = nullptr;
  std::vector<char> image_;
  CUmodule module_ = nullptr;
  CUfunction scale_ = nullptr;
};

// A module's variables are one allocation of device memory, which cuMemFree refuses (it is the
// module's) and cuModuleUnload returns.
TEST_F(SimgpuFunctionTest, VariablesAreDeviceMemoryOnlyTheirModuleReleases) {
  CUdeviceptr offset = 0;
  size_t bytes = 0;
  ASSERT_EQ(cuModuleGetGlobal(&offset, &bytes, module_, "_ZN7globals6offsetE"), CUDA_SUCCESS);
  EXPECT_EQ(bytes, sizeof(double));
  CUdeviceptr base = 0;
  size_t span = 0;
  ASSERT_EQ(cuMemGetAddressRange(&base, &span, offset), CUDA_SUCCESS);
  EXPECT_LE(base, offset);
  EXPECT_EQ(cuMemFree(base), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuModuleUnload(module_), CUDA_SUCCESS);
  EXPECT_EQ(cuMemGetAddressRange(&base, &span, offset), CUDA_ERROR_NOT_FOUND);
}

TEST_F(SimgpuFunctionTest, AttributesAreTheDocumentedFigures) {
  EXPECT_EQ(Attribute(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK), 1024);
  EXPECT_EQ(Attribute(CU_FUNC_ATTRIBUTE_NUM_REGS), 32);
  EXPECT_EQ(Attribute(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES), 0);
  EXPECT_EQ(Attribute(CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES), 0);
  EXPECT_EQ(Attribute(CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES), 40);  // float[8] and an 8-byte struct
  EXPECT_EQ(Attribute(CU_FUNC_ATTRIBUTE_PTX_VERSION), 80);       // the ci profile is an A100's
  EXPECT_EQ(Attribute(CU_FUNC_ATTRIBUTE_BINARY_VERSION), 80);
  EXPECT_EQ(Attribute(CU_FUNC_ATTRIBUTE_CACHE_MODE_CA), 0);
  EXPECT_EQ(Attribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES), 49152);
  EXPECT_EQ(Attribute(CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT), -1);
  EXPECT_EQ(Attribute(CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED), 0);
  EXPECT_EQ(Attribute(CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE), 0);
}

TEST_F(SimgpuFunctionTest, SettingsOutsideTheirRangeOrNeedingClustersAreRefused) {
  EXPECT_EQ(cuFuncSetAttribute(scale_, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, -2),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuFuncSetAttribute(scale_, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, 101),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuFuncSetAttribute(scale_, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, -1),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuFuncSetAttribute(scale_, CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE, 3),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuFuncSetAttribute(scale_, CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE, 1),
            CUDA_SUCCESS);
  EXPECT_EQ(Attribute(CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE), 1);
  // No clusters on this device: only "none" may be asked for.
  EXPECT_EQ(cuFuncSetAttribute(scale_, CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH, 2),
            CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(cuFuncSetAttribute(scale_, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1),
            CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(cuFuncSetAttribute(scale_, CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuFuncSetAttribute(scale_, static_cast<CUfunction_attribute>(16), 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuFuncSetCacheConfig(scale_, static_cast<CUfunc_cache>(4)), CUDA_ERROR_INVALID_VALUE);
  int value = 0;
  EXPECT_EQ(cuFuncGetAttribute(nullptr, CU_FUNC_ATTRIBUTE_NUM_REGS, scale_), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuFuncGetAttribute(&value, CU_FUNC_ATTRIBUTE_NUM_REGS, reinterpret_cast<CUfunction>(0x1234)),
            CUDA_ERROR_INVALID_HANDLE);
}

// Occupancy on the ci profile (an A100: 2048 threads, 32 blocks, 65536 registers and 164 KiB of
// shared memory per SM, 1 KiB of it reserved per block, allocated in 128-byte units), worked out
// by hand from those limits for a kernel of 32 registers per thread.
TEST_F(SimgpuFunctionTest, OccupancyFollowsTheProfilesLimits) {
  struct Case {
    int block;
    size_t smem;
    int blocks;
  };
  for (const Case& c : {Case{1024, 0, 2}, Case{256, 0, 8}, Case{32, 0, 32}, Case{48, 0, 32}, Case{96, 0, 21},
                        Case{128, 48 * 1024, 3}, Case{128, 20000, 7}, Case{64, 49153, 0}}) {
    int blocks = -1;
    ASSERT_EQ(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, scale_, c.block, c.smem), CUDA_SUCCESS);
    EXPECT_EQ(blocks, c.blocks) << c.block << " threads, " << c.smem << " bytes";
  }
  // Past 48 KiB once the function opts in: (166912 + 1024) rounds to 1 block per SM.
  ASSERT_EQ(cuFuncSetAttribute(scale_, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 166912),
            CUDA_SUCCESS);
  int blocks = -1;
  ASSERT_EQ(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, scale_, 64, 166912), CUDA_SUCCESS);
  EXPECT_EQ(blocks, 1);
  size_t available = 0;
  ASSERT_EQ(cuOccupancyAvailableDynamicSMemPerBlock(&available, scale_, 4, 128), CUDA_SUCCESS);
  // A quarter of the SM's shared memory: CUDA's calculator leaves the per-block reserve out of this
  // figure (cudaOccAvailableDynamicSMemPerBlock subtracts only the static shared memory).
  EXPECT_EQ(available, 167936u / 4);
  EXPECT_EQ(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&blocks, scale_, 64, 0, 2),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuOccupancyMaxActiveBlocksPerMultiprocessor(nullptr, scale_, 64, 0), CUDA_ERROR_INVALID_VALUE);
}

// What simgpu honours (hints and events) runs the kernel; what it cannot (cooperative grids,
// clusters) is CUDA_ERROR_NOT_SUPPORTED; what is no launch's attribute, or out of range, is
// CUDA_ERROR_INVALID_VALUE.
TEST_F(SimgpuFunctionTest, LaunchAttributesAreHonouredOrRefusedAsTheDriverWould) {
  CUevent timed = nullptr, untimed = nullptr;
  ASSERT_EQ(cuEventCreate(&timed, CU_EVENT_DEFAULT), CUDA_SUCCESS);
  ASSERT_EQ(cuEventCreate(&untimed, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  CUdeviceptr counted = 0;
  ASSERT_EQ(cuModuleGetGlobal(&counted, nullptr, module_, "last_index"), CUDA_SUCCESS);

  std::vector<CUlaunchAttribute> honoured;
  honoured.push_back(Attr(CU_LAUNCH_ATTRIBUTE_IGNORE));
  honoured.push_back(Attr(CU_LAUNCH_ATTRIBUTE_PRIORITY));
  honoured.back().value.priority = 5;
  honoured.push_back(Attr(CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION));
  honoured.back().value.programmaticStreamSerializationAllowed = 1;
  honoured.push_back(Attr(CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW));
  honoured.back().value.accessPolicyWindow = {reinterpret_cast<void*>(counted), 4, 0.5f,
                                              CU_ACCESS_PROPERTY_PERSISTING, CU_ACCESS_PROPERTY_STREAMING};
  honoured.push_back(Attr(CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN));
  honoured.back().value.memSyncDomain = CU_LAUNCH_MEM_SYNC_DOMAIN_REMOTE;
  honoured.push_back(Attr(CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT));
  honoured.back().value.sharedMemCarveout = 100;
  honoured.push_back(Attr(CU_LAUNCH_ATTRIBUTE_NVLINK_UTIL_CENTRIC_SCHEDULING));
  honoured.back().value.nvlinkUtilCentricScheduling = 1;
  honoured.push_back(Attr(CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT));
  honoured.back().value.programmaticEvent.event = untimed;
  ASSERT_EQ(LaunchWith(honoured), CUDA_SUCCESS);
  ASSERT_EQ(cuEventSynchronize(untimed), CUDA_SUCCESS);
  int ran = 0;
  ASSERT_EQ(cuMemcpyDtoH(&ran, counted, sizeof(ran)), CUDA_SUCCESS);
  EXPECT_EQ(ran, 1);  // the kernel ran once, before the event completed

  auto refused = [&](CUlaunchAttribute a) { return LaunchWith({a}); };
  CUlaunchAttribute a = Attr(CU_LAUNCH_ATTRIBUTE_COOPERATIVE);
  a.value.cooperative = 1;
  EXPECT_EQ(refused(a), CUDA_ERROR_NOT_SUPPORTED);
  a.value.cooperative = 0;
  EXPECT_EQ(refused(a), CUDA_SUCCESS);
  a = Attr(CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION);
  a.value.clusterDim.x = a.value.clusterDim.y = a.value.clusterDim.z = 1;
  EXPECT_EQ(refused(a), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(refused(Attr(CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY)), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(refused(Attr(CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE)), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(refused(Attr(static_cast<CUlaunchAttributeID>(15))), CUDA_ERROR_INVALID_VALUE);
  a = Attr(CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP);
  a.value.memSyncDomainMap.remote = 1;  // one domain only
  EXPECT_EQ(refused(a), CUDA_ERROR_INVALID_VALUE);
  a = Attr(CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW);
  a.value.accessPolicyWindow.num_bytes = 1ull << 30;  // past the device's largest window
  EXPECT_EQ(refused(a), CUDA_ERROR_INVALID_VALUE);
  a = Attr(CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT);
  a.value.launchCompletionEvent.event = timed;  // must disable timing
  EXPECT_EQ(refused(a), CUDA_ERROR_INVALID_VALUE);
  a.value.launchCompletionEvent.event = reinterpret_cast<CUevent>(0x4321);
  EXPECT_EQ(refused(a), CUDA_ERROR_INVALID_HANDLE);
  a.value.launchCompletionEvent.event = untimed;
  a.value.launchCompletionEvent.flags = 1;  // CU_EVENT_RECORD_EXTERNAL
  EXPECT_EQ(refused(a), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuMemcpyDtoH(&ran, counted, sizeof(ran)), CUDA_SUCCESS);
  EXPECT_EQ(ran, 2);  // of the refused launches, only the one with cooperative = 0 ran
  EXPECT_EQ(cuEventDestroy(timed), CUDA_SUCCESS);
  EXPECT_EQ(cuEventDestroy(untimed), CUDA_SUCCESS);
}

}  // namespace
