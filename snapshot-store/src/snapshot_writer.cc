// Building and committing a snapshot (the protocol is described in store.h).
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
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
              c == '-';
    if (!ok) {
      return Status::InvalidArgument(
          fmt::format("function name '{}': only letters, digits, '.', '_' and '-' are allowed", function));
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

WriterImpl::WriterImpl(StoreImpl* store, std::string function) : store_(store), function_(std::move(function)) {}

WriterImpl::~WriterImpl() {
  {
    std::lock_guard lock(store_->meta_mu_);
    store_->Unpin(pinned_);
  }
  for (const auto& segment : segments_) {
    // An abandoned writer's segment holds nothing the index points at: reclaim it now rather
    // than at the next GC. A committed writer's segment stays (its chunks are indexed).
    if (!committed_) ::unlink(segment->path().c_str());
    store_->ReleaseSegment(segment->id());
  }
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
  written_[id] = ChunkLocation{segment.id(), offset, static_cast<uint32_t>(stored_size), static_cast<uint32_t>(size),
                               flags, 0};
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
  uint64_t bytes = 0;
  for (const ChunkRef& c : buffer.chunks) {
    if (!written_.count(c.id) && !pinned_.count(c.id)) {
      return Status::InvalidArgument(fmt::format("AddStoredBuffer: buffer {:#x} lists chunk {}, which this writer "
                                                 "neither wrote nor holds",
                                                 buffer.device_address, c.id.ToHex()));
    }
    bytes += c.size;
  }
  if (bytes != buffer.size) {
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

Status WriterImpl::SyncSegments() {
  for (const auto& segment : segments_) PHOS_RETURN_IF_ERROR(segment->Sync());
  if (!segments_.empty()) PHOS_RETURN_IF_ERROR(SyncDirectory(store_->segment_dir()));
  return Status::Ok();
}

Result<uint64_t> StoreImpl::Commit(std::unique_ptr<SnapshotWriter> writer) {
  PHOS_RETURN_IF_ERROR(Writable());
  auto* w = dynamic_cast<WriterImpl*>(writer.get());
  if (w == nullptr || w->store_ != this) return Status::InvalidArgument("Commit: writer belongs to another store");
  if (w->committed_) return Status::FailedPrecondition("Commit: writer already committed");
  std::string what = fmt::format("commit snapshot of '{}'", w->function_);
  // Barrier: chunk bytes (and the segment files' names) are durable before any metadata
  // points at them.
  PHOS_RETURN_IF_ERROR(w->SyncSegments().WithContext(what));
  FaultPoint("store-commit");  // chunks written and synced, nothing indexed yet

  std::lock_guard lock(meta_mu_);
  rocksdb::WriteBatch batch;
  std::string next_value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), NextVersionKey(w->function_), &next_value);
  uint64_t version = s.ok() ? DecodeU64(next_value) : 1;
  if (!s.ok() && !s.IsNotFound()) return Status::IoError(what + ": " + s.ToString());
  if (version == 0) return Status::Corruption(what + ": version counter is corrupt");

  Manifest& manifest = w->manifest_;
  manifest.function = w->function_;
  manifest.version = version;
  manifest.chunk_bytes = options_.chunk_bytes;
  manifest.created_unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                 std::chrono::system_clock::now().time_since_epoch())
                                 .count();
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
    PHOS_ASSIGN_OR_RETURN(std::vector<uint64_t> versions, ListVersions(w->function_));
    size_t total = versions.size() + 1;
    for (size_t i = 0; total > options_.keep_versions && i < versions.size(); ++i, --total) {
      PHOS_RETURN_IF_ERROR(DropVersion(w->function_, versions[i], &batch, &deltas).WithContext(what));
    }
  }
  PHOS_RETURN_IF_ERROR(ApplyDeltas(deltas, w->written_, &batch).WithContext(what));
  batch.Put(ManifestKey(w->function_, version), EncodeManifest(manifest));
  batch.Put(NextVersionKey(w->function_), EncodeU64(version + 1));
  // Publish: one synced write makes manifest, index, refcounts and version map visible together.
  PHOS_RETURN_IF_ERROR(WriteSynced(&batch).WithContext(what));
  w->committed_ = true;
  Unpin(w->pinned_);
  w->pinned_.clear();
  for (const auto& segment : w->segments_) active_segments_.erase(segment->id());
  w->segments_.clear();
  PHOS_LOG(Info, "store", "committed snapshot '{}' v{}: {} chunks written, {} refcounts changed", w->function_,
           version, w->written_.size(), deltas.size());
  return version;
}

}  // namespace phos::store
