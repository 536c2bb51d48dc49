#include "blas/operand_ranges.h"

#include <algorithm>

#include <fmt/format.h>

namespace phos::sim::blas {

bool OperandRanges::AddBatch(const char* what, const void* base, int64_t batch, int64_t stride, int64_t rows,
                             int64_t cols, int64_t ld, uint64_t element_size, Access access) {
  if (batch <= 0 || rows <= 0 || cols <= 0) return true;
  // A GPU's kernel faults on an element not aligned to its size; the call is refused instead, and
  // simgpu's routines never load a misaligned element (undefined behaviour in C++). The alignment
  // is the element's power of two up to 16: an "element" of a byte count (a workspace) needs 16
  // at most.
  const uint64_t align = std::min<uint64_t>(element_size & (~element_size + 1), 16);
  if (align > 1 && reinterpret_cast<uintptr_t>(base) % align != 0) return false;
  // Elements spanned: (cols - 1) * ld + rows for one matrix, plus |(batch - 1) * stride| from the
  // first entry to the last; the lowest entry is the last one when the stride is negative. Then
  // bytes and the start address. Any overflow, or a start below address 0, means the range cannot
  // be device memory.
  int64_t elements = 0;
  int64_t gap = 0;
  int64_t start = 0;
  int64_t ptr = 0;
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(cols - 1, ld, &elements) || __builtin_add_overflow(elements, rows, &elements) ||
      __builtin_mul_overflow(batch - 1, stride, &gap) || gap == INT64_MIN ||
      __builtin_add_overflow(elements, gap < 0 ? -gap : gap, &elements) ||
      __builtin_mul_overflow(static_cast<uint64_t>(elements), element_size, &bytes) ||
      __builtin_mul_overflow(std::min<int64_t>(gap, 0), static_cast<int64_t>(element_size), &start) ||
      __builtin_add_overflow(static_cast<int64_t>(reinterpret_cast<uintptr_t>(base)), start, &ptr) ||
      ptr < 0) {
    return false;
  }
  ranges_.push_back({what, static_cast<uint64_t>(ptr), bytes, access});
  return true;
}

bool OperandRanges::AddVector(const char* what, const void* base, int64_t count, int64_t inc,
                              uint64_t element_size, Access access) {
  // A vector is a 1 x count matrix whose columns are |inc| apart.
  return AddMatrix(what, base, 1, count, inc < 0 ? -inc : inc, element_size, access);
}

const OperandRange* OperandRanges::FirstInvalid(const DeviceAccess& device, bool readable_only) const {
  for (const OperandRange& r : ranges_) {
    const Access needed = readable_only ? Access::kRead : r.access;
    if (!device.CheckRange(r.ptr, r.bytes, needed, /*device=*/nullptr)) return &r;
  }
  return nullptr;
}

std::string OperandRanges::Describe(const OperandRange& range) {
  return fmt::format("operand {}: [{:#x}, +{} bytes) is not {}device memory", range.what, range.ptr,
                     range.bytes, range.access == Access::kReadWrite ? "writable " : "");
}

}  // namespace phos::sim::blas
