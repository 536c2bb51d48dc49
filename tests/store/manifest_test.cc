#include "phos/store/manifest.h"

#include <unistd.h>
#include <xxhash.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

namespace phos::store {
namespace {

// Every field set, none to its default, so a field the encoding drops fails the round trip.
Manifest Sample() {
  Manifest m;
  m.function = "mlp";
  m.version = 7;
  m.device_profile = "a100-pcie4";
  m.compute_capability = 80;
  m.chunk_bytes = 4u << 20;
  m.buffers.push_back({.device_address = 0x7f0000000000ull,
                       .size = 12345,
                       .alignment = 256,
                       .chunks = {{ChunkId{0x1111, 0x2222}, 12000}, {ChunkId{0x3333, 0x4444}, 345}},
                       .first_touch_rank = 2,
                       .access_class = AccessClass::kReadOnly,
                       .label = "w1",
                       .device = 1});
  m.buffers.push_back({.device_address = 0x7f0000100000ull,
                       .size = 64,
                       .alignment = 512,
                       .chunks = {{ChunkId{0x5555, 0x6666}, 64}},
                       .first_touch_rank = -1,
                       .access_class = AccessClass::kScratch,
                       .label = "scratch",
                       .device = 0});
  m.buffers.push_back({.first_touch_rank = 0, .access_class = AccessClass::kReadWrite});
  m.modules.push_back({.content_hash = ChunkId{0xabcdef, 0x123456},
                       .size = 1000,
                       .kind = "simgpu",
                       .chunks = {{ChunkId{0x7777, 0x8888}, 1000}},
                       .globals = {{.name = "coefficients", .contents = std::string("\x01\x00\x02\xff", 4)},
                                   {.name = "_ZN2ns7counterE", .contents = "12345678"}}});
  m.streams.push_back({.handle = 42, .flags = 1, .priority = -1, .device = 1});
  m.events.push_back({.handle = 43, .flags = 2, .device = 1});
  m.library_handles.push_back({.handle = 9, .library = "cublas", .stream = 42, .math_mode = 3, .device = 1});
  m.cpu_state = {.kind = "criu", .location = "/var/lib/phos/criu/mlp-7"};
  m.created_unix_ms = 1'700'000'000'123;
  m.va_base = 0x7f0000000000ull;
  m.va_bytes = 1ull << 30;
  m.next_handle = 100;
  m.gpus = 2;
  m.nccl_comms.push_back({.handle = 50, .device = 1});
  GraphNodeState memset{.type = 2, .dst = 0x7f0000001000, .dst_pitch = 64, .width = 16, .height = 1, .value = 7,
                        .element_size = 4};
  GraphNodeState kernel{.type = 0,
                        .depends = {0},
                        .kernel = "_Z7vec_addPKfS0_Pfi",
                        .params = std::string("\x00\x10\x00\x00\x00\x7f\x00\x00", 8),
                        .grid = {4, 1, 1},
                        .block = {128, 1, 1},
                        .shared_bytes = 0};
  GraphNodeState gone{.type = 5, .live = false};
  m.graphs.push_back({.handle = 60, .device = 0, .executable = false, .nodes = {memset, kernel, gone}});
  m.graphs.push_back({.handle = 64, .device = 0, .executable = true, .nodes = {memset, kernel}});
  return m;
}

// `payload` framed in a valid envelope (the checksum matches), to feed the decoder payloads no
// encoder of this build writes.
std::string Frame(std::string_view payload) {
  std::string framed = EncodeManifest(Manifest()).substr(0, kManifestHeaderBytes);
  for (int i = 0; i < 8; ++i) framed[16 + i] = static_cast<char>((payload.size() >> (8 * i)) & 0xff);
  uint64_t sum = XXH3_64bits(payload.data(), payload.size());
  for (int i = 0; i < 8; ++i) framed[24 + i] = static_cast<char>((sum >> (8 * i)) & 0xff);
  return framed + std::string(payload);
}

void Expect(const Result<Manifest>& r, StatusCode code, const std::string& text) {
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), code) << r.status().ToString();
  EXPECT_NE(r.status().message().find(text), std::string::npos) << r.status().ToString();
}

TEST(ManifestTest, RoundTrip) {
  const Manifest m = Sample();
  std::string bytes = EncodeManifest(m);
  EXPECT_EQ(bytes.substr(0, 8), "PHOSSNAP");
  auto back = DecodeManifest(bytes);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(*back == m);
  EXPECT_EQ(back->buffers[0].label, "w1");
  EXPECT_EQ(back->buffers[0].chunks[1].id, (ChunkId{0x3333, 0x4444}));
  EXPECT_EQ(back->buffers[1].first_touch_rank, -1);
  EXPECT_EQ(back->library_handles[0].library, "cublas");
  EXPECT_EQ(back->cpu_state.location, "/var/lib/phos/criu/mlp-7");
  EXPECT_EQ(back->modules[0].globals[0].contents, std::string("\x01\x00\x02\xff", 4));
  ASSERT_EQ(back->graphs.size(), 2u);
  EXPECT_EQ(back->graphs[0].nodes[1].kernel, "_Z7vec_addPKfS0_Pfi");
  EXPECT_FALSE(back->graphs[0].nodes[2].live);
  EXPECT_TRUE(back->graphs[1].executable);
  EXPECT_EQ(EncodeManifest(*back), bytes);
}

