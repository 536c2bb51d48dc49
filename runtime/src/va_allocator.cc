#include "phos/runtime/va_allocator.h"

#include <algorithm>
#include <iterator>

#include <fmt/core.h>

#include "phos/driver/cuda_check.h"
#include "phos/driver/physical_memory.h"
#include "phos/base/log.h"

namespace phos::runtime {
namespace {

uint64_t RoundUp(uint64_t v, uint64_t unit) { return (v + unit - 1) / unit * unit; }

// Carves `bytes` out of a free list (offset -> length) at the lowest offset that fits; false if
// nothing does.
bool CarveFirstFit(std::map<uint64_t, uint64_t>& free, uint64_t bytes, uint64_t* out) {
  for (auto it = free.begin(); it != free.end(); ++it) {
    if (it->second < bytes) continue;
    *out = it->first;
    uint64_t rest = it->second - bytes;
    uint64_t rest_at = it->first + bytes;
    free.erase(it);
    if (rest > 0) free.emplace(rest_at, rest);
    return true;
  }
  return false;
}

// Takes exactly [at, at + bytes) out of a free list; false if any of it is not free.
bool CarveAt(std::map<uint64_t, uint64_t>& free, uint64_t at, uint64_t bytes) {
  auto it = free.upper_bound(at);
  if (it == free.begin()) return false;
  --it;
  const uint64_t start = it->first;
  const uint64_t end = it->first + it->second;
  if (at + bytes > end) return false;
  free.erase(it);
  if (at > start) free.emplace(start, at - start);
  if (at + bytes < end) free.emplace(at + bytes, end - at - bytes);
  return true;
}

// Gives [at, at + bytes) back to a free list, merged with its neighbours.
void GiveBack(std::map<uint64_t, uint64_t>& free, uint64_t at, uint64_t bytes) {
  auto next = free.lower_bound(at);
  if (next != free.end() && next->first == at + bytes) {
    bytes += next->second;
    next = free.erase(next);
  }
  if (next != free.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == at) {
      prev->second += bytes;
      return;
    }
  }
  free.emplace(at, bytes);
}

}  // namespace

