// The object store's client against s3rver (an S3 server in Node.js, which checks SigV4
// signatures) on loopback: buckets, objects put, got, listed and deleted, a refused signature.
// s3rver comes from scripts/setup.sh (npm); without it these tests skip, saying why.
#include <string>

#include <gtest/gtest.h>

#include "../testing/s3rver.h"
#include "phos/objstore/s3.h"
#include "../store/store_test_util.h"
#include "phos/store/remote_chunks.h"
#include "phos/store/snapshot_uploader.h"
#include "phos/store/store.h"

namespace phos::objstore {
namespace {

class S3Test : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = s3rver_.Start("phos");
    if (why.find("not installed") != std::string::npos) GTEST_SKIP() << why;
    ASSERT_EQ(why, "");
  }
  objstore::S3Options Options(Credentials credentials = testing::S3rver::Account()) const {
    return s3rver_.Options("phos", std::move(credentials));
  }

  testing::S3rver s3rver_;
};

TEST_F(S3Test, ObjectsArePutGotListedAndDeleted) {
  S3Client s3(Options());
  EXPECT_TRUE(s3.CreateBucket().ok()) << "a bucket of ours that exists is no error";
  std::string bytes(300000, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>((i * 7919) & 0xff);
  ASSERT_TRUE(s3.Put("chunks/00ff", bytes).ok());
  ASSERT_TRUE(s3.Put("chunks/0a01", "small").ok());
  ASSERT_TRUE(s3.Put("manifests/mlp@2/1", "manifest").ok());
  Result<std::string> got = s3.Get("chunks/00ff");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, bytes);
  EXPECT_EQ(*s3.Get("manifests/mlp@2/1"), "manifest");
  Result<bool> there = s3.Exists("chunks/0a01");
  ASSERT_TRUE(there.ok()) << there.status().ToString();
  EXPECT_TRUE(*there);
  there = s3.Exists("chunks/ffff");
  ASSERT_TRUE(there.ok()) << there.status().ToString();
  EXPECT_FALSE(*there);
  EXPECT_EQ(s3.Get("chunks/ffff").status().code(), StatusCode::kNotFound);
  Result<std::vector<std::string>> listed = s3.List("chunks/");
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  EXPECT_EQ(*listed, (std::vector<std::string>{"chunks/00ff", "chunks/0a01"}));
  EXPECT_EQ(*s3.List("manifests/mlp@2/"), (std::vector<std::string>{"manifests/mlp@2/1"}));
  ASSERT_TRUE(s3.Delete("chunks/0a01").ok());
  EXPECT_TRUE(s3.Delete("chunks/0a01").ok()) << "deleting what is not there is no error";
  EXPECT_EQ(*s3.List("chunks/"), (std::vector<std::string>{"chunks/00ff"}));
}

// s3rver knows one account (it checks no signature: sigv4_test.cc holds the signing to the
// published vectors): an unknown key id is refused, and the refusal says so.
TEST_F(S3Test, AnUnknownKeyIsRefused) {
  S3Client wrong(Options(Credentials{"NOBODY", "not-the-secret", ""}));
  Status put = wrong.Put("chunks/00", "x");
  EXPECT_EQ(put.code(), StatusCode::kFailedPrecondition) << put.ToString();
  EXPECT_NE(put.message().find("InvalidAccessKeyId"), std::string::npos) << put.ToString();
  Result<bool> there = S3Client(Options()).Exists("chunks/00");
  ASSERT_TRUE(there.ok()) << there.status().ToString();
  EXPECT_FALSE(*there);
}

// Chunks in the bucket are checked against their names: a corrupted or truncated object is
// fetched again, then refused naming the chunk; the bytes never reach the caller.
TEST_F(S3Test, ACorruptedChunkInTheBucketIsDetectedByItsHash) {
  store::RemoteChunks chunks{S3Client(Options())};
  const std::string bytes = "the weights of a layer, or any other chunk of a snapshot";
  const store::ChunkRef ref{store::ChunkId::Of(bytes.data(), bytes.size()), static_cast<uint32_t>(bytes.size())};
  ASSERT_TRUE(chunks.Put(ref, bytes).ok());
  EXPECT_EQ(chunks.Put(ref, "other bytes").code(), StatusCode::kInvalidArgument);
  std::string read(bytes.size(), '\0');
  ASSERT_TRUE(chunks.ReadChunk(ref, read.data()).ok());
  EXPECT_EQ(read, bytes);
  EXPECT_EQ(chunks.mismatches(), 0u);

  // The object replaced in the bucket behind phos's back: same size, other bytes; then cut short.
  S3Client s3(Options());
  std::string flipped = bytes;
  flipped[7] ^= 0x20;
  for (const std::string& corrupt : {flipped, bytes.substr(0, 10)}) {
    ASSERT_TRUE(s3.Put(store::RemoteChunks::Key(ref.id), corrupt).ok());
    std::string into(bytes.size(), 'x');
    const uint64_t before = chunks.mismatches();
    Status s = chunks.ReadChunk(ref, into.data());
    EXPECT_EQ(s.code(), StatusCode::kCorruption) << s.ToString();
    EXPECT_NE(s.message().find(ref.id.ToHex()), std::string::npos) << s.ToString();
    EXPECT_EQ(chunks.mismatches(), before + 2) << "fetched once more before it was refused";
    EXPECT_EQ(into, std::string(bytes.size(), 'x')) << "corrupted bytes reached the caller";
  }
  // A chunk the bucket does not hold.
  const std::string absent = "absent";
  std::string into(absent.size(), '\0');
  EXPECT_EQ(chunks.ReadChunk({store::ChunkId::Of(absent.data(), absent.size()), 6}, into.data()).code(),
            StatusCode::kNotFound);
}

