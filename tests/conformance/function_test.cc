// Module variables, function attributes, occupancy and cuLaunchKernelEx: what phosd relies on to
// serve cudaMemcpyToSymbol, cudaFuncGetAttributes / cudaFuncSetAttribute, the occupancy
// calculator and cudaLaunchKernelExC (docs/remoting.md, "Kernels"). Expected values come from
// cuda.h's documentation of each call and, for occupancy, from NVIDIA's own calculator
// (cuda_occupancy.h) fed with what the driver reports.
#include <cuda_occupancy.h>

#include <cstring>
#include <memory>
#include <vector>

#include "conformance.h"
#include "kernel_names.h"

namespace phos::conformance {
namespace {

class FunctionTest : public DriverTest {
 protected:
  void SetUp() override {
    DriverTest::SetUp();
    if (HasFatalFailure()) return;
    if (!KernelModule::Available()) GTEST_SKIP() << "this build has no conformance kernel module";
    module_ = std::make_unique<KernelModule>();
    PHOS_ASSERT_CU(module_->Load());
    PHOS_ASSERT_CU(module_->Function(kApplyCoefficients, &apply_));
  }
  void TearDown() override {
    module_.reset();
    DriverTest::TearDown();
  }

  int Attribute(CUdevice_attribute attribute) {
    int value = 0;
    EXPECT_EQ(cuDeviceGetAttribute(&value, attribute, device_), CUDA_SUCCESS) << attribute;
    return value;
  }
  int FuncAttribute(CUfunction_attribute attribute) {
    int value = 0;
    EXPECT_EQ(cuFuncGetAttribute(&value, attribute, apply_), CUDA_SUCCESS) << attribute;
    return value;
  }

  // Runs apply_coefficients over n elements of in[i] = i + 1 with `coefficients` as the table;
  // what it wrote, and what the kernel's counter holds afterwards.
  void Apply(CUmodule module, CUfunction kernel, const float (&table)[16], int n, std::vector<float>* out,
             unsigned* applied) {
    CUdeviceptr table_ptr = 0, counter_ptr = 0;
    size_t table_bytes = 0, counter_bytes = 0;
    PHOS_ASSERT_CU(cuModuleGetGlobal(&table_ptr, &table_bytes, module, kCoefficients));
    PHOS_ASSERT_CU(cuModuleGetGlobal(&counter_ptr, &counter_bytes, module, kApplied));
    ASSERT_EQ(table_bytes, sizeof(table));
    PHOS_ASSERT_CU(cuMemcpyHtoD(table_ptr, table, sizeof(table)));
    std::vector<float> in(n);
    for (int i = 0; i < n; ++i) in[i] = static_cast<float>(i + 1);
    DeviceBuffer din, dout;
    PHOS_ASSERT_CU(din.Allocate(n * sizeof(float)));
    PHOS_ASSERT_CU(dout.Allocate(n * sizeof(float)));
    PHOS_ASSERT_CU(cuMemcpyHtoD(din.get(), in.data(), n * sizeof(float)));
    CUdeviceptr pin = din.get(), pout = dout.get();
    void* args[] = {&pin, &pout, &n};
    PHOS_ASSERT_CU(cuLaunchKernel(kernel, (n + 127) / 128, 1, 1, 128, 1, 1, 0, nullptr, args, nullptr));
    out->resize(n);
    PHOS_ASSERT_CU(cuMemcpyDtoH(out->data(), dout.get(), n * sizeof(float)));
    PHOS_ASSERT_CU(cuMemcpyDtoH(applied, counter_ptr, sizeof(*applied)));
  }

