// The simulated devices' memory: one address space shared by all devices, linear allocations
// (cuMemAlloc), VMM reservations, physical allocations and mappings (cuMemAddressReserve,
// cuMemCreate, cuMemMap, cuMemSetAccess), per-device capacity (cuMemGetInfo), and the pointer
// checks that copies, memsets and launches make.
//
// Kernels run on the CPU and dereference device pointers directly, so device memory is host
// virtual memory: one large PROT_NONE reservation, inside which
//   - linear allocations are private anonymous read-write mappings, populated on first touch, so
//     an 80 GiB device costs only the pages actually written;
//   - VMM physical allocations are slices of one sparse memfd, which is what lets the same bytes
//     be mapped at several addresses, unmapped and mapped again with their content.
// Freed or unmapped ranges get a fresh PROT_NONE mapping, so a later stray access faults instead
// of reading stale data. Freed linear memory goes back to the kernel; a released physical
// allocation that was zeroed in whole (as a scrub leaves it) keeps its pages for the next one (up
// to DeviceMemoryOptions::retained_bytes), as a device's memory stays where it is: allocating host pages again for every restore would make the
// simulation's host, not the modelled link, the cost of loading gigabytes (cuMemCreate promises
// nothing about the content of new memory; phos zeroes what a tenant leaves before releasing it).
//
// The API layer validates contexts, devices, handles' properties and CUmemAccessDesc; this class
// provides the memory semantics and returns the CUresult the driver documents for each misuse.
// Thread-safe. CheckRange and FindAllocation take a shared lock and are O(log n) (plus the number
// of adjacent VMM mappings a range spans).
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "memory/range_allocator.h"
#include "phos/base/sanitizers.h"


namespace phos::sim {

// ThreadSanitizer confines mmap to its application ranges, where about 1 TiB is free on x86-64,
// so TSan builds reserve a smaller device address space by default.
#if defined(PHOS_THREAD_SANITIZER)
inline constexpr uint64_t kDefaultDeviceAddressSpace = 512ull << 30;
#else
inline constexpr uint64_t kDefaultDeviceAddressSpace = 8ull << 40;
#endif

struct DeviceMemoryOptions {
  // Capacity in bytes of each device, indexed by ordinal. Default: empty (no devices).
  std::vector<uint64_t> device_capacity;
  // Bytes of host address space reserved for the device address space of all devices; a
  // multiple of DeviceMemory::kGranularity. Reserving costs no memory. Default: 8 TiB (512 GiB
  // under ThreadSanitizer).
  uint64_t va_size = kDefaultDeviceAddressSpace;
  // Bytes of released (zeroed) physical memory whose host pages are kept for later allocations,
  // beyond the live allocations' pages; past this, a release gives its pages back to the kernel.
  uint64_t retained_bytes = 4ull << 30;
  // Bytes of physical memory whose host pages are allocated at creation, by a background thread,
  // so that the first allocations do not pay for them (at most va_size). Default: none.
  uint64_t prefault_bytes = 0;
  // Address at which the reservation should start, so that device addresses are the same in
  // every process (restored buffers come back at their old addresses); a multiple of
  // kGranularity, or 0 to let the kernel choose. When the range is taken (another DeviceMemory in
  // the process, or something else mapped there), and always under ThreadSanitizer (see
  // kHonoursPreferredBase), the kernel chooses and a warning is logged. Default: 0x200000000000
  // (32 TiB: above the ASan shadow, below the usual mmap area).
  uint64_t preferred_base = 0x200000000000ull;
};

// Access rights of a VMM mapping (CU_MEM_ACCESS_FLAGS_PROT_*). Ordered: each grants what the
// previous does. Linear allocations are always kReadWrite.
enum class Access { kNone, kRead, kReadWrite };

// The linear allocation or VMM mapping containing an address.
struct AllocationInfo {
  CUdeviceptr base = 0;
  // Linear: the bytes requested from Allocate. VMM: the size of the mapping.
  uint64_t size = 0;
  int device = -1;
  bool vmm = false;
  // Linear only: the owner given to Allocate.
  uint64_t owner = 0;
  // VMM only: the physical allocation mapped here and the offset into it of `base`.
  CUmemGenericAllocationHandle handle = 0;
  uint64_t offset = 0;
  Access access = Access::kNone;
};

// A live (not yet released) physical allocation.
struct PhysicalInfo {
  int device = -1;
  uint64_t size = 0;
  // Number of mappings of it that currently exist.
  int mappings = 0;
};

class DeviceMemory {
 public:
  // CU_MEM_ALLOC_GRANULARITY_MINIMUM and _RECOMMENDED on A100 and H100: VMM sizes, offsets and
  // addresses are multiples of it, and linear allocations of at least this size are aligned to it.
  static constexpr uint64_t kGranularity = 2ull << 20;
  // Alignment and charging unit of linear allocations below kGranularity (CUDA promises 256 B).
  static constexpr uint64_t kSmallAlignment = 4096;
  // Whether DeviceMemoryOptions::preferred_base is tried at all. ThreadSanitizer aborts the
  // process on an mmap outside its application ranges (0x200000000000 lies between them on
  // x86-64) rather than failing the call, so under TSan the kernel always chooses.
#if defined(PHOS_THREAD_SANITIZER)
  static constexpr bool kHonoursPreferredBase = false;
#else
  static constexpr bool kHonoursPreferredBase = true;
#endif

