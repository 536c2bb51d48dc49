#include "phos/store/snapshot_uploader.h"

#include <algorithm>
#include <chrono>
#include <unordered_set>

#include <fmt/core.h>

#include "phos/base/log.h"
#include "phos/store/manifest.h"
#include "phos/store/reader.h"

namespace phos::store {

SnapshotUploader::SnapshotUploader(Store* store, objstore::S3Client client, std::string node)
    : store_(store), node_(std::move(node)), client_(client), chunks_(std::move(client)) {
  thread_ = std::thread([this] { Run(); });
}

SnapshotUploader::~SnapshotUploader() {
  std::deque<Job> dropped;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    dropped.swap(queue_);
  }
  cv_.notify_all();
  thread_.join();
  for (Job& job : dropped) {
    if (job.done) job.done(Status::Unavailable("phosd stopped before the upload"));
  }
}

void SnapshotUploader::Enqueue(const std::string& function, uint64_t version, Done done) {
  {
    std::lock_guard lock(mu_);
    if (!stopping_) {
      queue_.push_back({function, version, std::move(done)});
      done = nullptr;
    }
  }
  if (done) return done(Status::Unavailable("phosd is stopping"));
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
    Job job = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    Status uploaded = Upload(job.function, job.version);
    if (!uploaded.ok()) {
      PHOS_LOG(Error, "store", "{} v{} not uploaded to the remote tier: {}", job.function, job.version,
               uploaded.message());
    }
    if (job.done) {
      job.done(uploaded.ok() ? Result<std::string>(ManifestKey(job.function, node_, job.version))
                             : Result<std::string>(uploaded));
    }
    lock.lock();
    busy_ = false;
    ++(uploaded.ok() ? stats_.snapshots : stats_.failures);
    cv_.notify_all();
  }
}

Status SnapshotUploader::Upload(const std::string& function, uint64_t version) {
  Result<Manifest> manifest = store_->LoadManifest(function, version);
  if (manifest.status().code() == StatusCode::kNotFound) {
    return Status::NotFound(fmt::format("{} v{} was deleted before its upload", function, version));
  }
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
  PHOS_RETURN_IF_ERROR(client_.Put(ManifestKey(function, node_, version), EncodeManifest(*manifest)));
  {
    std::lock_guard lock(mu_);
    stats_.chunks += chunks;
    stats_.bytes += bytes;
  }
  PHOS_LOG(Info, "store", "{} v{} uploaded to the remote tier: {} chunks sent, {} bytes", function, version, chunks,
           bytes);
  return Status::Ok();
}

Result<ImportStats> ImportFromBucket(Store& store, const objstore::S3Client& bucket, const std::string& manifest_key,
                                     const std::string& function, const ImportOptions& options) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  auto since_start = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  PHOS_ASSIGN_OR_RETURN(std::string bytes, bucket.Get(manifest_key));
  Result<Manifest> manifest = DecodeManifest(bytes);
  if (!manifest.ok()) return manifest.status().WithContext(manifest_key + " in the bucket");
  // Another node's CPU state is nothing here (its images, its template): this node makes its own.
  manifest->cpu_state = {};
  // The chunks in the order a restore wants them: buffers by first touch, then the modules'.
  std::vector<ChunkRef> refs;
  {
    std::unordered_set<ChunkId, ChunkIdHash> seen;
    auto add = [&](const std::vector<ChunkRef>& chunks) {
      for (const ChunkRef& ref : chunks) {
        if (seen.insert(ref.id).second) refs.push_back(ref);
      }
    };
    for (uint32_t i : FirstTouchOrder(*manifest)) add(manifest->buffers[i].chunks);
    for (const Module& m : manifest->modules) add(m.chunks);
  }
  std::vector<ChunkId> ids;
  for (const ChunkRef& ref : refs) {
    // What no store holds is not fetched (nor is room made for it).
    if (ref.size == 0 || ref.size > store.options().chunk_bytes) {
      return Status::Corruption(fmt::format("{} in the bucket names a chunk of {} bytes; chunks here are at most {}",
                                            manifest_key, ref.size, store.options().chunk_bytes));
    }
    ids.push_back(ref.id);
  }
  PHOS_ASSIGN_OR_RETURN(std::vector<ChunkId> missing_ids, store.MissingChunks(ids));
  const std::unordered_set<ChunkId, ChunkIdHash> missing(missing_ids.begin(), missing_ids.end());
  std::vector<ChunkRef> wanted;
  for (const ChunkRef& ref : refs) {
    if (missing.count(ref.id) != 0) wanted.push_back(ref);
  }
  ImportStats stats;
  stats.chunks = refs.size();
  stats.fetched_chunks = wanted.size();
  // Workers take the next chunk in order; the first failure stops them all.
  RemoteChunks chunks(bucket);
  std::mutex mu;
  size_t next = 0;
  Status failed;
  auto work = [&] {
    std::string data;
    while (true) {
      ChunkRef ref;
      {
        std::lock_guard lock(mu);
        if (!failed.ok() || next == wanted.size()) return;
        ref = wanted[next++];
      }
      data.resize(ref.size);
      Status got = chunks.ReadChunk(ref, data.data());
      if (got.ok()) got = store.PutChunk(ref.id, data);
      std::lock_guard lock(mu);
      if (!got.ok()) {
        if (failed.ok()) failed = got.WithContext(manifest_key);
        return;
      }
      stats.fetched_bytes += ref.size;
      if (stats.first_chunk_seconds == 0) stats.first_chunk_seconds = since_start();
    }
  };
  const size_t threads = std::min<size_t>(std::clamp(options.parallel, 1, 64), wanted.size());
  std::vector<std::thread> workers;
  for (size_t i = 1; i < threads; ++i) workers.emplace_back(work);
  work();
  for (std::thread& t : workers) t.join();
  PHOS_RETURN_IF_ERROR(failed);
  PHOS_ASSIGN_OR_RETURN(stats.version, store.CommitImported(function, std::move(manifest).value()));
  stats.seconds = since_start();
  PHOS_LOG(Info, "store", "{} imported from the remote tier as {} v{}: {} of {} chunks fetched ({} bytes) in {:.3f} s",
           manifest_key, function, stats.version, stats.fetched_chunks, stats.chunks, stats.fetched_bytes,
           stats.seconds);
  return stats;
}

}  // namespace phos::store
