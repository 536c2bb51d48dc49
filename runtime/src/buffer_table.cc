#include "phos/runtime/buffer_table.h"

#include <fmt/core.h>

namespace phos::runtime {

Status BufferTable::Insert(uint64_t base, uint64_t bytes) {
  if (bytes == 0 || base + bytes < base) return Status::InvalidArgument(fmt::format("buffer {:#x}+{} is empty or wraps", base, bytes));
  auto next = buffers_.lower_bound(base);
  if (next != buffers_.end() && next->first < base + bytes) {
    return Status::InvalidArgument(fmt::format("buffer {:#x}+{} overlaps {:#x}+{}", base, bytes, next->first, next->second));
  }
  if (next != buffers_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second > base) {
      return Status::InvalidArgument(fmt::format("buffer {:#x}+{} overlaps {:#x}+{}", base, bytes, prev->first, prev->second));
    }
  }
  buffers_.emplace(base, bytes);
  total_bytes_ += bytes;
  return Status::Ok();
}

Status BufferTable::Erase(uint64_t base) {
  auto it = buffers_.find(base);
  if (it == buffers_.end()) return Status::NotFound(fmt::format("{:#x} is not the start of a buffer of this session", base));
  total_bytes_ -= it->second;
  buffers_.erase(it);
  return Status::Ok();
}

bool BufferTable::Contains(uint64_t ptr, uint64_t bytes) const {
  auto it = buffers_.upper_bound(ptr);
  if (it == buffers_.begin()) return false;
  --it;
  uint64_t end = it->first + it->second;
  if (ptr >= end) return false;
  return bytes <= end - ptr;
}

Status BufferTable::Check(uint64_t ptr, uint64_t bytes, const char* what) const {
  if (Contains(ptr, bytes)) return Status::Ok();
  return Status::InvalidArgument(fmt::format("{} {:#x}+{} is not inside a buffer of this session", what, ptr, bytes));
}

std::vector<uint64_t> BufferTable::Bases() const {
  std::vector<uint64_t> out;
  out.reserve(buffers_.size());
  for (const auto& [base, bytes] : buffers_) out.push_back(base);
  return out;
}

}  // namespace phos::runtime
