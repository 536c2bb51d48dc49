// The reader API for restore (docs/design.md D7): streams a snapshot's buffer chunks from a ChunkSource
// (usually the DRAM tier) through pinned staging buffers to a callback, in first-touch order,
// with a way to put one buffer at the head of the queue at any moment.
//
//   auto pool = ReaderPool::Create({});
//   auto reader = SnapshotReader::Start(pool->get(), manifest, tier, {}, [&](const ChunkDelivery& c) {
//     return CopyToDevice(c.buffer_index, c.offset, c.data, c.size);
//   });
//   (*reader)->Prioritize(7);  // a kernel's read set names buffer 7, still absent
//   Status done = (*reader)->Wait();
//
// Several readers share one ReaderPool's I/O threads; each reader has its own bounded staging.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "phos/base/status.h"
#include "phos/store/chunk.h"
#include "phos/store/dram_tier.h"
#include "phos/store/manifest.h"

namespace phos::store {

// Every chunk a snapshot references (buffers, then modules), in manifest order, duplicates kept.
// For DramTier::Pin.
std::vector<ChunkRef> SnapshotChunks(const Manifest& manifest);

// The default streaming order: buffers by first_touch_rank, unranked (-1) last, ties by device
// address.
std::vector<uint32_t> FirstTouchOrder(const Manifest& manifest);

struct ReaderPoolOptions {
  // I/O threads shared by every reader of the pool, 1..64. Default: 2 (this project's CI hosts
  // have two cores; a GPU host wants about one per NVMe queue or copy engine).
  int io_threads = 2;
};

struct ChunkDelivery {
  uint32_t buffer_index = 0;   // into manifest.buffers
  uint32_t chunk_index = 0;    // into that buffer's chunks
  uint64_t offset = 0;         // of the chunk inside the buffer
  const void* data = nullptr;  // pinned: staging or, with zero_copy, the DRAM tier's slot
  size_t size = 0;
};

// Called on an I/O thread, possibly on several at once for one reader. `data` is valid until it
// returns (the staging buffer or tier slot is then reused), so an asynchronous device copy must
// be complete — or its source otherwise consumed — before returning. A non-OK status fails the
// reader.
using DeliverFn = std::function<Status(const ChunkDelivery&)>;

struct ReaderOptions {
  // For errors and logs. Default (empty): "<function> v<version>" from the manifest.
  std::string snapshot_name;
  // Buffers to stream, in this order; a subset is allowed (a restore may skip scratch buffers).
  // Default (empty): FirstTouchOrder(manifest), every buffer.
  std::vector<uint32_t> buffer_order;
  // Staging memory of this reader: whole staging buffers of the snapshot's largest chunk. At
  // most this many bytes are allocated and at most that many chunks are in flight. Default:
  // 16 MiB (four 4 MiB chunks: two I/O threads each double-buffered).
  uint64_t staging_bytes = 16ull << 20;
  // Where staging comes from (pinned memory, for device copies). Must outlive the reader.
  // Default (null): anonymous mmap.
  PinnedAllocator* staging_allocator = nullptr;
  // When the source is a DramTier, deliver chunks straight from their pinned slots under a lease
  // instead of copying them into staging first. Default: true.
  bool zero_copy = true;
};

class SnapshotReader;

class ReaderPool {
 public:
  static Result<std::unique_ptr<ReaderPool>> Create(const ReaderPoolOptions& options);
  // Cancels readers still running and joins the threads; readers must not be used afterwards.
  ~ReaderPool();
  ReaderPool(const ReaderPool&) = delete;
  ReaderPool& operator=(const ReaderPool&) = delete;

  int io_threads() const { return static_cast<int>(threads_.size()); }

 private:
  friend class SnapshotReader;
  struct ReaderState;

  ReaderPool() = default;
  void Run();
  // With mu_ held: a reader with a queued chunk and a free staging buffer, round robin.
  ReaderState* NextReaderLocked();
  void Add(std::shared_ptr<ReaderState> reader);
  // With mu_ held: stops queueing for `reader`, finishing it once nothing is in flight.
  void StopLocked(ReaderState* reader, Status why);
  void FinishIfDrainedLocked(ReaderState* reader);

  std::mutex mu_;
  std::condition_variable work_;  // a reader gained work or a free staging buffer; or stopping
  std::condition_variable done_;  // a reader finished
  std::vector<std::shared_ptr<ReaderState>> active_;
  size_t next_ = 0;  // round-robin cursor into active_
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

class SnapshotReader {
 public:
  // Validates the manifest (chunk ids, sizes adding up to each buffer's size), the order and the
  // options (InvalidArgument naming what is wrong), allocates staging and starts streaming.
  // `pool` and `source` must outlive the reader.
  static Result<std::unique_ptr<SnapshotReader>> Start(ReaderPool* pool, const Manifest& manifest,
                                                       ChunkSource* source, const ReaderOptions& options,
                                                       DeliverFn deliver);
  // Cancels and waits.
  ~SnapshotReader();
  SnapshotReader(const SnapshotReader&) = delete;
  SnapshotReader& operator=(const SnapshotReader&) = delete;

  // Moves the buffer's chunks not yet started to the head of the queue (chunks already in flight
  // finish first). OK when the buffer is already fully read or was not in the order;
  // InvalidArgument for an index outside the manifest.
  Status Prioritize(uint32_t buffer_index);
  // Drops every chunk not yet started; Wait() then returns Unavailable ("... cancelled") unless
  // the reader had already finished or failed.
  void Cancel();
  // Blocks until every chunk is delivered, or the reader failed or was cancelled and nothing is
  // in flight. The first failure names snapshot, buffer and chunk.
  Status Wait();
  bool Done() const;

  uint64_t delivered_chunks() const;
  uint64_t delivered_bytes() const;
  // Bytes of staging allocated (at most options.staging_bytes).
  uint64_t staging_bytes() const;

 private:
  SnapshotReader(ReaderPool* pool, std::shared_ptr<ReaderPool::ReaderState> state)
      : pool_(pool), state_(std::move(state)) {}
  ReaderPool* pool_;
  std::shared_ptr<ReaderPool::ReaderState> state_;
};

}  // namespace phos::store
