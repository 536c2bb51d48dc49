// Private: the RocksDB-backed Store and its SnapshotWriter.
#pragma once

#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <shared_mutex>
#include <unordered_map>
#include <unordered_set>

#include "chunk_index.h"
#include "phos/store/store.h"
#include "segment.h"

namespace phos::store {

class StoreImpl;

// Appends chunks to segment files it creates, each stored as the store stores chunks: a zstd frame
// when the store compresses and the frame pays, the bytes themselves otherwise. Its segments are
// registered as in use, so GC and compaction leave them alone, until it gives them up (on
// destruction at the latest). Not thread-safe.
class ChunkAppender {
 public:
  explicit ChunkAppender(StoreImpl* store) : store_(store) {}
  ~ChunkAppender();
  ChunkAppender(const ChunkAppender&) = delete;
  ChunkAppender& operator=(const ChunkAppender&) = delete;

  // Stores the `size` bytes at `data`, in a new segment when the current one is full, and returns
  // where (refcount 0).
  Result<ChunkLocation> Append(const void* data, size_t size);
  // Makes everything appended so far durable, the segment files' names included.
  Status Sync();
  // Deletes its segment files: an abandoned writer's, which nothing indexed points into.
  void Discard();
  // Under meta_mu_: gives its segments up; GC and compaction judge them by the index from now on.
  void Release();

 private:
  StoreImpl* store_;
  std::vector<std::unique_ptr<SegmentWriter>> segments_;
  std::string compress_scratch_;
};

class WriterImpl final : public SnapshotWriter {
 public:
  WriterImpl(StoreImpl* store, std::string function);
  ~WriterImpl() override;

  Manifest& manifest() override { return manifest_; }
  Result<int> AddBuffer(const Buffer& meta, const void* data) override;
  Result<int> AddBuffer(const Buffer& meta, const ReadFn& read) override;
  std::vector<Buffer> TakeBuffers() override;
  Result<int> AddStoredBuffer(Buffer buffer) override;
  Result<int> AddModule(const Module& meta, const void* image, size_t size) override;
  Status Sync() override { return chunks_.Sync(); }

 private:
  friend class StoreImpl;
  // Stores one chunk unless the store or this writer has it already; appends its ref to `out`.
  Status AddChunk(const void* data, size_t size, std::vector<ChunkRef>* out);

  StoreImpl* store_;
  std::string function_;
  Manifest manifest_;
  ChunkAppender chunks_;
  // Chunks this writer wrote (not yet in the index).
  std::unordered_map<ChunkId, ChunkLocation, ChunkIdHash> written_;
  // Chunks found in the index; pinned in the store so GC keeps them until commit.
  std::unordered_set<ChunkId, ChunkIdHash> pinned_;
  bool committed_ = false;
};

class StoreImpl final : public Store {
 public:
  StoreImpl(StoreOptions options, std::unique_ptr<rocksdb::DB> db, uint64_t next_segment);
  ~StoreImpl() override;

  Result<std::unique_ptr<SnapshotWriter>> NewWriter(const std::string& function) override;
  Result<uint64_t> Commit(std::unique_ptr<SnapshotWriter> writer) override;
  Result<std::vector<ChunkId>> MissingChunks(const std::vector<ChunkId>& ids) override;
  Status PutChunk(const ChunkId& id, std::string_view data) override;
  Result<uint64_t> CommitImported(const std::string& function, Manifest manifest) override;
  Result<std::vector<std::string>> ListFunctions() override;
  Result<std::vector<uint64_t>> ListVersions(const std::string& function) override;
  Result<Manifest> LoadManifest(const std::string& function, uint64_t version) override;
  Status SetFirstTouchOrder(const std::string& function, uint64_t version,
                            const std::vector<int32_t>& ranks) override;
  Status SetAccessClasses(const std::string& function, uint64_t version,
                          const std::vector<AccessClass>& classes) override;
  Status DeleteVersion(const std::string& function, uint64_t version) override;
  Result<GcStats> CollectGarbage() override;
  Result<CompactionStats> CompactSegments() override;
  Result<StoreStats> Stats() override;
  Status ReadChunk(const ChunkRef& ref, void* dst) override;
  Status ReadBuffer(const Manifest& manifest, int index, void* dst) override;
  Status VerifySnapshot(const std::string& function, uint64_t version) override;
  Status CheckConsistency() override;

