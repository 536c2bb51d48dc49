// The VMM half of DeviceMemory: reservations, physical allocations, mappings and access rights;
// and writes into guarded memory, which for VMM go through the memfd.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iterator>
#include <mutex>
#include <system_error>

#include "memory/device_memory.h"
#include "memory/guard_table.h"
#include "phos/base/log.h"

namespace phos::sim {
namespace {

bool Granular(uint64_t value) {
  return value % DeviceMemory::kGranularity == 0;
}

// Writes [from, to) of the file from `src` (which holds to - from bytes).
bool PwriteAll(int fd, const char* src, uint64_t from, uint64_t to) {
  while (from < to) {
    const ssize_t n = pwrite(fd, src, to - from, static_cast<off_t>(from));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = EIO;
      return false;
    }
    src += n;
    from += static_cast<uint64_t>(n);
  }
  return true;
}

int Protection(Access access) {
  switch (access) {
    case Access::kNone:
      return PROT_NONE;
    case Access::kRead:
      return PROT_READ;
    case Access::kReadWrite:
      return PROT_READ | PROT_WRITE;
  }
  return PROT_NONE;
}

}  // namespace

CUresult DeviceMemory::ReserveAddress(uint64_t size, uint64_t alignment, CUdeviceptr requested,
                                      CUdeviceptr* out) {
  if (out == nullptr || size == 0 || !Granular(size) || !Granular(requested)) return CUDA_ERROR_INVALID_VALUE;
  if ((alignment & (alignment - 1)) != 0) return CUDA_ERROR_INVALID_VALUE;
  const uint64_t align = alignment < kGranularity ? kGranularity : alignment;
  std::unique_lock lock(mu_);
  uint64_t addr = 0;
  const bool honoured = requested != 0 && requested % align == 0 && va_.AllocateAt(requested, size);
  if (honoured) {
    addr = requested;
  } else if (!va_.Allocate(size, align, &addr)) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  reservations_.emplace(addr, size);
  *out = addr;
  return CUDA_SUCCESS;
}

CUresult DeviceMemory::FreeAddress(CUdeviceptr ptr, uint64_t size) {
  std::unique_lock lock(mu_);
  auto it = reservations_.find(ptr);
  if (it == reservations_.end() || it->second != size) return CUDA_ERROR_INVALID_VALUE;
  // The driver documents no behaviour for freeing a reservation that still has mappings. We
  // refuse: freeing would hand the range out again while the old physical memory is still
  // mapped there, so a later allocation would alias it.
  auto mapped = mappings_.lower_bound(ptr);
  if (mapped != mappings_.end() && mapped->first < ptr + size) return CUDA_ERROR_INVALID_VALUE;
  reservations_.erase(it);
  va_.Release(ptr, size);
  return CUDA_SUCCESS;
}

CUresult DeviceMemory::CreatePhysical(int device, uint64_t size, CUmemGenericAllocationHandle* handle) {
  if (handle == nullptr || size == 0 || !Granular(size)) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidDevice(device)) return CUDA_ERROR_INVALID_DEVICE;
  std::unique_lock lock(mu_);
  if (!Fits(device, size)) return CUDA_ERROR_OUT_OF_MEMORY;
  uint64_t file_offset = 0;
  if (!file_space_.Allocate(size, kGranularity, &file_offset)) return CUDA_ERROR_OUT_OF_MEMORY;
  const CUmemGenericAllocationHandle h = next_handle_++;
  Physical& physical = physical_[h];
  physical.device = device;
  physical.size = size;
  physical.file_offset = file_offset;
  used_[device] += size;
  used_physical_ += size;
  *handle = h;
  return CUDA_SUCCESS;
}

CUresult DeviceMemory::ReleasePhysical(CUmemGenericAllocationHandle handle) {
  std::unique_lock lock(mu_);
  auto it = physical_.find(handle);
  if (it == physical_.end() || it->second.released) return CUDA_ERROR_INVALID_VALUE;
  it->second.released = true;
  // Mappings keep the memory alive (CUDA: freed once all mappings are unmapped).
  FreeIfUnreferenced(it);
  return CUDA_SUCCESS;
}

void DeviceMemory::DropMapping(CUmemGenericAllocationHandle handle) {
  auto it = physical_.find(handle);
  --it->second.mappings;
  FreeIfUnreferenced(it);
}

