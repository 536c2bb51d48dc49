// Store::MissingChunks, PutChunk and CommitImported: a snapshot committed in one store is carried
// into another (as a migration between two daemons does, sending the manifest and only the chunks
// the receiver lacks), reads back the same there and is refcounted like the receiver's own; bad
// chunks and manifests that reference chunks not held are refused with nothing committed.
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "phos/store/aligned_buffer.h"
#include "phos/store/store.h"
#include "store_test_util.h"

namespace phos::store {
namespace {

using testing::AddBuffers;
using testing::Bytes;
using testing::TempDir;

constexpr uint32_t kChunk = 64 << 10;

std::unique_ptr<Store> OpenStore(const std::string& path, bool compress = false, bool read_only = false) {
  StoreOptions options;
  options.path = path;
  options.chunk_bytes = kChunk;
  options.compress = compress;
  options.read_only = read_only;
  auto store = Store::Open(options);
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  return store.ok() ? std::move(*store) : nullptr;
}

// Commits one buffer per entry of `buffers`, and `image` as a module when not empty.
uint64_t Commit(Store& store, const std::string& function, const std::vector<std::vector<char>>& buffers,
                const std::vector<char>& image = {}) {
  auto w = store.NewWriter(function);
  EXPECT_TRUE(w.ok()) << w.status().ToString();
  AddBuffers(**w, buffers);
  if (!image.empty()) {
    Module meta;
    meta.kind = "simgpu";
    meta.globals.push_back({"counter", std::string(8, '\x2a')});
    EXPECT_TRUE((*w)->AddModule(meta, image.data(), image.size()).ok());
  }
  (*w)->manifest().device_profile = "a100-pcie4";
  (*w)->manifest().next_handle = 77;
  auto v = store.Commit(std::move(*w));
  EXPECT_TRUE(v.ok()) << v.status().ToString();
  return v.ok() ? *v : 0;
}

// Every chunk id `manifest` references, buffers' first, in order and with repeats.
std::vector<ChunkId> ChunkIds(const Manifest& manifest) {
  std::vector<ChunkId> ids;
  for (const Buffer& b : manifest.buffers)
    for (const ChunkRef& c : b.chunks) ids.push_back(c.id);
  for (const Module& m : manifest.modules)
    for (const ChunkRef& c : m.chunks) ids.push_back(c.id);
  return ids;
}

ChunkRef RefOf(const Manifest& manifest, const ChunkId& id) {
  for (const Buffer& b : manifest.buffers)
    for (const ChunkRef& c : b.chunks)
      if (c.id == id) return c;
  for (const Module& m : manifest.modules)
    for (const ChunkRef& c : m.chunks)
      if (c.id == id) return c;
  ADD_FAILURE() << "chunk " << id.ToHex() << " is not in the manifest";
  return {};
}

// The bytes of chunk `ref`, read from `store`.
std::string ChunkBytes(Store& store, const ChunkRef& ref) {
  std::string bytes(ref.size, '\0');
  Status s = store.ReadChunk(ref, bytes.data());
  EXPECT_TRUE(s.ok()) << s.ToString();
  return bytes;
}

class StoreImportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    source_ = OpenStore(source_dir_.path());
    target_ = OpenStore(target_dir_.path());
    ASSERT_TRUE(source_ && target_);
    // The source's snapshot: a buffer of 3 chunks and a partial one, one the target holds too
    // (2 chunks), a buffer of one repeated chunk, a small one, and a module of 2 chunks.
    buffers_ = {Bytes(3 * kChunk + 100, 1), shared_, std::vector<char>(2 * kChunk, 0), Bytes(10, 3)};
    image_ = Bytes(kChunk + 500, 4);
    ASSERT_EQ(Commit(*source_, "mlp", buffers_, image_), 1u);
    auto m = source_->LoadManifest("mlp", 1);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    manifest_ = *m;
    // The target's own snapshot shares `shared_`.
    ASSERT_EQ(Commit(*target_, "own", {shared_, own_}), 1u);
  }