// One store's snapshot uploaded and imported into another, as a second node would: the same
// buffers there, byte for byte; a corrupted chunk in the bucket fails the import with nothing
// committed.
TEST_F(S3Test, ASnapshotUploadedByOneStoreIsImportedByAnother) {
  auto open = [](const std::string& path) {
    auto store = store::Store::Open(store::StoreOptions{.path = path, .chunk_bytes = 64 << 10});
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    return std::move(store).value();
  };
  store::testing::TempDir dir_a, dir_b, dir_c;
  std::unique_ptr<store::Store> a = open(dir_a.path());
  const std::vector<std::vector<char>> buffers = {store::testing::Bytes(300 << 10, 1), store::testing::Bytes(70 << 10, 2)};
  auto writer = a->NewWriter("fn");
  ASSERT_TRUE(writer.ok());
  store::testing::AddBuffers(**writer, buffers);
  Result<uint64_t> version = a->Commit(std::move(*writer));
  ASSERT_TRUE(version.ok()) << version.status().ToString();
  std::string key;
  {
    store::SnapshotUploader uploader(a.get(), S3Client(Options()), "node-a");
    uploader.Enqueue("fn", *version, [&](Result<std::string> uploaded) {
      ASSERT_TRUE(uploaded.ok()) << uploaded.status().ToString();
      key = *uploaded;
    });
    // A version the store does not hold is said to have failed, to its caller and in the stats.
    Status missing;
    uploader.Enqueue("fn", *version + 1, [&](Result<std::string> uploaded) { missing = uploaded.status(); });
    uploader.Drain();
    EXPECT_EQ(uploader.stats().snapshots, 1u);
    EXPECT_EQ(uploader.stats().failures, 1u);
    EXPECT_EQ(missing.code(), StatusCode::kNotFound) << missing.ToString();
  }
  EXPECT_EQ(key, store::SnapshotUploader::ManifestKey("fn", "node-a", *version));
  S3Client bucket(Options());
  std::unique_ptr<store::Store> b = open(dir_b.path());
  // Imported under another name, as a node keys the version it adopts.
  Result<store::ImportStats> imported = store::ImportFromBucket(*b, bucket, key, "fn@2", {.parallel = 3});
  ASSERT_TRUE(imported.ok()) << imported.status().ToString();
  EXPECT_EQ(imported->fetched_chunks, imported->chunks);
  EXPECT_EQ(imported->fetched_bytes, (300u << 10) + (70u << 10));
  Result<store::Manifest> there = b->LoadManifest("fn@2", imported->version);
  ASSERT_TRUE(there.ok());
  ASSERT_EQ(there->buffers.size(), buffers.size());
  for (size_t i = 0; i < buffers.size(); ++i) {
    std::vector<char> read(buffers[i].size());
    ASSERT_TRUE(b->ReadBuffer(*there, static_cast<int>(i), read.data()).ok());
    EXPECT_EQ(read, buffers[i]) << "buffer " << i;
  }
  EXPECT_EQ(store::ImportFromBucket(*b, bucket, "manifests/fn/node-a-99", "fn").status().code(), StatusCode::kNotFound);
  // Imported again: nothing fetched, the store holds every chunk.
  Result<store::ImportStats> again = store::ImportFromBucket(*b, bucket, key, "fn@2");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->fetched_chunks, 0u);

  // A chunk object replaced behind phos's back: the import of a store that lacks it fails whole.
  const store::ChunkRef first = there->buffers[0].chunks[0];
  ASSERT_TRUE(bucket.Put(store::RemoteChunks::Key(first.id), std::string(first.size, 'x')).ok());
  std::unique_ptr<store::Store> c = open(dir_c.path());
  Result<store::ImportStats> refused = store::ImportFromBucket(*c, bucket, key, "fn");
  EXPECT_EQ(refused.status().code(), StatusCode::kCorruption) << refused.status().ToString();
  Result<std::vector<uint64_t>> versions = c->ListVersions("fn");
  ASSERT_TRUE(versions.ok());
  EXPECT_TRUE(versions->empty()) << "a version was committed from a corrupted chunk";
}

}  // namespace
}  // namespace phos::objstore