CUmemAllocationProp DeviceMemoryProp(int device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

Result<uint64_t> DeviceMemoryGranularity(driver::DriverTable& driver, int device, CUmemAllocationGranularity_flags flag) {
  const CUmemAllocationProp prop = DeviceMemoryProp(device);
  size_t granularity = 0;
  PHOS_CU_RETURN_IF_ERROR(driver.error_text(), driver.cuMemGetAllocationGranularity(&granularity, &prop, flag));
  return static_cast<uint64_t>(granularity);
}

InstanceAddressSpace::InstanceAddressSpace(driver::DriverTable* driver, CUdeviceptr base, uint64_t range_bytes,
                                           uint64_t granularity, int device)
    : driver_(driver), base_(base), range_bytes_(range_bytes), granularity_(granularity), device_(device) {
  free_.emplace(base_, range_bytes_);
}

Result<std::unique_ptr<InstanceAddressSpace>> InstanceAddressSpace::Reserve(driver::DriverTable* driver,
                                                                           const InstanceAddressSpaceOptions& options) {
  const driver::CuErrorText& text = driver->error_text();
  if (options.range_bytes == 0) return Status::InvalidArgument("instance address space: range of 0 bytes");
  PHOS_ASSIGN_OR_RETURN(const uint64_t granularity,
                        DeviceMemoryGranularity(*driver, options.device, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
  if (options.base % granularity != 0) {
    return Status::InvalidArgument(
        fmt::format("instance address space: base {:#x} is not a multiple of the granularity {}", options.base, granularity));
  }
  const uint64_t bytes = RoundUp(options.range_bytes, granularity);
  if (options.borrowed) {
    if (options.base == 0) return Status::InvalidArgument("instance address space: a borrowed range needs its base");
    auto space = std::unique_ptr<InstanceAddressSpace>(
        new InstanceAddressSpace(driver, options.base, bytes, granularity, options.device));
    space->borrowed_ = true;
    return space;
  }
  CUdeviceptr base = 0;
  CUresult r = driver->cuMemAddressReserve(&base, bytes, granularity, options.base, 0);
  if (r == CUDA_ERROR_OUT_OF_MEMORY) {
    return Status::OutOfMemory(fmt::format("instance address space: no free range of {} bytes", bytes));
  }
  PHOS_RETURN_IF_ERROR(driver::CuStatus(r, "cuMemAddressReserve", text).WithContext("instance address space"));
  if (options.base != 0 && base != options.base) {
    // The driver treats the requested address as a hint: a range elsewhere is no restore.
    driver->cuMemAddressFree(base, bytes);
    return Status::AlreadyExists(
        fmt::format("instance address space: [{:#x}, +{}) is taken (the driver offered {:#x})", options.base, bytes, base));
  }
  return std::unique_ptr<InstanceAddressSpace>(new InstanceAddressSpace(driver, base, bytes, granularity, options.device));
}

Result<std::unique_ptr<InstanceAddressSpace>> InstanceAddressSpace::Restore(driver::DriverTable* driver,
                                                                           const AddressSpaceState& state) {
  PHOS_ASSIGN_OR_RETURN(std::unique_ptr<InstanceAddressSpace> space,
                        Reserve(driver, {.range_bytes = state.range_bytes, .base = state.base, .device = state.device}));
  for (const SavedAllocation& a : state.allocations) {
    PHOS_RETURN_IF_ERROR(space->MapAt(a.address, a.bytes).WithContext("restore address space"));
  }
  return space;
}

InstanceAddressSpace::~InstanceAddressSpace() {
  if (released_) return;
  while (!mappings_.empty()) UnmapPhysical(mappings_.begin()->first, /*zeroed=*/false);
  if (borrowed_) return;
  Status s = driver::CuStatus(driver_->cuMemAddressFree(base_, range_bytes_), "cuMemAddressFree", driver_->error_text());
  if (!s.ok()) PHOS_LOG(Warn, "runtime", "instance address space {:#x}: {}", base_, s.message());
}

uint64_t InstanceAddressSpace::mapped_bytes() const {
  uint64_t total = 0;
  for (const auto& [address, m] : mappings_) total += m.bytes;
  return total;
}

Status InstanceAddressSpace::RangeFull(uint64_t bytes) const {
  return Status::OutOfMemory(fmt::format("instance address space [{:#x}, +{}): no room for {} bytes ({} mapped)", base_,
                                         range_bytes_, bytes, mapped_bytes()));
}

bool InstanceAddressSpace::TakeRange(CUdeviceptr address, uint64_t bytes) { return CarveAt(free_, address, bytes); }

void InstanceAddressSpace::GiveRange(CUdeviceptr address, uint64_t bytes) { GiveBack(free_, address, bytes); }

Status InstanceAddressSpace::MapPhysical(CUdeviceptr address, uint64_t bytes, bool shared) {
  const driver::CuErrorText& text = driver_->error_text();
  CUmemAllocationProp prop = DeviceMemoryProp(device_);
  CUmemGenericAllocationHandle handle = 0;
  PHOS_CU_RETURN_IF_ERROR(text, driver_->cuMemCreate(&handle, bytes, &prop, 0));
  if (CUresult r = driver_->cuMemMap(address, bytes, 0, handle, 0); r != CUDA_SUCCESS) {
    driver_->cuMemRelease(handle);
    return driver::CuStatus(r, "cuMemMap", text);
  }
  if (CUresult r = driver::SetDeviceAccess(*driver_, address, bytes, device_, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
      r != CUDA_SUCCESS) {
    driver_->cuMemUnmap(address, bytes);
    driver_->cuMemRelease(handle);
    return driver::CuStatus(r, "cuMemSetAccess", text);
  }
  Mapping m;
  m.bytes = bytes;
  m.handle = handle;
  m.shared = shared;
  if (shared) m.free.emplace(0, bytes);
  mappings_.emplace(address, std::move(m));
  return Status::Ok();
}

bool InstanceAddressSpace::DropShare(Mapping& m) const {
  if (m.shares == nullptr) return true;
  const bool last = m.shares->Drop(device_, m.content, m.handle);
  m.shares = nullptr;
  return last;
}

Status InstanceAddressSpace::ZeroAndRelease(CUmemGenericAllocationHandle handle, uint64_t bytes) {
  return driver::ZeroAndRelease(*driver_, handle, bytes, device_);
}

void InstanceAddressSpace::UnmapPhysical(CUdeviceptr address, bool zeroed) {
  auto it = mappings_.find(address);
  // The last mapping of a shared read-only allocation zeroes it: other instances' bytes.
  const bool shared = it->second.shares != nullptr;
  const bool owned = DropShare(it->second);
  const driver::CuErrorText& text = driver_->error_text();
  if (owned && !shared && !zeroed) {
    // A memset of device memory may still run when cuMemsetD8 returns: done before the unmap.
    Status z = driver::CuStatus(driver_->cuMemsetD8(address, 0, it->second.bytes), "cuMemsetD8", text);
    if (z.ok()) z = driver::CuStatus(driver_->cuCtxSynchronize(), "cuCtxSynchronize", text);
    if (!z.ok())
      PHOS_LOG(Warn, "runtime", "instance address space: mapping {:#x} released without zeroing: {}", address,
               z.message());
  }
  Status s = driver::CuStatus(driver_->cuMemUnmap(address, it->second.bytes), "cuMemUnmap", text);
  if (s.ok() && owned) {
    s = shared ? ZeroAndRelease(it->second.handle, it->second.bytes)
               : driver::CuStatus(driver_->cuMemRelease(it->second.handle), "cuMemRelease", text);
  }
  if (!s.ok()) PHOS_LOG(Warn, "runtime", "instance address space: mapping {:#x}: {}", address, s.message());
  GiveRange(address, it->second.bytes);
  mappings_.erase(it);
}

Status InstanceAddressSpace::ZeroAndUnmapAll() {
  const driver::CuErrorText& text = driver_->error_text();
  Status first = driver::CuStatus(driver_->cuCtxSynchronize(), "cuCtxSynchronize", text);
  // Shared read-only allocations other instances still map are left as they are; the last
  // mapping's are made writable to be zeroed like the rest.
  for (auto it = mappings_.begin(); it != mappings_.end();) {
    Mapping& m = it->second;
    if (m.shares == nullptr) {
      ++it;
    } else if (DropShare(m)) {
      Status s = driver::CuStatus(
          driver::SetDeviceAccess(*driver_, it->first, m.bytes, device_, CU_MEM_ACCESS_FLAGS_PROT_READWRITE),
          "cuMemSetAccess", text);
      if (first.ok() && !s.ok()) first = s.WithContext(fmt::format("shared mapping {:#x}", it->first));
      ++it;
    } else {
      Status s = driver::CuStatus(driver_->cuMemUnmap(it->first, m.bytes), "cuMemUnmap", text);
      if (first.ok() && !s.ok()) first = s.WithContext(fmt::format("shared mapping {:#x}", it->first));
      GiveRange(it->first, m.bytes);
      it = mappings_.erase(it);
    }
  }
  bool zeroed = true;
  for (const auto& [address, m] : mappings_) {
    Status s = driver::CuStatus(driver_->cuMemsetD8(address, 0, m.bytes), "cuMemsetD8", text);
    zeroed = zeroed && s.ok();
    if (first.ok() && !s.ok()) first = s.WithContext(fmt::format("zero mapping {:#x}", address));
  }
  // A memset of device memory may still run when cuMemsetD8 returns: it must be done before unmap.
  Status synced = driver::CuStatus(driver_->cuCtxSynchronize(), "cuCtxSynchronize", text);
  zeroed = zeroed && synced.ok();
  if (first.ok()) first = synced;
  while (!mappings_.empty()) UnmapPhysical(mappings_.begin()->first, zeroed);
  live_.clear();
  return first;
}

Status InstanceAddressSpace::UnmapAll(std::vector<ctxpool::TenantResources::Unmapped>* to_zero) {
  const driver::CuErrorText& text = driver_->error_text();
  // VMM mappings are not stream-ordered: the work that uses them ends first.
  Status first = driver::CuStatus(driver_->cuCtxSynchronize(), "cuCtxSynchronize", text);
  for (auto& [address, m] : mappings_) {
    const bool owned = DropShare(m);
    Status s = driver::CuStatus(driver_->cuMemUnmap(address, m.bytes), "cuMemUnmap", text);
    if (!s.ok()) {
      // Still mapped here: zeroed in place now, and the range not given back.
      if (owned) driver_->cuMemsetD8(address, 0, m.bytes);
      driver_->cuCtxSynchronize();
      if (first.ok()) first = s.WithContext(fmt::format("mapping {:#x}", address));
    } else {
      GiveRange(address, m.bytes);
    }
    if (owned) to_zero->push_back({m.handle, m.bytes, device_});
  }
  mappings_.clear();
  live_.clear();
  return first;
}

Result<CUdeviceptr> InstanceAddressSpace::Allocate(uint64_t bytes) {
  if (bytes == 0) return Status::InvalidArgument("instance address space: allocation of 0 bytes");
  if (bytes > range_bytes_) return RangeFull(bytes);
  return bytes >= granularity_ ? AllocateLarge(bytes) : AllocateSmall(bytes);
}

Result<CUdeviceptr> InstanceAddressSpace::AllocateLarge(uint64_t bytes) {
  const uint64_t reserved = RoundUp(bytes, granularity_);
  uint64_t address = 0;
  if (!CarveFirstFit(free_, reserved, &address)) return RangeFull(bytes);
  if (Status s = MapPhysical(address, reserved, /*shared=*/false); !s.ok()) {
    GiveRange(address, reserved);
    return s.WithContext(fmt::format("instance address space: allocation of {} bytes", bytes));
  }
  live_.emplace(address, Live{bytes, reserved, address});
  return address;
}

Result<CUdeviceptr> InstanceAddressSpace::AllocateSmall(uint64_t bytes) {
  const uint64_t reserved = RoundUp(bytes, kAlignment);
  for (auto& [granule, m] : mappings_) {
    uint64_t offset = 0;
    if (!m.shared || !CarveFirstFit(m.free, reserved, &offset)) continue;
    live_.emplace(granule + offset, Live{bytes, reserved, granule});
    return granule + offset;
  }
  uint64_t granule = 0;
  if (!CarveFirstFit(free_, granularity_, &granule)) return RangeFull(bytes);
  if (Status s = MapPhysical(granule, granularity_, /*shared=*/true); !s.ok()) {
    GiveRange(granule, granularity_);
    return s.WithContext(fmt::format("instance address space: allocation of {} bytes", bytes));
  }
  uint64_t offset = 0;
  CarveFirstFit(mappings_[granule].free, reserved, &offset);
  live_.emplace(granule + offset, Live{bytes, reserved, granule});
  return granule + offset;
}

Status InstanceAddressSpace::MapAt(CUdeviceptr address, uint64_t bytes) {
  if (bytes == 0) return Status::InvalidArgument("instance address space: allocation of 0 bytes");
  if (!Contains(address) || bytes > base_ + range_bytes_ - address) {
    return Status::InvalidArgument(fmt::format("instance address space [{:#x}, +{}): [{:#x}, +{}) is outside it", base_,
                                               range_bytes_, address, bytes));
  }
  if (bytes < granularity_) {
    if (address % kAlignment != 0) {
      return Status::InvalidArgument(fmt::format("instance address space: {:#x} is not {}-byte aligned", address, kAlignment));
    }
    return MapSmallAt(address, bytes);
  }
  if ((address - base_) % granularity_ != 0) {
    return Status::InvalidArgument(fmt::format("instance address space: an allocation of {} bytes at {:#x} must be {}-aligned",
                                               bytes, address, granularity_));
  }
  const uint64_t reserved = RoundUp(bytes, granularity_);
  if (!TakeRange(address, reserved)) {
    return Status::AlreadyExists(fmt::format("instance address space: [{:#x}, +{}) is taken", address, reserved));
  }
  if (Status s = MapPhysical(address, reserved, /*shared=*/false); !s.ok()) {
    GiveRange(address, reserved);
    return s.WithContext(fmt::format("instance address space: allocation at {:#x}", address));
  }
  live_.emplace(address, Live{bytes, reserved, address});
  return Status::Ok();
}

Status InstanceAddressSpace::MapSharedAt(CUdeviceptr address, uint64_t bytes,
                                         CUmemGenericAllocationHandle handle, SharedBuffers* shares,
                                         const std::string& content) {
  const driver::CuErrorText& text = driver_->error_text();
  const uint64_t reserved = RoundUp(bytes, granularity_);
  auto fail = [&](Status s) {
    // The memory is still mapped by the instances that hold the other references, unless they
    // all went meanwhile: then this reference was the last, and the handle is this space's.
    if (shares->Drop(device_, content, handle)) {
      if (Status z = ZeroAndRelease(handle, reserved); !z.ok())
        PHOS_LOG(Warn, "runtime", "instance address space: shared allocation for {:#x}: {}", address, z.message());
    }
    return s.WithContext(fmt::format("instance address space: shared allocation at {:#x}", address));
  };
  if (bytes < granularity_ || !Contains(address) || reserved > base_ + range_bytes_ - address ||
      (address - base_) % granularity_ != 0) {
    return fail(Status::InvalidArgument(
        fmt::format("[{:#x}, +{}) is not whole granules of the range", address, bytes)));
  }
  if (!TakeRange(address, reserved))
    return fail(Status::AlreadyExists(fmt::format("[{:#x}, +{}) is taken", address, reserved)));
  if (CUresult r = driver_->cuMemMap(address, reserved, 0, handle, 0); r != CUDA_SUCCESS) {
    GiveRange(address, reserved);
    return fail(driver::CuStatus(r, "cuMemMap", text));
  }
  if (CUresult r = driver::SetDeviceAccess(*driver_, address, reserved, device_, CU_MEM_ACCESS_FLAGS_PROT_READ);
      r != CUDA_SUCCESS) {
    driver_->cuMemUnmap(address, reserved);
    GiveRange(address, reserved);
    return fail(driver::CuStatus(r, "cuMemSetAccess", text));
  }
  Mapping m;
  m.bytes = reserved;
  m.handle = handle;
  m.shares = shares;
  m.content = content;
  mappings_.emplace(address, std::move(m));
  live_.emplace(address, Live{bytes, reserved, address});
  return Status::Ok();
}

bool InstanceAddressSpace::RegisterShared(CUdeviceptr address, SharedBuffers* shares,
                                          const std::string& content, ShareableMapping* out) {
  auto live = live_.find(address);
  auto it = mappings_.find(address);
  if (live == live_.end() || live->second.mapping != address || it == mappings_.end() || it->second.shared ||
      it->second.shares != nullptr) {
    return false;
  }
  if (!shares->Register(device_, content, it->second.handle, it->second.bytes)) return false;
  it->second.shares = shares;
  it->second.content = content;
  *out = {.address = address, .bytes = it->second.bytes, .device = device_, .handle = it->second.handle};
  return true;
}

void InstanceAddressSpace::ForgetShare(CUdeviceptr address) {
  if (auto it = mappings_.find(address); it != mappings_.end()) it->second.shares = nullptr;
}

Status InstanceAddressSpace::MakePrivate(CUdeviceptr address) {
  auto it = mappings_.find(address);
  if (it == mappings_.end() || it->second.shares == nullptr) {
    return Status::NotFound(fmt::format("instance address space: no shared mapping at {:#x}", address));
  }
  Mapping& m = it->second;
  const driver::CuErrorText& text = driver_->error_text();
  if (m.shares->ClaimSole(device_, m.content, m.handle)) {
    // Nobody else maps it: it becomes this space's own where it is, no copy needed.
    m.shares = nullptr;
    return driver::CuStatus(
               driver::SetDeviceAccess(*driver_, address, m.bytes, device_, CU_MEM_ACCESS_FLAGS_PROT_READWRITE),
               "cuMemSetAccess", text)
        .WithContext(fmt::format("instance address space: allocation at {:#x} made writable", address));
  }
  CUmemAllocationProp prop = DeviceMemoryProp(device_);
  CUmemGenericAllocationHandle copy = 0;
  PHOS_CU_RETURN_IF_ERROR(text, driver_->cuMemCreate(&copy, m.bytes, &prop, 0));
  // The copy is made through a staging address of its own, then mapped in place of the shared one.
  CUdeviceptr staging = 0;
  CUresult r = driver_->cuMemAddressReserve(&staging, m.bytes, 0, 0, 0);
  bool mapped = false;
  if (r == CUDA_SUCCESS) {
    r = driver_->cuMemMap(staging, m.bytes, 0, copy, 0);
    mapped = r == CUDA_SUCCESS;
  }
  if (r == CUDA_SUCCESS)
    r = driver::SetDeviceAccess(*driver_, staging, m.bytes, device_, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  if (r == CUDA_SUCCESS) r = driver_->cuCtxSynchronize();
  if (r == CUDA_SUCCESS) r = driver_->cuMemcpyDtoD(staging, address, m.bytes);
  if (r == CUDA_SUCCESS) r = driver_->cuCtxSynchronize();
  if (mapped) driver_->cuMemUnmap(staging, m.bytes);
  if (staging != 0) driver_->cuMemAddressFree(staging, m.bytes);
  if (r != CUDA_SUCCESS) {
    driver_->cuMemRelease(copy);
    return driver::CuStatus(r, "copy of a shared allocation", text)
        .WithContext(fmt::format("instance address space: private copy at {:#x}", address));
  }
  // The others may all have gone while the copy was made: then this was the last reference, and
  // the shared bytes are zeroed before the memory goes.
  const bool last = DropShare(m);
  r = driver_->cuMemUnmap(address, m.bytes);
  if (r != CUDA_SUCCESS) {
    driver_->cuMemRelease(copy);
  } else {
    if (last) {
      if (Status z = ZeroAndRelease(m.handle, m.bytes); !z.ok())
        PHOS_LOG(Warn, "runtime", "instance address space: shared allocation at {:#x}: {}", address, z.message());
    }
    m.handle = copy;  // the mapping's from now on, whatever follows
    r = driver_->cuMemMap(address, m.bytes, 0, copy, 0);
  }
  if (r == CUDA_SUCCESS)
    r = driver::SetDeviceAccess(*driver_, address, m.bytes, device_, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  if (r != CUDA_SUCCESS) {
    // The instance's buffer is unusable now; its calls fail and its end unmaps what is left.
    return driver::CuStatus(r, "remap of a private copy", text)
        .WithContext(fmt::format("instance address space: private copy at {:#x}", address));
  }
  return Status::Ok();
}

Status InstanceAddressSpace::MapSmallAt(CUdeviceptr address, uint64_t bytes) {
  const uint64_t reserved = RoundUp(bytes, kAlignment);
  const CUdeviceptr granule = base_ + (address - base_) / granularity_ * granularity_;
  if (address + reserved > granule + granularity_) {
    return Status::InvalidArgument(fmt::format("instance address space: [{:#x}, +{}) crosses a granule", address, reserved));
  }
  auto taken = [&] {
    return Status::AlreadyExists(fmt::format("instance address space: [{:#x}, +{}) is taken", address, reserved));
  };
  auto it = mappings_.find(granule);
  if (it == mappings_.end()) {
    // Free VA becomes a new shared granule; VA inside a large mapping is not free.
    if (!TakeRange(granule, granularity_)) return taken();
    if (Status s = MapPhysical(granule, granularity_, /*shared=*/true); !s.ok()) {
      GiveRange(granule, granularity_);
      return s.WithContext(fmt::format("instance address space: allocation at {:#x}", address));
    }
    it = mappings_.find(granule);
  }
  if (!it->second.shared || !CarveAt(it->second.free, address - granule, reserved)) return taken();
  live_.emplace(address, Live{bytes, reserved, granule});
  return Status::Ok();
}

Status InstanceAddressSpace::Free(CUdeviceptr address) {
  auto it = live_.find(address);
  if (it == live_.end()) {
    return Status::NotFound(fmt::format("instance address space: {:#x} is not the start of an allocation", address));
  }
  const Live live = it->second;
  live_.erase(it);
  Mapping& m = mappings_.at(live.mapping);
  if (m.shared) {
    GiveBack(m.free, address - live.mapping, live.reserved);
    const bool empty = m.free.size() == 1 && m.free.begin()->second == m.bytes;
    if (!empty) return Status::Ok();
  }
  UnmapPhysical(live.mapping, /*zeroed=*/false);
  return Status::Ok();
}

AddressSpaceState InstanceAddressSpace::Save() const {
  AddressSpaceState state{.base = base_, .range_bytes = range_bytes_, .device = device_, .allocations = {}};
  state.allocations.reserve(live_.size());
  for (const auto& [address, live] : live_) state.allocations.push_back({address, live.bytes});
  return state;
}

AddressSpaceRelease InstanceAddressSpace::Release() {
  AddressSpaceRelease out;
  if (released_) return out;
  // Other instances' shared mappings are unmapped here, not by the scrub: what this space's work
  // still reads of them must be done first (VMM mappings are not stream-ordered).
  const bool unmaps_shared =
      std::any_of(mappings_.begin(), mappings_.end(), [](const auto& am) { return am.second.shares != nullptr; });
  if (unmaps_shared) {
    if (CUresult r = driver_->cuCtxSynchronize(); r != CUDA_SUCCESS)
      PHOS_LOG(Warn, "runtime", "instance address space: cuCtxSynchronize before unmapping shared mappings: CUresult {}",
               static_cast<int>(r));
  }
  for (auto& [address, m] : mappings_) {
    if (m.shares != nullptr) {
      // The scrub zeroes what it is handed: only a last reference, made writable; others unmapped now.
      const bool last = DropShare(m);
      const CUresult r =
          last ? driver::SetDeviceAccess(*driver_, address, m.bytes, device_, CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
               : driver_->cuMemUnmap(address, m.bytes);
      if (r != CUDA_SUCCESS)
        PHOS_LOG(Warn, "runtime", "instance address space: shared mapping {:#x}: CUresult {}", address,
                 static_cast<int>(r));
      if (!last) continue;
    }
    out.mappings.push_back({address, m.bytes, m.handle});
  }
  if (!borrowed_) {
    out.range_base = base_;
    out.range_bytes = range_bytes_;
  }
  mappings_.clear();
  live_.clear();
  free_.clear();
  released_ = true;
  return out;
}

}  // namespace phos::runtime
