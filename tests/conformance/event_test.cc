// Events: completion tracking, cross-stream dependencies and device timing. A restored instance's
// launches wait on the GPU for the ready events of the buffers they read (docs/design.md D7), and the
// per-stage timings phos reports come from event pairs.
#include <vector>

#include "conformance.h"

namespace phos::conformance {
namespace {

using EventTest = DriverTest;

TEST_F(EventTest, RecordQuerySynchronize) {
  LongCopy copy;
  Stream stream;
  Event event;
  PHOS_ASSERT_CU(copy.Allocate());
  PHOS_ASSERT_CU(stream.Create(CU_STREAM_NON_BLOCKING));
  PHOS_ASSERT_CU(event.Create(CU_EVENT_DEFAULT));
  PHOS_ASSERT_CU(copy.Enqueue(stream.get()));
  PHOS_ASSERT_CU(cuEventRecord(event.get(), stream.get()));
  EXPECT_EQ(cuEventQuery(event.get()), CUDA_ERROR_NOT_READY);
  PHOS_ASSERT_CU(cuEventSynchronize(event.get()));
  EXPECT_EQ(cuEventQuery(event.get()), CUDA_SUCCESS);
  // Everything before the record is done once the event is.
  EXPECT_EQ(cuStreamQuery(stream.get()), CUDA_SUCCESS);
}

// cuEventRecord: "Before the first call to cuEventRecord(), an event represents an empty set of
// work, so for example cuEventQuery() would return CUDA_SUCCESS."
TEST_F(EventTest, UnrecordedEventIsComplete) {
  Event event;
  PHOS_ASSERT_CU(event.Create(CU_EVENT_DEFAULT));
  EXPECT_EQ(cuEventQuery(event.get()), CUDA_SUCCESS);
  PHOS_EXPECT_CU(cuEventSynchronize(event.get()));
  // And waiting on it does not hold a stream back.
  Stream stream;
  PHOS_ASSERT_CU(stream.Create(CU_STREAM_NON_BLOCKING));
  PHOS_EXPECT_CU(cuStreamWaitEvent(stream.get(), event.get(), 0));
  PHOS_EXPECT_CU(cuStreamSynchronize(stream.get()));
}

TEST_F(EventTest, RecordingAgainReplacesTheCapturedWork) {
  LongCopy copy;
  Stream busy;
  Stream idle;
  Event event;
  PHOS_ASSERT_CU(copy.Allocate());
  PHOS_ASSERT_CU(busy.Create(CU_STREAM_NON_BLOCKING));
  PHOS_ASSERT_CU(idle.Create(CU_STREAM_NON_BLOCKING));
  PHOS_ASSERT_CU(event.Create(CU_EVENT_DISABLE_TIMING));
  PHOS_ASSERT_CU(copy.Enqueue(busy.get()));
  PHOS_ASSERT_CU(cuEventRecord(event.get(), busy.get()));
  EXPECT_EQ(cuEventQuery(event.get()), CUDA_ERROR_NOT_READY);
  PHOS_ASSERT_CU(cuEventRecord(event.get(), idle.get()));
  PHOS_ASSERT_CU(cuEventSynchronize(event.get()));
  EXPECT_EQ(cuStreamQuery(busy.get()), CUDA_ERROR_NOT_READY);
  PHOS_EXPECT_CU(cuStreamSynchronize(busy.get()));
}

// Stream B copies the tail of a buffer that stream A is still filling; the wait on A's event is
// the only thing that orders the two, and the data shows whether it did.
TEST_F(EventTest, StreamWaitEventOrdersWorkAcrossStreams) {
  constexpr std::size_t kTail = 64 * kKiB;
  LongCopy copy;
  Stream producer;
  Stream consumer;
  Event filled;
  PinnedBuffer back;
  DeviceBuffer tail;
  PHOS_ASSERT_CU(copy.Allocate());
  PHOS_ASSERT_CU(producer.Create(CU_STREAM_NON_BLOCKING));
  PHOS_ASSERT_CU(consumer.Create(CU_STREAM_NON_BLOCKING));
  PHOS_ASSERT_CU(filled.Create(CU_EVENT_DISABLE_TIMING));
  PHOS_ASSERT_CU(back.Allocate(kTail));
  PHOS_ASSERT_CU(tail.Allocate(kTail));
  FillPattern(copy.source(), kLongCopyBytes, 61);

  // The zeroing goes on the producer's stream too: a plain cuMemsetD8 would be queued on the
  // legacy stream, which non-blocking streams do not wait for.
  PHOS_ASSERT_CU(cuMemsetD8Async(copy.destination(), 0, kLongCopyBytes, producer.get()));
  PHOS_ASSERT_CU(copy.Enqueue(producer.get()));
  PHOS_ASSERT_CU(cuEventRecord(filled.get(), producer.get()));
  PHOS_ASSERT_CU(cuStreamWaitEvent(consumer.get(), filled.get(), 0));
  const std::size_t offset = kLongCopyBytes - kTail;
  PHOS_ASSERT_CU(cuMemcpyDtoDAsync(tail.get(), copy.destination() + offset, kTail, consumer.get()));
  PHOS_ASSERT_CU(cuMemcpyDtoHAsync(back.get(), tail.get(), kTail, consumer.get()));
  PHOS_ASSERT_CU(cuStreamSynchronize(consumer.get()));

  const auto* bytes = static_cast<const unsigned char*>(back.get());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < kTail; ++i) bad += bytes[i] != PatternByte(offset + i, 61);
  EXPECT_EQ(bad, 0u) << "the consumer read the tail before the producer wrote it";
}

// cuStreamWaitEvent: "hEvent may be from a different context or device than hStream." A loader
// working in its own context can gate an instance's stream. The buffer is VMM memory, which is
// mapped for the device rather than for one context, as phos's instance buffers are.
TEST_F(EventTest, StreamWaitsForAnEventFromAnotherContext) {
  constexpr std::size_t kTail = 64 * kKiB;
  std::size_t granularity = 0;
  PHOS_ASSERT_CU(MinimumGranularity(device_, &granularity));
  const std::size_t bytes = (kLongCopyBytes + granularity - 1) / granularity * granularity;
  AddressRange range;
  PHOS_ASSERT_CU(range.Reserve(bytes, 0));
  const CUmemAllocationProp prop = DeviceAllocationProp(device_);
  CUmemGenericAllocationHandle handle = 0;
  PHOS_ASSERT_CU(cuMemCreate(&handle, bytes, &prop, 0));
  PHOS_ASSERT_CU(MapReadWrite(range.get(), bytes, handle, device_));
  // Host memory from cuMemHostAlloc is accessible to every context under unified addressing.
  PinnedBuffer source;
  PinnedBuffer back;
  Stream consumer;
  PHOS_ASSERT_CU(source.Allocate(kLongCopyBytes));
  PHOS_ASSERT_CU(back.Allocate(kTail));
  PHOS_ASSERT_CU(consumer.Create(CU_STREAM_NON_BLOCKING));
  FillPattern(source.get(), kLongCopyBytes, 81);

  CUcontext loader = nullptr;
  CUstream loader_stream = nullptr;
  CUevent loaded = nullptr;
  PHOS_ASSERT_CU(cuCtxCreate(&loader, nullptr, 0, device_));
  PHOS_ASSERT_CU(cuStreamCreate(&loader_stream, CU_STREAM_NON_BLOCKING));
  PHOS_ASSERT_CU(cuEventCreate(&loaded, CU_EVENT_DISABLE_TIMING));
  PHOS_ASSERT_CU(cuMemsetD8Async(range.get(), 0, kLongCopyBytes, loader_stream));
  PHOS_ASSERT_CU(cuMemcpyHtoDAsync(range.get(), source.get(), kLongCopyBytes, loader_stream));
  PHOS_ASSERT_CU(cuEventRecord(loaded, loader_stream));
  CUcontext popped = nullptr;
  PHOS_ASSERT_CU(cuCtxPopCurrent(&popped));

  PHOS_ASSERT_CU(cuStreamWaitEvent(consumer.get(), loaded, 0));
  const std::size_t offset = kLongCopyBytes - kTail;
  PHOS_ASSERT_CU(cuMemcpyDtoHAsync(back.get(), range.get() + offset, kTail, consumer.get()));
  PHOS_ASSERT_CU(cuStreamSynchronize(consumer.get()));
  const auto* data = static_cast<const unsigned char*>(back.get());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < kTail; ++i) bad += data[i] != PatternByte(offset + i, 81);
  EXPECT_EQ(bad, 0u) << "the consumer read the tail before the other context's copy wrote it";

