// The snapshot store's disk tier (docs/design.md D6).
//
// Design. A snapshot is a manifest (manifest.h) plus buffer and module bytes cut into fixed-size
// chunks named by their xxHash3-128 (chunk.h). Chunk bytes live once, however many snapshots
// share them, in append-only segment files under <path>/segments, each chunk at a 4 KiB-aligned
// offset so it can be read with O_DIRECT into the caller's buffer. RocksDB (<path>/db) holds the
// manifests, the chunk index (id -> segment, offset, sizes, compressed?, refcount; a refcount
// counts the snapshots referencing the chunk) and the function -> version map.
//
// Commit follows PCcheck's protocol: chunk data is written and fsynced (with the segment
// directory) first; then manifest, index entries, refcounts, version counter and retention
// drops go in ONE synced WriteBatch, which is the publish point. A crash before it leaves the
// old state plus unreferenced segment bytes; after it, the new state. Garbage collection drops
// index entries whose refcount is 0 and deletes segment files no index entry points at (which
// includes the bytes of a commit that never happened); compaction copies live chunks out of
// mostly-dead segments, publishes the new locations in one synced write, then deletes the old
// files, so a crash at any step leaves every chunk reachable. An import (a snapshot committed in
// another store) indexes each chunk it receives as it arrives, its bytes synced first and its
// refcount 0, and publishes through the same WriteBatch as a commit.
//
// Every read is verified against the chunk id; a mismatch is Corruption naming the chunk (and
// the snapshot and buffer when read through ReadBuffer/VerifySnapshot).
//
// One process opens a store read-write at a time (RocksDB's lock); tools open it read-only.
// All methods are thread-safe. Commits (imported ones too), deletions, GC and compaction are
// serialised; reads run concurrently with all of them.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "phos/base/status.h"
#include "phos/store/chunk.h"
#include "phos/store/manifest.h"

namespace phos::store {

// The layout of a store's directory and database ("!format" in its index); a store written by a
// newer phos is refused. phosd --version reports it.
inline constexpr uint32_t kStoreFormatVersion = 1;

struct StoreOptions {
  // Directory of the store; created (with its db/ and segments/) when absent. Default: none,
  // must be set.
  std::string path;
  // Bytes per chunk. 4 MiB: sequential O_DIRECT reads on the project's test host peak at 1-4 MiB
  // requests (1.5-1.7 GB/s) and fall at 16 MiB (1.35 GB/s) (bench/store_disk_bench.cc sweeps
  // it); larger chunks also dedup worse and coarsen the restore's unit of priority. Default: 4 MiB.
  uint32_t chunk_bytes = 4u << 20;
  // Compress each chunk with zstd, kept only when it saves at least 1/32 of the chunk. Gaussian
  // fp32 and fp16 weights shrink only to ~92% at 0.5-1 GB/s per core (store_disk bench), so it
  // costs more restore time than it saves disk. Default: false.
  bool compress = false;
  // zstd level when `compress` is set. Default: 1.
  int compression_level = 1;
  // A writer starts a new segment file once its current one holds this many bytes. Default: 1 GiB.
  uint64_t segment_bytes = 1ull << 30;
  // Versions of a function kept; committing one more drops the oldest in the same write. 0 keeps
  // every version. Default: 0.
  uint32_t keep_versions = 0;
  // CompactSegments rewrites a segment whose live bytes are below this fraction of its size.
  // Default: 0.5.
  double compact_below_live_fraction = 0.5;
  // Read chunks with O_DIRECT (bypassing the page cache) where the file system allows it;
  // buffered reads otherwise (tmpfs). Default: true.
  bool direct_io = true;
  // Open without the write lock (for tools beside a running daemon); every mutation then fails
  // with FailedPrecondition. Default: false.
  bool read_only = false;
  // Largest manifest payload loaded. Default: kDefaultManifestCap (64 MiB).
  uint64_t max_manifest_bytes = kDefaultManifestCap;
};

struct StoreStats {
  uint64_t functions = 0;
  uint64_t snapshots = 0;
  uint64_t chunks = 0;           // index entries, live or awaiting GC
  uint64_t live_chunks = 0;      // referenced by at least one snapshot
  uint64_t logical_bytes = 0;    // sum of every snapshot's buffer and module sizes
  uint64_t unique_bytes = 0;     // raw bytes of the live chunks
  uint64_t stored_bytes = 0;     // bytes the live chunks occupy in segments (after compression)
  uint64_t segment_files = 0;
  uint64_t segment_bytes = 0;    // size of all segment files: what the disk holds
  double dedup_ratio = 0;        // logical_bytes / unique_bytes (1 when nothing is stored)
};

struct GcStats {
  uint64_t chunks_freed = 0;
  uint64_t segments_deleted = 0;
  uint64_t bytes_reclaimed = 0;  // segment file bytes deleted
};

struct CompactionStats {
  uint64_t segments_rewritten = 0;
  uint64_t chunks_moved = 0;
  uint64_t bytes_moved = 0;
  uint64_t bytes_reclaimed = 0;  // old segment bytes minus the bytes moved
};

// Builds one snapshot. Obtained from Store::NewWriter, consumed by Store::Commit; destroying it
// uncommitted abandons it (its segment bytes become garbage). Not thread-safe.
class SnapshotWriter {
 public:
  // Fills `size` bytes at `dst` with the buffer's bytes at `offset` (e.g. a device-to-host copy
  // of one chunk).
  using ReadFn = std::function<Status(uint64_t offset, void* dst, size_t size)>;

