// An instance's device address space (docs/design.md D5, issue 6 "same addresses"): one VMM reservation
// per instance, from which every allocation of the instance is carved, so that a snapshot's
// buffers can be mapped back at the very addresses the function holds in its CPU state.
//
//   auto space = InstanceAddressSpace::Reserve(driver, {.range_bytes = 64ull << 30});
//   Result<CUdeviceptr> p = (*space)->Allocate(4096);   // sub-allocated in a shared granule
//   AddressSpaceState saved = (*space)->Save();          // live allocations: address, bytes
//   auto again = InstanceAddressSpace::Restore(driver, saved);  // same range, same addresses
//
// Allocations of at least one granule (2 MiB on NVIDIA's drivers and simgpu) get their own
// granule-rounded physical allocation (cuMemCreate + cuMemMap + cuMemSetAccess); smaller ones are
// carved, 256-byte aligned as cudaMalloc promises, out of shared granules. Freed ranges are
// reused; a shared granule whose allocations are all freed is unmapped and released.
//
// Not thread-safe: a session's executor thread is its only user. Driver calls need no current
// context (VMM reservations and physical allocations are per process and device).
#pragma once

#include <cuda.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "phos/base/status.h"
#include "phos/ctxpool/context_pool.h"
#include "phos/driver/driver_table.h"
#include "phos/runtime/shared_buffers.h"

namespace phos::runtime {

struct InstanceAddressSpaceOptions {
  // Bytes of address space reserved for the instance, rounded up to the granularity. Its
  // allocations, granule-rounded for large ones, must fit in it. Default: 64 GiB.
  uint64_t range_bytes = 64ull << 30;
  // 0: the driver picks the range. Otherwise the range must start exactly here (restore), or
  // Reserve fails with AlreadyExists. Default: 0.
  CUdeviceptr base = 0;
  // The node device whose memory backs the allocations. Default: 0.
  int device = 0;
  // [base, base + range_bytes) is already reserved by the caller (a slot of the API server's arena
  // of instance ranges): it is used as it is, and neither the destructor nor Release frees it
  // (Release reports range_bytes 0). Requires a base. Default: false.
  bool borrowed = false;
};

// One live allocation as the application sees it: the address it was given and the bytes it
// asked for.
struct SavedAllocation {
  CUdeviceptr address = 0;
  uint64_t bytes = 0;
  bool operator==(const SavedAllocation&) const = default;
};

struct AddressSpaceState {
  CUdeviceptr base = 0;
  uint64_t range_bytes = 0;
  int device = 0;
  std::vector<SavedAllocation> allocations;  // by address
};

// What the context pool's scrub must undo once an address space is handed over (ctxpool's
// TenantResources::mappings and address_ranges take exactly this).
struct AddressSpaceRelease {
  struct Mapping {
    CUdeviceptr base = 0;
    uint64_t bytes = 0;
    CUmemGenericAllocationHandle handle = 0;
  };
  std::vector<Mapping> mappings;
  CUdeviceptr range_base = 0;
  uint64_t range_bytes = 0;
};

// Device memory as phos maps it with the VMM calls: pinned, on `device`.
CUmemAllocationProp DeviceMemoryProp(int device);
// The driver's granularity for that memory (`flag`: minimum or recommended).
Result<uint64_t> DeviceMemoryGranularity(driver::DriverTable& driver, int device, CUmemAllocationGranularity_flags flag);

class InstanceAddressSpace {
 public:
  // Sub-allocation alignment: what cudaMalloc guarantees.
  static constexpr uint64_t kAlignment = 256;

  // Reserves the range. InvalidArgument for a zero size or a base that is not granule-aligned;
  // AlreadyExists when a requested base cannot be had; OutOfMemory when no range that large is free.
  static Result<std::unique_ptr<InstanceAddressSpace>> Reserve(driver::DriverTable* driver,
                                                               const InstanceAddressSpaceOptions& options);
  // Reserves the saved range at its saved base and maps every saved allocation at its address.
  static Result<std::unique_ptr<InstanceAddressSpace>> Restore(driver::DriverTable* driver, const AddressSpaceState& state);
  // Unmaps and releases every mapping and frees the range, unless Release() handed them over.
  ~InstanceAddressSpace();
  InstanceAddressSpace(const InstanceAddressSpace&) = delete;
  InstanceAddressSpace& operator=(const InstanceAddressSpace&) = delete;

