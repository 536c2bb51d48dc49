// fp16 and bf16 conversions used by the GEMMs, against the toolkit's own host implementation.
#include "blas/half.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>

namespace phos::sim::blas {
namespace {

uint16_t Bits(__half h) {
  return static_cast<__half_raw>(h).x;
}

TEST(HalfTest, EveryHalfWidensExactlyAndNarrowsBack) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float f = HalfToFloat(static_cast<uint16_t>(h));
    __half_raw raw;
    raw.x = static_cast<unsigned short>(h);
    const __half reference(raw);
    const float want = __half2float(reference);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << h;
      ASSERT_TRUE(std::isnan(HalfToFloat(FloatToHalf(f)))) << std::hex << h;
      continue;
    }
    ASSERT_EQ(std::bit_cast<uint32_t>(f), std::bit_cast<uint32_t>(want)) << std::hex << h;
    ASSERT_EQ(FloatToHalf(f), h) << std::hex << h;
  }
}

TEST(HalfTest, NarrowingRoundsToNearestEven) {
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(1.0f + 0x1p-11f), 0x3c00);      // tie, to even (down)
  EXPECT_EQ(FloatToHalf(1.0f + 3 * 0x1p-11f), 0x3c02);  // tie, to even (up)
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);             // largest half
  EXPECT_EQ(FloatToHalf(65519.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);  // rounds to infinity
  EXPECT_EQ(FloatToHalf(-std::numeric_limits<float>::infinity()), 0xfc00);
  EXPECT_EQ(FloatToHalf(0x1p-24f), 0x0001);  // smallest subnormal
  EXPECT_EQ(FloatToHalf(0x1p-25f), 0x0000);  // tie, to even (zero)
  EXPECT_EQ(FloatToHalf(0x1.8p-25f), 0x0001);
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(FloatToHalf(0x1.ffcp-15f), 0x0400);  // rounds up into the smallest normal
}

TEST(HalfTest, NarrowingMatchesToolkitOnRandomFloats) {
  std::mt19937 rng(42);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 1000000; ++i) {
    // Exponents concentrated around fp16's range, where rounding is interesting.
    uint32_t b = bits(rng);
    b = (b & 0x807fffffu) | ((100u + (b >> 23) % 60u) << 23);
    const float f = std::bit_cast<float>(b);
    ASSERT_EQ(FloatToHalf(f), Bits(__float2half(f))) << f;
  }
}

TEST(HalfTest, NanStaysNan) {
  const uint16_t h = FloatToHalf(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(h & 0x7c00, 0x7c00);
  EXPECT_NE(h & 0x3ff, 0);
  // A NaN whose payload sits only in the low bits must not become infinity.
  EXPECT_NE(FloatToHalf(std::bit_cast<float>(0x7f800001u)) & 0x3ff, 0);
}

// bfloat16, against the toolkit's host conversions: widening is exact for every value, narrowing
// rounds as __float2bfloat16 does, and a NaN stays a NaN.
TEST(BfloatTest, WideningIsExactAndNarrowingMatchesToolkit) {
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    __nv_bfloat16_raw raw;
    raw.x = static_cast<unsigned short>(b);
    const float want = __bfloat162float(__nv_bfloat16(raw));
    const float f = BfloatToFloat(static_cast<uint16_t>(b));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << b;
      continue;
    }
    ASSERT_EQ(std::bit_cast<uint32_t>(f), std::bit_cast<uint32_t>(want)) << std::hex << b;
    ASSERT_EQ(FloatToBfloat(f), b) << std::hex << b;
  }
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 1000000; ++i) {
    const float f = std::bit_cast<float>(bits(rng));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(BfloatToFloat(FloatToBfloat(f))));
      continue;
    }
    __nv_bfloat16_raw want = __float2bfloat16(f);
    ASSERT_EQ(FloatToBfloat(f), want.x) << f;
  }
  EXPECT_EQ(FloatToBfloat(1.0f + 0x1p-8f), 0x3f80);      // tie, to even (down)
  EXPECT_EQ(FloatToBfloat(1.0f + 3 * 0x1p-8f), 0x3f82);  // tie, to even (up)
}

}  // namespace
}  // namespace phos::sim::blas