  std::unique_ptr<KernelModule> module_;
  CUfunction apply_ = nullptr;
};

// cuModuleGetGlobal: "Returns in *dptr and *bytes the base pointer and size of the global of name
// name"; a variable without an initialiser holds zeros; either output may be NULL.
TEST_F(FunctionTest, GlobalsHaveTheirDeclaredSizeAndStartAsZeros) {
  CUdeviceptr table = 0, counter = 0;
  size_t table_bytes = 0, counter_bytes = 0;
  PHOS_ASSERT_CU(cuModuleGetGlobal(&table, &table_bytes, module_->get(), kCoefficients));
  PHOS_ASSERT_CU(cuModuleGetGlobal(&counter, &counter_bytes, module_->get(), kApplied));
  EXPECT_EQ(table_bytes, 16 * sizeof(float));
  EXPECT_EQ(counter_bytes, sizeof(unsigned));
  EXPECT_NE(table, counter);
  std::vector<uint8_t> bytes(table_bytes, 0xff);
  PHOS_ASSERT_CU(cuMemcpyDtoH(bytes.data(), table, table_bytes));
  EXPECT_EQ(bytes, std::vector<uint8_t>(table_bytes, 0));
  CUdeviceptr only_address = 0;
  size_t only_size = 0;
  PHOS_EXPECT_CU(cuModuleGetGlobal(&only_address, nullptr, module_->get(), kCoefficients));
  EXPECT_EQ(only_address, table);
  PHOS_EXPECT_CU(cuModuleGetGlobal(nullptr, &only_size, module_->get(), kApplied));
  EXPECT_EQ(only_size, counter_bytes);
  EXPECT_EQ(cuModuleGetGlobal(&table, &table_bytes, module_->get(), "no_such_variable"),
            CUDA_ERROR_NOT_FOUND);
}

TEST_F(FunctionTest, AKernelReadsTheConstantTableTheHostWroteAndCountsInADeviceVariable) {
  float table[16];
  for (int i = 0; i < 16; ++i) table[i] = 0.5f * static_cast<float>(i) - 3.0f;
  const int n = 1000;
  std::vector<float> out;
  unsigned applied = 0;
  Apply(module_->get(), apply_, table, n, &out, &applied);
  for (int i = 0; i < n; ++i) ASSERT_EQ(out[i], table[i % 16] * static_cast<float>(i + 1)) << i;
  EXPECT_EQ(applied, static_cast<unsigned>(n));
}

// Each loaded module has its own variables (the Programming Guide: a __device__ variable lives
// in its module), so a second load starts from zeros whatever the first one did.
TEST_F(FunctionTest, EachLoadOfAModuleHasItsOwnVariables) {
  float table[16];
  for (int i = 0; i < 16; ++i) table[i] = 2.0f;
  std::vector<float> out;
  unsigned applied = 0;
  Apply(module_->get(), apply_, table, 300, &out, &applied);
  EXPECT_EQ(applied, 300u);
  KernelModule second;
  PHOS_ASSERT_CU(second.Load());
  CUdeviceptr first_counter = 0, second_counter = 0;
  PHOS_ASSERT_CU(cuModuleGetGlobal(&first_counter, nullptr, module_->get(), kApplied));
  PHOS_ASSERT_CU(cuModuleGetGlobal(&second_counter, nullptr, second.get(), kApplied));
  EXPECT_NE(first_counter, second_counter);
  unsigned fresh = 1;
  PHOS_ASSERT_CU(cuMemcpyDtoH(&fresh, second_counter, sizeof(fresh)));
  EXPECT_EQ(fresh, 0u);
}

// cuFuncGetAttribute: every attribute answers, within what the device allows.
TEST_F(FunctionTest, AttributesDescribeTheKernelWithinTheDevicesLimits) {
  const int cc = Attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR) * 10 +
                 Attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  const int max_threads = FuncAttribute(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  EXPECT_GT(max_threads, 0);
  EXPECT_LE(max_threads, Attribute(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK));
  const int registers = FuncAttribute(CU_FUNC_ATTRIBUTE_NUM_REGS);
  EXPECT_GT(registers, 0);
  EXPECT_LE(registers, 255);
  // The kernel declares no shared memory; it reads the 64-byte constant table.
  EXPECT_EQ(FuncAttribute(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES), 0);
  EXPECT_GE(FuncAttribute(CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES), static_cast<int>(16 * sizeof(float)));
  EXPECT_GE(FuncAttribute(CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES), 0);
  // Built for the device's architecture (or an older one of its major version).
  const int binary = FuncAttribute(CU_FUNC_ATTRIBUTE_BINARY_VERSION);
  EXPECT_EQ(binary / 10, cc / 10);
  EXPECT_LE(binary, cc);
  EXPECT_GT(FuncAttribute(CU_FUNC_ATTRIBUTE_PTX_VERSION), 0);
  // "The default value of this attribute is MAX_SHARED_MEMORY_PER_BLOCK - SHARED_SIZE_BYTES".
  EXPECT_EQ(FuncAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES),
            Attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK));
  EXPECT_EQ(FuncAttribute(CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH), 0);
  int value = 0;
  EXPECT_EQ(cuFuncGetAttribute(&value, CU_FUNC_ATTRIBUTE_MAX, apply_), CUDA_ERROR_INVALID_VALUE);
}

