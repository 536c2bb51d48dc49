// Building, importing and committing a snapshot (the protocol is described in store.h).
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

#include <chrono>

#include <fmt/format.h>

#include "phos/base/fault_point.h"
#include "phos/base/log.h"
#include "phos/store/aligned_buffer.h"
#include "store_impl.h"

namespace phos::store {

namespace {

Status ValidFunctionName(const std::string& function) {
  if (function.empty() || function.size() > 128) {
    return Status::InvalidArgument(fmt::format("function name '{}': must be 1-128 characters", function));
  }
  for (char c : function) {
    // '@': a function's version ("<name>@<n>", the instance manager's keys).
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
              c == '-' || c == '@';
    if (!ok) {
      return Status::InvalidArgument(
          fmt::format("function name '{}': only letters, digits, '.', '_', '-' and '@' are allowed", function));
    }
  }
  return Status::Ok();
}

uint64_t BytesListed(const std::vector<ChunkRef>& chunks) {
  uint64_t bytes = 0;
  for (const ChunkRef& c : chunks) bytes += c.size;
  return bytes;
}

// InvalidArgument when a buffer's or a module's chunks do not add up to its size: such a manifest
// would commit, then fail every read of that buffer.
Status ChunksCoverSizes(const Manifest& manifest) {
  for (size_t i = 0; i < manifest.buffers.size(); ++i) {
    const Buffer& b = manifest.buffers[i];
    if (uint64_t listed = BytesListed(b.chunks); listed != b.size) {
      return Status::InvalidArgument(
          fmt::format("buffer {} ({:#x}) of {} bytes lists chunks of {}", i, b.device_address, b.size, listed));
    }
  }
  for (size_t i = 0; i < manifest.modules.size(); ++i) {
    const Module& m = manifest.modules[i];
    if (uint64_t listed = BytesListed(m.chunks); listed != m.size) {
      return Status::InvalidArgument(fmt::format("module {} of {} bytes lists chunks of {}", i, m.size, listed));
    }
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<SnapshotWriter>> StoreImpl::NewWriter(const std::string& function) {
  PHOS_RETURN_IF_ERROR(Writable());
  PHOS_RETURN_IF_ERROR(ValidFunctionName(function));
  return std::unique_ptr<SnapshotWriter>(new WriterImpl(this, function));
}

Result<std::unique_ptr<SegmentWriter>> StoreImpl::NewSegment() {
  uint64_t id = 0;
  {
    std::lock_guard lock(meta_mu_);
    id = next_segment_++;
    active_segments_.insert(id);
  }
  auto segment = SegmentWriter::Create(segment_dir(), id);
  if (!segment.ok()) ReleaseSegment(id);
  return segment;
}

void StoreImpl::ReleaseSegment(uint64_t id) {
  std::lock_guard lock(meta_mu_);
  active_segments_.erase(id);
}

Result<bool> StoreImpl::PinIfIndexed(const ChunkId& id) {
  std::lock_guard lock(meta_mu_);
  PHOS_ASSIGN_OR_RETURN(std::optional<ChunkLocation> loc, GetLocation(id));
  if (!loc) return false;
  ++pins_[id];
  return true;
}

void StoreImpl::Unpin(const std::unordered_set<ChunkId, ChunkIdHash>& ids) {
  for (const ChunkId& id : ids) {
    auto it = pins_.find(id);
    if (it != pins_.end() && --it->second == 0) pins_.erase(it);
  }
}

ChunkAppender::~ChunkAppender() {
  for (const auto& segment : segments_) store_->ReleaseSegment(segment->id());
}

Result<ChunkLocation> ChunkAppender::Append(const void* data, size_t size) {
  const StoreOptions& options = store_->options();
  const void* stored = data;
  size_t stored_size = size;
  uint32_t flags = 0;
  if (options.compress) {
    compress_scratch_.resize(ZSTD_compressBound(size));
    size_t n = ZSTD_compress(compress_scratch_.data(), compress_scratch_.size(), data, size, options.compression_level);
    // Keep the frame only when it saves at least 1/32: below that, decompressing on every
    // restore costs more than the bytes it saves reading.
    if (!ZSTD_isError(n) && n <= size - size / 32) {
      stored = compress_scratch_.data();
      stored_size = n;
      flags |= ChunkLocation::kCompressed;
    }
  }
  if (segments_.empty() || segments_.back()->size() + stored_size > options.segment_bytes) {
    PHOS_ASSIGN_OR_RETURN(auto segment, store_->NewSegment());
    segments_.push_back(std::move(segment));
  }
  SegmentWriter& segment = *segments_.back();
  PHOS_ASSIGN_OR_RETURN(uint64_t offset, segment.Append(stored, stored_size));
  return ChunkLocation{segment.id(), offset, static_cast<uint32_t>(stored_size), static_cast<uint32_t>(size), flags, 0};
}

Status ChunkAppender::Sync() {
  for (const auto& segment : segments_) PHOS_RETURN_IF_ERROR(segment->Sync());
  if (!segments_.empty()) PHOS_RETURN_IF_ERROR(SyncDirectory(store_->segment_dir()));
  return Status::Ok();
}

void ChunkAppender::Discard() {
  for (const auto& segment : segments_) {
    ::unlink(segment->path().c_str());
    store_->ReleaseSegment(segment->id());
  }
  segments_.clear();
}

void ChunkAppender::Release() {
  for (const auto& segment : segments_) store_->active_segments_.erase(segment->id());
  segments_.clear();
}

WriterImpl::WriterImpl(StoreImpl* store, std::string function)
    : store_(store), function_(std::move(function)), chunks_(store) {}

WriterImpl::~WriterImpl() {
  {
    std::lock_guard lock(store_->meta_mu_);
    store_->Unpin(pinned_);
  }
  // An abandoned writer's segments hold nothing the index points at: reclaim them now rather
  // than at the next GC. A committed writer's segments stay (their chunks are indexed).
  if (!committed_) chunks_.Discard();
}

Status WriterImpl::AddChunk(const void* data, size_t size, std::vector<ChunkRef>* out) {
  ChunkId id = ChunkId::Of(data, size);
  out->push_back(ChunkRef{id, static_cast<uint32_t>(size)});
  if (written_.count(id) || pinned_.count(id)) return Status::Ok();
  PHOS_ASSIGN_OR_RETURN(bool indexed, store_->PinIfIndexed(id));
  if (indexed) {
    pinned_.insert(id);
    return Status::Ok();
  }
  PHOS_ASSIGN_OR_RETURN(ChunkLocation loc, chunks_.Append(data, size));
  written_[id] = loc;
  return Status::Ok();
}

Result<int> WriterImpl::AddBuffer(const Buffer& meta, const void* data) {
  if (data == nullptr && meta.size > 0) return Status::InvalidArgument("AddBuffer: null data");
  return AddBuffer(meta, [data](uint64_t offset, void* dst, size_t size) {
    std::memcpy(dst, static_cast<const char*>(data) + offset, size);
    return Status::Ok();
  });
}

Result<int> WriterImpl::AddBuffer(const Buffer& meta, const ReadFn& read) {
  if (committed_) return Status::FailedPrecondition("snapshot writer already committed");
  if (!meta.chunks.empty()) return Status::InvalidArgument("AddBuffer: meta must not list chunks");
  int index = static_cast<int>(manifest_.buffers.size());
  Buffer& buffer = manifest_.buffers.emplace_back(meta);
  size_t chunk = store_->options().chunk_bytes;
  AlignedBuffer scratch;
  if (meta.size > 0) {
    PHOS_ASSIGN_OR_RETURN(scratch, AlignedBuffer::Allocate(std::min<uint64_t>(chunk, meta.size)));
  }
  for (uint64_t offset = 0; offset < meta.size; offset += chunk) {
    size_t n = static_cast<size_t>(std::min<uint64_t>(chunk, meta.size - offset));
    auto context = [&] {
      return fmt::format("buffer {} ({:#x}) at offset {}", index, meta.device_address, offset);
    };
    PHOS_RETURN_IF_ERROR(read(offset, scratch.data(), n).WithContext(context()));
    PHOS_RETURN_IF_ERROR(AddChunk(scratch.data(), n, &buffer.chunks).WithContext(context()));
  }
  return index;
}

std::vector<Buffer> WriterImpl::TakeBuffers() {
  std::vector<Buffer> taken = std::move(manifest_.buffers);
  manifest_.buffers.clear();
  return taken;
}

Result<int> WriterImpl::AddStoredBuffer(Buffer buffer) {
  if (committed_) return Status::FailedPrecondition("snapshot writer already committed");
  for (const ChunkRef& c : buffer.chunks) {
    if (!written_.count(c.id) && !pinned_.count(c.id)) {
      return Status::InvalidArgument(fmt::format("AddStoredBuffer: buffer {:#x} lists chunk {}, which this writer "
                                                 "neither wrote nor holds",
                                                 buffer.device_address, c.id.ToHex()));
    }
  }
  if (uint64_t bytes = BytesListed(buffer.chunks); bytes != buffer.size) {
    return Status::InvalidArgument(fmt::format("AddStoredBuffer: buffer {:#x} of {} bytes lists chunks of {}",
                                               buffer.device_address, buffer.size, bytes));
  }
  manifest_.buffers.push_back(std::move(buffer));
  return static_cast<int>(manifest_.buffers.size()) - 1;
}

Result<int> WriterImpl::AddModule(const Module& meta, const void* image, size_t size) {
  if (committed_) return Status::FailedPrecondition("snapshot writer already committed");
  if (image == nullptr && size > 0) return Status::InvalidArgument("AddModule: null image");
  int index = static_cast<int>(manifest_.modules.size());
  Module& module = manifest_.modules.emplace_back(meta);
  module.chunks.clear();
  module.size = size;
  XXH128_hash_t whole = XXH3_128bits(image, size);
  module.content_hash = ChunkId{whole.low64, whole.high64};
  size_t chunk = store_->options().chunk_bytes;
  for (uint64_t offset = 0; offset < size; offset += chunk) {
    size_t n = static_cast<size_t>(std::min<uint64_t>(chunk, size - offset));
    PHOS_RETURN_IF_ERROR(AddChunk(static_cast<const char*>(image) + offset, n, &module.chunks)
                             .WithContext(fmt::format("module {}", index)));
  }
  return index;
}

Result<uint64_t> StoreImpl::Publish(const std::string& function, Manifest& manifest,
                                    const std::unordered_map<ChunkId, ChunkLocation, ChunkIdHash>& written,
                                    const std::string& what) {
  rocksdb::WriteBatch batch;
  std::string next_value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), NextVersionKey(function), &next_value);
  uint64_t version = s.ok() ? DecodeU64(next_value) : 1;
  if (!s.ok() && !s.IsNotFound()) return Status::IoError(what + ": " + s.ToString());
  if (version == 0) return Status::Corruption(what + ": version counter is corrupt");

  manifest.function = function;
  manifest.version = version;
  std::map<std::string, int64_t> deltas;
  std::unordered_set<ChunkId, ChunkIdHash> seen;
  auto add = [&](const ChunkRef& ref) {
    if (seen.insert(ref.id).second) deltas[ChunkKey(ref.id)] += 1;
  };
  for (const Buffer& b : manifest.buffers)
    for (const ChunkRef& c : b.chunks) add(c);
  for (const Module& m : manifest.modules)
    for (const ChunkRef& c : m.chunks) add(c);

  // Retention: the oldest versions beyond keep_versions go in the same write.
  if (options_.keep_versions > 0) {
    PHOS_ASSIGN_OR_RETURN(std::vector<uint64_t> versions, ListVersions(function));
    size_t total = versions.size() + 1;
    for (size_t i = 0; total > options_.keep_versions && i < versions.size(); ++i, --total) {
      PHOS_RETURN_IF_ERROR(DropVersion(function, versions[i], &batch, &deltas).WithContext(what));
    }
  }
  PHOS_RETURN_IF_ERROR(ApplyDeltas(deltas, written, &batch).WithContext(what));
  batch.Put(ManifestKey(function, version), EncodeManifest(manifest));
  batch.Put(NextVersionKey(function), EncodeU64(version + 1));
  // Publish: one synced write makes manifest, index, refcounts and version map visible together.
  PHOS_RETURN_IF_ERROR(WriteSynced(&batch).WithContext(what));
  return version;
}

Result<uint64_t> StoreImpl::Commit(std::unique_ptr<SnapshotWriter> writer) {
  PHOS_RETURN_IF_ERROR(Writable());
  auto* w = dynamic_cast<WriterImpl*>(writer.get());
  if (w == nullptr || w->store_ != this) return Status::InvalidArgument("Commit: writer belongs to another store");
  if (w->committed_) return Status::FailedPrecondition("Commit: writer already committed");
  std::string what = fmt::format("commit snapshot of '{}'", w->function_);
  // Barrier: chunk bytes (and the segment files' names) are durable before any metadata
  // points at them.
  PHOS_RETURN_IF_ERROR(w->chunks_.Sync().WithContext(what));
  FaultPoint("store-commit");  // chunks written and synced, nothing indexed yet

  std::lock_guard lock(meta_mu_);
  Manifest& manifest = w->manifest_;
  manifest.chunk_bytes = options_.chunk_bytes;
  manifest.created_unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                 std::chrono::system_clock::now().time_since_epoch())
                                 .count();
  PHOS_ASSIGN_OR_RETURN(uint64_t version, Publish(w->function_, manifest, w->written_, what));
  w->committed_ = true;
  Unpin(w->pinned_);
  w->pinned_.clear();
  w->chunks_.Release();
  PHOS_LOG(Info, "store", "committed snapshot '{}' v{}: {} chunks written", w->function_, version,
           w->written_.size());
  return version;
}

Result<std::vector<ChunkId>> StoreImpl::MissingChunks(const std::vector<ChunkId>& ids) {
  std::vector<ChunkId> missing;
  std::unordered_set<ChunkId, ChunkIdHash> seen;
  for (const ChunkId& id : ids) {
    if (!seen.insert(id).second) continue;
    PHOS_ASSIGN_OR_RETURN(std::optional<ChunkLocation> loc, GetLocation(id));
    if (!loc) missing.push_back(id);
  }
  return missing;
}

Status StoreImpl::PutChunk(const ChunkId& id, std::string_view data) {
  PHOS_RETURN_IF_ERROR(Writable());
  std::string what = fmt::format("put chunk {}", id.ToHex());
  if (data.empty()) return Status::InvalidArgument(what + ": no bytes");
  if (data.size() > options_.chunk_bytes) {
    return Status::InvalidArgument(
        fmt::format("{}: {} bytes, more than the store's chunk size ({})", what, data.size(), options_.chunk_bytes));
  }
  ChunkId got = ChunkId::Of(data.data(), data.size());
  if (got != id) return Status::InvalidArgument(fmt::format("{}: the bytes hash to {}", what, got.ToHex()));

  std::lock_guard imports(import_mu_);
  PHOS_ASSIGN_OR_RETURN(std::optional<ChunkLocation> held, GetLocation(id));
  if (held) return Status::Ok();
  PHOS_ASSIGN_OR_RETURN(ChunkLocation loc, imports_.Append(data.data(), data.size()));
  // Barrier, as in Commit: the bytes are durable before the index points at them.
  PHOS_RETURN_IF_ERROR(imports_.Sync().WithContext(what));
  std::lock_guard lock(meta_mu_);
  // A commit may have indexed the same chunk meanwhile: its entry, refcount included, stays, and
  // the bytes just written are left to compaction.
  PHOS_ASSIGN_OR_RETURN(held, GetLocation(id));
  if (held) return Status::Ok();
  rocksdb::WriteBatch batch;
  batch.Put(ChunkKey(id), loc.Encode());
  return WriteSynced(&batch).WithContext(what);
}

Result<uint64_t> StoreImpl::CommitImported(const std::string& function, Manifest manifest) {
  PHOS_RETURN_IF_ERROR(Writable());
  PHOS_RETURN_IF_ERROR(ValidFunctionName(function));
  std::string what = fmt::format("import snapshot of '{}'", function);
  PHOS_RETURN_IF_ERROR(ChunksCoverSizes(manifest).WithContext(what));

  // From the check to the publish under meta_mu_: GC would drop a chunk put but not yet
  // referenced in between.
  std::lock_guard lock(meta_mu_);
  std::unordered_set<ChunkId, ChunkIdHash> seen;
  std::unordered_set<ChunkId, ChunkIdHash> unheld;
  std::string first;
  auto check = [&](const std::vector<ChunkRef>& chunks, const std::string& owner) -> Status {
    for (const ChunkRef& ref : chunks) {
      seen.insert(ref.id);
      PHOS_ASSIGN_OR_RETURN(std::optional<ChunkLocation> loc, GetLocation(ref.id));
      if (loc && loc->raw_size == ref.size) continue;
      unheld.insert(ref.id);
      if (!first.empty()) continue;
      first = loc ? fmt::format("chunk {} of {}, is held as {} bytes, listed as {}", ref.id.ToHex(), owner,
                                loc->raw_size, ref.size)
                  : fmt::format("chunk {} of {}, is not in the store", ref.id.ToHex(), owner);
    }
    return Status::Ok();
  };
  for (size_t i = 0; i < manifest.buffers.size(); ++i) {
    PHOS_RETURN_IF_ERROR(check(manifest.buffers[i].chunks, fmt::format("buffer {}", i)));
  }
  for (size_t i = 0; i < manifest.modules.size(); ++i) {
    PHOS_RETURN_IF_ERROR(check(manifest.modules[i].chunks, fmt::format("module {}", i)));
  }
  if (!unheld.empty()) {
    return Status::NotFound(
        fmt::format("{}: {} of its {} chunks are not held; the first, {}", what, unheld.size(), seen.size(), first));
  }
  PHOS_ASSIGN_OR_RETURN(uint64_t version, Publish(function, manifest, {}, what));
  PHOS_LOG(Info, "store", "imported snapshot '{}' v{}: {} chunks", function, version, seen.size());
  return version;
}

}  // namespace phos::store
