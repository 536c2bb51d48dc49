// The DRAM tier (docs/design.md D6): one large pinned host arena caching hot snapshots' chunks in front of
// a backing ChunkSource (the disk store). Restores read through it; a chunk it holds is copied to
// the GPU straight from pinned memory.
//
// The arena is cut into pages of the store's chunk size, and each page in use into slots of one
// size class: the page's size halved k times, down to 4 KiB. A chunk takes a slot of the
// smallest class that holds it, so the tier holds about its capacity in bytes of chunks however
// small they are (a snapshot's small buffers are chunks of their own size). An index maps
// ChunkId -> slot. A slot is free, loading (one thread reads it from the backing source, others
// wait for it) or resident. A resident slot is held by leases (readers copying from it) and by
// pins (snapshots kept hot); a slot with neither is evictable, least recently used first within
// its class. A class that needs room takes a free page; else the chunk idle longest goes, of its
// own class or, with the rest of its page, of another class's page whose chunks are all
// evictable. A page whose last chunk goes is free for any class again.
//
// Thread-safe: one mutex guards the index; chunk bytes are copied outside it, protected by the
// slot's lease count.
#pragma once

#include <cuda.h>

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "phos/driver/cuda_check.h"
#include "phos/base/status.h"
#include "phos/store/chunk.h"

namespace phos::store {

// Where the arena (and readers' staging) comes from.
class PinnedAllocator {
 public:
  virtual ~PinnedAllocator() = default;
  // `bytes` (> 0) of page-aligned memory.
  virtual Result<void*> Allocate(size_t bytes) = 0;
  // Returns what Allocate gave, with the same size.
  virtual void Free(void* ptr, size_t bytes) = 0;
  // "mmap", "cuMemHostAlloc": for logs.
  virtual const char* name() const = 0;
};

// Anonymous private mmap: not pinned. For tests and offline tools.
class MmapAllocator final : public PinnedAllocator {
 public:
  Result<void*> Allocate(size_t bytes) override;
  void Free(void* ptr, size_t bytes) override;
  const char* name() const override { return "mmap"; }
};

// The driver entry points DriverPinnedAllocator calls. They come from the runtime's DriverTable
// (see DriverHostMemoryOf), passed by value so that the store does not link the runtime.
struct DriverHostMemory {
  decltype(&::cuCtxPushCurrent) ctx_push_current = nullptr;
  decltype(&::cuCtxPopCurrent) ctx_pop_current = nullptr;
  decltype(&::cuMemHostAlloc) mem_host_alloc = nullptr;
  decltype(&::cuMemFreeHost) mem_free_host = nullptr;
  driver::CuErrorText error_text;
  // The context pushed around each call (cuMemHostAlloc and cuMemFreeHost need one current);
  // the caller's current context is back afterwards.
  // The memory is allocated CU_MEMHOSTALLOC_PORTABLE, so it is pinned for every context.
  CUcontext context = nullptr;
};

// Fills DriverHostMemory from a phos::driver::DriverTable (or anything with its members).
template <typename Table>
DriverHostMemory DriverHostMemoryOf(const Table& table, CUcontext context) {
  return {table.cuCtxPushCurrent, table.cuCtxPopCurrent, table.cuMemHostAlloc,
          table.cuMemFreeHost,    table.error_text(),    context};
}

// Pinned host memory from the driver: real page-locked memory on a GPU host, simgpu's pinned
// memory (copied at the pinned rate) here.
class DriverPinnedAllocator final : public PinnedAllocator {
 public:
  // InvalidArgument when an entry point or the context is missing.
  static Result<std::unique_ptr<DriverPinnedAllocator>> Create(const DriverHostMemory& driver);
  Result<void*> Allocate(size_t bytes) override;
  void Free(void* ptr, size_t bytes) override;
  const char* name() const override { return "cuMemHostAlloc"; }

