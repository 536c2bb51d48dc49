// Address space, linear allocations and queries. The VMM calls are in device_memory_vmm.cc.
#include "memory/device_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <iterator>
#include <mutex>
#include <system_error>

#include "memory/guard_table.h"
#include "phos/base/log.h"

namespace phos::sim {
namespace {

constexpr int kReserveFlags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;

uint64_t AlignUp(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) & ~(alignment - 1);
}

// Reserves `size` bytes at `preferred` or, failing that, wherever the kernel puts them (aligned
// to kGranularity by over-reserving and trimming). Returns 0 on failure.
uint64_t ReserveAddressSpace(uint64_t size, uint64_t preferred) {
  if (preferred != 0 && !DeviceMemory::kHonoursPreferredBase) {
    PHOS_LOG(Warn, "simgpu",
             "device address space: built with ThreadSanitizer, so not at {:#x}; device "
             "addresses will differ from other processes'",
             preferred);
  } else if (preferred != 0) {
    void* p =
        mmap(reinterpret_cast<void*>(preferred), size, PROT_NONE, kReserveFlags | MAP_FIXED_NOREPLACE, -1, 0);
    if (p == reinterpret_cast<void*>(preferred)) return preferred;
    const int err = p == MAP_FAILED ? errno : EEXIST;
    // Kernels before 4.17 ignore MAP_FIXED_NOREPLACE and treat the address as a hint.
    if (p != MAP_FAILED) munmap(p, size);
    PHOS_LOG(Warn, "simgpu",
             "device address space: cannot reserve {} MiB at {:#x} ({}); the kernel chooses, so device "
             "addresses will differ from other processes'",
             size >> 20, preferred, std::system_category().message(err));
  }
  const uint64_t granule = DeviceMemory::kGranularity;
  void* p = mmap(nullptr, size + granule, PROT_NONE, kReserveFlags, -1, 0);
  if (p == MAP_FAILED) return 0;
  const uint64_t raw = reinterpret_cast<uint64_t>(p);
  const uint64_t base = AlignUp(raw, granule);
  if (base > raw) munmap(p, base - raw);
  const uint64_t tail = raw + size + granule - (base + size);
  if (tail > 0) munmap(reinterpret_cast<void*>(base + size), tail);
  return base;
}

}  // namespace