  // CUDA_ERROR_INVALID_VALUE for bad options, CUDA_ERROR_OUT_OF_MEMORY when the address space
  // cannot be reserved, CUDA_ERROR_OPERATING_SYSTEM when the backing memfd cannot be made.
  static CUresult Create(const DeviceMemoryOptions& options, std::unique_ptr<DeviceMemory>* out);
  // Unmaps the whole address space: every pointer into it becomes invalid.
  ~DeviceMemory();
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  CUdeviceptr base() const {
    return base_;
  }
  uint64_t size() const {
    return size_;
  }
  int device_count() const {
    return static_cast<int>(capacity_.size());
  }

  // ---- Linear allocations (cuMemAlloc, cuMemFree) ----
  // Allocates `bytes` (> 0) of device `device` owned by `owner` (a context id). Aligned to 4 KiB,
  // or 2 MiB when bytes >= 2 MiB; charged at that rounded size. CUDA_ERROR_INVALID_DEVICE,
  // CUDA_ERROR_OUT_OF_MEMORY (nothing changes).
  CUresult Allocate(int device, uint64_t owner, uint64_t bytes, CUdeviceptr* out);
  // Frees the allocation starting at ptr; CUDA_ERROR_INVALID_VALUE when ptr is not the base of a
  // live linear allocation (double free, interior or unknown pointer).
  CUresult Free(CUdeviceptr ptr);
  // Frees every linear allocation owned by `owner` (context destruction). VMM objects are
  // process-wide in CUDA and outlive contexts, so they are not touched.
  void FreeAllOwnedBy(uint64_t owner);
  // A module's variables (cuModuleLoadData): a linear allocation that no context owns, so that
  // neither cuMemFree (Free refuses it, as CUDA refuses freeing a module global) nor context
  // destruction releases it; FreeModuleStorage does, when the module itself is destroyed.
  CUresult AllocateModuleStorage(int device, uint64_t bytes, CUdeviceptr* out);
  // CUDA_ERROR_INVALID_VALUE when ptr is not the base of module storage.
  CUresult FreeModuleStorage(CUdeviceptr ptr);
  // cuMemGetInfo: free and total bytes of `device`. CUDA_ERROR_INVALID_DEVICE.
  CUresult Info(int device, uint64_t* free, uint64_t* total) const;
  // Bytes charged to `device` (linear and physical allocations); 0 for an unknown device.
  uint64_t UsedBytes(int device) const;
  // Bytes of `device`'s physical allocations (cuMemCreate) released since the start that may hold
  // bytes written (mapped writable, or copied into) since they were last zeroed in whole: what a
  // GPU's driver may hand to the next allocation in the process as it is. 0 for an unknown device.
  uint64_t ReleasedUnzeroedBytes(int device) const;
  // Bytes of host pages behind physical memory (live, kept for reuse, or allocated ahead), once
  // the allocation ahead (DeviceMemoryOptions::prefault_bytes) has finished.
  uint64_t HostPageBytes();
  // Whether physical memory has a second mapping (not under ThreadSanitizer, which lacks the
  // address space). Without one, nothing tells which pages are present: zeroing punches every
  // page out, and a zeroed release keeps none.
  bool HasSecondMapping() const { return alias_ != nullptr; }