  virtual ~SnapshotWriter() = default;
  // Everything but buffers, modules, function, version and chunk_bytes: device profile,
  // compute capability, streams, events, library handles, CPU state.
  virtual Manifest& manifest() = 0;
  // Adds a buffer described by `meta` (address, size, alignment, rank, access class, label; no
  // chunks) whose meta.size bytes are at `data`. Returns its index in the manifest.
  virtual Result<int> AddBuffer(const Buffer& meta, const void* data) = 0;
  // The same, the bytes fetched chunk by chunk through `read`.
  virtual Result<int> AddBuffer(const Buffer& meta, const ReadFn& read) = 0;
  // Takes back every buffer added so far (their chunk lists included), leaving none: a soft recopy
  // streams the buffers in while the function runs and, at its final stop, keeps those no call
  // wrote meanwhile (AddStoredBuffer) and adds the rest again (docs/design.md D10). Chunks no
  // buffer added afterwards references are not indexed at commit; their segment bytes are left
  // to compaction.
  virtual std::vector<Buffer> TakeBuffers() = 0;
  // Adds a buffer taken with TakeBuffers, its bytes the chunks it lists. InvalidArgument when a
  // chunk is neither written by this writer nor held by the store. Returns its index.
  virtual Result<int> AddStoredBuffer(Buffer buffer) = 0;
  // Adds a module image of `size` bytes; kind ("simgpu"/"fatbin") and globals from `meta`,
  // content hash and chunks filled in. Returns its index.
  virtual Result<int> AddModule(const Module& meta, const void* image, size_t size) = 0;
  // Makes the chunks written so far durable, as a commit does first: a commit after it syncs only
  // what was written since (a soft recopy's first pass, synced before its final stop).
  virtual Status Sync() = 0;
};

class Store : public ChunkSource {
 public:
  static Result<std::unique_ptr<Store>> Open(const StoreOptions& options);
  ~Store() override = default;

  // A writer for a new version of `function` (letters, digits, '.', '_', '-'; 1–128 chars).
  virtual Result<std::unique_ptr<SnapshotWriter>> NewWriter(const std::string& function) = 0;
  // Publishes the writer's snapshot atomically and returns its version (1, 2, … per function).
  virtual Result<uint64_t> Commit(std::unique_ptr<SnapshotWriter> writer) = 0;

