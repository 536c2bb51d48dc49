// Host memory aligned for direct I/O: O_DIRECT reads need the buffer, the file offset and the
// length aligned to the device's logical block; 4 KiB covers every block device in use.
#pragma once

#include <cstddef>
#include <cstdint>

#include "phos/base/status.h"

namespace phos::store {

class AlignedBuffer {
 public:
  static constexpr size_t kAlignment = 4096;

  AlignedBuffer() = default;
  // `size` bytes (capacity rounded up to kAlignment), or OutOfMemory.
  static Result<AlignedBuffer> Allocate(size_t size);
  ~AlignedBuffer();
  AlignedBuffer(AlignedBuffer&& other) noexcept;
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  void* data() const { return data_; }
  size_t size() const { return size_; }
  size_t capacity() const { return capacity_; }

  // Whether `p` meets the alignment direct I/O needs.
  static bool IsAligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % kAlignment == 0; }
  static size_t RoundUp(size_t n) { return (n + kAlignment - 1) / kAlignment * kAlignment; }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
  size_t capacity_ = 0;
};

}  // namespace phos::store