  PHOS_ASSERT_CU(cuCtxPushCurrent(loader));
  PHOS_EXPECT_CU(cuStreamSynchronize(loader_stream));
  PHOS_EXPECT_CU(cuEventDestroy(loaded));
  PHOS_EXPECT_CU(cuStreamDestroy(loader_stream));
  PHOS_EXPECT_CU(cuCtxDestroy(loader));
  PHOS_EXPECT_CU(cuMemUnmap(range.get(), bytes));
  PHOS_EXPECT_CU(cuMemRelease(handle));
}

TEST_F(EventTest, ElapsedTimeIsPositiveAndTracksCopySize) {
  constexpr std::size_t kSmall = 16 * kMiB;
  constexpr std::size_t kLarge = 64 * kMiB;
  PinnedBuffer host;
  DeviceBuffer device;
  Stream stream;
  EventTimer timer;
  PHOS_ASSERT_CU(host.Allocate(kLarge));
  PHOS_ASSERT_CU(device.Allocate(kLarge));
  PHOS_ASSERT_CU(stream.Create(CU_STREAM_NON_BLOCKING));
  PHOS_ASSERT_CU(timer.Create());

  // One untimed copy first, so that first-touch page faults on either side are not timed (a
  // simulated device may back memory lazily). Then the fastest of a few repetitions: a copy the
  // host slowed down (a loaded machine) is not what the device model says.
  FillPattern(host.get(), kLarge, 1);
  PHOS_ASSERT_CU(cuMemcpyHtoD(device.get(), host.get(), kLarge));
  auto time_copy = [&](std::size_t bytes, float* device_ms, double* wall_ms) {
    for (int i = 0; i < 3; ++i) {
      WallTimer wall;
      PHOS_ASSERT_CU(timer.Start(stream.get()));
      PHOS_ASSERT_CU(cuMemcpyHtoDAsync(device.get(), host.get(), bytes, stream.get()));
      PHOS_ASSERT_CU(timer.Stop(stream.get()));
      float ms = 0;
      PHOS_ASSERT_CU(timer.ElapsedMs(&ms));
      const double host_ms = wall.ElapsedMs();
      if (i == 0 || ms < *device_ms) {
        *device_ms = ms;
        *wall_ms = host_ms;
      }
    }
  };
  float small_ms = 0;
  float large_ms = 0;
  double small_wall = 0;
  double large_wall = 0;
  time_copy(kSmall, &small_ms, &small_wall);
  time_copy(kLarge, &large_ms, &large_wall);

  SCOPED_TRACE(::testing::Message() << "16 MiB: " << small_ms << " ms device, " << small_wall
                                    << " ms host; 64 MiB: " << large_ms << " ms device, " << large_wall
                                    << " ms host");
  EXPECT_GT(small_ms, 0.0f);
  EXPECT_GT(large_ms, small_ms);
  // Copy time is bandwidth-bound: four times the bytes take about four times as long.
  EXPECT_GT(large_ms / small_ms, 2.0f);
  EXPECT_LT(large_ms / small_ms, 8.0f);
  // The device cannot have spent longer than the host waited for it.
  EXPECT_LE(large_ms, large_wall * 1.05 + 0.5);
  // bytes / time is a plausible host link bandwidth, from PCIe 3.0 x8 (~6 GB/s) to NVLink-C2C
  // (~450 GB/s), with a wide margin either side; simgpu's ci profile models 25 GB/s.
  const double gb_per_s = static_cast<double>(kLarge) / (large_ms * 1e6);
  EXPECT_GT(gb_per_s, 2.0);
  EXPECT_LT(gb_per_s, 1000.0);
}

