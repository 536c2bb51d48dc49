#include "blas/half.h"

#include <bit>

namespace phos::sim::blas {

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  if (exponent != 0) return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
  if (mantissa == 0) return std::bit_cast<float>(sign);
  // Subnormal half: normalise; the value is mantissa * 2^-24.
  int shift = 0;
  while ((mantissa & 0x400u) == 0) {
    mantissa <<= 1;
    ++shift;
  }
  mantissa &= 0x3ffu;
  return std::bit_cast<float>(sign | static_cast<uint32_t>(113 - shift) << 23 | (mantissa << 13));
}

uint16_t FloatToHalf(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const auto sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs >= 0x7f800000u) {
    // Infinity, or NaN with a quiet bit set so that the payload cannot round to infinity.
    return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u | ((abs >> 13) & 0x3ffu) : 0));
  }
  // 65520 and above round to infinity (the largest half is 65504).
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (abs < 0x38800000u) {
    // Below the smallest normal half (2^-14): a subnormal or zero, in units of 2^-24.
    if (abs < 0x33000000u) return sign;  // below 2^-25: rounds to zero
    const uint32_t exponent = abs >> 23;
    const uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;
    // The value in units of 2^-24 is mantissa * 2^(exponent - 126); shift is in [14, 24].
    const uint32_t shift = 126 - exponent;
    uint32_t value = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1);
    const uint32_t half_way = 1u << (shift - 1);
    if (rest > half_way || (rest == half_way && (value & 1u))) ++value;
    return static_cast<uint16_t>(sign | value);
  }
  // Normal: rebias the exponent, round the 13 dropped mantissa bits to nearest even. A carry out
  // of the mantissa correctly bumps the exponent.
  uint32_t value = ((abs >> 13) - (112u << 10));
  const uint32_t rest = abs & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (value & 1u))) ++value;
  return static_cast<uint16_t>(sign | value);
}

float BfloatToFloat(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

uint16_t FloatToBfloat(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  // A NaN's payload could round to infinity: keep its upper bits with the quiet bit set.
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  const uint32_t rounded = bits + 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(rounded >> 16);
}

void HalfToFloat(const uint16_t* in, float* out, size_t count) {
  for (size_t i = 0; i < count; ++i) out[i] = HalfToFloat(in[i]);
}

void FloatToHalf(const float* in, uint16_t* out, size_t count) {
  for (size_t i = 0; i < count; ++i) out[i] = FloatToHalf(in[i]);
}

}  // namespace phos::sim::blas
