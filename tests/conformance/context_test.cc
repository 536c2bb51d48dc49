// Contexts: creation, the per-thread stack of current contexts, primary contexts. phosd keeps
// pools of contexts and makes a leased one current on whichever worker thread serves a call
// (docs/design.md D11), so per-thread currency and the stack discipline are what it relies on.
#include <algorithm>
#include <array>
#include <barrier>
#include <cstdint>
#include <thread>
#include <vector>

#include "conformance.h"

namespace phos::conformance {
namespace {

using ContextTest = DriverTest;

CUcontext Current() {
  CUcontext current = reinterpret_cast<CUcontext>(std::uintptr_t{1});
  EXPECT_EQ(cuCtxGetCurrent(&current), CUDA_SUCCESS);
  return current;
}

TEST_F(ContextTest, CreateMakesCurrentAndDestroyRestoresPrevious) {
  EXPECT_EQ(Current(), context_);
  CUcontext second = nullptr;
  PHOS_ASSERT_CU(cuCtxCreate(&second, nullptr, 0, device_));
  EXPECT_NE(second, context_);
  EXPECT_EQ(Current(), second);
  // Destroying the current context pops it, which makes the one below current again.
  PHOS_ASSERT_CU(cuCtxDestroy(second));
  EXPECT_EQ(Current(), context_);
}

TEST_F(ContextTest, ReportsItsDevice) {
  CUdevice device = -1;
  PHOS_ASSERT_CU(cuCtxGetDevice(&device));
  EXPECT_EQ(device, device_);
}

TEST_F(ContextTest, CreateOnInvalidDeviceFails) {
  int count = 0;
  PHOS_ASSERT_CU(cuDeviceGetCount(&count));
  CUcontext context = nullptr;
  EXPECT_EQ(cuCtxCreate(&context, nullptr, 0, count), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(Current(), context_);
}

TEST_F(ContextTest, CurrentContextIsPerThread) {
  CUcontext seen_by_thread = reinterpret_cast<CUcontext>(std::uintptr_t{1});
  CUcontext after_set = nullptr;
  std::thread other([&] {
    EXPECT_EQ(cuCtxGetCurrent(&seen_by_thread), CUDA_SUCCESS);
    EXPECT_EQ(cuCtxSetCurrent(context_), CUDA_SUCCESS);
    EXPECT_EQ(cuCtxGetCurrent(&after_set), CUDA_SUCCESS);
    EXPECT_EQ(cuCtxSetCurrent(nullptr), CUDA_SUCCESS);
  });
  other.join();
  EXPECT_EQ(seen_by_thread, nullptr);
  EXPECT_EQ(after_set, context_);
  // Unbinding it on the other thread leaves this thread's binding alone.
  EXPECT_EQ(Current(), context_);
}

TEST_F(ContextTest, PushAndPopFollowAStack) {
  CUcontext second = nullptr;
  PHOS_ASSERT_CU(cuCtxCreate(&second, nullptr, 0, device_));
  CUcontext popped = nullptr;
  PHOS_ASSERT_CU(cuCtxPopCurrent(&popped));
  EXPECT_EQ(popped, second);
  EXPECT_EQ(Current(), context_);

  PHOS_ASSERT_CU(cuCtxPushCurrent(second));
  EXPECT_EQ(Current(), second);
  PHOS_ASSERT_CU(cuCtxPopCurrent(&popped));
  EXPECT_EQ(popped, second);
  PHOS_ASSERT_CU(cuCtxPopCurrent(&popped));
  EXPECT_EQ(popped, context_);
  EXPECT_EQ(Current(), nullptr);
  EXPECT_EQ(cuCtxPopCurrent(&popped), CUDA_ERROR_INVALID_CONTEXT);

  PHOS_EXPECT_CU(cuCtxDestroy(second));
  PHOS_EXPECT_CU(cuCtxPushCurrent(context_));
}

TEST_F(ContextTest, PrimaryContextIsSharedAndRefCounted) {
  CUcontext first = nullptr;
  CUcontext second = nullptr;
  PHOS_ASSERT_CU(cuDevicePrimaryCtxRetain(&first, device_));
  PHOS_ASSERT_CU(cuDevicePrimaryCtxRetain(&second, device_));
  EXPECT_NE(first, nullptr);
  EXPECT_EQ(first, second);
  EXPECT_NE(first, context_);
  // Retaining does not push (unlike cuCtxCreate).
  EXPECT_EQ(Current(), context_);

  CUcontext from_thread = nullptr;
  std::thread other([&] {
    EXPECT_EQ(cuDevicePrimaryCtxRetain(&from_thread, device_), CUDA_SUCCESS);
    EXPECT_EQ(cuDevicePrimaryCtxRelease(device_), CUDA_SUCCESS);
  });
  other.join();
  EXPECT_EQ(from_thread, first);

  // The primary context is a usable context.
  PHOS_ASSERT_CU(cuCtxPushCurrent(first));
  {
    DeviceBuffer buffer;
    PHOS_EXPECT_CU(buffer.Allocate(kMiB));
  }
  CUcontext popped = nullptr;
  PHOS_ASSERT_CU(cuCtxPopCurrent(&popped));
  EXPECT_EQ(popped, first);

  // Two retains, two releases; a third release finds it no longer retained.
  PHOS_EXPECT_CU(cuDevicePrimaryCtxRelease(device_));
  PHOS_EXPECT_CU(cuDevicePrimaryCtxRelease(device_));
  EXPECT_EQ(cuDevicePrimaryCtxRelease(device_), CUDA_ERROR_INVALID_CONTEXT);
}

TEST_F(ContextTest, ReleasingAnUnretainedPrimaryContextIsInvalidContext) {
  // Documented in cuDevicePrimaryCtxRelease. No test leaves the primary context retained.
  EXPECT_EQ(cuDevicePrimaryCtxRelease(device_), CUDA_ERROR_INVALID_CONTEXT);
}

TEST_F(ContextTest, SynchronizeWaitsForEveryStreamOfTheContext) {
  PinnedBuffer host;
  DeviceBuffer device;
  Stream stream;
  PHOS_ASSERT_CU(host.Allocate(kLongCopyBytes));
  PHOS_ASSERT_CU(device.Allocate(kLongCopyBytes));
  PHOS_ASSERT_CU(stream.Create(CU_STREAM_NON_BLOCKING));
  PHOS_ASSERT_CU(cuMemcpyHtoDAsync(device.get(), host.get(), kLongCopyBytes, stream.get()));
  PHOS_ASSERT_CU(cuCtxSynchronize());
  EXPECT_EQ(cuStreamQuery(stream.get()), CUDA_SUCCESS);
}

TEST_F(ContextTest, NoCurrentContextIsInvalidContext) {
  std::thread other([] {
    CUdeviceptr ptr = 0;
    EXPECT_EQ(cuMemAlloc(&ptr, kMiB), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_EQ(cuCtxSynchronize(), CUDA_ERROR_INVALID_CONTEXT);
    CUstream stream = nullptr;
    EXPECT_EQ(cuStreamCreate(&stream, CU_STREAM_DEFAULT), CUDA_ERROR_INVALID_CONTEXT);
    std::size_t free_bytes = 0;
    std::size_t total = 0;
    EXPECT_EQ(cuMemGetInfo(&free_bytes, &total), CUDA_ERROR_INVALID_CONTEXT);
    CUdevice device = -1;
    EXPECT_EQ(cuCtxGetDevice(&device), CUDA_ERROR_INVALID_CONTEXT);
  });
  other.join();
}

// cuCtxDestroy: "If ctx is current to other threads, then ctx will remain current to those
// threads, and attempting to access ctx from those threads will result in the error
// CUDA_ERROR_CONTEXT_IS_DESTROYED." phosd destroys pooled contexts while workers may hold them.
TEST_F(ContextTest, ContextDestroyedByAnotherThreadIsContextIsDestroyed) {
  CUcontext doomed = nullptr;
  PHOS_ASSERT_CU(cuCtxCreate(&doomed, nullptr, 0, device_));
  std::thread destroyer([doomed] { EXPECT_EQ(cuCtxDestroy(doomed), CUDA_SUCCESS); });
  destroyer.join();

  EXPECT_EQ(cuCtxSynchronize(), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  CUdeviceptr ptr = 0;
  EXPECT_EQ(cuMemAlloc(&ptr, kMiB), CUDA_ERROR_CONTEXT_IS_DESTROYED);

  // Replace the dead context on top of this thread's stack, then pop that copy: the stack is
  // back to the fixture's context alone.
  PHOS_ASSERT_CU(cuCtxSetCurrent(context_));
  PHOS_EXPECT_CU(cuCtxSynchronize());
  CUcontext popped = nullptr;
  PHOS_EXPECT_CU(cuCtxPopCurrent(&popped));
  EXPECT_EQ(popped, context_);
  EXPECT_EQ(Current(), context_);
}

TEST_F(ContextTest, EachThreadUsesItsOwnContextAndAllocations) {
  constexpr int kThreads = 2;
  constexpr std::size_t kWords = kMiB / 4;
  std::array<CUcontext, kThreads> contexts{};
  std::array<CUdeviceptr, kThreads> pointers{};
  std::array<bool, kThreads> data_ok{};
  // Both allocations are live and written before either is read back, so a context that shared
  // memory with the other would see the other's value.
  std::barrier written(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      CUcontext context = nullptr;
      EXPECT_EQ(cuCtxCreate(&context, nullptr, 0, device_), CUDA_SUCCESS);
      contexts[t] = context;
      CUcontext current = nullptr;
      EXPECT_EQ(cuCtxGetCurrent(&current), CUDA_SUCCESS);
      EXPECT_EQ(current, context);
      CUdeviceptr ptr = 0;
      EXPECT_EQ(cuMemAlloc(&ptr, kWords * 4), CUDA_SUCCESS);
      pointers[t] = ptr;
      const unsigned int value = 0xC0DE0000u + static_cast<unsigned int>(t);
      EXPECT_EQ(cuMemsetD32(ptr, value, kWords), CUDA_SUCCESS);
      written.arrive_and_wait();
      std::vector<unsigned int> back(kWords);
      EXPECT_EQ(cuMemcpyDtoH(back.data(), ptr, kWords * 4), CUDA_SUCCESS);
      data_ok[t] = true;
      for (unsigned int word : back) data_ok[t] = data_ok[t] && word == value;
      EXPECT_EQ(cuMemFree(ptr), CUDA_SUCCESS);
      EXPECT_EQ(cuCtxDestroy(context), CUDA_SUCCESS);
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_NE(contexts[0], contexts[1]);
  EXPECT_NE(pointers[0], pointers[1]);
  EXPECT_TRUE(data_ok[0]);
  EXPECT_TRUE(data_ok[1]);
  EXPECT_EQ(Current(), context_);
}

// cuCtxDestroy "destroys and cleans up all resources associated with the context", including
// cuMemAlloc memory: a pooled context that is torn down gives its memory back.
TEST_F(ContextTest, DestroyingAContextFreesItsAllocations) {
  constexpr std::size_t kBytes = 512 * kMiB;
  std::size_t free_before = 0;
  std::size_t total = 0;
  PHOS_ASSERT_CU(cuMemGetInfo(&free_before, &total));
  CUcontext doomed = nullptr;
  PHOS_ASSERT_CU(cuCtxCreate(&doomed, nullptr, 0, device_));
  CUdeviceptr ptr = 0;
  PHOS_ASSERT_CU(cuMemAlloc(&ptr, kBytes));
  std::size_t free_allocated = 0;
  PHOS_ASSERT_CU(cuMemGetInfo(&free_allocated, &total));
  EXPECT_GE(free_before - free_allocated, kBytes / 100 * 99);
  PHOS_ASSERT_CU(cuCtxDestroy(doomed));
  ASSERT_EQ(Current(), context_);
  std::size_t free_after = 0;
  PHOS_ASSERT_CU(cuMemGetInfo(&free_after, &total));
  EXPECT_GE(free_after, free_allocated + kBytes / 100 * 99);
}

// cuCtxDestroy "will not destroy memory allocations by cuMemCreate": those belong to the device,
// so an instance's VMM buffers outlive the context that created them.
TEST_F(ContextTest, VmmAllocationsOutliveTheContextThatCreatedThem) {
  std::size_t granularity = 0;
  PHOS_ASSERT_CU(MinimumGranularity(device_, &granularity));
  AddressRange range;
  PHOS_ASSERT_CU(range.Reserve(granularity, 0));
  CUcontext creator = nullptr;
  PHOS_ASSERT_CU(cuCtxCreate(&creator, nullptr, 0, device_));
  const CUmemAllocationProp prop = DeviceAllocationProp(device_);
  CUmemGenericAllocationHandle handle = 0;
  PHOS_ASSERT_CU(cuMemCreate(&handle, granularity, &prop, 0));
  PHOS_ASSERT_CU(MapReadWrite(range.get(), granularity, handle, device_));
  std::vector<unsigned char> data(granularity);
  FillPattern(data.data(), granularity, 71);
  PHOS_ASSERT_CU(cuMemcpyHtoD(range.get(), data.data(), granularity));
  PHOS_ASSERT_CU(cuCtxDestroy(creator));
  ASSERT_EQ(Current(), context_);

  std::vector<unsigned char> back(granularity);
  PHOS_ASSERT_CU(cuMemcpyDtoH(back.data(), range.get(), granularity));
  EXPECT_EQ(FirstPatternMismatch(back.data(), granularity, 71), granularity);
  PHOS_EXPECT_CU(cuMemUnmap(range.get(), granularity));
  PHOS_EXPECT_CU(cuMemRelease(handle));
}

// phosd keeps a context pool per device (docs/design.md D11): a context on the second device reports that
// device, and its allocations come out of that device's memory only.
TEST_F(ContextTest, ContextsOnTwoDevicesAreIndependent) {
  int count = 0;
  PHOS_ASSERT_CU(cuDeviceGetCount(&count));
  if (count < 2) GTEST_SKIP() << "needs two devices; this host has " << count;
  CUdevice second_device = -1;
  PHOS_ASSERT_CU(cuDeviceGet(&second_device, 1));
  std::size_t free_first_before = 0;
  std::size_t total = 0;
  PHOS_ASSERT_CU(cuMemGetInfo(&free_first_before, &total));

  CUcontext second = nullptr;
  PHOS_ASSERT_CU(cuCtxCreate(&second, nullptr, 0, second_device));
  CUdevice reported = -1;
  PHOS_EXPECT_CU(cuCtxGetDevice(&reported));
  EXPECT_EQ(reported, second_device);
  std::size_t free_second_before = 0;
  PHOS_ASSERT_CU(cuMemGetInfo(&free_second_before, &total));
  constexpr std::size_t kBytes = 1 * kGiB;
  CUdeviceptr ptr = 0;
  PHOS_ASSERT_CU(cuMemAlloc(&ptr, kBytes));
  std::size_t free_second_after = 0;
  PHOS_ASSERT_CU(cuMemGetInfo(&free_second_after, &total));
  EXPECT_GE(free_second_before - free_second_after, kBytes / 100 * 99);
  PHOS_ASSERT_CU(cuCtxPopCurrent(&second));

  std::size_t free_first_after = 0;
  PHOS_ASSERT_CU(cuMemGetInfo(&free_first_after, &total));
  // Device 0 did not pay for device 1's allocation (64 MiB of slack for other users of the GPU).
  EXPECT_LT(free_first_before - std::min(free_first_before, free_first_after), 64 * kMiB);
  PHOS_EXPECT_CU(cuCtxDestroy(second));
}

}  // namespace
}  // namespace phos::conformance
