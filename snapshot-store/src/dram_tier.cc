#include "phos/store/dram_tier.h"

#include <fmt/core.h>

#include <algorithm>
#include <cstring>
#include <optional>
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
  PHOS_LOG(Info, "store", "DRAM tier: {} pages of {} bytes ({} MiB) from {}", slots, options.slot_bytes,
           bytes >> 20, allocator->name());
  return std::unique_ptr<DramTier>(new DramTier(std::move(allocator), backing, static_cast<uint8_t*>(*arena),
                                                options.slot_bytes, static_cast<size_t>(slots)));
}

namespace {
// The smallest slot a page is cut into: a host page.
constexpr uint32_t kSmallestSlot = 4096;
}  // namespace

DramTier::DramTier(std::unique_ptr<PinnedAllocator> allocator, ChunkSource* backing, uint8_t* arena,
                   uint32_t slot_bytes, size_t pages)
    : allocator_(std::move(allocator)),
      backing_(backing),
      arena_(arena),
      slot_bytes_(slot_bytes),
      pages_(pages) {
  while ((slot_bytes_ >> classes_) >= kSmallestSlot) ++classes_;
  free_.resize(classes_);
  lru_.resize(classes_);
  // Popped from the back: page 0 is used first.
  free_pages_.reserve(pages);
  for (size_t i = pages; i > 0; --i) free_pages_.push_back(static_cast<uint32_t>(i - 1));
  stats_.capacity_slots = pages;
}

DramTier::~DramTier() {
  for (const Slot& s : slots_) {
    if (s.leases > 0) PHOS_LOG(Error, "store", "DRAM tier destroyed while chunk {} is leased", s.id.ToHex());
  }
  allocator_->Free(arena_, capacity_bytes());
}

uint32_t DramTier::ClassOf(uint32_t bytes) const {
  uint32_t k = 0;
  while (k + 1 < classes_ && ClassBytes(k + 1) >= bytes) ++k;
  return k;
}

void DramTier::AssignPageLocked(uint32_t page, uint32_t size_class) {
  Page& p = pages_[page];
  p.size_class = static_cast<int>(size_class);
  p.used = 0;
  const uint32_t count = 1u << size_class;
  p.slots.resize(count);
  // Pushed in reverse: the page's first slot is taken first.
  for (uint32_t i = count; i > 0; --i) {
    uint32_t index;
    if (!spare_slots_.empty()) {
      index = spare_slots_.back();
      spare_slots_.pop_back();
    } else {
      index = static_cast<uint32_t>(slots_.size());
      slots_.emplace_back();
    }
    Slot& s = slots_[index];
    s = Slot{};
    s.offset = uint64_t{page} * slot_bytes_ + uint64_t{i - 1} * ClassBytes(size_class);
    s.page = page;
    s.size_class = size_class;
    p.slots[i - 1] = index;
    free_[size_class].push_back(index);
  }
}

void DramTier::EvictLocked(uint32_t slot) {
  Slot& s = slots_[slot];
  lru_[s.size_class].erase(s.lru_pos);
  s.in_lru = false;
  --pages_[s.page].evictable;
  index_.erase(s.id);
  ++stats_.evictions;
  FreeSlotLocked(slot);
}

void DramTier::FreeSlotLocked(uint32_t slot) {
  Slot& s = slots_[slot];
  const Slot place = s;
  s = Slot{};
  s.offset = place.offset;
  s.page = place.page;
  s.size_class = place.size_class;
  free_[s.size_class].push_back(slot);
  Page& p = pages_[s.page];
  if (--p.used > 0) return;
  // The page's last chunk went: the page is free for any class again, its slot records kept.
  std::erase_if(free_[s.size_class], [&](uint32_t i) { return slots_[i].page == s.page; });
  spare_slots_.insert(spare_slots_.end(), p.slots.begin(), p.slots.end());
  free_pages_.push_back(s.page);
  p = Page{};
}

std::optional<std::pair<uint32_t, uint64_t>> DramTier::ReclaimableLocked(uint32_t size_class) const {
  // Of each other class, the first page (from the least recently used end) whose chunks are all
  // evictable; of those, the one whose chunk has been idle longest.
  std::optional<std::pair<uint32_t, uint64_t>> best;
  for (uint32_t k = 0; k < classes_; ++k) {
    if (k == size_class) continue;
    for (uint32_t candidate : lru_[k]) {
      const Slot& c = slots_[candidate];
      if (pages_[c.page].used != pages_[c.page].evictable) continue;
      if (!best || c.idle_since < best->second) best = std::make_pair(c.page, c.idle_since);
      break;
    }
  }
  return best;
}

