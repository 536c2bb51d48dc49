// Pinned host memory: the ranges allocated by cuMemHostAlloc and registered by
// cuMemHostRegister. The copy engines ask IsPinned() to choose between the pinned and the
// pageable transfer rate of the device profile.
//
// Pages are not actually locked (no mlock): this host has 24 GiB shared by several simulated
// devices and pinned arenas of several GiB, and what simgpu models of pinning is the copy rate,
// not residency.
//
// Thread-safe; IsPinned takes a shared lock and is O(log n).
#pragma once

#include <cuda.h>

#include <cstdint>
#include <map>
#include <shared_mutex>

namespace phos::sim {

struct PinnedRange {
  void* base = nullptr;
  uint64_t size = 0;
  // As given to Allocate (CU_MEMHOSTALLOC_*) or Register (CU_MEMHOSTREGISTER_*).
  unsigned int flags = 0;
  // True for memory from Allocate, false for a range registered by Register.
  bool allocated = false;
};

class HostMemory {
 public:
  HostMemory() = default;
  // Unmaps what Allocate mapped and is still live.
  ~HostMemory();
  HostMemory(const HostMemory&) = delete;
  HostMemory& operator=(const HostMemory&) = delete;

  // cuMemHostAlloc: `size` (> 0) bytes, page-aligned and zeroed. CUDA_ERROR_INVALID_VALUE,
  // CUDA_ERROR_OUT_OF_MEMORY.
  CUresult Allocate(uint64_t size, unsigned int flags, void** out);
  // cuMemFreeHost: ptr must be the base of a live Allocate; CUDA_ERROR_INVALID_VALUE otherwise.
  CUresult Free(void* ptr);
  // cuMemHostRegister: CUDA_ERROR_INVALID_VALUE for a null ptr, size 0 or a range that wraps;
  // CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED when it overlaps any pinned range (registered or
  // allocated).
  CUresult Register(void* ptr, uint64_t size, unsigned int flags);
  // cuMemHostUnregister: ptr must be the base of a registered range;
  // CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED otherwise, CUDA_ERROR_INVALID_VALUE for null.
  CUresult Unregister(void* ptr);

  // True iff [ptr, ptr + bytes) lies inside one pinned range (bytes == 0: the address ptr).
  bool IsPinned(const void* ptr, uint64_t bytes) const;
  // The pinned range containing ptr (cuMemHostGetFlags, pointer attributes).
  bool Find(const void* ptr, PinnedRange* out) const;

 private:
  using RangeMap = std::map<uintptr_t, PinnedRange>;
  RangeMap::const_iterator Containing(uintptr_t addr) const;

  mutable std::shared_mutex mu_;
  RangeMap ranges_;  // disjoint, keyed by base address
};

}  // namespace phos::sim