void DeviceMemory::FreeIfUnreferenced(PhysicalMap::iterator it) {
  const Physical& physical = it->second;
  if (physical.mappings > 0 || !physical.released) return;
  used_physical_ -= physical.size;
  if (!physical.zeroed.load()) released_unzeroed_[physical.device] += physical.size;
  // The file's present pages beyond the live allocations' are those kept from released ones and
  // allocated ahead (give or take the live ones' holes): past the limit, this slice's go back to
  // the kernel, as do those of memory released without being zeroed.
  struct stat st {};
  const bool keep = physical.zeroed.load() && fstat(memfd_, &st) == 0 &&
                    static_cast<uint64_t>(st.st_blocks) * 512 <= used_physical_ + retained_bytes_;
  if (!keep && fallocate(memfd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(physical.file_offset),
                         static_cast<off_t>(physical.size)) != 0) {
    // The slice is still reused: cuMemCreate gives no guarantee about initial content either.
    const int err = errno;
    PHOS_LOG(Warn, "simgpu", "freeing {} bytes of physical memory: {}", physical.size,
             std::system_category().message(err));
  }
  file_space_.Release(physical.file_offset, physical.size);
  used_[physical.device] -= physical.size;
  physical_.erase(it);
}

bool DeviceMemory::WriteFile(uint64_t at, const void* from, uint64_t bytes) const {
  const auto* src = static_cast<const char*>(from);
  static const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t end = at + bytes;
  // Which pages are present, a window at a time: mincore on the second mapping reports the
  // file's pages in memory (SEEK_HOLE would scan to the end of the present extent each time).
  constexpr uint64_t kWindowPages = 16384;
  unsigned char present[kWindowPages];
  while (at < end) {
    const uint64_t first_page = at / page * page;
    const uint64_t window_end = std::min(end, first_page + kWindowPages * page);
    const uint64_t pages = (window_end - first_page + page - 1) / page;
    // Unknown (no second mapping, or mincore failed): pwrite when there is no second mapping,
    // else through it, which is right for any page.
    const bool known = alias_ != nullptr && mincore(alias_ + first_page, pages * page, present) == 0;
    auto is_present = [&](uint64_t i) { return alias_ != nullptr && (!known || (present[i] & 1) != 0); };
    while (at < window_end) {
      const uint64_t index = (at - first_page) / page;
      const bool here = is_present(index);
      uint64_t stop = std::min(window_end, first_page + (index + 1) * page);
      for (uint64_t i = index + 1; i < pages && stop < window_end && is_present(i) == here; ++i) {
        stop = std::min(window_end, first_page + (i + 1) * page);
      }
      const char* chunk = src == nullptr ? nullptr : src + (bytes - (end - at));
      if (here && chunk != nullptr) {
        std::memcpy(alias_ + at, chunk, stop - at);
      } else if (here) {
        std::memset(alias_ + at, 0, stop - at);
      } else if (chunk != nullptr) {
        if (!PwriteAll(memfd_, chunk, at, stop)) return false;
      } else {
        // Whole pages punched out (a hole, or a page swapped out), partial ones written.
        const uint64_t from = (at + page - 1) / page * page;
        const uint64_t to = stop / page * page;
        const bool punched = to > from && fallocate(memfd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                                                    static_cast<off_t>(from), static_cast<off_t>(to - from)) == 0;
        static const char kZeros[1 << 20] = {};
        auto zero = [&](uint64_t w, uint64_t to_byte) {
          for (; w < to_byte; w += std::min<uint64_t>(to_byte - w, sizeof(kZeros))) {
            if (!PwriteAll(memfd_, kZeros, w, std::min<uint64_t>(to_byte, w + sizeof(kZeros)))) return false;
          }
          return true;
        };
        if (!(punched ? zero(at, from) && zero(to, stop) : zero(at, stop))) return false;
      }
      at = stop;
    }
  }
  return true;
}

