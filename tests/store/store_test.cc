#include "phos/store/store.h"

#include <cstring>

#include <gtest/gtest.h>

#include "phos/store/aligned_buffer.h"
#include "store_test_util.h"

namespace phos::store {
namespace {

using testing::AddBuffers;
using testing::Bytes;
using testing::TempDir;

constexpr uint32_t kChunk = 64 << 10;

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override { Reopen(); }
  void Reopen(StoreOptions options = {}) {
    store_.reset();
    options.path = dir_.path();
    options.chunk_bytes = kChunk;
    options_ = options;
    auto s = Store::Open(options);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(*s);
  }
  // Commits one buffer per entry of `buffers` and returns the version.
  uint64_t Commit(const std::string& function, const std::vector<std::vector<char>>& buffers) {
    auto w = store_->NewWriter(function);
    EXPECT_TRUE(w.ok()) << w.status().ToString();
    AddBuffers(**w, buffers);
    auto v = store_->Commit(std::move(*w));
    EXPECT_TRUE(v.ok()) << v.status().ToString();
    return v.ok() ? *v : 0;
  }
  void ExpectBuffer(const std::string& function, uint64_t version, int index, const std::vector<char>& want) {
    auto m = store_->LoadManifest(function, version);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    auto dst = AlignedBuffer::Allocate(want.size());
    ASSERT_TRUE(dst.ok());
    Status s = store_->ReadBuffer(*m, index, dst->data());
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(std::memcmp(dst->data(), want.data(), want.size()), 0);
  }

  TempDir dir_;
  StoreOptions options_;
  std::unique_ptr<Store> store_;
};

TEST_F(StoreTest, CommitListLoadRead) {
  auto a = Bytes(3 * kChunk + 100, 1);  // a partial last chunk
  auto b = Bytes(10, 2);
  EXPECT_EQ(Commit("mlp", {a, b}), 1u);
  EXPECT_EQ(Commit("mlp", {b}), 2u);
  EXPECT_EQ(*store_->ListFunctions(), std::vector<std::string>{"mlp"});
  EXPECT_EQ(*store_->ListVersions("mlp"), (std::vector<uint64_t>{1, 2}));
  auto m = store_->LoadManifest("mlp", 1);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->buffers.size(), 2u);
  EXPECT_EQ(m->buffers[0].chunks.size(), 4u);
  EXPECT_EQ(m->chunk_bytes, kChunk);
  ExpectBuffer("mlp", 1, 0, a);
  ExpectBuffer("mlp", 1, 1, b);
  // Reopened, everything is still there.
  Reopen();
  ExpectBuffer("mlp", 2, 0, b);
  EXPECT_TRUE(store_->VerifySnapshot("mlp", 1).ok());
  EXPECT_TRUE(store_->CheckConsistency().ok());
}

TEST_F(StoreTest, UnalignedDestinationReadsBuffered) {
  auto a = Bytes(kChunk + 5, 3);
  Commit("f", {a});
  auto m = store_->LoadManifest("f", 1);
  std::vector<char> dst(a.size() + 1);
  ASSERT_TRUE(store_->ReadBuffer(*m, 0, dst.data() + 1).ok());
  EXPECT_EQ(std::memcmp(dst.data() + 1, a.data(), a.size()), 0);
}

TEST_F(StoreTest, StreamedBufferAndModule) {
  auto a = Bytes(2 * kChunk + 7, 4);
  auto w = store_->NewWriter("fn");
  ASSERT_TRUE(w.ok());
  Buffer meta;
  meta.size = a.size();
  std::vector<std::pair<uint64_t, size_t>> calls;
  auto index = (*w)->AddBuffer(meta, [&](uint64_t offset, void* dst, size_t size) {
    calls.emplace_back(offset, size);
    std::memcpy(dst, a.data() + offset, size);
    return Status::Ok();
  });
  ASSERT_TRUE(index.ok());
  EXPECT_EQ(calls.size(), 3u);
  EXPECT_EQ(calls[2], (std::pair<uint64_t, size_t>{2 * kChunk, 7}));
  auto image = Bytes(1000, 5);
  Module mod;
  mod.kind = "simgpu";
  ASSERT_TRUE((*w)->AddModule(mod, image.data(), image.size()).ok());
  (*w)->manifest().device_profile = "a100-pcie4";
  ASSERT_TRUE(store_->Commit(std::move(*w)).ok());
  auto m = store_->LoadManifest("fn", 1);
  EXPECT_EQ(m->device_profile, "a100-pcie4");
  EXPECT_EQ(m->modules[0].size, 1000u);
  EXPECT_TRUE(store_->VerifySnapshot("fn", 1).ok());
  ExpectBuffer("fn", 1, 0, a);
}

