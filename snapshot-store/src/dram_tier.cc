#include "phos/store/dram_tier.h"

#include <fmt/core.h>

#include <cstring>
#include <unordered_set>

#include "phos/base/log.h"

namespace phos::store {
namespace {

// Backing sources name the chunk in their errors by contract; an I/O error may not, so the id
// is added when it is missing.
Status NameChunk(Status s, const ChunkRef& ref) {
  if (s.ok()) return s;
  std::string hex = ref.id.ToHex();
  if (s.message().find(hex) != std::string::npos) return s;
  return s.WithContext(fmt::format("chunk {}", hex));
}

Status Verify(const ChunkRef& ref, const void* data) {
  if (ChunkId::Of(data, ref.size) == ref.id) return Status::Ok();
  return Status::Corruption(
      fmt::format("chunk {}: its {} bytes do not match its id", ref.id.ToHex(), ref.size));
}

}  // namespace

ChunkLease& ChunkLease::operator=(ChunkLease&& other) noexcept {
  if (this != &other) {
    Release();
    tier_ = other.tier_;
    slot_ = other.slot_;
    data_ = other.data_;
    size_ = other.size_;
    other.tier_ = nullptr;
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

void ChunkLease::Release() {
  if (tier_ == nullptr) return;
  tier_->ReleaseLease(slot_);
  tier_ = nullptr;
  data_ = nullptr;
  size_ = 0;
}

Result<std::unique_ptr<DramTier>> DramTier::Create(const DramTierOptions& options,
                                                   std::unique_ptr<PinnedAllocator> allocator,
                                                   ChunkSource* backing) {
  if (allocator == nullptr) return Status::InvalidArgument("DRAM tier: no allocator");
  if (backing == nullptr) return Status::InvalidArgument("DRAM tier: no backing chunk source");
  if (options.slot_bytes == 0) return Status::InvalidArgument("DRAM tier: slot_bytes must be > 0");
  uint64_t slots = options.capacity_bytes / options.slot_bytes;
  if (slots == 0) {
    return Status::InvalidArgument(
        fmt::format("DRAM tier: capacity_bytes {} is smaller than one slot ({} bytes)",
                    options.capacity_bytes, options.slot_bytes));
  }
  if (slots > UINT32_MAX)
    return Status::InvalidArgument(fmt::format("DRAM tier: {} slots is too many", slots));
  uint64_t bytes = slots * options.slot_bytes;
  Result<void*> arena = allocator->Allocate(bytes);
  if (!arena.ok()) {
    return arena.status().WithContext(
        fmt::format("DRAM tier arena of {} bytes from {}", bytes, allocator->name()));
  }
  PHOS_LOG(Info, "store", "DRAM tier: {} slots of {} bytes ({} MiB) from {}", slots, options.slot_bytes,
           bytes >> 20, allocator->name());
  return std::unique_ptr<DramTier>(new DramTier(std::move(allocator), backing, static_cast<uint8_t*>(*arena),
                                                options.slot_bytes, static_cast<size_t>(slots)));
}

DramTier::DramTier(std::unique_ptr<PinnedAllocator> allocator, ChunkSource* backing, uint8_t* arena,
                   uint32_t slot_bytes, size_t slots)
    : allocator_(std::move(allocator)),
      backing_(backing),
      arena_(arena),
      slot_bytes_(slot_bytes),
      slots_(slots) {
  // Popped from the back: slot 0 is used first.
  free_.reserve(slots);
  for (size_t i = slots; i > 0; --i) free_.push_back(static_cast<uint32_t>(i - 1));
  stats_.capacity_slots = slots;
}

DramTier::~DramTier() {
  for (const Slot& s : slots_) {
    if (s.leases > 0) PHOS_LOG(Error, "store", "DRAM tier destroyed while chunk {} is leased", s.id.ToHex());
  }
  allocator_->Free(arena_, capacity_bytes());
}

bool DramTier::TakeFreeSlotLocked(uint32_t* slot) {
  if (!free_.empty()) {
    *slot = free_.back();
    free_.pop_back();
    return true;
  }
  if (lru_.empty()) return false;
  *slot = lru_.front();
  lru_.pop_front();
  Slot& s = slots_[*slot];
  index_.erase(s.id);
  s = Slot{};
  ++stats_.evictions;
  return true;
}

void DramTier::MakeEvictableIfIdleLocked(uint32_t slot) {
  Slot& s = slots_[slot];
  if (s.state != SlotState::kResident || s.leases != 0 || s.pins != 0 || s.in_lru) return;
  s.lru_pos = lru_.insert(lru_.end(), slot);
  s.in_lru = true;
}

Result<uint32_t> DramTier::Acquire(const ChunkRef& ref, bool* no_slot) {
  *no_slot = false;
  std::unique_lock lock(mu_);
  for (;;) {
    auto it = index_.find(ref.id);
    if (it == index_.end()) break;
    Slot& s = slots_[it->second];
    if (s.state == SlotState::kLoading) {
      // Another reader is loading it; if that load fails the chunk is gone and we load it ourselves.
      loaded_.wait(lock);
      continue;
    }
    if (s.size != ref.size) {
      return Status::InvalidArgument(
          fmt::format("chunk {}: asked for {} bytes, the tier holds {}", ref.id.ToHex(), ref.size, s.size));
    }
    ++s.leases;
    if (s.in_lru) {
      lru_.erase(s.lru_pos);
      s.in_lru = false;
    }
    ++stats_.hits;
    return it->second;
  }
  uint32_t slot = 0;
  if (!TakeFreeSlotLocked(&slot)) {
    *no_slot = true;
    return Status::OutOfMemory(fmt::format("DRAM tier: all {} slots are pinned or leased", slots_.size()));
  }
  ++stats_.misses;
  Slot& s = slots_[slot];
  s.id = ref.id;
  s.size = ref.size;
  s.state = SlotState::kLoading;
  s.leases = 1;
  index_[ref.id] = slot;
  lock.unlock();

  uint8_t* data = SlotData(slot);
  Status st = NameChunk(backing_->ReadChunk(ref, data), ref);
  // The backing source verifies too; checking here keeps a faulty source from poisoning the
  // cache, which every later restore would read unchecked.
  if (st.ok()) st = Verify(ref, data);

  lock.lock();
  if (!st.ok()) {
    index_.erase(ref.id);
    s = Slot{};
    free_.push_back(slot);
    ++stats_.load_failures;
    loaded_.notify_all();
    return st;
  }
  s.state = SlotState::kResident;
  loaded_.notify_all();
  return slot;
}

void DramTier::ReleaseLease(uint32_t slot) {
  std::lock_guard lock(mu_);
  --slots_[slot].leases;
  MakeEvictableIfIdleLocked(slot);
}

Status DramTier::ReadChunk(const ChunkRef& ref, void* dst) {
  if (ref.size <= slot_bytes_) {
    bool no_slot = false;
    Result<uint32_t> slot = Acquire(ref, &no_slot);
    if (slot.ok()) {
      std::memcpy(dst, SlotData(*slot), ref.size);
      ReleaseLease(*slot);
      return Status::Ok();
    }
    if (!no_slot) return slot.status();
  }
  {
    std::lock_guard lock(mu_);
    ++stats_.bypasses;
  }
  PHOS_LOG_EVERY_SEC(Warn, "store", 5, "DRAM tier bypassed for chunk {} ({} bytes; {} slots of {} bytes)",
                     ref.id.ToHex(), ref.size, slots_.size(), slot_bytes_);
  PHOS_RETURN_IF_ERROR(NameChunk(backing_->ReadChunk(ref, dst), ref));
  return Verify(ref, dst);
}

Result<ChunkLease> DramTier::Lease(const ChunkRef& ref) {
  if (ref.size > slot_bytes_) {
    return Status::InvalidArgument(
        fmt::format("chunk {}: {} bytes do not fit a {}-byte slot", ref.id.ToHex(), ref.size, slot_bytes_));
  }
  bool no_slot = false;
  PHOS_ASSIGN_OR_RETURN(uint32_t slot, Acquire(ref, &no_slot));
  return ChunkLease(this, slot, SlotData(slot), ref.size);
}

void DramTier::DropPinsLocked(const std::vector<uint32_t>& slots) {
  for (uint32_t slot : slots) {
    --slots_[slot].pins;
    MakeEvictableIfIdleLocked(slot);
  }
}

Status DramTier::Pin(std::string_view key, const std::vector<ChunkRef>& chunks) {
  {
    std::lock_guard lock(mu_);
    if (!pinned_.emplace(std::string(key), PinSet{}).second) {
      return Status::AlreadyExists(fmt::format("DRAM tier: '{}' is already pinned", key));
    }
  }
  std::vector<uint32_t> held;
  std::unordered_set<ChunkId, ChunkIdHash> seen;
  Status failed;
  for (const ChunkRef& ref : chunks) {
    if (!seen.insert(ref.id).second) continue;
    Result<ChunkLease> lease = Lease(ref);
    if (!lease.ok()) {
      failed = lease.status();
      break;
    }
    std::lock_guard lock(mu_);
    // The pin is taken before the lease goes, so the slot is never evictable in between.
    ++slots_[lease->slot_].pins;
    held.push_back(lease->slot_);
    --slots_[lease->slot_].leases;
    lease->tier_ = nullptr;
  }
  std::lock_guard lock(mu_);
  if (!failed.ok()) {
    DropPinsLocked(held);
    pinned_.erase(std::string(key));
    return failed.WithContext(fmt::format("pin '{}' ({} chunks)", key, seen.size()));
  }
  PinSet& set = pinned_[std::string(key)];
  set.complete = true;
  set.slots = std::move(held);
  return Status::Ok();
}

Status DramTier::Unpin(std::string_view key) {
  std::lock_guard lock(mu_);
  auto it = pinned_.find(std::string(key));
  if (it == pinned_.end()) return Status::NotFound(fmt::format("DRAM tier: '{}' is not pinned", key));
  if (!it->second.complete) {
    return Status::FailedPrecondition(fmt::format("DRAM tier: '{}' is still being pinned", key));
  }
  DropPinsLocked(it->second.slots);
  pinned_.erase(it);
  return Status::Ok();
}

bool DramTier::IsResident(const ChunkId& id) const {
  std::lock_guard lock(mu_);
  auto it = index_.find(id);
  return it != index_.end() && slots_[it->second].state == SlotState::kResident;
}

DramTierStats DramTier::Stats() const {
  std::lock_guard lock(mu_);
  DramTierStats out = stats_;
  for (const Slot& s : slots_) {
    if (s.state != SlotState::kResident) continue;
    ++out.resident_chunks;
    if (s.pins > 0) {
      ++out.pinned_chunks;
      out.pinned_bytes += s.size;
    }
    if (s.leases > 0) ++out.leased_chunks;
  }
  return out;
}

}  // namespace phos::store
