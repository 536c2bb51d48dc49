// A cublasLtMatmul record's operands (blas_operands.h, LtMatmulOperands) and the read/write sets a
// restoring session speculates from them: the byte ranges the layouts imply (column- and
// row-major, strided batches), what beta, the epilogue and the workspace add, and every record
// phosd refuses before a range is trusted.
#include <cublasLt.h>
#include <gtest/gtest.h>

#include <cstring>

#include "phos/runtime/blas_operands.h"
#include "phos/runtime/speculation.h"

namespace phos::runtime {
namespace {

constexpr uint64_t kA = 0x7f0000100000, kB = 0x7f0000200000, kC = 0x7f0000300000, kD = 0x7f0000400000,
                   kBias = 0x7f0000500000, kWork = 0x7f0000600000;

ipc::BlasLtLayout Col(int32_t type, uint64_t rows, uint64_t cols, int64_t ld) {
  return {type, CUBLASLT_ORDER_COL, rows, cols, ld, 0, 1, 0};
}

// D (m x n) = A (m x k) B (k x n), fp32, column-major, packed.
ipc::BlasLtMatmulArgs Matmul(uint64_t m, uint64_t n, uint64_t k, float beta) {
  ipc::BlasLtMatmulArgs a{};
  a.compute_type = CUBLAS_COMPUTE_32F;
  a.scale_type = CUDA_R_32F;
  a.trans_a = a.trans_b = CUBLAS_OP_N;
  a.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  a.bias_type = -1;
  a.a = kA, a.b = kB, a.c = kC, a.d = kD;
  const float one = 1.0f;
  std::memcpy(a.alpha.bytes, &one, sizeof(one));
  std::memcpy(a.beta.bytes, &beta, sizeof(beta));
  a.layout_a = Col(CUDA_R_32F, m, k, static_cast<int64_t>(m));
  a.layout_b = Col(CUDA_R_32F, k, n, static_cast<int64_t>(k));
  a.layout_c = a.layout_d = Col(CUDA_R_32F, m, n, static_cast<int64_t>(m));
  return a;
}

const BlasOperand* Find(const BlasOperands& ops, const char* what) {
  for (const BlasOperand& op : ops.operands()) {
    if (std::strcmp(op.what, what) == 0) return &op;
  }
  return nullptr;
}

TEST(BlasLtOperandsTest, RangesFollowTheLayouts) {
  ipc::BlasLtMatmulArgs a = Matmul(8, 4, 3, 1.0f);
  a.layout_c.ld = 10;                                      // C with gaps between columns
  a.layout_b = {CUDA_R_16F, CUBLASLT_ORDER_ROW, 3, 4, 6, 0, 1, 0};  // row-major: 3 rows of ld 6
  a.layout_a.type = CUDA_R_16F;
  BlasOperands ops = LtMatmulOperands(a);
  ASSERT_TRUE(ops.ok()) << ops.refusal();
  EXPECT_EQ(Find(ops, "A")->range.bytes, 8u * 3 * 2);
  EXPECT_EQ(Find(ops, "B")->range.bytes, (2u * 6 + 4) * 2);
  EXPECT_FALSE(Find(ops, "B")->range.dense);
  EXPECT_EQ(Find(ops, "C")->range.bytes, (3u * 10 + 8) * 4);
  EXPECT_FALSE(Find(ops, "C")->written);
  EXPECT_TRUE(Find(ops, "D")->written && Find(ops, "D")->overwritten && Find(ops, "D")->range.dense);
  EXPECT_EQ(Find(ops, "bias"), nullptr);
  EXPECT_EQ(Find(ops, "workspace"), nullptr);

  // Beta 0 reads no C; a bias epilogue reads m elements of the bias (fp32 here, D's type being
  // fp32), and a workspace is written.
  a = Matmul(8, 4, 3, 0.0f);
  a.epilogue = CUBLASLT_EPILOGUE_GELU_BIAS;
  a.bias = kBias;
  a.workspace = kWork, a.workspace_bytes = 1 << 20;
  ops = LtMatmulOperands(a);
  ASSERT_TRUE(ops.ok()) << ops.refusal();
  EXPECT_EQ(Find(ops, "C"), nullptr);
  EXPECT_EQ(Find(ops, "bias")->range.bytes, 8u * 4);
  EXPECT_EQ(Find(ops, "workspace")->range.bytes, 1u << 20);
  EXPECT_TRUE(Find(ops, "workspace")->written);

  // A strided batch: three matrices 40 elements apart, each 32 elements.
  a = Matmul(8, 4, 3, 0.0f);
  for (ipc::BlasLtLayout* l : {&a.layout_a, &a.layout_b, &a.layout_c, &a.layout_d}) l->batch_count = 3;
  a.layout_d.batch_stride = 40;
  ops = LtMatmulOperands(a);
  ASSERT_TRUE(ops.ok()) << ops.refusal();
  EXPECT_EQ(Find(ops, "D")->range.bytes, (2u * 40 + 32) * 4);
  EXPECT_FALSE(Find(ops, "D")->range.dense);
}

TEST(BlasLtOperandsTest, WhatPhosdRefusesBeforeTrustingARange) {
  auto refused = [](const ipc::BlasLtMatmulArgs& a) { return !LtMatmulOperands(a).ok(); };
  EXPECT_FALSE(refused(Matmul(8, 4, 3, 1.0f)));
  ipc::BlasLtMatmulArgs a = Matmul(8, 4, 3, 1.0f);
  a.layout_b.rows = 5;  // k of B is not A's
  EXPECT_TRUE(refused(a));
  a = Matmul(8, 4, 3, 1.0f);
  a.layout_a.ld = 7;  // below the rows
  EXPECT_TRUE(refused(a));
  a = Matmul(8, 4, 3, 1.0f);
  a.layout_d.order = CUBLASLT_ORDER_ROW;  // row-major 8 x 4 needs ld >= 4: 8 is fine
  EXPECT_FALSE(refused(a));
  a.layout_d.order = CUBLASLT_ORDER_COL32;
  EXPECT_TRUE(refused(a));
  a = Matmul(8, 4, 3, 1.0f);
  a.layout_d.batch_count = 2;  // the others' are 1
  EXPECT_TRUE(refused(a));
  a = Matmul(8, 4, 3, 1.0f);
  a.layout_a.rows = a.layout_c.rows = a.layout_d.rows = 1ull << 32;
  a.layout_a.ld = a.layout_c.ld = a.layout_d.ld = int64_t{1} << 32;
  EXPECT_TRUE(refused(a));  // beyond int32
  a = Matmul(8, 4, 3, 1.0f);
  a.layout_a.type = a.layout_b.type = CUDA_R_64F;
  EXPECT_TRUE(refused(a));
  a = Matmul(8, 4, 3, 1.0f);
  a.layout_d.type = CUDA_R_16F;  // C fp32, D fp16
  EXPECT_TRUE(refused(a));
  a = Matmul(8, 4, 3, 1.0f);
  a.compute_type = CUBLAS_COMPUTE_64F;
  EXPECT_TRUE(refused(a));
  a = Matmul(8, 4, 3, 1.0f);
  a.epilogue = CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  EXPECT_TRUE(refused(a));
  a = Matmul(8, 4, 3, 1.0f);
  a.epilogue = CUBLASLT_EPILOGUE_BIAS;  // and no bias
  EXPECT_TRUE(refused(a));
  a.bias = kBias, a.bias_type = CUDA_R_16BF;  // neither D's type nor fp32
  EXPECT_TRUE(refused(a));
  a = Matmul(8, 4, 3, 1.0f);
  a.trans_a = 9;
  EXPECT_TRUE(refused(a));
  a = Matmul(8, 4, 0, 1.0f);  // an inner dimension of 0
  EXPECT_TRUE(refused(a));
  // A stride that wraps the address space spans the rest of it: no buffer owns that range.
  a = Matmul(8, 4, 3, 1.0f);
  for (ipc::BlasLtLayout* l : {&a.layout_a, &a.layout_b, &a.layout_c, &a.layout_d}) l->batch_count = 4;
  a.layout_c.batch_stride = INT64_MAX / 2;
  BlasOperands ops = LtMatmulOperands(a);
  ASSERT_TRUE(ops.ok()) << ops.refusal();
  EXPECT_EQ(Find(ops, "C")->range.bytes, UINT64_MAX);
  a = Matmul(8, 4, 3, 1.0f);
  a.workspace = UINT64_MAX - 16, a.workspace_bytes = 64;
  EXPECT_EQ(Find(LtMatmulOperands(a), "workspace")->range.bytes, UINT64_MAX);
}

// A restoring session's sets for the record: what its gate makes the stream wait for.
TEST(BlasLtOperandsTest, SpeculationReadsInputsAndWritesD) {
  BufferTable table;
  for (uint64_t base : {kA, kB, kC, kD, kBias, kWork}) ASSERT_TRUE(table.Insert(base, 8 * 4 * 4).ok());
  AccessSets sets;
  ipc::BlasLtMatmulArgs a = Matmul(8, 4, 3, 1.0f);
  a.epilogue = CUBLASLT_EPILOGUE_RELU_BIAS;
  a.bias = kBias;
  SpeculateBlas(table, LtMatmulOperands(a), &sets);
  for (uint64_t read : {kA, kB, kC, kBias}) {
    EXPECT_TRUE(sets.read.Contains(read) && !sets.write.Contains(read)) << std::hex << read;
  }
  // D covers its buffer densely and is not read first: written only, no load needed.
  EXPECT_TRUE(sets.write.Contains(kD) && !sets.read.Contains(kD));
  EXPECT_FALSE(sets.read.Contains(kWork) || sets.write.Contains(kWork));

  // Beta 0: C untouched. D with gaps (ld 10 over 8 rows): its gaps keep their bytes, so it is read.
  sets.Clear();
  a = Matmul(8, 3, 3, 0.0f);
  a.layout_d.ld = 10;
  a.workspace = kWork, a.workspace_bytes = 64;
  SpeculateBlas(table, LtMatmulOperands(a), &sets);
  EXPECT_FALSE(sets.read.Contains(kC) || sets.write.Contains(kC));
  EXPECT_TRUE(sets.write.Contains(kD) && sets.read.Contains(kD));
  EXPECT_TRUE(sets.write.Contains(kWork));
}

}  // namespace
}  // namespace phos::runtime
