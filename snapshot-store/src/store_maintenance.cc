// Garbage collection, segment compaction, statistics and the consistency check.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include <fmt/format.h>

#include "phos/base/fault_point.h"
#include "phos/base/log.h"
#include "phos/store/aligned_buffer.h"
#include "store_impl.h"

namespace phos::store {

namespace {

struct IndexEntry {
  ChunkId id;
  ChunkLocation loc;
};

Result<std::vector<IndexEntry>> ScanIndex(rocksdb::DB* db) {
  std::vector<IndexEntry> out;
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek("c"); it->Valid() && it->key().starts_with("c"); it->Next()) {
    PHOS_ASSIGN_OR_RETURN(ChunkId id, ChunkIdFromKey(it->key().ToStringView()));
    PHOS_ASSIGN_OR_RETURN(ChunkLocation loc, ChunkLocation::Decode(it->value().ToStringView()));
    out.push_back({id, loc});
  }
  if (!it->status().ok()) return Status::IoError("store: scan chunk index: " + it->status().ToString());
  return out;
}

uint64_t FileSize(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

}  // namespace

Result<std::vector<uint64_t>> StoreImpl::SegmentFilesOnDisk() {
  std::vector<uint64_t> ids;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(segment_dir(), ec)) {
    uint64_t id = 0;
    if (ParseSegmentName(entry.path().filename().string(), &id)) ids.push_back(id);
  }
  if (ec) return Status::IoError(fmt::format("store: list {}: {}", segment_dir(), ec.message()));
  std::sort(ids.begin(), ids.end());
  return ids;
}

uint64_t StoreImpl::DeleteSegments(const std::vector<uint64_t>& ids) {
  std::unique_lock io(io_mu_);
  uint64_t bytes = 0;
  for (uint64_t id : ids) {
    {
      std::lock_guard lock(files_mu_);
      files_.erase(id);
    }
    std::string path = SegmentPath(segment_dir(), id);
    uint64_t size = FileSize(path);
    if (::unlink(path.c_str()) == 0) {
      bytes += size;
    } else {
      PHOS_LOG(Warn, "store", "could not delete segment {}: {}", path, std::strerror(errno));
    }
  }
  return bytes;
}

Result<GcStats> StoreImpl::CollectGarbage() {
  PHOS_RETURN_IF_ERROR(Writable());
  std::lock_guard imports(import_mu_);
  std::lock_guard lock(meta_mu_);
  // The chunks put and not yet committed are dropped below with every other unreferenced chunk;
  // giving up the segment they were put in lets it go too when nothing indexed is left in it
  // (the next PutChunk starts a new one).
  imports_.Release();
  GcStats stats;
  PHOS_ASSIGN_OR_RETURN(std::vector<IndexEntry> entries, ScanIndex(db_.get()));
  rocksdb::WriteBatch batch;
  std::set<uint64_t> live_segments;
  for (const auto& e : entries) {
    if (e.loc.refcount == 0 && !pins_.count(e.id)) {
      batch.Delete(ChunkKey(e.id));
      ++stats.chunks_freed;
    } else {
      live_segments.insert(e.loc.segment);
    }
  }
  if (batch.Count() > 0) PHOS_RETURN_IF_ERROR(WriteSynced(&batch).WithContext("gc"));
  FaultPoint("store-gc");  // chunks unindexed, their segment files not yet deleted
  // Only after the index no longer points into them may segment files go.
  PHOS_ASSIGN_OR_RETURN(std::vector<uint64_t> on_disk, SegmentFilesOnDisk());
  std::vector<uint64_t> dead;
  for (uint64_t id : on_disk) {
    if (!live_segments.count(id) && !active_segments_.count(id)) dead.push_back(id);
  }
  stats.bytes_reclaimed = DeleteSegments(dead);
  stats.segments_deleted = dead.size();
  PHOS_LOG(Info, "store", "gc: {} chunks freed, {} segments ({} bytes) deleted", stats.chunks_freed,
           stats.segments_deleted, stats.bytes_reclaimed);
  return stats;
}