// cuFuncSetAttribute: MAX_DYNAMIC_SHARED_SIZE_BYTES up to the opt-in limit less the static shared
// memory; "Attempting to set a value on a read-only attribute will result in an error
// (CUDA_ERROR_INVALID_VALUE)"; a launch asking for more dynamic shared memory than the
// function's limit fails, and passes once the limit is raised.
TEST_F(FunctionTest, DynamicSharedMemoryIsBoundedByTheOptInLimit) {
  const int per_block = Attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK);
  const int optin = Attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
  ASSERT_GT(optin, per_block);
  DeviceBuffer din, dout;
  PHOS_ASSERT_CU(din.Allocate(128 * sizeof(float)));
  PHOS_ASSERT_CU(dout.Allocate(128 * sizeof(float)));
  CUdeviceptr pin = din.get(), pout = dout.get();
  int n = 128;
  void* args[] = {&pin, &pout, &n};
  const unsigned big = static_cast<unsigned>(per_block) + 1024;
  EXPECT_NE(cuLaunchKernel(apply_, 1, 1, 1, 128, 1, 1, big, nullptr, args, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuFuncSetAttribute(apply_, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, optin + 1),
            CUDA_ERROR_INVALID_VALUE);
  PHOS_ASSERT_CU(cuFuncSetAttribute(apply_, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, optin));
  EXPECT_EQ(FuncAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES), optin);
  PHOS_EXPECT_CU(cuLaunchKernel(apply_, 1, 1, 1, 128, 1, 1, big, nullptr, args, nullptr));
  PHOS_EXPECT_CU(cuCtxSynchronize());
  EXPECT_EQ(cuFuncSetAttribute(apply_, CU_FUNC_ATTRIBUTE_NUM_REGS, 8), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuFuncSetAttribute(apply_, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, 0), CUDA_ERROR_INVALID_VALUE);
  PHOS_EXPECT_CU(cuFuncSetAttribute(apply_, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, 50));
  EXPECT_EQ(FuncAttribute(CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT), 50);
  PHOS_EXPECT_CU(cuFuncSetCacheConfig(apply_, CU_FUNC_CACHE_PREFER_SHARED));
}

// The driver's occupancy answers are NVIDIA's calculator's (cuda_occupancy.h) for the same
// function and device: cudaOccFuncAttributes built from the function's attributes as the
// runtime builds it, the device's properties from its attributes.
TEST_F(FunctionTest, OccupancyIsWhatCudasCalculatorComputesFromTheAttributes) {
  cudaOccDeviceProp props;
  props.computeMajor = Attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  props.computeMinor = Attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  props.maxThreadsPerBlock = Attribute(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  props.maxThreadsPerMultiprocessor = Attribute(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR);
  props.regsPerBlock = Attribute(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK);
  props.regsPerMultiprocessor = Attribute(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR);
  props.warpSize = Attribute(CU_DEVICE_ATTRIBUTE_WARP_SIZE);
  props.sharedMemPerBlock = static_cast<size_t>(Attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK));
  props.sharedMemPerMultiprocessor =
      static_cast<size_t>(Attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR));
  props.numSms = Attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  props.sharedMemPerBlockOptin =
      static_cast<size_t>(Attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN));
  props.reservedSharedMemPerBlock =
      static_cast<size_t>(Attribute(CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK));
  cudaOccFuncAttributes attributes;
  attributes.maxThreadsPerBlock = FuncAttribute(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  attributes.numRegs = FuncAttribute(CU_FUNC_ATTRIBUTE_NUM_REGS);
  attributes.sharedSizeBytes = static_cast<size_t>(FuncAttribute(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES));
  attributes.partitionedGCConfig = PARTITIONED_GC_OFF;
  attributes.shmemLimitConfig = FUNC_SHMEM_LIMIT_OPTIN;
  attributes.maxDynamicSharedSizeBytes =
      static_cast<size_t>(FuncAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES));
  attributes.numBlockBarriers = 1;
  const cudaOccDeviceState state;
  for (int block : {32, 96, 128, 256, 512, 1024}) {
    for (size_t smem : {size_t{0}, size_t{4000}, size_t{16 * kKiB}, size_t{40 * kKiB}}) {
      cudaOccResult expected{};
      ASSERT_EQ(cudaOccMaxActiveBlocksPerMultiprocessor(&expected, &props, &attributes, &state, block, smem),
                CUDA_OCC_SUCCESS);
      int blocks = -1;
      PHOS_ASSERT_CU(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, apply_, block, smem));
      EXPECT_EQ(blocks, expected.activeBlocksPerMultiprocessor) << block << " threads, " << smem << " bytes";
      PHOS_ASSERT_CU(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
          &blocks, apply_, block, smem, CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE));
      EXPECT_EQ(blocks, expected.activeBlocksPerMultiprocessor) << block << " threads, " << smem << " bytes";
    }
    size_t available = 0, expected_available = 0;
    ASSERT_EQ(cudaOccAvailableDynamicSMemPerBlock(&expected_available, &props, &attributes, &state, 2, block),
              CUDA_OCC_SUCCESS);
    PHOS_ASSERT_CU(cuOccupancyAvailableDynamicSMemPerBlock(&available, apply_, 2, block));
    EXPECT_EQ(available, expected_available) << block << " threads";
  }
}

