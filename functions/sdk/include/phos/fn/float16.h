// IEEE 754 binary16 (F16) and bfloat16 (BF16) to float: the one place these conversions live.
// Both are exact: every F16 and BF16 value, subnormals, infinities and NaN payloads included, is
// representable as a float.
#pragma once

#include <cstdint>

namespace phos::fn {

// binary16: 1 sign bit, 5 exponent bits (bias 15), 10 fraction bits.
float HalfBitsToFloat(uint16_t bits);

// bfloat16: the upper 16 bits of a float (1 sign, 8 exponent, 7 fraction bits).
float Bfloat16BitsToFloat(uint16_t bits);

}  // namespace phos::fn
