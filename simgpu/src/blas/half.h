// IEEE 754 binary16 (CUDA's __half) and bfloat16 (__nv_bfloat16) to and from binary32, for GEMMs
// with CUDA_R_16F or CUDA_R_16BF operands: simgpu computes in fp32 with OpenBLAS, so 16-bit data
// is widened before and narrowed after. Bit-exact and independent of the host CPU's F16C support.
#pragma once

#include <cstddef>
#include <cstdint>

namespace phos::sim::blas {

// Exact: every binary16 value, including subnormals, infinities and NaNs, is a binary32 value.
float HalfToFloat(uint16_t h);
// Round to nearest, ties to even (as __float2half); overflow gives infinity, NaN stays NaN.
uint16_t FloatToHalf(float f);

// bfloat16 is binary32's upper half: widening is exact; narrowing rounds to nearest, ties to even
// (as __float2bfloat16), and keeps NaN a NaN.
float BfloatToFloat(uint16_t b);
uint16_t FloatToBfloat(float f);

void HalfToFloat(const uint16_t* in, float* out, size_t count);
void FloatToHalf(const float* in, uint16_t* out, size_t count);

}  // namespace phos::sim::blas