Result<CompactionStats> StoreImpl::CompactSegments() {
  PHOS_RETURN_IF_ERROR(Writable());
  std::lock_guard lock(meta_mu_);
  CompactionStats stats;
  PHOS_ASSIGN_OR_RETURN(std::vector<IndexEntry> entries, ScanIndex(db_.get()));
  std::map<uint64_t, uint64_t> live_bytes;
  for (const auto& e : entries) live_bytes[e.loc.segment] += AlignedBuffer::RoundUp(e.loc.stored_size);
  std::set<uint64_t> victims;
  uint64_t victim_bytes = 0;
  for (const auto& [segment, live] : live_bytes) {
    if (active_segments_.count(segment)) continue;
    uint64_t size = FileSize(SegmentPath(segment_dir(), segment));
    if (size > 0 && static_cast<double>(live) < options_.compact_below_live_fraction * static_cast<double>(size)) {
      victims.insert(segment);
      victim_bytes += size;
    }
  }
  if (victims.empty()) return stats;

  // Copy the live chunks, verified, into a fresh segment; make it durable; then repoint the index.
  uint64_t target_id = next_segment_++;
  active_segments_.insert(target_id);
  auto release = [&] { active_segments_.erase(target_id); };
  auto target = SegmentWriter::Create(segment_dir(), target_id);
  if (!target.ok()) {
    release();
    return target.status().WithContext("compact");
  }
  rocksdb::WriteBatch batch;
  AlignedBuffer stored;
  for (const auto& e : entries) {
    if (!victims.count(e.loc.segment)) continue;
    Status s;
    {
      std::shared_lock io(io_mu_);
      auto scratch = AlignedBuffer::Allocate(std::max(e.loc.stored_size, e.loc.raw_size));
      if (!scratch.ok()) {
        s = scratch.status();
      } else {
        stored = std::move(*scratch);
        // Verify before copying so that compaction never launders a corrupt chunk.
        s = ReadLocated(e.id, e.loc, stored.data());
        if (s.ok() && (e.loc.flags & ChunkLocation::kCompressed)) s = ReadStored(e.loc, stored.data());
      }
    }
    Result<uint64_t> offset = s.ok() ? (*target)->Append(stored.data(), e.loc.stored_size) : Result<uint64_t>(s);
    if (!offset.ok()) {
      ::unlink((*target)->path().c_str());
      release();
      return offset.status().WithContext("compact");
    }
    ChunkLocation moved = e.loc;
    moved.segment = target_id;
    moved.offset = *offset;
    batch.Put(ChunkKey(e.id), moved.Encode());
    ++stats.chunks_moved;
    stats.bytes_moved += AlignedBuffer::RoundUp(e.loc.stored_size);
  }
  Status durable = (*target)->Sync();
  if (durable.ok()) durable = SyncDirectory(segment_dir());
  if (durable.ok()) durable = WriteSynced(&batch);
  release();
  if (!durable.ok()) {
    ::unlink((*target)->path().c_str());
    return durable.WithContext("compact");
  }
  std::vector<uint64_t> old(victims.begin(), victims.end());
  uint64_t deleted = DeleteSegments(old);
  stats.segments_rewritten = old.size();
  stats.bytes_reclaimed = deleted > stats.bytes_moved ? deleted - stats.bytes_moved : 0;
  PHOS_LOG(Info, "store", "compaction: {} segments ({} bytes) rewritten into segment {} ({} chunks, {} bytes)",
           old.size(), victim_bytes, target_id, stats.chunks_moved, stats.bytes_moved);
  return stats;
}