TEST_F(StoreTest, FailingReadFnFailsAddBufferWithContext) {
  auto w = store_->NewWriter("fn");
  Buffer meta;
  meta.size = 2 * kChunk;
  meta.device_address = 0x2000;
  auto r = (*w)->AddBuffer(meta, [](uint64_t offset, void*, size_t) {
    return offset > 0 ? Status::DeviceError("copy failed") : Status::Ok();
  });
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("buffer 0 (0x2000) at offset 65536: copy failed"), std::string::npos)
      << r.status().ToString();
}

TEST_F(StoreTest, BadInputRefused) {
  EXPECT_EQ(store_->NewWriter("").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->NewWriter("a/b").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->LoadManifest("nope", 1).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->DeleteVersion("nope", 1).code(), StatusCode::kNotFound);
  StoreOptions empty;
  EXPECT_EQ(Store::Open(empty).status().code(), StatusCode::kInvalidArgument);
  StoreOptions tiny;
  tiny.path = dir_.path() + "/x";
  tiny.chunk_bytes = 100;
  EXPECT_NE(Store::Open(tiny).status().message().find("chunk_bytes 100"), std::string::npos);
  auto w = store_->NewWriter("fn");
  Buffer with_chunks;
  with_chunks.chunks.emplace_back();
  EXPECT_EQ((*w)->AddBuffer(with_chunks, "x").status().code(), StatusCode::kInvalidArgument);
  auto m = Manifest();
  EXPECT_EQ(store_->ReadBuffer(m, 0, nullptr).code(), StatusCode::kInvalidArgument);
}

TEST_F(StoreTest, DedupStoresSharedChunksOnce) {
  auto base = Bytes(8 * kChunk, 10);
  auto variant = base;
  variant[kChunk * 7 + 3] ^= 1;  // differs in one chunk
  Commit("a", {base});
  auto one = store_->Stats();
  Commit("b", {variant});
  auto two = store_->Stats();
  ASSERT_TRUE(one.ok() && two.ok());
  EXPECT_EQ(one->live_chunks, 8u);
  EXPECT_EQ(two->live_chunks, 9u);
  EXPECT_EQ(two->unique_bytes, 9ull * kChunk);
  EXPECT_EQ(two->logical_bytes, 16ull * kChunk);
  EXPECT_EQ(two->segment_bytes - one->segment_bytes, kChunk);
  EXPECT_NEAR(two->dedup_ratio, 16.0 / 9.0, 1e-9);
  // Within one snapshot, too: a buffer of repeated content stores one chunk.
  std::vector<char> zeros(4 * kChunk, 0);
  Commit("z", {zeros});
  EXPECT_EQ(store_->Stats()->live_chunks, 10u);
  ExpectBuffer("z", 1, 0, zeros);
}

TEST_F(StoreTest, DeleteAndGcFreeExactlyUnsharedChunks) {
  auto shared = Bytes(2 * kChunk, 20);
  auto only_a = Bytes(3 * kChunk, 21);
  Commit("a", {shared, only_a});
  Commit("b", {shared});
  ASSERT_TRUE(store_->DeleteVersion("a", 1).ok());
  EXPECT_EQ(store_->LoadManifest("a", 1).status().code(), StatusCode::kNotFound);
  auto gc = store_->CollectGarbage();
  ASSERT_TRUE(gc.ok()) << gc.status().ToString();
  EXPECT_EQ(gc->chunks_freed, 3u);
  // a's segment still holds the shared chunks: it stays until compaction.
  EXPECT_EQ(gc->segments_deleted, 0u);
  ExpectBuffer("b", 1, 0, shared);
  EXPECT_TRUE(store_->CheckConsistency().ok());
  auto compact = store_->CompactSegments();
  ASSERT_TRUE(compact.ok()) << compact.status().ToString();
  EXPECT_EQ(compact->segments_rewritten, 1u);
  EXPECT_EQ(compact->chunks_moved, 2u);
  EXPECT_EQ(store_->Stats()->segment_bytes, 2ull * kChunk);
  ExpectBuffer("b", 1, 0, shared);
  ASSERT_TRUE(store_->DeleteVersion("b", 1).ok());
  gc = store_->CollectGarbage();
  EXPECT_EQ(gc->chunks_freed, 2u);
  EXPECT_EQ(gc->segments_deleted, 1u);
  EXPECT_EQ(store_->Stats()->segment_bytes, 0u);
  // Versions are never reused.
  EXPECT_EQ(Commit("b", {shared}), 2u);
}

