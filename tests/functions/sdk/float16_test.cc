// F16 and BF16 to fp32 against hand-computed bit patterns: the expected values are exact float
// literals or powers of two, never the conversion under test.
#include "phos/fn/float16.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "phos/fn/safetensors.h"

namespace phos::fn {
namespace {

uint32_t Bits(float f) {
  return std::bit_cast<uint32_t>(f);
}

TEST(HalfBitsToFloat, SignedZeros) {
  EXPECT_EQ(Bits(HalfBitsToFloat(0x0000)), 0x00000000u);
  EXPECT_EQ(Bits(HalfBitsToFloat(0x8000)), 0x80000000u);
}

TEST(HalfBitsToFloat, NormalValues) {
  EXPECT_EQ(HalfBitsToFloat(0x3C00), 1.0f);
  EXPECT_EQ(HalfBitsToFloat(0xC000), -2.0f);
  EXPECT_EQ(HalfBitsToFloat(0x3555), 0.333251953125f);        // (1 + 341/1024) / 4
  EXPECT_EQ(HalfBitsToFloat(0x7BFF), 65504.0f);               // the largest finite F16
  EXPECT_EQ(HalfBitsToFloat(0x0400), std::ldexp(1.0f, -14));  // the smallest normal
}

TEST(HalfBitsToFloat, Subnormals) {
  EXPECT_EQ(HalfBitsToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(HalfBitsToFloat(0x8001), -std::ldexp(1.0f, -24));
  EXPECT_EQ(HalfBitsToFloat(0x0200), std::ldexp(1.0f, -15));
  EXPECT_EQ(HalfBitsToFloat(0x03FF), std::ldexp(1023.0f, -24));  // the largest subnormal
}

TEST(HalfBitsToFloat, InfinitiesAndNaN) {
  EXPECT_EQ(Bits(HalfBitsToFloat(0x7C00)), 0x7F800000u);
  EXPECT_EQ(Bits(HalfBitsToFloat(0xFC00)), 0xFF800000u);
  EXPECT_EQ(Bits(HalfBitsToFloat(0x7E00)), 0x7FC00000u);  // quiet NaN
  EXPECT_EQ(Bits(HalfBitsToFloat(0x7C01)), 0x7F802000u);  // payload kept in the top fraction bits
  EXPECT_TRUE(std::isnan(HalfBitsToFloat(0xFE00)));
}

TEST(Bfloat16BitsToFloat, EdgeCases) {
  EXPECT_EQ(Bits(Bfloat16BitsToFloat(0x0000)), 0x00000000u);
  EXPECT_EQ(Bits(Bfloat16BitsToFloat(0x8000)), 0x80000000u);
  EXPECT_EQ(Bfloat16BitsToFloat(0x3F80), 1.0f);
  EXPECT_EQ(Bfloat16BitsToFloat(0xC000), -2.0f);
  EXPECT_EQ(Bfloat16BitsToFloat(0x3EAB), 0.333984375f);             // (1 + 43/128) / 4
  EXPECT_EQ(Bfloat16BitsToFloat(0x7F7F), std::ldexp(255.0f, 120));  // the largest finite BF16
  EXPECT_EQ(Bfloat16BitsToFloat(0x0080), std::ldexp(1.0f, -126));   // the smallest normal
  EXPECT_EQ(Bfloat16BitsToFloat(0x0001), std::ldexp(1.0f, -133));   // the smallest subnormal
  EXPECT_EQ(Bits(Bfloat16BitsToFloat(0x7F80)), 0x7F800000u);
  EXPECT_EQ(Bits(Bfloat16BitsToFloat(0xFF80)), 0xFF800000u);
  EXPECT_EQ(Bits(Bfloat16BitsToFloat(0x7FC0)), 0x7FC00000u);
}

TEST(ConvertToFloat32, ReadsLittleEndianElements) {
  const std::vector<std::byte> f16 = {std::byte{0x00}, std::byte{0x3C}, std::byte{0xFF}, std::byte{0x7B}};
  std::vector<float> out(2);
  ConvertToFloat32(Dtype::kF16, f16, out);
  EXPECT_EQ(out, (std::vector<float>{1.0f, 65504.0f}));

  const std::vector<std::byte> bf16 = {std::byte{0x00}, std::byte{0xC0}, std::byte{0x80}, std::byte{0x3F}};
  ConvertToFloat32(Dtype::kBF16, bf16, out);
  EXPECT_EQ(out, (std::vector<float>{-2.0f, 1.0f}));

  const std::vector<std::byte> f32 = {std::byte{0x00}, std::byte{0x00}, std::byte{0x80}, std::byte{0x3F},
                                      std::byte{0x00}, std::byte{0x00}, std::byte{0x00}, std::byte{0xC0}};
  ConvertToFloat32(Dtype::kF32, f32, out);
  EXPECT_EQ(out, (std::vector<float>{1.0f, -2.0f}));
}

}  // namespace
}  // namespace phos::fn
