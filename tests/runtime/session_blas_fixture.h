// The fixture of the cuBLAS and cuBLASLt records' protocol-level tests (session_blas_test.cc,
// session_blas_lt_test.cc): a session on the ring with a cuBLAS handle and one buffer, and copies
// to and from it.
#pragma once

#include <cublas_v2.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "api_server_fixture.h"

namespace phos::runtime {

class SessionBlasTest : public ApiServerTest {
 protected:
  static constexpr uint64_t kBufferBytes = 64 * 1024;

  void SetUp() override {
    ApiServerTest::SetUp();
    if (HasFatalFailure()) return;
    token_ = server_->IssueToken();
    ASSERT_TRUE(Hello(token_, ipc::kWireVersion, &sock_, &fd_).ok());
    auto ring = ipc::Ring::Attach(fd_);
    ASSERT_TRUE(ring.ok()) << ring.status().ToString();
    ring_ = std::move(*ring);
    ASSERT_EQ(Send(ipc::Op::kBlasCreate, nullptr, 0, &handle_), CUDA_SUCCESS);
    ipc::SizeArgs alloc{kBufferBytes};
    ASSERT_EQ(Send(ipc::Op::kMemAlloc, &alloc, sizeof(alloc), &buf_), CUDA_SUCCESS);
  }
  void TearDown() override {
    ring_.reset();
    if (server_ != nullptr && !token_.empty()) server_->EndSession(token_);
    if (sock_ >= 0) close(sock_);
  }

  int32_t Send(ipc::Op op, const void* args, size_t bytes, uint64_t* reply = nullptr) {
    return Call(*ring_, op, args, bytes, reply);
  }
  template <typename Args>
  int32_t Send(ipc::Op op, const Args& args, uint64_t* reply = nullptr) {
    return Send(op, &args, sizeof(args), reply);
  }

  template <typename T>
  void Upload(uint64_t dst, const std::vector<T>& values) {
    ipc::CopyArgs copy{.dst = dst, .src = 0, .bytes = values.size() * sizeof(T), .stream = 0};
    std::vector<uint8_t> payload(sizeof(copy) + copy.bytes);
    std::memcpy(payload.data(), &copy, sizeof(copy));
    std::memcpy(payload.data() + sizeof(copy), values.data(), copy.bytes);
    ASSERT_EQ(Send(ipc::Op::kMemcpyHtoD, payload.data(), payload.size()), CUDA_SUCCESS);
  }
  template <typename T>
  std::vector<T> Download(uint64_t src, size_t count) {
    ipc::CopyArgs copy{.dst = 0, .src = src, .bytes = count * sizeof(T), .stream = 0};
    EXPECT_EQ(Send(ipc::Op::kMemcpyDtoH, copy), CUDA_SUCCESS);
    std::vector<T> out(count);
    std::memcpy(out.data(), ring_->reply_payload(), copy.bytes);
    return out;
  }

  ipc::BlasLevel1Args Level1(ipc::BlasLevel1 routine, int32_t n, uint64_t x, uint64_t y) const {
    ipc::BlasLevel1Args a{};
    a.handle = handle_;
    a.routine = static_cast<int32_t>(routine);
    a.type = CUDA_R_32F;
    a.pointer_mode = CUBLAS_POINTER_MODE_HOST;
    a.n = n, a.incx = 1, a.incy = 1;
    a.x = x, a.y = y;
    const float one = 1.0f;
    std::memcpy(a.alpha.bytes, &one, sizeof(one));
    return a;
  }
  // C = A B, all n x n fp32, one matrix or a batch.
  ipc::GemmArgs Gemm(int32_t n, uint64_t a, uint64_t b, uint64_t c) const {
    ipc::GemmArgs g{};
    g.handle = handle_;
    g.trans_a = g.trans_b = CUBLAS_OP_N;
    g.m = g.n = g.k = n;
    g.lda = g.ldb = g.ldc = n;
    g.a_type = g.b_type = g.c_type = CUDA_R_32F;
    g.compute_type = CUBLAS_COMPUTE_32F;
    g.algo = CUBLAS_GEMM_DEFAULT;
    g.batch_kind = static_cast<int32_t>(ipc::BlasBatch::kNone);
    g.batch = 1;
    g.pointer_mode = CUBLAS_POINTER_MODE_HOST;
    g.a = a, g.b = b, g.c = c;
    const float one = 1.0f;
    std::memcpy(g.alpha.bytes, &one, sizeof(one));
    return g;
  }

  std::string token_;
  int sock_ = -1, fd_ = -1;
  std::unique_ptr<ipc::Ring> ring_;
  uint64_t handle_ = 0, buf_ = 0;
};

}  // namespace phos::runtime