  // Puts every chunk of the source's snapshot the target lacks; returns them.
  std::vector<ChunkId> SendMissing() {
    auto missing = target_->MissingChunks(ChunkIds(manifest_));
    EXPECT_TRUE(missing.ok()) << missing.status().ToString();
    if (!missing.ok()) return {};
    for (const ChunkId& id : *missing) {
      Status s = target_->PutChunk(id, ChunkBytes(*source_, RefOf(manifest_, id)));
      EXPECT_TRUE(s.ok()) << s.ToString();
    }
    return *missing;
  }
  void ExpectNothingImported() {
    EXPECT_EQ(*target_->ListFunctions(), std::vector<std::string>{"own"});
    EXPECT_TRUE(target_->ListVersions("mlp")->empty());
    EXPECT_EQ(target_->Stats()->live_chunks, 3u);
    EXPECT_TRUE(target_->CheckConsistency().ok());
  }

  TempDir source_dir_, target_dir_;
  std::unique_ptr<Store> source_, target_;
  std::vector<char> shared_ = Bytes(2 * kChunk, 2);
  std::vector<char> own_ = Bytes(kChunk, 5);
  std::vector<std::vector<char>> buffers_;
  std::vector<char> image_;
  Manifest manifest_;
};

TEST_F(StoreImportTest, SnapshotImportedReadsBackAndIsRefcountedLikeTheTargetsOwn) {
  // Only what the target lacks is listed, in manifest order, each once: buffer 0's 4 chunks, the
  // zero chunk, the small one and the module's 2; not the 2 shared ones.
  std::vector<ChunkId> ids = ChunkIds(manifest_);
  ASSERT_EQ(ids.size(), 11u);
  std::vector<ChunkId> want = {ids[0], ids[1], ids[2], ids[3], ids[6], ids[8], ids[9], ids[10]};
  auto missing = target_->MissingChunks(ids);
  ASSERT_TRUE(missing.ok()) << missing.status().ToString();
  EXPECT_EQ(*missing, want);
  EXPECT_EQ(SendMissing(), want);
  EXPECT_TRUE(target_->MissingChunks(ids)->empty());

  Manifest sent = manifest_;
  sent.cpu_state = {"criu", "/var/lib/phos/criu/mlp-1"};
  sent.version = 9;  // replaced, as the function is
  auto version = target_->CommitImported("mlp-moved", sent);
  ASSERT_TRUE(version.ok()) << version.status().ToString();
  EXPECT_EQ(*version, 1u);
  EXPECT_EQ(*target_->ListVersions("mlp-moved"), std::vector<uint64_t>{1});
  auto imported = target_->LoadManifest("mlp-moved", 1);
  ASSERT_TRUE(imported.ok()) << imported.status().ToString();
  Manifest expected = sent;
  expected.function = "mlp-moved";
  expected.version = 1;
  EXPECT_EQ(*imported, expected);  // everything else as sent: chunk_bytes, created_unix_ms, globals, …
  for (size_t i = 0; i < buffers_.size(); ++i) {
    auto dst = AlignedBuffer::Allocate(buffers_[i].size());
    ASSERT_TRUE(dst.ok());
    Status s = target_->ReadBuffer(*imported, static_cast<int>(i), dst->data());
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(std::memcmp(dst->data(), buffers_[i].data(), buffers_[i].size()), 0) << "buffer " << i;
  }
  EXPECT_TRUE(target_->VerifySnapshot("mlp-moved", 1).ok());
  EXPECT_TRUE(target_->CheckConsistency().ok());
  EXPECT_EQ(target_->Stats()->live_chunks, 3u + want.size());

  // Importing the same snapshot again needs nothing sent and makes version 2.
  EXPECT_TRUE(target_->MissingChunks(ids)->empty());
  EXPECT_EQ(*target_->CommitImported("mlp-moved", manifest_), 2u);
  ASSERT_TRUE(target_->DeleteVersion("mlp-moved", 2).ok());
  auto gc = target_->CollectGarbage();
  ASSERT_TRUE(gc.ok()) << gc.status().ToString();
  EXPECT_EQ(gc->chunks_freed, 0u);

  // Deleting the import frees exactly the chunks it brought; the shared ones stay with "own".
  ASSERT_TRUE(target_->DeleteVersion("mlp-moved", 1).ok());
  gc = target_->CollectGarbage();
  ASSERT_TRUE(gc.ok()) << gc.status().ToString();
  EXPECT_EQ(gc->chunks_freed, want.size());
  EXPECT_EQ(gc->segments_deleted, 1u);  // the segment the chunks were put in
  EXPECT_EQ(*target_->MissingChunks(ids), want);
  EXPECT_TRUE(target_->VerifySnapshot("own", 1).ok());
  EXPECT_TRUE(target_->CheckConsistency().ok());
  auto stats = target_->Stats();
  EXPECT_EQ(stats->chunks, 3u);
  EXPECT_EQ(stats->segment_files, 1u);
}

