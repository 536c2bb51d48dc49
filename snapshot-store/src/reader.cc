#include "phos/store/reader.h"

#include <fmt/core.h>

#include <algorithm>
#include <deque>
#include <numeric>
#include <tuple>

#include "phos/base/log.h"

namespace phos::store {
namespace {

// Staging buffers start on page boundaries: DMA engines and O_DIRECT reads want that.
constexpr uint64_t kStagingAlign = 4096;

}  // namespace

struct ReaderPool::ReaderState {
  struct BufferChunks {
    std::string label;
    std::vector<ChunkRef> chunks;
    std::vector<uint64_t> offsets;
  };
  struct Cursor {
    uint32_t buffer = 0;
    uint32_t next = 0;  // first chunk not yet started
  };

  ~ReaderState() {
    if (staging_base != nullptr) allocator->Free(staging_base, staging_total);
  }

  // Reads chunk `index` of buffer `buffer` and delivers it. Runs without the pool's lock.
  Status Process(uint32_t buffer, uint32_t index, uint8_t* staging) {
    const BufferChunks& b = buffers[buffer];
    const ChunkRef& ref = b.chunks[index];
    ChunkDelivery d{buffer, index, b.offsets[index], nullptr, ref.size};
    auto where = [&] {
      return fmt::format("snapshot {}: buffer {} ('{}') chunk {} ({}) at offset {}", name, buffer, b.label,
                         index, ref.id.ToHex(), d.offset);
    };
    if (tier != nullptr && ref.size <= tier->slot_bytes()) {
      Result<ChunkLease> lease = tier->Lease(ref);
      if (lease.ok()) {
        d.data = lease->data();
        return deliver(d).WithContext(where() + ": delivery");
      }
      // A tier whose slots are all pinned or leased still serves reads, through staging.
      if (lease.status().code() != StatusCode::kOutOfMemory) return lease.status().WithContext(where());
    }
    PHOS_RETURN_IF_ERROR(source->ReadChunk(ref, staging).WithContext(where()));
    d.data = staging;
    return deliver(d).WithContext(where() + ": delivery");
  }

  std::string name;
  ChunkSource* source = nullptr;
  DramTier* tier = nullptr;  // set for zero-copy delivery
  DeliverFn deliver;
  std::vector<BufferChunks> buffers;
  std::deque<Cursor> queue;

  std::unique_ptr<PinnedAllocator> own_allocator;
  PinnedAllocator* allocator = nullptr;
  void* staging_base = nullptr;
  uint64_t staging_total = 0;
  std::vector<uint8_t*> free_staging;

  int in_flight = 0;
  bool finished = false;
  Status status;
  uint64_t delivered_chunks = 0;
  uint64_t delivered_bytes = 0;
};

std::vector<ChunkRef> SnapshotChunks(const Manifest& manifest) {
  std::vector<ChunkRef> out;
  for (const Buffer& b : manifest.buffers) out.insert(out.end(), b.chunks.begin(), b.chunks.end());
  for (const Module& m : manifest.modules) out.insert(out.end(), m.chunks.begin(), m.chunks.end());
  return out;
}

std::vector<uint32_t> FirstTouchOrder(const Manifest& manifest) {
  std::vector<uint32_t> order(manifest.buffers.size());
  std::iota(order.begin(), order.end(), 0u);
  auto key = [&](uint32_t i) {
    const Buffer& b = manifest.buffers[i];
    bool unranked = b.first_touch_rank < 0;
    return std::make_tuple(unranked, unranked ? 0 : b.first_touch_rank, b.device_address, i);
  };
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return key(a) < key(b); });
  return order;
}

// ---- ReaderPool ------------------------------------------------------------------------------

Result<std::unique_ptr<ReaderPool>> ReaderPool::Create(const ReaderPoolOptions& options) {
  if (options.io_threads < 1 || options.io_threads > 64) {
    return Status::InvalidArgument(
        fmt::format("reader pool: io_threads must be 1..64, not {}", options.io_threads));
  }
  std::unique_ptr<ReaderPool> pool(new ReaderPool());
  for (int i = 0; i < options.io_threads; ++i) pool->threads_.emplace_back([p = pool.get()] { p->Run(); });
  return pool;
}

