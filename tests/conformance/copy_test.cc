// Copy engines and host memory kinds. phos restores buffers (H2D) while checkpoint or migration
// traffic leaves the device (D2H), stages everything through pinned memory because pageable
// copies are slower, and must still get correct data from an application's pageable buffers.
#include <cstdint>
#include <cstring>
#include <vector>

#include "conformance.h"

namespace phos::conformance {
namespace {

using CopyTest = DriverTest;

constexpr std::size_t kCopyBytes = 64 * kMiB;
constexpr int kRepetitions = 3;

#if __has_include("phos/simgpu/simgpu.h")
#include "phos/simgpu/simgpu.h"

// Copies simgpu could not pace at the modelled rate because the host's memcpy was slower (a
// loaded host, a sanitizer build): their wall time shows the host, not the device model.
uint64_t HostBoundCopies() {
  PhosSimStats stats{};
  return phosSimGetStats(0, &stats) == CUDA_SUCCESS ? stats.host_bound_ops : 0;
}
#else
uint64_t HostBoundCopies() { return 0; }  // NVIDIA's driver: the device paces every copy
#endif

// One engine per direction: a short D2H copy enqueued after a long H2D copy, on another stream,
// does not wait for it, so it ends first on the device. The order of the two ends (event times)
// shows it rather than wall time: on a loaded host simgpu's copies become host-bound, and the wall
// times of one copy and of both at once converge whatever the engines do.
TEST_F(CopyTest, HostToDeviceAndDeviceToHostOverlap) {
  constexpr std::size_t kShortBytes = 1 * kMiB;
  LongCopy upload;
  PinnedBuffer download;
  DeviceBuffer down_source;
  Stream up;
  Stream down;
  Event up_enqueued;
  Event up_done;
  Event down_done;
  PHOS_ASSERT_CU(upload.Allocate());
  PHOS_ASSERT_CU(download.Allocate(kShortBytes));
  PHOS_ASSERT_CU(down_source.Allocate(kShortBytes));
  PHOS_ASSERT_CU(up.Create(CU_STREAM_NON_BLOCKING));
  PHOS_ASSERT_CU(down.Create(CU_STREAM_NON_BLOCKING));
  PHOS_ASSERT_CU(up_enqueued.Create(CU_EVENT_DEFAULT));
  PHOS_ASSERT_CU(up_done.Create(CU_EVENT_DEFAULT));
  PHOS_ASSERT_CU(down_done.Create(CU_EVENT_DEFAULT));

  PHOS_ASSERT_CU(cuEventRecord(up_enqueued.get(), up.get()));
  PHOS_ASSERT_CU(upload.Enqueue(up.get()));
  PHOS_ASSERT_CU(cuEventRecord(up_done.get(), up.get()));
  // The D2H copy starts once the H2D copy is on its way, not before.
  PHOS_ASSERT_CU(cuStreamWaitEvent(down.get(), up_enqueued.get(), 0));
  PHOS_ASSERT_CU(cuMemcpyDtoHAsync(download.get(), down_source.get(), kShortBytes, down.get()));
  PHOS_ASSERT_CU(cuEventRecord(down_done.get(), down.get()));
  PHOS_ASSERT_CU(cuStreamSynchronize(up.get()));
  PHOS_ASSERT_CU(cuStreamSynchronize(down.get()));

  float down_to_up_ms = 0;
  PHOS_ASSERT_CU(cuEventElapsedTime(&down_to_up_ms, down_done.get(), up_done.get()));
  EXPECT_GT(down_to_up_ms, 0.0f) << "the 1 MiB D2H copy ended " << -down_to_up_ms
                                 << " ms after the 256 MiB H2D copy: it waited for the H2D engine";
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

  // The fastest of several attempts each that the device model paced: a loaded host slows single
  // copies, not all of them, and a copy the host could not keep pace with shows the host's memcpy.
  constexpr int kAttempts = 2 * kRepetitions;
  auto fastest_paced = [&](const void* source, double* ms) -> CUresult {
    *ms = -1;
    for (int i = 0; i < kAttempts; ++i) {
      const uint64_t host_bound = HostBoundCopies();
      double attempt = 0;
      CUresult r = MinWallMs(1, [&] {
        if (CUresult c = cuMemcpyHtoD(device.get(), source, kCopyBytes); c != CUDA_SUCCESS) return c;
        return cuCtxSynchronize();
      }, &attempt);
      if (r != CUDA_SUCCESS) return r;
      if (HostBoundCopies() == host_bound && (*ms < 0 || attempt < *ms)) *ms = attempt;
    }
    return CUDA_SUCCESS;
  };
  double pinned_ms = 0;
  double pageable_ms = 0;
  PHOS_ASSERT_CU(fastest_paced(pinned.get(), &pinned_ms));
  PHOS_ASSERT_CU(fastest_paced(pageable.data(), &pageable_ms));
  if (pinned_ms < 0 || pageable_ms < 0) {
    GTEST_SKIP() << "the host could not keep pace with the modelled link in any attempt of "
                 << (pinned_ms < 0 ? "the pinned" : "the pageable")
                 << " copy: the comparison would measure the host's memcpy";
  }
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
