#include "memory/range_allocator.h"

#include <iterator>

namespace phos::sim {

RangeAllocator::RangeAllocator(uint64_t base, uint64_t size) : base_(base), size_(size), free_bytes_(size) {
  if (size > 0) free_.emplace(base, size);
}

bool RangeAllocator::Allocate(uint64_t size, uint64_t alignment, uint64_t* out) {
  if (size == 0 || alignment == 0 || (alignment & (alignment - 1)) != 0) return false;
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    const uint64_t start = it->first;
    const uint64_t end = start + it->second;
    const uint64_t aligned = (start + alignment - 1) & ~(alignment - 1);
    if (aligned < start || aligned >= end) continue;  // wrapped, or alignment skips the range
    if (end - aligned < size) continue;
    Take(it, aligned, size);
    *out = aligned;
    return true;
  }
  return false;
}

bool RangeAllocator::AllocateAt(uint64_t addr, uint64_t size) {
  if (size == 0 || addr + size < addr) return false;
  auto it = free_.upper_bound(addr);
  if (it == free_.begin()) return false;
  --it;
  if (addr + size > it->first + it->second) return false;
  Take(it, addr, size);
  return true;
}

void RangeAllocator::Release(uint64_t addr, uint64_t size) {
  if (size == 0) return;
  uint64_t start = addr;
  uint64_t end = addr + size;
  auto next = free_.lower_bound(addr);
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      free_.erase(prev);
    }
  }
  if (next != free_.end() && next->first == end) {
    end += next->second;
    free_.erase(next);
  }
  free_.emplace(start, end - start);
  free_bytes_ += size;
}

bool RangeAllocator::IsFree(uint64_t addr, uint64_t size) const {
  if (addr + size < addr) return false;
  auto it = free_.upper_bound(addr);
  if (it == free_.begin()) return false;
  --it;
  return addr + size <= it->first + it->second;
}

void RangeAllocator::Take(FreeMap::iterator it, uint64_t addr, uint64_t size) {
  const uint64_t start = it->first;
  const uint64_t end = start + it->second;
  free_.erase(it);
  if (addr > start) free_.emplace(start, addr - start);
  if (addr + size < end) free_.emplace(addr + size, end - (addr + size));
  free_bytes_ -= size;
}

}  // namespace phos::sim
