// The object store's client against s3rver (an S3 server in Node.js, which checks SigV4
// signatures) on loopback: buckets, objects put, got, listed and deleted, a refused signature.
// s3rver comes from scripts/setup.sh (npm); without it these tests skip, saying why.
#include <string>

#include <gtest/gtest.h>

#include "../testing/s3rver.h"
#include "phos/objstore/s3.h"
#include "phos/store/remote_chunks.h"

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

}  // namespace
}  // namespace phos::objstore