 private:
  explicit DriverPinnedAllocator(const DriverHostMemory& driver) : driver_(driver) {}
  DriverHostMemory driver_;
};

struct DramTierOptions {
  // Arena size; rounded down to whole pages, at least one. Default: 1 GiB.
  uint64_t capacity_bytes = 1ull << 30;
  // Page size, the largest slot: the store's chunk size. Larger chunks are read around the tier
  // (counted as bypasses). Default: 4 MiB.
  uint32_t slot_bytes = 4u << 20;
};

struct DramTierStats {
  uint64_t hits = 0;           // reads and leases served from a resident slot
  uint64_t misses = 0;         // loads from the backing source into a slot
  uint64_t evictions = 0;      // resident chunks dropped to make room
  uint64_t bypasses = 0;       // reads served around the tier: chunk larger than a slot, or no slot free
  uint64_t load_failures = 0;  // backing reads that failed or did not verify (nothing cached)
  uint64_t capacity_slots = 0;  // pages of slot_bytes (each holds one chunk of that size, or more smaller ones)
  uint64_t resident_chunks = 0;
  uint64_t pinned_chunks = 0;  // resident chunks held by at least one Pin
  uint64_t pinned_bytes = 0;   // their sizes: a chunk pinned by several snapshots counts once
  uint64_t leased_chunks = 0;  // resident chunks with live leases
};

class DramTier;

// A resident chunk's bytes in the arena, held against eviction until the lease is released or
// destroyed. Move-only; must not outlive its DramTier.
class ChunkLease {
 public:
  ChunkLease() = default;
  ~ChunkLease() { Release(); }
  ChunkLease(ChunkLease&& other) noexcept { *this = std::move(other); }
  ChunkLease& operator=(ChunkLease&& other) noexcept;
  ChunkLease(const ChunkLease&) = delete;
  ChunkLease& operator=(const ChunkLease&) = delete;

  explicit operator bool() const { return tier_ != nullptr; }
  const void* data() const { return data_; }
  uint32_t size() const { return size_; }
  void Release();

 private:
  friend class DramTier;
  ChunkLease(DramTier* tier, uint32_t slot, const void* data, uint32_t size)
      : tier_(tier), slot_(slot), data_(data), size_(size) {}
  DramTier* tier_ = nullptr;
  uint32_t slot_ = 0;
  const void* data_ = nullptr;
  uint32_t size_ = 0;
};

class DramTier final : public ChunkSource {
 public:
  // Allocates the arena from `allocator`. `backing` must outlive the tier.
  static Result<std::unique_ptr<DramTier>> Create(const DramTierOptions& options,
                                                  std::unique_ptr<PinnedAllocator> allocator,
                                                  ChunkSource* backing);
  // Leases must be released before.
  ~DramTier() override;
  DramTier(const DramTier&) = delete;
  DramTier& operator=(const DramTier&) = delete;

  // Read-through: a resident chunk is copied from its slot; a missing one is read from the
  // backing source into a free (or evicted) slot, verified against its id, then copied. A chunk
  // that fails is not cached; the error names it. When no slot can be freed (all pinned or
  // leased) the chunk is read straight into `dst`.
  Status ReadChunk(const ChunkRef& ref, void* dst) override;

  // The chunk's slot, loaded on a miss as ReadChunk does, held until the lease goes. For copies
  // from pinned memory with no staging copy. OutOfMemory when no slot can be freed; InvalidArgument
  // when the chunk is larger than a slot.
  Result<ChunkLease> Lease(const ChunkRef& ref);

  // Loads `chunks` and keeps them resident until Unpin(key). A chunk pinned under several keys
  // stays until all are unpinned. On failure nothing stays pinned under `key`. AlreadyExists for a
  // key already pinned; OutOfMemory when the pinned set does not fit.
  Status Pin(std::string_view key, const std::vector<ChunkRef>& chunks);
  // NotFound for a key not pinned. The chunks stay resident, now evictable.
  Status Unpin(std::string_view key);

  bool IsResident(const ChunkId& id) const;
  DramTierStats Stats() const;
  uint64_t capacity_bytes() const { return uint64_t{slot_bytes_} * pages_.size(); }
  uint32_t slot_bytes() const { return slot_bytes_; }
  const char* allocator_name() const { return allocator_->name(); }

