// The bytes a strided operand spans: a column-major rows x cols matrix with leading dimension ld
// (elements), `batch` of them `stride` elements apart, at `base`, as BLAS lays operands out. Both
// sides of a BLAS call compute it here, so that they agree on every operand: phosd's checks of a
// tenant's record and its read set (runtime/src/blas_operands.cc), and simgpu's cuBLAS
// (simgpu/src/blas/operand_ranges.cc). Plain arithmetic on hostile numbers: every product and sum
// is checked.
#pragma once

#include <cstdint>
#include <optional>

namespace phos {

struct StridedSpan {
  uint64_t ptr = 0;    // the lowest byte spanned
  uint64_t bytes = 0;  // from there
};

// The span from the lowest entry's first element to the highest entry's last: with a negative
// stride the last entry is the lowest, below `base`. {base, 0} when rows, cols or batch is not
// positive (nothing is touched); ld below rows is the caller's to refuse. nullopt when the span
// cannot be memory: a negative ld, arithmetic that overflows, a start below address 0 or an end
// past the last address (2^64 - 1).
std::optional<StridedSpan> MatrixSpan(uint64_t base, int64_t rows, int64_t cols, int64_t ld, uint64_t element_bytes,
                                      int64_t batch = 1, int64_t stride = 0);

// A vector of n elements |inc| apart: BLAS stores it from `base` up whatever inc's sign (a 1 x n
// matrix whose columns are |inc| apart; inc 0 is one element, read n times).
std::optional<StridedSpan> VectorSpan(uint64_t base, int64_t n, int64_t inc, uint64_t element_bytes);

}  // namespace phos