  std::string segment_dir() const { return options_.path + "/segments"; }

 private:
  friend class ChunkAppender;
  friend class WriterImpl;

  Status Writable() const;
  // Rewrites a committed manifest in place in one synced write after `annotate` changed what
  // was learned about its buffers (never its chunks); `annotate` returns an error to abort.
  Status AnnotateBuffers(const std::string& function, uint64_t version, const std::string& what_learned,
                         const std::function<Status(Manifest&, const std::string& what)>& annotate);
  Result<std::optional<ChunkLocation>> GetLocation(const ChunkId& id);
  // Creates a new segment registered as in use by a writer (GC leaves it alone).
  Result<std::unique_ptr<SegmentWriter>> NewSegment();
  void ReleaseSegment(uint64_t id);
  // Under meta_mu_: the chunk is in the index; pin it against GC. False when it is not.
  Result<bool> PinIfIndexed(const ChunkId& id);
  void Unpin(const std::unordered_set<ChunkId, ChunkIdHash>& ids);
  // Adds the refcount changes of dropping (function, version) to `deltas`; the manifest key
  // deletion to `batch`. Under meta_mu_.
  Status DropVersion(const std::string& function, uint64_t version, rocksdb::WriteBatch* batch,
                     std::map<std::string, int64_t>* deltas);
  // Applies refcount deltas (chunk key -> change) on top of the index into `batch`.
  Status ApplyDeltas(const std::map<std::string, int64_t>& deltas,
                     const std::unordered_map<ChunkId, ChunkLocation, ChunkIdHash>& written,
                     rocksdb::WriteBatch* batch);
  Status WriteSynced(rocksdb::WriteBatch* batch);
  // Under meta_mu_: publishes `manifest` as the next version of `function` (setting its function
  // and version) in one synced write: the refcounts of the chunks it references, the manifest,
  // the version counter and the retention drops. `written`: chunks not yet indexed, and where
  // they are. Returns the version.
  Result<uint64_t> Publish(const std::string& function, Manifest& manifest,
                           const std::unordered_map<ChunkId, ChunkLocation, ChunkIdHash>& written,
                           const std::string& what);
  // The open segment `id` for reading (cached). Caller holds io_mu_ shared or exclusive.
  Result<const SegmentFile*> Segment(uint64_t id);
  // Reads and verifies the chunk at `loc` into `dst` (loc.raw_size bytes).
  Status ReadLocated(const ChunkId& id, const ChunkLocation& loc, void* dst);
  // Reads the stored bytes of `loc` (compressed or not) into `dst` (AlignedBuffer-sized).
  Status ReadStored(const ChunkLocation& loc, void* dst);
  // Closes and deletes segment files; takes io_mu_ exclusively.
  uint64_t DeleteSegments(const std::vector<uint64_t>& ids);
  Result<std::vector<uint64_t>> SegmentFilesOnDisk();

  std::unique_ptr<rocksdb::DB> db_;
  // Serialises commits, deletions, GC, compaction and the pin set.
  std::mutex meta_mu_;
  std::unordered_map<ChunkId, int, ChunkIdHash> pins_;
  std::set<uint64_t> active_segments_;
  uint64_t next_segment_;
  // Readers hold it shared from index lookup to the end of the read; deleting segment files
  // holds it exclusively, so a file is never deleted under a read that located a chunk in it.
  std::shared_mutex io_mu_;
  std::mutex files_mu_;
  std::unordered_map<uint64_t, std::unique_ptr<SegmentFile>> files_;
  // Serialises PutChunk's appends and indexing; taken before meta_mu_ (by GC too, which gives
  // imports_'s segment up).
  std::mutex import_mu_;
  // Where PutChunk appends: one segment kept across calls, so that an import of many chunks
  // fills one file rather than making one per chunk. Declared last: it gives its segments up
  // through meta_mu_ on destruction.
  ChunkAppender imports_{this};
};

}  // namespace phos::store