  // ---- VMM (cuMemAddressReserve ... cuMemSetAccess) ----
  // Reserves `size` bytes (a multiple of kGranularity) aligned to `alignment` (0 = kGranularity;
  // otherwise a power of two, raised to kGranularity). A non-zero `requested` address (a multiple
  // of kGranularity) is honoured when that whole range is free, as phos needs for same-address
  // restore; otherwise it is a hint and any free range is returned, as in CUDA.
  // CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_OUT_OF_MEMORY (address space exhausted).
  CUresult ReserveAddress(uint64_t size, uint64_t alignment, CUdeviceptr requested, CUdeviceptr* out);
  // Frees a reservation given exactly as reserved; CUDA_ERROR_INVALID_VALUE otherwise, and also
  // while any part of it is still mapped.
  CUresult FreeAddress(CUdeviceptr ptr, uint64_t size);
  // cuMemCreate: `size` bytes (a multiple of kGranularity) of device `device`, charged now.
  // Handles are never 0 and never reused. CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_INVALID_DEVICE,
  // CUDA_ERROR_OUT_OF_MEMORY.
  CUresult CreatePhysical(int device, uint64_t size, CUmemGenericAllocationHandle* handle);
  // cuMemRelease: the handle becomes invalid at once; the memory and its capacity charge live
  // until its last mapping is unmapped. CUDA_ERROR_INVALID_VALUE for an unknown or released handle.
  CUresult ReleasePhysical(CUmemGenericAllocationHandle handle);
  // cuMemMap: maps [offset, offset + size) of `handle` at ptr, with no access until SetAccess.
  // The range must lie inside one reservation and not overlap an existing mapping; ptr, size and
  // offset are multiples of kGranularity and offset + size <= the handle's size. Otherwise, or
  // for an unknown or released handle, CUDA_ERROR_INVALID_VALUE.
  CUresult Map(CUdeviceptr ptr, uint64_t size, uint64_t offset, CUmemGenericAllocationHandle handle);
  // cuMemUnmap: [ptr, ptr + size) must be exactly one or more adjacent whole mappings (a
  // sub-range of a mapping cannot be unmapped); CUDA_ERROR_INVALID_VALUE otherwise. The range
  // returns to being reserved.
  CUresult Unmap(CUdeviceptr ptr, uint64_t size);
  // cuMemSetAccess: [ptr, ptr + size) must be exactly one or more adjacent whole mappings;
  // CUDA_ERROR_INVALID_VALUE otherwise (including any unmapped part).
  CUresult SetAccess(CUdeviceptr ptr, uint64_t size, Access access);
  // The live physical allocation `handle`; false for an unknown or released one.
  bool FindPhysical(CUmemGenericAllocationHandle handle, PhysicalInfo* out) const;

  // ---- Queries ----
  // True iff every byte of [ptr, ptr + bytes) is device memory granting `needed`: a single
  // linear allocation (within the bytes requested), or adjacent VMM mappings each with at least
  // `needed` access. Access::kNone asks only that the range be allocated or mapped. bytes == 0
  // checks the single address ptr. `device`, when given, receives the device of ptr.
  bool CheckRange(CUdeviceptr ptr, uint64_t bytes, Access needed, int* device = nullptr) const;
  // The linear allocation (within its requested bytes) or mapping containing ptr.
  bool FindAllocation(CUdeviceptr ptr, AllocationInfo* out) const;

  // ---- Guarded ranges (memory/guard_table.h) ----
  // Writes into [dst, dst + bytes) whatever its protection (phosSimWriteGuarded), leaving the
  // protection as it is: a linear allocation through /proc/self/mem, a VMM mapping through the
  // memfd (its pages present: through a second, read-write mapping of the whole file). The range must lie in one linear allocation (within its requested bytes) or one
  // read-write mapping: CUDA_ERROR_INVALID_VALUE otherwise; CUDA_ERROR_OPERATING_SYSTEM when the
  // write fails.
  CUresult WriteGuarded(CUdeviceptr dst, const void* src, uint64_t bytes) const;
  // Whether WriteGuarded would accept [dst, dst + bytes) now: bytes > 0 and the range inside one
  // linear allocation (within its requested bytes) or one read-write mapping.
  bool CanWriteGuarded(CUdeviceptr dst, uint64_t bytes) const;

  // ---- Zeroing ----
  // Zeroes [dst, dst + bytes) when it lies in one read-write VMM mapping or one linear allocation,
  // and no guarded range, without faulting pages in: a mapping's present pages through the memfd's
  // second mapping, the others punched out of the memfd (they read as zeros); a linear
  // allocation's whole pages dropped (its private anonymous pages then read as zeros), only the
  // partial pages at its ends written. What a memset of 0 does (the pool's scrub of a tenant's
  // gigabytes among them) without allocating host pages. False (nothing done) for any other range;
  // the caller then writes the zeros itself.
  bool ZeroMapped(CUdeviceptr dst, uint64_t bytes) const;

