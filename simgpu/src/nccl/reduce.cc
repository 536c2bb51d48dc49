#include "nccl/reduce.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "blas/half.h"
#include "phos/base/enum_value.h"

namespace phos::sim::nccl {
namespace {

// fp16 and bf16 as stored: 16-bit patterns, reduced in fp32.
struct Fp16 {
  uint16_t bits;
};
struct Bf16 {
  uint16_t bits;
};

template <typename T>
struct Accumulator {
  using Type = T;
  static Type Load(T v) { return v; }
  static T Store(Type v) { return v; }
};
template <>
struct Accumulator<Fp16> {
  using Type = float;
  static float Load(Fp16 v) { return blas::HalfToFloat(v.bits); }
  static Fp16 Store(float v) { return {blas::FloatToHalf(v)}; }
};
template <>
struct Accumulator<Bf16> {
  using Type = float;
  static float Load(Bf16 v) { return Bf16ToFloat(v.bits); }
  static Bf16 Store(float v) { return {FloatToBf16(v)}; }
};

// Sums and products of signed integers wrap (as on the GPU) instead of being undefined.
template <typename A>
A Add(A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    using U = std::make_unsigned_t<A>;
    return static_cast<A>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return a + b;
  }
}
template <typename A>
A Mul(A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    using U = std::make_unsigned_t<A>;
    return static_cast<A>(static_cast<U>(a) * static_cast<U>(b));
  } else {
    return a * b;
  }
}

template <typename A>
A Combine(ncclRedOp_t op, A a, A b) {
  switch (op) {
    case ncclProd:
      return Mul(a, b);
    case ncclMax:
      return std::max(a, b);
    case ncclMin:
      return std::min(a, b);
    default:  // ncclSum, ncclAvg
      return Add(a, b);
  }
}

// `scalars` (one element of T per input) makes it a pre-multiplied sum; null: `op`.
template <typename T>
void ReduceTyped(ncclRedOp_t op, const void* const* inputs, const void* const* scalars, int n, void* out,
                 size_t count) {
  using Acc = Accumulator<T>;
  using A = typename Acc::Type;
  // Loaded element by element with memcpy: device buffers need not be aligned for T.
  auto load = [](const void* base, size_t i) {
    T v;
    std::memcpy(&v, static_cast<const char*>(base) + i * sizeof(T), sizeof(T));
    return Acc::Load(v);
  };
  if (scalars != nullptr) op = ncclSum;
  auto term = [&](int r, size_t i) {
    return scalars == nullptr ? load(inputs[r], i) : Mul(load(scalars[r], 0), load(inputs[r], i));
  };
  std::vector<A> acc(count);
  for (size_t i = 0; i < count; ++i) acc[i] = term(0, i);
  for (int r = 1; r < n; ++r) {
    for (size_t i = 0; i < count; ++i) acc[i] = Combine(op, acc[i], term(r, i));
  }
  if (op == ncclAvg) {
    for (A& a : acc) a = static_cast<A>(a / static_cast<A>(n));
  }
  for (size_t i = 0; i < count; ++i) {
    T v = Acc::Store(acc[i]);
    std::memcpy(static_cast<char*>(out) + i * sizeof(T), &v, sizeof(T));
  }
}

}  // namespace

// By reference and through its bytes: `type` may be any integer a caller passed (phos::EnumValue).
size_t DataTypeSize(const ncclDataType_t& type) {
  switch (EnumValue(type)) {
    case ncclInt8:
    case ncclUint8:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
      return 8;
    default:  // the fp8 types and values outside the enum
      return 0;
  }
}

bool ValidRedOp(const ncclRedOp_t& op) {
  const int v = EnumValue(op);
  return v == ncclSum || v == ncclProd || v == ncclMax || v == ncclMin || v == ncclAvg;
}

namespace {

void ReduceAny(ncclDataType_t type, ncclRedOp_t op, const void* const* inputs, const void* const* scalars,
               int n, void* out, size_t count) {
  switch (type) {
    case ncclInt8:
      return ReduceTyped<int8_t>(op, inputs, scalars, n, out, count);
    case ncclUint8:
      return ReduceTyped<uint8_t>(op, inputs, scalars, n, out, count);
    case ncclInt32:
      return ReduceTyped<int32_t>(op, inputs, scalars, n, out, count);
    case ncclUint32:
      return ReduceTyped<uint32_t>(op, inputs, scalars, n, out, count);
    case ncclInt64:
      return ReduceTyped<int64_t>(op, inputs, scalars, n, out, count);
    case ncclUint64:
      return ReduceTyped<uint64_t>(op, inputs, scalars, n, out, count);
    case ncclFloat16:
      return ReduceTyped<Fp16>(op, inputs, scalars, n, out, count);
    case ncclBfloat16:
      return ReduceTyped<Bf16>(op, inputs, scalars, n, out, count);
    case ncclFloat32:
      return ReduceTyped<float>(op, inputs, scalars, n, out, count);
    case ncclFloat64:
      return ReduceTyped<double>(op, inputs, scalars, n, out, count);
    default:
      return;
  }
}

}  // namespace

void Reduce(ncclDataType_t type, ncclRedOp_t op, const void* const* inputs, int n, void* out, size_t count) {
  ReduceAny(type, op, inputs, /*scalars=*/nullptr, n, out, count);
}

void ReducePreMulSum(ncclDataType_t type, const void* const* inputs, const void* const* scalars, int n,
                     void* out, size_t count) {
  ReduceAny(type, ncclSum, inputs, scalars, n, out, count);
}

float Bf16ToFloat(unsigned short bits) {
  const uint32_t word = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &word, sizeof(f));
  return f;
}

unsigned short FloatToBf16(float value) {
  uint32_t word;
  std::memcpy(&word, &value, sizeof(word));
  // A NaN stays a (quiet) NaN: rounding could carry its payload into the exponent.
  if (std::isnan(value)) return static_cast<unsigned short>((word >> 16) | 0x40);
  const uint32_t rounding = 0x7fff + ((word >> 16) & 1);
  return static_cast<unsigned short>((word + rounding) >> 16);
}

}  // namespace phos::sim::nccl