Result<StoreStats> StoreImpl::Stats() {
  StoreStats stats;
  PHOS_ASSIGN_OR_RETURN(std::vector<std::string> functions, ListFunctions());
  stats.functions = functions.size();
  for (const auto& f : functions) {
    PHOS_ASSIGN_OR_RETURN(std::vector<uint64_t> versions, ListVersions(f));
    for (uint64_t v : versions) {
      PHOS_ASSIGN_OR_RETURN(Manifest m, LoadManifest(f, v));
      ++stats.snapshots;
      for (const Buffer& b : m.buffers) stats.logical_bytes += b.size;
      for (const Module& mod : m.modules) stats.logical_bytes += mod.size;
    }
  }
  PHOS_ASSIGN_OR_RETURN(std::vector<IndexEntry> entries, ScanIndex(db_.get()));
  stats.chunks = entries.size();
  for (const auto& e : entries) {
    if (e.loc.refcount == 0) continue;
    ++stats.live_chunks;
    stats.unique_bytes += e.loc.raw_size;
    stats.stored_bytes += e.loc.stored_size;
  }
  PHOS_ASSIGN_OR_RETURN(std::vector<uint64_t> segments, SegmentFilesOnDisk());
  stats.segment_files = segments.size();
  for (uint64_t id : segments) stats.segment_bytes += FileSize(SegmentPath(segment_dir(), id));
  stats.dedup_ratio = stats.unique_bytes == 0 ? 1.0
                                              : static_cast<double>(stats.logical_bytes) /
                                                    static_cast<double>(stats.unique_bytes);
  return stats;
}

Status StoreImpl::CheckConsistency() {
  std::lock_guard lock(meta_mu_);
  std::unordered_map<std::string, uint32_t> expected;  // chunk key -> snapshots referencing it
  PHOS_ASSIGN_OR_RETURN(std::vector<std::string> functions, ListFunctions());
  for (const auto& f : functions) {
    PHOS_ASSIGN_OR_RETURN(std::vector<uint64_t> versions, ListVersions(f));
    for (uint64_t v : versions) {
      PHOS_ASSIGN_OR_RETURN(Manifest m, LoadManifest(f, v));
      std::unordered_set<std::string> seen;
      for (const Buffer& b : m.buffers)
        for (const ChunkRef& c : b.chunks) seen.insert(ChunkKey(c.id));
      for (const Module& mod : m.modules)
        for (const ChunkRef& c : mod.chunks) seen.insert(ChunkKey(c.id));
      for (const auto& key : seen) ++expected[key];
    }
  }
  PHOS_ASSIGN_OR_RETURN(std::vector<IndexEntry> entries, ScanIndex(db_.get()));
  std::unordered_map<uint64_t, uint64_t> sizes;
  for (const auto& e : entries) {
    std::string key = ChunkKey(e.id);
    auto it = expected.find(key);
    uint32_t want = it == expected.end() ? 0 : it->second;
    if (e.loc.refcount != want) {
      return Status::Corruption(fmt::format("chunk {}: refcount {} but {} snapshots reference it", e.id.ToHex(),
                                            e.loc.refcount, want));
    }
    if (it != expected.end()) expected.erase(it);
    if (!sizes.count(e.loc.segment)) {
      std::string path = SegmentPath(segment_dir(), e.loc.segment);
      if (::access(path.c_str(), F_OK) != 0) {
        return Status::Corruption(fmt::format("chunk {}: segment file {} is missing", e.id.ToHex(), path));
      }
      sizes[e.loc.segment] = FileSize(path);
    }
    if (e.loc.offset + e.loc.stored_size > sizes[e.loc.segment]) {
      return Status::Corruption(fmt::format("chunk {}: extends past the end of segment {}", e.id.ToHex(),
                                            e.loc.segment));
    }
  }
  if (!expected.empty()) {
    auto id = ChunkIdFromKey(expected.begin()->first);
    return Status::Corruption(fmt::format("chunk {} is referenced by a snapshot but not in the index",
                                          id.ok() ? id->ToHex() : "?"));
  }
  return Status::Ok();
}

}  // namespace phos::store
