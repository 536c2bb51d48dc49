// Chunks: the unit in which snapshot bytes are stored, deduplicated, cached and read.
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <string_view>

#include "phos/base/status.h"

namespace phos::store {

// xxHash3-128 of a chunk's content.
struct ChunkId {
  uint64_t low = 0;
  uint64_t high = 0;

  // 32 lowercase hex digits, high half first (as XXH128's canonical form prints).
  std::string ToHex() const;
  static Result<ChunkId> FromHex(std::string_view hex);
  // The 16-byte form stored in manifests (ChunkRef.id): low half first, little-endian.
  std::string ToBytes() const;
  static Result<ChunkId> FromBytes(std::string_view bytes);
  // The id of `size` bytes at `data`.
  static ChunkId Of(const void* data, size_t size);

  friend bool operator==(const ChunkId& a, const ChunkId& b) { return a.low == b.low && a.high == b.high; }
  friend bool operator!=(const ChunkId& a, const ChunkId& b) { return !(a == b); }
};

struct ChunkIdHash {
  size_t operator()(const ChunkId& id) const { return static_cast<size_t>(id.low ^ (id.high * 0x9e3779b97f4a7c15ull)); }
};

struct ChunkRef {
  ChunkId id;
  uint32_t size = 0;

  friend bool operator==(const ChunkRef&, const ChunkRef&) = default;
};

// Where chunk bytes come from: the disk tier (Store), the DRAM tier in front of it, or a test
// double. Implementations are thread-safe.
class ChunkSource {
 public:
  virtual ~ChunkSource() = default;
  // Reads chunk `ref` (ref.size bytes) into `dst` and verifies it against its id. A mismatch is
  // Status::Corruption naming the chunk; callers add the snapshot and buffer.
  virtual Status ReadChunk(const ChunkRef& ref, void* dst) = 0;
};

}  // namespace phos::store
