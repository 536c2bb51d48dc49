// Read-only mappings (cuMemSetAccess with CU_MEM_ACCESS_FLAGS_PROT_READ). phos maps a read-only
// buffer of several instances from one physical allocation (docs/design.md D14): each instance's
// address reads the shared bytes, and device work that writes there must fail without changing
// them. A GPU's MMU faults on the write when the work runs: the work fails with
// CUDA_ERROR_ILLEGAL_ADDRESS, which is sticky (every later call of that context returns it), and
// other contexts go on reading the intact bytes.
#include <gmock/gmock.h>

#include <functional>
#include <vector>

#include "conformance.h"
#include "kernel_names.h"

namespace phos::conformance {
namespace {

using ::testing::AnyOf;

class VmmReadOnlyTest : public DriverTest {
 protected:
  void SetUp() override {
    DriverTest::SetUp();
    if (HasFatalFailure()) return;
    PHOS_ASSERT_CU(MinimumGranularity(device_, &bytes_));
    PHOS_ASSERT_CU(writable_.Reserve(bytes_, 0));
    PHOS_ASSERT_CU(read_only_.Reserve(bytes_, 0));
    const CUmemAllocationProp prop = DeviceAllocationProp(device_);
    PHOS_ASSERT_CU(cuMemCreate(&handle_, bytes_, &prop, 0));
    // One physical allocation at two addresses: read-write at one, read-only at the other.
    PHOS_ASSERT_CU(MapReadWrite(writable_.get(), bytes_, handle_, device_));
    PHOS_ASSERT_CU(cuMemMap(read_only_.get(), bytes_, 0, handle_, 0));
    CUmemAccessDesc desc{};
    desc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    desc.location.id = device_;
    desc.flags = CU_MEM_ACCESS_FLAGS_PROT_READ;
    PHOS_ASSERT_CU(cuMemSetAccess(read_only_.get(), bytes_, &desc, 1));
    std::vector<unsigned char> data(bytes_);
    FillPattern(data.data(), bytes_, kSeed);
    PHOS_ASSERT_CU(cuMemcpyHtoD(writable_.get(), data.data(), bytes_));
  }
  void TearDown() override {
    if (handle_ != 0) {
      EXPECT_EQ(cuCtxSetCurrent(context_), CUDA_SUCCESS);
      EXPECT_EQ(cuMemUnmap(read_only_.get(), bytes_), CUDA_SUCCESS);
      EXPECT_EQ(cuMemUnmap(writable_.get(), bytes_), CUDA_SUCCESS);
      EXPECT_EQ(cuMemRelease(handle_), CUDA_SUCCESS);
    }
    DriverTest::TearDown();
  }

  // Runs `write` (work on `stream` that writes the read-only address) in a context of its own:
  // the write fails with CUDA_ERROR_ILLEGAL_ADDRESS by the stream's synchronisation at the latest,
  // the context keeps returning it, and the shared bytes are unchanged.
  void ExpectWriteFaultsAndLeavesTheBytes(const std::function<CUresult(CUstream stream)>& write) {
    CUcontext faulting = nullptr;
    PHOS_ASSERT_CU(cuCtxCreate(&faulting, nullptr, 0, device_));
    CUstream stream = nullptr;
    PHOS_ASSERT_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    // A GPU's driver may see it when the work is enqueued (a synchronous call) or only when it runs.
    EXPECT_THAT(write(stream), AnyOf(CUDA_SUCCESS, CUDA_ERROR_ILLEGAL_ADDRESS));
    EXPECT_EQ(cuStreamSynchronize(stream), CUDA_ERROR_ILLEGAL_ADDRESS);
    EXPECT_EQ(cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS) << "the error is sticky";
    unsigned char byte = 0;
    EXPECT_EQ(cuMemcpyDtoH(&byte, writable_.get(), 1), CUDA_ERROR_ILLEGAL_ADDRESS) << "the error is sticky";
    EXPECT_EQ(cuCtxDestroy(faulting), CUDA_SUCCESS);

    // Another context reads the bytes as they were, through either address.
    PHOS_ASSERT_CU(cuCtxSetCurrent(context_));
    for (CUdeviceptr at : {writable_.get(), read_only_.get()}) {
      std::vector<unsigned char> back(bytes_);
      PHOS_ASSERT_CU(cuMemcpyDtoH(back.data(), at, bytes_));
      EXPECT_EQ(FirstPatternMismatch(back.data(), bytes_, kSeed), bytes_) << "at " << at;
    }
  }

