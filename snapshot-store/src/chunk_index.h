// The RocksDB layout of the store: one key space, prefixes per kind of record, so that a commit
// is one WriteBatch however many kinds it touches.
//
//   "!format"                            store layout version (kStoreFormatVersion)
//   "c" <16-byte chunk id>               ChunkLocation (segment, offset, sizes, flags, refcount)
//   "m" <function> \0 <version, 8 B BE>  manifest envelope; in (function, version) order, this
//                                        is also the function -> snapshot-version map
//   "n" <function>                       next version number to assign (8 B LE); versions are
//                                        never reused, even after deletion
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "phos/base/status.h"
#include "phos/store/chunk.h"

namespace phos::store {

inline constexpr std::string_view kFormatKey = "!format";

struct ChunkLocation {
  static constexpr uint32_t kCompressed = 1;  // stored as one zstd frame

  uint64_t segment = 0;
  uint64_t offset = 0;
  uint32_t stored_size = 0;  // bytes in the segment (compressed size when compressed)
  uint32_t raw_size = 0;     // bytes of the chunk itself
  uint32_t flags = 0;
  uint32_t refcount = 0;     // snapshots whose manifest references the chunk

  std::string Encode() const;
  static Result<ChunkLocation> Decode(std::string_view bytes);
};

std::string ChunkKey(const ChunkId& id);
Result<ChunkId> ChunkIdFromKey(std::string_view key);
std::string ManifestKey(std::string_view function, uint64_t version);
// The prefix of every manifest key of `function`.
std::string ManifestPrefix(std::string_view function);
// Splits a manifest key; false when `key` is not one.
bool ParseManifestKey(std::string_view key, std::string* function, uint64_t* version);
std::string NextVersionKey(std::string_view function);
std::string EncodeU64(uint64_t v);
uint64_t DecodeU64(std::string_view bytes);

}  // namespace phos::store