  // Importing a snapshot committed in another store (a migration between two daemons sends the
  // manifest and only the chunks the receiver lacks): MissingChunks, PutChunk of each, then
  // CommitImported.
  //
  // Of `ids`, those whose bytes this store does not hold (in the order given, without repeats).
  virtual Result<std::vector<ChunkId>> MissingChunks(const std::vector<ChunkId>& ids) = 0;
  // Stores `data` as chunk `id`, verified first: bytes whose XXH3-128 is not `id` are refused
  // (InvalidArgument), as is an empty chunk or one larger than chunk_bytes. A chunk held already
  // is Ok and not written again. The bytes are written (compressed as a writer would) and fsynced
  // like a writer's chunks, but no snapshot references the chunk: it stays until CommitImported
  // references it, or garbage collection drops it (a chunk unreferenced at collection time is
  // dropped, as any chunk of an abandoned writer is).
  virtual Status PutChunk(const ChunkId& id, std::string_view data) = 0;
  // Commits `manifest`, a snapshot of another store, as a new version of `function`: its function
  // and version are replaced, everything else is kept as given (cpu_state included, which the
  // caller sets). Every chunk its buffers and modules reference must be held with the size the
  // manifest says; otherwise NotFound says how many are not and names the first, and nothing is
  // committed. InvalidArgument when a buffer's or module's chunks do not add up to its size.
  // Published like Commit, in one synced write (refcounts, manifest, version counter, retention).
  // Returns the version.
  virtual Result<uint64_t> CommitImported(const std::string& function, Manifest manifest) = 0;

  virtual Result<std::vector<std::string>> ListFunctions() = 0;
  // Ascending.
  virtual Result<std::vector<uint64_t>> ListVersions(const std::string& function) = 0;
  virtual Result<Manifest> LoadManifest(const std::string& function, uint64_t version) = 0;
  // Records the order in which a snapshot's buffers were first touched after entry, learned
  // after the commit (from a sample request or the first invocation): ranks[i] becomes
  // buffers[i].first_touch_rank (-1: not touched). The manifest is rewritten in place in one
  // synced write (same envelope, checksum recomputed; chunk refs and refcounts untouched), so a
  // crash leaves the old or the new manifest; manifests loaded before keep reading their chunks.
  // InvalidArgument when ranks.size() differs from the buffer count or a rank is below -1;
  // NotFound for an unknown function or version; FailedPrecondition when open read-only.
  virtual Status SetFirstTouchOrder(const std::string& function, uint64_t version,
                                    const std::vector<int32_t>& ranks) = 0;
  // Records how each buffer is used after entry, learned like the first-touch order (from the
  // speculated write sets of a sample request's calls): classes[i] becomes buffers[i].access_class.
  // Read-only buffers may be mapped read-only from one physical allocation shared by every
  // instance that restores them (docs/design.md D14). Rewritten in place like SetFirstTouchOrder,
  // with its errors; InvalidArgument also for a value that is not an AccessClass.
  virtual Status SetAccessClasses(const std::string& function, uint64_t version,
                                  const std::vector<AccessClass>& classes) = 0;
  // Removes a version; its chunks no other snapshot references are freed by the next GC.
  virtual Status DeleteVersion(const std::string& function, uint64_t version) = 0;
  virtual Result<GcStats> CollectGarbage() = 0;
  virtual Result<CompactionStats> CompactSegments() = 0;
  virtual Result<StoreStats> Stats() = 0;

  // Buffer `index` of `manifest` (its size bytes) into `dst`; errors name the function,
  // version, buffer and chunk. `dst` aligned to AlignedBuffer::kAlignment reads direct.
  virtual Status ReadBuffer(const Manifest& manifest, int index, void* dst) = 0;
  // Reads and verifies every chunk of a snapshot.
  virtual Status VerifySnapshot(const std::string& function, uint64_t version) = 0;
  // Recomputes reference counts from the manifests and checks them, and every index entry's
  // segment, against what is stored. Corruption names the first disagreement.
  virtual Status CheckConsistency() = 0;

  const StoreOptions& options() const { return options_; }

 protected:
  explicit Store(StoreOptions options) : options_(std::move(options)) {}
  StoreOptions options_;
};

}  // namespace phos::store
