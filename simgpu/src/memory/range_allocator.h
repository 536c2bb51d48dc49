// First-fit allocator of aligned sub-ranges of one numeric range. simgpu uses it twice: for the
// device virtual address space (linear allocations and VMM reservations share it, as they share
// one address space on a GPU) and for offsets in the file that backs VMM physical memory.
//
// Not thread-safe: its owner serialises calls.
#pragma once

#include <cstdint>
#include <map>

namespace phos::sim {

class RangeAllocator {
 public:
  RangeAllocator(uint64_t base, uint64_t size);

  // Takes the lowest free range of `size` bytes starting at a multiple of `alignment` (a power
  // of two). False when size is 0 or no free range fits.
  bool Allocate(uint64_t size, uint64_t alignment, uint64_t* out);
  // Takes exactly [addr, addr + size) if all of it is free.
  bool AllocateAt(uint64_t addr, uint64_t size);
  // Gives back a range obtained from Allocate/AllocateAt (or a part of one).
  void Release(uint64_t addr, uint64_t size);

  bool IsFree(uint64_t addr, uint64_t size) const;
  uint64_t free_bytes() const { return free_bytes_; }
  uint64_t base() const { return base_; }
  uint64_t size() const { return size_; }

 private:
  using FreeMap = std::map<uint64_t, uint64_t>;
  // Removes [addr, addr + size) from the free range `it` that contains it.
  void Take(FreeMap::iterator it, uint64_t addr, uint64_t size);

  uint64_t base_;
  uint64_t size_;
  // start -> length. Ranges are disjoint and never adjacent: Release coalesces, so a request
  // fits somewhere iff it fits inside a single entry.
  FreeMap free_;
  uint64_t free_bytes_;
};

}  // namespace phos::sim