CUresult DeviceMemory::Map(CUdeviceptr ptr, uint64_t size, uint64_t offset,
                           CUmemGenericAllocationHandle handle) {
  if (size == 0 || !Granular(ptr) || !Granular(size) || !Granular(offset) || ptr + size < ptr) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const CUdeviceptr end = ptr + size;
  std::unique_lock lock(mu_);
  auto phys = physical_.find(handle);
  if (phys == physical_.end() || phys->second.released) return CUDA_ERROR_INVALID_VALUE;
  if (offset > phys->second.size || size > phys->second.size - offset) return CUDA_ERROR_INVALID_VALUE;
  auto reservation = reservations_.upper_bound(ptr);
  if (reservation == reservations_.begin()) return CUDA_ERROR_INVALID_VALUE;
  --reservation;
  if (end - reservation->first > reservation->second) return CUDA_ERROR_INVALID_VALUE;
  auto next = mappings_.lower_bound(ptr);
  if (next != mappings_.end() && next->first < end) return CUDA_ERROR_INVALID_VALUE;
  if (next != mappings_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second.size > ptr) return CUDA_ERROR_INVALID_VALUE;
  }
  void* p = mmap(reinterpret_cast<void*>(ptr), size, PROT_NONE, MAP_SHARED | MAP_FIXED, memfd_,
                 static_cast<off_t>(phys->second.file_offset + offset));
  if (p == MAP_FAILED) {
    const int err = errno;
    PHOS_LOG(Warn, "simgpu", "mapping {} bytes of physical memory at {:#x}: {}", size, ptr,
             std::system_category().message(err));
    // MAP_FIXED may have replaced part of the reservation before failing.
    Decommit(ptr, size);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  // Physical memory is a shared memfd: where the host gives shared memory transparent huge pages
  // (shmem_enabled = advise, within_size or always), a fresh view of weights another mapping
  // already holds then faults in 2 MiB at a time, as a GPU maps them, instead of 4 KiB at a time.
  // Advisory only: with shmem_enabled = never the kernel ignores it.
  madvise(p, size, MADV_HUGEPAGE);
  mappings_.emplace(ptr, Mapping{size, offset, handle, Access::kNone});
  ++phys->second.mappings;
  return CUDA_SUCCESS;
}

bool DeviceMemory::WholeMappings(CUdeviceptr ptr, uint64_t size, MappingMap::iterator* first) {
  if (size == 0 || ptr + size < ptr) return false;
  const CUdeviceptr end = ptr + size;
  auto it = mappings_.find(ptr);
  *first = it;
  for (CUdeviceptr covered = ptr; covered < end; ++it) {
    if (it == mappings_.end() || it->first != covered) return false;
    covered += it->second.size;
    if (covered > end) return false;
  }
  return true;
}

CUresult DeviceMemory::Unmap(CUdeviceptr ptr, uint64_t size) {
  std::unique_lock lock(mu_);
  MappingMap::iterator it;
  if (!WholeMappings(ptr, size, &it)) return CUDA_ERROR_INVALID_VALUE;
  for (CUdeviceptr at = ptr; at < ptr + size;) {
    const uint64_t len = it->second.size;
    const CUmemGenericAllocationHandle handle = it->second.handle;
    // Leaving the shared mapping in place would let the memory be freed and its file slice be
    // handed to another allocation while this address still reaches it, so stop here instead.
    if (!Decommit(at, len)) return CUDA_ERROR_OUT_OF_MEMORY;
    it = mappings_.erase(it);
    DropMapping(handle);
    at += len;
  }
  return CUDA_SUCCESS;
}

CUresult DeviceMemory::SetAccess(CUdeviceptr ptr, uint64_t size, Access access) {
  std::unique_lock lock(mu_);
  MappingMap::iterator it;
  if (!WholeMappings(ptr, size, &it)) return CUDA_ERROR_INVALID_VALUE;
  // The new protection replaces a guard's, in one step for an access that faults meanwhile
  // (a restore's kernel reading a buffer that turns read-only as its last byte lands).
  // WholeMappings made sure the range is contiguous: one mprotect covers its mappings.
  if (CUresult r = GuardTable::Global().Reprotect(ptr, size, Protection(access)); r != CUDA_SUCCESS) return r;
  for (CUdeviceptr at = ptr; at < ptr + size; ++it) {
    it->second.access = access;
    if (access == Access::kReadWrite) physical_.at(it->second.handle).zeroed.store(false);
    at += it->second.size;
  }
  return CUDA_SUCCESS;
}

