// Store: opening, listing, loading, deleting and reading (writes: snapshot_writer.cc; GC,
// compaction and the consistency check: store_maintenance.cc).
#include <rocksdb/options.h>
#include <xxhash.h>
#include <zstd.h>

#include <filesystem>

#include <fmt/format.h>

#include "phos/base/log.h"
#include "phos/store/aligned_buffer.h"
#include "store_impl.h"

namespace phos::store {

namespace {

Status FromRocks(const rocksdb::Status& s, std::string_view what) {
  if (s.ok()) return Status::Ok();
  if (s.IsCorruption()) return Status::Corruption(fmt::format("{}: {}", what, s.ToString()));
  return Status::IoError(fmt::format("{}: {}", what, s.ToString()));
}

}  // namespace

Result<std::unique_ptr<Store>> Store::Open(const StoreOptions& options) {
  if (options.path.empty()) return Status::InvalidArgument("store: StoreOptions.path is empty");
  if (options.chunk_bytes < AlignedBuffer::kAlignment || options.chunk_bytes > (1u << 30)) {
    return Status::InvalidArgument(
        fmt::format("store: chunk_bytes {} outside [4 KiB, 1 GiB]", options.chunk_bytes));
  }
  if (options.compact_below_live_fraction < 0 || options.compact_below_live_fraction > 1) {
    return Status::InvalidArgument("store: compact_below_live_fraction outside [0, 1]");
  }
  std::error_code ec;
  std::string segments = options.path + "/segments";
  if (!options.read_only) {
    std::filesystem::create_directories(segments, ec);
    if (ec) return Status::IoError(fmt::format("store: create {}: {}", segments, ec.message()));
  } else if (!std::filesystem::is_directory(options.path + "/db")) {
    return Status::NotFound(fmt::format("store: {} holds no store (no db/)", options.path));
  }
  rocksdb::Options db_options;
  db_options.create_if_missing = !options.read_only;
  db_options.keep_log_file_num = 2;
  // The index is small (32 bytes a chunk); a small memtable keeps recovery after a crash short.
  db_options.write_buffer_size = 8 << 20;
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = options.read_only ? rocksdb::DB::OpenForReadOnly(db_options, options.path + "/db", &raw)
                                        : rocksdb::DB::Open(db_options, options.path + "/db", &raw);
  PHOS_RETURN_IF_ERROR(FromRocks(s, "store: open " + options.path));
  std::unique_ptr<rocksdb::DB> db(raw);

  std::string format;
  s = db->Get(rocksdb::ReadOptions(), std::string(kFormatKey), &format);
  if (s.IsNotFound()) {
    if (options.read_only) return Status::Corruption(fmt::format("store {}: no format record", options.path));
    rocksdb::WriteOptions wo;
    wo.sync = true;
    PHOS_RETURN_IF_ERROR(
        FromRocks(db->Put(wo, std::string(kFormatKey), EncodeU64(kStoreFormatVersion)), "store: init"));
  } else {
    PHOS_RETURN_IF_ERROR(FromRocks(s, "store: read format"));
    uint64_t v = DecodeU64(format);
    if (v == 0 || v > kStoreFormatVersion) {
      return Status::NotSupported(fmt::format("store {}: layout version {} (this build reads version {})",
                                              options.path, v, kStoreFormatVersion));
    }
  }

  // Segment ids are never reused while a file or index entry holds one.
  uint64_t next_segment = 1;
  for (const auto& entry : std::filesystem::directory_iterator(segments, ec)) {
    uint64_t id = 0;
    if (ParseSegmentName(entry.path().filename().string(), &id)) next_segment = std::max(next_segment, id + 1);
  }
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek("c"); it->Valid() && it->key().starts_with("c"); it->Next()) {
    auto loc = ChunkLocation::Decode(it->value().ToStringView());
    if (loc.ok()) next_segment = std::max(next_segment, loc->segment + 1);
  }
  it.reset();
  PHOS_LOG(Info, "store", "opened {}{}", options.path, options.read_only ? " read-only" : "");
  return std::unique_ptr<Store>(new StoreImpl(options, std::move(db), next_segment));
}

StoreImpl::StoreImpl(StoreOptions options, std::unique_ptr<rocksdb::DB> db, uint64_t next_segment)
    : Store(std::move(options)), db_(std::move(db)), next_segment_(next_segment) {}

StoreImpl::~StoreImpl() = default;

Status StoreImpl::Writable() const {
  if (options_.read_only) return Status::FailedPrecondition("store " + options_.path + " is open read-only");
  return Status::Ok();
}

Status StoreImpl::WriteSynced(rocksdb::WriteBatch* batch) {
  rocksdb::WriteOptions wo;
  wo.sync = true;
  return FromRocks(db_->Write(wo, batch), "store: write");
}