  static constexpr std::uint32_t kSeed = 77;
  std::size_t bytes_ = 0;
  AddressRange writable_;
  AddressRange read_only_;
  CUmemGenericAllocationHandle handle_ = 0;
};

TEST_F(VmmReadOnlyTest, ReadOnlyAddressReadsWhatTheWritableOneWrote) {
  std::vector<unsigned char> back(bytes_);
  PHOS_ASSERT_CU(cuMemcpyDtoH(back.data(), read_only_.get(), bytes_));
  EXPECT_EQ(FirstPatternMismatch(back.data(), bytes_, kSeed), bytes_);
  // A device-to-device copy reading it, and a kernel reading it, work too.
  DeviceBuffer copy;
  PHOS_ASSERT_CU(copy.Allocate(bytes_));
  PHOS_ASSERT_CU(cuMemcpyDtoD(copy.get(), read_only_.get(), bytes_));
  PHOS_ASSERT_CU(cuMemcpyDtoH(back.data(), copy.get(), bytes_));
  EXPECT_EQ(FirstPatternMismatch(back.data(), bytes_, kSeed), bytes_);
  if (!KernelModule::Available()) return;
  KernelModule module;
  PHOS_ASSERT_CU(module.Load());
  CUfunction vec_add = nullptr;
  PHOS_ASSERT_CU(module.Function(kVecAdd, &vec_add));
  const int n = static_cast<int>(bytes_ / sizeof(float));
  std::vector<float> ones(static_cast<std::size_t>(n), 1.0f);
  PHOS_ASSERT_CU(cuMemcpyHtoD(writable_.get(), ones.data(), bytes_));
  CUdeviceptr a = read_only_.get();
  CUdeviceptr c = copy.get();
  void* args[] = {&a, &a, &c, const_cast<int*>(&n)};
  PHOS_ASSERT_CU(cuLaunchKernel(vec_add, 64, 1, 1, 256, 1, 1, 0, nullptr, args, nullptr));
  std::vector<float> sums(static_cast<std::size_t>(n));
  PHOS_ASSERT_CU(cuMemcpyDtoH(sums.data(), copy.get(), bytes_));
  EXPECT_EQ(sums.front(), 2.0f);
  EXPECT_EQ(sums.back(), 2.0f);
}

TEST_F(VmmReadOnlyTest, HostToDeviceCopyIntoItFaults) {
  PinnedBuffer source;
  PHOS_ASSERT_CU(source.Allocate(bytes_));
  FillPattern(source.get(), bytes_, kSeed + 1);
  ExpectWriteFaultsAndLeavesTheBytes(
      [&](CUstream stream) { return cuMemcpyHtoDAsync(read_only_.get(), source.get(), bytes_, stream); });
}

TEST_F(VmmReadOnlyTest, DeviceToDeviceCopyIntoItFaults) {
  DeviceBuffer other;
  PHOS_ASSERT_CU(other.Allocate(bytes_));
  PHOS_ASSERT_CU(cuMemsetD8(other.get(), 0x5a, bytes_));
  ExpectWriteFaultsAndLeavesTheBytes(
      [&](CUstream stream) { return cuMemcpyDtoDAsync(read_only_.get(), other.get(), bytes_, stream); });
}

TEST_F(VmmReadOnlyTest, MemsetOfItFaults) {
  ExpectWriteFaultsAndLeavesTheBytes(
      [&](CUstream stream) { return cuMemsetD32Async(read_only_.get(), 0xdeadbeefu, bytes_ / 4, stream); });
}

TEST_F(VmmReadOnlyTest, KernelWritingItFaults) {
  if (!KernelModule::Available()) GTEST_SKIP() << "this build has no conformance kernel module";
  ExpectWriteFaultsAndLeavesTheBytes([&](CUstream stream) {
    // The module is loaded into the faulting context, current here.
    KernelModule module;
    if (CUresult r = module.Load(); r != CUDA_SUCCESS) return r;
    CUfunction scale_add = nullptr;
    if (CUresult r = module.Function(kScaleAdd, &scale_add); r != CUDA_SUCCESS) return r;
    CUdeviceptr x = read_only_.get();
    float a = 2.0f;
    float b = 1.0f;
    int n = static_cast<int>(bytes_ / sizeof(float));
    void* args[] = {&x, &a, &b, &n};
    CUresult launched = cuLaunchKernel(scale_add, 16, 1, 1, 128, 1, 1, 0, stream, args, nullptr);
    if (launched != CUDA_SUCCESS) return launched;
    // The kernel must run before the module goes: wait here (the sticky error is the answer).
    return cuStreamSynchronize(stream);
  });
}

}  // namespace
}  // namespace phos::conformance
