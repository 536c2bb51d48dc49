// Takes typed values off the front of a fuzzer's input (a small stand-in for clang's
// FuzzedDataProvider, which the gcc build of the corpus drivers does not have). A value the input
// has no bytes left for reads as zero, so every input is a complete program for the target.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>

namespace phos::fuzz {

class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  template <typename T>
  T Take() {
    static_assert(std::is_trivially_copyable_v<T>);
    T value{};
    const size_t n = sizeof(T) < size_ ? sizeof(T) : size_;
    if (n != 0) std::memcpy(&value, data_, n);
    Advance(n);
    return value;
  }
  // Up to `max` bytes, fewer when the input ends.
  std::span<const uint8_t> TakeBytes(size_t max) {
    const size_t n = max < size_ ? max : size_;
    std::span<const uint8_t> out(data_, n);
    Advance(n);
    return out;
  }
  // A string of up to `max` bytes, its length taken first (one byte).
  std::string TakeString(size_t max) {
    size_t len = Take<uint8_t>();
    if (len > max) len = max;
    auto bytes = TakeBytes(len);
    return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  }
  std::span<const uint8_t> Rest() { return TakeBytes(size_); }
  bool empty() const { return size_ == 0; }
  size_t remaining() const { return size_; }

 private:
  void Advance(size_t n) {
    data_ += n;
    size_ -= n;
  }
  const uint8_t* data_;
  size_t size_;
};

}  // namespace phos::fuzz
