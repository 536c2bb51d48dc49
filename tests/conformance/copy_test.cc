// Copy engines and host memory kinds. phos restores buffers (H2D) while checkpoint or migration
// traffic leaves the device (D2H), stages everything through pinned memory because pageable
// copies are slower, and must still get correct data from an application's pageable buffers.
#include <cstring>
#include <vector>

#include "conformance.h"

namespace phos::conformance {
namespace {

using CopyTest = DriverTest;

constexpr std::size_t kCopyBytes = 64 * kMiB;
constexpr int kRepetitions = 3;

// One engine per direction: an H2D copy and a D2H copy on different streams run at the same time,
// so both together take clearly less than one after the other.
TEST_F(CopyTest, HostToDeviceAndDeviceToHostOverlap) {
  PinnedBuffer upload;
  PinnedBuffer download;
  DeviceBuffer up_target;
  DeviceBuffer down_source;
  Stream up;
  Stream down;
  PHOS_ASSERT_CU(upload.Allocate(kCopyBytes));
  PHOS_ASSERT_CU(download.Allocate(kCopyBytes));
  PHOS_ASSERT_CU(up_target.Allocate(kCopyBytes));
  PHOS_ASSERT_CU(down_source.Allocate(kCopyBytes));
  PHOS_ASSERT_CU(up.Create(CU_STREAM_NON_BLOCKING));
  PHOS_ASSERT_CU(down.Create(CU_STREAM_NON_BLOCKING));

  auto h2d = [&] {
    if (CUresult r = cuMemcpyHtoDAsync(up_target.get(), upload.get(), kCopyBytes, up.get());
        r != CUDA_SUCCESS)
      return r;
    return cuStreamSynchronize(up.get());
  };
  auto d2h = [&] {
    if (CUresult r = cuMemcpyDtoHAsync(download.get(), down_source.get(), kCopyBytes, down.get());
        r != CUDA_SUCCESS)
      return r;
    return cuStreamSynchronize(down.get());
  };
  auto both = [&] {
    if (CUresult r = cuMemcpyHtoDAsync(up_target.get(), upload.get(), kCopyBytes, up.get());
        r != CUDA_SUCCESS)
      return r;
    if (CUresult r = cuMemcpyDtoHAsync(download.get(), down_source.get(), kCopyBytes, down.get());
        r != CUDA_SUCCESS)
      return r;
    if (CUresult r = cuStreamSynchronize(up.get()); r != CUDA_SUCCESS) return r;
    return cuStreamSynchronize(down.get());
  };
  double h2d_ms = 0;
  double d2h_ms = 0;
  double both_ms = 0;
  PHOS_ASSERT_CU(MinWallMs(kRepetitions, h2d, &h2d_ms));
  PHOS_ASSERT_CU(MinWallMs(kRepetitions, d2h, &d2h_ms));
  PHOS_ASSERT_CU(MinWallMs(kRepetitions, both, &both_ms));
  EXPECT_LT(both_ms, 0.8 * (h2d_ms + d2h_ms))
      << "H2D alone " << h2d_ms << " ms, D2H alone " << d2h_ms << " ms, both " << both_ms << " ms";
}

// Measured around a synchronous copy plus a context synchronize: cuMemcpyHtoD from pageable memory
// may return once the data is staged, before the DMA is complete.
TEST_F(CopyTest, PinnedHostToDeviceIsFasterThanPageable) {
  PinnedBuffer pinned;
  DeviceBuffer device;
  PHOS_ASSERT_CU(pinned.Allocate(kCopyBytes));
  PHOS_ASSERT_CU(device.Allocate(kCopyBytes));
  std::vector<unsigned char> pageable(kCopyBytes);
  // Touch every page so that first-touch faults are not part of the measurement.
  FillPattern(pageable.data(), kCopyBytes, 3);
  FillPattern(pinned.get(), kCopyBytes, 3);

  double pinned_ms = 0;
  double pageable_ms = 0;
  PHOS_ASSERT_CU(MinWallMs(
      kRepetitions,
      [&] {
        if (CUresult r = cuMemcpyHtoD(device.get(), pinned.get(), kCopyBytes); r != CUDA_SUCCESS) return r;
        return cuCtxSynchronize();
      },
      &pinned_ms));
  PHOS_ASSERT_CU(MinWallMs(
      kRepetitions,
      [&] {
        if (CUresult r = cuMemcpyHtoD(device.get(), pageable.data(), kCopyBytes); r != CUDA_SUCCESS) return r;
        return cuCtxSynchronize();
      },
      &pageable_ms));
  EXPECT_LT(pinned_ms, pageable_ms) << "pinned " << pinned_ms << " ms, pageable " << pageable_ms << " ms";
}

TEST_F(CopyTest, AsyncCopiesWithPageableMemoryDeliverTheData) {
  constexpr std::size_t kBytes = 8 * kMiB + 5;
  DeviceBuffer device;
  Stream stream;
  PHOS_ASSERT_CU(device.Allocate(kBytes));
  PHOS_ASSERT_CU(stream.Create(CU_STREAM_NON_BLOCKING));
  std::vector<unsigned char> source(kBytes);
  std::vector<unsigned char> back(kBytes, 0);
  FillPattern(source.data(), kBytes, 13);
  PHOS_ASSERT_CU(cuMemcpyHtoDAsync(device.get(), source.data(), kBytes, stream.get()));
  PHOS_ASSERT_CU(cuMemcpyDtoHAsync(back.data(), device.get(), kBytes, stream.get()));
  PHOS_ASSERT_CU(cuStreamSynchronize(stream.get()));
  EXPECT_EQ(FirstPatternMismatch(back.data(), kBytes, 13), kBytes);
}

TEST_F(CopyTest, DeviceToDeviceAsyncCopyAndMemsetAsync) {
  constexpr std::size_t kBytes = 4 * kMiB;
  DeviceBuffer first;
  DeviceBuffer second;
  PinnedBuffer back;
  Stream stream;
  PHOS_ASSERT_CU(first.Allocate(kBytes));
  PHOS_ASSERT_CU(second.Allocate(kBytes));
  PHOS_ASSERT_CU(back.Allocate(kBytes));
  PHOS_ASSERT_CU(stream.Create(CU_STREAM_NON_BLOCKING));
  const CUstream s = stream.get();
  PHOS_ASSERT_CU(cuMemsetD32Async(first.get(), 0x600dcafeu, kBytes / 4, s));
  PHOS_ASSERT_CU(cuMemsetD8Async(first.get() + kBytes / 2, 0x7f, kBytes / 2, s));
  PHOS_ASSERT_CU(cuMemcpyDtoDAsync(second.get(), first.get(), kBytes, s));
  PHOS_ASSERT_CU(cuMemcpyDtoHAsync(back.get(), second.get(), kBytes, s));
  PHOS_ASSERT_CU(cuStreamSynchronize(s));
  const auto* bytes = static_cast<const unsigned char*>(back.get());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < kBytes / 2; i += 4) {
    unsigned int word = 0;
    std::memcpy(&word, bytes + i, 4);
    bad += word != 0x600dcafeu;
  }
  for (std::size_t i = kBytes / 2; i < kBytes; ++i) bad += bytes[i] != 0x7f;
  EXPECT_EQ(bad, 0u);
}

}  // namespace
}  // namespace phos::conformance
