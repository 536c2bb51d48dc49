// A session's cuBLAS records at the protocol level: every operand, pointer-array entry and
// device-mode scalar is checked against the session's buffers, every enumeration and size is
// checked before it is used, and a refused record runs nothing and leaves the session serving.
// The results of the records that run are checked against plain loops.
#include <cublas_v2.h>
#include <gtest/gtest.h>

#include <cstring>
#include <initializer_list>
#include <vector>

#include "session_blas_fixture.h"

namespace phos::runtime {
namespace {

using ipc::Op;

TEST_F(SessionBlasTest, AnOperandOutsideTheBuffersIsRefusedAtEveryLevelAndNothingRuns) {
  const uint64_t x = buf_, y = buf_ + 4096, end = buf_ + kBufferBytes;
  Upload(x, std::vector<float>(16, 2.0f));
  Upload(y, std::vector<float>(16, 1.0f));
  // Level 1: y one element past the end of the buffer.
  EXPECT_EQ(Send(Op::kBlasLevel1, Level1(ipc::BlasLevel1::kAxpy, 16, x, end - 15 * 4)),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(Send(Op::kBlasLevel1, Level1(ipc::BlasLevel1::kAxpy, 16, x, y)), CUDA_SUCCESS);
  EXPECT_EQ(Download<float>(y, 16), std::vector<float>(16, 3.0f));  // 1 + 1 * 2, once
  // Level 2: gemv with A's last column past the end.
  ipc::BlasLevel2Args gemv{};
  gemv.handle = handle_;
  gemv.routine = static_cast<int32_t>(ipc::BlasLevel2::kGemv);
  gemv.type = CUDA_R_32F;
  gemv.trans = CUBLAS_OP_N;
  gemv.m = 16, gemv.n = 16, gemv.lda = 16, gemv.incx = 1, gemv.incy = 1;
  gemv.a = end - 16 * 15 * 4, gemv.x = x, gemv.y = y;
  EXPECT_EQ(Send(Op::kBlasLevel2, gemv), CUDA_ERROR_INVALID_VALUE);
  // Level 3: trsm solving B in place, B past the end.
  ipc::BlasLevel3Args trsm{};
  trsm.handle = handle_;
  trsm.routine = static_cast<int32_t>(ipc::BlasLevel3::kTrsm);
  trsm.type = CUDA_R_64F;
  trsm.m = 8, trsm.n = 8, trsm.lda = 8, trsm.ldb = 8;
  trsm.a = buf_, trsm.b = end - 8;
  EXPECT_EQ(Send(Op::kBlasLevel3, trsm), CUDA_ERROR_INVALID_VALUE);
  // GEMM: C straddles the end.
  EXPECT_EQ(Send(Op::kBlasGemm, Gemm(16, x, x, end - 512)), CUDA_ERROR_INVALID_VALUE);
  // None of it ran: y is as the axpy left it, and the session goes on.
  EXPECT_EQ(Download<float>(y, 16), std::vector<float>(16, 3.0f));
  EXPECT_EQ(Send(Op::kBlasGemm, Gemm(4, x, x, y)), CUDA_SUCCESS);
}

TEST_F(SessionBlasTest, AHostModeReductionAnswersWithItsResult) {
  const std::vector<float> xs = {1.0f, -7.5f, 3.0f, 2.0f}, ys = {2.0f, 1.0f, -1.0f, 4.0f};
  Upload(buf_, xs);
  Upload(buf_ + 64, ys);
  uint64_t reply = 0;
  ASSERT_EQ(Send(Op::kBlasLevel1, Level1(ipc::BlasLevel1::kDot, 4, buf_, buf_ + 64), &reply), CUDA_SUCCESS);
  float dot = 0;
  std::memcpy(&dot, &reply, sizeof(dot));
  float want = 0;
  for (size_t i = 0; i < xs.size(); ++i) want += xs[i] * ys[i];
  EXPECT_EQ(dot, want);
  ASSERT_EQ(Send(Op::kBlasLevel1, Level1(ipc::BlasLevel1::kIamax, 4, buf_, 0), &reply), CUDA_SUCCESS);
  int32_t index = 0;
  std::memcpy(&index, &reply, sizeof(index));
  EXPECT_EQ(index, 2);  // |-7.5| is the largest, 1-based
}

TEST_F(SessionBlasTest, DeviceModeScalarsAndResultsMustLieInTheBuffers) {
  const uint64_t x = buf_, alpha = buf_ + 1024, result = buf_ + 2048;
  Upload(x, std::vector<float>{1.0f, 2.0f, 3.0f});
  Upload(alpha, std::vector<float>{3.0f});
  ipc::BlasLevel1Args scal = Level1(ipc::BlasLevel1::kScal, 3, x, 0);
  scal.pointer_mode = CUBLAS_POINTER_MODE_DEVICE;
  const uint64_t outside = buf_ + kBufferBytes;
  std::memcpy(scal.alpha.bytes, &outside, sizeof(outside));
  EXPECT_EQ(Send(Op::kBlasLevel1, scal), CUDA_ERROR_INVALID_VALUE);
  std::memcpy(scal.alpha.bytes, &alpha, sizeof(alpha));
  ASSERT_EQ(Send(Op::kBlasLevel1, scal), CUDA_SUCCESS);
  EXPECT_EQ(Download<float>(x, 3), (std::vector<float>{3.0f, 6.0f, 9.0f}));  // alpha read from the device
  // A device-mode result is written on the device, and must be the session's memory too.
  ipc::BlasLevel1Args asum = Level1(ipc::BlasLevel1::kAsum, 3, x, 0);
  asum.pointer_mode = CUBLAS_POINTER_MODE_DEVICE;
  asum.result = outside - 2;
  EXPECT_EQ(Send(Op::kBlasLevel1, asum), CUDA_ERROR_INVALID_VALUE);
  asum.result = result;
  ASSERT_EQ(Send(Op::kBlasLevel1, asum), CUDA_SUCCESS);
  EXPECT_EQ(Download<float>(result, 1), std::vector<float>{18.0f});
  // A GEMM's device-mode beta outside the buffers.
  ipc::GemmArgs g = Gemm(4, x, x, buf_ + 4096);
  g.pointer_mode = CUBLAS_POINTER_MODE_DEVICE;
  std::memcpy(g.alpha.bytes, &alpha, sizeof(alpha));
  std::memcpy(g.beta.bytes, &outside, sizeof(outside));
  EXPECT_EQ(Send(Op::kBlasGemm, g), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(SessionBlasTest, PointerArrayBatchesAreCheckedEntryByEntry) {
  // Two 2 x 2 GEMMs; the matrices and the three arrays in the one buffer.
  const uint64_t a0 = buf_, a1 = buf_ + 64, b0 = buf_ + 128, b1 = buf_ + 192, c0 = buf_ + 256,
                 c1 = buf_ + 320;
  const uint64_t arrays = buf_ + 1024;
  const std::vector<float> ma0 = {1, 2, 3, 4}, ma1 = {0, 1, 1, 0}, mb0 = {5, 6, 7, 8}, mb1 = {2, 0, 0, 2};
  Upload(a0, ma0);
  Upload(a1, ma1);
  Upload(b0, mb0);
  Upload(b1, mb1);
  Upload(c0, std::vector<float>(4, -1.0f));
  Upload(c1, std::vector<float>(4, -1.0f));
  Upload(arrays, std::vector<uint64_t>{a0, a1, b0, b1, c0, c1});
  ipc::GemmArgs g = Gemm(2, arrays, arrays + 16, arrays + 32);
  g.batch_kind = static_cast<int32_t>(ipc::BlasBatch::kPointers);
  g.batch = 2;
  ASSERT_EQ(Send(Op::kBlasGemm, g), CUDA_SUCCESS);
  auto product = [](const std::vector<float>& a, const std::vector<float>& b) {
    std::vector<float> c(4, 0.0f);
    for (int j = 0; j < 2; ++j)
      for (int i = 0; i < 2; ++i)
        for (int p = 0; p < 2; ++p) c[j * 2 + i] += a[p * 2 + i] * b[j * 2 + p];
    return c;
  };
  EXPECT_EQ(Download<float>(c0, 4), product(ma0, mb0));
  EXPECT_EQ(Download<float>(c1, 4), product(ma1, mb1));
  // Entry 1's C outside the session's buffers: the whole batch is refused, entry 0 included.
  Upload(c0, std::vector<float>(4, -1.0f));
  Upload(arrays + 40, std::vector<uint64_t>{buf_ + kBufferBytes + 4096});
  EXPECT_EQ(Send(Op::kBlasGemm, g), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(Download<float>(c0, 4), std::vector<float>(4, -1.0f));
  // An A pointer inside a buffer whose matrix runs past its end.
  Upload(arrays + 32, std::vector<uint64_t>{c0, c1});
  Upload(arrays, std::vector<uint64_t>{buf_ + kBufferBytes - 8});
  EXPECT_EQ(Send(Op::kBlasGemm, g), CUDA_ERROR_INVALID_VALUE);
  // The array itself outside the buffers.
  g.a = buf_ + kBufferBytes - 8;
  EXPECT_EQ(Send(Op::kBlasGemm, g), CUDA_ERROR_INVALID_VALUE);
  // Over phos's cap: refused before any array is read.
  g = Gemm(2, arrays, arrays + 16, arrays + 32);
  g.batch_kind = static_cast<int32_t>(ipc::BlasBatch::kPointers);
  g.batch = ipc::kMaxBlasPointerBatch + 1;
  EXPECT_EQ(Send(Op::kBlasGemm, g), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(SessionBlasTest, EnumerationsAndTypesOutsideWhatIsServedAreRefused) {
  const uint64_t x = buf_, y = buf_ + 4096;
  ipc::GemmArgs g = Gemm(4, x, x, y);
  using Mutation = void (*)(ipc::GemmArgs&);
  for (Mutation bad : std::initializer_list<Mutation>{
           [](ipc::GemmArgs& r) { r.trans_a = 7; }, [](ipc::GemmArgs& r) { r.trans_b = CUBLAS_OP_CONJG; },
           [](ipc::GemmArgs& r) { r.compute_type = CUBLAS_COMPUTE_32I; },
           [](ipc::GemmArgs& r) { r.a_type = r.b_type = CUDA_R_8I; },
           [](ipc::GemmArgs& r) { r.c_type = CUDA_R_64F; }, [](ipc::GemmArgs& r) { r.algo = 1000; },
           [](ipc::GemmArgs& r) { r.batch_kind = 9; }, [](ipc::GemmArgs& r) { r.pointer_mode = 2; },
           [](ipc::GemmArgs& r) { r.ldc = 3; }, [](ipc::GemmArgs& r) { r.k = -1; }}) {
    ipc::GemmArgs r = g;
    bad(r);
    EXPECT_EQ(Send(Op::kBlasGemm, r), CUDA_ERROR_INVALID_VALUE);
  }
  ipc::BlasLevel1Args l = Level1(ipc::BlasLevel1::kAxpy, 4, x, y);
  l.routine = 99;
  EXPECT_EQ(Send(Op::kBlasLevel1, l), CUDA_ERROR_INVALID_VALUE);
  l = Level1(ipc::BlasLevel1::kAxpy, 4, x, y);
  l.type = CUDA_C_32F;
  EXPECT_EQ(Send(Op::kBlasLevel1, l), CUDA_ERROR_INVALID_VALUE);
  ipc::BlasLevel2Args symv{};
  symv.handle = handle_;
  symv.routine = static_cast<int32_t>(ipc::BlasLevel2::kSymv);
  symv.type = CUDA_R_32F;
  symv.uplo = CUBLAS_FILL_MODE_FULL;  // symv reads one triangle: it must say which
  symv.n = 4, symv.lda = 4, symv.incx = 1, symv.incy = 1;
  symv.a = x, symv.x = x, symv.y = y;
  EXPECT_EQ(Send(Op::kBlasLevel2, symv), CUDA_ERROR_INVALID_VALUE);
  symv.uplo = CUBLAS_FILL_MODE_UPPER;
  symv.incx = 0;
  EXPECT_EQ(Send(Op::kBlasLevel2, symv), CUDA_ERROR_INVALID_VALUE);
  ipc::BlasLevel3Args dgmm{};
  dgmm.handle = handle_;
  dgmm.routine = static_cast<int32_t>(ipc::BlasLevel3::kDgmm);
  dgmm.type = CUDA_R_32F;
  dgmm.side = 9;
  dgmm.m = 4, dgmm.n = 4, dgmm.lda = 4, dgmm.ldc = 4, dgmm.incx = 1;
  dgmm.a = x, dgmm.b = x, dgmm.c = y;
  EXPECT_EQ(Send(Op::kBlasLevel3, dgmm), CUDA_ERROR_INVALID_VALUE);
  // A handle the session never issued.
  g.handle = handle_ + 1;
  EXPECT_EQ(Send(Op::kBlasGemm, g), CUDA_ERROR_INVALID_HANDLE);
  // The session still serves well-formed calls.
  dgmm.side = CUBLAS_SIDE_LEFT;
  EXPECT_EQ(Send(Op::kBlasLevel3, dgmm), CUDA_SUCCESS);
}

// The extents come from the peer's numbers: ones that overflow or make no sense (a batch reaching
// below its buffer, an increment whose span wraps) must not shrink the span checked against the
// buffers.
TEST_F(SessionBlasTest, ExtentsThatOverflowOrMakeNoSenseAreRefused) {
  const uint64_t a = buf_, b = buf_ + 1024, c = buf_ + 2048;
  ipc::GemmArgs gemm = Gemm(16, a, b, c);
  ASSERT_EQ(Send(Op::kBlasGemm, gemm), CUDA_SUCCESS);  // in bounds
  ipc::GemmArgs bad = gemm;
  bad.lda = 1;  // below the rows: cuBLAS refuses it, and (cols-1)*lda+rows would understate A
  EXPECT_EQ(Send(Op::kBlasGemm, bad), CUDA_ERROR_INVALID_VALUE);
  bad = gemm;
  bad.batch_kind = static_cast<int32_t>(ipc::BlasBatch::kStrided);
  bad.batch = 2;
  bad.stride_c = -256;  // the second C 1 KiB below the first: still in the session's buffer
  EXPECT_EQ(Send(Op::kBlasGemm, bad), CUDA_SUCCESS);
  bad.stride_c = -1024;  // 4 KiB below: before the session's buffer
  EXPECT_EQ(Send(Op::kBlasGemm, bad), CUDA_ERROR_INVALID_VALUE);
  bad.stride_c = 0;
  bad.stride_a = INT64_C(1) << 62;  // times 4 bytes wraps to a span that looks small
  EXPECT_EQ(Send(Op::kBlasGemm, bad), CUDA_ERROR_INVALID_VALUE);
  ipc::BlasLevel2Args gemv{};
  gemv.handle = handle_;
  gemv.routine = static_cast<int32_t>(ipc::BlasLevel2::kGemv);
  gemv.type = CUDA_R_32F;
  gemv.trans = CUBLAS_OP_N;
  gemv.m = 16, gemv.n = 2, gemv.lda = 16, gemv.incx = INT32_MIN, gemv.incy = 1;
  gemv.a = a, gemv.x = b, gemv.y = c;
  EXPECT_EQ(Send(Op::kBlasLevel2, gemv), CUDA_ERROR_INVALID_VALUE);  // x spans 8 GiB
  EXPECT_EQ(Send(Op::kBlasGemm, gemm), CUDA_SUCCESS);
}

}  // namespace
}  // namespace phos::runtime
