// The remote tier's uploads: each snapshot a deploy committed copied to the bucket in the
// background — every chunk the bucket lacks (RemoteChunks), then the manifest, as the object
// "manifests/<function>/<node>-<version>" (each node numbers its own store's versions), so a
// manifest in the bucket only ever names chunks that are there. The local store stays the source:
// nothing there waits for an upload.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "phos/store/remote_chunks.h"
#include "phos/store/store.h"

namespace phos::store {

class SnapshotUploader {
 public:
  // `store` must outlive the uploader; `node` names this node in the manifests' keys.
  SnapshotUploader(Store* store, objstore::S3Client client, std::string node);
  // Finishes the upload under way; those still queued are dropped (the store keeps them, and a
  // later deploy uploads anew).
  ~SnapshotUploader();
  SnapshotUploader(const SnapshotUploader&) = delete;
  SnapshotUploader& operator=(const SnapshotUploader&) = delete;

  static std::string ManifestKey(const std::string& function, const std::string& node, uint64_t version) {
    return "manifests/" + function + "/" + node + "-" + std::to_string(version);
  }

  // Told the manifest's key once a snapshot is uploaded, or why it was not.
  using Done = std::function<void(Result<std::string>)>;
  // Queues snapshot `version` of `function` for upload; `done` (may be null) is called from the
  // uploader's thread, or with Unavailable when the uploader ends first.
  void Enqueue(const std::string& function, uint64_t version, Done done = nullptr);
  // Until every snapshot queued so far is uploaded or has failed.
  void Drain();

  struct Stats {
    uint64_t snapshots = 0;  // uploaded, manifests included
    uint64_t chunks = 0;     // sent (those the bucket held already are not)
    uint64_t bytes = 0;
    uint64_t failures = 0;   // snapshots whose upload failed (said in the log)
  };
  Stats stats() const;

 private:
  struct Job {
    std::string function;
    uint64_t version;
    Done done;
  };
  void Run();
  Status Upload(const std::string& function, uint64_t version);

  Store* store_;
  const std::string node_;
  objstore::S3Client client_;
  RemoteChunks chunks_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;
  bool busy_ = false;
  bool stopping_ = false;
  Stats stats_;
  std::thread thread_;
};

struct ImportOptions {
  // Chunk requests in flight at once, 1..64: one object's latency hides behind the others'.
  // Default: 8.
  int parallel = 8;
};

struct ImportStats {
  uint64_t version = 0;         // the snapshot's version in the store it was imported into
  uint64_t chunks = 0;          // the snapshot's
  uint64_t fetched_chunks = 0;  // of them, those the store lacked (fetched from the bucket)
  uint64_t fetched_bytes = 0;
  double seconds = 0;           // from the manifest's request to the commit
  double first_chunk_seconds = 0;  // to the first chunk fetched and stored (0: none was)
};

// The other way: the snapshot whose manifest is the object `manifest_key` (another node's upload)
// copied from the bucket into `store` as a version of `function`: the chunks `store` lacks fetched
// in first-touch order, `options.parallel` at a time, checked against their ids (RemoteChunks) and
// stored, then the manifest committed (Store::CommitImported). NotFound when the bucket has no
// such object; Corruption for a manifest that does not decode or a chunk that does not match its
// id twice, with nothing committed.
Result<ImportStats> ImportFromBucket(Store& store, const objstore::S3Client& bucket, const std::string& manifest_key,
                                     const std::string& function, const ImportOptions& options = {});

}  // namespace phos::store
