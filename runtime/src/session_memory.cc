// A session's device memory: allocations from its instance address spaces (one per device of a
// deployed function's range) or cuMemAlloc, and the scrub of borrowed ranges at its end.
#include "phos/base/log.h"
#include "phos/driver/context_scope.h"
#include "session.h"

namespace phos::runtime {

void Session::ScrubBorrowedSpaces() {
  auto scrub = [&](std::unique_ptr<InstanceAddressSpace>& space, int device) {
    if (space == nullptr || !space->borrowed()) return;
    for (uint64_t base : buffers_.Bases()) {
      if (!space->Contains(base)) continue;
      buffers_.Erase(base).IgnoreError();
      buffer_devices_.erase(base);
    }
    driver::ContextScope scope(*driver_, group_ ? group_->context(device) : context_);
    Status s = space->ZeroAndUnmapAll();
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

CUresult Session::FreeBuffer(CUdeviceptr base) {
  InstanceAddressSpace* space = SpaceOf(base);
  if (space == nullptr) return driver_->cuMemFree(base);
  // cudaFree synchronises with the device: nothing queued may still use the bytes that the
  // address space may hand out again at once.
  if (CUresult r = driver_->cuCtxSynchronize(); r != CUDA_SUCCESS) return r;
  Status s = space->Free(base);
  if (!s.ok()) PHOS_LOG_EVERY_SEC(Warn, "runtime", 1, "pid {}: cudaFree: {}", pid_, s.message());
  return s.ok() ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

}  // namespace phos::runtime
