#include "phos/runtime/shared_buffers.h"

#include "phos/base/log.h"

namespace phos::runtime {

std::string SharedBuffers::ContentKey(const store::Buffer& buffer) {
  std::string key = std::to_string(buffer.size);
  for (const store::ChunkRef& c : buffer.chunks) {
    key += ':';
    key += c.id.ToBytes();
  }
  return key;
}

CUmemGenericAllocationHandle SharedBuffers::Acquire(int device, const std::string& content, uint64_t bytes) {
  std::lock_guard lock(mu_);
  auto it = entries_.find({device, content});
  if (it == entries_.end() || !it->second.resident || it->second.bytes != bytes) return 0;
  ++it->second.references;
  shared_bytes_ += bytes;
  return it->second.handle;
}

bool SharedBuffers::Register(int device, const std::string& content, CUmemGenericAllocationHandle handle,
                             uint64_t bytes) {
  std::lock_guard lock(mu_);
  return entries_.try_emplace({device, content}, Entry{.handle = handle, .bytes = bytes, .references = 1})
      .second;
}

bool SharedBuffers::MarkResident(int device, const std::string& content, CUmemGenericAllocationHandle handle) {
  std::lock_guard lock(mu_);
  auto it = entries_.find({device, content});
  if (it == entries_.end() || it->second.handle != handle) return false;
  it->second.resident = true;
  return true;
}

bool SharedBuffers::Withdraw(int device, const std::string& content, CUmemGenericAllocationHandle handle) {
  std::lock_guard lock(mu_);
  auto it = entries_.find({device, content});
  // Withdrawn already, and the content registered again since by another allocation: that one's.
  if (it == entries_.end() || it->second.handle != handle || it->second.resident) return false;
  entries_.erase(it);
  return true;
}

bool SharedBuffers::ClaimSole(int device, const std::string& content, CUmemGenericAllocationHandle handle) {
  std::lock_guard lock(mu_);
  auto it = entries_.find({device, content});
  if (it == entries_.end() || it->second.handle != handle) return true;
  if (it->second.references > 1) return false;
  entries_.erase(it);
  return true;
}

void SharedBuffers::CountPrivateCopy() {
  std::lock_guard lock(mu_);
  ++private_copies_;
}

bool SharedBuffers::Drop(int device, const std::string& content, CUmemGenericAllocationHandle handle) {
  std::lock_guard lock(mu_);
  auto it = entries_.find({device, content});
  // Not registered (withdrawn; the content may have been registered again since, by another
  // allocation): the caller's own.
  if (it == entries_.end() || it->second.handle != handle) return true;
  if (--it->second.references > 0) return false;
  entries_.erase(it);
  return true;
}

void SharedBuffers::Disable(const std::string& function) {
  std::lock_guard lock(mu_);
  if (disabled_.insert(function).second) {
    PHOS_LOG(Warn, "restore",
             "{}: a write missed by speculation faulted on its read-only weights; its restores "
             "load private copies from now on",
             function);
  }
}

bool SharedBuffers::Enabled(const std::string& function) const {
  std::lock_guard lock(mu_);
  return disabled_.count(function) == 0;
}

SharedBuffers::Stats SharedBuffers::stats() const {
  std::lock_guard lock(mu_);
  Stats s;
  for (const auto& [key, e] : entries_) {
    ++s.allocations;
    s.bytes += e.bytes;
    s.references += static_cast<uint64_t>(e.references);
  }
  s.shared_bytes = shared_bytes_;
  s.disabled_functions = disabled_.size();
  s.private_copies = private_copies_;
  return s;
}

}  // namespace phos::runtime