Result<std::optional<ChunkLocation>> StoreImpl::GetLocation(const ChunkId& id) {
  std::string value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), ChunkKey(id), &value);
  if (s.IsNotFound()) return std::optional<ChunkLocation>();
  PHOS_RETURN_IF_ERROR(FromRocks(s, "store: chunk index"));
  PHOS_ASSIGN_OR_RETURN(ChunkLocation loc, ChunkLocation::Decode(value));
  return std::optional<ChunkLocation>(loc);
}

Result<std::vector<std::string>> StoreImpl::ListFunctions() {
  std::vector<std::string> out;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek("m"); it->Valid() && it->key().starts_with("m"); it->Next()) {
    std::string function;
    uint64_t version = 0;
    if (ParseManifestKey(it->key().ToStringView(), &function, &version) && (out.empty() || out.back() != function)) {
      out.push_back(function);
    }
  }
  PHOS_RETURN_IF_ERROR(FromRocks(it->status(), "store: list functions"));
  return out;
}

Result<std::vector<uint64_t>> StoreImpl::ListVersions(const std::string& function) {
  std::vector<uint64_t> out;
  std::string prefix = ManifestPrefix(function);
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
    std::string f;
    uint64_t version = 0;
    if (ParseManifestKey(it->key().ToStringView(), &f, &version) && f == function) out.push_back(version);
  }
  PHOS_RETURN_IF_ERROR(FromRocks(it->status(), "store: list versions"));
  return out;
}

Result<Manifest> StoreImpl::LoadManifest(const std::string& function, uint64_t version) {
  std::string value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), ManifestKey(function, version), &value);
  std::string what = fmt::format("snapshot '{}' v{}", function, version);
  if (s.IsNotFound()) return Status::NotFound(what + " does not exist");
  PHOS_RETURN_IF_ERROR(FromRocks(s, what));
  auto manifest = DecodeManifest(value, options_.max_manifest_bytes);
  if (!manifest.ok()) return manifest.status().WithContext(what);
  if (manifest->function != function || manifest->version != version) {
    return Status::Corruption(
        fmt::format("{}: manifest names '{}' v{}", what, manifest->function, manifest->version));
  }
  return manifest;
}

Status StoreImpl::AnnotateBuffers(const std::string& function, uint64_t version,
                                  const std::string& what_learned,
                                  const std::function<Status(Manifest&, const std::string& what)>& annotate) {
  PHOS_RETURN_IF_ERROR(Writable());
  // Under meta_mu_: a concurrent DeleteVersion must not be undone by this rewrite.
  std::lock_guard lock(meta_mu_);
  PHOS_ASSIGN_OR_RETURN(Manifest manifest, LoadManifest(function, version));
  const std::string what = fmt::format("snapshot '{}' v{}", function, version);
  PHOS_RETURN_IF_ERROR(annotate(manifest, what));
  rocksdb::WriteBatch batch;
  batch.Put(ManifestKey(function, version), EncodeManifest(manifest));
  PHOS_RETURN_IF_ERROR(WriteSynced(&batch));
  PHOS_LOG(Info, "store", "recorded the {} of {} ({} buffers)", what_learned, what, manifest.buffers.size());
  return Status::Ok();
}

Status StoreImpl::SetFirstTouchOrder(const std::string& function, uint64_t version,
                                     const std::vector<int32_t>& ranks) {
  return AnnotateBuffers(
      function, version, "first-touch order", [&](Manifest& manifest, const std::string& what) {
        if (ranks.size() != manifest.buffers.size()) {
          return Status::InvalidArgument(fmt::format("{}: first-touch order has {} ranks for {} buffers",
                                                     what, ranks.size(), manifest.buffers.size()));
        }
        for (size_t i = 0; i < ranks.size(); ++i) {
          if (ranks[i] < -1) {
            return Status::InvalidArgument(
                fmt::format("{}: buffer {} has first-touch rank {} (-1 is untouched)", what, i, ranks[i]));
          }
          manifest.buffers[i].first_touch_rank = ranks[i];
        }
        return Status::Ok();
      });
}

Status StoreImpl::SetAccessClasses(const std::string& function, uint64_t version,
                                   const std::vector<AccessClass>& classes) {
  return AnnotateBuffers(
      function, version, "access classes", [&](Manifest& manifest, const std::string& what) {
        if (classes.size() != manifest.buffers.size()) {
          return Status::InvalidArgument(fmt::format("{}: {} access classes for {} buffers", what,
                                                     classes.size(), manifest.buffers.size()));
        }
        for (size_t i = 0; i < classes.size(); ++i) {
          const auto value = static_cast<int32_t>(classes[i]);
          if (value < static_cast<int32_t>(AccessClass::kUnknown) ||
              value > static_cast<int32_t>(AccessClass::kScratch)) {
            return Status::InvalidArgument(
                fmt::format("{}: buffer {} has access class {}, not one defined", what, i, value));
          }
          manifest.buffers[i].access_class = classes[i];
        }
        return Status::Ok();
      });
}

