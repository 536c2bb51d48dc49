#include "phos/store/snapshot_uploader.h"

#include <unordered_set>

#include "phos/base/log.h"
#include "phos/store/manifest.h"

namespace phos::store {

SnapshotUploader::SnapshotUploader(Store* store, objstore::S3Client client)
    : store_(store), client_(client), chunks_(std::move(client)) {
  thread_ = std::thread([this] { Run(); });
}

SnapshotUploader::~SnapshotUploader() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    queue_.clear();
  }
  cv_.notify_all();
  thread_.join();
}

void SnapshotUploader::Enqueue(const std::string& function, uint64_t version) {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    queue_.emplace_back(function, version);
  }
  cv_.notify_all();
}

void SnapshotUploader::Drain() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
}

SnapshotUploader::Stats SnapshotUploader::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

void SnapshotUploader::Run() {
  std::unique_lock lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (stopping_) return;
    auto [function, version] = queue_.front();
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    Status uploaded = Upload(function, version);
    lock.lock();
    busy_ = false;
    if (uploaded.ok()) {
      ++stats_.snapshots;
    } else {
      ++stats_.failures;
      PHOS_LOG(Error, "store", "{} v{} not uploaded to the remote tier: {}", function, version, uploaded.message());
    }
    cv_.notify_all();
  }
}

Status SnapshotUploader::Upload(const std::string& function, uint64_t version) {
  // Removed meanwhile (a redeploy's older snapshot): nothing to upload.
  Result<Manifest> manifest = store_->LoadManifest(function, version);
  if (manifest.status().code() == StatusCode::kNotFound) return Status::Ok();
  PHOS_RETURN_IF_ERROR(manifest.status());
  uint64_t chunks = 0, bytes = 0;
  std::string data;
  for (const ChunkRef& ref : ChunksOf(*manifest)) {
    // Content-addressed: a chunk the bucket holds is these bytes (checked when read).
    PHOS_ASSIGN_OR_RETURN(bool there, chunks_.Has(ref.id));
    if (there) continue;
    data.resize(ref.size);
    PHOS_RETURN_IF_ERROR(store_->ReadChunk(ref, data.data()));
    PHOS_RETURN_IF_ERROR(chunks_.Put(ref, data));
    ++chunks;
    bytes += ref.size;
  }
  PHOS_RETURN_IF_ERROR(client_.Put(ManifestKey(function, version), EncodeManifest(*manifest)));
  {
    std::lock_guard lock(mu_);
    stats_.chunks += chunks;
    stats_.bytes += bytes;
  }
  PHOS_LOG(Info, "store", "{} v{} uploaded to the remote tier: {} chunks sent, {} bytes", function, version, chunks,
           bytes);
  return Status::Ok();
}

Result<uint64_t> ImportFromBucket(Store& store, const objstore::S3Client& bucket, const std::string& function,
                                  uint64_t version) {
  const std::string key = SnapshotUploader::ManifestKey(function, version);
  PHOS_ASSIGN_OR_RETURN(std::string bytes, bucket.Get(key));
  Result<Manifest> manifest = DecodeManifest(bytes);
  if (!manifest.ok()) return manifest.status().WithContext(key + " in the bucket");
  const std::vector<ChunkRef> refs = ChunksOf(*manifest);
  std::vector<ChunkId> ids;
  for (const ChunkRef& ref : refs) ids.push_back(ref.id);
  PHOS_ASSIGN_OR_RETURN(std::vector<ChunkId> missing_ids, store.MissingChunks(ids));
  const std::unordered_set<ChunkId, ChunkIdHash> missing(missing_ids.begin(), missing_ids.end());
  RemoteChunks chunks(bucket);
  std::string data;
  for (const ChunkRef& ref : refs) {
    if (missing.count(ref.id) == 0) continue;
    data.resize(ref.size);
    PHOS_RETURN_IF_ERROR(chunks.ReadChunk(ref, data.data()).WithContext(key));
    PHOS_RETURN_IF_ERROR(store.PutChunk(ref.id, data));
  }
  PHOS_ASSIGN_OR_RETURN(uint64_t imported, store.CommitImported(function, std::move(manifest).value()));
  PHOS_LOG(Info, "store", "{} v{} imported from the remote tier as v{}: {} of {} chunks fetched", function, version,
           imported, missing.size(), refs.size());
  return imported;
}

}  // namespace phos::store
