#include "phos/store/aligned_buffer.h"

#include <cstdint>
#include <cstdlib>
#include <utility>

#include <fmt/format.h>

namespace phos::store {

Result<AlignedBuffer> AlignedBuffer::Allocate(size_t size) {
  AlignedBuffer b;
  b.capacity_ = RoundUp(size == 0 ? 1 : size);
  b.data_ = std::aligned_alloc(kAlignment, b.capacity_);
  if (b.data_ == nullptr) return Status::OutOfMemory(fmt::format("aligned buffer of {} bytes", size));
  b.size_ = size;
  return b;
}

AlignedBuffer::~AlignedBuffer() { std::free(data_); }

AlignedBuffer::AlignedBuffer(AlignedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      capacity_(std::exchange(other.capacity_, 0)) {}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& other) noexcept {
  if (this != &other) {
    std::free(data_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    capacity_ = std::exchange(other.capacity_, 0);
  }
  return *this;
}

}  // namespace phos::store