 private:
  // The owner of module storage: no context's id (those count up from 0).
  static constexpr uint64_t kModuleStorageOwner = UINT64_MAX;
  struct Linear {
    uint64_t bytes;     // as requested
    uint64_t reserved;  // rounded: the span taken from the address space and charged
    int device;
    uint64_t owner;
  };
  struct Physical {
    int device = 0;
    uint64_t size = 0;
    uint64_t file_offset = 0;  // of its slice in memfd_
    int mappings = 0;
    bool released = false;
    // Zeroed in whole (ZeroMapped) since write access to it was last granted and since its last
    // guarded write: what a scrub leaves. Only such memory keeps its pages once released; any
    // other release punches them out, so that nothing a tenant wrote reaches the next allocation
    // when a scrub did not run. Set and cleared under a shared lock.
    mutable std::atomic<bool> zeroed{false};
  };
  struct Mapping {
    uint64_t size;
    uint64_t offset;  // into the physical allocation
    CUmemGenericAllocationHandle handle;
    Access access;
  };
  using LinearMap = std::map<CUdeviceptr, Linear>;
  using MappingMap = std::map<CUdeviceptr, Mapping>;
  using PhysicalMap = std::unordered_map<CUmemGenericAllocationHandle, Physical>;

  DeviceMemory(const DeviceMemoryOptions& options, CUdeviceptr base, int memfd);

  // Puts a fresh PROT_NONE anonymous mapping over [addr, addr + len): the pages behind it go back
  // to the kernel (a shared file mapping stops referencing the file) and stray accesses fault.
  static bool Decommit(CUdeviceptr addr, uint64_t len);

  // The following require mu_ held exclusively (or shared, for the const ones).
  bool ValidDevice(int device) const {
    return device >= 0 && device < device_count();
  }
  bool Fits(int device, uint64_t bytes) const {
    return capacity_[device] - used_[device] >= bytes;
  }
  void FreeLinear(LinearMap::iterator it);
  // The linear allocation / mapping whose span contains ptr, or end().
  LinearMap::const_iterator LinearContaining(CUdeviceptr ptr) const;
  MappingMap::const_iterator MappingContaining(CUdeviceptr ptr) const;
  // WriteGuarded's range rule: the linear allocation holding [dst, dst + bytes), or else the
  // read-write mapping holding it (linear == linear_.end()); false when neither does.
  bool GuardedWriteTarget(CUdeviceptr dst, uint64_t bytes, LinearMap::const_iterator* linear,
                          MappingMap::const_iterator* mapping) const;
  // Checks that [ptr, ptr + size) is exactly adjacent whole mappings; returns the first one.
  bool WholeMappings(CUdeviceptr ptr, uint64_t size, MappingMap::iterator* first);
  // One mapping of `handle` went away.
  void DropMapping(CUmemGenericAllocationHandle handle);
  // Frees the physical memory once its handle is released and its last mapping is gone.
  void FreeIfUnreferenced(PhysicalMap::iterator it);
  // Writes `bytes` at `at` in memfd_ (from == nullptr: zeros): where its pages are present through
  // alias_; elsewhere with pwrite, which allocates pages far faster than faulting them in, and
  // zeros by punching the whole pages out (a page absent from memory may be swapped out, so it is
  // not taken for a hole). False when a write fails (errno set).
  bool WriteFile(uint64_t at, const void* from, uint64_t bytes) const;

  const std::vector<uint64_t> capacity_;
  const CUdeviceptr base_;
  const uint64_t size_;
  // Backs all physical allocations, each a kGranularity-aligned slice; one file rather than one
  // per allocation so that the number of allocations is not bounded by the process's fd limit
  // (1024 by default). Released slices keep their pages up to retained_bytes_, then are
  // hole-punched, which frees them.
  const int memfd_;
  // memfd_ mapped read-write in whole, for writes into guarded mappings and zeroing; nullptr when
  // the address space could not be had (WriteFile then uses pwrite throughout).
  char* alias_ = nullptr;
  const uint64_t retained_bytes_;
  std::thread prefault_;  // allocates options.prefault_bytes of memfd_'s pages
  std::once_flag prefault_joined_;
  void JoinPrefault() {
    std::call_once(prefault_joined_, [this] {
      if (prefault_.joinable()) prefault_.join();
    });
  }

  mutable std::shared_mutex mu_;
  std::vector<uint64_t> used_;
  std::vector<uint64_t> released_unzeroed_;  // per device, ReleasedUnzeroedBytes
  uint64_t used_physical_ = 0;  // bytes of live physical allocations, all devices
  RangeAllocator va_;
  RangeAllocator file_space_;
  LinearMap linear_;
  std::map<CUdeviceptr, uint64_t> reservations_;  // base -> size
  MappingMap mappings_;
  // Holds released handles too until their last mapping goes, so every mapping's handle is here.
  PhysicalMap physical_;
  CUmemGenericAllocationHandle next_handle_ = 1;
};

}  // namespace phos::sim