 private:
  enum class SlotState { kFree, kLoading, kResident };
  struct Slot {
    // Where it is: fixed from the slot's making until its page goes to another class.
    uint64_t offset = 0;  // in the arena
    uint32_t page = 0;
    uint32_t size_class = 0;
    // What it holds.
    ChunkId id;
    uint32_t size = 0;
    SlotState state = SlotState::kFree;
    uint32_t leases = 0;
    uint32_t pins = 0;
    bool in_lru = false;
    std::list<uint32_t>::iterator lru_pos;
    uint64_t idle_since = 0;  // lru_tick_ when it became evictable: orders the classes' lists
  };
  struct Page {
    int size_class = -1;          // -1: free
    std::vector<uint32_t> slots;  // its slots, while it has a class
    uint32_t used = 0;            // its slots holding a chunk (loading or resident)
    uint32_t evictable = 0;       // of those, the ones in their class's LRU
  };

  DramTier(std::unique_ptr<PinnedAllocator> allocator, ChunkSource* backing, uint8_t* arena,
           uint32_t slot_bytes, size_t pages);
  uint32_t ClassBytes(uint32_t size_class) const { return slot_bytes_ >> size_class; }
  // The smallest class whose slots hold `bytes` (<= slot_bytes_).
  uint32_t ClassOf(uint32_t bytes) const;
  // A leased slot holding `ref`, loading it on a miss; `data` gets its bytes' address. `no_slot`
  // is set (and OutOfMemory returned) when no slot can be freed.
  Result<uint32_t> Acquire(const ChunkRef& ref, bool* no_slot, uint8_t** data);
  void ReleaseLease(uint32_t slot);
  // With mu_ held: a free slot of `bytes`' class, by the order the header comment gives.
  bool TakeFreeSlotLocked(uint32_t bytes, uint32_t* slot);
  // With mu_ held: `page` (free) cut into slots of `size_class`, all free.
  void AssignPageLocked(uint32_t page, uint32_t size_class);
  // With mu_ held: a page of a class other than `size_class` whose chunks are all evictable, and
  // how long it has been idle (its least recently used chunk's idle_since); nullopt: none.
  std::optional<std::pair<uint32_t, uint64_t>> ReclaimableLocked(uint32_t size_class) const;
  // With mu_ held: `slot`'s chunk dropped (it was evictable), the slot free.
  void EvictLocked(uint32_t slot);
  // With mu_ held: the slot emptied (its place kept) and put on its class's free list; the page
  // free again once its last chunk went.
  void FreeSlotLocked(uint32_t slot);
  void MakeEvictableIfIdleLocked(uint32_t slot);
  void DropPinsLocked(const std::vector<uint32_t>& slots);

  friend class ChunkLease;

  std::unique_ptr<PinnedAllocator> allocator_;
  ChunkSource* backing_;
  uint8_t* arena_;
  uint32_t slot_bytes_;

  uint32_t classes_ = 1;  // size classes: slot_bytes_ >> k for k < classes_

  mutable std::mutex mu_;
  std::condition_variable loaded_;  // a slot left kLoading
  std::deque<Slot> slots_;          // a deque: a slot's reference stays valid as pages are cut
  std::vector<uint32_t> spare_slots_;  // records of slots whose page went to another class, to reuse
  std::vector<Page> pages_;
  std::vector<uint32_t> free_pages_;                // popped from the back
  std::vector<std::vector<uint32_t>> free_;          // per class: free slots, popped from the back
  std::unordered_map<ChunkId, uint32_t, ChunkIdHash> index_;
  std::vector<std::list<uint32_t>> lru_;  // per class: evictable resident slots, least recently used first
  uint64_t lru_tick_ = 0;
  struct PinSet {
    bool complete = false;        // false while Pin is still loading its chunks
    std::vector<uint32_t> slots;  // each slot once
  };
  std::unordered_map<std::string, PinSet> pinned_;
  DramTierStats stats_;
};

}  // namespace phos::store