ReaderPool::~ReaderPool() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    // Copies: StopLocked may erase from active_.
    std::vector<std::shared_ptr<ReaderState>> active = active_;
    for (const auto& r : active)
      StopLocked(r.get(), Status::Unavailable("snapshot " + r->name + ": reader pool stopped"));
  }
  work_.notify_all();
  for (std::thread& t : threads_) t.join();
}

ReaderPool::ReaderState* ReaderPool::NextReaderLocked() {
  for (size_t n = 0; n < active_.size(); ++n) {
    size_t i = (next_ + n) % active_.size();
    ReaderState* r = active_[i].get();
    if (!r->queue.empty() && !r->free_staging.empty()) {
      next_ = i + 1;
      return r;
    }
  }
  return nullptr;
}

void ReaderPool::Run() {
  std::unique_lock lock(mu_);
  for (;;) {
    ReaderState* r = nullptr;
    work_.wait(lock, [&] { return (r = NextReaderLocked()) != nullptr || stopping_; });
    if (r == nullptr) return;
    ReaderState::Cursor& cursor = r->queue.front();
    uint32_t buffer = cursor.buffer;
    uint32_t index = cursor.next++;
    if (cursor.next == r->buffers[buffer].chunks.size()) r->queue.pop_front();
    uint8_t* staging = r->free_staging.back();
    r->free_staging.pop_back();
    ++r->in_flight;
    lock.unlock();
    // The state stays alive: it is finished (and may be freed) only once nothing is in flight.
    Status s = r->Process(buffer, index, staging);
    lock.lock();
    r->free_staging.push_back(staging);
    --r->in_flight;
    if (s.ok()) {
      ++r->delivered_chunks;
      r->delivered_bytes += r->buffers[buffer].chunks[index].size;
    } else {
      StopLocked(r, std::move(s));
    }
    FinishIfDrainedLocked(r);
    // A staging buffer came back: another thread may now serve this reader.
    work_.notify_one();
  }
}

void ReaderPool::Add(std::shared_ptr<ReaderState> reader) {
  {
    std::lock_guard lock(mu_);
    if (reader->queue.empty()) {
      reader->finished = true;
      return;
    }
    active_.push_back(std::move(reader));
  }
  work_.notify_all();
}

void ReaderPool::StopLocked(ReaderState* reader, Status why) {
  if (reader->finished) return;
  if (reader->status.ok()) reader->status = std::move(why);
  reader->queue.clear();
  FinishIfDrainedLocked(reader);
}

void ReaderPool::FinishIfDrainedLocked(ReaderState* reader) {
  if (reader->finished || !reader->queue.empty() || reader->in_flight > 0) return;
  reader->finished = true;
  auto it = std::find_if(active_.begin(), active_.end(), [&](const auto& p) { return p.get() == reader; });
  if (it != active_.end()) active_.erase(it);
  done_.notify_all();
}

// ---- SnapshotReader --------------------------------------------------------------------------

