// A session's cublasLtMatmul record at the protocol level: a served matmul's result against loops
// written here (bias, GELU as cuBLASLt computes it: the tanh approximation), and every hostile
// record refused with the error a driver would give, running nothing and leaving the session
// serving.
#include <cublasLt.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "session_blas_fixture.h"

namespace phos::runtime {
namespace {

using ipc::Op;

class SessionBlasLtTest : public SessionBlasTest {
 protected:
  // D (m x n) = A (m x k) B (k x n) + beta C, fp32, column-major and packed, at offsets into the
  // session's buffer: A at 0, B at 4 KiB, C at 8 KiB, D at 12 KiB, the bias at 16 KiB.
  ipc::BlasLtMatmulArgs Matmul(uint64_t m, uint64_t n, uint64_t k, float beta) const {
    ipc::BlasLtMatmulArgs a{};
    a.compute_type = CUBLAS_COMPUTE_32F;
    a.scale_type = CUDA_R_32F;
    a.trans_a = a.trans_b = CUBLAS_OP_N;
    a.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    a.bias_type = -1;
    a.a = buf_, a.b = buf_ + 4096, a.c = buf_ + 8192, a.d = buf_ + 12288;
    const float one = 1.0f;
    std::memcpy(a.alpha.bytes, &one, sizeof(one));
    std::memcpy(a.beta.bytes, &beta, sizeof(beta));
    auto col = [](uint64_t rows, uint64_t cols) {
      return ipc::BlasLtLayout{CUDA_R_32F, CUBLASLT_ORDER_COL, rows, cols, static_cast<int64_t>(rows), 0, 1, 0};
    };
    a.layout_a = col(m, k);
    a.layout_b = col(k, n);
    a.layout_c = a.layout_d = col(m, n);
    return a;
  }
  uint64_t BiasAddress() const { return buf_ + 16384; }
};

TEST_F(SessionBlasLtTest, AGeluBiasMatmulComputesWhatTheLoopsDo) {
  const int m = 6, n = 5, k = 4;
  std::vector<float> a(m * k), b(k * n), c(m * n), bias(m);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(static_cast<int>(i % 7) - 3) / 4;
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(static_cast<int>(i % 5) - 2) / 2;
  for (size_t i = 0; i < c.size(); ++i) c[i] = static_cast<float>(i % 3);
  for (size_t i = 0; i < bias.size(); ++i) bias[i] = static_cast<float>(i) / 8 - 0.25f;
  ipc::BlasLtMatmulArgs args = Matmul(m, n, k, 0.5f);
  args.epilogue = CUBLASLT_EPILOGUE_GELU_BIAS;
  args.bias = BiasAddress();
  Upload(args.a, a);
  Upload(args.b, b);
  Upload(args.c, c);
  Upload(args.bias, bias);
  ASSERT_EQ(Send(Op::kBlasLtMatmul, args), CUDA_SUCCESS);
  const std::vector<float> d = Download<float>(args.d, m * n);
  for (int j = 0; j < n; ++j) {
    for (int i = 0; i < m; ++i) {
      double x = 0;
      for (int p = 0; p < k; ++p) x += double{a[p * m + i]} * b[j * k + p];
      x += 0.5 * c[j * m + i] + bias[i];
      const double gelu = 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
      EXPECT_NEAR(d[j * m + i], gelu, 1e-5) << i << "," << j;
    }
  }
}

TEST_F(SessionBlasLtTest, HostileRecordsAreRefusedAndRunNothing) {
  const uint64_t end = buf_ + kBufferBytes;
  const ipc::BlasLtMatmulArgs good = Matmul(8, 8, 8, 1.0f);
  Upload(good.d, std::vector<float>(64, 9.0f));
  auto refused = [&](ipc::BlasLtMatmulArgs a, const char* what) {
    EXPECT_EQ(Send(Op::kBlasLtMatmul, a), CUDA_ERROR_INVALID_VALUE) << what;
  };
  ipc::BlasLtMatmulArgs a = good;
  a.a = end - 64;  // A's last columns past the buffer
  refused(a, "A outside");
  a = good, a.b = end - 4;
  refused(a, "B outside");
  a = good, a.c = buf_ - 256;
  refused(a, "C outside");
  a = good, a.d = end - 128;
  refused(a, "D outside");
  a = good, a.epilogue = CUBLASLT_EPILOGUE_BIAS, a.bias = end - 16;
  refused(a, "bias outside");
  a = good, a.workspace = end - 1024, a.workspace_bytes = 4096;
  refused(a, "workspace outside");
  a = good, a.layout_d.ld = 4;
  refused(a, "ld below the rows");
  a = good, a.layout_b.rows = 7;
  refused(a, "shapes disagree");
  a = good, a.layout_c.batch_count = 2;
  refused(a, "batch counts disagree");
  a = good;
  for (ipc::BlasLtLayout* l : {&a.layout_a, &a.layout_b, &a.layout_c, &a.layout_d}) l->batch_count = 3;
  a.layout_d.batch_stride = INT64_MAX / 2;  // wraps: a range no buffer owns
  refused(a, "stride wraps");
  a = good, a.layout_a.type = a.layout_b.type = CUDA_R_64F;
  refused(a, "fp64");
  a = good, a.compute_type = CUBLAS_COMPUTE_16F;
  refused(a, "compute type");
  a = good, a.epilogue = CUBLASLT_EPILOGUE_DRELU_BGRAD;
  refused(a, "epilogue");
  a = good, a.layout_a.order = 77;
  refused(a, "order");
  a = good, a.trans_b = -1;
  refused(a, "operation");
  // A stream the session does not have.
  a = good, a.stream = 0x7777770;
  EXPECT_EQ(Send(Op::kBlasLtMatmul, a), CUDA_ERROR_INVALID_HANDLE);
  // A record of the wrong size.
  std::vector<uint8_t> short_record(sizeof(good) - 8);
  std::memcpy(short_record.data(), &good, short_record.size());
  EXPECT_EQ(Send(Op::kBlasLtMatmul, short_record.data(), short_record.size()), CUDA_ERROR_INVALID_VALUE);
  // Nothing ran: D holds what it held; the session still serves, C outside its buffers being no
  // matter when beta is 0 (C is not read).
  EXPECT_EQ(Download<float>(good.d, 64), std::vector<float>(64, 9.0f));
  Upload(good.a, std::vector<float>(64, 1.0f));
  Upload(good.b, std::vector<float>(64, 0.5f));
  a = Matmul(8, 8, 8, 0.0f);
  a.c = 0x10;
  EXPECT_EQ(Send(Op::kBlasLtMatmul, a), CUDA_SUCCESS);
  EXPECT_EQ(Download<float>(good.d, 64), std::vector<float>(64, 4.0f));
}

}  // namespace
}  // namespace phos::runtime