CUresult DeviceMemory::Create(const DeviceMemoryOptions& options, std::unique_ptr<DeviceMemory>* out) {
  if (out == nullptr || options.va_size == 0 || options.va_size % kGranularity != 0 ||
      options.preferred_base % kGranularity != 0 ||
      options.preferred_base + options.va_size < options.va_size) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const int memfd = memfd_create("phos-simgpu-physical", MFD_CLOEXEC);
  if (memfd < 0) {
    const int err = errno;
    PHOS_LOG(Error, "simgpu", "memfd_create for device physical memory: {}",
             std::system_category().message(err));
    return CUDA_ERROR_OPERATING_SYSTEM;
  }
  // Physical allocations never need more file than address space: a slice is only useful mapped.
  // The file is sparse, so its size costs nothing.
  if (ftruncate(memfd, static_cast<off_t>(options.va_size)) != 0) {
    const int err = errno;
    PHOS_LOG(Error, "simgpu", "sizing the device physical memory file: {}",
             std::system_category().message(err));
    close(memfd);
    return CUDA_ERROR_OPERATING_SYSTEM;
  }
  const uint64_t base = ReserveAddressSpace(options.va_size, options.preferred_base);
  if (base == 0) {
    const int err = errno;
    PHOS_LOG(Error, "simgpu", "cannot reserve {} MiB of address space for device memory: {}",
             options.va_size >> 20, std::system_category().message(err));
    close(memfd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  out->reset(new DeviceMemory(options, base, memfd));
  PHOS_LOG(Debug, "simgpu", "device address space [{:#x}, {:#x}) for {} device(s)", base,
           base + options.va_size, options.device_capacity.size());
  return CUDA_SUCCESS;
}

DeviceMemory::DeviceMemory(const DeviceMemoryOptions& options, CUdeviceptr base, int memfd)
    : capacity_(options.device_capacity),
      base_(base),
      size_(options.va_size),
      memfd_(memfd),
      retained_bytes_(options.retained_bytes),
      used_(options.device_capacity.size(), 0),
      released_unzeroed_(options.device_capacity.size(), 0),
      va_(base, options.va_size),
      file_space_(0, options.va_size) {
#if defined(PHOS_THREAD_SANITIZER)
  // ThreadSanitizer leaves about 1 TiB for mappings, and the reservation takes half of it.
  PHOS_LOG(Debug, "simgpu", "no second mapping of device physical memory under ThreadSanitizer");
#else
  void* alias = mmap(nullptr, options.va_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, memfd, 0);
  if (alias == MAP_FAILED) {
    const int err = errno;
    PHOS_LOG(Warn, "simgpu", "no second mapping of device physical memory ({}): loads into it go through pwrite",
             std::system_category().message(err));
  } else {
    alias_ = static_cast<char*>(alias);
    madvise(alias_, options.va_size, MADV_HUGEPAGE);  // as for each mapping (device_memory_vmm.cc)
  }
#endif
  const uint64_t prefault = std::min(options.prefault_bytes, options.va_size);
  if (prefault > 0) {
    // Physical allocations take the file's lowest free slices first, so these are the pages the
    // first ones get. Through the second mapping where there is one, so that the writes through it
    // find them mapped; allocated pages read as zeros.
    prefault_ = std::thread([memfd, prefault, alias = alias_] {
      const bool populated = alias != nullptr && madvise(alias, prefault, MADV_POPULATE_WRITE) == 0;
      if (!populated && fallocate(memfd, 0, 0, static_cast<off_t>(prefault)) != 0) {
        const int err = errno;
        PHOS_LOG(Warn, "simgpu", "allocating {} MiB of device memory's host pages ahead: {}", prefault >> 20,
                 std::system_category().message(err));
      }
    });
  }
}

DeviceMemory::~DeviceMemory() {
  JoinPrefault();
  munmap(reinterpret_cast<void*>(base_), size_);
  if (alias_ != nullptr) munmap(alias_, size_);
  close(memfd_);
}

bool DeviceMemory::Decommit(CUdeviceptr addr, uint64_t len) {
  GuardTable::Global().Forget(addr, len);
  void* p = mmap(reinterpret_cast<void*>(addr), len, PROT_NONE, kReserveFlags | MAP_FIXED, -1, 0);
  if (p != MAP_FAILED) return true;
  const int err = errno;
  PHOS_LOG(Error, "simgpu", "decommitting device range [{:#x}, {:#x}): {}", addr, addr + len,
           std::system_category().message(err));
  return false;
}

// ---- Linear allocations ----

CUresult DeviceMemory::Allocate(int device, uint64_t owner, uint64_t bytes, CUdeviceptr* out) {
  if (out == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidDevice(device)) return CUDA_ERROR_INVALID_DEVICE;
  // Checked before rounding, which could otherwise overflow.
  if (bytes > capacity_[device]) return CUDA_ERROR_OUT_OF_MEMORY;
  const bool large = bytes >= kGranularity;
  const uint64_t alignment = large ? kGranularity : kSmallAlignment;
  const uint64_t reserved = AlignUp(bytes, alignment);

  std::unique_lock lock(mu_);
  if (!Fits(device, reserved)) return CUDA_ERROR_OUT_OF_MEMORY;
  uint64_t addr = 0;
  if (!va_.Allocate(reserved, alignment, &addr)) return CUDA_ERROR_OUT_OF_MEMORY;
  void* p =
      mmap(reinterpret_cast<void*>(addr), reserved, PROT_READ | PROT_WRITE, kReserveFlags | MAP_FIXED, -1, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    PHOS_LOG(Warn, "simgpu", "mapping a {} byte device allocation: {}", reserved,
             std::system_category().message(err));
    va_.Release(addr, reserved);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  // Transparent huge pages make first-touch faults about 4x faster for large buffers; advisory
  // only, so a kernel without THP just ignores it.
  if (large) madvise(p, reserved, MADV_HUGEPAGE);
  linear_.emplace(addr, Linear{bytes, reserved, device, owner});
  used_[device] += reserved;
  *out = addr;
  return CUDA_SUCCESS;
}

CUresult DeviceMemory::Free(CUdeviceptr ptr) {
  std::unique_lock lock(mu_);
  auto it = linear_.find(ptr);
  if (it == linear_.end() || it->second.owner == kModuleStorageOwner) return CUDA_ERROR_INVALID_VALUE;
  FreeLinear(it);
  return CUDA_SUCCESS;
}

CUresult DeviceMemory::AllocateModuleStorage(int device, uint64_t bytes, CUdeviceptr* out) {
  return Allocate(device, kModuleStorageOwner, bytes, out);
}

CUresult DeviceMemory::FreeModuleStorage(CUdeviceptr ptr) {
  std::unique_lock lock(mu_);
  auto it = linear_.find(ptr);
  if (it == linear_.end() || it->second.owner != kModuleStorageOwner) return CUDA_ERROR_INVALID_VALUE;
  FreeLinear(it);
  return CUDA_SUCCESS;
}

void DeviceMemory::FreeAllOwnedBy(uint64_t owner) {
  std::unique_lock lock(mu_);
  for (auto it = linear_.begin(); it != linear_.end();) {
    auto next = std::next(it);
    if (it->second.owner == owner) FreeLinear(it);
    it = next;
  }
}

void DeviceMemory::FreeLinear(LinearMap::iterator it) {
  const CUdeviceptr addr = it->first;
  const Linear& linear = it->second;
  // The mapping is private and anonymous: if it cannot be replaced (the kernel's map count is
  // exhausted), dropping its pages still returns the memory, and the address range is mapped
  // afresh when it is reused.
  if (!Decommit(addr, linear.reserved)) {
    madvise(reinterpret_cast<void*>(addr), linear.reserved, MADV_DONTNEED);
  }
  used_[linear.device] -= linear.reserved;
  va_.Release(addr, linear.reserved);
  linear_.erase(it);
}

CUresult DeviceMemory::Info(int device, uint64_t* free, uint64_t* total) const {
  if (free == nullptr || total == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidDevice(device)) return CUDA_ERROR_INVALID_DEVICE;
  std::shared_lock lock(mu_);
  *total = capacity_[device];
  *free = capacity_[device] - used_[device];
  return CUDA_SUCCESS;
}

uint64_t DeviceMemory::HostPageBytes() {
  JoinPrefault();
  struct stat st {};
  return fstat(memfd_, &st) == 0 ? static_cast<uint64_t>(st.st_blocks) * 512 : 0;
}

uint64_t DeviceMemory::UsedBytes(int device) const {
  if (!ValidDevice(device)) return 0;
  std::shared_lock lock(mu_);
  return used_[device];
}

uint64_t DeviceMemory::ReleasedUnzeroedBytes(int device) const {
  if (!ValidDevice(device)) return 0;
  std::shared_lock lock(mu_);
  return released_unzeroed_[device];
}

// ---- Queries ----

DeviceMemory::LinearMap::const_iterator DeviceMemory::LinearContaining(CUdeviceptr ptr) const {
  auto it = linear_.upper_bound(ptr);
  if (it == linear_.begin()) return linear_.end();
  --it;
  return ptr - it->first < it->second.reserved ? it : linear_.end();
}

DeviceMemory::MappingMap::const_iterator DeviceMemory::MappingContaining(CUdeviceptr ptr) const {
  auto it = mappings_.upper_bound(ptr);
  if (it == mappings_.begin()) return mappings_.end();
  --it;
  return ptr - it->first < it->second.size ? it : mappings_.end();
}

bool DeviceMemory::CheckRange(CUdeviceptr ptr, uint64_t bytes, Access needed, int* device) const {
  const uint64_t len = bytes == 0 ? 1 : bytes;
  if (ptr + len < ptr) return false;
  const CUdeviceptr end = ptr + len;
  std::shared_lock lock(mu_);
  if (auto lin = LinearContaining(ptr); lin != linear_.end()) {
    // Within the requested bytes, not the rounded span: a copy into the padding is a bug in the
    // caller that a GPU would not catch, and phos's access validation wants to see it.
    if (end - lin->first > lin->second.bytes) return false;
    if (device != nullptr) *device = lin->second.device;
    return true;
  }
  auto it = MappingContaining(ptr);
  if (it == mappings_.end()) return false;
  const int first_device = physical_.at(it->second.handle).device;
  for (CUdeviceptr covered = it->first;;) {
    if (it->second.access < needed) return false;
    covered += it->second.size;
    if (covered >= end) break;
    ++it;
    if (it == mappings_.end() || it->first != covered) return false;
  }
  if (device != nullptr) *device = first_device;
  return true;
}

bool DeviceMemory::FindAllocation(CUdeviceptr ptr, AllocationInfo* out) const {
  if (out == nullptr) return false;
  std::shared_lock lock(mu_);
  if (auto lin = LinearContaining(ptr); lin != linear_.end()) {
    if (ptr - lin->first >= lin->second.bytes) return false;
    *out = AllocationInfo{};
    out->base = lin->first;
    out->size = lin->second.bytes;
    out->device = lin->second.device;
    out->owner = lin->second.owner;
    out->access = Access::kReadWrite;
    return true;
  }
  auto it = MappingContaining(ptr);
  if (it == mappings_.end()) return false;
  *out = AllocationInfo{};
  out->base = it->first;
  out->size = it->second.size;
  out->device = physical_.at(it->second.handle).device;
  out->vmm = true;
  out->handle = it->second.handle;
  out->offset = it->second.offset;
  out->access = it->second.access;
  return true;
}

}  // namespace phos::sim