bool DeviceMemory::GuardedWriteTarget(CUdeviceptr dst, uint64_t bytes, LinearMap::const_iterator* linear,
                                      MappingMap::const_iterator* mapping) const {
  if (bytes == 0 || dst + bytes < dst) return false;
  *linear = LinearContaining(dst);
  if (*linear != linear_.end()) return dst + bytes <= (*linear)->first + (*linear)->second.bytes;
  *mapping = MappingContaining(dst);
  return *mapping != mappings_.end() && (*mapping)->second.access == Access::kReadWrite &&
         dst + bytes <= (*mapping)->first + (*mapping)->second.size;
}

bool DeviceMemory::CanWriteGuarded(CUdeviceptr dst, uint64_t bytes) const {
  std::shared_lock lock(mu_);
  LinearMap::const_iterator linear;
  MappingMap::const_iterator mapping;
  return GuardedWriteTarget(dst, bytes, &linear, &mapping);
}

CUresult DeviceMemory::WriteGuarded(CUdeviceptr dst, const void* src, uint64_t bytes) const {
  if (src == nullptr) return CUDA_ERROR_INVALID_VALUE;
  // Shared: the memory cannot be freed or unmapped under the write.
  std::shared_lock lock(mu_);
  LinearMap::const_iterator linear;
  MappingMap::const_iterator mapping;
  if (!GuardedWriteTarget(dst, bytes, &linear, &mapping)) return CUDA_ERROR_INVALID_VALUE;
  if (linear != linear_.end()) return WriteThroughProcMem(dst, src, bytes);
  // The mapping is shared, so its bytes are the memfd's: write there.
  const Physical& physical = physical_.at(mapping->second.handle);
  physical.zeroed.store(false);
  const uint64_t at = physical.file_offset + mapping->second.offset + (dst - mapping->first);
  if (!WriteFile(at, src, bytes)) {
    const int err = errno;
    PHOS_LOG(Error, "simgpu", "writing guarded VMM memory at {:#x}: {}", dst, std::system_category().message(err));
    return CUDA_ERROR_OPERATING_SYSTEM;
  }
  return CUDA_SUCCESS;
}

bool DeviceMemory::ZeroMapped(CUdeviceptr dst, uint64_t bytes) const {
  // Shared: the memory cannot be freed or unmapped under the zeroing.
  std::shared_lock lock(mu_);
  if (bytes == 0 || dst + bytes < dst) return false;
  if (auto linear = LinearContaining(dst); linear != linear_.end()) {
    if (dst + bytes > linear->first + linear->second.reserved || GuardTable::Global().Overlaps(dst, bytes)) return false;
    const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    const uint64_t first = (dst + page - 1) / page * page;
    const uint64_t end = (dst + bytes) / page * page;
    if (first >= end) return false;  // within a page or two: the caller's memset is cheaper
    if (madvise(reinterpret_cast<void*>(first), end - first, MADV_DONTNEED) != 0) return false;
    std::memset(reinterpret_cast<void*>(dst), 0, first - dst);
    std::memset(reinterpret_cast<void*>(end), 0, dst + bytes - end);
    return true;
  }
  auto mapping = MappingContaining(dst);
  if (mapping == mappings_.end() || mapping->second.access != Access::kReadWrite ||
      dst + bytes > mapping->first + mapping->second.size) {
    return false;
  }
  // A guarded range is written the ordinary way: its fault is what validation watches for.
  if (GuardTable::Global().Overlaps(dst, bytes)) return false;
  const Physical& physical = physical_.at(mapping->second.handle);
  const uint64_t offset = mapping->second.offset + (dst - mapping->first);
  if (!WriteFile(physical.file_offset + offset, nullptr, bytes)) return false;
  if (offset == 0 && bytes == physical.size) physical.zeroed.store(true);
  return true;
}

bool DeviceMemory::FindPhysical(CUmemGenericAllocationHandle handle, PhysicalInfo* out) const {
  if (out == nullptr) return false;
  std::shared_lock lock(mu_);
  auto it = physical_.find(handle);
  if (it == physical_.end() || it->second.released) return false;
  out->device = it->second.device;
  out->size = it->second.size;
  out->mappings = it->second.mappings;
  return true;
}

}  // namespace phos::sim