// Times from one stream's events add up: start-to-middle plus middle-to-end is start-to-end.
// (Device time is not compared with the host clock beyond "not longer": simgpu's device clock runs
// in modelled time, which a time scale above 1 slows down relative to the host's.)
TEST_F(EventTest, ElapsedTimesOfConsecutiveIntervalsAddUp) {
  constexpr std::size_t kBytes = 64 * kMiB;
  PinnedBuffer host;
  DeviceBuffer device;
  Stream stream;
  Event start;
  Event middle;
  Event end;
  PHOS_ASSERT_CU(host.Allocate(kBytes));
  PHOS_ASSERT_CU(device.Allocate(kBytes));
  PHOS_ASSERT_CU(stream.Create(CU_STREAM_NON_BLOCKING));
  PHOS_ASSERT_CU(start.Create(CU_EVENT_DEFAULT));
  PHOS_ASSERT_CU(middle.Create(CU_EVENT_DEFAULT));
  PHOS_ASSERT_CU(end.Create(CU_EVENT_DEFAULT));
  const CUstream s = stream.get();
  PHOS_ASSERT_CU(cuEventRecord(start.get(), s));
  PHOS_ASSERT_CU(cuMemcpyHtoDAsync(device.get(), host.get(), kBytes, s));
  PHOS_ASSERT_CU(cuEventRecord(middle.get(), s));
  PHOS_ASSERT_CU(cuMemcpyDtoHAsync(host.get(), device.get(), kBytes, s));
  PHOS_ASSERT_CU(cuEventRecord(end.get(), s));
  PHOS_ASSERT_CU(cuEventSynchronize(end.get()));
  float first = 0;
  float second = 0;
  float whole = 0;
  PHOS_ASSERT_CU(cuEventElapsedTime(&first, start.get(), middle.get()));
  PHOS_ASSERT_CU(cuEventElapsedTime(&second, middle.get(), end.get()));
  PHOS_ASSERT_CU(cuEventElapsedTime(&whole, start.get(), end.get()));
  EXPECT_GT(first, 0.0f);
  EXPECT_GT(second, 0.0f);
  EXPECT_NEAR(first + second, whole, 0.02f * whole + 0.01f);
}

