// The manifest envelope: how a proto::Manifest is framed on disk and in RocksDB.
//
//   offset  size  field
//        0     8  magic "PHOSSNAP"
//        8     4  format version (little-endian; kManifestFormatVersion), apart from the
//                 product version: it changes only when the framing or the meaning of the
//                 payload changes incompatibly
//       12     4  flags (none defined; a set bit means a newer writer and is refused)
//       16     8  payload length
//       24     8  XXH3-64 of the payload
//       32     …  payload: the serialized proto::Manifest
//
// Decoding refuses a bad magic, an unknown or newer format version, unknown flags, a payload
// longer than the cap, truncation, trailing bytes and a checksum mismatch, each with a message
// saying which and what was found (Firecracker's snapshot format does the same).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "phos/base/status.h"
#include "proto/manifest.pb.h"

namespace phos::store {

inline constexpr char kManifestMagic[8] = {'P', 'H', 'O', 'S', 'S', 'N', 'A', 'P'};
inline constexpr uint32_t kManifestFormatVersion = 1;
inline constexpr size_t kManifestHeaderBytes = 32;
// A manifest lists buffers and chunk ids, not bytes: 64 MiB is ~2 M chunk refs, far beyond any
// device's memory at the default chunk size, and small enough that a corrupt length cannot make
// a load allocate without bound.
inline constexpr uint64_t kDefaultManifestCap = 64ull << 20;

// The envelope around `manifest`.
std::string EncodeManifest(const proto::Manifest& manifest);
// The manifest inside `bytes`, or Corruption / NotSupported saying what is wrong.
Result<proto::Manifest> DecodeManifest(std::string_view bytes, uint64_t max_payload = kDefaultManifestCap);

// Writes the envelope to `path` atomically (temporary file, fsync, rename).
Status WriteManifestFile(const std::string& path, const proto::Manifest& manifest);
// Reads and decodes `path`; errors name the file.
Result<proto::Manifest> ReadManifestFile(const std::string& path, uint64_t max_payload = kDefaultManifestCap);

}  // namespace phos::store