TEST_F(StoreTest, GcReclaimsOrphanedSegmentBytes) {
  Commit("a", {Bytes(kChunk, 30)});
  {
    // An abandoned writer: its bytes never become visible.
    auto w = store_->NewWriter("a");
    Buffer meta;
    auto data = Bytes(2 * kChunk, 31);
    meta.size = data.size();
    ASSERT_TRUE((*w)->AddBuffer(meta, data.data()).ok());
    EXPECT_EQ(store_->Stats()->segment_files, 2u);
  }
  // And a segment left by a writer that crashed before committing.
  std::filesystem::copy_file(dir_.path() + "/segments/00000001.seg", dir_.path() + "/segments/00000099.seg");
  auto gc = store_->CollectGarbage();
  ASSERT_TRUE(gc.ok());
  EXPECT_EQ(gc->segments_deleted, 1u);
  EXPECT_EQ(gc->bytes_reclaimed, kChunk);
  EXPECT_EQ(*store_->ListVersions("a"), std::vector<uint64_t>{1});
  EXPECT_TRUE(store_->VerifySnapshot("a", 1).ok());
}

TEST_F(StoreTest, GcKeepsChunksAWriterDedupedAgainst) {
  auto data = Bytes(kChunk, 40);
  Commit("a", {data});
  auto w = store_->NewWriter("b");
  Buffer meta;
  meta.size = data.size();
  ASSERT_TRUE((*w)->AddBuffer(meta, data.data()).ok());  // dedups against a's chunk
  ASSERT_TRUE(store_->DeleteVersion("a", 1).ok());
  ASSERT_TRUE(store_->CollectGarbage().ok());
  ASSERT_TRUE(store_->Commit(std::move(*w)).ok());
  ExpectBuffer("b", 1, 0, data);
  EXPECT_TRUE(store_->CheckConsistency().ok());
}

