// fault_fn's device buffer and answer, shared with the tests that check it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

namespace phos::fault_fn {

// Byte k of the device buffer: splitmix64 of its 8-byte word, so that the store cannot compress
// the snapshot (a disk-full test sizes it against the file system) and a chunk restored at the
// wrong offset, or left zero, changes the fingerprint.
inline unsigned char Pattern(size_t k) {
  uint64_t x = (static_cast<uint64_t>(k) >> 3) + 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  x ^= x >> 31;
  return static_cast<unsigned char>(x >> ((k & 7) * 8));
}

// The answer to "sum": "bytes <n> fnv1a <hash as 16 hex digits>".
inline std::string Fingerprint(const unsigned char* data, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t k = 0; k < n; ++k) {
    h ^= data[k];
    h *= 1099511628211ull;
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return "bytes " + std::to_string(n) + " fnv1a " + hex;
}

// The answer fault_fn --mib `mib` gives to "sum".
inline std::string ExpectedFingerprint(size_t mib) {
  std::string bytes(mib << 20, '\0');
  for (size_t k = 0; k < bytes.size(); ++k) bytes[k] = static_cast<char>(Pattern(k));
  return Fingerprint(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
}

}  // namespace phos::fault_fn
