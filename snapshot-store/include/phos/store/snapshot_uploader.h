// The remote tier's uploads: each committed snapshot copied to the bucket in the background —
// every chunk the bucket lacks (RemoteChunks), then the manifest, as the object
// "manifests/<function>/<version>", so a manifest in the bucket only ever names chunks that are
// there. The local store stays the source: nothing there waits for an upload.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "phos/store/remote_chunks.h"
#include "phos/store/store.h"

namespace phos::store {

class SnapshotUploader {
 public:
  // `store` must outlive the uploader.
  SnapshotUploader(Store* store, objstore::S3Client client);
  // Finishes the upload under way; those still queued are dropped (the store keeps them, and a
  // later deploy uploads anew).
  ~SnapshotUploader();
  SnapshotUploader(const SnapshotUploader&) = delete;
  SnapshotUploader& operator=(const SnapshotUploader&) = delete;

  static std::string ManifestKey(const std::string& function, uint64_t version) {
    return "manifests/" + function + "/" + std::to_string(version);
  }

  // Queues snapshot `version` of `function` for upload.
  void Enqueue(const std::string& function, uint64_t version);
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
  void Run();
  Status Upload(const std::string& function, uint64_t version);

  Store* store_;
  objstore::S3Client client_;
  RemoteChunks chunks_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<std::string, uint64_t>> queue_;
  bool busy_ = false;
  bool stopping_ = false;
  Stats stats_;
  std::thread thread_;
};

// The other way: snapshot `version` of `function` copied from the bucket into `store` (another
// node's upload): the chunks `store` lacks fetched and checked against their ids (RemoteChunks),
// then the manifest committed as a version of `function` there (Store::CommitImported): that
// version. NotFound when the bucket has no such snapshot; Corruption for a manifest that does not
// decode or a chunk that does not match its id, with nothing committed.
Result<uint64_t> ImportFromBucket(Store& store, const objstore::S3Client& bucket, const std::string& function,
                                  uint64_t version);

}  // namespace phos::store