TEST_F(StoreImportTest, ImportSurvivesReopenAndOldestImportFallsToRetention) {
  SendMissing();
  ASSERT_EQ(*target_->CommitImported("mlp", manifest_), 1u);
  target_.reset();
  StoreOptions options;
  options.path = target_dir_.path();
  options.chunk_bytes = kChunk;
  options.keep_versions = 1;
  target_ = std::move(Store::Open(options).value());
  EXPECT_TRUE(target_->VerifySnapshot("mlp", 1).ok());
  // Retention is part of the import's publish, as of a commit's.
  ASSERT_EQ(*target_->CommitImported("mlp", manifest_), 2u);
  EXPECT_EQ(*target_->ListVersions("mlp"), std::vector<uint64_t>{2});
  EXPECT_TRUE(target_->CheckConsistency().ok());
  EXPECT_TRUE(target_->VerifySnapshot("mlp", 2).ok());
}

TEST_F(StoreImportTest, ChunkNotMatchingItsIdIsRefused) {
  ChunkId id = ChunkIds(manifest_)[0];
  std::string bytes = ChunkBytes(*source_, RefOf(manifest_, id));
  bytes[17] ^= 1;
  Status s = target_->PutChunk(id, bytes);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find(id.ToHex()), std::string::npos) << s.ToString();
  EXPECT_EQ(*target_->MissingChunks({id}), std::vector<ChunkId>{id});
  EXPECT_EQ(target_->Stats()->chunks, 3u);
  ExpectNothingImported();
}

