#include "phos/store/manifest.h"

#include <unistd.h>
#include <xxhash.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

namespace phos::store {
namespace {

proto::Manifest Sample() {
  proto::Manifest m;
  m.set_function("mlp");
  m.set_version(7);
  m.set_device_profile("a100-pcie4");
  m.set_compute_capability(80);
  m.set_chunk_bytes(4u << 20);
  auto* b = m.add_buffers();
  b->set_device_address(0x7f0000000000ull);
  b->set_size(12345);
  b->set_alignment(256);
  b->set_first_touch_rank(0);
  b->set_access_class(proto::ACCESS_READ_ONLY);
  b->set_label("w1");
  auto* c = b->add_chunks();
  c->set_id(std::string(16, '\x11'));
  c->set_size(12345);
  m.add_streams()->set_handle(42);
  auto* lib = m.add_library_handles();
  lib->set_library("cublas");
  lib->set_handle(9);
  m.mutable_cpu_state()->set_kind("fork-template");
  return m;
}

void Expect(const Result<proto::Manifest>& r, StatusCode code, const std::string& text) {
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), code) << r.status().ToString();
  EXPECT_NE(r.status().message().find(text), std::string::npos) << r.status().ToString();
}

TEST(ManifestTest, RoundTrip) {
  proto::Manifest m = Sample();
  std::string bytes = EncodeManifest(m);
  EXPECT_EQ(bytes.substr(0, 8), "PHOSSNAP");
  auto back = DecodeManifest(bytes);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->SerializeAsString(), m.SerializeAsString());
  EXPECT_EQ(back->buffers(0).label(), "w1");
  EXPECT_EQ(back->library_handles(0).library(), "cublas");
}

TEST(ManifestTest, BadMagicRefused) {
  std::string bytes = EncodeManifest(Sample());
  bytes[0] = 'X';
  bytes[7] = '\x01';
  Expect(DecodeManifest(bytes), StatusCode::kCorruption, "bad magic: expected 'PHOSSNAP', found 'XHOSSNA\\x01'");
}

TEST(ManifestTest, NewerVersionRefused) {
  std::string bytes = EncodeManifest(Sample());
  bytes[8] = static_cast<char>(kManifestFormatVersion + 1);
  Expect(DecodeManifest(bytes), StatusCode::kNotSupported, "format version 2 is newer than this build");
  bytes[8] = 0;
  Expect(DecodeManifest(bytes), StatusCode::kNotSupported, "format version 0 is not a valid version");
}

TEST(ManifestTest, UnknownFlagsRefused) {
  std::string bytes = EncodeManifest(Sample());
  bytes[12] = 4;
  Expect(DecodeManifest(bytes), StatusCode::kNotSupported, "flags 0x4");
}

TEST(ManifestTest, BadChecksumRefused) {
  std::string bytes = EncodeManifest(Sample());
  bytes[bytes.size() - 3] ^= 0x20;
  Expect(DecodeManifest(bytes), StatusCode::kCorruption, "checksum mismatch: header says");
}

TEST(ManifestTest, TruncationRefused) {
  std::string bytes = EncodeManifest(Sample());
  Expect(DecodeManifest(bytes.substr(0, 10)), StatusCode::kCorruption, "truncated: 10 bytes, the header alone is 32");
  Expect(DecodeManifest(bytes.substr(0, bytes.size() - 5)), StatusCode::kCorruption,
         "truncated: header promises");
  Expect(DecodeManifest(bytes + "zz"), StatusCode::kCorruption, "2 trailing bytes");
}

TEST(ManifestTest, OversizePayloadRefused) {
  std::string bytes = EncodeManifest(Sample());
  Expect(DecodeManifest(bytes, 16), StatusCode::kCorruption, "exceeds the cap of 16 bytes");
  // A corrupt length far beyond the cap is refused before anything is read for it.
  bytes[23] = 0x7f;
  Expect(DecodeManifest(bytes), StatusCode::kCorruption, "exceeds the cap");
}

TEST(ManifestTest, GarbagePayloadWithValidChecksumRefused) {
  std::string garbage = "\xff\xff\xff";
  std::string forged = EncodeManifest(proto::Manifest()).substr(0, kManifestHeaderBytes);
  forged[16] = static_cast<char>(garbage.size());
  uint64_t sum = XXH3_64bits(garbage.data(), garbage.size());
  for (int i = 0; i < 8; ++i) forged[24 + i] = static_cast<char>((sum >> (8 * i)) & 0xff);
  Expect(DecodeManifest(forged + garbage), StatusCode::kCorruption, "does not parse");
}

TEST(ManifestTest, FileRoundTripAndTruncatedFile) {
  auto dir = std::filesystem::temp_directory_path() / ("phos_manifest_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::string path = (dir / "m.snap").string();
  ASSERT_TRUE(WriteManifestFile(path, Sample()).ok());
  auto back = ReadManifestFile(path);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->function(), "mlp");
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 1);
  auto truncated = ReadManifestFile(path);
  Expect(truncated, StatusCode::kCorruption, "truncated");
  EXPECT_NE(truncated.status().message().find(path), std::string::npos);
  auto missing = ReadManifestFile((dir / "absent").string());
  EXPECT_EQ(missing.status().code(), StatusCode::kIoError);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace phos::store
