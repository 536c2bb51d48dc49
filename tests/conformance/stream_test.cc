// Streams: asynchrony and in-order execution. Remoted launches and copies return without waiting
// (docs/design.md D1), so phos depends on the host getting control back at once while the stream keeps
// its order, and on the legacy default stream's implicit synchronization rules.
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "conformance.h"
#include "kernel_names.h"

namespace phos::conformance {
namespace {

using StreamTest = DriverTest;

TEST_F(StreamTest, HostReturnsBeforeTheCopyIsDone) {
  LongCopy copy;
  PHOS_ASSERT_CU(copy.Allocate());
  Stream stream;
  PHOS_ASSERT_CU(stream.Create(CU_STREAM_NON_BLOCKING));
  PHOS_ASSERT_CU(copy.Enqueue(stream.get()));
  EXPECT_EQ(cuStreamQuery(stream.get()), CUDA_ERROR_NOT_READY);
  PHOS_ASSERT_CU(cuStreamSynchronize(stream.get()));
  EXPECT_EQ(cuStreamQuery(stream.get()), CUDA_SUCCESS);
}

TEST_F(StreamTest, SynchronizeMakesResultsVisible) {
  constexpr std::size_t kBytes = 32 * kMiB;
  PinnedBuffer source;
  PinnedBuffer back;
  DeviceBuffer device;
  Stream stream;
  PHOS_ASSERT_CU(source.Allocate(kBytes));
  PHOS_ASSERT_CU(back.Allocate(kBytes));
  PHOS_ASSERT_CU(device.Allocate(kBytes));
  PHOS_ASSERT_CU(stream.Create(CU_STREAM_NON_BLOCKING));
  FillPattern(source.get(), kBytes, 5);
  std::memset(back.get(), 0, kBytes);
  PHOS_ASSERT_CU(cuMemcpyHtoDAsync(device.get(), source.get(), kBytes, stream.get()));
  PHOS_ASSERT_CU(cuMemcpyDtoHAsync(back.get(), device.get(), kBytes, stream.get()));
  PHOS_ASSERT_CU(cuStreamSynchronize(stream.get()));
  EXPECT_EQ(FirstPatternMismatch(back.get(), kBytes, 5), kBytes);
}

TEST_F(StreamTest, DependentKernelsAndCopiesRunInOrder) {
  if (!KernelModule::Available()) GTEST_SKIP() << "this build has no conformance kernel module";
  KernelModule module;
  PHOS_ASSERT_CU(module.Load());
  CUfunction scale_add = nullptr;
  CUfunction vec_add = nullptr;
  PHOS_ASSERT_CU(module.Function(kScaleAdd, &scale_add));
  PHOS_ASSERT_CU(module.Function(kVecAdd, &vec_add));

  constexpr int kN = 1 << 20;
  constexpr std::size_t kBytes = kN * sizeof(float);
  PinnedBuffer input;
  PinnedBuffer output;
  DeviceBuffer x;
  DeviceBuffer y;
  DeviceBuffer z;
  Stream stream;
  PHOS_ASSERT_CU(input.Allocate(kBytes));
  PHOS_ASSERT_CU(output.Allocate(kBytes));
  PHOS_ASSERT_CU(x.Allocate(kBytes));
  PHOS_ASSERT_CU(y.Allocate(kBytes));
  PHOS_ASSERT_CU(z.Allocate(kBytes));
  PHOS_ASSERT_CU(stream.Create(CU_STREAM_NON_BLOCKING));
  auto* in = static_cast<float*>(input.get());
  for (int i = 0; i < kN; ++i) in[i] = static_cast<float>(i % 1000);

  // x = 2*in + 1; y = x; y = 3*y; z = x + y = 4*(2*in + 1). Each step reads the previous one's
  // output, so any reordering shows in z.
  CUdeviceptr x_ptr = x.get();
  CUdeviceptr y_ptr = y.get();
  CUdeviceptr z_ptr = z.get();
  int n = kN;
  float two = 2, one = 1, three = 3, zero = 0;
  void* first_args[] = {&x_ptr, &two, &one, &n};
  void* third_args[] = {&y_ptr, &three, &zero, &n};
  void* add_args[] = {&x_ptr, &y_ptr, &z_ptr, &n};
  const CUstream s = stream.get();
  PHOS_ASSERT_CU(cuMemcpyHtoDAsync(x_ptr, input.get(), kBytes, s));
  PHOS_ASSERT_CU(cuLaunchKernel(scale_add, 256, 1, 1, 256, 1, 1, 0, s, first_args, nullptr));
  PHOS_ASSERT_CU(cuMemcpyDtoDAsync(y_ptr, x_ptr, kBytes, s));
  PHOS_ASSERT_CU(cuLaunchKernel(scale_add, 256, 1, 1, 256, 1, 1, 0, s, third_args, nullptr));
  PHOS_ASSERT_CU(cuLaunchKernel(vec_add, 128, 1, 1, 128, 1, 1, 0, s, add_args, nullptr));
  PHOS_ASSERT_CU(cuMemcpyDtoHAsync(output.get(), z_ptr, kBytes, s));
  PHOS_ASSERT_CU(cuStreamSynchronize(s));

  const auto* out = static_cast<const float*>(output.get());
  int bad = 0;
  for (int i = 0; i < kN; ++i) {
    const float expected = 4 * (2 * static_cast<float>(i % 1000) + 1);
    if (out[i] != expected && bad++ < 5) {
      ADD_FAILURE() << "z[" << i << "] = " << out[i] << ", want " << expected;
    }
  }
  EXPECT_EQ(bad, 0);
}

struct HostFnLog {
  std::mutex mutex;
  std::vector<int> order;
  const unsigned int* watched = nullptr;
  unsigned int seen = 0;
  std::atomic<bool> slow_done{false};
};

struct HostFnCall {
  HostFnLog* log;
  int id;
};

void CUDA_CB RecordCall(void* user_data) {
  auto* call = static_cast<HostFnCall*>(user_data);
  std::lock_guard<std::mutex> lock(call->log->mutex);
  call->log->order.push_back(call->id);
  if (call->log->watched != nullptr) call->log->seen = *call->log->watched;
}

void CUDA_CB SlowCall(void* user_data) {
  auto* log = static_cast<HostFnLog*>(user_data);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  log->slow_done = true;
}

// cuLaunchHostFunc: "The function will be called after currently enqueued work and will block
// work added after it."
TEST_F(StreamTest, HostFunctionsRunInStreamOrder) {
  LongCopy copy;
  PHOS_ASSERT_CU(copy.Allocate());
  Stream stream;
  PinnedBuffer word;
  DeviceBuffer device_word;
  Event after;
  PHOS_ASSERT_CU(stream.Create(CU_STREAM_NON_BLOCKING));
  PHOS_ASSERT_CU(word.Allocate(sizeof(unsigned int)));
  PHOS_ASSERT_CU(device_word.Allocate(sizeof(unsigned int)));
  PHOS_ASSERT_CU(after.Create(CU_EVENT_DISABLE_TIMING));
  *static_cast<unsigned int*>(word.get()) = 0;
  // cuMemsetD32 on device memory is only queued, on the legacy stream, which the non-blocking
  // stream below does not wait for: finish it first.
  PHOS_ASSERT_CU(cuMemsetD32(device_word.get(), 0xabcd1234u, 1));
  PHOS_ASSERT_CU(cuCtxSynchronize());

  HostFnLog log;
  HostFnCall first{&log, 1};
  HostFnCall second{&log, 2};
  HostFnCall third{&log, 3};
  const CUstream s = stream.get();
  PHOS_ASSERT_CU(copy.Enqueue(s));
  PHOS_ASSERT_CU(cuLaunchHostFunc(s, RecordCall, &first));
  {
    // The long copy is still running, so the function cannot have been called yet.
    std::lock_guard<std::mutex> lock(log.mutex);
    EXPECT_TRUE(log.order.empty());
  }
  PHOS_ASSERT_CU(cuMemcpyDtoHAsync(word.get(), device_word.get(), sizeof(unsigned int), s));
  {
    std::lock_guard<std::mutex> lock(log.mutex);
    log.watched = static_cast<const unsigned int*>(word.get());
  }
  PHOS_ASSERT_CU(cuLaunchHostFunc(s, RecordCall, &second));
  PHOS_ASSERT_CU(cuLaunchHostFunc(s, SlowCall, &log));
  PHOS_ASSERT_CU(cuLaunchHostFunc(s, RecordCall, &third));
  PHOS_ASSERT_CU(cuEventRecord(after.get(), s));
  PHOS_ASSERT_CU(cuEventSynchronize(after.get()));

  // Work queued after a host function waited for it to return.
  EXPECT_TRUE(log.slow_done);
  std::lock_guard<std::mutex> lock(log.mutex);
  EXPECT_EQ(log.order, (std::vector<int>{1, 2, 3}));
  // The second function ran after the copy queued before it had landed.
  EXPECT_EQ(log.seen, 0xabcd1234u);
}

// The legacy default stream waits for all prior work in blocking streams of its context, and
// blocking streams wait for prior work in the legacy stream (Programming Guide, "Default Stream";
// driver API "Stream synchronization behavior").
TEST_F(StreamTest, LegacyStreamWaitsForBlockingStreams) {
  LongCopy copy;
  PHOS_ASSERT_CU(copy.Allocate());
  Stream blocking;
  Event marker;
  PHOS_ASSERT_CU(blocking.Create(CU_STREAM_DEFAULT));
  PHOS_ASSERT_CU(marker.Create(CU_EVENT_DISABLE_TIMING));
  PHOS_ASSERT_CU(copy.Enqueue(blocking.get()));
  PHOS_ASSERT_CU(cuEventRecord(marker.get(), CU_STREAM_LEGACY));
  PHOS_ASSERT_CU(cuEventSynchronize(marker.get()));
  EXPECT_EQ(cuStreamQuery(blocking.get()), CUDA_SUCCESS);
}

TEST_F(StreamTest, BlockingStreamsWaitForTheLegacyStream) {
  LongCopy copy;
  PHOS_ASSERT_CU(copy.Allocate());
  Stream blocking;
  Event marker;
  PHOS_ASSERT_CU(blocking.Create(CU_STREAM_DEFAULT));
  PHOS_ASSERT_CU(marker.Create(CU_EVENT_DISABLE_TIMING));
  PHOS_ASSERT_CU(copy.Enqueue(CU_STREAM_LEGACY));
  PHOS_ASSERT_CU(cuEventRecord(marker.get(), blocking.get()));
  PHOS_ASSERT_CU(cuEventSynchronize(marker.get()));
  EXPECT_EQ(cuStreamQuery(CU_STREAM_LEGACY), CUDA_SUCCESS);
}

// The null stream handle means the legacy stream in code built without per-thread default
// streams, as this suite is.
TEST_F(StreamTest, NullStreamIsTheLegacyStream) {
  LongCopy copy;
  PHOS_ASSERT_CU(copy.Allocate());
  Stream blocking;
  Event marker;
  PHOS_ASSERT_CU(blocking.Create(CU_STREAM_DEFAULT));
  PHOS_ASSERT_CU(marker.Create(CU_EVENT_DISABLE_TIMING));
  PHOS_ASSERT_CU(copy.Enqueue(blocking.get()));
  PHOS_ASSERT_CU(cuEventRecord(marker.get(), nullptr));
  PHOS_ASSERT_CU(cuEventSynchronize(marker.get()));
  EXPECT_EQ(cuStreamQuery(blocking.get()), CUDA_SUCCESS);
}

// CU_STREAM_NON_BLOCKING: "work running in the created stream may run concurrently with work in
// stream 0 (the NULL stream) ... no implicit synchronization with stream 0". phos's background
// loader uses such streams so that it never serialises with an application's legacy stream.
TEST_F(StreamTest, NonBlockingStreamDoesNotSynchronizeWithTheLegacyStream) {
  LongCopy copy;
  PHOS_ASSERT_CU(copy.Allocate());
  Stream non_blocking;
  Event marker;
  PHOS_ASSERT_CU(non_blocking.Create(CU_STREAM_NON_BLOCKING));
  PHOS_ASSERT_CU(marker.Create(CU_EVENT_DISABLE_TIMING));
  PHOS_ASSERT_CU(copy.Enqueue(non_blocking.get()));
  PHOS_ASSERT_CU(cuEventRecord(marker.get(), CU_STREAM_LEGACY));
  PHOS_ASSERT_CU(cuEventSynchronize(marker.get()));
  // The legacy stream's marker completed while the long copy was still running.
  EXPECT_EQ(cuStreamQuery(non_blocking.get()), CUDA_ERROR_NOT_READY);
  PHOS_ASSERT_CU(cuStreamSynchronize(non_blocking.get()));

  // Nor does the non-blocking stream wait for the legacy stream.
  Event second_marker;
  PHOS_ASSERT_CU(second_marker.Create(CU_EVENT_DISABLE_TIMING));
  PHOS_ASSERT_CU(copy.Enqueue(CU_STREAM_LEGACY));
  PHOS_ASSERT_CU(cuEventRecord(second_marker.get(), non_blocking.get()));
  PHOS_ASSERT_CU(cuEventSynchronize(second_marker.get()));
  EXPECT_EQ(cuStreamQuery(CU_STREAM_LEGACY), CUDA_ERROR_NOT_READY);
  PHOS_ASSERT_CU(cuStreamSynchronize(CU_STREAM_LEGACY));
}

TEST_F(StreamTest, DestroyingABusyStreamReturnsAtOnceAndWorkCompletes) {
  LongCopy copy;
  PHOS_ASSERT_CU(copy.Allocate());
  CUstream stream = nullptr;
  PHOS_ASSERT_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  PHOS_ASSERT_CU(copy.Enqueue(stream));
  // cuStreamDestroy: "the function will return immediately and the resources ... will be
  // released automatically once the device has completed all work".
  PHOS_ASSERT_CU(cuStreamDestroy(stream));
  PHOS_EXPECT_CU(cuCtxSynchronize());
}

}  // namespace
}  // namespace phos::conformance
