#include "phos/store/remote_chunks.h"

#include <cstring>

#include <fmt/core.h>

namespace phos::store {

Status RemoteChunks::Put(const ChunkRef& ref, std::string_view bytes) {
  if (bytes.size() != ref.size || ChunkId::Of(bytes.data(), bytes.size()) != ref.id) {
    return Status::InvalidArgument(fmt::format("chunk {}: the bytes to upload are not its content", ref.id.ToHex()));
  }
  return client_.Put(Key(ref.id), std::string(bytes));
}

Status RemoteChunks::ReadChunk(const ChunkRef& ref, void* dst) {
  std::string why;
  for (int attempt = 0; attempt < 2; ++attempt) {
    PHOS_ASSIGN_OR_RETURN(std::string bytes, client_.Get(Key(ref.id)));
    if (bytes.size() != ref.size) {
      why = fmt::format("{} bytes, not {}", bytes.size(), ref.size);
    } else if (ChunkId id = ChunkId::Of(bytes.data(), bytes.size()); id != ref.id) {
      why = "its bytes hash to " + id.ToHex();
    } else {
      std::memcpy(dst, bytes.data(), bytes.size());
      return Status::Ok();
    }
    mismatches_.fetch_add(1);
  }
  return Status::Corruption(fmt::format("chunk {} in the bucket is corrupted ({}, fetched twice)", ref.id.ToHex(), why));
}

}  // namespace phos::store