TEST(ManifestTest, RoundTripOfAnEmptyManifest) {
  auto back = DecodeManifest(EncodeManifest(Manifest()));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(*back == Manifest());
}

TEST(ManifestTest, EveryFieldTakesPartInEquality) {
  const Manifest m = Sample();
  Manifest other = m;
  other.buffers[0].chunks[1].size += 1;
  EXPECT_FALSE(other == m);
  other = m;
  other.modules[0].content_hash.high ^= 1;
  EXPECT_FALSE(other == m);
  other = m;
  other.nccl_comms[0].device = 0;
  EXPECT_FALSE(other == m);
  other = m;
  other.modules[0].globals[1].contents[3] ^= 1;
  EXPECT_FALSE(other == m);
  other = m;
  other.cpu_state.kind = "fork-template";
  EXPECT_FALSE(other == m);
  other = m;
  other.graphs[1].nodes[1].params[0] ^= 1;
  EXPECT_FALSE(other == m);
  other = m;
  other.graphs[0].nodes[2].live = true;
  EXPECT_FALSE(other == m);
}

TEST(ManifestTest, AGraphNodeDependingOnANodeOutsideItsGraphRefused) {
  Manifest m = Sample();
  m.graphs[0].nodes[1].depends = {7};
  Expect(DecodeManifest(EncodeManifest(m)), StatusCode::kCorruption, "a dependency on node 7 of 3");
  m = Sample();
  m.graphs[1].nodes[1].grid = {4, 1};
  Expect(DecodeManifest(EncodeManifest(m)), StatusCode::kCorruption, "without a 3-extent shape");
}

TEST(ManifestTest, AccessClassNames) {
  EXPECT_EQ(AccessClassName(AccessClass::kUnknown), "unknown");
  EXPECT_EQ(AccessClassName(AccessClass::kReadOnly), "read-only");
  EXPECT_EQ(AccessClassName(AccessClass::kReadWrite), "read-write");
  EXPECT_EQ(AccessClassName(AccessClass::kScratch), "scratch");
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
  Expect(DecodeManifest(Frame("\xff\xff\xff")), StatusCode::kCorruption, "does not parse");
}

// The payloads below are protobuf wire bytes written out by hand (tag = field << 3 | wire type),
// as a damaged or hostile writer could produce them.
TEST(ManifestTest, MalformedChunkIdRefused) {
  // Manifest.buffers (6) { Buffer.chunks (4) { ChunkRef.id (1) = "abc" } }
  const std::string payload(
      "\x32\x07\x22\x05\x0a\x03"
      "abc",
      9);
  Expect(DecodeManifest(Frame(payload)), StatusCode::kCorruption,
         "buffer 0 chunk 0: chunk id: expected 16 bytes, got 3");
}

TEST(ManifestTest, MalformedModuleHashRefused) {
  // Manifest.modules (7) { Module.content_hash (1) = "ab" }
  const std::string payload(
      "\x3a\x04\x0a\x02"
      "ab",
      6);
  Expect(DecodeManifest(Frame(payload)), StatusCode::kCorruption,
         "module 0 content hash: chunk id: expected 16 bytes");
}

TEST(ManifestTest, AModuleGlobalWithoutBytesRefused) {
  // Manifest.modules (7) { Module.content_hash (1) = 16 bytes, Module.globals (5) { name (1) = "g" } }
  const std::string payload = std::string("\x3a\x17\x0a\x10", 4) + std::string(16, '\x01') +
                              std::string("\x2a\x03\x0a\x01g", 5);
  Expect(DecodeManifest(Frame(payload)), StatusCode::kCorruption, "module 0: a global without a name or bytes");
}

TEST(ManifestTest, UnknownAccessClassReadsAsUnknown) {
  // Manifest.buffers (6) { Buffer.access_class (6) = 7, Buffer.first_touch_rank (5) = 3 }
  const std::string payload("\x32\x04\x30\x07\x28\x03", 6);
  auto m = DecodeManifest(Frame(payload));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ(m->buffers.size(), 1u);
  EXPECT_EQ(m->buffers[0].access_class, AccessClass::kUnknown);
  EXPECT_EQ(m->buffers[0].first_touch_rank, 3);
}

TEST(ManifestTest, FileRoundTripAndTruncatedFile) {
  auto dir = std::filesystem::temp_directory_path() / ("phos_manifest_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::string path = (dir / "m.snap").string();
  ASSERT_TRUE(WriteManifestFile(path, Sample()).ok());
  auto back = ReadManifestFile(path);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(*back == Sample());
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
