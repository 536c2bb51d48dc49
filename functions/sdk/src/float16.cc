#include "phos/fn/float16.h"

#include <bit>

namespace phos::fn {

float HalfBitsToFloat(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits >> 15) << 31;
  const uint32_t exponent = (bits >> 10) & 0x1f;
  uint32_t fraction = bits & 0x3ff;
  if (exponent == 0x1f) {
    // Infinity (fraction 0) or NaN; the NaN payload moves to the float's top fraction bits.
    return std::bit_cast<float>(sign | 0x7f800000u | (fraction << 13));
  }
  if (exponent != 0) {
    return std::bit_cast<float>(sign | ((exponent - 15 + 127) << 23) | (fraction << 13));
  }
  if (fraction == 0) return std::bit_cast<float>(sign);  // signed zero
  // Subnormal: fraction * 2^-24. Normalise it: shift until the leading one reaches bit 10, which
  // becomes the float's implicit bit.
  int float_exponent = 127 - 15 + 1;
  while ((fraction & 0x400) == 0) {
    fraction <<= 1;
    --float_exponent;
  }
  fraction &= 0x3ff;
  return std::bit_cast<float>(sign | (static_cast<uint32_t>(float_exponent) << 23) | (fraction << 13));
}

float Bfloat16BitsToFloat(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

}  // namespace phos::fn
