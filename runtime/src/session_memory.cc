// A session's device memory: allocations from its instance address spaces (one per device of a
// deployed function's range) or cuMemAlloc, the calls that name it (each range checked against the
// session's buffers first), and the scrub of borrowed ranges at its end.
#include "phos/base/log.h"
#include "phos/driver/context_scope.h"
#include "session.h"

namespace phos::runtime {

CUresult Session::MemAlloc(const ipc::SizeArgs& a, const Call& call) {
  const uint64_t held = buffers_.total_bytes();
  if (rules_.device_bytes != 0 && (held >= rules_.device_bytes || a.bytes > rules_.device_bytes - held)) {
    PHOS_LOG_EVERY_SEC(Warn, "runtime", 1, "pid {}: {} of {} bytes refused: the session holds {} of its {} bytes", pid_,
                       call.name, a.bytes, held, rules_.device_bytes);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (buffers_.buffers().size() >= rules_.buffers) {
    PHOS_LOG_EVERY_SEC(Warn, "runtime", 1, "pid {}: {} refused: the session holds {} buffers, its limit", pid_, call.name,
                       buffers_.buffers().size());
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  CUdeviceptr ptr = 0;
  CUresult r = AllocateBuffer(a.bytes, &ptr);
  if (r != CUDA_SUCCESS) return r;
  if (!buffers_.Insert(ptr, a.bytes).ok()) {
    FreeBuffer(ptr, a.bytes);
    return CUDA_ERROR_UNKNOWN;
  }
  if (route_device_ != 0) buffer_devices_[ptr] = route_device_;
  call.Reply(uint64_t{ptr});
  return CUDA_SUCCESS;
}

CUresult Session::MemFree(const ipc::PointerArgs& a, const Call& call) {
  if (a.ptr == 0) return CUDA_SUCCESS;
  auto held = buffers_.buffers().find(a.ptr);
  const uint64_t bytes = held == buffers_.buffers().end() ? 0 : held->second;
  if (!buffers_.Contains(a.ptr, 0) || !buffers_.Erase(a.ptr).ok()) {
    PHOS_LOG_EVERY_SEC(Warn, "runtime", 1, "pid {}: {} of {:#x} refused: not a buffer of this session", pid_, call.name, a.ptr);
    return CUDA_ERROR_INVALID_VALUE;
  }
  buffer_devices_.erase(a.ptr);
  return FreeBuffer(a.ptr, bytes);
}

CUresult Session::MemcpyHtoD(const ipc::CopyArgs& a, const Call& call) {
  if (a.bytes != call.tail.size()) return CUDA_ERROR_INVALID_VALUE;
  if (!Owns(a.dst, a.bytes, "copy destination")) return CUDA_ERROR_INVALID_VALUE;
  Result<CUstream> stream = StreamOf(a.stream);
  if (!stream.ok()) return CUDA_ERROR_INVALID_HANDLE;
  // The source is ring memory the frontend reuses once the record is released: the copy must
  // be complete on return. The driver treats it as pageable memory, whose copies are.
  if (a.stream == 0) return driver_->cuMemcpyHtoD(a.dst, call.tail.data(), a.bytes);
  return driver_->cuMemcpyHtoDAsync(a.dst, call.tail.data(), a.bytes, *stream);
}

CUresult Session::MemcpyDtoH(const ipc::CopyArgs& a, const Call& call) {
  if (a.bytes > ring_->reply_capacity()) return CUDA_ERROR_INVALID_VALUE;
  if (!Owns(a.src, a.bytes, "copy source")) return CUDA_ERROR_INVALID_VALUE;
  Result<CUstream> stream = StreamOf(a.stream);
  if (!stream.ok()) return CUDA_ERROR_INVALID_HANDLE;
  CUresult r;
  if (a.stream == 0) {
    r = driver_->cuMemcpyDtoH(call.reply, a.src, a.bytes);
  } else {
    r = driver_->cuMemcpyDtoHAsync(call.reply, a.src, a.bytes, *stream);
    if (r == CUDA_SUCCESS) r = driver_->cuStreamSynchronize(*stream);
  }
  *call.reply_len = a.bytes;
  return r;
}

CUresult Session::MemcpyDtoD(const ipc::CopyArgs& a, const Call&) {
  if (!Owns(a.dst, a.bytes, "copy destination") || !Owns(a.src, a.bytes, "copy source")) return CUDA_ERROR_INVALID_VALUE;
  Result<CUstream> stream = StreamOf(a.stream);
  if (!stream.ok()) return CUDA_ERROR_INVALID_HANDLE;
  if (a.stream == 0) return driver_->cuMemcpyDtoD(a.dst, a.src, a.bytes);
  return driver_->cuMemcpyDtoDAsync(a.dst, a.src, a.bytes, *stream);
}

CUresult Session::Memset(const ipc::MemsetArgs& a, const Call&) {
  // cuMemsetD16 and D32 refuse a destination off the element's alignment; a byte count that is no
  // whole number of elements cannot come from a count of them.
  const uint32_t element = a.element_bytes == 0 ? 1 : a.element_bytes;
  if ((element != 1 && element != 2 && element != 4) || a.dst % element != 0 || a.bytes % element != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (!Owns(a.dst, a.bytes, "memset destination")) return CUDA_ERROR_INVALID_VALUE;
  Result<CUstream> stream = StreamOf(a.stream);
  if (!stream.ok()) return CUDA_ERROR_INVALID_HANDLE;
  const size_t count = a.bytes / element;
  if (element == 2) {
    auto value = static_cast<unsigned short>(a.value);
    if (a.stream == 0) return driver_->cuMemsetD16(a.dst, value, count);
    return driver_->cuMemsetD16Async(a.dst, value, count, *stream);
  }
  if (element == 4) {
    if (a.stream == 0) return driver_->cuMemsetD32(a.dst, a.value, count);
    return driver_->cuMemsetD32Async(a.dst, a.value, count, *stream);
  }
  auto value = static_cast<unsigned char>(a.value);
  if (a.stream == 0) return driver_->cuMemsetD8(a.dst, value, a.bytes);
  return driver_->cuMemsetD8Async(a.dst, value, a.bytes, *stream);
}

bool Session::PitchedSpan(uint64_t pitch, uint64_t width, uint64_t height, uint64_t* span) {
  if (height > 1 && width > pitch) return false;
  uint64_t rows = 0;
  return !__builtin_mul_overflow(height - 1, pitch, &rows) && !__builtin_add_overflow(rows, width, span);
}

CUresult Session::Memcpy2D(const ipc::Copy2DArgs& a, const Call& call) {
  uint64_t packed = 0;
  if (__builtin_mul_overflow(a.width, a.height, &packed)) return CUDA_ERROR_INVALID_VALUE;
  const auto kind = static_cast<ipc::Copy2DKind>(a.kind);
  const bool to_device = kind == ipc::Copy2DKind::kHostToDevice;
  if (!to_device && !call.tail.empty()) return CUDA_ERROR_INVALID_VALUE;
  if (packed == 0) return to_device && !call.tail.empty() ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
  CUDA_MEMCPY2D c{};
  c.WidthInBytes = a.width;
  c.Height = a.height;
  // Each side: device memory of the session whose rows all lie in its buffer, or the packed rows
  // (the record's tail going in, the reply area coming out).
  auto device_side = [&](uint64_t ptr, uint64_t pitch, const char* what, CUmemorytype* type, CUdeviceptr* device,
                         size_t* side_pitch) {
    uint64_t span = 0;
    if (!PitchedSpan(pitch, a.width, a.height, &span) || !Owns(ptr, span, what)) return false;
    *type = CU_MEMORYTYPE_DEVICE;
    *device = ptr;
    *side_pitch = pitch;
    return true;
  };
  auto host_side = [&](CUmemorytype* type, size_t* side_pitch) {
    *type = CU_MEMORYTYPE_HOST;
    *side_pitch = a.width;
  };
  bool ok = false;
  switch (kind) {
    case ipc::Copy2DKind::kHostToDevice:
      // The rows are ring memory the frontend reuses once the record is released: as for a 1D
      // copy, the driver treats them as pageable memory, whose copies are complete on return.
      ok = packed == call.tail.size() &&
           device_side(a.dst, a.dst_pitch, "2D copy destination", &c.dstMemoryType, &c.dstDevice, &c.dstPitch);
      host_side(&c.srcMemoryType, &c.srcPitch);
      c.srcHost = call.tail.data();
      break;
    case ipc::Copy2DKind::kDeviceToHost:
      ok = packed <= ring_->reply_capacity() &&
           device_side(a.src, a.src_pitch, "2D copy source", &c.srcMemoryType, &c.srcDevice, &c.srcPitch);
      host_side(&c.dstMemoryType, &c.dstPitch);
      c.dstHost = call.reply;
      break;
    case ipc::Copy2DKind::kDeviceToDevice:
      ok = device_side(a.dst, a.dst_pitch, "2D copy destination", &c.dstMemoryType, &c.dstDevice, &c.dstPitch) &&
           device_side(a.src, a.src_pitch, "2D copy source", &c.srcMemoryType, &c.srcDevice, &c.srcPitch);
      break;
    default:
      break;
  }
  if (!ok) return CUDA_ERROR_INVALID_VALUE;
  Result<CUstream> stream = StreamOf(a.stream);
  if (!stream.ok()) return CUDA_ERROR_INVALID_HANDLE;
  CUresult r = a.stream == 0 ? driver_->cuMemcpy2D(&c) : driver_->cuMemcpy2DAsync(&c, *stream);
  if (kind == ipc::Copy2DKind::kDeviceToHost) {
    // The rows must be in the reply area when the reply is published.
    if (r == CUDA_SUCCESS && a.stream != 0) r = driver_->cuStreamSynchronize(*stream);
    *call.reply_len = packed;
  }
  return r;
}

CUresult Session::Memset2D(const ipc::Memset2DArgs& a, const Call&) {
  if (a.width == 0 || a.height == 0) return CUDA_SUCCESS;
  uint64_t span = 0;
  if (!PitchedSpan(a.pitch, a.width, a.height, &span) || !Owns(a.dst, span, "2D memset destination")) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  Result<CUstream> stream = StreamOf(a.stream);
  if (!stream.ok()) return CUDA_ERROR_INVALID_HANDLE;
  auto value = static_cast<unsigned char>(a.value);
  if (a.stream == 0) return driver_->cuMemsetD2D8(a.dst, a.pitch, value, a.width, a.height);
  return driver_->cuMemsetD2D8Async(a.dst, a.pitch, value, a.width, a.height, *stream);
}

// cudaFreeAsync: the buffer leaves the session's table now (a later call naming it is refused),
// and FreeBuffer synchronises the context before the memory goes back, so everything queued on
// the stream before the free, and more, has run by then.
CUresult Session::MemFreeAsync(const ipc::StreamPointerArgs& a, const Call& call) {
  if (!StreamOf(a.stream).ok()) return CUDA_ERROR_INVALID_HANDLE;
  if (a.ptr == 0) return CUDA_ERROR_INVALID_VALUE;
  return MemFree(ipc::PointerArgs{a.ptr}, call);
}

void Session::ScrubBorrowedSpaces() {
  auto scrub = [&](std::unique_ptr<InstanceAddressSpace>& space, int device) {
    if (space == nullptr || !space->borrowed()) return;
    for (uint64_t base : buffers_.Bases()) {
      if (!space->Contains(base)) continue;
      buffers_.Erase(base).IgnoreError();
      buffer_devices_.erase(base);
    }
    driver::ContextScope scope(*driver_, group_ ? group_->context(device) : context_);
    // The scrub of the context the memory's device was leased in zeroes it later.
    ctxpool::TenantResources* behind = nullptr;
    if (range_release_ == RangeRelease::kUnmappedZeroedBehind) {
      if (group_) {
        behind = &group_->tenant(device);
      } else if (space == space_ && lease_) {
        behind = &lease_->tenant();
      }
    }
    Status s = behind != nullptr ? space->UnmapAll(&behind->unmapped) : space->ZeroAndUnmapAll();
    if (!s.ok()) PHOS_LOG(Warn, "runtime", "pid {}: instance range of device {} not scrubbed: {}", pid_, device, s.message());
    space.reset();
  };
  scrub(space_, 0);
  for (auto& [device, space] : device_spaces_) scrub(space, device);
  device_spaces_.clear();
}

InstanceAddressSpace* Session::SpaceOf(uint64_t address) const {
  if (space_ != nullptr && space_->Contains(address)) return space_.get();
  for (const auto& [device, space] : device_spaces_) {
    if (space != nullptr && space->Contains(address)) return space.get();
  }
  return nullptr;
}

CUresult Session::AllocateBuffer(uint64_t bytes, CUdeviceptr* out) {
  InstanceAddressSpace* given = nullptr;
  if (route_device_ == 0) {
    given = space_.get();
  } else if (auto it = device_spaces_.find(route_device_); it != device_spaces_.end()) {
    given = it->second.get();
  }
  if (given != nullptr) {
    if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
    Result<CUdeviceptr> ptr = given->Allocate(bytes);
    if (!ptr.ok()) {
      PHOS_LOG_EVERY_SEC(Warn, "runtime", 1, "pid {}: cudaMalloc({}) on device {} failed: {}", pid_, bytes, route_device_,
                         ptr.status().message());
      return ptr.status().code() == StatusCode::kOutOfMemory ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_UNKNOWN;
    }
    *out = *ptr;
    return CUDA_SUCCESS;
  }
  if (!lease_ || route_device_ != 0 || va_bytes_ == 0) return driver_->cuMemAlloc(out, bytes);
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  if (space_ == nullptr) {
    Result<std::unique_ptr<InstanceAddressSpace>> space =
        InstanceAddressSpace::Reserve(driver_, {.range_bytes = va_bytes_, .device = base_device_});
    if (!space.ok()) {
      PHOS_LOG_EVERY_SEC(Error, "runtime", 1, "pid {}: cudaMalloc refused: {}", pid_, space.status().message());
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    space_ = std::move(*space);
    PHOS_LOG(Debug, "runtime", "pid {}: instance address space [{:#x}, +{})", pid_, space_->base(), space_->range_bytes());
  }
  Result<CUdeviceptr> ptr = space_->Allocate(bytes);
  if (!ptr.ok()) {
    PHOS_LOG_EVERY_SEC(Warn, "runtime", 1, "pid {}: cudaMalloc({}) failed: {}", pid_, bytes, ptr.status().message());
    return ptr.status().code() == StatusCode::kOutOfMemory ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_UNKNOWN;
  }
  *out = *ptr;
  return CUDA_SUCCESS;
}

CUresult Session::FreeBuffer(CUdeviceptr base, uint64_t bytes) {
  InstanceAddressSpace* space = SpaceOf(base);
  if (space == nullptr) {
    // A memset of device memory may still run when cuMemsetD8 returns: done before the free. The
    // buffer is freed even when zeroing failed (it is no longer the session's to free later), as
    // InstanceAddressSpace::UnmapPhysical does; the first error is the answer.
    CUresult zeroed = driver_->cuMemsetD8(base, 0, bytes);
    const char* step = "cuMemsetD8";
    if (zeroed == CUDA_SUCCESS) {
      zeroed = driver_->cuCtxSynchronize();
      step = "cuCtxSynchronize";
    }
    if (zeroed != CUDA_SUCCESS) {
      PHOS_LOG_EVERY_SEC(Warn, "runtime", 1, "pid {}: buffer {:#x} ({} bytes) freed without zeroing it: {}", pid_, base,
                         bytes, driver::CuStatus(zeroed, step, driver_->error_text()).message());
    }
    const CUresult freed = driver_->cuMemFree(base);
    return zeroed != CUDA_SUCCESS ? zeroed : freed;
  }
  if (auto it = shared_buffers_.find(base); it != shared_buffers_.end()) {
    // A shared buffer freed: nothing of it may outlive the mapping. Its loader must not publish
    // it (withdrawn, under the lock its on_ready holds), and a buffer allocated later at the same
    // address is the session's own, not a shared one to copy on write.
    if (const auto& publish = it->second.publish; publish != nullptr) {
      std::lock_guard lock(publish->mu);
      publish->withdrawn = true;
    }
    shared_buffers_.erase(it);
  }
  // cudaFree synchronises with the device: nothing queued may still use the bytes that the
  // address space may hand out again at once (and zeroes, when the memory goes back).
  if (CUresult r = driver_->cuCtxSynchronize(); r != CUDA_SUCCESS) return r;
  Status s = space->Free(base);
  if (!s.ok()) PHOS_LOG_EVERY_SEC(Warn, "runtime", 1, "pid {}: cudaFree: {}", pid_, s.message());
  return s.ok() ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

}  // namespace phos::runtime
