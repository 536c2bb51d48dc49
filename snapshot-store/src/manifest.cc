// The manifest envelope (see manifest.h for the layout).
#include "phos/store/manifest.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace phos::store {

namespace {

void PutLe(uint64_t v, int bytes, char* out) {
  for (int i = 0; i < bytes; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

uint64_t GetLe(const char* in, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(in[i])) << (8 * i);
  return v;
}

// Printable form of bytes that should have been the magic.
std::string Escaped(std::string_view bytes) {
  std::string out;
  for (char c : bytes) {
    auto u = static_cast<unsigned char>(c);
    out += (u >= 0x20 && u < 0x7f) ? std::string(1, c) : fmt::format("\\x{:02x}", u);
  }
  return out;
}

}  // namespace

std::string EncodeManifest(const proto::Manifest& manifest) {
  std::string payload;
  manifest.SerializeToString(&payload);
  std::string out(kManifestHeaderBytes, '\0');
  std::memcpy(out.data(), kManifestMagic, sizeof kManifestMagic);
  PutLe(kManifestFormatVersion, 4, out.data() + 8);
  PutLe(0, 4, out.data() + 12);
  PutLe(payload.size(), 8, out.data() + 16);
  PutLe(XXH3_64bits(payload.data(), payload.size()), 8, out.data() + 24);
  out += payload;
  return out;
}

Result<proto::Manifest> DecodeManifest(std::string_view bytes, uint64_t max_payload) {
  if (bytes.size() < kManifestHeaderBytes) {
    return Status::Corruption(
        fmt::format("manifest truncated: {} bytes, the header alone is {}", bytes.size(), kManifestHeaderBytes));
  }
  std::string_view magic = bytes.substr(0, sizeof kManifestMagic);
  if (magic != std::string_view(kManifestMagic, sizeof kManifestMagic)) {
    return Status::Corruption(fmt::format("manifest has bad magic: expected 'PHOSSNAP', found '{}'", Escaped(magic)));
  }
  uint64_t version = GetLe(bytes.data() + 8, 4);
  if (version == 0 || version > kManifestFormatVersion) {
    return Status::NotSupported(
        fmt::format("manifest format version {} is {} (this build reads version {})", version,
                    version == 0 ? "not a valid version" : "newer than this build", kManifestFormatVersion));
  }
  uint64_t flags = GetLe(bytes.data() + 12, 4);
  if (flags != 0) {
    return Status::NotSupported(
        fmt::format("manifest has flags {:#x} this build does not know (written by a newer version?)", flags));
  }
  uint64_t length = GetLe(bytes.data() + 16, 8);
  if (length > max_payload) {
    return Status::Corruption(
        fmt::format("manifest payload of {} bytes exceeds the cap of {} bytes", length, max_payload));
  }
  uint64_t available = bytes.size() - kManifestHeaderBytes;
  if (available < length) {
    return Status::Corruption(
        fmt::format("manifest truncated: header promises {} payload bytes, only {} present", length, available));
  }
  if (available > length) {
    return Status::Corruption(
        fmt::format("manifest has {} trailing bytes after its {}-byte payload", available - length, length));
  }
  std::string_view payload = bytes.substr(kManifestHeaderBytes);
  uint64_t want = GetLe(bytes.data() + 24, 8);
  uint64_t got = XXH3_64bits(payload.data(), payload.size());
  if (want != got) {
    return Status::Corruption(
        fmt::format("manifest checksum mismatch: header says {:016x}, payload hashes to {:016x}", want, got));
  }
  proto::Manifest manifest;
  if (!manifest.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
    return Status::Corruption("manifest payload passes its checksum but does not parse as a phos.store.Manifest");
  }
  return manifest;
}

Status WriteManifestFile(const std::string& path, const proto::Manifest& manifest) {
  std::string bytes = EncodeManifest(manifest);
  std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::FromErrno(errno, "create " + tmp);
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = errno;
      ::close(fd);
      return Status::FromErrno(err, "write " + tmp);
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    int err = errno;
    ::close(fd);
    return Status::FromErrno(err, "fsync " + tmp);
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) return Status::FromErrno(errno, "rename " + tmp + " to " + path);
  return Status::Ok();
}

Result<proto::Manifest> ReadManifestFile(const std::string& path, uint64_t max_payload) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno(errno, "open " + path);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return Status::FromErrno(err, "stat " + path);
  }
  // Refuse before reading what could never pass the cap.
  if (static_cast<uint64_t>(st.st_size) > max_payload + kManifestHeaderBytes) {
    ::close(fd);
    return Status::Corruption(fmt::format("{}: {} bytes exceeds the manifest cap of {} bytes", path, st.st_size,
                                          max_payload + kManifestHeaderBytes));
  }
  std::string bytes(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      return Status::FromErrno(err, "read " + path);
    }
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  bytes.resize(done);
  auto manifest = DecodeManifest(bytes, max_payload);
  if (!manifest.ok()) return manifest.status().WithContext(path);
  return manifest;
}

}  // namespace phos::store
