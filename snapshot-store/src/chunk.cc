// ChunkId: xxHash3-128 of a chunk's bytes, in hex (for people) and 16 bytes (for manifests).
#include "phos/store/chunk.h"

#include <xxhash.h>

#include <fmt/format.h>

namespace phos::store {

namespace {

constexpr size_t kIdBytes = 16;

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

void PutLe64(uint64_t v, char* out) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

uint64_t GetLe64(const char* in) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(in[i])) << (8 * i);
  return v;
}

}  // namespace

std::string ChunkId::ToHex() const { return fmt::format("{:016x}{:016x}", high, low); }

Result<ChunkId> ChunkId::FromHex(std::string_view hex) {
  if (hex.size() != 2 * kIdBytes) {
    return Status::InvalidArgument(fmt::format("chunk id '{}': expected 32 hex digits, got {}", hex, hex.size()));
  }
  ChunkId id;
  for (size_t i = 0; i < hex.size(); ++i) {
    int d = HexDigit(hex[i]);
    if (d < 0) return Status::InvalidArgument(fmt::format("chunk id '{}': '{}' is not a hex digit", hex, hex[i]));
    uint64_t& half = i < kIdBytes ? id.high : id.low;
    half = (half << 4) | static_cast<uint64_t>(d);
  }
  return id;
}

std::string ChunkId::ToBytes() const {
  std::string out(kIdBytes, '\0');
  PutLe64(low, out.data());
  PutLe64(high, out.data() + 8);
  return out;
}

Result<ChunkId> ChunkId::FromBytes(std::string_view bytes) {
  if (bytes.size() != kIdBytes) {
    return Status::InvalidArgument(fmt::format("chunk id: expected {} bytes, got {}", kIdBytes, bytes.size()));
  }
  return ChunkId{GetLe64(bytes.data()), GetLe64(bytes.data() + 8)};
}

ChunkId ChunkId::Of(const void* data, size_t size) {
  XXH128_hash_t h = XXH3_128bits(data, size);
  return ChunkId{h.low64, h.high64};
}

}  // namespace phos::store