TEST_F(StoreImportTest, EmptyChunkIsRefused) {
  ChunkId id = ChunkId::Of("", 0);
  EXPECT_EQ(target_->PutChunk(id, "").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(*target_->MissingChunks({id}), std::vector<ChunkId>{id});
  EXPECT_EQ(target_->Stats()->chunks, 3u);
  ExpectNothingImported();
}

TEST_F(StoreImportTest, ChunkLargerThanTheChunkSizeIsRefused) {
  std::vector<char> big = Bytes(kChunk + 1, 6);
  ChunkId id = ChunkId::Of(big.data(), big.size());
  Status s = target_->PutChunk(id, std::string_view(big.data(), big.size()));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_EQ(*target_->MissingChunks({id}), std::vector<ChunkId>{id});
  EXPECT_EQ(target_->Stats()->chunks, 3u);
  ExpectNothingImported();
}

TEST_F(StoreImportTest, ChunkHeldAlreadyIsNotWrittenAgain) {
  ChunkId id = ChunkIds(manifest_)[4];  // one of the shared chunks
  auto before = target_->Stats();
  EXPECT_TRUE(target_->PutChunk(id, ChunkBytes(*source_, RefOf(manifest_, id))).ok());
  auto after = target_->Stats();
  EXPECT_EQ(after->segment_bytes, before->segment_bytes);
  EXPECT_EQ(after->chunks, before->chunks);
  // Nor is a chunk put twice.
  ChunkId fresh = ChunkIds(manifest_)[0];
  std::string bytes = ChunkBytes(*source_, RefOf(manifest_, fresh));
  ASSERT_TRUE(target_->PutChunk(fresh, bytes).ok());
  before = target_->Stats();
  ASSERT_TRUE(target_->PutChunk(fresh, bytes).ok());
  EXPECT_EQ(target_->Stats()->segment_bytes, before->segment_bytes);
}

TEST_F(StoreImportTest, ManifestReferencingAChunkNotHeldCommitsNothing) {
  // All the target lacks is sent but buffer 0's second chunk and the module's last.
  std::vector<ChunkId> ids = ChunkIds(manifest_);
  std::vector<ChunkId> missing = *target_->MissingChunks(ids);
  for (const ChunkId& id : missing) {
    if (id == ids[1] || id == ids[10]) continue;
    ASSERT_TRUE(target_->PutChunk(id, ChunkBytes(*source_, RefOf(manifest_, id))).ok());
  }
  auto version = target_->CommitImported("mlp", manifest_);
  EXPECT_EQ(version.status().code(), StatusCode::kNotFound) << version.status().ToString();
  EXPECT_NE(version.status().message().find("2 of its 10 chunks are not held; the first, chunk " + ids[1].ToHex() +
                                            " of buffer 0, is not in the store"),
            std::string::npos)
      << version.status().ToString();
  ExpectNothingImported();  // the chunks put are held with refcount 0, which CheckConsistency checks
  // The version counter did not move either: once complete, the import is version 1.
  EXPECT_EQ(*target_->MissingChunks(ids), (std::vector<ChunkId>{ids[1], ids[10]}));
  SendMissing();
  EXPECT_EQ(*target_->CommitImported("mlp", manifest_), 1u);
}

TEST_F(StoreImportTest, ManifestSizeDifferingFromTheChunkHeldCommitsNothing) {
  SendMissing();
  // Buffer 3 is one 10-byte chunk; the manifest claims 11 bytes of it (and of the buffer, so
  // that the chunks still add up).
  Manifest lying = manifest_;
  lying.buffers[3].chunks[0].size = 11;
  lying.buffers[3].size = 11;
  auto version = target_->CommitImported("mlp", lying);
  EXPECT_EQ(version.status().code(), StatusCode::kNotFound) << version.status().ToString();
  EXPECT_NE(version.status().message().find("1 of its 10 chunks are not held; the first, chunk " +
                                            lying.buffers[3].chunks[0].id.ToHex() +
                                            " of buffer 3, is held as 10 bytes, listed as 11"),
            std::string::npos)
      << version.status().ToString();
  // Chunks that do not add up to their buffer's size are refused before any lookup.
  Manifest short_buffer = manifest_;
  short_buffer.buffers[0].size += 1;
  EXPECT_EQ(target_->CommitImported("mlp", short_buffer).status().code(), StatusCode::kInvalidArgument);
  Manifest short_module = manifest_;
  short_module.modules[0].chunks.pop_back();
  EXPECT_EQ(target_->CommitImported("mlp", short_module).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(target_->CommitImported("a/b", manifest_).status().code(), StatusCode::kInvalidArgument);
  ExpectNothingImported();
}

TEST_F(StoreImportTest, ChunkPutButNeverCommittedIsDroppedByGc) {
  ChunkId id = ChunkIds(manifest_)[0];
  ASSERT_TRUE(target_->PutChunk(id, ChunkBytes(*source_, RefOf(manifest_, id))).ok());
  EXPECT_TRUE(target_->MissingChunks({id})->empty());
  EXPECT_EQ(target_->Stats()->chunks, 4u);
  EXPECT_EQ(target_->Stats()->live_chunks, 3u);  // held, referenced by no snapshot
  EXPECT_TRUE(target_->CheckConsistency().ok());
  auto gc = target_->CollectGarbage();
  ASSERT_TRUE(gc.ok()) << gc.status().ToString();
  EXPECT_EQ(gc->chunks_freed, 1u);
  EXPECT_EQ(gc->segments_deleted, 1u);
  EXPECT_EQ(gc->bytes_reclaimed, kChunk);
  EXPECT_EQ(*target_->MissingChunks({id}), std::vector<ChunkId>{id});
  EXPECT_EQ(target_->Stats()->segment_files, 1u);
  EXPECT_TRUE(target_->CheckConsistency().ok());
  // Putting it again after the collection works: a new segment is started.
  ASSERT_TRUE(target_->PutChunk(id, ChunkBytes(*source_, RefOf(manifest_, id))).ok());
  EXPECT_TRUE(target_->MissingChunks({id})->empty());
  EXPECT_EQ(target_->Stats()->segment_files, 2u);
}

TEST_F(StoreImportTest, WriterDedupsAgainstAPutChunkAndKeepsItThroughGc) {
  ChunkId id = ChunkIds(manifest_)[8];  // buffer 3: 10 bytes
  ASSERT_TRUE(target_->PutChunk(id, std::string_view(buffers_[3].data(), buffers_[3].size())).ok());
  auto w = target_->NewWriter("late");
  Buffer meta;
  meta.size = buffers_[3].size();
  ASSERT_TRUE((*w)->AddBuffer(meta, buffers_[3].data()).ok());  // pins the put chunk
  auto gc = target_->CollectGarbage();
  ASSERT_TRUE(gc.ok());
  EXPECT_EQ(gc->chunks_freed, 0u);
  ASSERT_TRUE(target_->Commit(std::move(*w)).ok());
  EXPECT_TRUE(target_->VerifySnapshot("late", 1).ok());
  EXPECT_TRUE(target_->CheckConsistency().ok());
}

TEST_F(StoreImportTest, ConcurrentPutsAndACommitOfTheSameBytesIndexEachChunkOnce) {
  // Several importers put the same chunks while a writer commits the same bytes: each chunk ends
  // with one index entry, and the commit's refcount is not overwritten by a late put.
  std::vector<ChunkId> ids = *target_->MissingChunks(ChunkIds(manifest_));
  std::vector<std::string> bytes;
  for (const ChunkId& id : ids) bytes.push_back(ChunkBytes(*source_, RefOf(manifest_, id)));
  std::vector<std::thread> threads;
  std::vector<Status> results(4);
  for (size_t t = 0; t < results.size(); ++t) {
    threads.emplace_back([&, t] {
      for (size_t i = 0; i < ids.size() && results[t].ok(); ++i) {
        size_t at = (i + t * 3) % ids.size();
        results[t] = target_->PutChunk(ids[at], bytes[at]);
      }
    });
  }
  EXPECT_EQ(Commit(*target_, "same", buffers_, image_), 1u);
  for (auto& t : threads) t.join();
  for (const Status& s : results) EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(target_->Stats()->chunks, 3u + ids.size());
  EXPECT_TRUE(target_->CheckConsistency().ok());
  ASSERT_EQ(*target_->CommitImported("mlp", manifest_), 1u);
  EXPECT_TRUE(target_->CheckConsistency().ok());
  EXPECT_TRUE(target_->VerifySnapshot("mlp", 1).ok());
  EXPECT_TRUE(target_->VerifySnapshot("same", 1).ok());
}

TEST(StoreImportCompressionTest, PutChunkStoresBytesAsAWriterWould) {
  // Compressible bytes and incompressible ones, committed by a writer in one store and imported
  // into another: both stores hold them in the same stored sizes.
  std::vector<char> text(2 * kChunk);
  for (size_t i = 0; i < text.size(); ++i) text[i] = "weights "[i % 8] + static_cast<char>(i / 8192 % 3);
  std::vector<char> random = Bytes(kChunk, 7);
  TempDir written_dir, imported_dir;
  auto written = OpenStore(written_dir.path(), /*compress=*/true);
  auto imported = OpenStore(imported_dir.path(), /*compress=*/true);
  ASSERT_TRUE(written && imported);
  ASSERT_EQ(Commit(*written, "c", {text, random}), 1u);
  Manifest manifest = *written->LoadManifest("c", 1);
  std::vector<ChunkId> missing = *imported->MissingChunks(ChunkIds(manifest));
  for (const ChunkId& id : missing) {
    ASSERT_TRUE(imported->PutChunk(id, ChunkBytes(*written, RefOf(manifest, id))).ok());
  }
  ASSERT_EQ(*imported->CommitImported("c", manifest), 1u);
  auto a = written->Stats();
  auto b = imported->Stats();
  EXPECT_LT(b->stored_bytes, text.size() / 4 + random.size());  // the text chunks compressed
  EXPECT_EQ(b->stored_bytes, a->stored_bytes);
  EXPECT_EQ(b->unique_bytes, a->unique_bytes);
  EXPECT_TRUE(imported->VerifySnapshot("c", 1).ok());
}

TEST(StoreImportReadOnlyTest, ReadOnlyStoreRefusesImportButListsMissingChunks) {
  TempDir dir;
  { ASSERT_TRUE(OpenStore(dir.path())); }
  auto store = OpenStore(dir.path(), /*compress=*/false, /*read_only=*/true);
  ASSERT_TRUE(store);
  std::vector<char> data = Bytes(100, 8);
  ChunkId id = ChunkId::Of(data.data(), data.size());
  EXPECT_EQ(*store->MissingChunks({id, id}), std::vector<ChunkId>{id});
  EXPECT_EQ(store->PutChunk(id, std::string_view(data.data(), data.size())).code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(store->CommitImported("f", Manifest()).status().code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace phos::store
