// simgpu behaviours beyond the CUDA contract that phos relies on: the phosSim* extensions,
// stable device addresses, sticky kernel faults, handle hygiene. (The CUDA contract itself is
// pinned down by tests/conformance.)
#include <cstring>
#include <fstream>
#include <iterator>
#include <thread>
#include <vector>

#include <cuda.h>
#include <gtest/gtest.h>

#include "phos/simgpu/simgpu.h"

namespace {

constexpr unsigned long long kMemory = 4ull << 30;

// Configures the process's simgpu once, before any test calls cuInit.
class SimgpuEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    PhosSimConfig config{"ci", 10.0, 2, kMemory};
    ASSERT_EQ(phosSimConfigure(&config), CUDA_SUCCESS);
    ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  }
};
const auto* const kEnvironment = ::testing::AddGlobalTestEnvironment(new SimgpuEnvironment);

class DriverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(cuCtxCreate(&ctx_, nullptr, 0, 0), CUDA_SUCCESS);
  }
  void TearDown() override {
    if (ctx_) {
      EXPECT_EQ(cuCtxDestroy(ctx_), CUDA_SUCCESS);
    }
  }
  CUcontext ctx_ = nullptr;
};

std::vector<char> ReadFile(const char* path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

TEST_F(DriverTest, ConfigurationAppliesAndIsFrozenAfterInit) {
  int count = 0;
  ASSERT_EQ(cuDeviceGetCount(&count), CUDA_SUCCESS);
  EXPECT_EQ(count, 2);
  size_t total = 0;
  ASSERT_EQ(cuDeviceTotalMem(&total, 1), CUDA_SUCCESS);
  EXPECT_EQ(total, kMemory);
  PhosSimConfig now{};
  ASSERT_EQ(phosSimGetConfig(&now), CUDA_SUCCESS);
  EXPECT_STREQ(now.profile, "ci");
  EXPECT_EQ(now.time_scale, 10.0);
  PhosSimConfig late{"a100-pcie4", 1.0, 1, 0};
  EXPECT_EQ(phosSimConfigure(&late), CUDA_ERROR_ILLEGAL_STATE);
  PhosSimConfig bad{"v100", 1.0, 1, 0};
  EXPECT_EQ(phosSimConfigure(&bad), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(DriverTest, ProfileFiguresAreExposed) {
  PhosSimProfileInfo info{};
  ASSERT_EQ(phosSimGetProfile(0, &info), CUDA_SUCCESS);
  EXPECT_EQ(info.h2d_pinned_bps, 25e9);
  EXPECT_GT(info.h2d_pinned_bps, info.h2d_pageable_bps);
  EXPECT_EQ(phosSimGetProfile(5, &info), CUDA_ERROR_INVALID_DEVICE);
}

TEST_F(DriverTest, AProfileIsReadByName) {
  PhosSimProfileInfo info{};
  ASSERT_EQ(phosSimGetNamedProfile("h100-pcie5", &info), CUDA_SUCCESS);
  EXPECT_EQ(info.h2d_pinned_bps, 55e9);  // the profile in use here is ci's, at 25 GB/s
  EXPECT_EQ(phosSimGetNamedProfile("v100", &info), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(phosSimGetNamedProfile(nullptr, &info), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(DriverTest, DeviceAddressesStartAtTheFixedBase) {
  // Same-address restore (docs/design.md D5) needs device addresses that do not depend on the process.
  CUdeviceptr p = 0;
  ASSERT_EQ(cuMemAlloc(&p, 1 << 20), CUDA_SUCCESS);
  EXPECT_GE(p, 0x200000000000ull);
  EXPECT_EQ(cuMemFree(p), CUDA_SUCCESS);
}

TEST_F(DriverTest, StatsCountBytesAndHostBoundCopies) {
  const size_t kBytes = 64 << 20;
  CUdeviceptr a = 0, b = 0;
  ASSERT_EQ(cuMemAlloc(&a, kBytes), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAlloc(&b, kBytes), CUDA_SUCCESS);
  std::vector<unsigned char> host(kBytes, 1);
  ASSERT_EQ(phosSimResetStats(0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyHtoD(a, host.data(), kBytes), CUDA_SUCCESS);
  // 64 MiB device-to-device is modelled at 1.5 TB/s (x10: 150 GB/s of wall time): no host
  // memcpy keeps up, so the copy must be counted as host-bound.
  ASSERT_EQ(cuMemcpyDtoD(b, a, kBytes), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  PhosSimStats stats{};
  ASSERT_EQ(phosSimGetStats(0, &stats), CUDA_SUCCESS);
  EXPECT_EQ(stats.h2d_bytes, kBytes);
  EXPECT_EQ(stats.d2d_bytes, kBytes);
  EXPECT_EQ(stats.paced_ops, 2u);
  EXPECT_GE(stats.host_bound_ops, 1u);
  // By engine: one copy in, one on the compute engine (the device-to-device one, host-bound).
  PhosSimEngineStats engines{};
  ASSERT_EQ(phosSimGetEngineStats(0, &engines), CUDA_SUCCESS);
  EXPECT_EQ(engines.h2d_ops, 1u);
  EXPECT_EQ(engines.d2h_ops, 0u);
  EXPECT_EQ(engines.compute_ops, 1u);
  EXPECT_EQ(engines.compute_host_bound_ops, 1u);
  EXPECT_EQ(engines.h2d_host_bound_ops + engines.d2h_host_bound_ops + engines.compute_host_bound_ops,
            stats.host_bound_ops);
  EXPECT_EQ(phosSimGetEngineStats(5, &engines), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(phosSimGetEngineStats(0, nullptr), CUDA_ERROR_INVALID_VALUE);
  PhosSimStats other{};
  ASSERT_EQ(phosSimGetStats(1, &other), CUDA_SUCCESS);
  EXPECT_EQ(other.h2d_bytes, 0u);
  EXPECT_EQ(cuMemFree(a), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree(b), CUDA_SUCCESS);
}

TEST_F(DriverTest, KernelFaultIsAStickyIllegalAddress) {
  std::vector<char> image = ReadFile(PHOS_FAULTS_MODULE);
  ASSERT_FALSE(image.empty());
  CUmodule module = nullptr;
  CUfunction store = nullptr;
  ASSERT_EQ(cuModuleLoadData(&module, image.data()), CUDA_SUCCESS);
  ASSERT_EQ(cuModuleGetFunction(&store, module, "_Z13store_throughPii"), CUDA_SUCCESS);

  // A device address in the reserved range that is not allocated: the kernel faults.
  CUdeviceptr p = 0;
  ASSERT_EQ(cuMemAlloc(&p, 4096), CUDA_SUCCESS);
  ASSERT_EQ(cuMemFree(p), CUDA_SUCCESS);
  int value = 42;
  void* params[] = {&p, &value};
  ASSERT_EQ(cuLaunchKernel(store, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  // Sticky: the context is unusable from now on, as on a GPU.
  CUdeviceptr q = 0;
  EXPECT_EQ(cuMemAlloc(&q, 4096), CUDA_ERROR_ILLEGAL_ADDRESS);
  // Another context is not affected.
  CUcontext other = nullptr;
  ASSERT_EQ(cuCtxCreate(&other, nullptr, 0, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuMemAlloc(&q, 4096), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree(q), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxDestroy(other), CUDA_SUCCESS);
  // The broken context can still be destroyed (TearDown expects CUDA_SUCCESS).
}

TEST_F(DriverTest, DestroyedContextOnAnotherThreadIsReported) {
  CUcontext victim = nullptr;
  ASSERT_EQ(cuCtxCreate(&victim, nullptr, 0, 0), CUDA_SUCCESS);
  // Results are checked on the main thread: a fatal assertion in this one would end only its lambda.
  CUresult set = CUDA_ERROR_UNKNOWN, destroyed = CUDA_ERROR_UNKNOWN;
  std::thread t([&] {
    set = cuCtxSetCurrent(victim);
    // Destroyed from this thread while the main thread's stack still names it.
    if (set == CUDA_SUCCESS) destroyed = cuCtxDestroy(victim);
  });
  t.join();
  ASSERT_EQ(set, CUDA_SUCCESS);
  ASSERT_EQ(destroyed, CUDA_SUCCESS);
  CUdeviceptr p = 0;
  EXPECT_EQ(cuMemAlloc(&p, 16), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  CUcontext popped = nullptr;
  EXPECT_EQ(cuCtxPopCurrent(&popped), CUDA_SUCCESS);
  EXPECT_EQ(popped, victim);
}

TEST_F(DriverTest, ContextDestroyFreesItsMemoryAndHandles) {
  size_t free_before = 0, total = 0;
  ASSERT_EQ(cuMemGetInfo(&free_before, &total), CUDA_SUCCESS);
  CUcontext tenant = nullptr;
  ASSERT_EQ(cuCtxCreate(&tenant, nullptr, 0, 0), CUDA_SUCCESS);
  CUdeviceptr p = 0;
  ASSERT_EQ(cuMemAlloc(&p, 256 << 20), CUDA_SUCCESS);
  CUstream s = nullptr;
  CUevent e = nullptr;
  ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(cuEventCreate(&e, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxDestroy(tenant), CUDA_SUCCESS);
  size_t free_after = 0;
  ASSERT_EQ(cuMemGetInfo(&free_after, &total), CUDA_SUCCESS);
  EXPECT_EQ(free_after, free_before);
  EXPECT_EQ(cuStreamDestroy(s), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuEventDestroy(e), CUDA_ERROR_INVALID_HANDLE);
}

TEST_F(DriverTest, PointerQueriesNameTheAllocation) {
  CUdeviceptr p = 0;
  ASSERT_EQ(cuMemAlloc(&p, 1000), CUDA_SUCCESS);
  CUdeviceptr base = 0;
  size_t size = 0;
  ASSERT_EQ(cuMemGetAddressRange(&base, &size, p + 500), CUDA_SUCCESS);
  EXPECT_EQ(base, p);
  EXPECT_EQ(size, 1000u);
  unsigned type = 0;
  ASSERT_EQ(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p + 10), CUDA_SUCCESS);
  EXPECT_EQ(type, CU_MEMORYTYPE_DEVICE);
  int ordinal = -1;
  ASSERT_EQ(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p), CUDA_SUCCESS);
  EXPECT_EQ(ordinal, 0);
  ASSERT_EQ(cuMemFree(p), CUDA_SUCCESS);
  EXPECT_EQ(cuMemGetAddressRange(&base, &size, p), CUDA_ERROR_NOT_FOUND);

  void* host = nullptr;
  ASSERT_EQ(cuMemAllocHost(&host, 4096), CUDA_SUCCESS);
  ASSERT_EQ(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, reinterpret_cast<CUdeviceptr>(host)),
            CUDA_SUCCESS);
  EXPECT_EQ(type, CU_MEMORYTYPE_HOST);
  EXPECT_EQ(cuMemFreeHost(host), CUDA_SUCCESS);
  int stack_value = 0;
  EXPECT_EQ(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                  reinterpret_cast<CUdeviceptr>(&stack_value)),
            CUDA_ERROR_INVALID_VALUE);
}

// On a GPU a garbage handle is undefined behaviour; simgpu promises the documented error and no
// crash, since a remoted call in phosd may carry anything a tenant sends.
TEST_F(DriverTest, GarbageAndStaleHandlesAreErrorsNotCrashes) {
  auto garbage_stream = reinterpret_cast<CUstream>(uintptr_t{0xdeadbeef0});
  auto garbage_event = reinterpret_cast<CUevent>(uintptr_t{0x1234560});
  auto garbage_module = reinterpret_cast<CUmodule>(uintptr_t{0x7f0000001000});
  auto garbage_function = reinterpret_cast<CUfunction>(uintptr_t{0x10});
  auto garbage_context = reinterpret_cast<CUcontext>(uintptr_t{0xabcdef00});
  EXPECT_EQ(cuStreamSynchronize(garbage_stream), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuStreamQuery(garbage_stream), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuStreamDestroy(garbage_stream), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuEventRecord(garbage_event, nullptr), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuEventQuery(garbage_event), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuStreamWaitEvent(nullptr, garbage_event, 0), CUDA_ERROR_INVALID_HANDLE);
  CUfunction f = nullptr;
  EXPECT_EQ(cuModuleGetFunction(&f, garbage_module, "_Z1kv"), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuModuleUnload(garbage_module), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuLaunchKernel(garbage_function, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr),
            CUDA_ERROR_INVALID_HANDLE);
  size_t offset = 0;
  EXPECT_EQ(cuFuncGetParamInfo(garbage_function, 0, &offset, nullptr), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuCtxPushCurrent(garbage_context), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(cuCtxDestroy(garbage_context), CUDA_ERROR_INVALID_CONTEXT);
  // A stream handle where an event is expected is a wrong-kind handle, not a stream.
  CUstream s = nullptr;
  ASSERT_EQ(cuStreamCreate(&s, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuEventQuery(reinterpret_cast<CUevent>(s)), CUDA_ERROR_INVALID_HANDLE);
  ASSERT_EQ(cuStreamDestroy(s), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(s), CUDA_ERROR_INVALID_HANDLE);
  // The context is still healthy: argument errors are not sticky.
  EXPECT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
}

// A side the entry point names as device memory must be device memory: a bad address is an
// error, never a host memcpy through it.
TEST_F(DriverTest, CopiesRefuseNonDeviceAddressesOnTheirDeviceSides) {
  std::vector<unsigned char> host(64, 1);
  const CUdeviceptr bogus = 0x10;
  const auto host_ptr = reinterpret_cast<CUdeviceptr>(host.data());
  EXPECT_EQ(cuMemcpyDtoH(host.data(), bogus, 16), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpyHtoD(bogus, host.data(), 16), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpyDtoD(host_ptr, host_ptr, 16), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpyDtoHAsync(host.data(), host_ptr, 16, nullptr), CUDA_ERROR_INVALID_VALUE);
  // Unified copies take host memory on either side.
  std::vector<unsigned char> other(64, 0);
  EXPECT_EQ(cuMemcpy(reinterpret_cast<CUdeviceptr>(other.data()), host_ptr, 64), CUDA_SUCCESS);
  EXPECT_EQ(other[63], 1);
  EXPECT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
}

TEST_F(DriverTest, OverlappingCopiesWithinABufferMoveTheBytes) {
  // A tenant may copy a buffer onto itself shifted: no undefined behaviour in the host process
  // (the sanitizer builds report memcpy's), and the bytes land as memmove would put them.
  constexpr size_t kBytes = 256;
  std::vector<unsigned char> host(kBytes);
  for (size_t i = 0; i < kBytes; ++i) host[i] = static_cast<unsigned char>(i * 7 + 1);
  CUdeviceptr buffer = 0;
  ASSERT_EQ(cuMemAlloc(&buffer, kBytes), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyHtoD(buffer, host.data(), kBytes), CUDA_SUCCESS);
  std::vector<unsigned char> expected = host;
  std::memmove(expected.data() + 6, expected.data(), 64);   // forwards over itself
  std::memmove(expected.data() + 100, expected.data() + 130, 90);  // backwards over itself
  ASSERT_EQ(cuMemcpyDtoD(buffer + 6, buffer, 64), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoDAsync(buffer + 100, buffer + 130, 90, nullptr), CUDA_SUCCESS);
  std::vector<unsigned char> got(kBytes, 0);
  ASSERT_EQ(cuMemcpyDtoH(got.data(), buffer, kBytes), CUDA_SUCCESS);
  EXPECT_EQ(got, expected);
  EXPECT_EQ(cuMemFree(buffer), CUDA_SUCCESS);
}

TEST_F(DriverTest, PrimaryContextStateFollowsRetainAndRelease) {
  unsigned flags = 1;
  int active = 1;
  ASSERT_EQ(cuDevicePrimaryCtxGetState(1, &flags, &active), CUDA_SUCCESS);
  EXPECT_EQ(active, 0);
  CUcontext primary = nullptr;
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&primary, 1), CUDA_SUCCESS);
  ASSERT_EQ(cuDevicePrimaryCtxGetState(1, &flags, &active), CUDA_SUCCESS);
  EXPECT_EQ(active, 1);
  ASSERT_EQ(cuDevicePrimaryCtxRelease(1), CUDA_SUCCESS);
  ASSERT_EQ(cuDevicePrimaryCtxGetState(1, &flags, &active), CUDA_SUCCESS);
  EXPECT_EQ(active, 0);
}

}  // namespace

namespace {

// Peer access between contexts of the two devices: the answers cuda.h documents.
TEST_F(DriverTest, PeerAccessIsEnabledOncePerContextPairAndDisabledOnce) {
  int can = -1;
  ASSERT_EQ(cuDeviceCanAccessPeer(&can, 0, 1), CUDA_SUCCESS);
  EXPECT_EQ(can, 1);
  ASSERT_EQ(cuDeviceCanAccessPeer(&can, 1, 0), CUDA_SUCCESS);
  EXPECT_EQ(can, 1);
  ASSERT_EQ(cuDeviceCanAccessPeer(&can, 0, 0), CUDA_SUCCESS);
  EXPECT_EQ(can, 0);  // a device is not its own peer
  EXPECT_EQ(cuDeviceCanAccessPeer(&can, 0, 2), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(cuDeviceCanAccessPeer(&can, -1, 0), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(cuDeviceCanAccessPeer(nullptr, 0, 1), CUDA_ERROR_INVALID_VALUE);

  CUcontext peer = nullptr, same_device = nullptr;
  ASSERT_EQ(cuCtxCreate(&peer, nullptr, 0, 1), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxCreate(&same_device, nullptr, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSetCurrent(ctx_), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxEnablePeerAccess(peer, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuCtxDisablePeerAccess(peer), CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);
  EXPECT_EQ(cuCtxEnablePeerAccess(peer, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxEnablePeerAccess(peer, 0), CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED);
  EXPECT_EQ(cuCtxEnablePeerAccess(ctx_, 0), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(cuCtxEnablePeerAccess(same_device, 0), CUDA_ERROR_PEER_ACCESS_UNSUPPORTED);
  EXPECT_EQ(cuCtxEnablePeerAccess(reinterpret_cast<CUcontext>(0x5eed), 0), CUDA_ERROR_INVALID_CONTEXT);
  // Unidirectional: the peer's own direction is separate.
  ASSERT_EQ(cuCtxSetCurrent(peer), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxDisablePeerAccess(ctx_), CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);
  ASSERT_EQ(cuCtxSetCurrent(ctx_), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxDisablePeerAccess(peer), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxDisablePeerAccess(peer), CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);
  EXPECT_EQ(cuCtxDestroy(same_device), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxDestroy(peer), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSetCurrent(ctx_), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxDisablePeerAccess(peer), CUDA_ERROR_INVALID_CONTEXT);  // destroyed
}

// cuLaunchKernel takes its limits from the device's profile: dynamic shared memory up to the 48 KiB
// a block has without the opt-in (there is no cuFuncSetAttribute to opt in).
TEST_F(DriverTest, LaunchSharedMemoryIsBoundedByTheProfile) {
  std::vector<char> image = ReadFile(PHOS_FAULTS_MODULE);
  ASSERT_FALSE(image.empty());
  CUmodule module = nullptr;
  ASSERT_EQ(cuModuleLoadData(&module, image.data()), CUDA_SUCCESS);
  CUfunction add_one = nullptr;
  ASSERT_EQ(cuModuleGetFunction(&add_one, module, "_Z7add_onePKiPii"), CUDA_SUCCESS);
  CUdeviceptr in = 0, out = 0;
  int n = 0;  // touches nothing
  void* params[] = {&in, &out, &n};
  EXPECT_EQ(cuLaunchKernel(add_one, 1, 1, 1, 1, 1, 1, 48 << 10, nullptr, params, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuLaunchKernel(add_one, 1, 1, 1, 1, 1, 1, (48 << 10) + 1, nullptr, params, nullptr),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuLaunchKernel(add_one, 1, 1, 1, 1025, 1, 1, 0, nullptr, params, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(cuModuleUnload(module), CUDA_SUCCESS);
}

}  // namespace

// cuMemcpy2D and cuMemsetD2D*: rows land at their pitch, the gaps between them stay, and a span
// past the allocation (or a pitch below the width) is refused before anything is written.
TEST_F(DriverTest, PitchedCopiesAndSetsMoveRowsAndCheckTheirSpan) {
  constexpr size_t kWidth = 24, kHeight = 5, kPitch = 64, kHostPitch = 30;
  CUdeviceptr dev = 0;
  ASSERT_EQ(cuMemAlloc(&dev, kPitch * kHeight), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD8(dev, 0xee, kPitch * kHeight), CUDA_SUCCESS);
  std::vector<unsigned char> host(kHostPitch * kHeight);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<unsigned char>(i * 13 + 5);

  CUDA_MEMCPY2D up{};
  up.srcMemoryType = CU_MEMORYTYPE_HOST;
  up.srcHost = host.data();
  up.srcPitch = kHostPitch;
  up.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  up.dstDevice = dev;
  up.dstPitch = kPitch;
  up.WidthInBytes = kWidth;
  up.Height = kHeight;
  ASSERT_EQ(cuMemcpy2D(&up), CUDA_SUCCESS);
  // Row 2, from byte 8 on, set to 0x42 in 16-bit elements: 8 elements of 2 bytes.
  ASSERT_EQ(cuMemsetD2D16Async(dev + 2 * kPitch + 8, kPitch, 0x4242, 8, 2, nullptr), CUDA_SUCCESS);

  std::vector<unsigned char> expected(kPitch * kHeight, 0xee);
  for (size_t r = 0; r < kHeight; ++r) {
    for (size_t c = 0; c < kWidth; ++c) expected[r * kPitch + c] = host[r * kHostPitch + c];
  }
  for (size_t r = 2; r < 4; ++r) {
    for (size_t c = 8; c < 24; ++c) expected[r * kPitch + c] = 0x42;
  }
  std::vector<unsigned char> got(kPitch * kHeight, 0);
  ASSERT_EQ(cuMemcpyDtoH(got.data(), dev, got.size()), CUDA_SUCCESS);
  EXPECT_EQ(got, expected);

  // Back down into a dense host buffer, asynchronously, from column 4 of row 1.
  CUDA_MEMCPY2D down{};
  down.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  down.srcDevice = dev;
  down.srcXInBytes = 4;
  down.srcY = 1;
  down.srcPitch = kPitch;
  down.dstMemoryType = CU_MEMORYTYPE_HOST;
  std::vector<unsigned char> dense(16 * 3, 0);
  down.dstHost = dense.data();
  down.dstPitch = 16;
  down.WidthInBytes = 16;
  down.Height = 3;
  ASSERT_EQ(cuMemcpy2DAsync(&down, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  for (size_t r = 0; r < 3; ++r) {
    for (size_t c = 0; c < 16; ++c) EXPECT_EQ(dense[r * 16 + c], expected[(r + 1) * kPitch + 4 + c]) << r << "," << c;
  }

  // One row too many: the last row ends past the allocation.
  CUDA_MEMCPY2D bad = up;
  bad.Height = kHeight + 1;
  EXPECT_EQ(cuMemcpy2D(&bad), CUDA_ERROR_INVALID_VALUE);
  bad = up;
  bad.dstPitch = kWidth - 1;  // rows would overlap
  EXPECT_EQ(cuMemcpy2D(&bad), CUDA_ERROR_INVALID_VALUE);
  bad = up;
  bad.dstPitch = SIZE_MAX / 2;  // the span wraps
  EXPECT_EQ(cuMemcpy2D(&bad), CUDA_ERROR_INVALID_VALUE);
  bad = up;
  bad.dstMemoryType = CU_MEMORYTYPE_HOST;  // the device side named as host memory
  bad.dstHost = reinterpret_cast<void*>(dev);
  EXPECT_EQ(cuMemcpy2D(&bad), CUDA_ERROR_INVALID_VALUE);
  bad = up;
  bad.dstMemoryType = CU_MEMORYTYPE_ARRAY;
  EXPECT_EQ(cuMemcpy2D(&bad), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemsetD2D8(dev, kPitch, 1, kPitch + 1, 2), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemsetD2D32(dev, kPitch, 1, 4, kHeight + 1), CUDA_ERROR_INVALID_VALUE);
  got.assign(got.size(), 0);
  ASSERT_EQ(cuMemcpyDtoH(got.data(), dev, got.size()), CUDA_SUCCESS);
  EXPECT_EQ(got, expected);
  EXPECT_EQ(cuMemFree(dev), CUDA_SUCCESS);
}

namespace {

// Stream memory operations: simgpu has no CAN_FLUSH_REMOTE_WRITES, and the word must be device
// memory (simgpu maps no host memory into the device). They run unpaced: no modelled cost.
TEST_F(DriverTest, StreamMemoryOperationsTakeDeviceWordsWithoutFlush) {
  CUdeviceptr word = 0;
  ASSERT_EQ(cuMemAlloc(&word, 4096), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamWaitValue32(nullptr, word, 0, CU_STREAM_WAIT_VALUE_GEQ | CU_STREAM_WAIT_VALUE_FLUSH),
            CUDA_ERROR_NOT_SUPPORTED);
  uint32_t host_word = 0;
  EXPECT_EQ(cuStreamWriteValue32(nullptr, reinterpret_cast<CUdeviceptr>(&host_word), 1, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuStreamWaitValue32(nullptr, word + 4096, 0, CU_STREAM_WAIT_VALUE_GEQ), CUDA_ERROR_INVALID_VALUE);
  PhosSimStats before{}, after{};
  ASSERT_EQ(phosSimGetStats(0, &before), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamWriteValue32(nullptr, word, 5, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamWaitValue32(nullptr, word, 5, CU_STREAM_WAIT_VALUE_EQ), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  ASSERT_EQ(phosSimGetStats(0, &after), CUDA_SUCCESS);
  EXPECT_EQ(after.ops - before.ops, 2u);
  EXPECT_EQ(after.paced_ops - before.paced_ops, 0u);
  EXPECT_EQ(cuMemFree(word), CUDA_SUCCESS);
}

}  // namespace
