// A session's device allocations as an interval map: what the API server checks every device
// pointer a remoted call names against (docs/remoting.md, isolation).
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "phos/base/status.h"

namespace phos::runtime {

class BufferTable {
 public:
  // Records [base, base + bytes). InvalidArgument when it is empty or overlaps a recorded buffer.
  Status Insert(uint64_t base, uint64_t bytes);
  // Forgets the buffer starting exactly at `base`; NotFound otherwise (as cudaFree of a pointer
  // that is not an allocation's start).
  Status Erase(uint64_t base);
  // True when [ptr, ptr + bytes) lies inside one recorded buffer (bytes 0: ptr inside one).
  bool Contains(uint64_t ptr, uint64_t bytes) const;
  // Ok, or InvalidArgument naming the range and `what` ("copy destination").
  Status Check(uint64_t ptr, uint64_t bytes, const char* what) const;
  std::vector<uint64_t> Bases() const;
  // Every buffer, base -> bytes.
  const std::map<uint64_t, uint64_t>& buffers() const { return buffers_; }
  size_t size() const { return buffers_.size(); }
  uint64_t total_bytes() const { return total_bytes_; }

 private:
  std::map<uint64_t, uint64_t> buffers_;  // base -> bytes
  uint64_t total_bytes_ = 0;
};

}  // namespace phos::runtime
