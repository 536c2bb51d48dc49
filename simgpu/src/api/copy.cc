#include "api/copy.h"

#include <cstring>

#include "phos/base/log.h"

namespace phos::sim {
namespace {

struct Side {
  bool device = false;
  bool pinned = false;     // host side only
  bool read_only = false;  // device memory mapped readable only (a write faults when it runs)
};

// Decides whether [ptr, ptr + bytes) is device memory (and accessible as `needed`) or host
// memory. A range that starts inside the device address space but is not valid device memory
// is an error, not host memory: it names freed or unmapped device memory. A destination mapped
// read-only (cuMemSetAccess with CU_MEM_ACCESS_FLAGS_PROT_READ) is accepted and marked: a GPU's
// driver does not check access rights when it enqueues, the engine's write faults when it runs.
CUresult Classify(Driver& driver, CUdeviceptr ptr, size_t bytes, Access needed, Side* side) {
  DeviceMemory& memory = driver.memory();
  if (ptr == 0) return CUDA_ERROR_INVALID_VALUE;
  bool in_device_range = ptr >= memory.base() && ptr < memory.base() + memory.size();
  if (in_device_range) {
    if (!memory.CheckRange(ptr, bytes, needed)) {
      if (needed != Access::kReadWrite || !memory.CheckRange(ptr, bytes, Access::kRead))
        return CUDA_ERROR_INVALID_VALUE;
      side->read_only = true;
    }
    side->device = true;
    return CUDA_SUCCESS;
  }
  side->device = false;
  side->pinned = driver.host_memory().IsPinned(reinterpret_cast<const void*>(ptr), bytes);
  return CUDA_SUCCESS;
}

// What a GPU does when a copy or memset reaches memory mapped read-only: the write faults, the
// bytes stay as they were, and the context is left in the sticky CUDA_ERROR_ILLEGAL_ADDRESS state
// (the op's error makes it sticky, as a faulting kernel's does).
CUresult WriteToReadOnlyFault(const char* what, CUdeviceptr dst, uint64_t bytes) {
  PHOS_LOG_EVERY_SEC(Warn, "simgpu", 1, "{} writes [{:#x}, +{} bytes), mapped read-only: illegal address",
                     what, dst, bytes);
  return CUDA_ERROR_ILLEGAL_ADDRESS;
}

}  // namespace

CUresult EnqueueCopy(Driver& driver, Stream& stream, CUdeviceptr dst, CUdeviceptr src,
                     size_t bytes, CallKind kind, CopySides sides) {
  if (bytes == 0) return CUDA_SUCCESS;
  Side to, from;
  if (CUresult r = Classify(driver, dst, bytes, Access::kReadWrite, &to); r != CUDA_SUCCESS) return r;
  if (CUresult r = Classify(driver, src, bytes, Access::kRead, &from); r != CUDA_SUCCESS) return r;
  bool dst_must_be_device = sides == CopySides::kHostToDevice || sides == CopySides::kDeviceToDevice;
  bool src_must_be_device = sides == CopySides::kDeviceToHost || sides == CopySides::kDeviceToDevice;
  if ((dst_must_be_device && !to.device) || (src_must_be_device && !from.device)) return CUDA_ERROR_INVALID_VALUE;

  const DeviceProfile& p = *driver.config().profile;
  Op op;
  op.bytes = bytes;
  bool pageable_host = false;
  if (to.device && from.device) {
    op.engine = Engine::kCompute;
    op.cost_seconds = bytes / p.d2d_bps;
  } else if (to.device) {
    op.engine = Engine::kCopyH2D;
    op.cost_seconds = bytes / (from.pinned ? p.h2d_pinned_bps : p.h2d_pageable_bps);
    pageable_host = !from.pinned;
  } else if (from.device) {
    op.engine = Engine::kCopyD2H;
    op.cost_seconds = bytes / (to.pinned ? p.d2h_pinned_bps : p.d2h_pageable_bps);
    pageable_host = !to.pinned;
  } else {
    // Host to host through the unified cuMemcpy: the driver does it on the CPU, in stream order.
    op.engine = Engine::kHost;
    op.cost_seconds = 0;
  }
  void* d = reinterpret_cast<void*>(dst);
  const void* s = reinterpret_cast<const void*>(src);
  op.what = "memcpy";
  op.work = [d, s, bytes, read_only = to.read_only]() {
    if (read_only) return WriteToReadOnlyFault("memcpy", reinterpret_cast<CUdeviceptr>(d), bytes);
    // The ranges may overlap (a tenant's cuMemcpyDtoD within one buffer): CUDA leaves the result
    // undefined, simgpu gives memmove's rather than undefined behaviour in the host process.
    std::memmove(d, s, bytes);
    return CUDA_SUCCESS;
  };
  uint64_t seq = stream.Enqueue(std::move(op));
  // Copies involving pageable host memory are staged by the driver: the call returns only once
  // the host buffer has been consumed, even for the Async variants.
  if (kind == CallKind::kSync || pageable_host) return stream.Wait(seq);
  return CUDA_SUCCESS;
}

CUresult EnqueueGuardedCopy(Driver& driver, Stream& stream, CUdeviceptr dst, const void* src, size_t bytes) {
  if (src == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (bytes == 0) return CUDA_SUCCESS;
  DeviceMemory& memory = driver.memory();
  if (!memory.CanWriteGuarded(dst, bytes)) return CUDA_ERROR_INVALID_VALUE;
  Side from;
  if (CUresult r = Classify(driver, reinterpret_cast<CUdeviceptr>(src), bytes, Access::kRead, &from);
      r != CUDA_SUCCESS) {
    return r;
  }
  if (from.device) return CUDA_ERROR_INVALID_VALUE;

  const DeviceProfile& p = *driver.config().profile;
  Op op;
  op.engine = Engine::kCopyH2D;
  op.bytes = bytes;
  op.cost_seconds = bytes / (from.pinned ? p.h2d_pinned_bps : p.h2d_pageable_bps);
  op.what = "memcpy";
  op.work = [&memory, dst, src, bytes]() {
    // The range was checked at enqueue; a failure now means it was freed or unmapped since.
    CUresult r = memory.WriteGuarded(dst, src, bytes);
    return r == CUDA_ERROR_INVALID_VALUE ? CUDA_ERROR_ILLEGAL_ADDRESS : r;
  };
  uint64_t seq = stream.Enqueue(std::move(op));
  if (!from.pinned) return stream.Wait(seq);
  return CUDA_SUCCESS;
}

CUresult EnqueueMemset(Driver& driver, Stream& stream, CUdeviceptr dst, uint32_t value,
                       size_t element_size, size_t count) {
  if (count == 0) return CUDA_SUCCESS;
  if (dst % element_size != 0) return CUDA_ERROR_INVALID_VALUE;
  size_t bytes = count * element_size;
  if (bytes / element_size != count) return CUDA_ERROR_INVALID_VALUE;
  Side to;
  if (CUresult r = Classify(driver, dst, bytes, Access::kReadWrite, &to); r != CUDA_SUCCESS) return r;
  if (!to.device) return CUDA_ERROR_INVALID_VALUE;

  Op op;
  op.engine = Engine::kCompute;
  op.bytes = bytes;
  op.cost_seconds = bytes / driver.config().profile->d2d_bps;
  op.what = "memset";
  auto* p = reinterpret_cast<unsigned char*>(dst);
  if (to.read_only) {
    op.work = [dst, bytes]() { return WriteToReadOnlyFault("memset", dst, bytes); };
  } else if (value == 0) {
    // VMM memory is zeroed through its memfd without faulting its pages in, and marked zeroed
    // (DeviceMemory::ZeroMapped); elsewhere the bytes are written.
    DeviceMemory* memory = &driver.memory();
    op.work = [memory, p, dst, bytes]() {
      if (!memory->ZeroMapped(dst, bytes)) std::memset(p, 0, bytes);
      return CUDA_SUCCESS;
    };
  } else if (element_size == 1) {
    op.work = [p, value, bytes]() {
      std::memset(p, static_cast<int>(value & 0xff), bytes);
      return CUDA_SUCCESS;
    };
  } else {
    op.work = [p, value, count]() {
      auto* w = reinterpret_cast<uint32_t*>(p);
      for (size_t i = 0; i < count; ++i) w[i] = value;
      return CUDA_SUCCESS;
    };
  }
  stream.Enqueue(std::move(op));
  return CUDA_SUCCESS;
}

}  // namespace phos::sim
