#include "chunk_index.h"

#include <fmt/format.h>

namespace phos::store {

namespace {

void Put(uint64_t v, int bytes, std::string* out) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t Get(std::string_view in, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(in[at + i])) << (8 * i);
  return v;
}

constexpr size_t kLocationBytes = 32;

}  // namespace

std::string ChunkLocation::Encode() const {
  std::string out;
  Put(segment, 8, &out);
  Put(offset, 8, &out);
  Put(stored_size, 4, &out);
  Put(raw_size, 4, &out);
  Put(flags, 4, &out);
  Put(refcount, 4, &out);
  return out;
}

Result<ChunkLocation> ChunkLocation::Decode(std::string_view bytes) {
  if (bytes.size() != kLocationBytes) {
    return Status::Corruption(fmt::format("chunk index entry of {} bytes, expected {}", bytes.size(), kLocationBytes));
  }
  ChunkLocation l;
  l.segment = Get(bytes, 0, 8);
  l.offset = Get(bytes, 8, 8);
  l.stored_size = static_cast<uint32_t>(Get(bytes, 16, 4));
  l.raw_size = static_cast<uint32_t>(Get(bytes, 20, 4));
  l.flags = static_cast<uint32_t>(Get(bytes, 24, 4));
  l.refcount = static_cast<uint32_t>(Get(bytes, 28, 4));
  return l;
}

std::string ChunkKey(const ChunkId& id) { return "c" + id.ToBytes(); }

Result<ChunkId> ChunkIdFromKey(std::string_view key) {
  if (key.empty() || key[0] != 'c') return Status::Corruption("not a chunk key");
  return ChunkId::FromBytes(key.substr(1));
}

std::string ManifestPrefix(std::string_view function) {
  std::string key = "m";
  key.append(function);
  key.push_back('\0');
  return key;
}

std::string ManifestKey(std::string_view function, uint64_t version) {
  std::string key = ManifestPrefix(function);
  for (int i = 7; i >= 0; --i) key.push_back(static_cast<char>((version >> (8 * i)) & 0xff));
  return key;
}

bool ParseManifestKey(std::string_view key, std::string* function, uint64_t* version) {
  if (key.size() < 10 || key[0] != 'm' || key[key.size() - 9] != '\0') return false;
  *function = std::string(key.substr(1, key.size() - 10));
  uint64_t v = 0;
  for (size_t i = key.size() - 8; i < key.size(); ++i) v = (v << 8) | static_cast<unsigned char>(key[i]);
  *version = v;
  return true;
}

std::string NextVersionKey(std::string_view function) {
  std::string key = "n";
  key.append(function);
  return key;
}

std::string EncodeU64(uint64_t v) {
  std::string out;
  Put(v, 8, &out);
  return out;
}

uint64_t DecodeU64(std::string_view bytes) { return bytes.size() == 8 ? Get(bytes, 0, 8) : 0; }

}  // namespace phos::store
