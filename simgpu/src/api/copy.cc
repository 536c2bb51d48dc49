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

// The bytes [ptr, ptr + (height - 1) * pitch + width) that `height` rows of `width` bytes,
// `pitch` apart, span; false when width exceeds the pitch of more than one row or the span wraps.
bool RowSpan(CUdeviceptr ptr, size_t pitch, size_t width, size_t height, size_t* span) {
  if (height > 1 && width > pitch) return false;
  size_t rows = 0;
  if (__builtin_mul_overflow(height - 1, pitch, &rows) || __builtin_add_overflow(rows, width, span)) return false;
  CUdeviceptr end = 0;
  return !__builtin_add_overflow(ptr, *span, &end);
}

CUdeviceptr HostPtr(const void* p) { return reinterpret_cast<CUdeviceptr>(p); }

// One side of a CUDA_MEMCPY2D: its first row's address and whether the memory type names device
// memory. CUDA arrays are not modelled: CUDA_ERROR_INVALID_VALUE, as for an unknown type.
CUresult RowsStart(CUmemorytype type, const void* host, CUdeviceptr device, size_t x, size_t y, size_t pitch,
                   CUdeviceptr* start, bool* is_device, bool* is_unified) {
  CUdeviceptr base = 0;
  switch (type) {
    case CU_MEMORYTYPE_HOST: base = HostPtr(host); *is_device = false; *is_unified = false; break;
    case CU_MEMORYTYPE_DEVICE: base = device; *is_device = true; *is_unified = false; break;
    case CU_MEMORYTYPE_UNIFIED: base = device; *is_device = false; *is_unified = true; break;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  size_t offset = 0;
  if (base == 0 || __builtin_mul_overflow(y, pitch, &offset) || __builtin_add_overflow(offset, x, &offset) ||
      __builtin_add_overflow(base, offset, start)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

}  // namespace

CUresult EnqueueCopy(Driver& driver, Stream& stream, CUdeviceptr dst, CUdeviceptr src,
                     size_t bytes, CallKind kind, CopySides sides) {
  return EnqueueCopy2D(driver, stream, {.dst = dst, .dst_pitch = bytes, .src = src, .src_pitch = bytes,
                                        .width = bytes, .height = 1}, kind, sides);
}

CUresult EnqueueCopy2D(Driver& driver, Stream& stream, const Rows& rows, CallKind kind, CopySides sides) {
  if (rows.width == 0 || rows.height == 0) return CUDA_SUCCESS;
  size_t dst_span = 0, src_span = 0, bytes = 0;
  if (!RowSpan(rows.dst, rows.dst_pitch, rows.width, rows.height, &dst_span) ||
      !RowSpan(rows.src, rows.src_pitch, rows.width, rows.height, &src_span) ||
      __builtin_mul_overflow(rows.width, rows.height, &bytes)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  Side to, from;
  if (CUresult r = Classify(driver, rows.dst, dst_span, Access::kReadWrite, &to); r != CUDA_SUCCESS) return r;
  if (CUresult r = Classify(driver, rows.src, src_span, Access::kRead, &from); r != CUDA_SUCCESS) return r;
  bool dst_must_be_device = sides == CopySides::kHostToDevice || sides == CopySides::kDeviceToDevice;
  bool src_must_be_device = sides == CopySides::kDeviceToHost || sides == CopySides::kDeviceToDevice;
  bool dst_must_be_host = sides == CopySides::kDeviceToHost || sides == CopySides::kHostToHost;
  bool src_must_be_host = sides == CopySides::kHostToDevice || sides == CopySides::kHostToHost;
  if ((dst_must_be_device && !to.device) || (src_must_be_device && !from.device)) return CUDA_ERROR_INVALID_VALUE;
  if ((dst_must_be_host && to.device) || (src_must_be_host && from.device)) return CUDA_ERROR_INVALID_VALUE;

  // Paced on the bytes moved, as a 1D copy of width * height bytes; the pitch gaps cost nothing.
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
  op.what = rows.height == 1 ? "memcpy" : "memcpy2D";
  op.work = [rows, read_only = to.read_only, dst_span]() {
    if (read_only) return WriteToReadOnlyFault("memcpy", rows.dst, dst_span);
    // The ranges may overlap (a tenant's cuMemcpyDtoD within one buffer): CUDA leaves the result
    // undefined, simgpu gives memmove's rather than undefined behaviour in the host process.
    for (size_t row = 0; row < rows.height; ++row) {
      std::memmove(reinterpret_cast<void*>(rows.dst + row * rows.dst_pitch),
                   reinterpret_cast<const void*>(rows.src + row * rows.src_pitch), rows.width);
    }
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
  size_t bytes = 0;
  if (__builtin_mul_overflow(count, element_size, &bytes)) return CUDA_ERROR_INVALID_VALUE;
  return EnqueueMemset2D(driver, stream, dst, bytes, value, element_size, count, 1);
}

CUresult EnqueueMemset2D(Driver& driver, Stream& stream, CUdeviceptr dst, size_t pitch, uint32_t value,
                         size_t element_size, size_t width, size_t height) {
  if (width == 0 || height == 0) return CUDA_SUCCESS;
  if (dst % element_size != 0 || (height > 1 && pitch % element_size != 0)) return CUDA_ERROR_INVALID_VALUE;
  size_t row_bytes = 0, span = 0, bytes = 0;
  if (__builtin_mul_overflow(width, element_size, &row_bytes) || !RowSpan(dst, pitch, row_bytes, height, &span) ||
      __builtin_mul_overflow(row_bytes, height, &bytes)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  Side to;
  if (CUresult r = Classify(driver, dst, span, Access::kReadWrite, &to); r != CUDA_SUCCESS) return r;
  if (!to.device) return CUDA_ERROR_INVALID_VALUE;

  Op op;
  op.engine = Engine::kCompute;
  op.bytes = bytes;
  op.cost_seconds = bytes / driver.config().profile->d2d_bps;
  op.what = height == 1 ? "memset" : "memset2D";
  auto* p = reinterpret_cast<unsigned char*>(dst);
  // Rows [0, height) of `row_bytes` at `pitch` apart, each filled by `fill(row start)`.
  auto each_row = [p, pitch, height](auto fill) {
    return [p, pitch, height, fill]() {
      for (size_t row = 0; row < height; ++row) fill(p + row * pitch);
      return CUDA_SUCCESS;
    };
  };
  if (to.read_only) {
    op.work = [dst, span]() { return WriteToReadOnlyFault("memset", dst, span); };
  } else if (value == 0 && height == 1) {
    // VMM memory is zeroed through its memfd without faulting its pages in, and marked zeroed
    // (DeviceMemory::ZeroMapped); elsewhere the bytes are written.
    DeviceMemory* memory = &driver.memory();
    op.work = [memory, p, dst, bytes]() {
      if (!memory->ZeroMapped(dst, bytes)) std::memset(p, 0, bytes);
      return CUDA_SUCCESS;
    };
  } else if (element_size == 1) {
    op.work = each_row([value, row_bytes](unsigned char* row) { std::memset(row, static_cast<int>(value & 0xff), row_bytes); });
  } else if (element_size == 2) {
    op.work = each_row([value, width](unsigned char* row) {
      auto* w = reinterpret_cast<uint16_t*>(row);
      for (size_t i = 0; i < width; ++i) w[i] = static_cast<uint16_t>(value);
    });
  } else {
    op.work = each_row([value, width](unsigned char* row) {
      auto* w = reinterpret_cast<uint32_t*>(row);
      for (size_t i = 0; i < width; ++i) w[i] = value;
    });
  }
  stream.Enqueue(std::move(op));
  return CUDA_SUCCESS;
}

CUresult EnqueueMemcpy2D(Driver& driver, Stream& stream, const CUDA_MEMCPY2D& copy, CallKind kind) {
  const CUDA_MEMCPY2D* c = &copy;
  Rows rows{.dst = 0, .dst_pitch = c->dstPitch, .src = 0, .src_pitch = c->srcPitch, .width = c->WidthInBytes,
            .height = c->Height};
  bool dst_device = false, src_device = false, dst_unified = false, src_unified = false;
  if (CUresult r = RowsStart(c->dstMemoryType, c->dstHost, c->dstDevice, c->dstXInBytes, c->dstY, c->dstPitch,
                             &rows.dst, &dst_device, &dst_unified);
      r != CUDA_SUCCESS) {
    return r;
  }
  if (CUresult r = RowsStart(c->srcMemoryType, c->srcHost, c->srcDevice, c->srcXInBytes, c->srcY, c->srcPitch,
                             &rows.src, &src_device, &src_unified);
      r != CUDA_SUCCESS) {
    return r;
  }
  CopySides sides = CopySides::kUnified;
  if (!dst_unified && !src_unified) {
    sides = dst_device ? (src_device ? CopySides::kDeviceToDevice : CopySides::kHostToDevice)
                       : (src_device ? CopySides::kDeviceToHost : CopySides::kHostToHost);
  }
  return EnqueueCopy2D(driver, stream, rows, kind, sides);
}

}  // namespace phos::sim