Status StoreImpl::DeleteVersion(const std::string& function, uint64_t version) {
  PHOS_RETURN_IF_ERROR(Writable());
  std::lock_guard lock(meta_mu_);
  rocksdb::WriteBatch batch;
  std::map<std::string, int64_t> deltas;
  PHOS_RETURN_IF_ERROR(DropVersion(function, version, &batch, &deltas));
  PHOS_RETURN_IF_ERROR(ApplyDeltas(deltas, {}, &batch));
  PHOS_RETURN_IF_ERROR(WriteSynced(&batch));
  PHOS_LOG(Info, "store", "deleted snapshot '{}' v{}", function, version);
  return Status::Ok();
}

Status StoreImpl::DropVersion(const std::string& function, uint64_t version, rocksdb::WriteBatch* batch,
                              std::map<std::string, int64_t>* deltas) {
  PHOS_ASSIGN_OR_RETURN(Manifest manifest, LoadManifest(function, version));
  std::unordered_set<ChunkId, ChunkIdHash> seen;
  auto drop = [&](const ChunkRef& ref) {
    if (seen.insert(ref.id).second) (*deltas)[ChunkKey(ref.id)] -= 1;
  };
  for (const Buffer& b : manifest.buffers)
    for (const ChunkRef& c : b.chunks) drop(c);
  for (const Module& m : manifest.modules)
    for (const ChunkRef& c : m.chunks) drop(c);
  batch->Delete(ManifestKey(function, version));
  return Status::Ok();
}

Status StoreImpl::ApplyDeltas(const std::map<std::string, int64_t>& deltas,
                              const std::unordered_map<ChunkId, ChunkLocation, ChunkIdHash>& written,
                              rocksdb::WriteBatch* batch) {
  for (const auto& [key, delta] : deltas) {
    PHOS_ASSIGN_OR_RETURN(ChunkId id, ChunkIdFromKey(key));
    PHOS_ASSIGN_OR_RETURN(std::optional<ChunkLocation> loc, GetLocation(id));
    if (!loc) {
      auto it = written.find(id);
      if (it == written.end()) {
        return Status::Internal(fmt::format("chunk {} is referenced but neither indexed nor written", id.ToHex()));
      }
      loc = it->second;
      loc->refcount = 0;
    }
    int64_t count = static_cast<int64_t>(loc->refcount) + delta;
    if (count < 0) {
      return Status::Corruption(
          fmt::format("chunk {}: refcount {} cannot drop by {}", id.ToHex(), loc->refcount, -delta));
    }
    loc->refcount = static_cast<uint32_t>(count);
    batch->Put(key, loc->Encode());
  }
  return Status::Ok();
}

Result<const SegmentFile*> StoreImpl::Segment(uint64_t id) {
  std::lock_guard lock(files_mu_);
  auto it = files_.find(id);
  if (it != files_.end()) return it->second.get();
  PHOS_ASSIGN_OR_RETURN(auto file, SegmentFile::Open(SegmentPath(segment_dir(), id), options_.direct_io));
  const SegmentFile* raw = file.get();
  files_.emplace(id, std::move(file));
  return raw;
}

Status StoreImpl::ReadStored(const ChunkLocation& loc, void* dst) {
  PHOS_ASSIGN_OR_RETURN(const SegmentFile* file, Segment(loc.segment));
  return file->Read(loc.offset, loc.stored_size, dst);
}

Status StoreImpl::ReadLocated(const ChunkId& id, const ChunkLocation& loc, void* dst) {
  auto where = [&] { return fmt::format("chunk {} (segment {} offset {})", id.ToHex(), loc.segment, loc.offset); };
  if (loc.flags & ChunkLocation::kCompressed) {
    PHOS_ASSIGN_OR_RETURN(AlignedBuffer stored, AlignedBuffer::Allocate(loc.stored_size));
    PHOS_RETURN_IF_ERROR(ReadStored(loc, stored.data()).WithContext(where()));
    size_t n = ZSTD_decompress(dst, loc.raw_size, stored.data(), loc.stored_size);
    if (ZSTD_isError(n) || n != loc.raw_size) {
      return Status::Corruption(fmt::format("{}: zstd frame does not decompress to {} bytes: {}", where(),
                                            loc.raw_size, ZSTD_isError(n) ? ZSTD_getErrorName(n) : "short"));
    }
  } else {
    PHOS_RETURN_IF_ERROR(ReadStored(loc, dst).WithContext(where()));
  }
  ChunkId got = ChunkId::Of(dst, loc.raw_size);
  if (got != id) {
    return Status::Corruption(fmt::format("{}: checksum mismatch, content hashes to {}", where(), got.ToHex()));
  }
  return Status::Ok();
}

