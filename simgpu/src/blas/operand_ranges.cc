#include "blas/operand_ranges.h"

#include <algorithm>
#include <optional>

#include <fmt/format.h>

#include "phos/base/strided_span.h"

namespace phos::sim::blas {

bool OperandRanges::AddBatch(const char* what, const void* base, int64_t batch, int64_t stride, int64_t rows,
                             int64_t cols, int64_t ld, uint64_t element_size, Access access) {
  if (batch <= 0 || rows <= 0 || cols <= 0) return true;
  // A GPU's kernel faults on an element not aligned to its size; the call is refused instead, and
  // simgpu's routines never load a misaligned element (undefined behaviour in C++). The alignment
  // is the element's power of two up to 16: an "element" of a byte count (a workspace) needs 16
  // at most. A stride keeps every entry as aligned as the first.
  const uint64_t align = std::min<uint64_t>(element_size & (~element_size + 1), 16);
  if (align > 1 && reinterpret_cast<uintptr_t>(base) % align != 0) return false;
  const std::optional<StridedSpan> span =
      MatrixSpan(reinterpret_cast<uintptr_t>(base), rows, cols, ld, element_size, batch, stride);
  if (!span) return false;
  ranges_.push_back({what, span->ptr, span->bytes, access});
  return true;
}

bool OperandRanges::AddVector(const char* what, const void* base, int64_t count, int64_t inc,
                              uint64_t element_size, Access access) {
  // A vector is a 1 x count matrix whose columns are |inc| apart.
  if (inc == INT64_MIN) return false;
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
