// The device memory a cuBLAS call reads and writes, as byte ranges computed from its dimensions,
// leading dimensions, increments and strides. Checked when the call is made (a bad operand is
// CUBLAS_STATUS_INVALID_VALUE and nothing runs) and again when the op runs, so that memory freed
// in between fails the op with CUDA_ERROR_ILLEGAL_ADDRESS instead of faulting inside OpenBLAS.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "device/device_access.h"

namespace phos::sim::blas {

struct OperandRange {
  const char* what = "";  // "A", "B", "C", "x", "y"
  uint64_t ptr = 0;
  uint64_t bytes = 0;
  Access access = Access::kRead;
};

class OperandRanges {
 public:
  // A column-major rows x cols matrix with leading dimension ld (>= rows) at `base`. Nothing is
  // added when rows or cols is 0. False when the extent overflows the address space (it cannot be
  // valid memory) or `base` is not aligned to element_size's largest power-of-two factor, at most
  // 16.
  bool AddMatrix(const char* what, const void* base, int64_t rows, int64_t cols, int64_t ld,
                 uint64_t element_size, Access access) {
    return AddBatch(what, base, /*batch=*/1, /*stride=*/0, rows, cols, ld, element_size, access);
  }
  // `batch` such matrices, entry e at `base` + e * `stride` elements (a strided batch), as one
  // range: from the lowest entry's first byte to the highest entry's last (phos::MatrixSpan, which
  // phosd's checks of a record use too). One range whatever the count, so a tenant's batch of
  // 2^31 entries at stride 0 costs what one matrix does. Where it differs from a GPU: the gaps
  // between entries must be device memory as well (a GPU reads only the entries).
  bool AddBatch(const char* what, const void* base, int64_t batch, int64_t stride, int64_t rows, int64_t cols,
                int64_t ld, uint64_t element_size, Access access);
  // A vector of `count` elements spaced |inc| apart (BLAS: for inc < 0 too, base is the lowest
  // address).
  bool AddVector(const char* what, const void* base, int64_t count, int64_t inc, uint64_t element_size,
                 Access access);

  // The first range that is not device memory granting its access, or nullptr. With
  // `readable_only`, a range to be written need only be readable: what the enqueue checks, since a
  // GPU's write to memory mapped read-only faults when the kernel runs, not when it is enqueued.
  const OperandRange* FirstInvalid(const DeviceAccess& device, bool readable_only = false) const;
  // "operand A: [0x..., +N bytes) is not device memory ..." for logs.
  static std::string Describe(const OperandRange& range);

 private:
  std::vector<OperandRange> ranges_;
};

}  // namespace phos::sim::blas
