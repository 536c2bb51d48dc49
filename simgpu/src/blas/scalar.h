// A cuBLAS scalar argument (alpha, beta; rot's c and s) taken as the handle's pointer mode says:
// in host pointer mode its bytes are read when the call is made; in device pointer mode its
// address is kept, checked like an operand, and read when the work runs, after the work before it
// on the stream (which may have written it).
#pragma once

#include <cublas_v2.h>

#include <cstdint>
#include <cstring>

#include "blas/operand_ranges.h"

namespace phos::sim::blas {

class ScalarArg {
 public:
  // Host mode: copies `size` (at most 16) bytes from `p`; device mode: keeps `p` and adds its
  // range to `ranges` (read). False for a null pointer or a range that cannot be device memory.
  bool Take(cublasPointerMode_t mode, const void* p, uint32_t size, const char* what, OperandRanges* ranges) {
    if (p == nullptr || size > sizeof(bytes_)) return false;
    if (mode == CUBLAS_POINTER_MODE_DEVICE) {
      device_ = p;
      return ranges->AddVector(what, p, 1, 1, size, Access::kRead);
    }
    std::memcpy(bytes_, p, size);
    return true;
  }
  // The value as T (the routine's scalar type): from the host copy, or from device memory.
  template <typename T>
  T As() const {
    T value;
    std::memcpy(&value, device_ != nullptr ? device_ : bytes_, sizeof(T));
    return value;
  }
  bool on_device() const { return device_ != nullptr; }
  // Whether the value is known when the call is made (host pointer mode) and equals `v`: what a
  // quick return may look at before any work is enqueued.
  template <typename T>
  bool KnownEqual(T v) const {
    return device_ == nullptr && As<T>() == v;
  }

 private:
  alignas(16) uint8_t bytes_[16] = {};
  const void* device_ = nullptr;
};

}  // namespace phos::sim::blas
