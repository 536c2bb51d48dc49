#include "memory/guard_table.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>
#include <type_traits>

#include "phos/base/log.h"

namespace phos::sim {

namespace {
// Constant-initialised, so the fault handler never runs an initialisation (which could
// allocate), and trivially destructible, so engine threads may consult it while the process
// exits.
constinit GuardTable g_table;
static_assert(std::is_trivially_destructible_v<GuardTable>);
}  // namespace

GuardTable& GuardTable::Global() {
  return g_table;
}

uint64_t GuardTable::PageSize() {
  static const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  return page;
}

GuardTable::Slot* GuardTable::FindSlot(uintptr_t address) {
  const size_t n = high_water_.load(std::memory_order_relaxed);
  for (size_t i = 0; i < n; ++i) {
    const uintptr_t start = slots_[i].start.load(std::memory_order_relaxed);
    if (start != 0 && start <= address && address < slots_[i].end.load(std::memory_order_relaxed)) {
      return &slots_[i];
    }
  }
  return nullptr;
}

void GuardTable::Clear(Slot& slot) {
  slot.start.store(0, std::memory_order_release);
  slot.end.store(0, std::memory_order_release);
  --count_;
}

CUresult GuardTable::Guard(uintptr_t start, uint64_t bytes, int prot) {
  const uint64_t page = PageSize();
  if (start == 0 || bytes == 0 || start % page != 0 || bytes % page != 0) return CUDA_ERROR_INVALID_VALUE;
  const uintptr_t end = start + bytes;
  std::lock_guard lock(mu_);
  const size_t n = high_water_.load(std::memory_order_relaxed);
  Slot* free_slot = nullptr;
  for (size_t i = 0; i < n; ++i) {
    const uintptr_t s = slots_[i].start.load(std::memory_order_relaxed);
    if (s == 0) {
      if (free_slot == nullptr) free_slot = &slots_[i];
    } else if (s < end && start < slots_[i].end.load(std::memory_order_relaxed)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  if (free_slot == nullptr) {
    if (n == kCapacity) return CUDA_ERROR_OUT_OF_MEMORY;
    free_slot = &slots_[n];
  }
  // Published before the pages are protected: a fault they cause always finds its range.
  free_slot->end.store(end, std::memory_order_release);
  free_slot->start.store(start, std::memory_order_release);
  if (free_slot == &slots_[n]) high_water_.store(n + 1, std::memory_order_release);
  ++count_;
  if (mprotect(reinterpret_cast<void*>(start), bytes, prot) != 0) {
    const int err = errno;
    PHOS_LOG(Warn, "simgpu", "guarding device range [{:#x}, {:#x}): {}", start, end,
             std::system_category().message(err));
    Clear(*free_slot);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  return CUDA_SUCCESS;
}

CUresult GuardTable::Unguard(uintptr_t start, uint64_t bytes) {
  std::lock_guard lock(mu_);
  Slot* slot = start == 0 ? nullptr : FindSlot(start);
  if (slot == nullptr || slot->start.load(std::memory_order_relaxed) != start ||
      slot->end.load(std::memory_order_relaxed) != start + bytes) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // Accessible before the slot is cleared, for the same reason as in Guard.
  if (mprotect(reinterpret_cast<void*>(start), bytes, PROT_READ | PROT_WRITE) != 0) {
    const int err = errno;
    PHOS_LOG(Warn, "simgpu", "unguarding device range [{:#x}, {:#x}): {}", start, start + bytes,
             std::system_category().message(err));
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  Clear(*slot);
  return CUDA_SUCCESS;
}

bool GuardTable::UnguardContaining(uintptr_t address) {
  uintptr_t start = 0;
  uint64_t bytes = 0;
  if (!FindContaining(address, &start, &bytes)) return false;
  // Another thread may unguard it in between; then there is nothing left to do either way.
  (void)Unguard(start, bytes);
  return true;
}

void GuardTable::Forget(uintptr_t start, uint64_t len) {
  std::lock_guard lock(mu_);
  ForgetLocked(start, len);
}

void GuardTable::ForgetLocked(uintptr_t start, uint64_t len) {
  if (count_ == 0) return;
  const uintptr_t end = start + len;
  const size_t n = high_water_.load(std::memory_order_relaxed);
  for (size_t i = 0; i < n; ++i) {
    const uintptr_t s = slots_[i].start.load(std::memory_order_relaxed);
    if (s != 0 && s < end && start < slots_[i].end.load(std::memory_order_relaxed)) Clear(slots_[i]);
  }
}

CUresult GuardTable::Reprotect(uintptr_t start, uint64_t len, int prot) {
  std::lock_guard lock(mu_);
  if (reprotect_hook_ != nullptr) reprotect_hook_(reprotect_hook_user_, start, len);
  const bool ok = mprotect(reinterpret_cast<void*>(start), len, prot) == 0;
  const int err = errno;
  ForgetLocked(start, len);
  if (ok) return CUDA_SUCCESS;
  PHOS_LOG(Warn, "simgpu", "setting access of [{:#x}, {:#x}): {}", start, start + len,
           std::system_category().message(err));
  return CUDA_ERROR_OUT_OF_MEMORY;
}

void GuardTable::SetReprotectHookForTesting(ReprotectHook hook, void* user) {
  std::lock_guard lock(mu_);
  reprotect_hook_ = hook;
  reprotect_hook_user_ = user;
}

bool GuardTable::Contains(uintptr_t address) const {
  const size_t n = high_water_.load(std::memory_order_acquire);
  for (size_t i = 0; i < n; ++i) {
    const uintptr_t start = slots_[i].start.load(std::memory_order_acquire);
    if (start != 0 && start <= address && address < slots_[i].end.load(std::memory_order_acquire))
      return true;
  }
  return false;
}

bool GuardTable::Overlaps(uintptr_t start, uint64_t bytes) {
  std::lock_guard lock(mu_);
  const size_t n = high_water_.load(std::memory_order_relaxed);
  for (size_t i = 0; i < n; ++i) {
    const uintptr_t s = slots_[i].start.load(std::memory_order_relaxed);
    if (s != 0 && s < start + bytes && start < slots_[i].end.load(std::memory_order_relaxed)) return true;
  }
  return false;
}

bool GuardTable::FindContaining(uintptr_t address, uintptr_t* start, uint64_t* bytes) {
  std::lock_guard lock(mu_);
  Slot* slot = FindSlot(address);
  if (slot == nullptr) return false;
  *start = slot->start.load(std::memory_order_relaxed);
  *bytes = slot->end.load(std::memory_order_relaxed) - *start;
  return true;
}

size_t GuardTable::size() {
  std::lock_guard lock(mu_);
  return count_;
}

CUresult WriteThroughProcMem(uintptr_t dst, const void* src, uint64_t bytes) {
  // Writes through /proc/self/mem use FOLL_FORCE, as a debugger's do: they reach a private
  // mapping's pages whatever their protection, and the protection stays as it is.
  static const int fd = open("/proc/self/mem", O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    PHOS_LOG(Error, "simgpu", "cannot open /proc/self/mem to write guarded memory");
    return CUDA_ERROR_OPERATING_SYSTEM;
  }
  const auto* from = static_cast<const char*>(src);
  while (bytes > 0) {
    const ssize_t n = pwrite(fd, from, bytes, static_cast<off_t>(dst));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      PHOS_LOG(Error, "simgpu", "writing guarded memory at {:#x} through /proc/self/mem: {}", dst,
               std::system_category().message(err));
      return CUDA_ERROR_OPERATING_SYSTEM;
    }
    from += n;
    dst += static_cast<uintptr_t>(n);
    bytes -= static_cast<uint64_t>(n);
  }
  return CUDA_SUCCESS;
}

}  // namespace phos::sim
