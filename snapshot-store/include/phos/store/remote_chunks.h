// The remote tier's chunks: each chunk an object "chunks/<id>" of an S3-compatible bucket (its id
// in hex, 32 digits), holding its bytes as they are. An object's name is the hash of its bytes,
// so every read is checked: a corrupted or truncated object is fetched once more, then refused.
#pragma once

#include <atomic>
#include <string>
#include <string_view>

#include "phos/objstore/s3.h"
#include "phos/store/chunk.h"

namespace phos::store {

class RemoteChunks : public ChunkSource {
 public:
  explicit RemoteChunks(objstore::S3Client client) : client_(std::move(client)) {}

  // The object a chunk is kept in.
  static std::string Key(const ChunkId& id) { return "chunks/" + id.ToHex(); }

  // Whether the bucket holds chunk `id` (its content is checked when it is read).
  Result<bool> Has(const ChunkId& id) const { return client_.Exists(Key(id)); }
  // Uploads chunk `ref` (`bytes`, which must be its content). InvalidArgument when the bytes are
  // not the chunk's.
  Status Put(const ChunkRef& ref, std::string_view bytes);
  // Fetches chunk `ref` into `dst` (ref.size bytes) and checks it against its id; an object that
  // does not match is fetched again once, then Corruption naming the chunk. NotFound when the
  // bucket has no such chunk.
  Status ReadChunk(const ChunkRef& ref, void* dst) override;

  // Fetches that did not match their chunk's id (each fetched again).
  uint64_t mismatches() const { return mismatches_.load(); }

 private:
  objstore::S3Client client_;
  std::atomic<uint64_t> mismatches_{0};
};

}  // namespace phos::store