bool DramTier::TakeFreeSlotLocked(uint32_t bytes, uint32_t* slot) {
  const uint32_t k = ClassOf(bytes);
  while (free_[k].empty()) {
    if (!free_pages_.empty()) {
      const uint32_t page = free_pages_.back();
      free_pages_.pop_back();
      AssignPageLocked(page, k);
      continue;
    }
    // The chunk idle longest goes: one of this class, or a whole page of another.
    std::optional<std::pair<uint32_t, uint64_t>> page = ReclaimableLocked(k);
    if (!lru_[k].empty() && (!page || slots_[lru_[k].front()].idle_since <= page->second)) {
      EvictLocked(lru_[k].front());
    } else if (page) {
      // Its last eviction frees the page (FreeSlotLocked).
      const std::vector<uint32_t> chunks = pages_[page->first].slots;
      for (uint32_t i : chunks) {
        if (slots_[i].in_lru) EvictLocked(i);
      }
    } else {
      return false;
    }
  }
  *slot = free_[k].back();
  free_[k].pop_back();
  ++pages_[slots_[*slot].page].used;
  return true;
}

void DramTier::MakeEvictableIfIdleLocked(uint32_t slot) {
  Slot& s = slots_[slot];
  if (s.state != SlotState::kResident || s.leases != 0 || s.pins != 0 || s.in_lru) return;
  s.lru_pos = lru_[s.size_class].insert(lru_[s.size_class].end(), slot);
  s.in_lru = true;
  s.idle_since = ++lru_tick_;
  ++pages_[s.page].evictable;
}

Result<uint32_t> DramTier::Acquire(const ChunkRef& ref, bool* no_slot, uint8_t** data_out) {
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
      lru_[s.size_class].erase(s.lru_pos);
      s.in_lru = false;
      --pages_[s.page].evictable;
    }
    ++stats_.hits;
    *data_out = arena_ + s.offset;
    return it->second;
  }
  uint32_t slot = 0;
  if (!TakeFreeSlotLocked(ref.size, &slot)) {
    *no_slot = true;
    return Status::OutOfMemory(fmt::format("DRAM tier: no room for {} bytes: the chunks in all {} pages are pinned or leased",
                                           ref.size, pages_.size()));
  }
  ++stats_.misses;
  Slot& s = slots_[slot];
  s.id = ref.id;
  s.size = ref.size;
  s.state = SlotState::kLoading;
  s.leases = 1;
  index_[ref.id] = slot;
  // The slot's place, read under the lock: the deque of slots may grow meanwhile.
  uint8_t* data = arena_ + s.offset;
  lock.unlock();

  Status st = NameChunk(backing_->ReadChunk(ref, data), ref);
  // The backing source verifies too; checking here keeps a faulty source from poisoning the
  // cache, which every later restore would read unchecked.
  if (st.ok()) st = Verify(ref, data);

  lock.lock();
  if (!st.ok()) {
    index_.erase(ref.id);
    FreeSlotLocked(slot);
    ++stats_.load_failures;
    loaded_.notify_all();
    return st;
  }
  s.state = SlotState::kResident;
  loaded_.notify_all();
  *data_out = data;
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
    uint8_t* data = nullptr;
    Result<uint32_t> slot = Acquire(ref, &no_slot, &data);
    if (slot.ok()) {
      std::memcpy(dst, data, ref.size);
      ReleaseLease(*slot);
      return Status::Ok();
    }
    if (!no_slot) return slot.status();
  }
  {
    std::lock_guard lock(mu_);
    ++stats_.bypasses;
  }
  PHOS_LOG_EVERY_SEC(Warn, "store", 5, "DRAM tier bypassed for chunk {} ({} bytes; {} pages of {} bytes)",
                     ref.id.ToHex(), ref.size, pages_.size(), slot_bytes_);
  PHOS_RETURN_IF_ERROR(NameChunk(backing_->ReadChunk(ref, dst), ref));
  return Verify(ref, dst);
}

Result<ChunkLease> DramTier::Lease(const ChunkRef& ref) {
  if (ref.size > slot_bytes_) {
    return Status::InvalidArgument(
        fmt::format("chunk {}: {} bytes do not fit a {}-byte slot", ref.id.ToHex(), ref.size, slot_bytes_));
  }
  bool no_slot = false;
  uint8_t* data = nullptr;
  PHOS_ASSIGN_OR_RETURN(uint32_t slot, Acquire(ref, &no_slot, &data));
  return ChunkLease(this, slot, data, ref.size);
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
