// One flipped byte in a segment file fails the read of exactly that chunk, naming it.
#include <fcntl.h>
#include <unistd.h>

#include <cstring>

#include <gtest/gtest.h>

#include "phos/store/aligned_buffer.h"
#include "phos/store/store.h"
#include "store_test_util.h"

namespace phos::store {
namespace {

using testing::Bytes;
using testing::TempDir;

constexpr uint32_t kChunk = 16 << 10;

void FlipByte(const std::string& path, off_t offset) {
  int fd = ::open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0) << path;
  char c = 0;
  ASSERT_EQ(::pread(fd, &c, 1, offset), 1);
  c ^= 0x40;
  ASSERT_EQ(::pwrite(fd, &c, 1, offset), 1);
  ::close(fd);
}

TEST(CorruptionTest, FlippedByteFailsThatChunkOnlyAndNamesIt) {
  TempDir dir;
  StoreOptions options;
  options.path = dir.path();
  options.chunk_bytes = kChunk;
  auto store = Store::Open(options).value();
  auto a = Bytes(3 * kChunk, 1);
  auto b = Bytes(2 * kChunk, 2);
  for (auto [name, data] : {std::pair{"a", &a}, std::pair{"b", &b}}) {
    auto w = store->NewWriter(name).value();
    Buffer meta;
    meta.size = data->size();
    meta.device_address = 0x7000;
    meta.label = "weights";
    ASSERT_TRUE(w->AddBuffer(meta, data->data()).ok());
    ASSERT_TRUE(store->Commit(std::move(w)).ok());
  }
  // a's chunks are segment 1 at offsets 0, kChunk, 2*kChunk: corrupt the second.
  FlipByte(dir.path() + "/segments/00000001.seg", kChunk + 123);
  ChunkId bad = ChunkId::Of(a.data() + kChunk, kChunk);

  auto manifest = store->LoadManifest("a", 1);
  ASSERT_TRUE(manifest.ok());
  auto dst = AlignedBuffer::Allocate(a.size()).value();
  Status s = store->ReadBuffer(*manifest, 0, dst.data());
  ASSERT_EQ(s.code(), StatusCode::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find("snapshot 'a' v1: buffer 0 (0x7000 weights)"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("chunk " + bad.ToHex()), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("checksum mismatch"), std::string::npos) << s.message();

  // The chunk itself, through the ChunkSource interface.
  Status direct = store->ReadChunk({bad, kChunk}, dst.data());
  EXPECT_EQ(direct.code(), StatusCode::kCorruption);
  EXPECT_NE(direct.message().find(bad.ToHex()), std::string::npos);
  // Its neighbours are fine.
  ASSERT_TRUE(store->ReadChunk({ChunkId::Of(a.data(), kChunk), kChunk}, dst.data()).ok());

  Status verify = store->VerifySnapshot("a", 1);
  EXPECT_EQ(verify.code(), StatusCode::kCorruption);
  EXPECT_NE(verify.message().find(bad.ToHex()), std::string::npos);
  // Other snapshots stay readable.
  EXPECT_TRUE(store->VerifySnapshot("b", 1).ok());
  auto mb = store->LoadManifest("b", 1);
  ASSERT_TRUE(store->ReadBuffer(*mb, 0, dst.data()).ok());
  EXPECT_EQ(std::memcmp(dst.data(), b.data(), b.size()), 0);
  // Compaction refuses to carry the corrupt chunk into a new segment: a's segment is mostly
  // dead once its other chunks' snapshot is gone, so it is a victim.
  ASSERT_TRUE(store->DeleteVersion("b", 1).ok());
  auto w = store->NewWriter("c").value();
  Buffer meta;
  meta.size = kChunk;
  ASSERT_TRUE(w->AddBuffer(meta, a.data() + kChunk).ok());
  ASSERT_TRUE(store->Commit(std::move(w)).ok());
  ASSERT_TRUE(store->DeleteVersion("a", 1).ok());
  ASSERT_TRUE(store->CollectGarbage().ok());
  auto compact = store->CompactSegments();
  ASSERT_FALSE(compact.ok());
  EXPECT_NE(compact.status().message().find(bad.ToHex()), std::string::npos) << compact.status().ToString();
}

TEST(CorruptionTest, TruncatedSegmentFailsWithTheChunkNamed) {
  TempDir dir;
  StoreOptions options;
  options.path = dir.path();
  options.chunk_bytes = kChunk;
  auto store = Store::Open(options).value();
  auto a = Bytes(2 * kChunk, 3);
  auto w = store->NewWriter("a").value();
  Buffer meta;
  meta.size = a.size();
  ASSERT_TRUE(w->AddBuffer(meta, a.data()).ok());
  ASSERT_TRUE(store->Commit(std::move(w)).ok());
  ASSERT_EQ(::truncate((dir.path() + "/segments/00000001.seg").c_str(), kChunk + 10), 0);
  Status s = store->VerifySnapshot("a", 1);
  EXPECT_EQ(s.code(), StatusCode::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find(ChunkId::Of(a.data() + kChunk, kChunk).ToHex()), std::string::npos) << s.message();
  Status consistency = store->CheckConsistency();
  EXPECT_EQ(consistency.code(), StatusCode::kCorruption);
  EXPECT_NE(consistency.message().find("extends past the end of segment 1"), std::string::npos);
}

}  // namespace
}  // namespace phos::store
