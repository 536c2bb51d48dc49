// Bytes the store benchmarks write: incompressible (zstd keeps none of them) and cheap to make,
// any range regenerable from its seed and offset, so a benchmark checks what it reads back without
// keeping a copy.
#pragma once

#include <cstddef>
#include <cstdint>

namespace phos::bench {

// Fills `size` bytes (a multiple of 8) at `dst` with the bytes at `offset` of stream `seed`.
inline void FillIncompressible(uint64_t seed, uint64_t offset, void* dst, size_t size) {
  auto* p = static_cast<uint64_t*>(dst);
  for (size_t i = 0; i < size / 8; ++i) {
    uint64_t x = seed ^ ((offset / 8 + i) * 0x9e3779b97f4a7c15ull);
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    p[i] = x;
  }
}

}  // namespace phos::bench
