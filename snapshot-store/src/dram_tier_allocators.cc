// The arena's allocators: anonymous mmap (tests, tools) and the driver's pinned host memory.
#include <fmt/core.h>
#include <sys/mman.h>

#include <cerrno>

#include "phos/base/log.h"
#include "phos/store/dram_tier.h"

namespace phos::store {

Result<void*> MmapAllocator::Allocate(size_t bytes) {
  if (bytes == 0) return Status::InvalidArgument("mmap allocator: zero bytes asked for");
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    int err = errno;
    if (err == ENOMEM) return Status::OutOfMemory(fmt::format("mmap of {} bytes: out of memory", bytes));
    return Status::FromErrno(err, fmt::format("mmap of {} bytes", bytes));
  }
  return p;
}

void MmapAllocator::Free(void* ptr, size_t bytes) {
  if (ptr != nullptr && munmap(ptr, bytes) != 0) {
    PHOS_LOG(Error, "store", "munmap of {} bytes at {}: errno {}", bytes, ptr, errno);
  }
}

Result<std::unique_ptr<DriverPinnedAllocator>> DriverPinnedAllocator::Create(const DriverHostMemory& driver) {
  if (driver.ctx_push_current == nullptr || driver.ctx_pop_current == nullptr ||
      driver.mem_host_alloc == nullptr || driver.mem_free_host == nullptr) {
    return Status::InvalidArgument(
        "pinned allocator: the driver table lacks cuCtxPushCurrent, cuCtxPopCurrent, cuMemHostAlloc or "
        "cuMemFreeHost");
  }
  if (driver.context == nullptr) return Status::InvalidArgument("pinned allocator: no CUDA context given");
  return std::unique_ptr<DriverPinnedAllocator>(new DriverPinnedAllocator(driver));
}

Result<void*> DriverPinnedAllocator::Allocate(size_t bytes) {
  if (bytes == 0) return Status::InvalidArgument("pinned allocator: zero bytes asked for");
  PHOS_CU_RETURN_IF_ERROR(driver_.error_text, driver_.ctx_push_current(driver_.context));
  void* p = nullptr;
  // Portable: pinned for every context of the pool, not only the one pushed here.
  Status s = driver::CuStatus(driver_.mem_host_alloc(&p, bytes, CU_MEMHOSTALLOC_PORTABLE),
                      fmt::format("cuMemHostAlloc({} bytes, PORTABLE)", bytes), driver_.error_text);
  CUcontext popped = nullptr;
  Status pop = driver::CuStatus(driver_.ctx_pop_current(&popped), "cuCtxPopCurrent", driver_.error_text);
  if (!s.ok()) return s;
  if (!pop.ok()) {
    Free(p, bytes);  // pushes again, so it does not depend on the failed pop
    return pop;
  }
  return p;
}

void DriverPinnedAllocator::Free(void* ptr, size_t bytes) {
  if (ptr == nullptr) return;
  Status s = driver::CuStatus(driver_.ctx_push_current(driver_.context), "cuCtxPushCurrent", driver_.error_text);
  if (s.ok()) {
    s = driver::CuStatus(driver_.mem_free_host(ptr), "cuMemFreeHost", driver_.error_text);
    CUcontext popped = nullptr;
    Status pop = driver::CuStatus(driver_.ctx_pop_current(&popped), "cuCtxPopCurrent", driver_.error_text);
    if (s.ok()) s = pop;
  }
  if (!s.ok()) PHOS_LOG(Error, "store", "freeing {} pinned bytes at {}: {}", bytes, ptr, s.message());
}

}  // namespace phos::store
