// Element-wise reductions of simgpu's NCCL collectives, over host-addressable device buffers.
#pragma once

#include <nccl.h>

#include <cstddef>

namespace phos::sim::nccl {

// Bytes per element of a datatype simgpu serves (every ncclDataType_t except the fp8 types), or
// 0 for one it does not.
size_t DataTypeSize(const ncclDataType_t& type);
// ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg (no ncclRedOpCreatePreMulSum ops).
bool ValidRedOp(const ncclRedOp_t& op);

// out[i] = op(inputs[0][i], ..., inputs[n - 1][i]) for i < count, reduced in rank order. out may
// alias an input. Integers wrap on overflow; ncclAvg divides the sum by n (integers: truncated,
// as NCCL's integer average). fp16 and bf16 are widened to fp32, reduced, and rounded to nearest
// even once at the end. `type` and `op` must be valid (DataTypeSize > 0, ValidRedOp).
void Reduce(ncclDataType_t type, ncclRedOp_t op, const void* const* inputs, int n, void* out, size_t count);
// ncclRedOpCreatePreMulSum's reduction: out[i] = scalars[0] * inputs[0][i] + ... + scalars[n - 1] *
// inputs[n - 1][i], each scalar one element of `type`, products summed in rank order (fp16 and
// bf16 in fp32, rounded once; integers wrap).
void ReducePreMulSum(ncclDataType_t type, const void* const* inputs, const void* const* scalars, int n,
                     void* out, size_t count);

// IEEE binary16 / bfloat16 conversions (round to nearest even), for tests and the reduction.
float Bf16ToFloat(unsigned short bits);
unsigned short FloatToBf16(float value);

}  // namespace phos::sim::nccl
