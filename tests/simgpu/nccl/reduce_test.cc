// The element-wise reductions behind simgpu's collectives: every datatype and op, rounding of
// the 16-bit float types, integer wrap-around, and aliasing of the output with an input.
#include "nccl/reduce.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "blas/half.h"

namespace phos::sim::nccl {
namespace {

template <typename T>
std::vector<T> ReduceAll(ncclDataType_t type, ncclRedOp_t op, const std::vector<std::vector<T>>& in) {
  std::vector<const void*> inputs;
  for (const auto& v : in) inputs.push_back(v.data());
  std::vector<T> out(in[0].size());
  Reduce(type, op, inputs.data(), static_cast<int>(in.size()), out.data(), out.size());
  return out;
}

TEST(NcclReduceTest, SizesAndValidity) {
  EXPECT_EQ(DataTypeSize(ncclInt8), 1u);
  EXPECT_EQ(DataTypeSize(ncclHalf), 2u);
  EXPECT_EQ(DataTypeSize(ncclBfloat16), 2u);
  EXPECT_EQ(DataTypeSize(ncclUint32), 4u);
  EXPECT_EQ(DataTypeSize(ncclDouble), 8u);
  EXPECT_EQ(DataTypeSize(ncclFloat8e4m3), 0u) << "fp8 is not served";
  EXPECT_EQ(DataTypeSize(static_cast<ncclDataType_t>(-1)), 0u);
  EXPECT_TRUE(ValidRedOp(ncclAvg));
  EXPECT_FALSE(ValidRedOp(ncclNumOps));
}

TEST(NcclReduceTest, EveryOpOnThreeInputs) {
  const std::vector<std::vector<double>> in = {{1, -2, 8}, {3, 5, -1}, {2, 0.5, 4}};
  EXPECT_EQ(ReduceAll(ncclDouble, ncclSum, in), (std::vector<double>{6, 3.5, 11}));
  EXPECT_EQ(ReduceAll(ncclDouble, ncclProd, in), (std::vector<double>{6, -5, -32}));
  EXPECT_EQ(ReduceAll(ncclDouble, ncclMax, in), (std::vector<double>{3, 5, 8}));
  EXPECT_EQ(ReduceAll(ncclDouble, ncclMin, in), (std::vector<double>{1, -2, -1}));
  EXPECT_EQ(ReduceAll(ncclDouble, ncclAvg, in), (std::vector<double>{2, 3.5 / 3, 11.0 / 3}));
}

TEST(NcclReduceTest, IntegersWrapAndAverageTruncates) {
  const std::vector<std::vector<int32_t>> in = {{std::numeric_limits<int32_t>::max(), 7}, {1, 0}};
  EXPECT_EQ(ReduceAll(ncclInt32, ncclSum, in),
            (std::vector<int32_t>{std::numeric_limits<int32_t>::min(), 7}));
  EXPECT_EQ(ReduceAll(ncclInt32, ncclAvg, in)[1], 3);
  const std::vector<std::vector<uint8_t>> bytes = {{200, 3}, {100, 250}};
  EXPECT_EQ(ReduceAll(ncclUint8, ncclSum, bytes), (std::vector<uint8_t>{44, 253}));
  EXPECT_EQ(ReduceAll(ncclUint8, ncclMax, bytes), (std::vector<uint8_t>{200, 250}));
  const std::vector<std::vector<int64_t>> wide = {{-5}, {2}};
  EXPECT_EQ(ReduceAll(ncclInt64, ncclMin, wide), (std::vector<int64_t>{-5}));
}

// fp16: reduced in fp32 and rounded once, to nearest even.
TEST(NcclReduceTest, HalfRoundsOnceToNearestEven) {
  // 2048 + 1 + 1: 2049 is not representable (spacing 2 above 2048); one rounding of 2050 is exact,
  // two (2048 + 1 -> 2048, + 1 -> 2048) would lose both.
  const std::vector<std::vector<uint16_t>> in = {
      {blas::FloatToHalf(2048)}, {blas::FloatToHalf(1)}, {blas::FloatToHalf(1)}};
  EXPECT_EQ(blas::HalfToFloat(ReduceAll(ncclHalf, ncclSum, in)[0]), 2050.0f);
}

TEST(NcclReduceTest, Bfloat16ConversionAndSum) {
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(1.5f)), 1.5f);
  // 1 + 2^-8 lies halfway between two bf16 values (7 fraction bits, spacing 2^-7): ties to even
  // gives 1.
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(1.0f + 1.0f / 256)), 1.0f);
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(std::nanf("")))));
  const std::vector<std::vector<uint16_t>> in = {{FloatToBf16(3.0f)}, {FloatToBf16(-0.5f)}};
  EXPECT_EQ(Bf16ToFloat(ReduceAll(ncclBfloat16, ncclSum, in)[0]), 2.5f);
}

TEST(NcclReduceTest, OutputMayAliasAnInput) {
  std::vector<float> a = {1, 2, 3};
  const std::vector<float> b = {10, 20, 30};
  const void* inputs[] = {a.data(), b.data()};
  Reduce(ncclFloat, ncclSum, inputs, 2, a.data(), a.size());
  EXPECT_EQ(a, (std::vector<float>{11, 22, 33}));
}

}  // namespace
}  // namespace phos::sim::nccl