Status StoreImpl::ReadChunk(const ChunkRef& ref, void* dst) {
  std::shared_lock io(io_mu_);
  PHOS_ASSIGN_OR_RETURN(std::optional<ChunkLocation> loc, GetLocation(ref.id));
  if (!loc) return Status::NotFound(fmt::format("chunk {} is not in the store", ref.id.ToHex()));
  if (loc->raw_size != ref.size) {
    return Status::Corruption(
        fmt::format("chunk {}: referenced as {} bytes, stored as {}", ref.id.ToHex(), ref.size, loc->raw_size));
  }
  return ReadLocated(ref.id, *loc, dst);
}

Status StoreImpl::ReadBuffer(const Manifest& manifest, int index, void* dst) {
  if (index < 0 || static_cast<size_t>(index) >= manifest.buffers.size()) {
    return Status::InvalidArgument(fmt::format("snapshot '{}' v{} has no buffer {} ({} buffers)",
                                               manifest.function, manifest.version, index,
                                               manifest.buffers.size()));
  }
  const Buffer& buffer = manifest.buffers[static_cast<size_t>(index)];
  uint64_t offset = 0;
  for (const ChunkRef& c : buffer.chunks) {
    auto context = [&] {
      return fmt::format("snapshot '{}' v{}: buffer {} ({:#x}{}{})", manifest.function, manifest.version,
                         index, buffer.device_address, buffer.label.empty() ? "" : " ", buffer.label);
    };
    if (offset + c.size > buffer.size) {
      return Status::Corruption(context() + ": chunks exceed the buffer's size");
    }
    PHOS_RETURN_IF_ERROR(ReadChunk(c, static_cast<char*>(dst) + offset).WithContext(context()));
    offset += c.size;
  }
  if (offset != buffer.size) {
    return Status::Corruption(fmt::format("snapshot '{}' v{}: buffer {}: chunks cover {} of {} bytes",
                                          manifest.function, manifest.version, index, offset, buffer.size));
  }
  return Status::Ok();
}

Status StoreImpl::VerifySnapshot(const std::string& function, uint64_t version) {
  PHOS_ASSIGN_OR_RETURN(Manifest manifest, LoadManifest(function, version));
  uint64_t largest = manifest.chunk_bytes;
  for (const Buffer& b : manifest.buffers)
    for (const ChunkRef& c : b.chunks) largest = std::max<uint64_t>(largest, c.size);
  for (const Module& m : manifest.modules)
    for (const ChunkRef& c : m.chunks) largest = std::max<uint64_t>(largest, c.size);
  PHOS_ASSIGN_OR_RETURN(AlignedBuffer scratch, AlignedBuffer::Allocate(largest));
  for (size_t i = 0; i < manifest.buffers.size(); ++i) {
    const Buffer& buffer = manifest.buffers[i];
    uint64_t covered = 0;
    for (const ChunkRef& c : buffer.chunks) {
      Status s = ReadChunk(c, scratch.data());
      if (!s.ok()) {
        return s.WithContext(fmt::format("snapshot '{}' v{}: buffer {} ({:#x} {})", function, version, i,
                                         buffer.device_address, buffer.label));
      }
      covered += c.size;
    }
    if (covered != buffer.size) {
      return Status::Corruption(fmt::format("snapshot '{}' v{}: buffer {}: chunks cover {} of {} bytes",
                                            function, version, i, covered, buffer.size));
    }
  }
  for (size_t i = 0; i < manifest.modules.size(); ++i) {
    const Module& module = manifest.modules[i];
    XXH3_state_t* state = XXH3_createState();
    XXH3_128bits_reset(state);
    Status s;
    for (const ChunkRef& c : module.chunks) {
      s = ReadChunk(c, scratch.data());
      if (!s.ok()) break;
      XXH3_128bits_update(state, scratch.data(), c.size);
    }
    XXH128_hash_t whole = XXH3_128bits_digest(state);
    XXH3_freeState(state);
    std::string where = fmt::format("snapshot '{}' v{}: module {}", function, version, i);
    if (!s.ok()) return s.WithContext(where);
    if (ChunkId{whole.low64, whole.high64} != module.content_hash) {
      return Status::Corruption(where + ": image does not match its content hash");
    }
  }
  return Status::Ok();
}

}  // namespace phos::store