  // A new allocation of `bytes` (> 0). OutOfMemory (naming the range) when the range has no room
  // or the device no memory.
  Result<CUdeviceptr> Allocate(uint64_t bytes);
  // An allocation of `bytes` at exactly `address` (restore). InvalidArgument outside the range
  // or, for a granule or more, at an address that is not granule-aligned, or not 256-byte aligned;
  // AlreadyExists when any of it is taken.
  Status MapAt(CUdeviceptr address, uint64_t bytes);
  // Read-only buffers shared between instances (docs/design.md D14, shared_buffers.h). An
  // allocation of `bytes` at `address` (granule-aligned, a granule or more) mapped read-only from
  // `handle`, `content`'s resident allocation in `shares`, whose reference the caller took
  // (SharedBuffers::Acquire): unmapping it drops that reference instead of releasing the memory.
  // On error the reference is dropped.
  Status MapSharedAt(CUdeviceptr address, uint64_t bytes, CUmemGenericAllocationHandle handle,
                     SharedBuffers* shares, const std::string& content);
  // Registers the allocation at `address` (MapAt's, a granule or more, not yet loaded) as
  // `content`'s shared allocation (SharedBuffers::Register); its mapping's bytes and handle, for
  // the caller to map it read-only once loaded. False when it cannot be shared (sub-allocated, or
  // the content has an allocation already): it stays private.
  struct ShareableMapping {
    CUdeviceptr address = 0;
    uint64_t bytes = 0;
    int device = 0;
    CUmemGenericAllocationHandle handle = 0;  // the registered allocation (SharedBuffers' identity of it)
  };
  bool RegisterShared(CUdeviceptr address, SharedBuffers* shares, const std::string& content,
                      ShareableMapping* out);
  // The shared allocation at `address` was withdrawn before anyone else mapped it
  // (SharedBuffers::Withdraw): it is this space's own again.
  void ForgetShare(CUdeviceptr address);
  // Copy-on-write: the allocation at `address`, mapped from a shared one, becomes a private copy
  // mapped read-write at the same address, and the shared reference is dropped; when no other
  // instance maps it, it is made read-write where it is instead (no copy). Waits for the
  // context's work (a context of the device must be current): VMM mappings are not
  // stream-ordered, so what reads the old mapping must be done before it goes. NotFound when
  // `address` is not a shared mapping.
  Status MakePrivate(CUdeviceptr address);
  // Frees the allocation that starts at `address`; NotFound otherwise. Memory that goes back to
  // the driver is zeroed first (a context of the device must be current; it waits for the
  // device): the driver may hand it to another tenant's allocation in this process as it is.
  Status Free(CUdeviceptr address);
  // The live allocations, by address.
  AddressSpaceState Save() const;
  // Hands every mapping and the range to the caller (the context pool's scrub zeroes, unmaps,
  // releases and frees them); the space is empty and inert afterwards. Mappings of shared
  // allocations other instances still map are unmapped here, after waiting for the context's work
  // (a context of the device must be current).
  AddressSpaceRelease Release();

  // Zeroes every mapping (a context of the device must be current; it waits for the device), then
  // unmaps and releases them: for a borrowed range, which its owner hands to the next instance at
  // once, so the pool's deferred scrub cannot do it. The space stays usable (empty).
  Status ZeroAndUnmapAll();
  // The same, with the zeroing left to the caller: waits for the context's work, unmaps every
  // mapping and appends the physical memory this space must end to `to_zero` (zeroed through an
  // address of its own, then released: ctxpool's TenantResources::unmapped). Shared allocations
  // other instances still map are only unmapped. The space stays usable (empty).
  Status UnmapAll(std::vector<ctxpool::TenantResources::Unmapped>* to_zero);
  bool borrowed() const { return borrowed_; }
  CUdeviceptr base() const { return base_; }
  uint64_t range_bytes() const { return range_bytes_; }
  uint64_t granularity() const { return granularity_; }
  int device() const { return device_; }
  bool Contains(CUdeviceptr address) const { return address >= base_ && address - base_ < range_bytes_; }
  size_t allocation_count() const { return live_.size(); }
  // Granule-rounded mappings currently held (shared granules and large allocations).
  size_t mapping_count() const { return mappings_.size(); }
  uint64_t mapped_bytes() const;

 private:
  struct Mapping {
    uint64_t bytes = 0;
    CUmemGenericAllocationHandle handle = 0;
    bool shared = false;                  // a granule of sub-allocations
    std::map<uint64_t, uint64_t> free;    // shared: free offset -> length inside the granule
    // A read-only buffer's allocation registered in `shares` as `content`: unmapping drops a
    // reference, and only the last one zeroes and releases the memory.
    SharedBuffers* shares = nullptr;
    std::string content;
  };
  struct Live {
    uint64_t bytes = 0;          // as asked
    uint64_t reserved = 0;       // as carved (256- or granule-rounded)
    CUdeviceptr mapping = 0;     // the mapping that holds it
  };

  InstanceAddressSpace(driver::DriverTable* driver, CUdeviceptr base, uint64_t range_bytes, uint64_t granularity, int device);
  // Creates, maps and opens a physical allocation of `bytes` at `address` (a free VA range).
  Status MapPhysical(CUdeviceptr address, uint64_t bytes, bool shared);
  // Unmaps and releases the mapping at `address`, zeroing what is released first unless `zeroed`
  // says the caller did (a context of the device must be current for that; it waits for the
  // device). Released unzeroed when the zeroing fails, logged: kept, it would be lost for good.
  void UnmapPhysical(CUdeviceptr address, bool zeroed);
  // Zeroes `bytes` of `handle`, mapped nowhere in this space (through a staging mapping, waiting
  // for it), then releases it: how the last reference to a shared allocation ends it (D14).
  Status ZeroAndRelease(CUmemGenericAllocationHandle handle, uint64_t bytes);
  // For a mapping of a shared allocation: drops its reference; true when the memory is this
  // space's to zero and release (a private mapping, or the last reference).
  bool DropShare(Mapping& m) const;
  // Takes [address, address + bytes) out of the free VA ranges; false if any of it is not free.
  bool TakeRange(CUdeviceptr address, uint64_t bytes);
  void GiveRange(CUdeviceptr address, uint64_t bytes);
  Result<CUdeviceptr> AllocateLarge(uint64_t bytes);
  Result<CUdeviceptr> AllocateSmall(uint64_t bytes);
  Status MapSmallAt(CUdeviceptr address, uint64_t bytes);
  Status RangeFull(uint64_t bytes) const;

  driver::DriverTable* driver_;
  bool borrowed_ = false;
  CUdeviceptr base_;
  uint64_t range_bytes_;
  uint64_t granularity_;
  int device_;
  bool released_ = false;
  std::map<uint64_t, uint64_t> free_;           // unmapped VA: address -> length (coalesced)
  std::map<CUdeviceptr, Mapping> mappings_;     // address -> mapping
  std::map<CUdeviceptr, Live> live_;            // allocation address -> allocation
};

}  // namespace phos::runtime
