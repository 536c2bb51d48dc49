#include "memory/host_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <iterator>
#include <mutex>

namespace phos::sim {
namespace {

uint64_t PageAligned(uint64_t size) {
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  return (size + page - 1) & ~(page - 1);
}

}  // namespace

HostMemory::~HostMemory() {
  for (const auto& [addr, range] : ranges_) {
    if (range.allocated) munmap(range.base, PageAligned(range.size));
  }
}

CUresult HostMemory::Allocate(uint64_t size, unsigned int flags, void** out) {
  if (out == nullptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
  const uint64_t len = PageAligned(size);
  if (len < size) return CUDA_ERROR_OUT_OF_MEMORY;
  void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  std::unique_lock lock(mu_);
  ranges_.emplace(reinterpret_cast<uintptr_t>(p), PinnedRange{p, size, flags, true});
  *out = p;
  return CUDA_SUCCESS;
}

CUresult HostMemory::Free(void* ptr) {
  std::unique_lock lock(mu_);
  auto it = ranges_.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == ranges_.end() || !it->second.allocated) return CUDA_ERROR_INVALID_VALUE;
  munmap(it->second.base, PageAligned(it->second.size));
  ranges_.erase(it);
  return CUDA_SUCCESS;
}

CUresult HostMemory::Register(void* ptr, uint64_t size, unsigned int flags) {
  const uintptr_t addr = reinterpret_cast<uintptr_t>(ptr);
  if (ptr == nullptr || size == 0 || addr + size < addr) return CUDA_ERROR_INVALID_VALUE;
  std::unique_lock lock(mu_);
  auto next = ranges_.lower_bound(addr);
  if (next != ranges_.end() && next->first < addr + size) return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  if (next != ranges_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second.size > addr) return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  }
  ranges_.emplace(addr, PinnedRange{ptr, size, flags, false});
  return CUDA_SUCCESS;
}

CUresult HostMemory::Unregister(void* ptr) {
  if (ptr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::unique_lock lock(mu_);
  auto it = ranges_.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == ranges_.end() || it->second.allocated) return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
  ranges_.erase(it);
  return CUDA_SUCCESS;
}

HostMemory::RangeMap::const_iterator HostMemory::Containing(uintptr_t addr) const {
  auto it = ranges_.upper_bound(addr);
  if (it == ranges_.begin()) return ranges_.end();
  --it;
  return addr - it->first < it->second.size ? it : ranges_.end();
}

bool HostMemory::IsPinned(const void* ptr, uint64_t bytes) const {
  const uintptr_t addr = reinterpret_cast<uintptr_t>(ptr);
  if (addr + bytes < addr) return false;
  std::shared_lock lock(mu_);
  auto it = Containing(addr);
  return it != ranges_.end() && addr + bytes - it->first <= it->second.size;
}

bool HostMemory::Find(const void* ptr, PinnedRange* out) const {
  if (out == nullptr) return false;
  std::shared_lock lock(mu_);
  auto it = Containing(reinterpret_cast<uintptr_t>(ptr));
  if (it == ranges_.end()) return false;
  *out = it->second;
  return true;
}

}  // namespace phos::sim