// cuEventElapsedTime: "If either event was created with the CU_EVENT_DISABLE_TIMING flag, then
// this function will return CUDA_ERROR_INVALID_HANDLE."
TEST_F(EventTest, ElapsedTimeWithATimingDisabledEventIsInvalidHandle) {
  Event timed;
  Event untimed;
  PHOS_ASSERT_CU(timed.Create(CU_EVENT_DEFAULT));
  PHOS_ASSERT_CU(untimed.Create(CU_EVENT_DISABLE_TIMING));
  PHOS_ASSERT_CU(cuEventRecord(timed.get(), nullptr));
  PHOS_ASSERT_CU(cuEventRecord(untimed.get(), nullptr));
  PHOS_ASSERT_CU(cuCtxSynchronize());
  float ms = 0;
  EXPECT_EQ(cuEventElapsedTime(&ms, timed.get(), untimed.get()), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuEventElapsedTime(&ms, untimed.get(), timed.get()), CUDA_ERROR_INVALID_HANDLE);
}

// cuEventElapsedTime: "If cuEventRecord() has not been called on either event then
// CUDA_ERROR_INVALID_HANDLE is returned."
TEST_F(EventTest, ElapsedTimeOfAnUnrecordedEventIsInvalidHandle) {
  Event recorded;
  Event unrecorded;
  PHOS_ASSERT_CU(recorded.Create(CU_EVENT_DEFAULT));
  PHOS_ASSERT_CU(unrecorded.Create(CU_EVENT_DEFAULT));
  PHOS_ASSERT_CU(cuEventRecord(recorded.get(), nullptr));
  PHOS_ASSERT_CU(cuEventSynchronize(recorded.get()));
  float ms = 0;
  EXPECT_EQ(cuEventElapsedTime(&ms, recorded.get(), unrecorded.get()), CUDA_ERROR_INVALID_HANDLE);
}

// cuEventElapsedTime: "If cuEventRecord() has been called on both events but one or both of them
// has not yet been completed ... CUDA_ERROR_NOT_READY is returned."
TEST_F(EventTest, ElapsedTimeBeforeCompletionIsNotReady) {
  LongCopy copy;
  Stream stream;
  Event start;
  Event stop;
  PHOS_ASSERT_CU(copy.Allocate());
  PHOS_ASSERT_CU(stream.Create(CU_STREAM_NON_BLOCKING));
  PHOS_ASSERT_CU(start.Create(CU_EVENT_DEFAULT));
  PHOS_ASSERT_CU(stop.Create(CU_EVENT_DEFAULT));
  PHOS_ASSERT_CU(cuEventRecord(start.get(), stream.get()));
  PHOS_ASSERT_CU(copy.Enqueue(stream.get()));
  PHOS_ASSERT_CU(cuEventRecord(stop.get(), stream.get()));
  float ms = 0;
  EXPECT_EQ(cuEventElapsedTime(&ms, start.get(), stop.get()), CUDA_ERROR_NOT_READY);
  PHOS_ASSERT_CU(cuEventSynchronize(stop.get()));
  PHOS_EXPECT_CU(cuEventElapsedTime(&ms, start.get(), stop.get()));
  EXPECT_GT(ms, 0.0f);
}

}  // namespace
}  // namespace phos::conformance