TEST_F(StoreTest, TakenBuffersKeepTheirChunksAndReplacedOnesAreNotIndexed) {
  // A soft recopy: two buffers streamed in and synced, one written meanwhile and added again, one kept.
  auto kept = Bytes(2 * kChunk, 60);
  auto stale = Bytes(kChunk, 61);
  auto fresh = Bytes(kChunk, 62);
  auto w = store_->NewWriter("fn");
  ASSERT_TRUE(w.ok());
  Buffer meta;
  meta.device_address = 0x1000;
  meta.size = kept.size();
  ASSERT_TRUE((*w)->AddBuffer(meta, kept.data()).ok());
  meta.device_address = 0x9000;
  meta.size = stale.size();
  ASSERT_TRUE((*w)->AddBuffer(meta, stale.data()).ok());
  ASSERT_TRUE((*w)->Sync().ok());  // the first pass made durable before the final stop
  std::vector<Buffer> taken = (*w)->TakeBuffers();
  ASSERT_EQ(taken.size(), 2u);
  EXPECT_TRUE((*w)->manifest().buffers.empty());
  // A buffer listing a chunk this writer never saw is refused; so is one whose chunks do not add up.
  Buffer forged = taken[0];
  forged.chunks[0].id = ChunkId::Of("elsewhere", 9);
  EXPECT_EQ((*w)->AddStoredBuffer(forged).status().code(), StatusCode::kInvalidArgument);
  Buffer short_one = taken[0];
  short_one.chunks.pop_back();
  EXPECT_EQ((*w)->AddStoredBuffer(short_one).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(*(*w)->AddStoredBuffer(taken[0]), 0);
  EXPECT_EQ(*(*w)->AddBuffer(meta, fresh.data()), 1);
  ASSERT_TRUE(store_->Commit(std::move(*w)).ok());
  ExpectBuffer("fn", 1, 0, kept);
  ExpectBuffer("fn", 1, 1, fresh);
  // The stale copy's chunk was written but nothing references it: not indexed.
  EXPECT_EQ(store_->Stats()->live_chunks, 3u);
  EXPECT_EQ(store_->Stats()->chunks, 3u);
  EXPECT_TRUE(store_->CheckConsistency().ok());
}

TEST_F(StoreTest, RetentionKeepsLastN) {
  StoreOptions options;
  options.keep_versions = 2;
  Reopen(options);
  for (int i = 0; i < 4; ++i) Commit("fn", {Bytes(kChunk, 50 + i)});
  EXPECT_EQ(*store_->ListVersions("fn"), (std::vector<uint64_t>{3, 4}));
  ASSERT_TRUE(store_->CollectGarbage().ok());
  EXPECT_EQ(store_->Stats()->live_chunks, 2u);
  EXPECT_EQ(store_->Stats()->segment_files, 2u);
  ExpectBuffer("fn", 3, 0, Bytes(kChunk, 52));
  EXPECT_TRUE(store_->CheckConsistency().ok());
}

TEST_F(StoreTest, CompactionKeepsEverySnapshotReadable) {
  // Each f<i> writes its own segment: 3 chunks of its own and one that g shares; deleting the
  // even ones leaves their segments a quarter live.
  std::vector<std::vector<char>> data, extra;
  for (int i = 0; i < 6; ++i) data.push_back(Bytes(3 * kChunk, 60 + i));
  for (int i = 0; i < 6; ++i) extra.push_back(Bytes(kChunk, 160 + i));
  for (int i = 0; i < 6; ++i) Commit("f" + std::to_string(i), {data[i], extra[i]});
  Commit("g", extra);
  for (int i = 0; i < 6; i += 2) ASSERT_TRUE(store_->DeleteVersion("f" + std::to_string(i), 1).ok());
  ASSERT_TRUE(store_->CollectGarbage().ok());
  auto before = store_->Stats();
  auto compact = store_->CompactSegments();
  ASSERT_TRUE(compact.ok()) << compact.status().ToString();
  EXPECT_EQ(compact->segments_rewritten, 3u);
  EXPECT_EQ(compact->chunks_moved, 3u);
  auto after = store_->Stats();
  EXPECT_LT(after->segment_bytes, before->segment_bytes);
  EXPECT_EQ(after->segment_bytes, after->stored_bytes);
  for (int i = 1; i < 6; i += 2) {
    ExpectBuffer("f" + std::to_string(i), 1, 0, data[i]);
    ExpectBuffer("f" + std::to_string(i), 1, 1, extra[i]);
  }
  for (int i = 0; i < 6; ++i) ExpectBuffer("g", 1, i, extra[i]);
  Reopen();
  EXPECT_TRUE(store_->CheckConsistency().ok());
  EXPECT_TRUE(store_->VerifySnapshot("f5", 1).ok());
}

TEST_F(StoreTest, CompressionRoundTripsAndSavesOnCompressibleData) {
  StoreOptions options;
  options.compress = true;
  Reopen(options);
  std::vector<char> text(4 * kChunk);
  for (size_t i = 0; i < text.size(); ++i) text[i] = "weights "[i % 8] + static_cast<char>(i / 8192 % 3);
  auto random = Bytes(kChunk, 70);  // incompressible: stored raw
  Commit("c", {text, random});
  auto stats = store_->Stats();
  EXPECT_LT(stats->stored_bytes, text.size() / 4 + random.size());
  EXPECT_GE(stats->stored_bytes, random.size());
  ExpectBuffer("c", 1, 0, text);
  ExpectBuffer("c", 1, 1, random);
  EXPECT_TRUE(store_->VerifySnapshot("c", 1).ok());
}

TEST_F(StoreTest, ReadOnlyStoreRefusesMutation) {
  Commit("a", {Bytes(100, 80)});
  store_.reset();
  StoreOptions options;
  options.path = dir_.path();
  options.read_only = true;
  auto ro = Store::Open(options);
  ASSERT_TRUE(ro.ok()) << ro.status().ToString();
  EXPECT_TRUE((*ro)->VerifySnapshot("a", 1).ok());
  EXPECT_EQ((*ro)->NewWriter("a").status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ((*ro)->CollectGarbage().status().code(), StatusCode::kFailedPrecondition);
  options.path = dir_.path() + "/absent";
  EXPECT_EQ(Store::Open(options).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace phos::store
