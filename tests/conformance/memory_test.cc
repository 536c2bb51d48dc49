// Linear device memory, copies and pinned host memory: capacity accounting, out-of-memory and
// recovery, copy correctness at awkward sizes and offsets, and the errors for bad pointers.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "conformance.h"

namespace phos::conformance {
namespace {

using MemoryTest = DriverTest;

TEST_F(MemoryTest, AllocationLowersFreeMemoryByItsSize) {
  constexpr std::size_t kBytes = 256 * kMiB;
  std::size_t free_before = 0;
  std::size_t total = 0;
  PHOS_ASSERT_CU(cuMemGetInfo(&free_before, &total));
  CUdeviceptr ptr = 0;
  PHOS_ASSERT_CU(cuMemAlloc(&ptr, kBytes));
  std::size_t free_allocated = 0;
  PHOS_ASSERT_CU(cuMemGetInfo(&free_allocated, &total));
  // Allocation granularity and driver bookkeeping may take a little more than asked for.
  EXPECT_GE(free_before - free_allocated, kBytes / 100 * 99);
  EXPECT_LE(free_before - free_allocated, kBytes + 64 * kMiB);
  PHOS_ASSERT_CU(cuMemFree(ptr));
  std::size_t free_after = 0;
  PHOS_ASSERT_CU(cuMemGetInfo(&free_after, &total));
  EXPECT_GE(free_after, free_allocated + kBytes / 100 * 99);
}

TEST_F(MemoryTest, ExhaustingMemoryIsOutOfMemoryAndFreeingRecovers) {
  std::size_t free_before = 0;
  std::size_t total = 0;
  PHOS_ASSERT_CU(cuMemGetInfo(&free_before, &total));
  // Bounded: the device cannot hold more pieces than it has GiB.
  const std::size_t max_pieces = total / kGiB + 2;
  std::vector<CUdeviceptr> pieces;
  CUresult last = CUDA_SUCCESS;
  while (pieces.size() < max_pieces) {
    CUdeviceptr ptr = 0;
    last = cuMemAlloc(&ptr, kGiB);
    if (last != CUDA_SUCCESS) break;
    pieces.push_back(ptr);
  }
  EXPECT_EQ(last, CUDA_ERROR_OUT_OF_MEMORY);
  // Nearly all of the reported free memory was usable (phos sizes instance budgets from it).
  EXPECT_GE(pieces.size() * kGiB, free_before / 10 * 9);
  for (CUdeviceptr ptr : pieces) EXPECT_EQ(cuMemFree(ptr), CUDA_SUCCESS);

  CUdeviceptr again = 0;
  PHOS_ASSERT_CU(cuMemAlloc(&again, kGiB));
  PHOS_EXPECT_CU(cuMemsetD8(again, 0x5a, kMiB));
  unsigned char byte = 0;
  PHOS_EXPECT_CU(cuMemcpyDtoH(&byte, again + kMiB - 1, 1));
  EXPECT_EQ(byte, 0x5a);
  PHOS_EXPECT_CU(cuMemFree(again));
}

TEST_F(MemoryTest, AllocationLargerThanTheDeviceIsOutOfMemory) {
  std::size_t total = 0;
  PHOS_ASSERT_CU(cuDeviceTotalMem(&total, device_));
  CUdeviceptr ptr = 0;
  EXPECT_EQ(cuMemAlloc(&ptr, total + kGiB), CUDA_ERROR_OUT_OF_MEMORY);
  // The failed request left nothing behind.
  DeviceBuffer after;
  PHOS_EXPECT_CU(after.Allocate(kGiB));
}

TEST_F(MemoryTest, ZeroByteAllocationIsInvalidValue) {
  CUdeviceptr ptr = 0;
  EXPECT_EQ(cuMemAlloc(&ptr, 0), CUDA_ERROR_INVALID_VALUE);
}

// With unified addressing a device pointer is never also a host pointer: cuMemcpy "infers the
// type of the transfer ... from the pointer values", which only works if the two never collide.
// The remoted cudaMemcpy(cudaMemcpyDefault) path depends on that.
TEST_F(MemoryTest, DevicePointersAreDistinctAndNotHostMemory) {
  constexpr int kCount = 8;
  constexpr std::size_t kBytes = kMiB + 100;
  DeviceBuffer buffers[kCount];
  std::vector<std::vector<unsigned char>> host_blocks;
  for (int i = 0; i < kCount; ++i) {
    PHOS_ASSERT_CU(buffers[i].Allocate(kBytes));
    host_blocks.emplace_back(kBytes);
  }
  for (int i = 0; i < kCount; ++i) {
    const CUdeviceptr a = buffers[i].get();
    EXPECT_NE(a, 0u);
    // cuMemAlloc memory is "suitably aligned for any kind of variable".
    EXPECT_EQ(a % 256, 0u);
    for (int j = 0; j < kCount; ++j) {
      const CUdeviceptr b = buffers[j].get();
      if (i != j) {
        EXPECT_TRUE(a + kBytes <= b || b + kBytes <= a) << i << " overlaps " << j;
      }
      const auto h = reinterpret_cast<CUdeviceptr>(host_blocks[j].data());
      EXPECT_TRUE(a + kBytes <= h || h + kBytes <= a) << "device " << i << " overlaps host block " << j;
    }
  }
  FillPattern(host_blocks[0].data(), kBytes, 17);
  const auto host_in = reinterpret_cast<CUdeviceptr>(host_blocks[0].data());
  const auto host_out = reinterpret_cast<CUdeviceptr>(host_blocks[1].data());
  PHOS_ASSERT_CU(cuMemcpy(buffers[3].get(), host_in, kBytes));
  PHOS_ASSERT_CU(cuMemcpy(buffers[5].get(), buffers[3].get(), kBytes));
  PHOS_ASSERT_CU(cuMemcpy(host_out, buffers[5].get(), kBytes));
  EXPECT_EQ(FirstPatternMismatch(host_blocks[1].data(), kBytes, 17), kBytes);
}

TEST_F(MemoryTest, MemsetD8AndD32) {
  constexpr std::size_t kBytes = kMiB + 12;
  DeviceBuffer buffer;
  PHOS_ASSERT_CU(buffer.Allocate(kBytes));
  PHOS_ASSERT_CU(cuMemsetD8(buffer.get(), 0xab, kBytes));
  // 32-bit values over an interior, 4-byte aligned part.
  constexpr std::size_t kWordOffset = 4096;
  constexpr std::size_t kWords = 1000;
  PHOS_ASSERT_CU(cuMemsetD32(buffer.get() + kWordOffset, 0x01020304u, kWords));
  std::vector<unsigned char> back(kBytes);
  PHOS_ASSERT_CU(cuMemcpyDtoH(back.data(), buffer.get(), kBytes));
  std::size_t bad = 0;
  for (std::size_t i = 0; i < kBytes; ++i) {
    unsigned char expected = 0xab;
    if (i >= kWordOffset && i < kWordOffset + 4 * kWords) {
      const unsigned int word = 0x01020304u;
      std::memcpy(&expected, reinterpret_cast<const unsigned char*>(&word) + (i - kWordOffset) % 4, 1);
    }
    if (back[i] != expected && bad++ < 5) ADD_FAILURE() << "byte " << i << ": " << int{back[i]};
  }
  EXPECT_EQ(bad, 0u);
}

// cuMemsetD32: "The dstDevice pointer must be four byte aligned."
TEST_F(MemoryTest, MisalignedMemsetD32IsInvalidValue) {
  DeviceBuffer buffer;
  PHOS_ASSERT_CU(buffer.Allocate(kMiB));
  EXPECT_EQ(cuMemsetD32(buffer.get() + 2, 0, 16), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(MemoryTest, RoundTripsAtSeveralSizesAndUnalignedOffsets) {
  constexpr std::size_t kCapacity = 16 * kMiB + 8 * kKiB;
  DeviceBuffer first;
  DeviceBuffer second;
  PHOS_ASSERT_CU(first.Allocate(kCapacity));
  PHOS_ASSERT_CU(second.Allocate(kCapacity));
  const std::size_t sizes[] = {1, 3, 4096, 65537, kMiB + 13, 16 * kMiB};
  const std::size_t offsets[] = {0, 1, 7, 4093};
  std::uint32_t seed = 1;
  for (std::size_t size : sizes) {
    for (std::size_t offset : offsets) {
      std::vector<unsigned char> source(size);
      FillPattern(source.data(), size, seed);
      const std::size_t other_offset = (offset * 3 + 5) % 64;
      PHOS_ASSERT_CU(cuMemcpyHtoD(first.get() + offset, source.data(), size));
      PHOS_ASSERT_CU(cuMemcpyDtoD(second.get() + other_offset, first.get() + offset, size));
      std::vector<unsigned char> back(size);
      PHOS_ASSERT_CU(cuMemcpyDtoH(back.data(), second.get() + other_offset, size));
      EXPECT_EQ(FirstPatternMismatch(back.data(), size, seed), size)
          << "size " << size << " offset " << offset;
      ++seed;
    }
  }
}

// Copies that touch addresses outside any mapping fail cleanly instead of faulting. The range
// is a reservation with only its first granule mapped, so the unmapped part is certain to be
// unbacked on any driver (an address just past a cuMemAlloc block may belong to another one).
TEST_F(MemoryTest, CopiesOutsideMappedMemoryAreInvalidValue) {
  std::size_t granularity = 0;
  PHOS_ASSERT_CU(MinimumGranularity(device_, &granularity));
  AddressRange range;
  PHOS_ASSERT_CU(range.Reserve(2 * granularity, 0));
  const CUmemAllocationProp prop = DeviceAllocationProp(device_);
  CUmemGenericAllocationHandle handle = 0;
  PHOS_ASSERT_CU(cuMemCreate(&handle, granularity, &prop, 0));
  PHOS_ASSERT_CU(MapReadWrite(range.get(), granularity, handle, device_));

  std::vector<unsigned char> host(8 * kKiB, 0x11);
  const CUdeviceptr unmapped = range.get() + granularity;
  const CUdeviceptr straddling = unmapped - 4 * kKiB;
  DeviceBuffer valid;
  PHOS_ASSERT_CU(valid.Allocate(host.size()));

  EXPECT_EQ(cuMemcpyHtoD(unmapped, host.data(), host.size()), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpyDtoH(host.data(), unmapped, host.size()), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpyHtoD(straddling, host.data(), host.size()), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpyDtoH(host.data(), straddling, host.size()), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpyDtoD(unmapped, valid.get(), host.size()), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpyDtoD(valid.get(), straddling, host.size()), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemsetD8(unmapped, 0, host.size()), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpyHtoD(0, host.data(), host.size()), CUDA_ERROR_INVALID_VALUE);

  // The mapped part is intact and still usable.
  PHOS_EXPECT_CU(cuMemcpyHtoD(range.get(), host.data(), host.size()));
  PHOS_EXPECT_CU(cuMemUnmap(range.get(), granularity));
  PHOS_EXPECT_CU(cuMemRelease(handle));
}

TEST_F(MemoryTest, DoubleFreeIsInvalidValue) {
  CUdeviceptr ptr = 0;
  PHOS_ASSERT_CU(cuMemAlloc(&ptr, kMiB));
  PHOS_ASSERT_CU(cuMemFree(ptr));
  EXPECT_EQ(cuMemFree(ptr), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(MemoryTest, FreeOfAnInteriorPointerIsInvalidValue) {
  DeviceBuffer buffer;
  PHOS_ASSERT_CU(buffer.Allocate(kMiB));
  EXPECT_EQ(cuMemFree(buffer.get() + 256), CUDA_ERROR_INVALID_VALUE);
  // The allocation survived the bad call.
  PHOS_EXPECT_CU(cuMemsetD8(buffer.get(), 1, kMiB));
}

TEST_F(MemoryTest, PinnedHostMemoryRoundTrip) {
  constexpr std::size_t kBytes = 4 * kMiB + 3;
  PinnedBuffer source;
  PinnedBuffer back;
  DeviceBuffer device;
  PHOS_ASSERT_CU(source.Allocate(kBytes));
  PHOS_ASSERT_CU(back.Allocate(kBytes));
  PHOS_ASSERT_CU(device.Allocate(kBytes));
  FillPattern(source.get(), kBytes, 77);
  PHOS_ASSERT_CU(cuMemcpyHtoD(device.get(), source.get(), kBytes));
  PHOS_ASSERT_CU(cuMemcpyDtoH(back.get(), device.get(), kBytes));
  EXPECT_EQ(FirstPatternMismatch(back.get(), kBytes, 77), kBytes);
  // Pinned memory is a host address under UVA: cuMemcpy copies from it to the device.
  std::memset(back.get(), 0, kBytes);
  PHOS_ASSERT_CU(cuMemcpy(device.get(), reinterpret_cast<CUdeviceptr>(back.get()), kBytes));
  PHOS_ASSERT_CU(cuMemcpy(reinterpret_cast<CUdeviceptr>(source.get()), device.get(), kBytes));
  const auto* bytes = static_cast<const unsigned char*>(source.get());
  EXPECT_TRUE(std::all_of(bytes, bytes + kBytes, [](unsigned char b) { return b == 0; }));
}

TEST_F(MemoryTest, FreeHostOfHeapMemoryIsInvalidValue) {
  void* heap = std::malloc(4096);
  EXPECT_EQ(cuMemFreeHost(heap), CUDA_ERROR_INVALID_VALUE);
  std::free(heap);
}

TEST_F(MemoryTest, HostRegisterAndUnregister) {
  constexpr std::size_t kBytes = 2 * kMiB;
  void* host = std::aligned_alloc(4096, kBytes);
  ASSERT_NE(host, nullptr);
  FillPattern(host, kBytes, 9);
  PHOS_ASSERT_CU(cuMemHostRegister(host, kBytes, 0));
  EXPECT_EQ(cuMemHostRegister(host, kBytes, 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);

  // Registered memory is usable for asynchronous copies like any pinned buffer.
  DeviceBuffer device;
  PHOS_ASSERT_CU(device.Allocate(kBytes));
  PHOS_EXPECT_CU(cuMemcpyHtoDAsync(device.get(), host, kBytes, nullptr));
  PHOS_EXPECT_CU(cuStreamSynchronize(nullptr));
  std::vector<unsigned char> back(kBytes);
  PHOS_EXPECT_CU(cuMemcpyDtoH(back.data(), device.get(), kBytes));
  EXPECT_EQ(FirstPatternMismatch(back.data(), kBytes, 9), kBytes);

  PHOS_EXPECT_CU(cuMemHostUnregister(host));
  EXPECT_EQ(cuMemHostUnregister(host), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
  std::free(host);

  std::vector<unsigned char> never_registered(4096);
  EXPECT_EQ(cuMemHostUnregister(never_registered.data()), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
}

}  // namespace
}  // namespace phos::conformance