Result<std::unique_ptr<SnapshotReader>> SnapshotReader::Start(ReaderPool* pool, const Manifest& manifest,
                                                              ChunkSource* source,
                                                              const ReaderOptions& options,
                                                              DeliverFn deliver) {
  if (pool == nullptr || source == nullptr || !deliver) {
    return Status::InvalidArgument("snapshot reader: pool, source and delivery callback are required");
  }
  auto state = std::make_shared<ReaderPool::ReaderState>();
  state->name = options.snapshot_name.empty() ? fmt::format("'{}' v{}", manifest.function, manifest.version)
                                              : options.snapshot_name;
  auto invalid = [&](const std::string& what) {
    return Status::InvalidArgument(fmt::format("snapshot {}: {}", state->name, what));
  };

  state->buffers.resize(manifest.buffers.size());
  for (size_t b = 0; b < manifest.buffers.size(); ++b) {
    const Buffer& buffer = manifest.buffers[b];
    ReaderPool::ReaderState::BufferChunks& out = state->buffers[b];
    out.label = buffer.label;
    uint64_t offset = 0;
    for (size_t c = 0; c < buffer.chunks.size(); ++c) {
      const ChunkRef& ref = buffer.chunks[c];
      if (ref.size == 0) return invalid(fmt::format("buffer {} chunk {} is empty", b, c));
      out.chunks.push_back(ref);
      out.offsets.push_back(offset);
      offset += ref.size;
    }
    if (offset != buffer.size) {
      return invalid(fmt::format("buffer {} ('{}'): chunks add up to {} bytes, the buffer has {}", b,
                                 buffer.label, offset, buffer.size));
    }
  }

  std::vector<uint32_t> order =
      options.buffer_order.empty() ? FirstTouchOrder(manifest) : options.buffer_order;
  std::vector<bool> seen(state->buffers.size(), false);
  uint64_t largest = 0;
  size_t chunks = 0;
  for (uint32_t b : order) {
    if (b >= state->buffers.size()) {
      return invalid(
          fmt::format("buffer order names buffer {}; the manifest has {}", b, state->buffers.size()));
    }
    if (seen[b]) return invalid(fmt::format("buffer order names buffer {} twice", b));
    seen[b] = true;
    if (state->buffers[b].chunks.empty()) continue;
    state->queue.push_back({b, 0});
    chunks += state->buffers[b].chunks.size();
    for (const ChunkRef& ref : state->buffers[b].chunks) largest = std::max<uint64_t>(largest, ref.size);
  }

  uint64_t slot = (largest + kStagingAlign - 1) / kStagingAlign * kStagingAlign;
  if (slot > 0) {
    uint64_t count = options.staging_bytes / slot;
    if (count == 0) {
      return invalid(
          fmt::format("staging_bytes {} is less than one staging buffer ({} bytes: the largest chunk)",
                      options.staging_bytes, slot));
    }
    count = std::min<uint64_t>(count, chunks);
    state->allocator = options.staging_allocator;
    if (state->allocator == nullptr) {
      state->own_allocator = std::make_unique<MmapAllocator>();
      state->allocator = state->own_allocator.get();
    }
    Result<void*> base = state->allocator->Allocate(count * slot);
    if (!base.ok()) {
      return base.status().WithContext(
          fmt::format("snapshot {}: staging of {} bytes", state->name, count * slot));
    }
    state->staging_base = *base;
    state->staging_total = count * slot;
    for (uint64_t i = 0; i < count; ++i)
      state->free_staging.push_back(static_cast<uint8_t*>(*base) + i * slot);
  }

  state->source = source;
  if (options.zero_copy) state->tier = dynamic_cast<DramTier*>(source);
  state->deliver = std::move(deliver);
  PHOS_LOG(Debug, "store", "reading snapshot {}: {} chunks, {} staging buffers of {} bytes{}", state->name,
           chunks, state->free_staging.size(), slot,
           state->tier != nullptr ? ", zero-copy from the DRAM tier" : "");
  pool->Add(state);
  return std::unique_ptr<SnapshotReader>(new SnapshotReader(pool, std::move(state)));
}

SnapshotReader::~SnapshotReader() {
  Cancel();
  Wait().IgnoreError();
}

Status SnapshotReader::Prioritize(uint32_t buffer_index) {
  std::lock_guard lock(pool_->mu_);
  if (buffer_index >= state_->buffers.size()) {
    return Status::InvalidArgument(
        fmt::format("snapshot {}: cannot prioritize buffer {}; the manifest has {}", state_->name,
                    buffer_index, state_->buffers.size()));
  }
  auto& queue = state_->queue;
  auto it = std::find_if(queue.begin(), queue.end(), [&](const auto& c) { return c.buffer == buffer_index; });
  if (it != queue.end() && it != queue.begin()) {
    ReaderPool::ReaderState::Cursor cursor = *it;
    queue.erase(it);
    queue.push_front(cursor);
  }
  return Status::Ok();
}

void SnapshotReader::Cancel() {
  std::lock_guard lock(pool_->mu_);
  pool_->StopLocked(state_.get(),
                    Status::Unavailable(fmt::format("snapshot {}: reading cancelled", state_->name)));
}

Status SnapshotReader::Wait() {
  std::unique_lock lock(pool_->mu_);
  pool_->done_.wait(lock, [&] { return state_->finished; });
  return state_->status;
}

bool SnapshotReader::Done() const {
  std::lock_guard lock(pool_->mu_);
  return state_->finished;
}

uint64_t SnapshotReader::delivered_chunks() const {
  std::lock_guard lock(pool_->mu_);
  return state_->delivered_chunks;
}

uint64_t SnapshotReader::delivered_bytes() const {
  std::lock_guard lock(pool_->mu_);
  return state_->delivered_bytes;
}

uint64_t SnapshotReader::staging_bytes() const {
  return state_->staging_total;
}

}  // namespace phos::store
