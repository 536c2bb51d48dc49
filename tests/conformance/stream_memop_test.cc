// Stream priorities and stream memory operations. phosd creates streams at the priority a function
// asks for and gates a stream behind each host callback with cuStreamWaitValue32 on a word that
// cuStreamWriteValue32 on another stream releases (docs/decisions.md): a wait must hold up its own
// stream, and only it, until the word satisfies it, whichever stream writes the word.
#include <cstdint>

#include "conformance.h"

namespace phos::conformance {
namespace {

using StreamMemOpTest = DriverTest;

// cuStreamCreateWithPriority: "If the specified priority is outside the numerical range returned
// by cuCtxGetStreamPriorityRange, it will automatically be clamped to the lowest or the highest
// number in the range." Lower numbers are higher priorities; 0 is the default.
TEST_F(StreamMemOpTest, PrioritiesAreClampedToTheContextsRange) {
  int least = 1, greatest = 1;
  PHOS_ASSERT_CU(cuCtxGetStreamPriorityRange(&least, &greatest));
  EXPECT_EQ(least, 0);
  EXPECT_LT(greatest, least) << "compute capability 7.0 and later have several priorities";
  PHOS_EXPECT_CU(cuCtxGetStreamPriorityRange(nullptr, &greatest));

  CUstream high = nullptr, low = nullptr, beyond = nullptr;
  PHOS_ASSERT_CU(cuStreamCreateWithPriority(&high, CU_STREAM_NON_BLOCKING, greatest));
  PHOS_ASSERT_CU(cuStreamCreateWithPriority(&low, CU_STREAM_DEFAULT, least + 7));
  PHOS_ASSERT_CU(cuStreamCreateWithPriority(&beyond, CU_STREAM_NON_BLOCKING, greatest - 100));
  int priority = 1;
  unsigned flags = 7;
  PHOS_EXPECT_CU(cuStreamGetPriority(high, &priority));
  EXPECT_EQ(priority, greatest);
  PHOS_EXPECT_CU(cuStreamGetFlags(high, &flags));
  EXPECT_EQ(flags, static_cast<unsigned>(CU_STREAM_NON_BLOCKING));
  PHOS_EXPECT_CU(cuStreamGetPriority(low, &priority));
  EXPECT_EQ(priority, least);
  PHOS_EXPECT_CU(cuStreamGetFlags(low, &flags));
  EXPECT_EQ(flags, static_cast<unsigned>(CU_STREAM_DEFAULT));
  PHOS_EXPECT_CU(cuStreamGetPriority(beyond, &priority));
  EXPECT_EQ(priority, greatest);
  // The legacy stream has the default priority.
  PHOS_EXPECT_CU(cuStreamGetPriority(nullptr, &priority));
  EXPECT_EQ(priority, 0);
  EXPECT_EQ(cuStreamCreateWithPriority(&beyond, 0x10, 0), CUDA_ERROR_INVALID_VALUE);
  for (CUstream s : {high, low, beyond}) PHOS_EXPECT_CU(cuStreamDestroy(s));
}

// cuStreamWaitValue32: "Enqueues a synchronization of the stream on the given memory location.
// Work ordered after the operation will block until the given condition on the memory is
// satisfied." A write from another stream releases it; the waiting stream's later work then runs.
TEST_F(StreamMemOpTest, WaitHoldsItsStreamUntilAnotherStreamWrites) {
  DeviceBuffer word, out;
  PHOS_ASSERT_CU(word.Allocate(sizeof(uint32_t)));
  PHOS_ASSERT_CU(out.Allocate(sizeof(uint32_t)));
  PHOS_ASSERT_CU(cuMemsetD32(word.get(), 0, 1));
  PHOS_ASSERT_CU(cuMemsetD32(out.get(), 0, 1));
  PHOS_ASSERT_CU(cuCtxSynchronize());
  Stream waiting, writing;
  PHOS_ASSERT_CU(waiting.Create(CU_STREAM_NON_BLOCKING));
  PHOS_ASSERT_CU(writing.Create(CU_STREAM_NON_BLOCKING));

  PHOS_ASSERT_CU(cuStreamWaitValue32(waiting.get(), word.get(), 1, CU_STREAM_WAIT_VALUE_GEQ));
  PHOS_ASSERT_CU(cuMemsetD32Async(out.get(), 7, 1, waiting.get()));
  // Nothing writes the word yet, so the wait cannot have completed, nor the memset behind it.
  EXPECT_EQ(cuStreamQuery(waiting.get()), CUDA_ERROR_NOT_READY);
  // Other streams are not held up.
  PHOS_EXPECT_CU(cuStreamSynchronize(writing.get()));

  PHOS_ASSERT_CU(cuStreamWriteValue32(writing.get(), word.get(), 1, CU_STREAM_WRITE_VALUE_DEFAULT));
  PHOS_ASSERT_CU(cuStreamSynchronize(waiting.get()));
  uint32_t got = 0;
  PHOS_ASSERT_CU(cuMemcpyDtoH(&got, out.get(), sizeof(got)));
  EXPECT_EQ(got, 7u);
  PHOS_ASSERT_CU(cuMemcpyDtoH(&got, word.get(), sizeof(got)));
  EXPECT_EQ(got, 1u);
}

// CU_STREAM_WAIT_VALUE_GEQ: "Wait until (int32_t)(*addr - value) >= 0": a later generation
// releases an earlier one's wait, across the 32-bit wrap too.
TEST_F(StreamMemOpTest, GreaterOrEqualIsWrapAroundAware) {
  DeviceBuffer word;
  PHOS_ASSERT_CU(word.Allocate(sizeof(uint32_t)));
  PHOS_ASSERT_CU(cuMemsetD32(word.get(), 0xfffffffeu, 1));
  PHOS_ASSERT_CU(cuCtxSynchronize());
  Stream waiting, writing;
  PHOS_ASSERT_CU(waiting.Create(CU_STREAM_NON_BLOCKING));
  PHOS_ASSERT_CU(writing.Create(CU_STREAM_NON_BLOCKING));
  // 0xfffffffe - 1 is negative as an int32_t: not yet.
  PHOS_ASSERT_CU(cuStreamWaitValue32(waiting.get(), word.get(), 1, CU_STREAM_WAIT_VALUE_GEQ));
  EXPECT_EQ(cuStreamQuery(waiting.get()), CUDA_ERROR_NOT_READY);
  PHOS_ASSERT_CU(cuStreamWriteValue32(writing.get(), word.get(), 3, CU_STREAM_WRITE_VALUE_DEFAULT));
  PHOS_ASSERT_CU(cuStreamSynchronize(waiting.get()));
  // A wait the word already satisfies completes without any write.
  PHOS_ASSERT_CU(cuStreamWaitValue32(waiting.get(), word.get(), 2, CU_STREAM_WAIT_VALUE_GEQ));
  PHOS_ASSERT_CU(cuStreamSynchronize(waiting.get()));
}

// CU_STREAM_WAIT_VALUE_EQ, _AND and _NOR, and the 64-bit forms.
TEST_F(StreamMemOpTest, EqualAndOrNorConditions) {
  DeviceBuffer words;
  PHOS_ASSERT_CU(words.Allocate(2 * sizeof(uint64_t)));
  PHOS_ASSERT_CU(cuMemsetD32(words.get(), 0, 4));
  PHOS_ASSERT_CU(cuCtxSynchronize());
  const CUdeviceptr w32 = words.get();
  const CUdeviceptr w64 = words.get() + sizeof(uint64_t);
  Stream waiting, writing;
  PHOS_ASSERT_CU(waiting.Create(CU_STREAM_NON_BLOCKING));
  PHOS_ASSERT_CU(writing.Create(CU_STREAM_NON_BLOCKING));

  PHOS_ASSERT_CU(cuStreamWaitValue32(waiting.get(), w32, 6, CU_STREAM_WAIT_VALUE_EQ));
  PHOS_ASSERT_CU(cuStreamWriteValue32(writing.get(), w32, 7, CU_STREAM_WRITE_VALUE_DEFAULT));
  PHOS_ASSERT_CU(cuStreamSynchronize(writing.get()));
  EXPECT_EQ(cuStreamQuery(waiting.get()), CUDA_ERROR_NOT_READY) << "7 is not 6";
  PHOS_ASSERT_CU(cuStreamWriteValue32(writing.get(), w32, 6, CU_STREAM_WRITE_VALUE_DEFAULT));
  PHOS_ASSERT_CU(cuStreamSynchronize(waiting.get()));

  // (6 & 1) == 0: not yet; (7 & 1) != 0.
  PHOS_ASSERT_CU(cuStreamWaitValue32(waiting.get(), w32, 1, CU_STREAM_WAIT_VALUE_AND));
  EXPECT_EQ(cuStreamQuery(waiting.get()), CUDA_ERROR_NOT_READY);
  PHOS_ASSERT_CU(cuStreamWriteValue32(writing.get(), w32, 7, CU_STREAM_WRITE_VALUE_DEFAULT));
  PHOS_ASSERT_CU(cuStreamSynchronize(waiting.get()));

  // ~(0xffffffff | 0) == 0: not yet; ~(0xfffffff0 | 0) != 0.
  PHOS_ASSERT_CU(cuStreamWriteValue32(writing.get(), w32, 0xffffffffu, CU_STREAM_WRITE_VALUE_DEFAULT));
  PHOS_ASSERT_CU(cuStreamSynchronize(writing.get()));
  PHOS_ASSERT_CU(cuStreamWaitValue32(waiting.get(), w32, 0, CU_STREAM_WAIT_VALUE_NOR));
  EXPECT_EQ(cuStreamQuery(waiting.get()), CUDA_ERROR_NOT_READY);
  PHOS_ASSERT_CU(cuStreamWriteValue32(writing.get(), w32, 0xfffffff0u, CU_STREAM_WRITE_VALUE_DEFAULT));
  PHOS_ASSERT_CU(cuStreamSynchronize(waiting.get()));

  const uint64_t big = 0x123456789ull;
  PHOS_ASSERT_CU(cuStreamWaitValue64(waiting.get(), w64, big, CU_STREAM_WAIT_VALUE_GEQ));
  EXPECT_EQ(cuStreamQuery(waiting.get()), CUDA_ERROR_NOT_READY);
  PHOS_ASSERT_CU(cuStreamWriteValue64(writing.get(), w64, big, CU_STREAM_WRITE_VALUE_DEFAULT));
  PHOS_ASSERT_CU(cuStreamSynchronize(waiting.get()));
  uint64_t got = 0;
  PHOS_ASSERT_CU(cuMemcpyDtoH(&got, w64, sizeof(got)));
  EXPECT_EQ(got, big);
}

// A write is stream-ordered: it lands after the work queued before it on its stream.
TEST_F(StreamMemOpTest, WriteFollowsTheWorkQueuedBeforeIt) {
  LongCopy copy;
  PHOS_ASSERT_CU(copy.Allocate());
  DeviceBuffer word;
  PHOS_ASSERT_CU(word.Allocate(sizeof(uint32_t)));
  PHOS_ASSERT_CU(cuMemsetD32(word.get(), 0, 1));
  PHOS_ASSERT_CU(cuCtxSynchronize());
  Stream copying, waiting;
  PHOS_ASSERT_CU(copying.Create(CU_STREAM_NON_BLOCKING));
  PHOS_ASSERT_CU(waiting.Create(CU_STREAM_NON_BLOCKING));
  Event copied;
  PHOS_ASSERT_CU(copied.Create(CU_EVENT_DISABLE_TIMING));
  PHOS_ASSERT_CU(copy.Enqueue(copying.get()));
  PHOS_ASSERT_CU(cuEventRecord(copied.get(), copying.get()));
  PHOS_ASSERT_CU(cuStreamWriteValue32(copying.get(), word.get(), 1, CU_STREAM_WRITE_VALUE_DEFAULT));
  PHOS_ASSERT_CU(cuStreamWaitValue32(waiting.get(), word.get(), 1, CU_STREAM_WAIT_VALUE_GEQ));
  PHOS_ASSERT_CU(cuStreamSynchronize(waiting.get()));
  // The wait was released by the write, which came after the copy.
  PHOS_EXPECT_CU(cuEventQuery(copied.get()));
}

// What a driver refuses: a word not aligned to its size, flags that name no condition.
TEST_F(StreamMemOpTest, MisalignedWordsAndUnknownFlagsAreRefused) {
  DeviceBuffer word;
  PHOS_ASSERT_CU(word.Allocate(2 * sizeof(uint64_t)));
  EXPECT_EQ(cuStreamWaitValue32(nullptr, word.get() + 2, 0, CU_STREAM_WAIT_VALUE_GEQ),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuStreamWriteValue64(nullptr, word.get() + 4, 0, CU_STREAM_WRITE_VALUE_DEFAULT),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuStreamWriteValue32(nullptr, word.get(), 0, 0x10), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuStreamWaitValue32(nullptr, word.get(), 0, 0x10), CUDA_ERROR_INVALID_VALUE);
}

}  // namespace
}  // namespace phos::conformance