// cuLaunchKernelEx runs the kernel as cuLaunchKernel does; a launch completion event is
// triggered no later than the kernel's end, so synchronising on it and then on the stream sees
// the kernel's results. Ignored entries are ignored.
TEST_F(FunctionTest, LaunchKernelExRunsTheKernelAndTriggersItsCompletionEvent) {
  CUdeviceptr table_ptr = 0;
  PHOS_ASSERT_CU(cuModuleGetGlobal(&table_ptr, nullptr, module_->get(), kCoefficients));
  float table[16];
  for (int i = 0; i < 16; ++i) table[i] = static_cast<float>(i);
  PHOS_ASSERT_CU(cuMemcpyHtoD(table_ptr, table, sizeof(table)));
  int n = 512;
  std::vector<float> in(n, 2.0f);
  DeviceBuffer din, dout;
  PHOS_ASSERT_CU(din.Allocate(n * sizeof(float)));
  PHOS_ASSERT_CU(dout.Allocate(n * sizeof(float)));
  PHOS_ASSERT_CU(cuMemcpyHtoD(din.get(), in.data(), n * sizeof(float)));
  CUstream stream = nullptr;
  PHOS_ASSERT_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CUevent done = nullptr;
  PHOS_ASSERT_CU(cuEventCreate(&done, CU_EVENT_DISABLE_TIMING));
  CUlaunchAttribute attrs[2];
  std::memset(attrs, 0, sizeof(attrs));
  attrs[0].id = CU_LAUNCH_ATTRIBUTE_IGNORE;
  attrs[1].id = CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT;
  attrs[1].value.launchCompletionEvent.event = done;
  attrs[1].value.launchCompletionEvent.flags = 0;
  CUlaunchConfig config{};
  config.gridDimX = 4;
  config.gridDimY = config.gridDimZ = 1;
  config.blockDimX = 128;
  config.blockDimY = config.blockDimZ = 1;
  config.hStream = stream;
  config.attrs = attrs;
  config.numAttrs = 2;
  CUdeviceptr pin = din.get(), pout = dout.get();
  void* args[] = {&pin, &pout, &n};
  PHOS_ASSERT_CU(cuLaunchKernelEx(&config, apply_, args, nullptr));
  PHOS_EXPECT_CU(cuEventSynchronize(done));
  PHOS_ASSERT_CU(cuStreamSynchronize(stream));
  std::vector<float> out(n);
  PHOS_ASSERT_CU(cuMemcpyDtoH(out.data(), dout.get(), n * sizeof(float)));
  for (int i = 0; i < n; ++i) ASSERT_EQ(out[i], table[i % 16] * 2.0f) << i;
  PHOS_EXPECT_CU(cuEventDestroy(done));
  PHOS_EXPECT_CU(cuStreamDestroy(stream));
}

}  // namespace
}  // namespace phos::conformance
